//! kill -9 under load: a real sidecar is killed at random moments while clients ask for
//! decisions, create approvals, approve them and redeem them. After every kill, each
//! acknowledged decision must be in the log, the chain must verify, and each approval must be
//! stored once, in the state its last acknowledged change left it.
//!
//! Cycles: `TOOLGATE_CRASH_CYCLES` (default 6; CI runs the default).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use toolgate::approvals::Status;
use toolgate::audit::{ChainVerdict, verify};
use toolgate::storage::Stores;

use crate::helpers::*;
use crate::process::{exchange, start};

const BOB: &str = "demo-bob-token";

/// What clients were told, acknowledged with a complete 200 answer.
#[derive(Default)]
struct Acked {
    decisions: HashSet<String>,
    /// Approval id → the last acknowledged state: pending, approved or used.
    approvals: HashMap<String, &'static str>,
}

/// A small xorshift generator: reproducible from the printed seed, no extra dependency.
struct Rng(u64);

impl Rng {
    /// A generator seeded from the clock, and its seed (printed, to reproduce a run).
    fn seeded() -> (u64, Rng) {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1;
        (seed, Rng(seed))
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One client's loop until `stop`: a mix of allowed reads, calls that need approval, approvals
/// and redemptions. Records what it was told.
fn client(port: u16, id: u64, stop: &AtomicBool, acked: &Mutex<Acked>) {
    let mut n = 0u64;
    let mut approved: Vec<(String, Value)> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let decide = |call: &Value| exchange(port, "POST", "/v1/authorize", Some(DEV), Some(call));
        let record = |d: &Value| {
            acked
                .lock()
                .unwrap()
                .decisions
                .insert(d["decision_id"].as_str().unwrap().to_owned())
        };
        match n % 4 {
            0 | 1 => {
                let call = json!({"tool": "read_file", "args": {"path": "src/main.rs"}, "context": {"conv_id": format!("c{id}-{n}")}});
                let Some((200, d)) = decide(&call) else {
                    continue;
                };
                record(&d);
            }
            2 => {
                let call = json!({"tool": "write_file", "args": {"path": "src/lib.rs", "content": format!("{id}-{n}")}});
                let Some((200, d)) = decide(&call) else {
                    continue;
                };
                record(&d);
                assert_eq!(d["decision"], "pending_approval", "{d}");
                let approval = d["approval_id"].as_str().unwrap().to_owned();
                acked
                    .lock()
                    .unwrap()
                    .approvals
                    .entry(approval.clone())
                    .or_insert("pending");
                let path = format!("/v1/approvals/{approval}/approve");
                let Some((200, a)) = exchange(port, "POST", &path, Some(BOB), Some(&json!({})))
                else {
                    continue;
                };
                assert_eq!(a["status"], "approved", "{a}");
                acked
                    .lock()
                    .unwrap()
                    .approvals
                    .insert(approval.clone(), "approved");
                approved.push((approval, call));
            }
            _ => {
                let Some((approval, mut call)) = approved.pop() else {
                    continue;
                };
                call["approval_id"] = json!(approval);
                let Some((200, d)) = decide(&call) else {
                    continue;
                };
                record(&d);
                // Redeemed once; a replay (after a crash, too) would be a deny.
                if d["decision"] == "allow" {
                    acked.lock().unwrap().approvals.insert(approval, "used");
                }
            }
        }
    }
}

/// Four [`client`]s (ids from `first_id`) loading a sidecar on `port`.
struct Load {
    stop: Arc<AtomicBool>,
    clients: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(port: u16, first_id: u64, acked: &Arc<Mutex<Acked>>) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let clients = (0..4)
            .map(|c| {
                let (stop, acked) = (stop.clone(), acked.clone());
                std::thread::spawn(move || client(port, first_id + c, &stop, &acked))
            })
            .collect();
        Load { stop, clients }
    }

    /// kill -9 on `server` under the load, then the clients stop.
    fn kill_and_stop(self, mut server: crate::process::Server) {
        server.child.kill().unwrap();
        server.child.wait().unwrap();
        self.stop.store(true, Ordering::Relaxed);
        for c in self.clients {
            c.join().unwrap();
        }
    }
}

fn check(set: &TempSet, acked: &Acked) -> (u64, u64) {
    let data = set.dir.path().join("data");
    let stores = Stores::open_existing(&data, toolgate::storage::DEFAULT_CACHE_BYTES).unwrap();
    // The chain is keyed by default: the data directory's keyring says how.
    let (chain, _) = toolgate::audit::keys::chain_for_verify(&data, &[]).unwrap();
    let verdict = verify(stores.audit.as_ref(), &chain, None).unwrap();
    let ChainVerdict::Intact { records, .. } = verdict else {
        panic!("chain broken after kill -9: {verdict:?}");
    };
    let stored: Vec<_> = stores
        .audit
        .scan(1, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|s| s.record.unwrap())
        .collect();
    let logged: HashSet<&str> = stored.iter().map(|r| r.entry.id.as_str()).collect();
    let lost = acked
        .decisions
        .iter()
        .filter(|id| !logged.contains(id.as_str()))
        .count() as u64;
    if lost > 0 {
        let missing: Vec<&String> = acked
            .decisions
            .iter()
            .filter(|id| !logged.contains(id.as_str()))
            .collect();
        let head = stored.last().map(|r| (r.seq, r.entry.at_ms));
        eprintln!(
            "acknowledged but not in the log: {missing:?}; the log's head (seq, at_ms): {head:?}"
        );
    }
    // Approvals: each acknowledged one stored, in (at least) its acknowledged state, once.
    let all = stores.approvals.all().unwrap();
    let mut ids = HashSet::new();
    for a in &all {
        assert!(ids.insert(a.id.clone()), "approval {} stored twice", a.id);
    }
    let by_id: HashMap<&str, Status> = all.iter().map(|a| (a.id.as_str(), a.status)).collect();
    for (id, state) in &acked.approvals {
        let Some(status) = by_id.get(id.as_str()) else {
            panic!("acknowledged approval {id} lost");
        };
        let ok = match *state {
            "pending" => true,
            "approved" => matches!(status, Status::Approved | Status::Used),
            _ => *status == Status::Used,
        };
        if !ok {
            let said: Vec<String> = stored
                .iter()
                .filter(|r| r.entry.id == *id || r.entry.detail.as_deref() == Some(id.as_str()))
                .map(|r| format!("{} {} {:?}", r.seq, r.entry.decision, r.entry.effects))
                .collect();
            panic!("approval {id}: acknowledged {state}, stored {status:?}; its records: {said:?}");
        }
    }
    // No approval redeemed twice.
    let mut redeemed: HashMap<&str, u32> = HashMap::new();
    for r in &stored {
        if r.entry.decision == "allow"
            && let Some(detail) = r.entry.detail.as_deref()
        {
            *redeemed.entry(detail).or_default() += 1;
        }
    }
    if let Some((detail, n)) = redeemed.iter().find(|(_, n)| **n > 1) {
        panic!("{detail} redeemed {n} times");
    }
    (records, lost)
}

#[test]
fn kill_9_under_load_loses_no_acknowledged_record() {
    let cycles: u64 = std::env::var("TOOLGATE_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let (seed, mut rng) = Rng::seeded();
    let set = TempSet::new();
    let acked = Arc::new(Mutex::new(Acked::default()));
    let started = Instant::now();
    let mut records = 0;
    for cycle in 0..cycles {
        let server = start(&set);
        let load = Load::start(server.port, cycle * 10, &acked);
        std::thread::sleep(Duration::from_millis(150 + rng.below(600)));
        load.kill_and_stop(server);
        let (n, lost) = check(&set, &acked.lock().unwrap());
        assert_eq!(
            lost, 0,
            "cycle {cycle} (seed {seed}): acknowledged decisions lost"
        );
        records = n;
    }
    let acked = acked.lock().unwrap();
    let used = acked.approvals.values().filter(|s| **s == "used").count();
    eprintln!(
        "kill -9 harness: {cycles} cycles in {:.1?}, {} acknowledged decisions, {} approvals ({used} redeemed), {records} records, 0 lost (seed {seed})",
        started.elapsed(),
        acked.decisions.len(),
        acked.approvals.len(),
    );
    assert!(
        acked.decisions.len() as u64 >= cycles,
        "the load never got through"
    );
}

/// A full disk under load, with no reserve (`reserve_mb = 0`, so sled itself meets the full
/// disk, as it does when another process takes the space), then kill -9 while it is full:
/// every acknowledged decision and approval is in the log afterwards, the chain verifies,
/// and no sequence number was used twice (an acknowledged batch the store failed to apply is
/// kept, not written over).
#[test]
fn a_full_disk_under_load_loses_no_acknowledged_record() {
    let set = TempSet::new();
    let data = set.dir.path().join("data");
    let Some(disk) = crate::durability::SmallDisk::mount_or_skip(&data, 64) else {
        return;
    };
    let config = "[audit]\nreserve_mb = 0";
    let acked = Arc::new(Mutex::new(Acked::default()));
    for cycle in 0..3u64 {
        let server = crate::process::start_with(&set, config);
        let load = Load::start(server.port, 100 + cycle * 10, &acked);
        std::thread::sleep(Duration::from_millis(300));
        // Full, then space again while the load goes on, then full again and killed.
        disk.fill_up();
        std::thread::sleep(Duration::from_millis(700));
        disk.free();
        std::thread::sleep(Duration::from_millis(1500));
        disk.fill_up();
        std::thread::sleep(Duration::from_millis(400));
        load.kill_and_stop(server);
        disk.free();
        let (_, lost) = check(&set, &acked.lock().unwrap());
        assert_eq!(lost, 0, "cycle {cycle}: acknowledged decisions lost");
    }
    let acked = acked.lock().unwrap();
    eprintln!(
        "full disk under load: {} acknowledged decisions, {} approvals, 0 lost",
        acked.decisions.len(),
        acked.approvals.len()
    );
    assert!(acked.decisions.len() > 30, "the load never got through");
}

/// A disk that fails writes with EIO under load (injected at random: the ledger's append,
/// its `fdatasync`, and sled's apply after the ledger has the batch, which makes the store
/// reopen and apply the ledger again), then kill -9 at a random moment: every acknowledged
/// record is present, no sequence number is used twice, and the store reopens every time
/// (each cycle starts the sidecar again on the same directory, which also checks the stored
/// state against the log).
#[test]
fn a_disk_failing_with_eio_under_load_loses_no_acknowledged_record() {
    let (seed, mut rng) = Rng::seeded();
    let set = TempSet::new();
    let acked = Arc::new(Mutex::new(Acked::default()));
    let failing = "ledger-append-eio=3%return;ledger-sync-eio=3%return;store-apply-error=3%return";
    let mut refused = 0;
    for cycle in 0..4u64 {
        // The injected failures also hit the writes a start makes (the audit key's start):
        // refusing to start on a failed fdatasync is right, and loses nothing; start again.
        let server = loop {
            match crate::process::try_start_with_env(&set, "", &[("TOOLGATE_FAILPOINTS", failing)])
            {
                Ok(server) => break server,
                Err(log) if log.contains("injected") || log.contains("Input/output error") => {
                    refused += 1;
                    assert!(refused <= 20, "the sidecar never started:\n{log}");
                    let (_, lost) = check(&set, &acked.lock().unwrap());
                    assert_eq!(lost, 0, "a refused start lost acknowledged decisions");
                }
                Err(log) => panic!("toolgate serve did not come up:\n{log}"),
            }
        };
        let load = Load::start(server.port, 200 + cycle * 10, &acked);
        std::thread::sleep(Duration::from_millis(400 + rng.below(800)));
        load.kill_and_stop(server);
        let (_, lost) = check(&set, &acked.lock().unwrap());
        assert_eq!(
            lost, 0,
            "cycle {cycle} (seed {seed}): acknowledged decisions lost"
        );
    }
    let acked = acked.lock().unwrap();
    eprintln!(
        "EIO under load: {} acknowledged decisions, {} approvals, 0 lost, {refused} starts \
         refused on an injected failure (seed {seed})",
        acked.decisions.len(),
        acked.approvals.len()
    );
    assert!(acked.decisions.len() > 30, "the load never got through");
}

/// The data directory's file system goes read-only under load (ext4 with
/// `errors=remount-ro` after a disk error), the sidecar is killed -9 while it is, and the
/// operator repairs and remounts it: every acknowledged record is present, the chain
/// verifies with no sequence number used twice, and the sidecar starts again on it.
#[test]
fn a_disk_gone_read_only_under_load_loses_no_acknowledged_record() {
    let set = TempSet::new();
    let data = set.dir.path().join("data");
    let image = set.dir.path().join("data.ext4");
    let Some(disk) = crate::durability::Ext4Disk::mount_or_skip(&data, &image, 128) else {
        return;
    };
    let acked = Arc::new(Mutex::new(Acked::default()));
    for cycle in 0..2u64 {
        let server = start(&set);
        let load = Load::start(server.port, 300 + cycle * 10, &acked);
        std::thread::sleep(Duration::from_millis(600));
        disk.go_read_only();
        std::thread::sleep(Duration::from_millis(800));
        // Still answering (503, refused), never acknowledging what it cannot store.
        let (status, _) = exchange(server.port, "GET", "/healthz", None, None).unwrap();
        assert_eq!(status, 200, "the sidecar died on a read-only disk");
        load.kill_and_stop(server);
        disk.repair();
        let (_, lost) = check(&set, &acked.lock().unwrap());
        assert_eq!(lost, 0, "cycle {cycle}: acknowledged decisions lost");
    }
    // And it starts again on the repaired disk, with every record still there.
    let server = start(&set);
    let (status, d) = exchange(
        server.port,
        "POST",
        "/v1/authorize",
        Some(DEV),
        Some(&json!({"tool": "read_file", "args": {"path": "README.md"}})),
    )
    .unwrap();
    assert_eq!(status, 200, "{d}");
    drop(server);
    let acked = acked.lock().unwrap();
    eprintln!(
        "read-only disk under load: {} acknowledged decisions, {} approvals, 0 lost",
        acked.decisions.len(),
        acked.approvals.len()
    );
    assert!(acked.decisions.len() > 30, "the load never got through");
}
