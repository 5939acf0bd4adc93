//! Every risk tier, the elevated conditions and fail-closed behaviour, through `POST /v1/authorize`
//! over the shipped policies.

use serde_json::{Value, json};

use crate::helpers::*;

fn call(tool: &str, args: Value) -> Value {
    json!({"tool": tool, "args": args, "context": {"conv_id": "c", "trace_id": "t", "iter": 1}})
}

/// (token, tool, args, expected decision, expected stage, a reason that must be present)
type Case = (
    &'static str,
    &'static str,
    Value,
    &'static str,
    &'static str,
    Option<&'static str>,
);

fn table() -> Vec<Case> {
    vec![
        // low: unattended
        (
            DEV,
            "read_file",
            json!({"path": "src/main.rs"}),
            "allow",
            "policy",
            Some("developers-read-write"),
        ),
        (
            PO,
            "read_file",
            json!({"path": "README.md"}),
            "allow",
            "policy",
            Some("product-owners-read-only"),
        ),
        (
            DEV,
            "echo",
            json!({"message": "hi"}),
            "allow",
            "policy",
            None,
        ),
        // medium: unattended within limits, approval outside them
        (
            DEV,
            "run_tests",
            json!({"suite": "unit", "timeout_s": 600}),
            "allow",
            "policy",
            None,
        ),
        (
            DEV,
            "run_tests",
            json!({"suite": "unit", "timeout_s": 601}),
            "pending_approval",
            "approval",
            Some("tier-medium-run-tests-bounded"),
        ),
        (
            DEV,
            "http_fetch",
            json!({"url": "https://docs.rs/"}),
            "allow",
            "policy",
            None,
        ),
        (
            DEV,
            "http_fetch",
            json!({"url": "https://docs.rs/", "max_bytes": 2_000_000}),
            "pending_approval",
            "approval",
            Some("tier-medium-http-fetch-bounded"),
        ),
        // high: approval
        (
            DEV,
            "write_file",
            json!({"path": "src/lib.rs", "content": "x"}),
            "pending_approval",
            "approval",
            Some("tier-high-needs-approval"),
        ),
        // critical: approval, and only release managers may push at all
        (
            RELEASE,
            "git_push",
            json!({"remote": "origin", "branch": "feature/x"}),
            "pending_approval",
            "approval",
            Some("tier-critical-needs-approval"),
        ),
        (
            DEV,
            "git_push",
            json!({"remote": "origin", "branch": "feature/x"}),
            "deny",
            "policy",
            Some("git-push-release-managers-only"),
        ),
        (
            SRE,
            "git_push",
            json!({"remote": "origin", "branch": "feature/x"}),
            "deny",
            "policy",
            Some("git-push-release-managers-only"),
        ),
        (
            RELEASE,
            "git_push",
            json!({"remote": "origin", "branch": "main", "force": true}),
            "deny",
            "policy",
            Some("no-force-push-to-protected-branches"),
        ),
        // read-only role cannot write, not even with approval
        (
            PO,
            "write_file",
            json!({"path": "a.txt", "content": "x"}),
            "deny",
            "policy",
            None,
        ),
        (PO, "run_tests", json!({}), "deny", "policy", None),
        // deny-listed paths, also when dodged with `..`, backslashes or doubled separators
        (
            DEV,
            "read_file",
            json!({"path": ".env"}),
            "deny",
            "policy",
            Some("deny-listed-paths"),
        ),
        (
            DEV,
            "read_file",
            json!({"path": "src/../.env"}),
            "deny",
            "policy",
            Some("deny-listed-paths"),
        ),
        (
            DEV,
            "read_file",
            json!({"path": "config\\.env.production"}),
            "deny",
            "policy",
            Some("deny-listed-paths"),
        ),
        (
            DEV,
            "read_file",
            json!({"path": "./.git//config"}),
            "deny",
            "policy",
            Some("deny-listed-paths"),
        ),
        (
            DEV,
            "list_files",
            json!({"path": "app/secrets"}),
            "deny",
            "policy",
            Some("deny-listed-paths"),
        ),
        (
            DEV,
            "write_file",
            json!({"path": "keys/server.pem", "content": "x"}),
            "deny",
            "policy",
            Some("deny-listed-paths"),
        ),
        // internal hosts
        (
            DEV,
            "http_fetch",
            json!({"url": "https://metadata.google.internal/v1"}),
            "deny",
            "policy",
            Some("http-fetch-no-internal-hosts"),
        ),
        (
            DEV,
            "http_fetch",
            json!({"url": "https://user@evil.example/"}),
            "deny",
            "validation",
            None,
        ),
    ]
}

#[tokio::test]
async fn shipped_policies_decide_each_tier_and_elevated_condition() {
    let app = app();
    for (token, tool, args, want, stage, reason) in table() {
        let got = authorize(&app, token, &call(tool, args.clone())).await;
        let ctx = format!("{token} {tool} {args}: {got}");
        assert_eq!(got["decision"], want, "{ctx}");
        assert_eq!(got["stage"], stage, "{ctx}");
        assert_eq!(got["tool"], tool, "{ctx}");
        assert!(
            got["policy_revision"]
                .as_str()
                .unwrap()
                .starts_with("sha256:"),
            "{ctx}"
        );
        if let Some(r) = reason {
            assert!(
                got["reasons"].as_array().unwrap().iter().any(|x| x == r),
                "{ctx}"
            );
        }
        if want == "allow" {
            assert_eq!(got["errors"], json!([]), "{ctx}");
        } else {
            assert!(
                !got["errors"][0]["suggestion"].as_str().unwrap().is_empty(),
                "{ctx}"
            );
        }
    }
}

#[tokio::test]
async fn unknown_tool_is_denied_at_the_registry() {
    let got = authorize(&app(), DEV, &call("rm_rf", json!({}))).await;
    assert_eq!(got["decision"], "deny");
    assert_eq!(got["stage"], "registry");
    assert_eq!(got["errors"][0]["code"], "unknown_tool");
    assert_eq!(got["tool"], Value::Null);
}

#[tokio::test]
async fn each_kind_of_invalid_argument_is_denied_with_its_path_and_never_its_value() {
    let app = app();
    let secret = "sk_live_51HzSECRETSECRETSECRET";
    let cases = [
        ("read_file", json!({"path": 42}), "/path", "type"),
        (
            "read_file",
            json!({}),
            "/",
            "missing required property `path`",
        ),
        (
            "read_file",
            json!({"path": "a", "extra": secret}),
            "/",
            "unexpected property `extra`",
        ),
        (
            "read_file",
            json!({"path": "a", "max_bytes": 0}),
            "/max_bytes",
            "at least 1",
        ),
        (
            "read_file",
            json!({"path": "a", "max_bytes": 99_999_999_999_i64}),
            "/max_bytes",
            "at most",
        ),
        (
            "read_file",
            json!({"path": "a", "max_bytes": 1.5}),
            "/max_bytes",
            "type",
        ),
        (
            "echo",
            json!({"message": secret.repeat(200)}),
            "/message",
            "at most 4096 characters",
        ),
        (
            "git_log",
            json!({"rev": format!("--output={secret}")}),
            "/rev",
            "pattern",
        ),
        (
            "http_fetch",
            json!({"url": "https://a.example/", "method": secret}),
            "/method",
            "must be one of",
        ),
        (
            "git_push",
            json!({"remote": "origin", "branch": "x", "force": "yes"}),
            "/force",
            "type",
        ),
        ("echo", json!([secret]), "/", "type"),
        ("echo", json!(secret), "/", "type"),
    ];
    for (tool, args, path, fragment) in cases {
        let got = authorize(&app, DEV, &call(tool, args.clone())).await;
        let text = got.to_string();
        assert_eq!(got["decision"], "deny", "{tool} {args}: {text}");
        assert_eq!(got["stage"], "validation", "{text}");
        let errors = got["errors"].as_array().unwrap();
        assert!(
            errors.iter().any(|e| e["code"] == "invalid_argument"
                && e["message"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("`{path}`"))
                && e["message"].as_str().unwrap().contains(fragment)),
            "{tool} {args}: {text}"
        );
        assert!(!text.contains("SECRET"), "value leaked: {text}");
    }
}

#[tokio::test]
async fn every_schema_violation_is_listed() {
    let got = authorize(
        &app(),
        DEV,
        &call("write_file", json!({"path": 1, "content": 2, "x": 3})),
    )
    .await;
    assert_eq!(got["errors"].as_array().unwrap().len(), 3, "{got}");
}

#[tokio::test]
async fn a_path_that_normalizes_outside_the_root_is_denied_before_cedar() {
    let app = app();
    for path in [
        "../etc/passwd",
        "src/../../etc/passwd",
        "..\\..\\windows",
        "/etc/passwd",
        "a/./../../b",
        "C:\\x",
    ] {
        let got = authorize(&app, DEV, &call("read_file", json!({"path": path}))).await;
        assert_eq!(got["decision"], "deny", "{path}: {got}");
        assert_eq!(got["stage"], "validation", "{path}: {got}");
        assert_eq!(
            got["errors"][0]["code"], "path_outside_root",
            "{path}: {got}"
        );
    }
    // Percent-encoding is not decoded: `%2e%2e` is a file name, and stays inside the root.
    let got = authorize(&app, DEV, &call("read_file", json!({"path": "%2e%2e/x"}))).await;
    assert_eq!(got["decision"], "allow", "{got}");
}

#[tokio::test]
async fn a_forbid_that_errors_denies_although_cedar_would_skip_it() {
    let set = TempSet::new();
    set.write(
        "policies/overflow.cedar",
        "@id(\"overflowing-forbid\")\nforbid (principal, action == Action::\"read_file\", resource)\n\
         when { context.args has max_bytes && context.args.max_bytes * 1000000000000 > 5 };\n",
    );
    let snap = toolgate::policy::load(&set.sources()).unwrap().snapshot;
    let app = app_with(snap, demo_auth());
    // 10_000_000 * 10^12 overflows i64: Cedar skips the forbid and would allow.
    let got = authorize(
        &app,
        DEV,
        &call("read_file", json!({"path": "a", "max_bytes": 10_000_000})),
    )
    .await;
    assert_eq!(got["decision"], "deny", "{got}");
    assert_eq!(got["stage"], "policy");
    assert_eq!(got["errors"][0]["code"], "policy_error");
    assert_eq!(got["reasons"], json!(["overflowing-forbid"]));
    // A small value evaluates fine and the forbid applies normally.
    let got = authorize(
        &app,
        DEV,
        &call("read_file", json!({"path": "a", "max_bytes": 1})),
    )
    .await;
    assert_eq!(got["decision"], "deny");
    assert_eq!(got["errors"][0]["code"], "forbidden");
    // Without max_bytes the forbid does not apply.
    let got = authorize(&app, DEV, &call("read_file", json!({"path": "a"}))).await;
    assert_eq!(got["decision"], "allow");
}

#[tokio::test]
async fn a_permit_that_errors_also_denies() {
    let set = TempSet::new();
    set.write(
        "policies/ip.cedar",
        "@id(\"overflowing-permit\")\npermit (principal, action == Action::\"run_tests\", resource)\n\
         when { context.args has timeout_s && context.args.timeout_s * 10000000000000000 > 0 };\n",
    );
    let snap = toolgate::policy::load(&set.sources()).unwrap().snapshot;
    // `developers-read-write` permits the call; the erroring permit must still deny it.
    let got = authorize(
        &app_with(snap, demo_auth()),
        DEV,
        &call("run_tests", json!({"timeout_s": 3600})),
    )
    .await;
    assert_eq!(got["decision"], "deny", "{got}");
    assert_eq!(got["errors"][0]["code"], "policy_error");
}

#[tokio::test]
async fn decision_ids_are_unique_and_limits_come_from_the_manifest() {
    let app = app();
    let a = authorize(&app, DEV, &call("echo", json!({"message": "a"}))).await;
    let b = authorize(&app, DEV, &call("echo", json!({"message": "a"}))).await;
    assert_ne!(a["decision_id"], b["decision_id"]);
    assert_eq!(
        a["limits"],
        json!({"timeout_ms": 1000, "max_output_bytes": 8192})
    );
    assert_eq!(a["risk"], "low");
}
