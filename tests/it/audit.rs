//! The audit trail and the approval queue through HTTP, the chain against each kind of
//! tampering, and fail-closed behaviour when the store fails.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use serde_json::{Value, json};

use toolgate::audit::{
    Audit, AuditStore, Chain, ChainVerdict, Checkpoint, Durability, Head, Query, Record,
    StoreError, Stored, verify,
};

use crate::helpers::*;

const BOB: &str = "demo-bob-token";

fn write_call(content: &str) -> Value {
    json!({"tool": "write_file", "args": {"path": "src/lib.rs", "content": content}})
}

#[tokio::test]
async fn an_approval_lets_the_exact_call_through_once() {
    let app = app();
    let pending = authorize(&app, DEV, &write_call("x")).await;
    assert_eq!(pending["decision"], "pending_approval", "{pending}");
    let id = pending["approval_id"].as_str().unwrap().to_owned();
    // Asking again reuses the open approval instead of opening another.
    let again = authorize(&app, DEV, &write_call("x")).await;
    assert_eq!(again["approval_id"], id.as_str());

    // The agent sees it pending; it may not decide it.
    let (s, a) = send(&app, "GET", &format!("/v1/approvals/{id}"), Some(DEV), None).await;
    assert_eq!((s, a["status"].as_str()), (StatusCode::OK, Some("pending")));
    let approve = format!("/v1/approvals/{id}/approve");
    let (s, _) = send(&app, "POST", &approve, Some(DEV), Some("{}")).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    // Before approval, sending the id back does not help.
    let mut early = write_call("x");
    early["approval_id"] = json!(id);
    let d = authorize(&app, DEV, &early).await;
    assert_eq!(d["decision"], "deny");
    assert_eq!(d["errors"][0]["code"], "approval_not_approved");

    let (s, a) = send(
        &app,
        "POST",
        &approve,
        Some(BOB),
        Some(r#"{"reason":"reviewed"}"#),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{a}");
    assert_eq!(a["status"], "approved");
    assert_eq!(a["decided_by"], r#"Human::"bob""#);

    // Other arguments, another agent: refused, and the approval is not spent.
    let mut other = write_call("y");
    other["approval_id"] = json!(id);
    let d = authorize(&app, DEV, &other).await;
    assert_eq!(d["errors"][0]["code"], "approval_mismatch", "{d}");
    let d = authorize(&app, SRE, &early).await;
    assert_eq!(d["decision"], "deny", "{d}");

    let d = authorize(&app, DEV, &early).await;
    assert_eq!(d["decision"], "allow", "{d}");
    assert_eq!(d["stage"], "approval");
    assert_eq!(d["approval_id"], id.as_str());
    // Single use.
    let d = authorize(&app, DEV, &early).await;
    assert_eq!(d["decision"], "deny");
    assert_eq!(d["errors"][0]["code"], "approval_replayed");
    let (_, a) = send(
        &app,
        "GET",
        &format!("/v1/approvals/{id}"),
        Some(ALICE),
        None,
    )
    .await;
    assert_eq!(a["status"], "used");
    // Deciding it again is a conflict.
    let (s, _) = send(&app, "POST", &approve, Some(BOB), Some("{}")).await;
    assert_eq!(s, StatusCode::CONFLICT);
}

#[tokio::test]
async fn approvers_are_chosen_by_policy_and_denials_stick() {
    let app = app();
    let pending = authorize(&app, RELEASE, &write_call("r")).await;
    let id = pending["approval_id"].as_str().unwrap().to_owned();
    // alice owns release-agent: "no approving your own agent" is a policy.
    let (s, e) = send(
        &app,
        "POST",
        &format!("/v1/approvals/{id}/approve"),
        Some(ALICE),
        Some("{}"),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{e}");
    assert_eq!(e["error"], "not_eligible");
    let (s, a) = send(
        &app,
        "POST",
        &format!("/v1/approvals/{id}/deny"),
        Some(BOB),
        Some(r#"{"reason":"no"}"#),
    )
    .await;
    assert_eq!((s, a["status"].as_str()), (StatusCode::OK, Some("denied")));
    let mut resend = write_call("r");
    resend["approval_id"] = json!(id);
    let d = authorize(&app, RELEASE, &resend).await;
    assert_eq!(d["decision"], "deny");
    let (_, list) = send(&app, "GET", "/v1/approvals?status=denied", Some(BOB), None).await;
    assert!(
        list["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["id"] == id.as_str())
    );
}

#[tokio::test]
async fn every_answer_is_in_the_log_and_only_humans_read_it() {
    let app = app();
    let allow = authorize(
        &app,
        DEV,
        &json!({"tool": "read_file", "args": {"path": "src/main.rs"}, "context": {"conv_id": "conv-audit-1"}}),
    )
    .await;
    let deny = authorize(
        &app,
        DEV,
        &json!({"tool": "read_file", "args": {"path": ".env"}, "context": {"conv_id": "conv-audit-1"}}),
    )
    .await;
    let (s, _) = send(
        &app,
        "POST",
        "/v1/authorize",
        Some("wrong-token"),
        Some(r#"{"tool":"echo"}"#),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    let (s, _) = send(&app, "GET", "/v1/audit", Some(DEV), None).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, page) = send(
        &app,
        "GET",
        "/v1/audit?conv_id=conv-audit-1",
        Some(ALICE),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let records = page["records"].as_array().unwrap();
    let ids: Vec<&str> = records
        .iter()
        .map(|r| r["entry"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            deny["decision_id"].as_str().unwrap(),
            allow["decision_id"].as_str().unwrap()
        ]
    );
    // Arguments are kept as a digest and a redacted preview (nothing sensitive in this one).
    assert_eq!(
        records[1]["entry"]["args_preview"],
        r#"{"path":"src/main.rs"}"#
    );
    let (_, page) = send(&app, "GET", "/v1/audit?stage=auth", Some(ALICE), None).await;
    assert_eq!(page["records"].as_array().unwrap().len(), 1);
    let (_, head) = send(&app, "GET", "/v1/audit/head", Some(ALICE), None).await;
    assert_eq!(head["seq"], 3);
    // Paging with the cursor.
    let (_, p1) = send(&app, "GET", "/v1/audit?limit=2", Some(ALICE), None).await;
    let cursor = p1["next_cursor"].as_u64().unwrap();
    let (_, p2) = send(
        &app,
        "GET",
        &format!("/v1/audit?limit=2&cursor={cursor}"),
        Some(ALICE),
        None,
    )
    .await;
    assert_eq!(p2["records"][0]["seq"], 1);
}

/// An in-memory store to tamper with, whose writes can be made to fail.
#[derive(Default)]
pub struct Memory {
    pub records: Mutex<Vec<(u64, String)>>,
    pub fail: AtomicBool,
    pub checkpoint: Mutex<Option<Checkpoint>>,
    pub outage: Mutex<Option<String>>,
}

impl AuditStore for Memory {
    fn append(
        &self,
        batch: &[Record],
        _effects: &[toolgate::audit::Effect],
        _durable: bool,
    ) -> Result<(), StoreError> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(StoreError("injected: disk full".to_owned()));
        }
        let mut r = self.records.lock().unwrap();
        for rec in batch {
            r.push((rec.seq, serde_json::to_string(rec).unwrap()));
        }
        Ok(())
    }
    fn last(&self) -> Result<Option<Record>, StoreError> {
        let r = self.records.lock().unwrap();
        Ok(r.last().map(|(_, j)| serde_json::from_str(j).unwrap()))
    }
    fn scan(&self, from: u64, limit: usize) -> Result<Vec<Stored>, StoreError> {
        let mut r = self.records.lock().unwrap().clone();
        r.sort_by_key(|(k, _)| *k);
        Ok(r.into_iter()
            .filter(|(k, _)| *k >= from)
            .take(limit)
            .map(|(key_seq, j)| Stored {
                unit: key_seq,
                key_seq,
                record: serde_json::from_str(&j).map_err(|e| e.to_string()),
            })
            .collect())
    }
    fn query(&self, _q: &Query) -> Result<Vec<Record>, StoreError> {
        Ok(Vec::new())
    }
    fn cut_point(
        &self,
        through_seq: Option<u64>,
        before_ms: Option<u64>,
    ) -> Result<Option<Record>, StoreError> {
        let r = self.records.lock().unwrap();
        Ok(r.iter()
            .map(|(_, j)| serde_json::from_str::<Record>(j).unwrap())
            .take_while(|rec| {
                through_seq.is_some_and(|t| rec.seq <= t)
                    || before_ms.is_some_and(|b| rec.entry.at_ms < b)
            })
            .last())
    }
    fn cut(&self, cp: &Checkpoint) -> Result<u64, StoreError> {
        let mut r = self.records.lock().unwrap();
        let before = r.len();
        r.retain(|(k, _)| *k > cp.seq);
        *self.checkpoint.lock().unwrap() = Some(cp.clone());
        Ok((before - r.len()) as u64)
    }
    fn checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
        Ok(self.checkpoint.lock().unwrap().clone())
    }
    fn apply(&self, _effects: &[toolgate::audit::Effect]) -> Result<(), StoreError> {
        Ok(())
    }
    fn sync(&self) -> Result<(), StoreError> {
        Ok(())
    }
    fn note_outage(&self, text: Option<&str>) -> Result<(), StoreError> {
        *self.outage.lock().unwrap() = text.map(str::to_owned);
        Ok(())
    }
    fn outage(&self) -> Option<String> {
        self.outage.lock().unwrap().clone()
    }
}

async fn filled(n: u64, chain: &Chain) -> (Arc<Memory>, Head) {
    let mem = Arc::new(Memory::default());
    let audit = Audit::start(mem.clone(), chain.clone(), Durability::Group).unwrap();
    for i in 0..n {
        audit
            .record(raw_entry(json!({
                "id": format!("d{i}"),
                "decision": "allow",
                "principal": format!("Agent::\"a{i}\""),
            })))
            .await
            .unwrap();
    }
    let head = audit.head();
    audit.close();
    (mem, head)
}

fn broken_at(v: ChainVerdict) -> (u64, String) {
    match v {
        ChainVerdict::Broken { seq, why } => (seq, why),
        ChainVerdict::Intact { .. } => panic!("tampering not detected"),
    }
}

#[tokio::test]
async fn verify_names_the_first_broken_link_for_each_kind_of_tampering() {
    let chain = Chain::keyed(b"test-key".to_vec());
    let (mem, head) = filled(6, &chain).await;
    assert!(matches!(
        verify(mem.as_ref(), &chain, Some(&head)).unwrap(),
        ChainVerdict::Intact { records: 6, .. }
    ));
    // Without the key the links do not hold.
    assert!(matches!(
        verify(mem.as_ref(), &Chain::plain(), None).unwrap(),
        ChainVerdict::Broken { seq: 1, .. }
    ));

    // 1. A flipped byte.
    let (mem, _) = filled(6, &chain).await;
    {
        let mut r = mem.records.lock().unwrap();
        r[2].1 = r[2].1.replace("Agent::\\\"a2\\\"", "Agent::\\\"b2\\\"");
        assert!(r[2].1.contains("b2"));
    }
    let (seq, why) = broken_at(verify(mem.as_ref(), &chain, None).unwrap());
    assert_eq!(seq, 3, "{why}");
    assert!(why.contains("altered"), "{why}");

    // 2. A deleted record.
    let (mem, _) = filled(6, &chain).await;
    mem.records.lock().unwrap().remove(3);
    let (seq, why) = broken_at(verify(mem.as_ref(), &chain, None).unwrap());
    assert_eq!(seq, 4, "{why}");
    assert!(why.contains("deleted"), "{why}");

    // 3. Two records swapped.
    let (mem, _) = filled(6, &chain).await;
    {
        let mut r = mem.records.lock().unwrap();
        let (a, b) = (r[1].1.clone(), r[2].1.clone());
        r[1].1 = b;
        r[2].1 = a;
    }
    let (seq, _) = broken_at(verify(mem.as_ref(), &chain, None).unwrap());
    assert_eq!(seq, 2);

    // 4. A record replaced by one with a valid-looking hash of its own (forged without the key
    //    it cannot match; with a plain chain the next link breaks).
    let plain = Chain::plain();
    let (mem, head) = filled(6, &plain).await;
    {
        let mut r = mem.records.lock().unwrap();
        let old: Record = serde_json::from_str(&r[5].1).unwrap();
        let mut entry = old.entry.clone();
        entry.decision = "deny".into();
        let forged = plain.seal(&old.prev, old.seq, entry);
        r[5].1 = serde_json::to_string(&forged).unwrap();
    }
    let (seq, why) = broken_at(verify(mem.as_ref(), &plain, Some(&head)).unwrap());
    assert_eq!(seq, 6);
    assert!(why.contains("replaced"), "{why}");

    // 5. A truncated tail, against the exported head.
    let (mem, head) = filled(6, &chain).await;
    mem.records.lock().unwrap().truncate(4);
    assert!(matches!(
        verify(mem.as_ref(), &chain, None).unwrap(),
        ChainVerdict::Intact { records: 4, .. }
    ));
    let (seq, why) = broken_at(verify(mem.as_ref(), &chain, Some(&head)).unwrap());
    assert_eq!(seq, 5);
    assert!(why.contains("truncated"), "{why}");
}

#[tokio::test]
async fn a_failing_store_denies_reports_unready_and_recovers() {
    let mem = Arc::new(Memory::default());
    let audit = Arc::new(Audit::start(mem.clone(), Chain::plain(), Durability::Group).unwrap());
    let app = app_over_audit(audit.clone());
    let call = r#"{"tool":"read_file","args":{"path":"src/main.rs"}}"#;
    let (s, d) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(call)).await;
    assert_eq!((s, d["decision"].as_str()), (StatusCode::OK, Some("allow")));

    mem.fail.store(true, Ordering::SeqCst);
    let (s, d) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(call)).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(d["decision"], "deny");
    assert_eq!(d["stage"], "audit");
    assert_eq!(d["errors"][0]["code"], "audit_unavailable");
    let (s, r) = send(&app, "GET", "/readyz", None, None).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert!(r["audit_error"].as_str().unwrap().contains("disk full"));

    mem.fail.store(false, Ordering::SeqCst);
    let (s, d) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(call)).await;
    assert_eq!((s, d["decision"].as_str()), (StatusCode::OK, Some("allow")));
    let (s, _) = send(&app, "GET", "/readyz", None, None).await;
    assert_eq!(s, StatusCode::OK);
    // Nothing lost, nothing invented: the two answered decisions and, between them, a note
    // that a batch failed (its caller was denied), chained.
    assert!(matches!(
        verify(mem.as_ref(), &Chain::plain(), None).unwrap(),
        ChainVerdict::Intact { records: 3, .. }
    ));
    let kinds: Vec<String> = mem
        .records
        .lock()
        .unwrap()
        .iter()
        .map(|(_, j)| serde_json::from_str::<Record>(j).unwrap().entry.decision)
        .collect();
    assert_eq!(kinds, ["allow", "audit_failure", "allow"]);
}
