//! Regression tests for the attacks a security review found, each named after the attack.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

async fn decision(app: &axum::Router, token: &str, tool: &str, args: Value) -> Value {
    authorize(app, token, &json!({"tool": tool, "args": args})).await
}

#[tokio::test]
async fn option_injection_through_a_path_argument_is_refused() {
    let app = app();
    for path in [
        "--output=../../home/u/.bashrc",
        "-rf",
        "./--pre=sh",
        "a/../-x",
    ] {
        let got = decision(&app, DEV, "git_diff", json!({"path": path})).await;
        assert_eq!(got["decision"], "deny", "{path}: {got}");
        assert_eq!(
            got["errors"][0]["code"], "path_outside_root",
            "{path}: {got}"
        );
    }
    // Other arguments that reach a command line may not start with `-` either.
    for (tool, args) in [
        ("git_push", json!({"remote": "-f", "branch": "origin"})),
        ("run_tests", json!({"suite": "-pmod"})),
        ("git_log", json!({"rev": "--output=x"})),
    ] {
        let got = decision(&app, RELEASE, tool, args.clone()).await;
        assert_eq!(got["decision"], "deny", "{tool} {args}: {got}");
        assert_eq!(got["stage"], "validation", "{tool} {args}: {got}");
    }
}

#[tokio::test]
async fn force_push_to_main_by_ref_name_is_still_forbidden() {
    let app = app();
    for branch in [
        "main",
        "refs/heads/main",
        "heads/main",
        "refs/heads/release/1.2",
        "master",
    ] {
        let got = decision(
            &app,
            RELEASE,
            "git_push",
            json!({"remote": "origin", "branch": branch, "force": true}),
        )
        .await;
        assert_eq!(got["decision"], "deny", "{branch}: {got}");
        assert!(
            got["reasons"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r == "no-force-push-to-protected-branches"),
            "{got}"
        );
    }
}

#[tokio::test]
async fn http_fetch_of_internal_hosts_in_any_spelling_is_denied() {
    let app = app();
    let urls = [
        "https://127.0.0.1/",
        "https://2130706433/",
        "https://0x7f.1/",
        "https://0177.0.0.1/",
        "https://0/",
        "https://LOCALHOST/",
        "https://localhost/",
        "https://METADATA.google.internal/",
        "https://metadata/",
        "https://instance-data/",
        "https://172.17.0.1/",
        "https://[::1]/",
        "https:///127.0.0.1/",
        "https://\\127.0.0.1/",
        "https://1\t27.0.0.1/",
        "https://１２７.０.０.１/",
        "https://user@example.com/",
        "https://metadata.google.internal/computeMetadata/v1/",
        "https://db.internal:5432/",
        "https://printer.local/",
        "https://a.localhost/",
        "file:///etc/passwd",
        "gopher://example.com/",
    ];
    for url in urls {
        let got = decision(&app, DEV, "http_fetch", json!({"url": url})).await;
        assert_eq!(got["decision"], "deny", "{url}: {got}");
    }
    let got = decision(
        &app,
        DEV,
        "http_fetch",
        json!({"url": "https://docs.rs/axum?x=1#y"}),
    )
    .await;
    assert_eq!(got["decision"], "allow", "{got}");
}

#[tokio::test]
async fn secret_files_and_directories_are_deny_listed_at_any_depth() {
    let app = app();
    for path in [
        ".envrc",
        "app/.netrc",
        ".npmrc",
        "home/.git-credentials",
        "certs/server.key",
        "x.p12",
        ".ssh/id_ed25519",
        "deploy/.ssh/config",
        ".aws/credentials",
        "a/b/.aws",
        "svc/secrets/db",
        ".git/config",
        "x/.env.local",
    ] {
        let got = decision(&app, DEV, "read_file", json!({"path": path})).await;
        assert_eq!(got["decision"], "deny", "{path}: {got}");
        assert_eq!(
            got["reasons"],
            json!(["deny-listed-paths"]),
            "{path}: {got}"
        );
    }
    for path in [
        "src/environment.rs",
        "docs/secrets-management.md",
        "keys.md",
        "a.envelope",
    ] {
        let got = decision(&app, DEV, "read_file", json!({"path": path})).await;
        assert_eq!(got["decision"], "allow", "{path}: {got}");
    }
}

#[tokio::test]
async fn duplicate_argument_keys_are_refused_not_resolved() {
    let app = app();
    let body = r#"{"tool": "read_file", "args": {"path": ".env", "path": "README.md"}}"#;
    let (status, json) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(body)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{json}");
    assert!(
        json["message"]
            .as_str()
            .unwrap()
            .contains("duplicate key `path`"),
        "{json}"
    );
    let nested = r#"{"tool": "echo", "args": {"message": "x", "o": {"k": 1, "k": 2}}}"#;
    let (status, _) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(nested)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn body_errors_never_quote_the_values_sent() {
    let app = app();
    let secret = "sk_live_51HzSECRETSECRET";
    for body in [
        json!({"tool": "echo", "context": {"iter": secret}}).to_string(),
        json!({"tool": secret.len(), "args": {}}).to_string(),
        format!(r#"{{"tool": "echo", "context": {{"conv_id": 5, "x": "{secret}"}}}}"#),
        format!(r#"{{"tool": "{secret}" "#),
    ] {
        let (status, json) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(&body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{json}");
        assert!(!json.to_string().contains("SECRET"), "{json}");
    }
}

#[tokio::test]
async fn policy_status_is_for_operators_not_agents() {
    let app = app();
    let (status, json) = send(&app, "GET", "/v1/policies", Some(DEV), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{json}");
    let (status, _) = send(&app, "GET", "/v1/policies", Some(ALICE), None).await;
    assert_eq!(status, StatusCode::OK);
}

#[test]
fn manifests_whose_arguments_policies_cannot_see_load_with_a_warning() {
    let set = with_blind_spots();
    let loaded = toolgate::policy::load(&set.sources()).unwrap();
    let text: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert!(
        text.iter()
            .any(|w| w.contains("argument `ratio` of `echo` is untyped for policies")),
        "{text:?}"
    );
    assert!(
        text.iter()
            .any(|w| w.contains("accepts undeclared arguments")),
        "{text:?}"
    );
    // The shipped manifests have no blind spots.
    assert!(
        toolgate::policy::load(&shipped_sources())
            .unwrap()
            .warnings
            .is_empty()
    );
}

/// The shipped set with `echo` taking an argument policies cannot see and undeclared ones.
fn with_blind_spots() -> TempSet {
    let set = TempSet::new();
    set.edit_manifest("echo", |m| {
        m["inputSchema"]["properties"]["ratio"] =
            json!({"anyOf": [{"type": "string"}, {"type": "integer"}]});
        m["inputSchema"]
            .as_object_mut()
            .unwrap()
            .remove("additionalProperties");
    });
    set.regenerate_schema();
    set
}

#[test]
fn an_empty_policy_directory_is_an_error_even_next_to_warnings() {
    let set = with_blind_spots();
    for entry in std::fs::read_dir(set.policies()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "cedar") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let err = toolgate::policy::load(&set.sources()).unwrap_err();
    let text: Vec<String> = err.problems.iter().map(ToString::to_string).collect();
    assert!(
        text.iter().any(|p| p.contains("no `.cedar` files")
            && p.contains(&set.policies().display().to_string())),
        "{text:?}"
    );
}

#[tokio::test]
async fn a_long_or_chain_in_a_policy_evaluates_instead_of_failing_closed() {
    let set = TempSet::new();
    set.write("policies/chain.cedar", &long_or_chain_policy(80));
    let app = app_with(
        toolgate::policy::load(&set.sources()).unwrap().snapshot,
        demo_auth(),
    );
    let got = decision(&app, DEV, "echo", json!({"message": "m79"})).await;
    assert_eq!(
        (got["decision"].as_str(), got["errors"][0]["code"].as_str()),
        (Some("deny"), Some("forbidden")),
        "{got}"
    );
    let got = decision(&app, DEV, "echo", json!({"message": "other"})).await;
    assert_eq!(got["decision"], "allow", "{got}");
}
