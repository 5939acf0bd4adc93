//! `docs/openapi.json` and the router stay in step: every documented operation is served, and
//! every served route is documented.

use std::collections::BTreeSet;

use axum::http::StatusCode;
use serde_json::Value;

use crate::helpers::*;
use toolgate::api::ROUTES;

fn documented() -> BTreeSet<(String, String)> {
    let text = std::fs::read_to_string(repo().join("docs/openapi.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let mut ops = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            ops.insert((method.to_uppercase(), path.clone()));
        }
    }
    ops
}

#[tokio::test]
async fn routes_match_the_openapi_document() {
    let routes: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    assert_eq!(routes, documented());
    let app = app();
    for (method, path) in &routes {
        let body = (method == "POST").then_some("{}");
        let (status, answer) = send(&app, method, path, Some(DEV), body).await;
        // A route may answer 404 about a resource (no approval `{id}`), never "no such route".
        assert_ne!(answer["error"], "not_found", "{method} {path}");
        assert!(
            status != StatusCode::NOT_FOUND
                || ["approval_not_found", "unknown_gate"]
                    .contains(&answer["error"].as_str().unwrap_or("")),
            "{method} {path}"
        );
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
    }
}
