//! `POST /v1/explain` and `toolgate explain`: every policy of the call's action, as sent and as
//! if approved, agreeing with the decision; who may approve; who may ask (Cedar: auditors).

use serde_json::{Value, json};

use crate::helpers::*;
use toolgate::authz::{self, Check, Outcome, Principal, PrincipalKind, Signals};

const GRACE: &str = "demo-grace-token";
const BOB: &str = "demo-bob-token";

async fn explain(app: &axum::Router, token: &str, body: &Value) -> (u16, Value) {
    let (status, v) = send(
        app,
        "POST",
        "/v1/explain",
        Some(token),
        Some(&body.to_string()),
    )
    .await;
    (status.as_u16(), v)
}

fn policy<'a>(e: &'a Value, id: &str) -> &'a Value {
    e["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == id)
        .unwrap_or_else(|| panic!("{id} not in {e}"))
}

#[tokio::test]
async fn an_auditor_sees_why_a_write_waits_and_who_may_approve_it() {
    let state = shipped_state();
    let app = toolgate::api::router(state.clone());
    let call = json!({"agent": "dev-agent", "tool": "write_file",
                      "args": {"path": "notes.txt", "content": "hello"}});
    let (status, e) = explain(&app, GRACE, &call).await;
    assert_eq!(status, 200, "{e}");
    // The same answer the agent gets from /v1/authorize.
    let (_, d) = send(
        &app,
        "POST",
        "/v1/authorize",
        Some(DEV),
        Some(r#"{"tool":"write_file","args":{"path":"notes.txt","content":"hello"}}"#),
    )
    .await;
    assert_eq!(e["decision"], d["decision"], "{e}\n{d}");
    assert_eq!(e["decision"], "pending_approval");
    assert_eq!(e["reasons"], d["reasons"]);
    assert_eq!(e["policy_revision"], d["policy_revision"]);

    let tier = policy(&e, "tier-high-needs-approval");
    assert_eq!(tier["permit"], false);
    assert_eq!(tier["as_is"], "satisfied");
    assert_eq!(tier["if_approved"], "not_satisfied");
    assert_eq!(
        tier["file"].as_str().unwrap().rsplit('/').next(),
        Some("tiers.cedar")
    );
    let dev = policy(&e, "developers-read-write");
    assert_eq!(
        (dev["as_is"].as_str(), dev["permit"].as_bool()),
        (Some("satisfied"), Some(true))
    );
    assert_eq!(policy(&e, "deny-listed-paths")["as_is"], "not_satisfied");
    // Only policies of write_file's action are listed.
    assert!(
        e["policies"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["id"] != "auditors-explain-decisions")
    );

    assert_eq!(
        e["approval"]["because"],
        json!(["tier-high-needs-approval"])
    );
    assert_eq!(
        e["approval"]["roles"],
        json!(["approver", "director"]),
        "{e}"
    );
    let humans = e["approval"]["humans"].as_array().unwrap();
    assert!(
        humans.contains(&json!("alice")) && humans.contains(&json!("bob")),
        "{e}"
    );
    assert!(
        !humans.contains(&json!("grace")),
        "an auditor is no approver: {e}"
    );

    // Asked and answered: on the record, with who asked.
    let (_, log) = send(&app, "GET", "/v1/audit?stage=explain", Some(ALICE), None).await;
    let text = log.to_string();
    assert!(
        text.contains("explained") && text.contains("Human::\\\"grace\\\""),
        "{text}"
    );
}

#[tokio::test]
async fn only_humans_the_policies_allow_may_ask() {
    let app = app();
    let call = json!({"agent": "dev-agent", "tool": "read_file", "args": {"path": "x"}});
    for (token, status) in [(ALICE, 403), (BOB, 403), (DEV, 403)] {
        let (got, body) = explain(&app, token, &call).await;
        assert_eq!(got, status, "{token}: {body}");
        assert!(
            body.get("policies").is_none(),
            "nothing explained to {token}: {body}"
        );
    }
    let (status, _) = send(&app, "POST", "/v1/explain", None, Some(&call.to_string())).await;
    assert_eq!(status, 401);
    // Refusals are recorded too.
    let state = shipped_state();
    let app = toolgate::api::router(state);
    let _ = explain(&app, ALICE, &call).await;
    let (_, log) = send(&app, "GET", "/v1/audit?stage=explain", Some(ALICE), None).await;
    assert!(log.to_string().contains("explain_refused"), "{log}");
}

#[tokio::test]
async fn bad_bodies_get_a_400_that_names_the_problem() {
    let app = app();
    for (body, code) in [
        (
            r#"{"agent":"dev-agent","tool":"read_file","nope":1}"#,
            "invalid_body",
        ),
        (r#"{"agent":"","tool":"read_file"}"#, "invalid_agent"),
        (
            r#"{"agent":"dev-agent","tool":"read_file","anomaly":["spooky"]}"#,
            "invalid_anomaly",
        ),
        (
            r#"{"agent":"dev-agent","tool":"read_file","usage":{"bogus":1}}"#,
            "invalid_body",
        ),
        (r#"{"agent":"dev-agent","tool":""}"#, "invalid_tool"),
        (r#"{"agent":"dev-agent","tool":"echo""#, "invalid_json"),
    ] {
        let (status, v) = send(&app, "POST", "/v1/explain", Some(GRACE), Some(body)).await;
        assert_eq!(status, 400, "{body}: {v}");
        assert_eq!(v["error"], code, "{body}: {v}");
    }
}

#[tokio::test]
async fn calls_refused_before_cedar_list_no_policies() {
    let app = app();
    let (_, e) = explain(
        &app,
        GRACE,
        &json!({"agent": "dev-agent", "tool": "read_file", "args": {"path": "../etc/passwd"}}),
    )
    .await;
    assert_eq!(
        (e["decision"].as_str(), e["stage"].as_str()),
        (Some("deny"), Some("validation"))
    );
    assert_eq!(e["policies"], json!([]));
    assert_eq!(e["errors"][0]["code"], "path_outside_root");
    let (_, e) = explain(
        &app,
        GRACE,
        &json!({"agent": "dev-agent", "tool": "no_such_tool"}),
    )
    .await;
    assert_eq!(e["stage"], "registry");
}

#[tokio::test]
async fn a_policy_that_errors_is_shown_errored_with_cedars_message() {
    let set = TempSet::new();
    // Overflows for any caller with more than one call in the last minute.
    set.append(
        "policies/tiers.cedar",
        "\n@id(\"overflowing\")\nforbid (principal, action == Action::\"echo\", resource)\nwhen { context.usage.calls_last_minute * 9223372036854775807 > 0 };\n",
    );
    let snap = toolgate::policy::load(&set.sources()).unwrap().snapshot;
    let app = app_with(snap, demo_auth());
    let call = |n: u32| {
        json!({"agent": "dev-agent", "tool": "echo", "args": {"message": "hi"},
                               "usage": {"calls_last_minute": n}})
    };
    let (_, quiet) = explain(&app, GRACE, &call(0)).await;
    assert_eq!(quiet["decision"], "allow", "{quiet}");
    assert_eq!(policy(&quiet, "overflowing")["as_is"], "not_satisfied");
    let (_, busy) = explain(&app, GRACE, &call(5)).await;
    assert_eq!(busy["decision"], "deny", "fail closed: {busy}");
    assert_eq!(busy["errors"][0]["code"], "policy_error");
    let p = policy(&busy, "overflowing");
    assert_eq!(
        (p["as_is"].as_str(), p["if_approved"].as_str()),
        (Some("errored"), Some("errored"))
    );
    assert!(p["errors"][0].as_str().unwrap().contains("overflow"), "{p}");
}

/// The per-policy view agrees with the decision for a spread of calls: an allow has a
/// satisfied permit and no satisfied forbid; a policy deny is exactly its satisfied forbids,
/// or no satisfied permit; a pending call is allowed once approved.
#[test]
fn every_explanation_agrees_with_its_decision() {
    let snap = shared_snapshot();
    let calls = [
        ("dev-agent", "read_file", json!({"path": "src/main.rs"})),
        ("dev-agent", "read_file", json!({"path": ".env"})),
        (
            "po-agent",
            "write_file",
            json!({"path": "a", "content": "b"}),
        ),
        (
            "dev-agent",
            "write_file",
            json!({"path": "a", "content": "b"}),
        ),
        ("dev-agent", "delete_file", json!({"path": "a"})),
        ("sre-agent", "delete_file", json!({"path": "a"})),
        ("dev-agent", "run_tests", json!({"timeout_s": 1200})),
        ("dev-agent", "install_deps", json!({"command": "install"})),
        (
            "release-agent",
            "git_push",
            json!({"remote": "origin", "branch": "main"}),
        ),
        (
            "dev-agent",
            "http_fetch",
            json!({"url": "http://example.com/"}),
        ),
        ("nobody", "echo", json!({"message": "hi"})),
    ];
    for (agent, tool, args) in calls {
        let who = Principal::new(PrincipalKind::Agent, agent);
        let call = toolgate::authz::Call {
            tool: tool.to_owned(),
            args,
            correlation: Default::default(),
        };
        let verdict = authz::decide(snap, &who, &call);
        let e = authz::explain(snap, &who, &call, &Signals::default());
        assert_eq!(e.decision, verdict.decision, "{agent} {tool}");
        let satisfied = |permit: bool, approved: bool| -> Vec<String> {
            e.policies
                .iter()
                .filter(|p| p.permit == permit)
                .filter(|p| (if approved { p.if_approved } else { p.as_is }) == Check::Satisfied)
                .map(|p| p.id.clone())
                .collect()
        };
        match e.decision {
            Outcome::Allow => {
                assert!(!satisfied(true, false).is_empty() && satisfied(false, false).is_empty());
            }
            Outcome::PendingApproval => {
                assert!(!satisfied(true, true).is_empty() && satisfied(false, true).is_empty());
                assert!(e.approval.as_ref().is_some_and(|a| !a.because.is_empty()));
            }
            Outcome::Deny if !e.policies.is_empty() => {
                // The reasons are the forbids an approval would not lift.
                let forbids = satisfied(false, true);
                if forbids.is_empty() {
                    assert!(satisfied(true, true).is_empty(), "{agent} {tool}: {e:?}");
                } else {
                    assert_eq!(forbids, verdict.reasons, "{agent} {tool}");
                }
            }
            Outcome::Deny => {}
        }
    }
}

#[test]
fn the_cli_explains_offline_and_through_the_sidecar() {
    let call =
        r#"{"agent":"dev-agent","tool":"write_file","args":{"path":"notes.txt","content":"hi"}}"#;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("call.json");
    std::fs::write(&file, call).unwrap();
    let out = in_repo(&["explain", "--offline", file.to_str().unwrap()]);
    assert_ok(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("dev-agent calling `write_file`: pending_approval"),
        "{text}"
    );
    assert!(
        text.contains("tier-high-needs-approval") && text.contains("<- approval changes this"),
        "{text}"
    );
    assert!(
        text.contains("may approve: roles approver, director"),
        "{text}"
    );

    let out = in_repo(&["explain", "--offline", "--json", file.to_str().unwrap()]);
    assert_ok(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["decision"], "pending_approval");

    std::fs::write(&file, r#"{"agent":"dev-agent","tool":"echo","typo":1}"#).unwrap();
    let out = in_repo(&["explain", "--offline", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown field `typo`"));

    // Through a running sidecar: Cedar decides who may ask.
    let set = TempSet::new();
    let server = crate::process::start(&set);
    std::fs::write(&file, call).unwrap();
    let online = |token: &str| {
        toolgate()
            .args(["explain", file.to_str().unwrap(), "--url", &server.url()])
            .env("TOOLGATE_TOKEN", token)
            .output()
            .unwrap()
    };
    let out = online(GRACE);
    assert_ok(&out);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("pending because of: tier-high-needs-approval")
    );
    let out = online(ALICE);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("403"), "{err}");
}
