//! The tool_call gate inside `/v1/authorize`: a secret in the arguments is a deny at stage
//! `gate` (after validation, before Cedar's answer counts); personal data is reported and
//! masked in what is stored; with `apply_mask` the call is decided and answered with the
//! masked arguments; audit records and approval previews are always redacted.

use axum::http::StatusCode;
use serde_json::json;
use toolgate::api::router;
use toolgate::redact::{Gate, GateRules, Gates, RedactConfig};

use crate::helpers::*;

#[tokio::test]
async fn a_secret_in_arguments_is_denied_at_the_gate_and_never_stored() {
    let state = shipped_state();
    let app = router(state.clone());
    let call = json!({"tool": "search_files", "args": {"regex": format!("key {AWS}")}});
    let (s, v) = decide(&app, DEV, &call).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        (v["decision"].as_str(), v["stage"].as_str()),
        (Some("deny"), Some("gate")),
        "{v}"
    );
    assert_eq!(v["errors"][0]["code"], "secret_in_arguments");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("aws-access-key at `/regex`")
    );
    assert_eq!(v["gate"]["decision"], "block");
    assert!(!v.to_string().contains(AWS));
    let rec = recorded_at(&state.audit, "gate");
    assert_eq!(rec.len(), 1);
    let stored = serde_json::to_string(&rec[0]).unwrap();
    assert!(!stored.contains(AWS), "{stored}");
    assert_eq!(
        rec[0].entry.args_preview.as_deref(),
        Some(r#"{"regex":"key <redacted:aws-access-key>"}"#)
    );
    assert!(
        rec[0]
            .entry
            .detail
            .as_deref()
            .unwrap()
            .contains("block:aws-access-key")
    );
    // Invalid arguments are refused at validation first, whatever they hold.
    let call = json!({"tool": "search_files", "args": {"regex": AWS, "bogus": 1}});
    let (_, v) = decide(&app, DEV, &call).await;
    assert_eq!(v["stage"], "validation");
    // Any secret kind, e.g. a password assignment.
    let call = json!({"tool": "search_files", "args": {"regex": "password=hunter22!"}});
    let (_, v) = decide(&app, DEV, &call).await;
    assert_eq!(
        (
            v["stage"].as_str(),
            v["gate"]["violations"][0]["kind"].as_str()
        ),
        (Some("gate"), Some("password-assignment")),
        "{v}"
    );
}

#[tokio::test]
async fn personal_data_is_reported_and_masked_in_records_only() {
    let state = shipped_state();
    let app = router(state.clone());
    let call = json!({"tool": "search_files", "args": {"regex": "mail ops@example.com"}});
    let (_, v) = decide(&app, DEV, &call).await;
    assert_eq!(
        (v["decision"].as_str(), v["stage"].as_str()),
        (Some("allow"), Some("policy")),
        "{v}"
    );
    assert_eq!(v["gate"]["decision"], "mask");
    assert_eq!(v["gate"]["violations"][0]["kind"], "email");
    assert_eq!(v["gate"]["violations"][0]["path"], "/regex");
    assert!(
        v.get("arguments").is_none(),
        "masking changes the call only with apply_mask"
    );
    let rec = recorded_at(&state.audit, "policy");
    let entry = &rec.last().unwrap().entry;
    assert_eq!(
        entry.args_preview.as_deref(),
        Some(r#"{"regex":"mail <redacted:email>"}"#)
    );
    // A clean call carries no gate report.
    let call = json!({"tool": "search_files", "args": {"regex": "fn main"}});
    let (_, v) = decide(&app, DEV, &call).await;
    assert!(v.get("gate").is_none(), "{v}");
}

#[tokio::test]
async fn apply_mask_decides_and_answers_with_the_masked_arguments() {
    let rules = GateRules {
        apply_mask: true,
        ..GateRules::default_for(Gate::ToolCall)
    };
    let gates = Gates::new(&RedactConfig::default(), vec![(Gate::ToolCall, rules)]).unwrap();
    let state = shipped_state().with_gates(gates);
    let app = router(state.clone());
    let call = json!({"tool": "search_files", "args": {"regex": "mail ops@example.com"}});
    let (_, v) = decide(&app, DEV, &call).await;
    assert_eq!(v["decision"], "allow", "{v}");
    assert_eq!(v["arguments"], json!({"regex": "mail <redacted:email>"}));
    // A pending call's approval preview is redacted too; the approval binds the masked call.
    let call = json!({"tool": "write_file", "args": {"path": "notes.txt", "content": "call 415-555-0142"}});
    let (_, v) = decide(&app, DEV, &call).await;
    assert_eq!(v["decision"], "pending_approval", "{v}");
    let id = v["approval_id"].as_str().unwrap();
    let (_, a) = send(
        &app,
        "GET",
        &format!("/v1/approvals/{id}"),
        Some(ALICE),
        None,
    )
    .await;
    let preview = a["args_preview"].as_str().unwrap();
    assert!(
        preview.contains("<redacted:phone>") && !preview.contains("0142"),
        "{a}"
    );
}

#[test]
fn apply_mask_belongs_to_the_tool_call_gate_only() {
    let set = TempSet::new();
    let err = crate::process::serve_refuses(&set, "[gates.output]\napply_mask = true\n");
    assert!(
        err.contains("`gates.output.apply_mask` is not a setting of this gate"),
        "{err}"
    );
}

#[tokio::test]
async fn keys_and_values_under_sensitive_names_are_screened() {
    let app = router(shipped_state());
    // A secret used as a member name is found and masked in the name.
    let (s, v) = send(
        &app,
        "POST",
        "/v1/gates/output",
        Some(DEV),
        Some(&json!({"content": {"sessions": {AWS: {"user": "ann"}}}}).to_string()),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        v["content"],
        json!({"sessions": {"<redacted:aws-access-key>": {"user": "ann"}}})
    );
    assert_eq!(v["violations"][0]["in_key"], true);
    // A flag under a sensitive name is not a secret.
    let (_, v) = send(
        &app,
        "POST",
        "/v1/gates/tool_call",
        Some(DEV),
        Some(&json!({"content": {"secret": true, "password": null}}).to_string()),
    )
    .await;
    assert_eq!(v["decision"], "allow", "{v}");
}

#[tokio::test]
async fn a_warned_sensitive_key_still_blocks_the_secret_inside() {
    let rules = GateRules {
        warn: vec!["sensitive-key".to_owned()],
        ..GateRules::default_for(Gate::ToolCall)
    };
    let gates = Gates::new(&RedactConfig::default(), vec![(Gate::ToolCall, rules)]).unwrap();
    let app = router(shipped_state().with_gates(gates));
    let (_, v) = send(
        &app,
        "POST",
        "/v1/gates/tool_call",
        Some(DEV),
        Some(&json!({"content": {"password": format!("key {AWS}")}}).to_string()),
    )
    .await;
    assert_eq!(v["decision"], "block", "{v}");
    assert_eq!(
        v["content"],
        json!({"password": "key <redacted:aws-access-key>"})
    );
}

/// One invisible character, a fullwidth form or a look-alike letter inside a key does not hide
/// it: detectors read the canonical text, and the mask covers the original characters.
#[tokio::test]
async fn an_obfuscated_secret_in_arguments_is_still_denied_and_masked_whole() {
    let state = shipped_state();
    let app = router(state.clone());
    let (head, tail) = AWS.split_at(8);
    let fullwidth: String = AWS
        .chars()
        .map(|c| char::from_u32(u32::from(c) + 0xFEE0).unwrap())
        .collect();
    for hidden in [
        format!("{head}\u{200B}{tail}"),
        format!("{head}\u{00AD}{tail}"),
        format!("{head}\u{2060}{tail}"),
        format!("{head}\u{E0020}{tail}"),
        fullwidth,
    ] {
        let call = json!({"tool": "search_files", "args": {"regex": format!("key {hidden}")}});
        let (s, v) = decide(&app, DEV, &call).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(
            (v["decision"].as_str(), v["stage"].as_str()),
            (Some("deny"), Some("gate")),
            "{hidden:?}: {v}"
        );
        assert_eq!(v["errors"][0]["code"], "secret_in_arguments", "{v}");
        // The output gate masks the whole key, the invisible character with it.
        let (_, o) = post(
            &app,
            "/v1/gates/output",
            DEV,
            &json!({"content": format!("the key is {hidden}.")}),
        )
        .await;
        assert_eq!(
            o["content"], "the key is <redacted:aws-access-key>.",
            "{hidden:?}: {o}"
        );
    }
    // A look-alike in a key's label: `pаssword` with a Cyrillic `а` is a sensitive key.
    let (_, o) = post(
        &app,
        "/v1/gates/output",
        DEV,
        &json!({"content": {"p\u{0430}ssword": "hunter2-but-longer"}}),
    )
    .await;
    assert_eq!(
        o["content"]["p\u{0430}ssword"], "<redacted:sensitive-key>",
        "{o}"
    );
    // Invisible text alone is still reported where it is.
    let (_, o) = post(
        &app,
        "/v1/gates/output",
        DEV,
        &json!({"content": "plain\u{200B}text"}),
    )
    .await;
    assert_eq!(o["violations"][0]["kind"], "hidden-unicode", "{o}");
}
