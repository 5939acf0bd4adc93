//! The gates through HTTP: each gate's default rules, JSON content with sensitive keys,
//! configured rules, audit records that never hold the content, and bad requests.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

async fn gate(app: &axum::Router, name: &str, content: Value) -> (StatusCode, Value) {
    let body = json!({ "content": content }).to_string();
    send(
        app,
        "POST",
        &format!("/v1/gates/{name}"),
        Some(DEV),
        Some(&body),
    )
    .await
}

#[tokio::test]
async fn every_gate_answers_with_its_default_rules() {
    let app = app();
    let text = format!("use {AWS} and mail ops@example.com");
    let expect = [
        (
            "input",
            "mask",
            "use <redacted:aws-access-key> and mail ops@example.com".to_owned(),
        ),
        (
            "context",
            "mask",
            "use <redacted:aws-access-key> and mail <redacted:email>".to_owned(),
        ),
        (
            "tool_call",
            "block",
            "use <redacted:aws-access-key> and mail <redacted:email>".to_owned(),
        ),
        (
            "output",
            "mask",
            "use <redacted:aws-access-key> and mail <redacted:email>".to_owned(),
        ),
    ];
    for (name, decision, content) in expect {
        let (s, v) = gate(&app, name, json!(text)).await;
        assert_eq!(s, StatusCode::OK, "{name}: {v}");
        assert_eq!(v["decision"], decision, "{name}: {v}");
        assert_eq!(v["content"], content, "{name}: {v}");
        assert_eq!(v["violations"][0]["kind"], "aws-access-key");
        assert_eq!(v["violations"][0]["span"], json!([4, 24]));
    }
    let (s, v) = gate(&app, "output", json!("nothing to see here")).await;
    assert_eq!((s, v["decision"].as_str()), (StatusCode::OK, Some("allow")));
    assert_eq!(v["violations"], json!([]));
}

#[tokio::test]
async fn json_content_keeps_its_structure_and_masks_sensitive_keys() {
    let app = app();
    let content = json!({
        "user": {"name": "Ann", "api_key": "anything at all", "phone": "+1 415-555-0142"},
        "rows": [{"card": "4111 1111 1111 1111"}, {"note": "fine"}],
        "n": 3
    });
    let (s, v) = gate(&app, "output", content).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["decision"], "mask");
    assert_eq!(
        v["content"],
        json!({
            "user": {"name": "Ann", "api_key": "<redacted:sensitive-key>", "phone": "<redacted:phone>"},
            "rows": [{"card": "<redacted:credit-card>"}, {"note": "fine"}],
            "n": 3
        })
    );
    let paths: Vec<&str> = v["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/user/api_key", "/user/phone", "/rows/0/card"]);
}

#[tokio::test]
async fn findings_are_audited_without_the_content_and_bad_requests_are_refused() {
    let state = shipped_state();
    let app = toolgate::api::router(state.clone());
    let (_, v) = gate(&app, "tool_call", json!(format!("key={AWS}"))).await;
    assert_eq!(v["decision"], "block");
    let (_, v) = gate(&app, "output", json!("plain")).await;
    assert_eq!(v["decision"], "allow");
    let recorded = recorded_at(&state.audit, "tool_call");
    assert_eq!(recorded.len(), 1);
    let entry = &recorded[0].entry;
    assert_eq!(entry.decision, "block");
    assert_eq!(entry.reasons, ["block:aws-access-key"]);
    let stored = serde_json::to_string(&recorded[0]).unwrap();
    assert!(!stored.contains(AWS), "{stored}");
    assert!(recorded_at(&state.audit, "output").is_empty());
    let (_, m) = send_text(&app, "/metrics").await;
    assert!(
        m.contains("toolgate_gate_decisions_total{gate=\"tool_call\",decision=\"block\"} 1"),
        "{m}"
    );

    // Unknown gates, bad bodies, no credential.
    for name in ["tools", "streams", "Input"] {
        let (s, v) = gate(&app, name, json!("x")).await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::NOT_FOUND, Some("unknown_gate"))
        );
    }
    let (s, v) = send(
        &app,
        "POST",
        "/v1/gates/input",
        Some(DEV),
        Some(r#"{"content": "x", "extra": 1}"#),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, _) = send(
        &app,
        "POST",
        "/v1/gates/input",
        None,
        Some(r#"{"content": "x"}"#),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}

#[test]
fn gate_rules_come_from_the_config_and_bad_names_stop_serve() {
    let set = TempSet::new();
    let server = crate::process::start_with(
        &set,
        "[gates.output]\nblock = [\"email\"]\nmask = []\nwarn = [\"secret\"]\n",
    );
    let body = json!({"content": format!("{AWS} a@b.io")});
    let v = crate::process::request(
        server.port,
        "POST",
        "/v1/gates/output",
        Some(DEV),
        Some(&body),
    )
    .unwrap();
    assert_eq!(v["decision"], "block", "{v}");
    assert_eq!(v["content"], format!("{AWS} <redacted:email>"));
    drop(server);

    let err = crate::process::serve_refuses(&set, "[gates.tool_call]\nblock = [\"secrets\"]\n");
    assert!(err.contains("`gates.tool_call` names `secrets`"), "{err}");
}
