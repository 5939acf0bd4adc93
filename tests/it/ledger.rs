//! The audit store itself: many records per block, index walks that page across blocks, and
//! the three write modes (group commit, buffered, off).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::http::StatusCode;

use toolgate::api::{AppState, router};
use toolgate::approvals::{Approvals, Ttl};
use toolgate::audit::{Audit, Chain, ChainVerdict, Durability, Entry, Query, verify};
use toolgate::policy::PolicyStore;
use toolgate::storage::Stores;

use crate::audit::Memory;
use crate::helpers::*;

fn entry(i: u64) -> Entry {
    Entry {
        id: format!("d{i}"),
        at_ms: 1_000 + i,
        decision: if i.is_multiple_of(3) { "deny" } else { "allow" }.into(),
        principal: Some(format!("Agent::\"a{}\"", i % 4)),
        tool: Some(format!("t{}", i % 5)),
        conv_id: i.is_multiple_of(2).then(|| "c-even".to_owned()),
        ..Entry::default()
    }
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
    // A page of the log from the middle of a block on.
    let from = audit.store().scan(297, 5).unwrap();
    let keys: Vec<u64> = from.iter().map(|s| s.key_seq).collect();
    assert_eq!(keys, [297, 298, 299, 300, 301]);
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
    let stores = Stores::temporary().unwrap();
    let state = AppState::with_services(
        Arc::new(PolicyStore::new(shipped_snapshot(), None)),
        demo_auth(),
        64 * 1024,
        audit.clone(),
        Arc::new(Approvals::new(stores.approvals, Ttl::default())),
    );
    let app = router(state);
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
    assert!(audit.failure().is_none());
}
