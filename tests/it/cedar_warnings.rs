//! Regression (issue 20, item 10): a typo behind a `has` guard was only a Cedar warning, so
//! `toolgate validate` exited 0 and the server applied a deny rule that can never fire. Cedar's
//! validator warnings are load errors now (in `validate`, `serve` and at reload, as
//! `cedar validate --deny-warnings` in CI), and so is a role in `entities.json` that no policy
//! names.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::*;
use crate::process::{Server, request, start};

/// A forbid whose guard names `pth` (the argument is `path`): Cedar types `has pth` as
/// false, so the policy is impossible, which its validator reports as a warning only.
const TYPO: &str = "\n@id(\"no-secrets-txt\")\nforbid (principal, action == Action::\"read_file\", resource)\nwhen { context.args has pth && context.args.pth == \"secrets.txt\" };\n";

/// Appends [`TYPO`] to `elevated.cedar`; returns `elevated.cedar:LINE` of its `@id`.
fn add_typo(set: &TempSet) -> String {
    set.append("policies/elevated.cedar", TYPO);
    let text = std::fs::read_to_string(set.policies().join("elevated.cedar")).unwrap();
    let line = text
        .lines()
        .position(|l| l.contains("no-secrets-txt"))
        .unwrap()
        + 1;
    format!("elevated.cedar:{line}:")
}

fn validate(set: &TempSet) -> (i32, String) {
    let out = on(set, "validate").output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn validate_refuses_a_typo_behind_a_has_guard_with_file_and_line() {
    let set = TempSet::new();
    let at = add_typo(&set);
    let (code, err) = validate(&set);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.lines()
            .any(|l| l.contains(&at) && l.contains("policy is impossible")),
        "{err}"
    );
    assert!(err.contains("--deny-warnings"), "the help says why: {err}");

    // The official CLI agrees, where CI installs it.
    if let Some(out) = set.cedar_validate("elevated.cedar") {
        assert!(
            !out.status.success(),
            "cedar validate --deny-warnings passed it"
        );
    }
}

fn readyz(server: &Server) -> Value {
    request(server.port, "GET", "/readyz", None, None).unwrap()
}

fn read_secrets(server: &Server) -> String {
    let call = json!({"tool": "read_file", "args": {"path": "secrets.txt"}});
    let got = request(server.port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
    got["decision"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn serve_refuses_a_set_with_a_cedar_warning() {
    let set = TempSet::new();
    let at = add_typo(&set);
    let server = start(&set);
    let ready = readyz(&server);
    // Nothing was ever good here: nothing serves, every call is denied, not ready.
    assert_eq!(ready["ready"], false, "{ready}");
    assert!(
        ready["last_reload_error_at"]
            .as_str()
            .is_some_and(|l| l.contains(&at)),
        "{ready}"
    );
    assert_eq!(read_secrets(&server), "deny");
    drop(server);
    let log = std::fs::read_to_string(set.dir.path().join("serve.log")).unwrap();
    assert!(log.contains(&at), "{log}");
}

#[test]
fn a_reload_with_a_cedar_warning_keeps_the_last_good_set() {
    let set = TempSet::new();
    let server = start(&set);
    let good = readyz(&server)["revision"].clone();
    assert_eq!(read_secrets(&server), "allow");
    let at = add_typo(&set);
    let status = Command::new("kill")
        .args(["-HUP", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let start = Instant::now();
    let ready = loop {
        let ready = readyz(&server);
        if ready["degraded"] == true {
            break ready;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{ready}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!((&ready["ready"], &ready["revision"]), (&json!(true), &good));
    assert!(
        ready["last_reload_error_at"]
            .as_str()
            .is_some_and(|l| l.contains(&at)),
        "{ready}"
    );
    assert_eq!(read_secrets(&server), "allow", "the last good set decides");
}

/// Sets the parents of `id` in the set's `entities.json` and adds `extra` entities.
fn edit_entities(set: &TempSet, id: &str, parents: Value, extra: &[Value]) {
    let path = set.policies().join("entities.json");
    let mut all: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for e in &mut all {
        if e["uid"]["id"] == id {
            e["parents"] = parents.clone();
        }
    }
    all.extend(extra.iter().cloned());
    std::fs::write(&path, serde_json::to_string_pretty(&all).unwrap()).unwrap();
}

#[test]
fn a_role_in_entities_json_that_no_policy_names_is_an_error() {
    // A typo in a membership: dev-agent would silently lose the developer role.
    let set = TempSet::new();
    edit_entities(
        &set,
        "dev-agent",
        json!([{"type": "Role", "id": "devloper"}]),
        &[],
    );
    let (code, err) = validate(&set);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.lines().any(|l| l.contains("entities.json:")
            && l.contains("role `devloper`")
            && l.contains("Agent::\"dev-agent\"")),
        "{err}"
    );

    // A declared role no policy names grants nothing.
    let set = TempSet::new();
    edit_entities(
        &set,
        "dev-agent",
        json!([{"type": "Role", "id": "developer"}]),
        &[json!({"uid": {"type": "Role", "id": "oncall"}, "attrs": {}, "parents": []})],
    );
    let (code, err) = validate(&set);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.lines()
            .any(|l| l.contains("entities.json:") && l.contains("role `oncall`")),
        "{err}"
    );

    // Named by a policy (here a new one), the same role is known.
    set.append(
        "policies/roles.cedar",
        "\n@id(\"oncall-reads\")\npermit (principal in Role::\"oncall\", action in Action::\"read\", resource);\n",
    );
    let (code, err) = validate(&set);
    assert_eq!(code, 0, "{err}");
}
