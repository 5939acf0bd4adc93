//! Ledger integrity with the real binary: failures injected between the steps of a state
//! change (`TOOLGATE_FAILPOINTS`), so that a crash or a failed write lands exactly where a
//! debugger breakpoint would. After each, the approval, kill switch, quarantine or grant is
//! in the state its records say, and every stored approval points to a decision in the log.
//!
//! The points: `ledger-write-error` (the write fails before anything is written),
//! `ledger-synced` (the process aborts once the ledger frame is durable, before the store has
//! it) and `audit-stored` (aborts once both have it, before anyone is answered).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use toolgate::approvals::Status;
use toolgate::audit::{ChainVerdict, Record, verify};
use toolgate::storage::Stores;

use crate::helpers::*;
use crate::process::{Server, exchange, start_with_env};

const BOB: &str = "demo-bob-token";

fn write_call(n: u64) -> Value {
    json!({"tool": "write_file", "args": {"path": "src/lib.rs", "content": format!("v{n}")}})
}

/// A server that must abort at its failpoint: waits for it to exit (at most 20 s).
fn aborted(mut server: Server) {
    let start = Instant::now();
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            assert!(!status.success(), "the failpoint did not abort: {status:?}");
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the server did not abort at its failpoint"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Everything the data directory holds, offline: the verified log and the approvals.
struct Offline {
    records: Vec<Record>,
    approvals: Vec<toolgate::approvals::Approval>,
}

fn offline(set: &TempSet) -> Offline {
    let data = set.dir.path().join("data");
    let stores = Stores::open_existing(&data, toolgate::storage::DEFAULT_CACHE_BYTES).unwrap();
    // The chain is keyed by default: the data directory's keyring says how.
    let (chain, _) = toolgate::audit::keys::chain_for_verify(&data, &[]).unwrap();
    let verdict = verify(stores.audit.as_ref(), &chain, None).unwrap();
    assert!(
        matches!(verdict, ChainVerdict::Intact { .. }),
        "{verdict:?}"
    );
    Offline {
        records: stores
            .audit
            .scan(1, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|s| s.record.unwrap())
            .collect(),
        approvals: stores.approvals.all().unwrap(),
    }
}

impl Offline {
    fn approval(&self, id: &str) -> &toolgate::approvals::Approval {
        self.approvals
            .iter()
            .find(|a| a.id == id)
            .unwrap_or_else(|| panic!("approval {id} not stored"))
    }
    fn events(&self, id: &str, event: &str) -> Vec<&Record> {
        self.records
            .iter()
            .filter(|r| r.entry.id == id && r.entry.decision == event)
            .collect()
    }
    /// Every stored approval's decision is in the log, as a pending decision naming it.
    fn approvals_point_to_logged_decisions(&self) {
        let pending: HashSet<(&str, &str)> = self
            .records
            .iter()
            .filter(|r| r.entry.decision == "pending_approval")
            .filter_map(|r| Some((r.entry.id.as_str(), r.entry.detail.as_deref()?)))
            .collect();
        for a in &self.approvals {
            assert!(
                pending
                    .iter()
                    .any(|(d, detail)| *d == a.decision_id && detail.contains(&a.id)),
                "approval {} points to decision {}, which is not in the log as its pending decision",
                a.id,
                a.decision_id
            );
        }
    }
}

fn start(set: &TempSet, failpoints: &str) -> Server {
    if failpoints.is_empty() {
        start_with_env(set, "", &[])
    } else {
        start_with_env(set, "", &[("TOOLGATE_FAILPOINTS", failpoints)])
    }
}

/// Opens a pending approval for call `n`; its id.
fn pending(server: &Server, n: u64) -> String {
    let (status, d) = exchange(
        server.port,
        "POST",
        "/v1/authorize",
        Some(DEV),
        Some(&write_call(n)),
    )
    .unwrap();
    assert_eq!(
        (status, d["decision"].as_str()),
        (200, Some("pending_approval")),
        "{d}"
    );
    d["approval_id"].as_str().unwrap().to_owned()
}

fn approve(server: &Server, id: &str) -> Option<(u16, Value)> {
    exchange(
        server.port,
        "POST",
        &format!("/v1/approvals/{id}/approve"),
        Some(BOB),
        Some(&json!({"reason": "ok"})),
    )
}

fn redeem(server: &Server, id: &str, n: u64) -> Option<(u16, Value)> {
    let mut call = write_call(n);
    call["approval_id"] = json!(id);
    exchange(server.port, "POST", "/v1/authorize", Some(DEV), Some(&call))
}

#[test]
fn a_crash_between_ledger_and_store_completes_each_approval_change_with_its_record() {
    let set = TempSet::new();

    // Opening: the process dies once the pending decision and its approval are durable in
    // the ledger, before the store has either. The restart applies both.
    let server = start(&set, "ledger-synced=return");
    assert!(
        exchange(
            server.port,
            "POST",
            "/v1/authorize",
            Some(DEV),
            Some(&write_call(1))
        )
        .is_none(),
        "answered although the process aborted before its store had the record"
    );
    aborted(server);
    let log = offline(&set);
    assert_eq!(
        log.approvals.len(),
        1,
        "the opened approval was not completed"
    );
    log.approvals_point_to_logged_decisions();
    let first = log.approvals[0].id.clone();

    // Approving: dies after the ledger, before the store.
    let server = start(&set, "ledger-synced=return");
    assert!(approve(&server, &first).is_none());
    aborted(server);
    let log = offline(&set);
    let a = log.approval(&first);
    assert_eq!(a.status, Status::Approved);
    let approved = log.events(&first, "approved");
    assert_eq!(approved.len(), 1, "one record of who approved");
    assert_eq!(
        approved[0].entry.principal.as_deref(),
        Some("Human::\"bob\"")
    );
    assert_eq!(a.decided_by.as_deref(), Some("Human::\"bob\""));

    // Redeeming: dies once record and change are both stored, before the agent is answered.
    let server = start(&set, "audit-stored=return");
    assert!(redeem(&server, &first, 1).is_none());
    aborted(server);
    let log = offline(&set);
    assert_eq!(log.approval(&first).status, Status::Used);
    let allowed: Vec<&Record> = log
        .records
        .iter()
        .filter(|r| r.entry.decision == "allow" && r.entry.stage.as_deref() == Some("approval"))
        .collect();
    assert_eq!(allowed.len(), 1, "the use is in the log once");
    assert!(
        allowed[0]
            .entry
            .detail
            .as_deref()
            .unwrap_or("")
            .contains(&first),
        "{:?}",
        allowed[0].entry
    );
    log.approvals_point_to_logged_decisions();

    // The agent that got no answer sees that its approval was used; a re-send is a replay.
    let server = start(&set, "");
    let (_, shown) = exchange(
        server.port,
        "GET",
        &format!("/v1/approvals/{first}"),
        Some(DEV),
        None,
    )
    .unwrap();
    assert_eq!(shown["status"], "used", "{shown}");
    let (status, d) = redeem(&server, &first, 1).unwrap();
    assert_eq!((status, d["decision"].as_str()), (200, Some("deny")), "{d}");
}

#[test]
fn a_failed_write_changes_nothing_and_the_change_can_be_made_again() {
    let set = TempSet::new();
    let server = start(&set, "");
    let id = pending(&server, 1);
    drop(server);

    // The first state change fails to be written, the next one works.
    let server = start(&set, "ledger-write-error=1*return->off");
    let (status, body) = approve(&server, &id).unwrap();
    assert_eq!(status, 503, "{body}");
    let (_, shown) = exchange(
        server.port,
        "GET",
        &format!("/v1/approvals/{id}"),
        Some(DEV),
        None,
    )
    .unwrap();
    assert_eq!(
        shown["status"], "pending",
        "a failed approval took effect: {shown}"
    );
    let (status, body) = approve(&server, &id).unwrap();
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("approved")),
        "{body}"
    );
    drop(server);

    // A redemption whose record fails is denied, and the approval stays usable: the
    // approved call is not lost.
    let server = start(&set, "ledger-write-error=1*return->off");
    let (status, body) = redeem(&server, &id, 1).unwrap();
    assert_eq!(status, 503, "{body}");
    let (_, shown) = exchange(
        server.port,
        "GET",
        &format!("/v1/approvals/{id}"),
        Some(DEV),
        None,
    )
    .unwrap();
    assert_eq!(shown["status"], "approved", "{shown}");
    let (status, d) = redeem(&server, &id, 1).unwrap();
    assert_eq!(
        (status, d["decision"].as_str()),
        (200, Some("allow")),
        "{d}"
    );

    // A new pending call whose record fails opens no approval.
    drop(server);
    let server = start(&set, "ledger-write-error=1*return->off");
    let (status, _) = exchange(
        server.port,
        "POST",
        "/v1/authorize",
        Some(DEV),
        Some(&write_call(2)),
    )
    .unwrap();
    assert_eq!(status, 503);
    drop(server);
    let log = offline(&set);
    assert_eq!(
        log.approvals.len(),
        1,
        "an approval without its decision was stored"
    );
    assert_eq!(log.approval(&id).status, Status::Used);
    assert_eq!(log.events(&id, "approved").len(), 1);
    log.approvals_point_to_logged_decisions();
}

#[test]
fn kill_switch_and_quarantine_changes_exist_only_with_their_records() {
    let set = TempSet::new();
    let flip = |server: &Server| {
        exchange(
            server.port,
            "POST",
            "/v1/admin/kill-switch",
            Some(ALICE),
            Some(&json!({"on": true, "reason": "drill"})),
        )
    };
    let quarantine = |server: &Server| {
        exchange(
            server.port,
            "POST",
            "/v1/admin/quarantine",
            Some(ALICE),
            Some(&json!({"agent": "dev-agent", "on": true, "reason": "drill"})),
        )
    };
    let switch_on = |server: &Server| {
        exchange(
            server.port,
            "GET",
            "/v1/admin/kill-switch",
            Some(ALICE),
            None,
        )
        .unwrap()
        .1["on"]
            == true
    };

    // A failed write: refused, nothing in force, and still nothing after a restart.
    let server = start(&set, "ledger-write-error=return");
    assert_eq!(flip(&server).unwrap().0, 503);
    assert!(!switch_on(&server));
    assert_eq!(quarantine(&server).unwrap().0, 503);
    drop(server);
    let server = start(&set, "");
    assert!(!switch_on(&server));
    let (_, q) = exchange(
        server.port,
        "GET",
        "/v1/admin/quarantine",
        Some(ALICE),
        None,
    )
    .unwrap();
    assert_eq!(q["quarantined"], json!([]), "{q}");
    drop(server);
    let log = offline(&set);
    assert!(
        !log.records
            .iter()
            .any(|r| r.entry.decision == "kill_switch_on" || r.entry.decision == "quarantine_on"),
        "a change that did not happen is in the log"
    );

    // A crash after the ledger: the restart completes the change, which has its record.
    let server = start(&set, "ledger-synced=return");
    assert!(flip(&server).is_none());
    aborted(server);
    let server = start(&set, "ledger-synced=return");
    assert!(
        switch_on(&server),
        "the recorded kill switch is not in force"
    );
    assert!(quarantine(&server).is_none());
    aborted(server);
    let server = start(&set, "");
    assert!(switch_on(&server));
    let (_, q) = exchange(
        server.port,
        "GET",
        "/v1/admin/quarantine",
        Some(ALICE),
        None,
    )
    .unwrap();
    assert_eq!(
        q["quarantined"][0]["principal"], "Agent::\"dev-agent\"",
        "{q}"
    );
    drop(server);
    let log = offline(&set);
    for word in ["kill_switch_on", "quarantine_on"] {
        let n = log
            .records
            .iter()
            .filter(|r| r.entry.decision == word)
            .count();
        assert_eq!(n, 1, "{word}: {n} records");
    }
}

/// An approval is named to a caller only once it is stored. A second identical call that
/// comes while the first one's approval is being stored waits for it; when that store fails,
/// the second call opens (and stores) its own, and every `approval_id` answered exists.
#[test]
fn an_identical_call_is_never_answered_with_an_approval_that_was_not_stored() {
    let set = TempSet::new();
    // The first new approval is held 600 ms before its store, which then fails once.
    let server = start(
        &set,
        "approval-storing=1*sleep(600);ledger-write-error=1*return",
    );
    let port = server.port;
    let call = write_call(7);
    let first = {
        let call = call.clone();
        std::thread::spawn(move || {
            exchange(port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let (status, second) = exchange(port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
    let (first_status, first) = first.join().unwrap();
    assert_eq!(first_status, 503, "the first store was to fail: {first}");
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["decision"], "pending_approval", "{second}");
    let id = second["approval_id"].as_str().unwrap();
    let (status, approval) =
        exchange(port, "GET", &format!("/v1/approvals/{id}"), Some(DEV), None).unwrap();
    assert_eq!(
        status, 200,
        "answered approval {id} does not exist: {approval}"
    );
    assert_eq!(approval["status"], "pending", "{approval}");
    // A third identical call, after it is stored, reuses it at once.
    let (_, third) = exchange(port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
    assert_eq!(third["approval_id"], second["approval_id"], "{third}");
}

/// State written straight into the store, without the records that would make it, is
/// found: an approval turned approved, one made up, the kill switch turned off, a grant made
/// up, a quarantine lifted by deleting it, and a redeemed approval rolled back to its
/// earlier (once genuine) approved value. `audit verify --state` names each with the record
/// it contradicts, and `serve` refuses to start on it rather than honour it. An honest
/// directory passes both, across restarts.
#[test]
fn state_written_without_its_records_is_named_and_never_served() {
    let set = TempSet::new();
    let server = start(&set, "");
    let approved = pending(&server, 1);
    assert_eq!(approve(&server, &approved).unwrap().0, 200);
    let waiting = pending(&server, 2);
    let used = pending(&server, 3);
    assert_eq!(approve(&server, &used).unwrap().0, 200);
    let post = |path: &str, body: Value| {
        let (status, v) = exchange(server.port, "POST", path, Some(ALICE), Some(&body)).unwrap();
        assert!(status == 200 || status == 201, "{path}: {status} {v}");
        v
    };
    post(
        "/v1/admin/kill-switch",
        json!({"on": true, "reason": "drill"}),
    );
    post(
        "/v1/admin/quarantine",
        json!({"agent": "po-agent", "on": true, "reason": "drill"}),
    );
    let grant = post(
        "/v1/grants",
        json!({"template": "grant-tool-access",
               "principal": {"type": "Agent", "id": "po-agent"},
               "resource": {"type": "Tool", "id": "run_tests"},
               "ttl_s": 600, "reason": "incident 42"}),
    );
    crate::durability::sigterm_and_wait(server);
    // The approved value of `used`, genuine once: kept to roll back to after it is redeemed.
    let before_use = {
        let db = sled::Config::new()
            .path(set.dir.path().join("data"))
            .open()
            .unwrap();
        db.open_tree("approvals")
            .unwrap()
            .get(used.as_bytes())
            .unwrap()
            .unwrap()
            .to_vec()
    };
    // A restart checks the state, and the one after it walks from that check.
    for _ in 0..2 {
        let server = start(&set, "");
        crate::durability::sigterm_and_wait(server);
    }
    let server = start(&set, "");
    // The kill switch is on: redeeming is refused, so turn it off (recorded) first.
    let (status, _) = exchange(
        server.port,
        "POST",
        "/v1/admin/kill-switch",
        Some(ALICE),
        Some(&json!({"on": false, "reason": "drill over"})),
    )
    .unwrap();
    assert_eq!(status, 200);
    let mut call = write_call(3);
    call["approval_id"] = json!(used);
    let (status, d) =
        exchange(server.port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
    assert_eq!(
        (status, d["decision"].as_str()),
        (200, Some("allow")),
        "{d}"
    );
    let (status, _) = exchange(
        server.port,
        "POST",
        "/v1/admin/kill-switch",
        Some(ALICE),
        Some(&json!({"on": true, "reason": "drill again"})),
    )
    .unwrap();
    assert_eq!(status, 200);
    crate::durability::sigterm_and_wait(server);
    let (ok, said) = crate::durability::verify_offline(&set, &["--state"]);
    assert!(ok, "an honest directory: {said}");
    assert!(said.contains("ok: state matches the log"), "{said}");
    assert!(said.contains("from the state check at record"), "{said}");

    // Forged, as someone with write access to the data directory would.
    {
        let db = sled::Config::new()
            .path(set.dir.path().join("data"))
            .open()
            .unwrap();
        let approvals = db.open_tree("approvals").unwrap();
        let mut turned: Value =
            serde_json::from_slice(&approvals.get(waiting.as_bytes()).unwrap().unwrap()).unwrap();
        turned["status"] = json!("approved");
        turned["decided_by"] = json!("Human::\"bob\"");
        approvals
            .insert(waiting.as_bytes(), serde_json::to_vec(&turned).unwrap())
            .unwrap();
        let mut made_up: Value =
            serde_json::from_slice(&approvals.get(approved.as_bytes()).unwrap().unwrap()).unwrap();
        made_up["id"] = json!("forged-approval");
        made_up["args_sha256"] = json!("00".repeat(32));
        approvals
            .insert(b"forged-approval", serde_json::to_vec(&made_up).unwrap())
            .unwrap();
        // Redeemed, then rolled back to its approved value: usable once more.
        approvals.insert(used.as_bytes(), before_use).unwrap();
        let admin = db.open_tree("admin").unwrap();
        let mut switch: Value =
            serde_json::from_slice(&admin.get(b"kill_switch").unwrap().unwrap()).unwrap();
        switch["on"] = json!(false);
        admin
            .insert(b"kill_switch", serde_json::to_vec(&switch).unwrap())
            .unwrap();
        admin
            .remove(b"quarantine/Agent::\"po-agent\"")
            .unwrap()
            .unwrap();
        let grants = db.open_tree("grants").unwrap();
        let gid = grant["id"].as_str().unwrap();
        let mut copied: Value =
            serde_json::from_slice(&grants.get(gid.as_bytes()).unwrap().unwrap()).unwrap();
        copied["id"] = json!("grant-forged");
        copied["principal"] = json!({"type": "Agent", "id": "dev-agent"});
        grants
            .insert(b"grant-forged", serde_json::to_vec(&copied).unwrap())
            .unwrap();
        db.flush().unwrap();
    }
    let (ok, said) = crate::durability::verify_offline(&set, &["--state"]);
    assert!(!ok, "{said}");
    for what in [
        format!("approval {waiting}: the stored value is not the one record"),
        "approval forged-approval: stored, but neither the state check at record".to_owned(),
        format!("approval {used}: the stored value is not the one record"),
        "kill switch: the stored value is not the one record".to_owned(),
        "quarantine of Agent::\"po-agent\": record".to_owned(),
        "removed without a record".to_owned(),
        "grant grant-forged: stored, but neither".to_owned(),
    ] {
        assert!(said.contains(&what), "`{what}` not in:\n{said}");
    }
    let refused = crate::process::serve_refuses(&set, "");
    assert!(
        refused.contains("state contradicts its audit log (6 found)"),
        "{refused}"
    );
}
