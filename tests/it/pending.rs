//! Issue 20 item 8: pending approvals are bounded per agent and in total. Past a bound, a call
//! that would open another is a recorded deny at stage `approval_limit`, answered 429
//! `too_many_pending_approvals`, and nothing is stored. Deciding or expiring one frees a place;
//! the count survives a restart; the bounds come from `[approvals]` and are checked at load.

use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;
use toolgate::api::router;
use toolgate::approvals::{Approvals, Bounds, Ttl};
use toolgate::audit::{Audit, Chain, Durability};
use toolgate::config::Config;
use toolgate::gateway::Gateway;
use toolgate::storage::Stores;

const BOB: &str = "demo-bob-token";

/// The router over the shipped set with approvals bounded by `bounds`, living `ttl_secs`,
/// stored in `stores`; also the audit trail.
fn bounded(stores: Stores, bounds: Bounds, ttl_secs: u64) -> (Router, Arc<Audit>) {
    let audit = Arc::new(Audit::start(stores.audit, Chain::plain(), Durability::Group).unwrap());
    let ttl = Ttl {
        default_secs: ttl_secs,
        ..Ttl::default()
    };
    let approvals = Approvals::new(stores.approvals, ttl, bounds).unwrap();
    let state = Gateway::with_services(
        Arc::new(toolgate::reload::PolicyStore::new(shipped_snapshot(), None)),
        demo_auth(),
        64 * 1024,
        audit.clone(),
        Arc::new(approvals),
    );
    (router(state), audit)
}

fn bounds(per_agent: usize, total: usize) -> Bounds {
    Bounds { per_agent, total }
}

/// A write that needs approval, distinct for each `n`.
fn write(n: usize) -> Value {
    json!({"tool": "write_file", "args": {"path": "src/lib.rs", "content": format!("change {n}")}})
}

/// Sends `write(n)` as `token`; asserts it opened (or reused) an approval, and returns its id.
async fn opens(app: &Router, token: &str, n: usize) -> String {
    let d = authorize(app, token, &write(n)).await;
    assert_eq!(d["decision"], "pending_approval", "{d}");
    d["approval_id"].as_str().unwrap().to_owned()
}

/// The number of approvals pending, as a human lists them.
async fn pending_listed(app: &Router) -> usize {
    let (status, list) = send(
        app,
        "GET",
        "/v1/approvals?status=pending",
        Some(ALICE),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list["approvals"].as_array().unwrap().len()
}

/// Asserts `answer` is the 429 of a full approval queue for `scope` at `limit`.
fn assert_full(status: StatusCode, answer: &Value, scope: &str, limit: u64) {
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{answer}");
    assert_eq!(answer["error"], "too_many_pending_approvals", "{answer}");
    assert_eq!(answer["decision"], "deny");
    assert_eq!(answer["stage"], "approval_limit");
    assert_eq!(answer["scope"], scope);
    assert_eq!(answer["limit"], limit);
    assert_eq!(answer["pending"], limit);
    assert!(answer["retry_after"].as_u64().unwrap() >= 1, "{answer}");
    assert!(
        answer.get("approval_id").is_none_or(Value::is_null),
        "{answer}"
    );
    assert_eq!(answer["errors"][0]["code"], "too_many_pending_approvals");
}

#[tokio::test]
async fn an_agent_past_its_bound_gets_429_and_others_still_get_approvals() {
    let (app, audit) = bounded(Stores::temporary().unwrap(), bounds(3, 100), 300);
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(opens(&app, DEV, n).await);
    }
    let (status, answer) = decide(&app, DEV, &write(3)).await;
    assert_full(status, &answer, "agent", 3);
    // The refusal is a decision like any other: recorded, with why.
    let recorded = recorded_at(&audit, "approval_limit");
    assert_eq!(recorded.len(), 1);
    let e = &recorded[0].entry;
    assert_eq!(e.decision, "deny");
    assert_eq!(e.id, answer["decision_id"].as_str().unwrap());
    assert_eq!(e.principal.as_deref(), Some("Agent::\"dev-agent\""));
    assert_eq!(e.reasons, ["too_many_pending_approvals"]);
    // The same call as a pending one reuses its approval: no new place is needed.
    assert_eq!(opens(&app, DEV, 1).await, ids[1]);
    // Another agent is not held back by this one's queue.
    opens(&app, SRE, 0).await;
    // Nothing was stored for the refused call.
    assert_eq!(pending_listed(&app).await, 4);
}

#[tokio::test]
async fn the_total_bound_holds_across_agents() {
    let (app, audit) = bounded(Stores::temporary().unwrap(), bounds(3, 4), 300);
    for n in 0..3 {
        opens(&app, DEV, n).await;
    }
    opens(&app, SRE, 0).await;
    // sre-agent has one of its three, but the four places are taken.
    let (status, answer) = decide(&app, SRE, &write(1)).await;
    assert_full(status, &answer, "total", 4);
    let (status, answer) = decide(&app, DEV, &write(9)).await;
    assert_full(status, &answer, "agent", 3);
    assert_eq!(recorded_at(&audit, "approval_limit").len(), 2);
    assert_eq!(pending_listed(&app).await, 4);
}

#[tokio::test]
async fn approving_denying_and_expiring_free_a_place() {
    let (app, _) = bounded(Stores::temporary().unwrap(), bounds(2, 100), 300);
    let first = opens(&app, DEV, 0).await;
    let second = opens(&app, DEV, 1).await;
    assert_full_for(&app, 2).await;
    let (status, a) = post(
        &app,
        &format!("/v1/approvals/{first}/approve"),
        BOB,
        &json!({}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{a}");
    let third = opens(&app, DEV, 2).await;
    assert_full_for(&app, 3).await;
    // Using the approved one does not take its place back.
    let mut used = write(0);
    used["approval_id"] = json!(first);
    assert_eq!(authorize(&app, DEV, &used).await["decision"], "allow");
    assert_full_for(&app, 3).await;
    let (status, a) = post(
        &app,
        &format!("/v1/approvals/{second}/deny"),
        BOB,
        &json!({}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{a}");
    opens(&app, DEV, 3).await;
    assert_full_for(&app, 4).await;
    assert_ne!(third, second);

    // Expired approvals do not count, whether or not the expiry sweep has marked them yet.
    let (app, _) = bounded(Stores::temporary().unwrap(), bounds(2, 100), 1);
    opens(&app, DEV, 0).await;
    opens(&app, DEV, 1).await;
    assert_full_for(&app, 2).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    opens(&app, DEV, 2).await;
    opens(&app, DEV, 3).await;
    assert_full_for(&app, 4).await;
}

/// dev-agent's next new write (`n`) is refused by its bound.
async fn assert_full_for(app: &Router, n: usize) {
    let (status, answer) = decide(app, DEV, &write(n)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{answer}");
    assert_eq!(answer["error"], "too_many_pending_approvals");
}

#[tokio::test]
async fn pending_approvals_count_after_a_restart() {
    let data = tempfile::tempdir().unwrap();
    {
        let (app, _) = bounded(Stores::open(data.path()).unwrap(), bounds(2, 100), 300);
        opens(&app, DEV, 0).await;
        opens(&app, DEV, 1).await;
    }
    let (app, _) = bounded(Stores::open(data.path()).unwrap(), bounds(2, 100), 300);
    let (status, answer) = decide(&app, DEV, &write(2)).await;
    assert_full(status, &answer, "agent", 2);
    // The open ones are still found for their exact calls.
    opens(&app, DEV, 1).await;
}

fn config(dir: &Path, approvals: &str) -> Result<Config, String> {
    let path = dir.join("toolgate.toml");
    std::fs::write(&path, format!("[approvals]\n{approvals}\n")).unwrap();
    Config::from_file(&path).map_err(|e| {
        use miette::Diagnostic;
        format!(
            "{e} ({})",
            e.help().map(|h| h.to_string()).unwrap_or_default()
        )
    })
}

#[test]
fn approval_bounds_are_configured_and_checked_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let defaults = config(dir.path(), "").unwrap().approval_bounds;
    assert_eq!(defaults, bounds(50, 1000));
    let set = config(dir.path(), "max_pending_per_agent = 5\nmax_pending = 20").unwrap();
    assert_eq!(set.approval_bounds, bounds(5, 20));
    for (bad, key) in [
        (
            "max_pending_per_agent = 0",
            "`approvals.max_pending_per_agent` = 0",
        ),
        ("max_pending = 0", "`approvals.max_pending` = 0"),
        ("max_pending = 100001", "`approvals.max_pending` = 100001"),
        (
            "max_pending_per_agent = 18446744073709551615",
            "`approvals.max_pending_per_agent`",
        ),
        (
            "max_pending_per_agent = 30\nmax_pending = 20",
            "`approvals.max_pending_per_agent` = 30 is above `approvals.max_pending` = 20",
        ),
    ] {
        let e = config(dir.path(), bad).unwrap_err();
        assert!(e.contains(key), "{bad}: {e}");
    }
    let e = config(dir.path(), "max_pending = -1").unwrap_err();
    assert!(e.contains("max_pending"), "{e}");
}
