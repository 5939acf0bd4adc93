//! What a first run with broken policy files tells an agent: not that its tool is unknown,
//! but that no policy set is loaded, and where an operator finds out why.

use serde_json::json;

use crate::helpers::*;
use crate::process::{exchange, start};

#[test]
fn with_no_policy_set_ever_loaded_a_call_is_told_so_not_that_its_tool_is_unknown() {
    let set = TempSet::new();
    set.append("policies/tiers.cedar", BROKEN_POLICY);
    // A fresh data directory: no last good set to fall back on.
    let server = start(&set);
    let (status, ready) = exchange(server.port, "GET", "/readyz", None, None).unwrap();
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["policy_origin"], "nothing", "{ready}");

    let call = json!({"tool": "echo", "args": {"message": "hi"}});
    let (status, answer) =
        exchange(server.port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["decision"], "deny", "{answer}");
    let error = &answer["errors"][0];
    assert_eq!(error["code"], "no_policy_set", "{answer}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("no policy set is loaded"), "{message}");
    assert!(!message.contains("echo"), "{message}");
    let suggestion = error["suggestion"].as_str().unwrap();
    assert!(suggestion.contains("toolgate validate"), "{suggestion}");
    assert!(suggestion.contains("/readyz"), "{suggestion}");
    // The readiness answer the suggestion points to names the failing file.
    assert!(
        ready["last_reload_error_at"]
            .as_str()
            .is_some_and(|at| at.contains("tiers.cedar")),
        "{ready}"
    );
}
