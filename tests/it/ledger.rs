//! The audit store itself: many records per block, index walks that page across blocks, and
//! the three write modes (group commit, buffered, off), and retention with its checkpoint.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::http::StatusCode;

use toolgate::audit::{
    Audit, Chain, ChainVerdict, Checkpoint, Durability, Entry, Head, Query, Record, Retention,
    verify,
};
use toolgate::storage::Stores;

use crate::audit::Memory;
use crate::helpers::*;
use crate::process::{exchange, start_with, toolgate};

fn entry(i: u64) -> Entry {
    raw_entry(serde_json::json!({
        "id": format!("d{i}"),
        "at_ms": 1_000 + i,
        "decision": if i.is_multiple_of(3) { "deny" } else { "allow" },
        "principal": format!("Agent::\"a{}\"", i % 4),
        "tool": format!("t{}", i % 5),
        "conv_id": i.is_multiple_of(2).then_some("c-even"),
    }))
}

/// Writes `n` entries from many tasks at once, so the writer forms batches of many sizes.
async fn fill(audit: &Arc<Audit>, n: u64) {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let audit = audit.clone();
            tokio::spawn(async move { audit.record(entry(i)).await.unwrap() })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

/// Writes `n` entries in waves of `wave` concurrent ones: blocks of at most `wave` records.
async fn fill_in_waves(audit: &Arc<Audit>, n: u64, wave: u64) {
    let start = audit.head().seq;
    for from in (0..n).step_by(usize::try_from(wave).unwrap()) {
        let tasks: Vec<_> = (from..(from + wave).min(n))
            .map(|i| {
                let audit = audit.clone();
                tokio::spawn(async move { audit.record(entry(start + i)).await.unwrap() })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    }
}

/// Every page of `q`, following the cursor.
fn all_pages(audit: &Audit, mut q: Query) -> Vec<u64> {
    let mut seqs = Vec::new();
    loop {
        let page = audit.store().query(&q).unwrap();
        seqs.extend(page.iter().map(|r| r.seq));
        if page.len() < q.limit {
            return seqs;
        }
        q.before_seq = page.last().map(|r| r.seq);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn filtered_queries_page_through_blocks_and_match_a_full_scan() {
    let stores = Stores::temporary().unwrap();
    let audit = Arc::new(Audit::start(stores.audit, Chain::plain(), Durability::Group).unwrap());
    fill(&audit, 600).await;
    assert_eq!(audit.head().seq, 600);
    let all: Vec<_> = audit
        .store()
        .scan(1, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|s| s.record.unwrap())
        .collect();
    assert_eq!(all.len(), 600);
    let queries = [
        Query {
            principal: Some("Agent::\"a1\"".into()),
            ..Query::default()
        },
        Query {
            tool: Some("t3".into()),
            decision: Some("deny".into()),
            ..Query::default()
        },
        Query {
            conv_id: Some("c-even".into()),
            since_ms: Some(1_200),
            until_ms: Some(1_400),
            ..Query::default()
        },
        Query {
            decision: Some("allow".into()),
            ..Query::default()
        },
        // No indexed field: the log itself is walked.
        Query {
            since_ms: Some(1_590),
            ..Query::default()
        },
    ];
    for q in queries {
        let mut expected: Vec<u64> = all
            .iter()
            .filter(|r| {
                let e = &r.entry;
                q.principal
                    .as_ref()
                    .is_none_or(|p| e.principal.as_ref() == Some(p))
                    && q.tool.as_ref().is_none_or(|t| e.tool.as_ref() == Some(t))
                    && q.decision.as_ref().is_none_or(|d| &e.decision == d)
                    && q.conv_id
                        .as_ref()
                        .is_none_or(|c| e.conv_id.as_ref() == Some(c))
                    && q.since_ms.is_none_or(|s| e.at_ms >= s)
                    && q.until_ms.is_none_or(|u| e.at_ms < u)
            })
            .map(|r| r.seq)
            .collect();
        expected.reverse();
        assert!(!expected.is_empty(), "{q:?}");
        let got = all_pages(
            &audit,
            Query {
                limit: 7,
                ..q.clone()
            },
        );
        assert_eq!(got, expected, "{q:?}");
    }
    // Pages of the log come in whole blocks and continue where the last block ended.
    let mut positions = Vec::new();
    let mut from = 0;
    while let Some(last) = {
        let page = audit.store().scan(from, 7).unwrap();
        positions.extend(page.iter().map(|s| s.key_seq));
        page.last().map(|s| s.unit)
    } {
        from = last + 1;
    }
    assert_eq!(positions, (1..=600).collect::<Vec<u64>>());
    assert!(matches!(
        verify(audit.store(), &Chain::plain(), Some(&audit.head())).unwrap(),
        ChainVerdict::Intact { records: 600, .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buffered_entries_are_all_stored_by_close_and_off_stores_none() {
    let mem = Arc::new(Memory::default());
    let audit = Arc::new(Audit::start(mem.clone(), Chain::plain(), Durability::Buffered).unwrap());
    fill(&audit, 300).await;
    audit.close();
    assert!(matches!(
        verify(mem.as_ref(), &Chain::plain(), None).unwrap(),
        ChainVerdict::Intact { records: 300, .. }
    ));

    let mem = Arc::new(Memory::default());
    let audit = Arc::new(Audit::start(mem.clone(), Chain::plain(), Durability::Off).unwrap());
    fill(&audit, 10).await;
    audit.close();
    assert!(!audit.enabled());
    assert!(mem.records.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_failing_store_under_buffered_audit_denies_once_the_failure_is_known() {
    let mem = Arc::new(Memory::default());
    let audit = Arc::new(Audit::start(mem.clone(), Chain::plain(), Durability::Buffered).unwrap());
    let app = app_over_audit(audit.clone());
    let call = r#"{"tool":"read_file","args":{"path":"src/main.rs"}}"#;
    mem.fail.store(true, Ordering::SeqCst);
    // The first answer may go out before its batch fails (that is what buffered means) ...
    let _ = send(&app, "POST", "/v1/authorize", Some(DEV), Some(call)).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while audit.failure().is_none() {
        assert!(std::time::Instant::now() < deadline, "failure never seen");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // ... but once the failure is known, every call waits for its own record and is denied.
    for _ in 0..3 {
        let (s, d) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(call)).await;
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{d}");
        assert_eq!(d["stage"], "audit");
    }
    mem.fail.store(false, Ordering::SeqCst);
    let (s, d) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(call)).await;
    assert_eq!((s, d["decision"].as_str()), (StatusCode::OK, Some("allow")));
    // Buffered: that answer may go out before its batch is stored, which clears the failure.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while audit.failure().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the failure never cleared"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // The log itself says that answered entries may be missing.
    audit.close();
    let records = mem.records.lock().unwrap();
    let note: Record = serde_json::from_str(&records[0].1).unwrap();
    assert_eq!(note.entry.decision, "audit_failure");
    let detail = note.entry.detail.unwrap();
    assert!(
        detail.contains("4 batches") && detail.contains("1 buffered entries were answered"),
        "{detail}"
    );
}

/// One retention pass that cuts something.
async fn prune(audit: &Arc<Audit>, rule: &Retention) -> toolgate::audit::Pruned {
    let (audit, rule) = (audit.clone(), rule.clone());
    tokio::task::spawn_blocking(move || audit.prune(&rule))
        .await
        .unwrap()
        .unwrap()
        .unwrap()
}

fn intact_from(v: ChainVerdict) -> (u64, u64) {
    match v {
        ChainVerdict::Intact { records, first, .. } => (records, first),
        ChainVerdict::Broken { seq, why } => panic!("broken at {seq}: {why}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retention_cuts_whole_blocks_and_the_chain_verifies_from_the_checkpoint() {
    let stores = Stores::temporary().unwrap();
    let audit = Arc::new(Audit::start(stores.audit, Chain::plain(), Durability::Group).unwrap());
    fill_in_waves(&audit, 600, 25).await;
    let rule = Retention {
        keep_records: Some(100),
        max_age_ms: None,
    };
    let pruned = prune(&audit, &rule).await;
    let cp = pruned.checkpoint.clone();
    assert!(cp.seq <= 500 && cp.seq > 475, "{cp:?}");
    assert_eq!(pruned.removed, cp.seq);
    // 600 records and the retention record; everything after the cut is still checked.
    let (records, first) = intact_from(verify(audit.store(), &Chain::plain(), None).unwrap());
    assert_eq!((first, records), (cp.seq + 1, 601 - cp.seq));
    assert!(audit.store().scan(1, 1).unwrap()[0].key_seq > cp.seq);
    // Indexes no longer point below the cut, and still find what is kept.
    let kept = all_pages(
        &audit,
        Query {
            principal: Some("Agent::\"a1\"".into()),
            limit: 50,
            ..Query::default()
        },
    );
    assert!(!kept.is_empty() && kept.iter().all(|s| *s > cp.seq));
    let retention = audit
        .store()
        .query(&Query {
            decision: Some("retention".into()),
            limit: 5,
            ..Query::default()
        })
        .unwrap();
    assert_eq!(retention.len(), 1);
    assert_eq!(
        retention[0].entry.detail.as_deref(),
        Some(cp.attestation().as_str())
    );
    // A head exported at the cut itself is confirmed by the checkpoint.
    let at_cut = Head {
        seq: cp.seq,
        hash: cp.hash.clone(),
    };
    intact_from(verify(audit.store(), &Chain::plain(), Some(&at_cut)).unwrap());

    // Later records and a second cut.
    fill_in_waves(&audit, 300, 25).await;
    let again = prune(&audit, &rule).await;
    assert!(again.checkpoint.seq > cp.seq);
    intact_from(verify(audit.store(), &Chain::plain(), Some(&audit.head())).unwrap());
}

#[tokio::test]
async fn a_cut_made_by_hand_or_a_forged_checkpoint_is_caught() {
    let chain = Chain::keyed(b"k".to_vec());
    let mem = Arc::new(Memory::default());
    let audit = Arc::new(Audit::start(mem.clone(), chain.clone(), Durability::Group).unwrap());
    fill(&audit, 40).await;
    let rule = Retention {
        keep_records: Some(10),
        max_age_ms: None,
    };
    let pruned = prune(&audit, &rule).await;
    assert_eq!(pruned.checkpoint.seq, 30);
    intact_from(verify(mem.as_ref(), &chain, None).unwrap());

    // The checkpoint edited: its seal no longer holds.
    let good = pruned.checkpoint.clone();
    *mem.checkpoint.lock().unwrap() = Some(Checkpoint {
        seq: 29,
        ..good.clone()
    });
    let ChainVerdict::Broken { why, .. } = verify(mem.as_ref(), &chain, None).unwrap() else {
        panic!("forged checkpoint not detected");
    };
    assert!(why.contains("does not hold"), "{why}");

    // More records removed by hand, with a checkpoint sealed by someone holding the key:
    // no retention record attests that cut.
    let r35: Record = {
        let r = mem.records.lock().unwrap();
        serde_json::from_str(&r.iter().find(|(k, _)| *k == 35).unwrap().1).unwrap()
    };
    mem.records.lock().unwrap().retain(|(k, _)| *k > 35);
    *mem.checkpoint.lock().unwrap() = Some(chain.checkpoint(35, &r35.hash, good.at_ms));
    let ChainVerdict::Broken { why, .. } = verify(mem.as_ref(), &chain, None).unwrap() else {
        panic!("cut by hand not detected");
    };
    assert!(why.contains("no retention record"), "{why}");

    // Without a checkpoint, the missing prefix is a deletion.
    *mem.checkpoint.lock().unwrap() = None;
    assert!(matches!(
        verify(mem.as_ref(), &chain, None).unwrap(),
        ChainVerdict::Broken { seq: 1, .. }
    ));
}

#[test]
fn serve_applies_the_configured_retention_and_verify_reports_the_cut() {
    let set = TempSet::new();
    let extra = "[audit]\nretain_records = 5\n";
    let server = start_with(&set, extra);
    let call = serde_json::json!({"tool": "read_file", "args": {"path": "src/main.rs"}});
    for _ in 0..20 {
        let (s, _) =
            exchange(server.port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
        assert_eq!(s, 200);
    }
    drop(server);
    // Retention runs at startup: wait until the oldest records are gone.
    let server = start_with(&set, extra);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, page) = exchange(
            server.port,
            "GET",
            "/v1/audit?limit=1000",
            Some("demo-bob-token"),
            None,
        )
        .unwrap();
        let seqs: Vec<u64> = page["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["seq"].as_u64())
            .collect();
        // The newest records are readable (a page read before the store is ready holds none)
        // and the oldest are gone.
        if seqs.iter().any(|&s| s >= 20) && !seqs.contains(&1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no retention at startup: {seqs:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server);
    let out = toolgate(
        set.dir.path(),
        &["audit", "verify", "--data-dir", "data"],
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("removed by retention"), "{text}");
}

#[tokio::test]
async fn records_outside_the_chain_and_retention_over_a_tampered_log_are_refused() {
    let chain = Chain::keyed(b"k".to_vec());
    let mem = Arc::new(Memory::default());
    let audit = Arc::new(Audit::start(mem.clone(), chain.clone(), Durability::Group).unwrap());
    fill(&audit, 30).await;
    let stored = |k: u64| {
        mem.records
            .lock()
            .unwrap()
            .iter()
            .find(|(s, _)| *s == k)
            .unwrap()
            .1
            .clone()
    };

    // A copy stored at position 0, before the chain's first record.
    let first = stored(1);
    mem.records.lock().unwrap().insert(0, (0, first.clone()));
    let ChainVerdict::Broken { why, .. } = verify(mem.as_ref(), &chain, None).unwrap() else {
        panic!("record before the start not detected");
    };
    assert!(why.contains("before the chain's first record"), "{why}");
    mem.records.lock().unwrap().remove(0);

    // A position stored twice.
    let fifth = stored(5);
    mem.records.lock().unwrap().insert(5, (5, fifth));
    let ChainVerdict::Broken { why, .. } = verify(mem.as_ref(), &chain, None).unwrap() else {
        panic!("duplicate not detected");
    };
    assert!(why.contains("stored twice"), "{why}");
    mem.records.lock().unwrap().remove(5);
    intact_from(verify(mem.as_ref(), &chain, None).unwrap());

    // Retention does not seal a checkpoint over a record that was altered.
    {
        let mut r = mem.records.lock().unwrap();
        let (_, text) = r.iter_mut().find(|(s, _)| *s == 3).unwrap();
        *text = text
            .replace("\"allow\"", "\"deny\"")
            .replace("\"deny\"", "\"allow\"");
        let mut rec: Record = serde_json::from_str(text).unwrap();
        rec.entry.decision = "allow-edited".into();
        *text = serde_json::to_string(&rec).unwrap();
    }
    let rule = Retention {
        keep_records: Some(5),
        max_age_ms: None,
    };
    let refused = {
        let audit = audit.clone();
        tokio::task::spawn_blocking(move || audit.prune(&rule))
            .await
            .unwrap()
    };
    let err = refused.unwrap_err().to_string();
    assert!(
        err.contains("retention refused") && err.contains("record 3"),
        "{err}"
    );
    assert!(mem.checkpoint.lock().unwrap().is_none());
}

#[tokio::test]
async fn a_plain_chain_cannot_vouch_for_a_head_older_than_its_checkpoint() {
    let mem = Arc::new(Memory::default());
    let audit = Arc::new(Audit::start(mem.clone(), Chain::plain(), Durability::Group).unwrap());
    fill(&audit, 20).await;
    let old = audit.head();
    fill(&audit, 20).await;
    let rule = Retention {
        keep_records: Some(5),
        max_age_ms: None,
    };
    prune(&audit, &rule).await;
    let err = verify(mem.as_ref(), &Chain::plain(), Some(&old)).unwrap_err();
    assert!(
        err.to_string()
            .contains("predates the retention checkpoint"),
        "{err}"
    );
    intact_from(verify(mem.as_ref(), &Chain::plain(), Some(&audit.head())).unwrap());
}
