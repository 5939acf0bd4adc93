//! Grants: a template of the policy files linked through `POST /v1/grants` for an agent or role
//! and a tool, until it expires. Cedar decides who may grant; forbids still win; grants are
//! listed, revoked, audited, expire on time, survive restarts, and a grant whose template is
//! gone grants nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate::api::router;
use toolgate::gateway::Gateway;
use toolgate::reload::{PolicyStore, StoreOptions, Widening};
use toolgate::storage::Stores;

use crate::helpers::*;

const BOB: &str = "demo-bob-token";
const GRACE: &str = "demo-grace-token";

fn grant_body(principal: (&str, &str), tool: &str, ttl_s: u64) -> Value {
    json!({"template": "grant-tool-access",
           "principal": {"type": principal.0, "id": principal.1},
           "resource": {"type": "Tool", "id": tool},
           "ttl_s": ttl_s, "reason": "incident 42"})
}

fn run_tests() -> Value {
    json!({"tool": "run_tests", "args": {}})
}

async fn audit_text(app: &axum::Router) -> String {
    let (_, log) = send(app, "GET", "/v1/audit?stage=grant", Some(ALICE), None).await;
    log.to_string()
}

#[tokio::test]
async fn a_director_grants_an_agent_a_tool_and_revokes_it() {
    let app = app();
    assert_eq!(authorize(&app, PO, &run_tests()).await["decision"], "deny");
    let before_install = authorize(
        &app,
        PO,
        &json!({"tool": "install_deps", "args": {"command": "ci"}}),
    )
    .await["decision"]
        .clone();

    let (status, g) = post(
        &app,
        "/v1/grants",
        ALICE,
        &grant_body(("Agent", "po-agent"), "run_tests", 600),
    )
    .await;
    assert_eq!(status, 201, "{g}");
    let id = g["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("grant-"), "{g}");
    assert_eq!(g["active"], true);
    assert_eq!(g["granted_by"], "Human::\"alice\"");
    let left = g["expires_ms"].as_u64().unwrap() - g["created_ms"].as_u64().unwrap();
    assert_eq!(left, 600_000);

    // The grant decides, named by its id; other agents and tools are untouched.
    let d = authorize(&app, PO, &run_tests()).await;
    assert_eq!(d["decision"], "allow", "{d}");
    assert_eq!(d["reasons"], json!([id]));
    // dev-agent, and every other tool of po-agent, decide as before.
    let install = json!({"tool": "install_deps", "args": {"command": "ci"}});
    assert_eq!(
        authorize(&app, PO, &install).await["decision"],
        before_install
    );
    assert_eq!(
        authorize(&app, DEV, &run_tests()).await["reasons"],
        json!(["developers-read-write"])
    );

    let (status, list) = send(&app, "GET", "/v1/grants", Some(BOB), None).await;
    assert_eq!(status, 200);
    assert_eq!(list["grants"][0]["id"], id.as_str(), "{list}");
    let (status, _) = send(&app, "GET", "/v1/grants", Some(DEV), None).await;
    assert_eq!(status, 403, "agents do not see grants");

    // Explain shows it as the policy that allowed the call.
    let (_, e) = post(
        &app,
        "/v1/explain",
        GRACE,
        &json!({"agent": "po-agent", "tool": "run_tests"}),
    )
    .await;
    let linked = e["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == id.as_str())
        .unwrap();
    assert_eq!(
        (linked["as_is"].as_str(), linked["file"].as_str()),
        (Some("satisfied"), Some("(grant)"))
    );

    let (status, r) = post(
        &app,
        &format!("/v1/grants/{id}/revoke"),
        ALICE,
        &json!({"reason": "done"}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(authorize(&app, PO, &run_tests()).await["decision"], "deny");
    let (status, r) = post(&app, &format!("/v1/grants/{id}/revoke"), ALICE, &json!({})).await;
    assert_eq!(
        (status.as_u16(), r["error"].as_str()),
        (404, Some("grant_not_found"))
    );
    let (_, list) = send(&app, "GET", "/v1/grants", Some(ALICE), None).await;
    assert_eq!(list["grants"], json!([]));

    let log = audit_text(&app).await;
    assert!(
        log.contains("\"granted\"") && log.contains("\"revoked\""),
        "{log}"
    );
    assert!(
        log.contains("incident 42") && log.contains("revoked: done"),
        "{log}"
    );
}

#[tokio::test]
async fn cedar_decides_who_may_grant_what_and_for_how_long() {
    let app = app();
    // bob is an approver: low and medium risk, an hour at most.
    let (status, b) = post(
        &app,
        "/v1/grants",
        BOB,
        &grant_body(("Agent", "po-agent"), "write_file", 600),
    )
    .await;
    assert_eq!(
        (status.as_u16(), b["error"].as_str()),
        (403, Some("not_eligible")),
        "{b}"
    );
    let (status, _) = post(
        &app,
        "/v1/grants",
        BOB,
        &grant_body(("Agent", "po-agent"), "run_tests", 7200),
    )
    .await;
    assert_eq!(status, 403);
    let (status, g) = post(
        &app,
        "/v1/grants",
        BOB,
        &grant_body(("Role", "product_owner"), "run_tests", 3600),
    )
    .await;
    assert_eq!(status, 201, "{g}");
    // A role grant covers its members.
    assert_eq!(authorize(&app, PO, &run_tests()).await["decision"], "allow");
    for token in [GRACE, DEV] {
        let (status, _) = post(
            &app,
            "/v1/grants",
            token,
            &grant_body(("Agent", "po-agent"), "read_file", 60),
        )
        .await;
        assert_eq!(status, 403, "{token}");
    }
    // Revoking is the same decision: an auditor may not end a grant.
    let id = g["id"].as_str().unwrap();
    let (status, _) = post(&app, &format!("/v1/grants/{id}/revoke"), GRACE, &json!({})).await;
    assert_eq!(status, 403);
    assert_eq!(authorize(&app, PO, &run_tests()).await["decision"], "allow");
    let log = audit_text(&app).await;
    assert!(
        log.contains("grant_refused") && log.contains("revoke_refused"),
        "{log}"
    );
}

#[tokio::test]
async fn a_grant_is_a_permit_so_forbids_still_win() {
    let app = app();
    let (status, _) = post(
        &app,
        "/v1/grants",
        ALICE,
        &grant_body(("Agent", "po-agent"), "write_file", 600),
    )
    .await;
    assert_eq!(status, 201);
    let write = json!({"tool": "write_file", "args": {"path": "notes.txt", "content": "x"}});
    assert_eq!(
        authorize(&app, PO, &write).await["decision"],
        "pending_approval"
    );
    let secret = json!({"tool": "write_file", "args": {"path": ".env", "content": "x"}});
    let d = authorize(&app, PO, &secret).await;
    assert_eq!(
        (d["decision"].as_str(), d["reasons"][0].as_str()),
        (Some("deny"), Some("deny-listed-paths"))
    );
}

#[tokio::test]
async fn bad_grants_are_refused_with_what_to_fix_and_change_nothing() {
    let app = app();
    let cases = [
        (
            json!({"template": "no-such-template", "principal": {"type": "Agent", "id": "po-agent"},
                "resource": {"type": "Tool", "id": "run_tests"}, "ttl_s": 60}),
            422,
            "grant_not_linkable",
        ),
        (
            json!({"template": "directors-grant-tools", "principal": {"type": "Agent", "id": "po-agent"},
                "resource": {"type": "Tool", "id": "run_tests"}, "ttl_s": 60}),
            422,
            "grant_not_linkable",
        ),
        (
            grant_body(("Human", "bob"), "run_tests", 60),
            400,
            "invalid_entity",
        ),
        (
            grant_body(("Role", "no_such_role"), "run_tests", 60),
            400,
            "invalid_entity",
        ),
        (
            grant_body(("Agent", "po-agent"), "no_such_tool", 60),
            400,
            "invalid_entity",
        ),
        (
            json!({"template": "grant-tool-access", "principal": {"type": "Agent", "id": "po-agent"},
                "resource": {"type": "Sidecar", "id": "toolgate"}, "ttl_s": 60}),
            400,
            "invalid_entity",
        ),
        (
            json!({"template": "grant-tool-access", "principal": {"type": "Agent::x", "id": "po-agent"},
                "resource": {"type": "Tool", "id": "run_tests"}, "ttl_s": 60}),
            400,
            "invalid_entity",
        ),
        (
            grant_body(("Agent", "po-agent"), "run_tests", 0),
            400,
            "invalid_ttl",
        ),
        (
            grant_body(("Agent", &"x".repeat(300)), "run_tests", 60),
            400,
            "invalid_entity",
        ),
        (
            grant_body(("Agent", "po\u{1b}[31m"), "run_tests", 60),
            400,
            "invalid_entity",
        ),
        (
            grant_body(("Agent", "po-agent"), "run_tests", 31 * 24 * 3600),
            400,
            "invalid_ttl",
        ),
        (
            json!({"template": "grant-tool-access", "principal": {"type": "Agent", "id": "po-agent"},
                "resource": {"type": "Tool", "id": "run_tests"}, "ttl_s": 60, "forever": true}),
            400,
            "invalid_body",
        ),
    ];
    for (body, status, code) in cases {
        let (got, v) = post(&app, "/v1/grants", ALICE, &body).await;
        assert_eq!(
            (got.as_u16(), v["error"].as_str()),
            (status, Some(code)),
            "{body}: {v}"
        );
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    }
    let (_, list) = send(&app, "GET", "/v1/grants", Some(ALICE), None).await;
    assert_eq!(list["grants"], json!([]));
    assert_eq!(authorize(&app, PO, &run_tests()).await["decision"], "deny");
}

#[tokio::test]
async fn grants_expire_on_time() {
    let state = shipped_state();
    let app = router(state.clone());
    let timer = tokio::spawn(toolgate::gateway::expiry_timer(state.clone()));
    let (status, g) = post(
        &app,
        "/v1/grants",
        ALICE,
        &grant_body(("Agent", "po-agent"), "run_tests", 1),
    )
    .await;
    assert_eq!(status, 201, "{g}");
    let expires = g["expires_ms"].as_u64().unwrap();
    assert_eq!(authorize(&app, PO, &run_tests()).await["decision"], "allow");
    let started = Instant::now();
    loop {
        let d = authorize(&app, PO, &run_tests()).await;
        if d["decision"] == "deny" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the grant did not expire"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let late = toolgate::clock::now_ms().saturating_sub(expires);
    eprintln!("grant expired {late} ms after its expiry");
    // Tens of ms on an idle machine (a debug build relinks the set); generous for loaded CI.
    assert!(late < 2000, "expired {late} ms late");
    // Unlinked first, then recorded, then removed from the store.
    let mut log = audit_text(&app).await;
    while !log.contains("grant_expired") && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        log = audit_text(&app).await;
    }
    timer.abort();
    assert!(
        log.contains("\"expired\"") && log.contains("grant_expired"),
        "{log}"
    );
}

/// `serve`'s start-up over `set` with its data in `data`, grants linked.
fn start(
    set: &TempSet,
    data: &std::path::Path,
) -> (axum::Router, Arc<PolicyStore>, Vec<toolgate::grants::Grant>) {
    let stores = Stores::open(data).unwrap();
    let options = StoreOptions {
        remember: Some(stores.policies.clone()),
        widening: Widening::Apply,
    };
    let (store, _, _) = PolicyStore::start(set.sources(), options).unwrap();
    let store = Arc::new(store);
    let audit = Arc::new(
        toolgate::audit::Audit::start(
            stores.audit,
            toolgate::audit::Chain::plain(),
            toolgate::audit::Durability::Group,
        )
        .unwrap(),
    );
    let (grants, expired) = toolgate::grants::Grants::start(
        stores.grants.clone(),
        audit.clone(),
        store.clone(),
        toolgate::clock::now_ms(),
    )
    .unwrap();
    let state = Gateway::with_services(
        store.clone(),
        demo_auth(),
        64 * 1024,
        audit,
        Arc::new(
            toolgate::approvals::Approvals::new(
                stores.approvals,
                Default::default(),
                Default::default(),
            )
            .unwrap(),
        ),
    )
    .with_grants(Arc::new(grants));
    (router(state), store, expired)
}

#[tokio::test]
async fn grants_survive_restarts_and_a_removed_template_grants_nothing() {
    let set = TempSet::new();
    let data = tempfile::tempdir().unwrap();
    let (app, store, _) = start(&set, data.path());
    let (status, g) = post(
        &app,
        "/v1/grants",
        ALICE,
        &grant_body(("Agent", "po-agent"), "run_tests", 3600),
    )
    .await;
    assert_eq!(status, 201);
    let id = g["id"].as_str().unwrap().to_owned();
    let (status, _) = post(
        &app,
        "/v1/grants",
        ALICE,
        &grant_body(("Agent", "po-agent"), "install_deps", 1),
    )
    .await;
    assert_eq!(status, 201);
    drop((app, store));
    tokio::time::sleep(Duration::from_millis(1100)).await;

    // Restarted: the long grant is back, the short one expired while we were down.
    let (app, store, expired) = start(&set, data.path());
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].resource.id, "install_deps");
    let d = authorize(&app, PO, &run_tests()).await;
    assert_eq!(
        (d["decision"].as_str(), d["reasons"][0].as_str()),
        (Some("allow"), Some(id.as_str()))
    );
    let install = json!({"tool": "install_deps", "args": {"command": "ci"}});
    assert_eq!(authorize(&app, PO, &install).await["decision"], "deny");

    // An edit removes the template: the grant stays stored but grants nothing (fail closed)...
    std::fs::remove_file(set.policies().join("grants.cedar")).unwrap();
    assert!(matches!(
        store.reload(false),
        toolgate::reload::ReloadOutcome::Applied { .. }
    ));
    assert_eq!(authorize(&app, PO, &run_tests()).await["decision"], "deny");
    let (_, list) = send(&app, "GET", "/v1/grants", Some(ALICE), None).await;
    assert_eq!(list["grants"][0]["active"], false, "{list}");
    assert!(
        list["grants"][0]["problem"]
            .as_str()
            .is_some_and(|p| p.contains("no template `grant-tool-access`")),
        "{list}"
    );
    // ...until it is back.
    std::fs::copy(
        repo().join("policies/grants.cedar"),
        set.policies().join("grants.cedar"),
    )
    .unwrap();
    assert!(matches!(
        store.reload(false),
        toolgate::reload::ReloadOutcome::Applied { .. }
    ));
    assert_eq!(authorize(&app, PO, &run_tests()).await["decision"], "allow");
}

/// The real `serve`: a grant survives kill -9, and its timer expires a short one.
#[test]
fn the_served_sidecar_keeps_grants_across_kill_9_and_expires_them() {
    use crate::process::{exchange, start};
    let set = TempSet::new();
    let run_tests = json!({"tool": "run_tests", "args": {}});
    let install = json!({"tool": "install_deps", "args": {"command": "ci"}});
    let decision = |port: u16, call: &Value| {
        exchange(port, "POST", "/v1/authorize", Some(PO), Some(call))
            .unwrap()
            .1["decision"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let mut server = start(&set);
    let (status, g) = exchange(
        server.port,
        "POST",
        "/v1/grants",
        Some(ALICE),
        Some(&grant_body(("Agent", "po-agent"), "run_tests", 3600)),
    )
    .unwrap();
    assert_eq!(status, 201, "{g}");
    let (status, _) = exchange(
        server.port,
        "POST",
        "/v1/grants",
        Some(ALICE),
        Some(&grant_body(("Agent", "po-agent"), "install_deps", 2)),
    )
    .unwrap();
    assert_eq!(status, 201);
    assert_eq!(decision(server.port, &run_tests), "allow");
    assert_eq!(decision(server.port, &install), "allow");
    // The serve timer ends the short grant.
    let started = Instant::now();
    while decision(server.port, &install) != "deny" {
        assert!(started.elapsed() < Duration::from_secs(10), "not expired");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);

    let server = start(&set);
    assert_eq!(decision(server.port, &run_tests), "allow");
    assert_eq!(decision(server.port, &install), "deny");
    let (_, list) = exchange(server.port, "GET", "/v1/grants", Some(ALICE), None).unwrap();
    assert_eq!(list["grants"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["grants"][0]["id"], g["id"]);
    let (_, log) = exchange(
        server.port,
        "GET",
        "/v1/audit?stage=grant",
        Some(ALICE),
        None,
    )
    .unwrap();
    let text = log.to_string();
    assert!(
        text.contains("\"expired\"") && text.matches("\"granted\"").count() == 2,
        "{text}"
    );
}

#[test]
fn a_template_that_could_give_operator_actions_does_not_load() {
    let set = TempSet::new();
    set.append(
        "policies/grants.cedar",
        "\n@id(\"grant-anything\")\npermit (principal in ?principal, action, resource == ?resource);\n",
    );
    let err = toolgate::policy::load(&set.sources())
        .unwrap_err()
        .to_string();
    let out = on(&set, "validate").output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("grant-anything") && text.contains("applies to every action"),
        "{text}"
    );
    assert!(
        text.contains("grants.cedar") && text.contains(":15"),
        "the file and line: {text}\n{err}"
    );

    let set = TempSet::new();
    set.append(
        "policies/grants.cedar",
        "\n@id(\"grant-approve\")\npermit (principal in ?principal, action == Action::\"approve\", resource == ?resource);\n",
    );
    let out = on(&set, "validate").output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("not a tool action"), "{text}");
}
