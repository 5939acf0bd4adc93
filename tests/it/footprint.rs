//! Issue 20 item 11: the data directory's memory and disk have bounds someone chose. The page
//! cache comes from `[audit] cache_mb` (sled's own default is 1 GiB), and audit records stay
//! small on disk.

use std::path::Path;
use std::sync::Arc;

use toolgate::audit::{Audit, CallFacts, Chain, DecisionEvent, Durability, Entry, Event, verify};
use toolgate::config::Config;
use toolgate::storage::{DEFAULT_CACHE_BYTES, Stores};

const MIB: u64 = 1024 * 1024;

fn config(dir: &Path, audit: &str) -> Result<Config, String> {
    let path = dir.join("toolgate.toml");
    std::fs::write(&path, format!("[audit]\n{audit}\n")).unwrap();
    Config::from_file(&path).map_err(|e| e.to_string())
}

#[test]
fn the_configured_cache_size_reaches_sled() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(DEFAULT_CACHE_BYTES, 64 * MIB);
    assert_eq!(config(dir.path(), "").unwrap().store_cache_bytes, 64 * MIB);
    let cfg = config(dir.path(), "cache_mb = 8").unwrap();
    assert_eq!(cfg.store_cache_bytes, 8 * MIB);
    // As sled was configured with it (read back from sled's own configuration).
    let stores = Stores::open_with_cache(&dir.path().join("data"), cfg.store_cache_bytes).unwrap();
    assert_eq!(stores.cache_bytes(), 8 * MIB);
    drop(stores);
    let stores = Stores::open(&dir.path().join("data")).unwrap();
    assert_eq!(stores.cache_bytes(), DEFAULT_CACHE_BYTES);
    for bad in ["cache_mb = 0", "cache_mb = 3", "cache_mb = 65537"] {
        let e = config(dir.path(), bad).unwrap_err();
        assert!(e.contains("`audit.cache_mb`"), "{bad}: {e}");
    }
}

/// An entry like those `POST /v1/authorize` records: a decision with digest, redacted preview,
/// correlation ids and the determining policy.
fn decision(n: u64) -> Entry {
    let args = serde_json::json!({"path": format!("src/module_{n}.rs"), "max_bytes": 4096});
    Event::Decision(DecisionEvent {
        id: uuid::Uuid::now_v7().to_string(),
        principal: Some(format!("Agent::\"agent-{}\"", n % 4)),
        on_behalf_of: None,
        tool: Some("read_file".into()),
        risk: Some("low".into()),
        outcome: "allow".into(),
        stage: "policy".into(),
        reasons: vec!["dev-reads-source".into()],
        revision: "sha256:0123456789abcdef".into(),
        call: Some(CallFacts {
            args_sha256: toolgate::audit::args_digest(&args),
            args_preview: toolgate::audit::redacted_preview(&args, 512, 200),
            conv_id: Some(format!("conv-{}", n % 100)),
            trace_id: None,
            iter: Some(i64::try_from(n % 50).unwrap()),
        }),
        duration_us: Some(150 + n % 100),
        detail: None,
        otel_trace_id: None,
        inputs: Some(Box::new(
            serde_json::json!({"provenance": {"path": "none"}}),
        )),
    })
    .into()
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                dir_bytes(&e.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn audit_records_stay_small_on_disk() {
    const RECORDS: u64 = 20_000;
    let data = tempfile::tempdir().unwrap();
    {
        let stores = Stores::open(data.path()).unwrap();
        let audit = Arc::new(
            Audit::start(stores.audit.clone(), Chain::plain(), Durability::Group).unwrap(),
        );
        // 32 callers at once, as under load, so batches form as they do when serving.
        let mut callers = Vec::new();
        for caller in 0..32 {
            let audit = audit.clone();
            callers.push(tokio::spawn(async move {
                for n in (caller..RECORDS).step_by(32) {
                    audit.record(decision(n)).await.unwrap();
                }
            }));
        }
        for c in callers {
            c.await.unwrap();
        }
        assert_eq!(audit.head().seq, RECORDS);
        let intact = verify(stores.audit.as_ref(), &Chain::plain(), None).unwrap();
        assert!(
            matches!(intact, toolgate::audit::ChainVerdict::Intact { records, .. } if records == RECORDS),
            "{intact:?}"
        );
    }
    // The ledger is laid out once (16 MiB of zeros and a header block): a fixed cost, not
    // one per record.
    let wal = std::fs::metadata(data.path().join("ledger/wal"))
        .unwrap()
        .len();
    assert_eq!(wal, (16 << 20) + 4096, "the ledger grew past its layout");
    let per_record = (dir_bytes(data.path()) - wal) / RECORDS;
    eprintln!("audit store: {per_record} bytes per record, besides the 16 MiB ledger");
    assert!(
        per_record <= BYTES_PER_RECORD_BOUND,
        "{per_record} bytes per record on disk (bound {BYTES_PER_RECORD_BOUND})"
    );
}

/// Measured here: 524 bytes per record with deflated blocks, 1,690 with the JSON blocks stored
/// before (docs/performance.md has the same under load: 630 against 1,803). The
/// bound leaves room for sled's segment granularity and batch sizes, and fails on the old
/// layout.
const BYTES_PER_RECORD_BOUND: u64 = 1000;
