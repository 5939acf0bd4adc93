//! The one writer: a dedicated thread that numbers, chains and stores entries with group
//! commit. Every entry queued while a flush runs goes into the next batch, and one flush
//! acknowledges the whole batch, so durability costs one fsync per batch, not per decision.
//! When nothing is queued and no batch is being written, a caller waiting for its record
//! writes it on its own thread instead, under the same lock, which spares the two thread
//! hand-offs (`Audit::write_inline`).
//!
//! A job may carry state changes ([`Effect`]s): they are stored with its records, in the same
//! ledger frame and sled transaction, and the batch is made durable whatever the mode. So a
//! change (an approval decided or used, a grant, the kill switch, a quarantine) never exists
//! without its record, and a record never attests a change that did not happen.
//!
//! Fail closed: when a batch cannot be stored, every entry in it gets an error (the caller
//! denies and answers without claiming a record), the writer reports unhealthy, and the chain
//! head is re-read from the store before the next batch. While it fails, the writer tries again
//! with backoff even when no request comes, and the first batch that is stored opens with an
//! `audit_failure` note of what the log lacks. The note is kept outside the log while the
//! outage lasts, so a restart in the middle of it still writes the note.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};

use super::error::StoreError;
use super::event::{Event, Sidecar};
use super::ledger::Effect;
use super::record::{Chain, Checkpoint, Entry, EntryKind, GENESIS, Head};
use super::store::AuditStore;
use super::verify::ChainVerdict;
use crate::clock::now_ms;

/// Most entries one batch holds.
const MAX_BATCH: usize = 1024;

/// Under [`Durability::Buffered`], how many entries may wait unacknowledged; beyond that each
/// caller waits for its own entry to be stored (backpressure, bounded memory).
const MAX_UNACKED: usize = 16_384;

/// How long the writer lets entries nobody waits on gather (buffered mode, and records of
/// things already done such as gate verdicts) before storing them. Nobody waits on them, so
/// this costs no latency, and it turns one store write (and one flush, one thread wake-up)
/// per entry into one per few hundred. An entry someone waits on ends the wait.
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

/// What `/metrics` shows of a shipper (the JSON Lines file's, or the OTLP one's).
#[derive(Debug, Default)]
pub struct ShipStats {
    /// The last record shipped (0: none yet).
    pub shipped_seq: AtomicU64,
    /// Lines written.
    pub lines: AtomicU64,
    /// Rotations done.
    pub rotations: AtomicU64,
    /// Failed passes (each retried).
    pub failures: AtomicU64,
    /// Records the log no longer held when they were due (removed by retention first).
    pub skipped: AtomicU64,
    /// Whether the last pass failed.
    pub failing: AtomicBool,
}

type Ack = tokio::sync::oneshot::Sender<Result<u64, StoreError>>;

/// Entries queued for the writer together (stored in one block), the state changes they
/// carry, and whom to tell when they are stored.
struct Job {
    entries: Vec<Entry>,
    effects: Vec<Effect>,
    ack: Option<Ack>,
}

impl Job {
    fn one(entry: Entry, ack: Option<Ack>) -> Job {
        Job {
            entries: vec![entry],
            effects: Vec::new(),
            ack,
        }
    }
}

/// Most entries one [`Audit::commit`] may carry (they go into one block).
pub const MAX_COMMIT: usize = 1024;

/// First wait before the writer tries a failing store again on its own; doubled up to
/// [`RETRY_MAX`].
const RETRY_MIN: std::time::Duration = std::time::Duration::from_millis(100);
const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(2);

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
    /// The writer's state, shared with its thread: a caller writes its own batch when the
    /// writer is idle ([`Audit::record`]).
    writer: Option<Arc<Writer>>,
    /// The shipper's counters, once shipping is started.
    pub(super) shipping: std::sync::OnceLock<Arc<ShipStats>>,
    /// The OTLP shipper's counters, when it runs.
    pub(super) otlp: std::sync::OnceLock<Arc<ShipStats>>,
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
            let writer = Arc::new(Writer {
                store: store.clone(),
                chain: chain.clone(),
                durable: durability == Durability::Group,
                shared: shared.clone(),
                gauges: gauges.clone(),
                outage: Mutex::new(store.outage().map(|before| Outage {
                    before_restart: Some(before),
                    ..Outage::default()
                })),
            });
            let thread_writer = writer.clone();
            Some((
                writer,
                std::thread::Builder::new()
                    .name("toolgate-audit".to_owned())
                    .spawn(move || thread_writer.run(&rx))
                    .map_err(|e| StoreError(format!("cannot start the audit writer: {e}")))?,
            ))
        };
        let (writer, thread) = thread.unzip();
        Ok(Audit {
            shipping: std::sync::OnceLock::new(),
            otlp: std::sync::OnceLock::new(),
            tx: Mutex::new(Some(tx)),
            durability,
            gauges,
            shared,
            store,
            chain,
            pruning: Mutex::new(()),
            thread: Mutex::new(thread),
            writer,
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
                return self.send(Job::one(entry, None));
            }
            Durability::Group => match self.write_inline(entry) {
                Ok(result) => return result,
                Err(entry) => {
                    let (ack, done) = tokio::sync::oneshot::channel();
                    self.send(Job::one(*entry, Some(ack)))?;
                    return done
                        .await
                        .map_err(|_| StoreError("the audit writer stopped".to_owned()))?
                        .map(|_| ());
                }
            },
            Durability::Buffered => {}
        }
        let (ack, done) = tokio::sync::oneshot::channel();
        self.send(Job::one(entry, Some(ack)))?;
        done.await
            .map_err(|_| StoreError("the audit writer stopped".to_owned()))?
            .map(|_| ())
    }

    /// Under group commit, writes `entry` on the caller's thread when the writer is idle
    /// (nothing queued, no batch being written, no outage note owed). The answer then waits
    /// for its own `fdatasync` and nothing else: no hand-off to the writer's thread and back.
    /// On the 2-core machine that took the durable p50 at one connection from 900 to 730 µs
    /// (median of 7 alternating rounds). The async worker waits on the disk meanwhile (one
    /// small write and its `fdatasync`), and the runtime's other workers take its queued
    /// tasks. Handing the worker's tasks on first (`block_in_place`) measured no better than
    /// the writer's thread: it wakes another thread per call, the cost this path avoids.
    /// Gives `entry` back when it must go through the writer: another batch is being
    /// written or queued (group commit then covers it), or a failing store (the writer
    /// retries and notes the outage).
    fn write_inline(&self, entry: Entry) -> Result<Result<(), StoreError>, Box<Entry>> {
        let Some(writer) = &self.writer else {
            return Err(Box::new(entry));
        };
        if self.gauges.failing.load(Ordering::Relaxed)
            || self.gauges.queued.load(Ordering::Relaxed) != 0
        {
            return Err(Box::new(entry));
        }
        let Ok(mut outage) = writer.outage.try_lock() else {
            return Err(Box::new(entry));
        };
        // Checked again under the lock: the writer takes entries off the count while holding
        // it, so none queued means every entry queued before this one is written.
        let open = self
            .tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some();
        if outage.is_some() || !open || self.gauges.queued.load(Ordering::Acquire) != 0 {
            return Err(Box::new(entry));
        }
        let (ack, mut done) = tokio::sync::oneshot::channel();
        writer.write(vec![Job::one(entry, Some(ack))], &mut outage);
        drop(outage);
        Ok(match done.try_recv() {
            Ok(result) => result.map(|_| ()),
            Err(_) => Err(StoreError("the audit writer stopped".to_owned())),
        })
    }

    /// Appends the record of something already done (a forwarded call's result): queued
    /// behind the records before it and stored with the writer's next batch, so every later
    /// record's flush covers it, without the caller waiting for its own flush. While the store
    /// is failing or the queue is long, it waits as [`Audit::record`] does.
    pub async fn record_after(&self, entry: Entry) -> Result<(), StoreError> {
        if self.durability == Durability::Off {
            return Ok(());
        }
        if !self.gauges.failing.load(Ordering::Relaxed)
            && self.gauges.queued.load(Ordering::Relaxed) < MAX_UNACKED
        {
            return self.send(Job::one(entry, None));
        }
        let (ack, done) = tokio::sync::oneshot::channel();
        self.send(Job::one(entry, Some(ack)))?;
        done.await
            .map_err(|_| StoreError("the audit writer stopped".to_owned()))?
            .map(|_| ())
    }

    /// Records `entries` and applies `effects` (state changes they attest) together: both
    /// are stored, durably whatever the mode, before this returns, or neither is. Returns the
    /// last entry's sequence number (0 when the log is off: the effects are applied alone).
    pub async fn commit(
        &self,
        entries: Vec<Entry>,
        effects: Vec<Effect>,
    ) -> Result<u64, StoreError> {
        let done = self.queue_commit(entries, effects)?;
        match done {
            None => Ok(0),
            Some(done) => done
                .await
                .map_err(|_| StoreError("the audit writer stopped".to_owned()))?,
        }
    }

    /// [`Audit::commit`] for threads that are not async.
    pub fn commit_blocking(
        &self,
        entries: Vec<Entry>,
        effects: Vec<Effect>,
    ) -> Result<u64, StoreError> {
        match self.queue_commit(entries, effects)? {
            None => Ok(0),
            Some(done) => done
                .blocking_recv()
                .map_err(|_| StoreError("the audit writer stopped".to_owned()))?,
        }
    }

    fn queue_commit(
        &self,
        entries: Vec<Entry>,
        effects: Vec<Effect>,
    ) -> Result<Option<tokio::sync::oneshot::Receiver<Result<u64, StoreError>>>, StoreError> {
        if entries.len() > MAX_COMMIT {
            return Err(StoreError(format!(
                "{} entries in one commit; at most {MAX_COMMIT}",
                entries.len()
            )));
        }
        if self.durability == Durability::Off {
            self.store.apply(&effects)?;
            return Ok(None);
        }
        if entries.is_empty() && !effects.is_empty() {
            return Err(StoreError(
                "state changes without the record that attests them; nothing changed".to_owned(),
            ));
        }
        let mut entries = entries;
        super::attest::attach(&mut entries, &effects);
        let (ack, done) = tokio::sync::oneshot::channel();
        self.send(Job {
            entries,
            effects,
            ack: Some(ack),
        })?;
        Ok(Some(done))
    }

    /// Appends `entry` without waiting (reload and expiry events, recorded from threads that
    /// must not block on disk). A failure shows in [`Audit::failure`].
    pub fn record_detached(&self, entry: Entry) {
        if let Err(e) = self.send(Job::one(entry, None)) {
            tracing::error!(error = %e, "audit entry not queued");
        }
    }

    fn send(&self, job: Job) -> Result<(), StoreError> {
        if self.durability == Durability::Off {
            return Ok(());
        }
        let n = job.entries.len();
        let guard = self.tx.lock().unwrap_or_else(PoisonError::into_inner);
        let tx = guard
            .as_ref()
            .ok_or_else(|| StoreError("the audit writer stopped".to_owned()))?;
        self.gauges.queued.fetch_add(n, Ordering::Relaxed);
        tx.send(job).map_err(|_| {
            self.gauges.queued.fetch_sub(n, Ordering::Relaxed);
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

    /// The OTLP shipper's counters, when it runs.
    pub fn otlp_stats(&self) -> Option<&ShipStats> {
        self.otlp.get().map(Arc::as_ref)
    }

    /// The shipper's counters, when shipping is on.
    pub fn ship_stats(&self) -> Option<&ShipStats> {
        self.shipping.get().map(Arc::as_ref)
    }

    /// The store, for queries.
    pub fn store(&self) -> &dyn AuditStore {
        self.store.as_ref()
    }

    /// Walks the whole chain as it is now (online; blocks on the store: call it from a
    /// blocking thread).
    pub fn verify(&self) -> Result<ChainVerdict, StoreError> {
        // Not while retention cuts: a walk that saw the old checkpoint and then the cut log
        // would report records missing that were removed on purpose.
        let _no_cut = self.pruning.lock().unwrap_or_else(PoisonError::into_inner);
        super::verify::verify(self.store.as_ref(), &self.chain, None)
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
        let entry = Event::Sidecar(Sidecar {
            kind: EntryKind::Admin,
            id: Some(format!("retention-{}", checkpoint.seq)),
            at_ms: Some(checkpoint.at_ms),
            decision: "retention".to_owned(),
            reasons: rule_words(rule),
            detail: Some(checkpoint.attestation()),
            ..Sidecar::default()
        })
        .into();
        let (ack, done) = tokio::sync::oneshot::channel();
        self.send(Job::one(entry, Some(ack)))?;
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
        super::apply::close(&self.tx, &self.thread);
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

/// Where the chain stands after `newest` (the genesis hash when there is none).
fn head_after(newest: Option<super::record::Record>) -> Head {
    match newest {
        Some(r) => Head {
            seq: r.seq,
            hash: r.hash,
        },
        None => Head {
            seq: 0,
            hash: GENESIS.to_owned(),
        },
    }
}

/// [`current_head`] of every record written ([`AuditStore::head_record`]).
fn written_head(store: &dyn AuditStore) -> Result<Head, StoreError> {
    Ok(head_after(store.head_record()?))
}

fn current_head(store: &dyn AuditStore) -> Result<Head, StoreError> {
    Ok(head_after(store.last()?))
}

/// How long the writer polls for the next job before it sleeps: a sequential caller's next
/// record comes within an HTTP round trip of the last answer, and a sleeping thread's wake-up
/// costs more than that on a busy machine.
const SPIN: std::time::Duration = std::time::Duration::from_micros(150);

/// The next job: polled for [`SPIN`] (yielding the core between polls), then waited for.
fn spin_recv(rx: &Receiver<Job>) -> Result<Job, std::sync::mpsc::RecvError> {
    let start = std::time::Instant::now();
    while start.elapsed() < SPIN {
        match rx.try_recv() {
            Ok(job) => return Ok(job),
            Err(std::sync::mpsc::TryRecvError::Empty) => std::thread::yield_now(),
            Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                return Err(std::sync::mpsc::RecvError);
            }
        }
    }
    rx.recv()
}

/// What the log lacks since the store started failing.
#[derive(Debug, Clone, Default)]
struct Outage {
    /// When the first failure came (unix ms).
    since_ms: u64,
    /// Batches that failed, entries in them, and of those the buffered ones answered anyway.
    batches: u64,
    entries: u64,
    answered: u64,
    /// The note of an outage a stop cut short, kept across the restart.
    before_restart: Option<String>,
}

impl Outage {
    fn text(&self) -> String {
        let mut text = String::new();
        if let Some(before) = &self.before_restart {
            text.push_str(before);
            text.push_str("; the sidecar was stopped during that outage");
        }
        if self.batches > 0 {
            if !text.is_empty() {
                text.push_str("; then, ");
            }
            text.push_str(&format!(
                "from unix ms {}: {} batches ({} entries) failed to store; {} buffered entries were answered and are not in the log; entries of a batch whose write failed late may be in the log although their callers were denied",
                self.since_ms, self.batches, self.entries, self.answered
            ));
        }
        text
    }
}

/// The writer thread's state.
struct Writer {
    store: Arc<dyn AuditStore>,
    chain: Chain,
    durable: bool,
    shared: Arc<Mutex<Shared>>,
    gauges: Arc<Gauges>,
    /// Failures not yet written down. Held while a batch is written (by the writer's thread,
    /// or by a caller writing its own: [`Audit::record`]), so it is also the commit lock.
    outage: Mutex<Option<Outage>>,
}

impl Writer {
    fn run(&self, rx: &Receiver<Job>) {
        use std::sync::mpsc::RecvTimeoutError;
        let mut retry = RETRY_MIN;
        loop {
            // While a note is owed, wake up to try the store again even if nobody writes.
            let owes = self
                .outage
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some();
            let first = if owes {
                match rx.recv_timeout(retry) {
                    Ok(job) => Some(job),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match spin_recv(rx) {
                    Ok(job) => Some(job),
                    Err(_) => break,
                }
            };
            let mut queued = Vec::new();
            let mut entries = 0;
            if let Some(first) = first {
                // Nobody waits on this entry (buffered mode, or a record of something already
                // done): let more gather for up to LINGER, one flush for all of them. An
                // entry someone waits on, under group commit, ends the wait at once.
                let linger = first.effects.is_empty() && (!self.durable || first.ack.is_none());
                entries += first.entries.len();
                queued.push(first);
                if linger {
                    let deadline = std::time::Instant::now() + LINGER;
                    while entries < MAX_BATCH {
                        let left = deadline.saturating_duration_since(std::time::Instant::now());
                        let Ok(next) = rx.recv_timeout(left) else {
                            break;
                        };
                        let urgent = next.ack.is_some() || !next.effects.is_empty();
                        entries += next.entries.len();
                        queued.push(next);
                        if urgent {
                            break;
                        }
                    }
                }
                while entries < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(next) => {
                            entries += next.entries.len();
                            queued.push(next);
                        }
                        Err(_) => break,
                    }
                }
            }
            let mut outage = self.outage.lock().unwrap_or_else(PoisonError::into_inner);
            // Under the lock: a caller that finds nothing queued once it holds the lock knows
            // that every entry queued before is written (see `Audit::write_inline`).
            self.gauges.queued.fetch_sub(entries, Ordering::Release);
            self.write(queued, &mut outage);
            let owes = outage.is_some();
            drop(outage);
            retry = if owes {
                (retry * 2).min(RETRY_MAX)
            } else {
                RETRY_MIN
            };
        }
        // An orderly stop: what buffered mode acknowledged is made durable too.
        if let Err(e) = self.store.sync() {
            tracing::error!(error = %e, "the audit log could not be made durable at stop");
        }
    }

    /// Numbers, chains and stores one batch (with the note of a past failure, if one is
    /// owed, first), then answers everyone waiting on it.
    fn write(&self, queued: Vec<Job>, outage_now: &mut Option<Outage>) {
        let store = self.store.as_ref();
        let owed = outage_now.clone();
        let mut entries: Vec<Entry> = Vec::new();
        if let Some(outage) = &owed {
            entries.push(
                Event::Sidecar(Sidecar {
                    kind: EntryKind::Admin,
                    id: Some(format!("audit-failure-{}", now_ms())),
                    decision: "audit_failure".to_owned(),
                    detail: Some(outage.text()),
                    ..Sidecar::default()
                })
                .into(),
            );
        }
        if entries.is_empty() && queued.is_empty() {
            return;
        }
        let mut effects = Vec::new();
        let mut acks = Vec::with_capacity(queued.len());
        let mut unacked = 0u64;
        let mut durable = self.durable;
        for job in queued {
            durable |= !job.effects.is_empty();
            if job.ack.is_none() {
                unacked += job.entries.len() as u64;
            }
            entries.extend(job.entries);
            effects.extend(job.effects);
            acks.push((entries.len(), job.ack));
        }
        let start = self
            .shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .head
            .clone();
        let mut prev = start.hash;
        let mut records = Vec::with_capacity(entries.len());
        for (i, entry) in entries.into_iter().enumerate() {
            let seq = start.seq + 1 + i as u64;
            let record = self.chain.seal(&prev, seq, entry);
            prev.clone_from(&record.hash);
            records.push(record);
        }
        let first = start.seq + 1;
        // Callers of a batch with no effects are answered once it is durable, while the store
        // applies it; the others once their change is in the store.
        let durable_head = records.last().map(|last| Head {
            seq: last.seq,
            hash: last.hash.clone(),
        });
        let shared = &self.shared;
        let mut answer = || {
            // The head moves before anyone is answered: a caller may read it next.
            if let Some(head) = &durable_head {
                shared.lock().unwrap_or_else(PoisonError::into_inner).head = head.clone();
            }
            for (end, ack) in &mut acks {
                if let Some(ack) = ack.take() {
                    let _ = ack.send(Ok(first + *end as u64 - 1));
                }
            }
        };
        let result = store.append_early(&records, &effects, durable, &mut answer);
        fail::fail_point!(
            "audit-stored",
            !effects.is_empty(),
            |_| std::process::abort()
        );
        let mut s = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        match &result {
            Ok(()) => {
                if owed.is_some() {
                    *outage_now = None;
                    if let Err(e) = store.note_outage(None) {
                        tracing::warn!(error = %e, "the outage note could not be cleared; the next start notes it again");
                    }
                    tracing::warn!(
                        "the audit store recovered; an audit_failure note says what the log lacks"
                    );
                }
                if let Some(last) = records.last() {
                    s.head = Head {
                        seq: last.seq,
                        hash: last.hash.clone(),
                    };
                }
                s.failure = None;
            }
            Err(e) => {
                let note = u64::from(owed.is_some());
                let mut outage = owed.unwrap_or_else(|| Outage {
                    since_ms: now_ms(),
                    ..Outage::default()
                });
                if outage.batches == 0 {
                    outage.since_ms = now_ms();
                }
                let stored = records.len() as u64 - note;
                if stored > 0 {
                    outage.batches += 1;
                    outage.entries += stored;
                    outage.answered += unacked;
                }
                // Kept outside the log (blocks allocated in advance): a restart still notes it.
                if let Err(e) = store.note_outage(Some(&outage.text())) {
                    tracing::error!(error = %e, "the outage note could not be kept");
                }
                *outage_now = Some(outage);
                tracing::error!(error = %e, records = records.len(), "audit batch not stored; denying until it recovers");
                s.failure = Some(e.to_string());
                // The batch may or may not have been written (a frame the ledger could not cut
                // back is applied at recovery): continue past the newest record written, the
                // ledger's, never from the store alone, which may lack an acknowledged batch
                // it failed to apply. Sequence numbers never go back.
                if let Ok(head) = written_head(store)
                    && head.seq >= s.head.seq
                {
                    s.head = head;
                }
            }
        }
        self.gauges
            .failing
            .store(result.is_err(), Ordering::Relaxed);
        drop(s);
        for (end, ack) in acks {
            if let Some(ack) = ack {
                let _ = ack.send(result.clone().map(|()| first + end as u64 - 1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::audit::record::{Checkpoint, Record};
    use crate::audit::store::{Query, Stored};

    /// A store whose first batch reaches the ledger (and is acknowledged) but not the tree,
    /// whose second write fails outright, and which refuses any batch that would number a
    /// record the ledger already holds.
    #[derive(Default)]
    struct Lagging {
        ledger: Mutex<Vec<Record>>,
        tree: Mutex<Vec<Record>>,
        writes: Mutex<u32>,
        overwrites: Mutex<Vec<u64>>,
    }

    impl AuditStore for Lagging {
        fn append(&self, _: &[Record], _: &[Effect], _: bool) -> Result<(), StoreError> {
            Err(StoreError("not used".into()))
        }
        fn append_early(
            &self,
            batch: &[Record],
            _: &[Effect],
            _: bool,
            on_durable: &mut dyn FnMut(),
        ) -> Result<(), StoreError> {
            let mut writes = self.writes.lock().unwrap();
            *writes += 1;
            let mut ledger = self.ledger.lock().unwrap();
            let newest = ledger.last().map_or(0, |r| r.seq);
            if batch[0].seq <= newest {
                self.overwrites.lock().unwrap().push(batch[0].seq);
            }
            match *writes {
                // Durable in the ledger, answered, then the tree's write fails.
                1 => {
                    ledger.extend_from_slice(batch);
                    on_durable();
                    Ok(())
                }
                2 => Err(StoreError("no space left on device".into())),
                _ => {
                    ledger.extend_from_slice(batch);
                    self.tree.lock().unwrap().extend_from_slice(batch);
                    on_durable();
                    Ok(())
                }
            }
        }
        fn apply(&self, _: &[Effect]) -> Result<(), StoreError> {
            Ok(())
        }
        fn sync(&self) -> Result<(), StoreError> {
            Ok(())
        }
        fn note_outage(&self, _: Option<&str>) -> Result<(), StoreError> {
            Ok(())
        }
        fn outage(&self) -> Option<String> {
            None
        }
        fn last(&self) -> Result<Option<Record>, StoreError> {
            Ok(self.tree.lock().unwrap().last().cloned())
        }
        fn head_record(&self) -> Result<Option<Record>, StoreError> {
            Ok(self.ledger.lock().unwrap().last().cloned())
        }
        fn scan(&self, _: u64, _: usize) -> Result<Vec<Stored>, StoreError> {
            Ok(Vec::new())
        }
        fn query(&self, _: &Query) -> Result<Vec<Record>, StoreError> {
            Ok(Vec::new())
        }
        fn cut_point(&self, _: Option<u64>, _: Option<u64>) -> Result<Option<Record>, StoreError> {
            Ok(None)
        }
        fn cut(&self, _: &Checkpoint) -> Result<u64, StoreError> {
            Ok(0)
        }
        fn checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
            Ok(None)
        }
    }

    fn note(n: u32) -> Entry {
        Event::Sidecar(Sidecar {
            kind: EntryKind::Admin,
            decision: format!("note-{n}"),
            ..Sidecar::default()
        })
        .into()
    }

    #[tokio::test]
    async fn after_a_failed_batch_numbering_continues_past_the_ledger_not_the_store() {
        let store = Arc::new(Lagging::default());
        let audit = Audit::start(store.clone(), Chain::plain(), Durability::Group).unwrap();
        audit.record(note(1)).await.unwrap();
        assert!(audit.record(note(2)).await.is_err());
        audit.record(note(3)).await.unwrap();
        audit.close();
        assert!(
            store.overwrites.lock().unwrap().is_empty(),
            "batches numbered over acknowledged records: {:?}",
            store.overwrites.lock().unwrap()
        );
        let seqs: Vec<u64> = store.ledger.lock().unwrap().iter().map(|r| r.seq).collect();
        // The acknowledged first record, the outage note, the third.
        assert_eq!(seqs, [1, 2, 3]);
        let decisions: Vec<String> = store
            .ledger
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.entry.decision.clone())
            .collect();
        assert_eq!(decisions, ["note-1", "audit_failure", "note-3"]);
    }
}
