//! The one writer: a dedicated thread that numbers, chains and stores entries with group
//! commit. Every entry queued while a flush runs goes into the next batch, and one flush
//! acknowledges the whole batch, so durability costs one fsync per batch, not per decision.
//!
//! Fail closed: when a batch cannot be stored, every entry in it gets an error (the caller
//! denies and answers without claiming a record), the writer reports unhealthy, and the chain
//! head is re-read from the store before the next batch.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};

use super::record::{Chain, Checkpoint, Entry, EntryKind, GENESIS, now_ms};
use super::store::{AuditStore, StoreError};
use super::verify::Verdict as ChainVerdict;

/// Most entries one batch holds.
const MAX_BATCH: usize = 1024;

/// Under [`Durability::Buffered`], how many entries may wait unacknowledged; beyond that each
/// caller waits for its own entry to be stored (backpressure, bounded memory).
const MAX_UNACKED: usize = 16_384;

/// Under [`Durability::Buffered`], how long the writer lets entries gather after the first
/// before storing them. Nobody waits on a buffered entry, so this costs no latency, and it
/// turns one store write (and one thread wake-up) per entry into one per few hundred.
const LINGER: std::time::Duration = std::time::Duration::from_millis(2);

/// Whether an acknowledged record is on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Every batch is flushed to disk before it is acknowledged (group commit).
    Group,
    /// Acknowledged once queued for the writer; the store flushes in the background (sled:
    /// every 500 ms). A crash loses the last moments, and a store failure the entries queued
    /// when it happens (the sidecar then denies until the store recovers). When the queue
    /// is long or the store is failing, callers wait for their own entry as under `Group`.
    Buffered,
    /// Nothing is recorded. For measuring what the audit log costs; never for production.
    Off,
}

/// How long records are kept. A record goes when either limit says so; the log is cut in
/// whole blocks, so slightly more than the limits may stay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retention {
    /// Keep at most this many of the newest records.
    pub keep_records: Option<u64>,
    /// Keep records younger than this many milliseconds.
    pub max_age_ms: Option<u64>,
}

/// What one retention pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pruned {
    /// The new checkpoint.
    pub checkpoint: Checkpoint,
    /// Records removed.
    pub removed: u64,
}

/// Where the chain stands: the newest record's number and hash.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Head {
    /// Sequence number of the newest record (0 when empty).
    pub seq: u64,
    /// Its hash (the genesis hash when empty).
    pub hash: String,
}

type Ack = tokio::sync::oneshot::Sender<Result<u64, StoreError>>;
/// An entry queued for the writer, with whom to tell when it is stored.
type Job = (Entry, Option<Ack>);

struct Shared {
    head: Head,
    /// The last failure, while it lasts.
    failure: Option<String>,
}

/// What the request path reads without taking a lock.
#[derive(Default)]
struct Gauges {
    /// Whether the last batch failed.
    failing: AtomicBool,
    /// Entries queued and not yet taken by the writer.
    queued: AtomicUsize,
}

/// A handle to the audit trail. Cheap to share; dropping the last one stops the writer after
/// it has stored what was queued.
pub struct Audit {
    tx: Mutex<Option<Sender<Job>>>,
    durability: Durability,
    gauges: Arc<Gauges>,
    shared: Arc<Mutex<Shared>>,
    store: Arc<dyn AuditStore>,
    chain: Chain,
    pruning: Mutex<()>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audit").finish_non_exhaustive()
    }
}

impl Audit {
    /// Starts the writer over `store`, continuing its chain.
    pub fn start(
        store: Arc<dyn AuditStore>,
        chain: Chain,
        durability: Durability,
    ) -> Result<Audit, StoreError> {
        let head = current_head(store.as_ref())?;
        let shared = Arc::new(Mutex::new(Shared {
            head,
            failure: None,
        }));
        let gauges = Arc::new(Gauges::default());
        let (tx, rx) = channel();
        let thread = if durability == Durability::Off {
            tracing::warn!("the audit log is OFF: no decision is recorded (benchmarks only)");
            None
        } else {
            let writer = Writer {
                store: store.clone(),
                chain: chain.clone(),
                durable: durability == Durability::Group,
                shared: shared.clone(),
                gauges: gauges.clone(),
                unrecorded: std::cell::Cell::new((0, 0, 0)),
            };
            Some(
                std::thread::Builder::new()
                    .name("toolgate-audit".to_owned())
                    .spawn(move || writer.run(&rx))
                    .map_err(|e| StoreError(format!("cannot start the audit writer: {e}")))?,
            )
        };
        Ok(Audit {
            tx: Mutex::new(Some(tx)),
            durability,
            gauges,
            shared,
            store,
            chain,
            pruning: Mutex::new(()),
            thread: Mutex::new(thread),
        })
    }

    /// Appends `entry`: under group commit, returns once it is on disk; buffered, once it is
    /// queued (or stored, while the queue is long or the store failing); off, at once.
    pub async fn record(&self, entry: Entry) -> Result<(), StoreError> {
        match self.durability {
            Durability::Off => return Ok(()),
            Durability::Buffered
                if !self.gauges.failing.load(Ordering::Relaxed)
                    && self.gauges.queued.load(Ordering::Relaxed) < MAX_UNACKED =>
            {
                return self.send(entry, None);
            }
            Durability::Group | Durability::Buffered => {}
        }
        let (ack, done) = tokio::sync::oneshot::channel();
        self.send(entry, Some(ack))?;
        done.await
            .map_err(|_| StoreError("the audit writer stopped".to_owned()))?
            .map(|_| ())
    }

    /// Appends `entry` without waiting (reload and expiry events, recorded from threads that
    /// must not block on disk). A failure shows in [`Audit::failure`].
    pub fn record_detached(&self, entry: Entry) {
        if let Err(e) = self.send(entry, None) {
            tracing::error!(error = %e, "audit entry not queued");
        }
    }

    fn send(&self, entry: Entry, ack: Option<Ack>) -> Result<(), StoreError> {
        if self.durability == Durability::Off {
            return Ok(());
        }
        self.gauges.queued.fetch_add(1, Ordering::Relaxed);
        let guard = self.tx.lock().unwrap_or_else(PoisonError::into_inner);
        let tx = guard
            .as_ref()
            .ok_or_else(|| StoreError("the audit writer stopped".to_owned()))?;
        tx.send((entry, ack)).map_err(|_| {
            self.gauges.queued.fetch_sub(1, Ordering::Relaxed);
            StoreError("the audit writer stopped".to_owned())
        })
    }

    /// Whether entries are recorded at all.
    pub fn enabled(&self) -> bool {
        self.durability != Durability::Off
    }

    /// The write mode, as configured (`group`, `buffered`, `off`).
    pub fn mode(&self) -> &'static str {
        match self.durability {
            Durability::Group => "group",
            Durability::Buffered => "buffered",
            Durability::Off => "off",
        }
    }

    /// The newest record's number and hash, for external anchoring.
    pub fn head(&self) -> Head {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .head
            .clone()
    }

    /// Why the last batch could not be stored, while that lasts.
    pub fn failure(&self) -> Option<String> {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .failure
            .clone()
    }

    /// The store, for queries.
    pub fn store(&self) -> &dyn AuditStore {
        self.store.as_ref()
    }

    /// Applies `rule`: records first, durably, a retention entry attesting the checkpoint, then
    /// removes the records up to it. Blocks on the store: call it from a blocking thread.
    pub fn prune(&self, rule: &Retention) -> Result<Option<Pruned>, StoreError> {
        if self.durability == Durability::Off {
            return Ok(None);
        }
        // One pass at a time: checkpoints only move forward.
        let _one = self.pruning.lock().unwrap_or_else(PoisonError::into_inner);
        let head = self.head();
        let through = rule.keep_records.map(|k| head.seq.saturating_sub(k));
        let before = rule.max_age_ms.map(|a| now_ms().saturating_sub(a));
        let Some(last) = self.store.cut_point(through, before)? else {
            return Ok(None);
        };
        // What is about to go must verify first: a checkpoint sealed over a tampered record
        // would make the tampering permanent.
        match super::verify::verify_through(self.store.as_ref(), &self.chain, last.seq)? {
            ChainVerdict::Intact { head: h, .. } if h.seq == last.seq && h.hash == last.hash => {}
            ChainVerdict::Intact { .. } => {
                return Err(StoreError(format!(
                    "retention refused: the cut point (record {}) is not the verified record there",
                    last.seq
                )));
            }
            ChainVerdict::Broken { seq, why } => {
                return Err(StoreError(format!(
                    "retention refused: the log does not verify at record {seq}: {why}"
                )));
            }
        }
        let checkpoint = self.chain.checkpoint(last.seq, &last.hash, now_ms());
        let entry = Entry {
            kind: EntryKind::Admin,
            id: format!("retention-{}", checkpoint.seq),
            at_ms: checkpoint.at_ms,
            decision: "retention".to_owned(),
            reasons: rule_words(rule),
            detail: Some(checkpoint.attestation()),
            ..Entry::default()
        };
        let (ack, done) = tokio::sync::oneshot::channel();
        self.send(entry, Some(ack))?;
        done.blocking_recv()
            .map_err(|_| StoreError("the audit writer stopped".to_owned()))??;
        let removed = self.store.cut(&checkpoint)?;
        Ok(Some(Pruned {
            checkpoint,
            removed,
        }))
    }

    /// Stops accepting entries and waits until everything queued is stored.
    pub fn close(&self) {
        drop(
            self.tx
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        if let Some(t) = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = t.join();
        }
    }
}

impl Drop for Audit {
    fn drop(&mut self) {
        self.close();
    }
}

fn rule_words(rule: &Retention) -> Vec<String> {
    let mut words = Vec::new();
    if let Some(n) = rule.keep_records {
        words.push(format!("keep_records={n}"));
    }
    if let Some(ms) = rule.max_age_ms {
        words.push(format!("max_age_ms={ms}"));
    }
    words
}

fn current_head(store: &dyn AuditStore) -> Result<Head, StoreError> {
    Ok(match store.last()? {
        Some(r) => Head {
            seq: r.seq,
            hash: r.hash,
        },
        None => Head {
            seq: 0,
            hash: GENESIS.to_owned(),
        },
    })
}

/// The writer thread's state.
struct Writer {
    store: Arc<dyn AuditStore>,
    chain: Chain,
    durable: bool,
    shared: Arc<Mutex<Shared>>,
    gauges: Arc<Gauges>,
    /// Failures not yet written down: (batches, entries, of which acknowledged unstored).
    unrecorded: std::cell::Cell<(u64, u64, u64)>,
}

impl Writer {
    fn run(&self, rx: &Receiver<Job>) {
        while let Ok(first) = rx.recv() {
            if !self.durable {
                std::thread::sleep(LINGER);
            }
            let mut queued = vec![first];
            while queued.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(next) => queued.push(next),
                    Err(_) => break,
                }
            }
            self.gauges
                .queued
                .fetch_sub(queued.len(), Ordering::Relaxed);
            self.write(queued);
        }
    }

    /// Numbers, chains and stores one batch, then answers everyone waiting on it.
    fn write(&self, mut queued: Vec<Job>) {
        let store = self.store.as_ref();
        // After a failure, the first stored record says what the log may lack: buffered
        // entries answered but never stored, and (when a flush failed after the write) records
        // that were stored although their callers were told deny.
        let (batches, entries, answered) = self.unrecorded.get();
        if batches > 0 {
            queued.insert(
                0,
                (
                    Entry {
                        kind: EntryKind::Admin,
                        id: format!("audit-failure-{}", now_ms()),
                        at_ms: now_ms(),
                        decision: "audit_failure".to_owned(),
                        detail: Some(format!(
                            "{batches} batches ({entries} entries) failed to store; {answered} buffered entries were answered and are not in the log; entries of a batch whose flush failed may be in the log although their callers were denied"
                        )),
                        ..Entry::default()
                    },
                    None,
                ),
            );
        }
        let start = self
            .shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .head
            .clone();
        let mut prev = start.hash;
        let mut records = Vec::with_capacity(queued.len());
        let mut acks = Vec::with_capacity(queued.len());
        for (i, (entry, ack)) in queued.into_iter().enumerate() {
            let seq = start.seq + 1 + i as u64;
            let record = self.chain.seal(&prev, seq, entry);
            prev.clone_from(&record.hash);
            records.push(record);
            acks.push((seq, ack));
        }
        let result = store.append(&records, self.durable);
        let mut s = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        match &result {
            Ok(()) => {
                self.unrecorded.set((0, 0, 0));
                if let Some(last) = records.last() {
                    s.head = Head {
                        seq: last.seq,
                        hash: last.hash.clone(),
                    };
                }
                s.failure = None;
            }
            Err(e) => {
                // The failure note itself (first, when there is one) is not counted again.
                let note = u64::from(batches > 0);
                let unacked = acks.iter().filter(|(_, ack)| ack.is_none()).count() as u64;
                self.unrecorded.set((
                    batches + 1,
                    entries + records.len() as u64 - note,
                    answered + unacked - note,
                ));
                tracing::error!(error = %e, records = records.len(), "audit batch not stored; denying until it recovers");
                s.failure = Some(e.to_string());
                // The batch may or may not have reached the store: continue from what is there.
                if let Ok(head) = current_head(store) {
                    s.head = head;
                }
            }
        }
        self.gauges
            .failing
            .store(result.is_err(), Ordering::Relaxed);
        drop(s);
        for (seq, ack) in acks {
            if let Some(ack) = ack {
                let _ = ack.send(result.clone().map(|()| seq));
            }
        }
    }
}
