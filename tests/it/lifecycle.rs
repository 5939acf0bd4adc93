//! Reloads that are reviewed and remembered: the last good set survives a restart with broken
//! files (stale), nothing-ever-loaded denies everything and is not ready, and a widening
//! change under `reload.widening = "hold"` waits for a director's approval.

use std::sync::Arc;

use serde_json::{Value, json};
use toolgate::api::router;
use toolgate::gateway::Gateway;
use toolgate::reload::{Origin, PolicyStore, ReloadOutcome, StoreOptions, Widening};
use toolgate::storage::Stores;

use crate::helpers::*;

const BOB: &str = "demo-bob-token";

/// `serve`'s start-up over `set`, remembering in `data`.
fn start(set: &TempSet, data: &std::path::Path, widening: Widening) -> (Arc<PolicyStore>, Stores) {
    let stores = Stores::open(data).unwrap();
    let options = StoreOptions {
        remember: Some(stores.policies.clone()),
        widening,
    };
    let (store, _, _) = PolicyStore::start(set.sources(), options).unwrap();
    (Arc::new(store), stores)
}

fn app_over(store: Arc<PolicyStore>) -> axum::Router {
    router(Gateway::with_store(store, demo_auth(), 64 * 1024).unwrap())
}

/// The app over `store` whose records go to `stores` (as `serve` composes them): an approved
/// held change is remembered with its record, in the same data directory.
fn app_with(store: Arc<PolicyStore>, stores: &Stores) -> axum::Router {
    let audit = toolgate::audit::Audit::start(
        stores.audit.clone(),
        toolgate::audit::Chain::plain(),
        toolgate::audit::Durability::Group,
    )
    .unwrap();
    let approvals = toolgate::approvals::Approvals::new(
        stores.approvals.clone(),
        Default::default(),
        Default::default(),
    )
    .unwrap();
    router(Gateway::with_services(
        store,
        demo_auth(),
        64 * 1024,
        Arc::new(audit),
        Arc::new(approvals),
    ))
}

fn read_call() -> Value {
    json!({"tool": "read_file", "args": {"path": "README.md"}})
}

#[tokio::test]
async fn after_a_restart_with_broken_files_the_remembered_set_serves_stale() {
    let set = TempSet::new();
    let data = tempfile::tempdir().unwrap();
    let good = {
        let (store, _stores) = start(&set, data.path(), Widening::Apply);
        assert_eq!(store.origin(), Origin::Files);
        store.current().revision.clone()
    };
    // Broken while the sidecar was down.
    set.append("policies/tiers.cedar", BROKEN_POLICY);
    let (store, _stores) = start(&set, data.path(), Widening::Apply);
    assert_eq!(store.origin(), Origin::Remembered);
    assert_eq!(store.current().revision, good);
    assert!(store.stale());
    let app = app_over(store);
    assert_eq!(
        authorize(&app, DEV, &read_call()).await["decision"],
        "allow"
    );
    let (status, ready) = send(&app, "GET", "/readyz", None, None).await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["stale"], true);
    assert_eq!(ready["policy_origin"], "remembered");
    assert!(
        ready["last_reload_error_at"]
            .as_str()
            .unwrap()
            .contains("tiers.cedar"),
        "{ready}"
    );
    let (_, p) = send(&app, "GET", "/v1/policies", Some(ALICE), None).await;
    assert_eq!(p["stale"], true, "{p}");
    assert_eq!(p["revision"], good.as_str());
    let (_, metrics) = send_text(&app, "/metrics").await;
    assert!(metrics.contains("toolgate_policy_stale 1"), "{metrics}");
}

#[tokio::test]
async fn with_no_good_set_ever_everything_is_denied_and_not_ready_until_fixed() {
    let set = TempSet::new();
    let data = tempfile::tempdir().unwrap();
    let tiers = std::fs::read_to_string(set.policies().join("tiers.cedar")).unwrap();
    set.append("policies/tiers.cedar", BROKEN_POLICY);
    let (store, _stores) = start(&set, data.path(), Widening::Hold);
    assert_eq!(store.origin(), Origin::Nothing);
    let app = app_over(store.clone());
    let answer = authorize(&app, DEV, &read_call()).await;
    assert_eq!(answer["decision"], "deny", "{answer}");
    let (status, ready) = send(&app, "GET", "/readyz", None, None).await;
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["ready"], false);
    // The fix is picked up, and from nothing it applies even under `hold` (nobody could
    // approve it: the empty set permits nothing).
    set.write("policies/tiers.cedar", &tiers);
    assert!(matches!(
        store.reload(false),
        ReloadOutcome::Applied { review: None, .. }
    ));
    assert_eq!(
        authorize(&app, DEV, &read_call()).await["decision"],
        "allow"
    );
    let (status, _) = send(&app, "GET", "/readyz", None, None).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_widening_change_is_held_until_a_director_approves_that_revision() {
    let set = TempSet::new();
    let data = tempfile::tempdir().unwrap();
    let (store, _stores) = start(&set, data.path(), Widening::Hold);
    let app = app_with(store.clone(), &_stores);
    let live = store.current().revision.clone();
    let po_call = json!({"tool": "run_tests", "args": {}});
    assert_eq!(authorize(&app, PO, &po_call).await["decision"], "deny");

    // A narrowing change applies at once (when the solver proves it; unproved counts as
    // widening and is held).
    set.append("policies/roles.cedar", PO_RUNS_TESTS);
    let outcome = store.reload(false);
    let ReloadOutcome::Held { to, review, .. } = outcome else {
        panic!("a widening change must be held: {outcome:?}");
    };
    assert!(review.widens());
    if review.proved {
        assert_eq!(review.widened, ["run_tests"]);
    }
    assert_eq!(store.current().revision, live, "the live set stays");
    assert_eq!(authorize(&app, PO, &po_call).await["decision"], "deny");
    let (_, p) = send(&app, "GET", "/v1/policies", Some(ALICE), None).await;
    assert_eq!(p["held"]["revision"], to.as_str(), "{p}");
    assert_eq!(p["stale"], true);

    // Who may approve is Cedar's: bob is an approver, not a director.
    let approve = |token: &'static str, revision: String| {
        let app = app.clone();
        async move {
            post(
                &app,
                "/v1/policies/held/approve",
                token,
                &json!({"revision": revision}),
            )
            .await
        }
    };
    let (status, body) = approve(BOB, to.clone()).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = approve(DEV, to.clone()).await;
    assert_eq!(status, 403, "agents approve nothing: {body}");
    let (status, body) = approve(ALICE, "sha256:0000000000000000".to_owned()).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"], "held_revision_mismatch", "{body}");
    assert_eq!(store.current().revision, live);

    let (status, body) = approve(ALICE, to.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["applied"], to.as_str());
    assert_eq!(store.current().revision, to);
    assert!(!store.stale());
    assert_eq!(authorize(&app, PO, &po_call).await["decision"], "allow");
    // Replayed: nothing is held any more.
    let (status, _) = approve(ALICE, to.clone()).await;
    assert_eq!(status, 404);

    // The approval is in the audit log, and the approved set is what a restart remembers.
    let (_, log) = send(&app, "GET", "/v1/audit?stage=reload", Some(ALICE), None).await;
    let text = log.to_string();
    assert!(text.contains("approved by Human::"), "{text}");
    assert!(text.contains("held_approval_refused"), "{text}");
    drop(app);
    drop(store);
    drop(_stores);
    set.append("policies/tiers.cedar", BROKEN_POLICY);
    let (store, _stores) = start(&set, data.path(), Widening::Hold);
    assert_eq!(store.origin(), Origin::Remembered);
    assert_eq!(store.current().revision, to);
}

#[test]
fn a_reverted_held_change_is_dropped_and_a_narrowing_applies_under_hold() {
    let set = TempSet::new();
    let data = tempfile::tempdir().unwrap();
    let (store, _stores) = start(&set, data.path(), Widening::Hold);
    let roles = std::fs::read_to_string(set.policies().join("roles.cedar")).unwrap();
    set.append("policies/roles.cedar", PO_RUNS_TESTS);
    assert!(matches!(store.reload(false), ReloadOutcome::Held { .. }));
    set.write("policies/roles.cedar", &roles);
    assert!(matches!(store.reload(false), ReloadOutcome::Unchanged));
    assert!(store.held().is_none());
    if toolgate::review::diff::find_solver().is_err() {
        // Without a solver nothing is proved, so every change is held: see the test above.
        return;
    }
    set.append(
        "policies/elevated.cedar",
        "\n@id(\"no-git-log\")\nforbid (principal, action == Action::\"git_log\", resource);\n",
    );
    let outcome = store.reload(false);
    let ReloadOutcome::Applied {
        review: Some(r), ..
    } = outcome
    else {
        panic!("a proved narrowing applies: {outcome:?}");
    };
    assert_eq!(r.narrowed, ["git_log"]);
    assert!(r.widened.is_empty() && r.proved);
}

/// Deployment data is policy: a new role for an agent in `entities.json` is held under
/// `widening = "hold"` like a policy change, the hold names what changed in which entity, a
/// director approves it, and `toolgate diff` reports it (and fails on it as a widening).
#[tokio::test]
async fn a_data_change_is_reviewed_and_held_like_a_policy_change() {
    let set = TempSet::new();
    let before = set.dir.path().join("before");
    copy_dir(&set.policies(), &before);
    let data = tempfile::tempdir().unwrap();
    let (store, stores) = start(&set, data.path(), Widening::Hold);
    let app = app_with(store.clone(), &stores);
    let live = store.current().revision.clone();
    let po_call = json!({"tool": "run_tests", "args": {}});
    assert_eq!(authorize(&app, PO, &po_call).await["decision"], "deny");

    // The product owner's agent becomes a developer: nothing in a .cedar file changed.
    let path = set.policies().join("entities.json");
    let mut entities: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for e in entities.as_array_mut().unwrap() {
        if e["uid"] == json!({"type": "Agent", "id": "po-agent"}) {
            e["parents"]
                .as_array_mut()
                .unwrap()
                .push(json!({"type": "Role", "id": "developer"}));
        }
    }
    std::fs::write(&path, serde_json::to_string_pretty(&entities).unwrap()).unwrap();
    let outcome = store.reload(false);
    let ReloadOutcome::Held { to, review, .. } = outcome else {
        panic!("a data change must be held: {outcome:?}");
    };
    assert!(
        review
            .widened
            .contains(&"data Agent::\"po-agent\"".to_owned()),
        "{review:?}"
    );
    assert_eq!(
        review.data,
        ["Agent::\"po-agent\" parent + Role::\"developer\""],
        "{review:?}"
    );
    assert_eq!(store.current().revision, live, "the live data stays");
    assert_eq!(authorize(&app, PO, &po_call).await["decision"], "deny");
    // The hold shows the data diff.
    let (_, p) = send(&app, "GET", "/v1/policies", Some(ALICE), None).await;
    assert_eq!(p["held"]["revision"], to.as_str(), "{p}");
    assert_eq!(p["held"]["review"]["data"], json!(review.data), "{p}");
    let (status, body) = post(
        &app,
        "/v1/policies/held/approve",
        BOB,
        &json!({"revision": to}),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = post(
        &app,
        "/v1/policies/held/approve",
        ALICE,
        &json!({"revision": to}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(authorize(&app, PO, &po_call).await["decision"], "allow");

    // `toolgate diff OLD NEW` reports the data change and fails on it as a widening.
    let out = toolgate()
        .arg("diff")
        .arg(&before)
        .arg(set.policies())
        .arg("--schemas")
        .arg(set.dir.path().join("schemas"))
        .args(["--fail-on", "widening"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("Agent::\"po-agent\" parent + Role::\"developer\""),
        "{text}"
    );
}
