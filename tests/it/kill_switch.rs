//! The kill switch: who may flip it (a Cedar decision), what callers see while it is on, that
//! every attempt is audited, and that it survives a restart and can be forced on by the config
//! or the environment.

use axum::http::StatusCode;
use serde_json::{Value, json};

use toolgate::api::router;
use toolgate::audit::Query;

use crate::helpers::*;
use crate::process::{exchange, start_with, start_with_env};

const ALICE: &str = "demo-alice-token"; // a director
const BOB: &str = "demo-bob-token"; // an approver, not a director
const READ: &str = r#"{"tool":"read_file","args":{"path":"src/main.rs"}}"#;
const SWITCH: &str = "/v1/admin/kill-switch";

#[tokio::test]
async fn directors_stop_every_call_and_everything_is_recorded() {
    let state = shipped_state();
    let app = router(state.clone());
    let (s, v) = send(&app, "GET", SWITCH, Some(DEV), None).await;
    assert_eq!((s, v["on"].as_bool()), (StatusCode::OK, Some(false)));

    // Agents cannot; a human the policies do not allow cannot.
    let on = r#"{"on": true, "reason": "incident 42"}"#;
    let (s, _) = send(&app, "POST", SWITCH, Some(DEV), Some(on)).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, v) = send(&app, "POST", SWITCH, Some(BOB), Some(on)).await;
    assert_eq!(
        (s, v["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("not_eligible")),
        "{v}"
    );
    let (s, v) = send(
        &app,
        "POST",
        SWITCH,
        Some(ALICE),
        Some(r#"{"on": true, "extra": 1}"#),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, _) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(READ)).await;
    assert_eq!(s, StatusCode::OK);

    let (s, v) = send(&app, "POST", SWITCH, Some(ALICE), Some(on)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["on"], true);
    assert_eq!(v["set"]["by"], r#"Human::"alice""#);
    assert_eq!(v["set"]["reason"], "incident 42");
    for call in [READ, r#"{"tool":"echo","args":{"message":"x"}}"#] {
        let (s, d) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(call)).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(
            (
                d["decision"].as_str(),
                d["stage"].as_str(),
                d["errors"][0]["code"].as_str()
            ),
            (Some("deny"), Some("kill_switch"), Some("kill_switch")),
            "{d}"
        );
    }
    let (_, r) = send(&app, "GET", "/readyz", None, None).await;
    assert_eq!(r["kill_switch"], true);

    let (s, v) = send(&app, "POST", SWITCH, Some(ALICE), Some(r#"{"on": false}"#)).await;
    assert_eq!((s, v["on"].as_bool()), (StatusCode::OK, Some(false)));
    let (_, d) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(READ)).await;
    assert_eq!(d["decision"], "allow");

    let log = |decision: &str| {
        state
            .audit
            .store()
            .query(&Query {
                decision: Some(decision.into()),
                limit: 10,
                ..Query::default()
            })
            .unwrap()
    };
    assert_eq!(log("kill_switch_refused").len(), 1);
    let on = log("kill_switch_on");
    assert_eq!(on.len(), 1);
    assert_eq!(on[0].entry.principal.as_deref(), Some(r#"Human::"alice""#));
    assert_eq!(on[0].entry.reasons, ["directors-flip-kill-switch"]);
    assert_eq!(log("kill_switch_off").len(), 1);
    let stopped = recorded_at(&state.audit, "kill_switch");
    assert_eq!(stopped.len(), 2);
}

fn switch(port: u16, token: &str, on: bool) -> (u16, Value) {
    exchange(port, "POST", SWITCH, Some(token), Some(&json!({"on": on}))).unwrap()
}

fn decision(port: u16) -> String {
    let call: Value = serde_json::from_str(READ).unwrap();
    let (_, d) = exchange(port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
    format!(
        "{}/{}",
        d["decision"].as_str().unwrap(),
        d["stage"].as_str().unwrap()
    )
}

#[test]
fn the_switch_survives_a_crash_and_can_be_forced_on() {
    let set = TempSet::new();
    let server = start_with(&set, "");
    assert_eq!(switch(server.port, ALICE, true).0, 200);
    assert_eq!(decision(server.port), "deny/kill_switch");
    drop(server); // SIGKILL
    let server = start_with(&set, "");
    assert_eq!(
        decision(server.port),
        "deny/kill_switch",
        "lost across a restart"
    );
    assert_eq!(switch(server.port, ALICE, false).0, 200);
    assert_eq!(decision(server.port), "allow/policy");
    drop(server);

    // Forced by the environment: on, and the API cannot turn it off.
    let server = start_with_env(&set, "", &[("TOOLGATE_KILL_SWITCH", "1")]);
    assert_eq!(decision(server.port), "deny/kill_switch");
    let (s, v) = switch(server.port, ALICE, false);
    assert_eq!(
        (s, v["error"].as_str()),
        (409, Some("kill_switch_forced")),
        "{v}"
    );
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("TOOLGATE_KILL_SWITCH"),
        "{v}"
    );
    drop(server);
    // Forced by the config.
    let server = start_with(&set, "kill_switch = true\n");
    assert_eq!(decision(server.port), "deny/kill_switch");
    drop(server);
    // Back to the stored state (off).
    let server = start_with(&set, "");
    assert_eq!(decision(server.port), "allow/policy");
}
