//! Issue 21 item 5: stored approvals do not pile up. The expiry tick marks overdue approvals
//! expired (each with its record), removes ended ones (denied, used, expired) after
//! `[approvals] retain_secs` with one `approvals_removed` record naming them, and keeps
//! pending and approved ones. Listings by status read the indexes, not the whole store, and
//! answer as before. The retention comes from the config and is checked at load.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;
use toolgate::api::router;
use toolgate::approvals::{Approvals, Bounds, Ttl};
use toolgate::audit::{Audit, Chain, Durability, Record};
use toolgate::config::Config;
use toolgate::gateway::Gateway;
use toolgate::gateway::expire_due;
use toolgate::storage::Stores;

const BOB: &str = "demo-bob-token";

/// The router over the shipped set, approvals living `ttl_secs` and kept `retain_secs` after
/// they end; also its state (to run the expiry tick) and audit trail.
fn sidecar(ttl_secs: u64, retain_secs: u64) -> (Router, Gateway, Arc<Audit>) {
    let stores = Stores::temporary().unwrap();
    let audit = Arc::new(Audit::start(stores.audit, Chain::plain(), Durability::Group).unwrap());
    let ttl = Ttl {
        default_secs: ttl_secs,
        ..Ttl::default()
    };
    let approvals = Approvals::new(stores.approvals, ttl, Bounds::default())
        .unwrap()
        .with_retention(retain_secs);
    let state = Gateway::with_services(
        Arc::new(toolgate::reload::PolicyStore::new(shipped_snapshot(), None)),
        demo_auth(),
        64 * 1024,
        audit.clone(),
        Arc::new(approvals),
    );
    (router(state.clone()), state, audit)
}

/// A write that needs approval, distinct for each `n`.
fn write(n: usize) -> Value {
    json!({"tool": "write_file", "args": {"path": "src/lib.rs", "content": format!("change {n}")}})
}

async fn opens(app: &Router, n: usize) -> String {
    let d = authorize(app, DEV, &write(n)).await;
    assert_eq!(d["decision"], "pending_approval", "{d}");
    d["approval_id"].as_str().unwrap().to_owned()
}

async fn decides(app: &Router, id: &str, verb: &str) {
    let (status, a) = post(app, &format!("/v1/approvals/{id}/{verb}"), BOB, &json!({})).await;
    assert_eq!(status, StatusCode::OK, "{a}");
}

async fn shown(app: &Router, id: &str) -> (StatusCode, Value) {
    send(
        app,
        "GET",
        &format!("/v1/approvals/{id}"),
        Some(ALICE),
        None,
    )
    .await
}

fn removals(audit: &Audit) -> Vec<Record> {
    recorded_at(audit, "approval")
        .into_iter()
        .filter(|r| r.entry.decision == "approvals_removed")
        .collect()
}

#[tokio::test]
async fn ended_approvals_are_removed_after_the_retention_with_one_record() {
    let (app, state, audit) = sidecar(300, 1);
    let denied = opens(&app, 0).await;
    let used = opens(&app, 1).await;
    let approved = opens(&app, 2).await;
    let pending = opens(&app, 3).await;
    decides(&app, &denied, "deny").await;
    decides(&app, &used, "approve").await;
    decides(&app, &approved, "approve").await;
    let mut call = write(1);
    call["approval_id"] = json!(used);
    assert_eq!(authorize(&app, DEV, &call).await["decision"], "allow");

    // Within the retention nothing goes.
    expire_due(&state).await;
    assert!(removals(&audit).is_empty());
    assert_eq!(shown(&app, &denied).await.0, StatusCode::OK);

    tokio::time::sleep(Duration::from_millis(1100)).await;
    expire_due(&state).await;
    let removed = removals(&audit);
    assert_eq!(removed.len(), 1, "one record per retention pass");
    let e = &removed[0].entry;
    assert_eq!(e.reasons, ["retention"]);
    let detail = e.detail.as_deref().unwrap();
    assert!(detail.starts_with("2 ended approvals removed"), "{detail}");
    for id in [&denied, &used] {
        assert!(detail.contains(id.as_str()), "{detail} names {id}");
        let (status, body) = shown(&app, id).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    }
    for (id, status) in [(&approved, "approved"), (&pending, "pending")] {
        assert!(!detail.contains(id.as_str()), "{detail} keeps {id}");
        let (code, body) = shown(&app, id).await;
        assert_eq!(code, StatusCode::OK, "{body}");
        assert_eq!(body["status"], status);
    }
    // A removed approval is gone from listings too; the others are listed as before.
    let (_, all) = send(&app, "GET", "/v1/approvals?status=all", Some(ALICE), None).await;
    let ids: Vec<&str> = all["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [pending.as_str(), approved.as_str()]);
    // The history stays in the log, and a second tick has nothing to do.
    assert!(
        recorded_at(&audit, "approval")
            .iter()
            .any(|r| r.entry.id == denied && r.entry.decision == "denied")
    );
    expire_due(&state).await;
    assert_eq!(removals(&audit).len(), 1);
}

#[tokio::test]
async fn overdue_approvals_are_marked_expired_with_their_records_and_kept() {
    let (app, state, audit) = sidecar(1, toolgate::approvals::RETAIN_SECS);
    let waiting = opens(&app, 0).await;
    let approved = opens(&app, 1).await;
    decides(&app, &approved, "approve").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    expire_due(&state).await;
    let expired: Vec<Record> = recorded_at(&audit, "approval")
        .into_iter()
        .filter(|r| r.entry.decision == "expired")
        .collect();
    let mut ids: Vec<&str> = expired.iter().map(|r| r.entry.id.as_str()).collect();
    ids.sort_unstable();
    let mut want = [waiting.as_str(), approved.as_str()];
    want.sort_unstable();
    assert_eq!(ids, want);
    for r in &expired {
        assert_eq!(r.entry.reasons, ["approval_timeout"]);
        assert_eq!(r.entry.principal.as_deref(), Some("Agent::\"dev-agent\""));
    }
    // Stored as expired (kept for the retention), listed as expired, no longer pending.
    for id in [&waiting, &approved] {
        let (status, body) = shown(&app, id).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["status"], "expired");
    }
    let (_, list) = send(
        &app,
        "GET",
        "/v1/approvals?status=expired",
        Some(ALICE),
        None,
    )
    .await;
    assert_eq!(list["approvals"].as_array().unwrap().len(), 2, "{list}");
    let (_, list) = send(
        &app,
        "GET",
        "/v1/approvals?status=pending",
        Some(ALICE),
        None,
    )
    .await;
    assert_eq!(list["approvals"], json!([]));
    assert!(removals(&audit).is_empty());
    // Expired once: a second tick records nothing more.
    expire_due(&state).await;
    let again = recorded_at(&audit, "approval")
        .iter()
        .filter(|r| r.entry.decision == "expired")
        .count();
    assert_eq!(again, 2);
}

#[tokio::test]
async fn listings_by_status_are_newest_first_bounded_and_per_agent() {
    let (app, _, _) = sidecar(300, 60);
    let mut ids = Vec::new();
    for n in 0..6 {
        ids.push(opens(&app, n).await);
    }
    let sre = {
        let d = authorize(&app, SRE, &write(0)).await;
        d["approval_id"].as_str().unwrap().to_owned()
    };
    decides(&app, &ids[0], "deny").await;
    decides(&app, &ids[1], "approve").await;
    decides(&app, &ids[2], "approve").await;
    let listed = |v: &Value| -> Vec<String> {
        v["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let get = |q: &'static str, token: &'static str| {
        let app = app.clone();
        async move {
            let (status, v) =
                send(&app, "GET", &format!("/v1/approvals{q}"), Some(token), None).await;
            assert_eq!(status, StatusCode::OK, "{v}");
            v
        }
    };
    let pending = get("?status=pending", ALICE).await;
    assert_eq!(
        listed(&pending),
        [sre.clone(), ids[5].clone(), ids[4].clone(), ids[3].clone()]
    );
    assert!(
        pending["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["status"] == "pending")
    );
    assert_eq!(
        listed(&get("?status=pending&limit=2", ALICE).await),
        [sre.clone(), ids[5].clone()]
    );
    // An agent sees only its own, and the limit counts those it sees.
    assert_eq!(
        listed(&get("?status=pending&limit=2", DEV).await),
        [ids[5].clone(), ids[4].clone()]
    );
    assert_eq!(
        listed(&get("?status=pending", SRE).await),
        std::slice::from_ref(&sre)
    );
    assert_eq!(
        listed(&get("?status=approved", ALICE).await),
        [ids[2].clone(), ids[1].clone()]
    );
    assert_eq!(
        listed(&get("?status=approved&limit=1", DEV).await),
        [ids[2].clone()]
    );
    assert!(listed(&get("?status=approved", SRE).await).is_empty());
    assert_eq!(
        listed(&get("?status=denied", ALICE).await),
        [ids[0].clone()]
    );
    let mut all = ids.clone();
    all.push(sre.clone());
    all.reverse();
    assert_eq!(listed(&get("", ALICE).await), all);
    assert_eq!(listed(&get("?status=all&limit=3", ALICE).await), all[..3]);
    assert_eq!(listed(&get("?status=all&limit=3", SRE).await), [sre]);
}

#[test]
fn the_retention_is_configured_and_checked_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let load = |approvals: &str| {
        let path = dir.path().join("toolgate.toml");
        std::fs::write(&path, format!("[approvals]\n{approvals}\n")).unwrap();
        Config::from_file(&path).map_err(|e| {
            use miette::Diagnostic;
            format!(
                "{e} ({})",
                e.help().map(|h| h.to_string()).unwrap_or_default()
            )
        })
    };
    assert_eq!(
        load("").unwrap().approval_retain_secs,
        toolgate::approvals::RETAIN_SECS
    );
    assert_eq!(load("retain_secs = 60").unwrap().approval_retain_secs, 60);
    for bad in ["retain_secs = 0", "retain_secs = 31536001"] {
        let e = load(bad).unwrap_err();
        let n = bad.trim_start_matches("retain_secs = ");
        assert!(
            e.contains(&format!("`approvals.retain_secs` = {n} is out of range")),
            "{bad}: {e}"
        );
        assert!(e.contains("use 1 to 31536000"), "{e}");
    }
    assert!(
        load("retain_secs = -1")
            .unwrap_err()
            .contains("retain_secs")
    );
}

/// The real sidecar removes a denied approval about `retain_secs` after it was denied.
#[test]
fn the_sidecar_removes_ended_approvals_after_the_configured_retention() {
    use crate::process::{exchange, start_with};
    let set = TempSet::new();
    let server = start_with(&set, "[approvals]\nretain_secs = 1\n");
    let (status, d) = exchange(
        server.port,
        "POST",
        "/v1/authorize",
        Some(DEV),
        Some(&write(0)),
    )
    .unwrap();
    assert_eq!(status, 200, "{d}");
    let id = d["approval_id"].as_str().unwrap().to_owned();
    let (status, a) = exchange(
        server.port,
        "POST",
        &format!("/v1/approvals/{id}/deny"),
        Some(BOB),
        Some(&json!({})),
    )
    .unwrap();
    assert_eq!(status, 200, "{a}");
    let denied_at = Instant::now();
    let path = format!("/v1/approvals/{id}");
    loop {
        let (status, body) = exchange(server.port, "GET", &path, Some(ALICE), None).unwrap();
        if status == 404 {
            break;
        }
        assert_eq!(body["status"], "denied", "{body}");
        assert!(
            denied_at.elapsed() < Duration::from_secs(15),
            "still stored {:?} after it was denied",
            denied_at.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Not before the retention passed (the tick runs every second).
    assert!(
        denied_at.elapsed() >= Duration::from_millis(900),
        "{:?}",
        denied_at.elapsed()
    );
}
