//! The HTTP envelope: malformed bodies, unknown fields, size and content-type limits, identity
//! claims in the body, and the read-only routes.

use axum::http::StatusCode;
use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn malformed_and_unknown_bodies_get_structured_4xx() {
    let app = app();
    let cases = [
        ("{\"tool\": ", StatusCode::BAD_REQUEST, "invalid_json"),
        ("[]", StatusCode::BAD_REQUEST, "invalid_body"),
        ("{\"args\": {}}", StatusCode::BAD_REQUEST, "invalid_body"),
        (
            "{\"tool\": \"echo\", \"argz\": {}}",
            StatusCode::BAD_REQUEST,
            "invalid_body",
        ),
        (
            "{\"tool\": \"echo\", \"context\": {\"conv\": 1}}",
            StatusCode::BAD_REQUEST,
            "invalid_body",
        ),
        (
            "{\"tool\": \"echo\", \"context\": {\"iter\": -1}}",
            StatusCode::BAD_REQUEST,
            "invalid_context",
        ),
        ("{\"tool\": \"\"}", StatusCode::BAD_REQUEST, "invalid_tool"),
        // A control character would split index keys in the audit store.
        (
            "{\"tool\": \"echo\\u0000x\"}",
            StatusCode::BAD_REQUEST,
            "invalid_tool",
        ),
    ];
    for (body, status, code) in cases {
        let (got, json) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(body)).await;
        assert_eq!(got, status, "{body}: {json}");
        assert_eq!(json["error"], code, "{body}: {json}");
        assert!(
            json["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{json}"
        );
    }
}

#[tokio::test]
async fn a_body_claiming_another_principal_is_refused_and_never_used() {
    let app = app();
    for field in ["principal", "agent", "user"] {
        let body = json!({"tool": "git_push", "args": {"remote": "origin", "branch": "x"}, field: "release-agent"});
        let (status, json) = decide(&app, DEV, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{json}");
        assert_eq!(json["error"], "identity_in_body");
    }
    // Claiming it inside the context object is refused too.
    let body = json!({"tool": "echo", "args": {"message": "x"}, "context": {"principal": "Agent::\"release-agent\""}});
    let (status, _) = decide(&app, DEV, &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // And an argument named like a principal is just an argument: the caller is still dev-agent.
    let got = authorize(
        &app,
        DEV,
        &json!({"tool": "git_push", "args": {"remote": "origin", "branch": "release-agent"}}),
    )
    .await;
    assert_eq!(got["decision"], "deny");
    assert_eq!(got["reasons"], json!(["git-push-release-managers-only"]));
}

#[tokio::test]
async fn oversized_bodies_and_wrong_content_types_are_refused() {
    let app = app();
    let big = json!({"tool": "echo", "args": {"message": "a".repeat(70 * 1024)}}).to_string();
    let (status, json) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(&big)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{json}");
    assert_eq!(json["error"], "body_too_large");

    use axum::body::Body;
    use tower::ServiceExt;
    let req = axum::http::Request::post("/v1/authorize")
        .header("authorization", format!("Bearer {DEV}"))
        .header("content-type", "text/plain")
        .body(Body::from("{\"tool\":\"echo\"}"))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

#[tokio::test]
async fn unknown_routes_and_methods_are_json_errors() {
    let app = app();
    let (status, json) = send(&app, "GET", "/v1/nope", Some(DEV), None).await;
    assert_eq!(
        (status, json["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let (status, json) = send(&app, "GET", "/v1/authorize", Some(DEV), None).await;
    assert_eq!(
        (status, json["error"].as_str()),
        (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed"))
    );
}

#[tokio::test]
async fn tools_lists_only_what_the_caller_could_call_as_openai_functions() {
    let app = app();
    let names = |v: &serde_json::Value| -> Vec<String> {
        v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let (status, po) = send(&app, "GET", "/v1/tools", Some(PO), None).await;
    assert_eq!(status, StatusCode::OK);
    let po_names = names(&po);
    assert!(po_names.contains(&"read_file".to_owned()));
    assert!(!po_names.contains(&"write_file".to_owned()), "{po_names:?}");
    assert!(!po_names.contains(&"git_push".to_owned()), "{po_names:?}");
    let first = &po["tools"][0];
    assert_eq!(first["type"], "function");
    assert_eq!(first["function"]["parameters"]["type"], "object");
    assert!(po.get("guardrail_summary").is_none());

    let (_, dev) = send(&app, "GET", "/v1/tools?summary=true", Some(DEV), None).await;
    let dev_names = names(&dev);
    assert!(dev_names.contains(&"write_file".to_owned()));
    assert!(
        !dev_names.contains(&"git_push".to_owned()),
        "only release managers may push"
    );
    assert!(
        dev["guardrail_summary"]
            .as_str()
            .unwrap()
            .contains("write_file")
    );

    let (_, rel) = send(&app, "GET", "/v1/tools", Some(RELEASE), None).await;
    assert!(names(&rel).contains(&"git_push".to_owned()));

    let (_, human) = send(&app, "GET", "/v1/tools", Some(ALICE), None).await;
    assert_eq!(names(&human), Vec::<String>::new(), "humans call no tools");

    let (status, json) = send(&app, "GET", "/v1/tools?sumary=1", Some(DEV), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{json}");
}

#[tokio::test]
async fn policies_health_and_readiness() {
    let app = app();
    let (status, json) = send(&app, "GET", "/v1/policies", Some(ALICE), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json["policies"], 30);
    assert_eq!(json["tools"], 16);
    assert_eq!(json["last_reload_error"], serde_json::Value::Null);
    assert!(
        json["policy_ids"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "tier-high-needs-approval")
    );
    let (status, _) = send(&app, "GET", "/v1/policies", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, json) = send(&app, "GET", "/healthz", None, None).await;
    assert_eq!(
        (status, json["status"].as_str()),
        (StatusCode::OK, Some("ok"))
    );
    let (status, json) = send(&app, "GET", "/readyz", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json["ready"], true);
}

#[tokio::test]
async fn a_human_credential_cannot_call_tools() {
    let got = authorize(
        &app(),
        ALICE,
        &json!({"tool": "echo", "args": {"message": "x"}}),
    )
    .await;
    assert_eq!(got["decision"], "deny");
    assert_eq!(got["stage"], "auth");
    assert_eq!(got["errors"][0]["code"], "not_an_agent");
}
