//! Where audit records live: the [`AuditStore`] trait and its sled implementation.
//!
//! Layout (one sled tree, so a batch of records and their index entries is applied
//! atomically). Each writer batch is one *block*, so a batch costs a handful of inserts however
//! many records it holds:
//! - `L` + first seq (big-endian) → the batch's records as JSON, one per line, consecutive,
//!   deflated (tag byte 1; blocks stored before that are the bare lines, and still read);
//! - `I` + field + 0 + value + 0 + first seq → the offsets (u16, big-endian) within that block
//!   of the records carrying that value, for the indexed fields (conv_id, trace_id, principal,
//!   tool, stage, decision).
//!
//! A filtered query walks one index prefix, newest first, instead of the whole log.

use serde::Serialize;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::apply::Applier;
use super::block::{
    Block, BlockWork, DEFLATED, INDEX, INDEXED, LOG, MAX_BLOCK, block_work, encode_block,
    group_puts, index_prefix, indexed, log_key, seq_of,
};
use super::cell::SledCell;
use super::error::StoreError;
use super::ledger::{self, Effect, Frame, Ledger};
use super::record::{Checkpoint, Record};

/// Filters for [`AuditStore::query`]. Results come newest first.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Query {
    /// Exact principal, e.g. `Agent::"dev-agent"`.
    pub principal: Option<String>,
    /// Exact tool name.
    pub tool: Option<String>,
    /// allow | deny | pending_approval (or an approval or reload event).
    pub decision: Option<String>,
    /// Deciding stage.
    pub stage: Option<String>,
    /// Conversation id.
    pub conv_id: Option<String>,
    /// Trace id.
    pub trace_id: Option<String>,
    /// Records at or after this time (unix ms).
    pub since_ms: Option<u64>,
    /// Records before this time (unix ms).
    pub until_ms: Option<u64>,
    /// Only records with a sequence number below this (the cursor of the previous page).
    pub before_seq: Option<u64>,
    /// Page size.
    pub limit: usize,
}

/// Durable, append-only storage of audit records, and of the state changes they carry.
pub trait AuditStore: Send + Sync {
    /// Appends `batch` (consecutive records) and applies `effects`, atomically: the records
    /// and the state changes are stored together or not at all. When `durable`, returns once
    /// they are on disk (`fdatasync`).
    fn append(&self, batch: &[Record], effects: &[Effect], durable: bool)
    -> Result<(), StoreError>;
    /// [`AuditStore::append`] that calls `on_durable` as soon as the records are durable, which
    /// may come before they are readable from the store (a batch with no effects: its callers
    /// need only the durable record, and are answered while the store applies it).
    fn append_early(
        &self,
        batch: &[Record],
        effects: &[Effect],
        durable: bool,
        on_durable: &mut dyn FnMut(),
    ) -> Result<(), StoreError> {
        self.append(batch, effects, durable)?;
        on_durable();
        Ok(())
    }
    /// Applies `effects` with no record (the audit log is off: benchmarks only).
    fn apply(&self, effects: &[Effect]) -> Result<(), StoreError>;
    /// Makes everything appended durable (an orderly stop).
    fn sync(&self) -> Result<(), StoreError>;
    /// Keeps (`Some`) or clears (`None`) the note of an outage in progress, outside the log
    /// (which cannot be written then), so that it survives a restart.
    fn note_outage(&self, text: Option<&str>) -> Result<(), StoreError>;
    /// The note of an outage that a stop interrupted, if any.
    fn outage(&self) -> Option<String>;
    /// The newest record.
    fn last(&self) -> Result<Option<Record>, StoreError>;
    /// The newest record written, readable from the store yet or not: where the next batch
    /// continues after a failed one. With a ledger it is the ledger's, whose frames are
    /// applied to the store at recovery (an acknowledged batch the store failed to apply is
    /// there): continuing from the store instead would number the next batch over it.
    fn head_record(&self) -> Result<Option<Record>, StoreError> {
        self.last()
    }
    /// Stored records in key order, from the first storage unit (sled: block) whose key is at
    /// or above `from_unit`, each with its unit, the position it is stored under and the record
    /// (or why its bytes do not parse). Units come whole, so a page may run past `limit` to the
    /// end of its last unit; the next page starts at the last unit + 1, so every stored unit is
    /// read exactly once (`verify` depends on it).
    fn scan(&self, from_unit: u64, limit: usize) -> Result<Vec<Stored>, StoreError>;
    /// Records matching `q`, newest first.
    fn query(&self, q: &Query) -> Result<Vec<Record>, StoreError>;
    /// Where retention may cut: the last record of the longest run of stored units (sled:
    /// blocks), from the oldest, whose last record is at or below `through_seq` or older than
    /// `before_ms`. `None` when nothing may go.
    fn cut_point(
        &self,
        through_seq: Option<u64>,
        before_ms: Option<u64>,
    ) -> Result<Option<Record>, StoreError>;
    /// Removes every record up to `cp.seq` (a [`AuditStore::cut_point`]) with its index
    /// entries and stores `cp`, atomically and durably. Returns how many records went.
    fn cut(&self, cp: &Checkpoint) -> Result<u64, StoreError>;
    /// The checkpoint of the last cut, if any.
    fn checkpoint(&self) -> Result<Option<Checkpoint>, StoreError>;
}

/// A record as found in the store.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The storage unit (sled: block key) it is stored in.
    pub unit: u64,
    /// The position it is stored under.
    pub key_seq: u64,
    /// The record, or why it does not parse.
    pub record: Result<Record, String>,
}

/// The sled tree of the log.
const TREE: &str = "audit";
const CHECKPOINT: &[u8] = b"C";

impl Query {
    /// The wanted values for [`INDEXED`], in that order.
    fn wanted(&self) -> [Option<&str>; 6] {
        [
            self.conv_id.as_deref(),
            self.trace_id.as_deref(),
            self.principal.as_deref(),
            self.tool.as_deref(),
            self.stage.as_deref(),
            self.decision.as_deref(),
        ]
    }
}

/// The sled implementation, behind the write-ahead [`Ledger`] when it has a directory.
pub(crate) struct SledAudit {
    cell: Arc<SledCell>,
    /// sled failed a write and keeps failing until reopened: the next append reopens it.
    broken: Arc<std::sync::atomic::AtomicBool>,
    /// Held while sled applies a batch on the writer's thread (one with state changes), so
    /// that a read after an answer sees its record (reads wait for the apply in progress).
    applying: std::sync::Mutex<()>,
    /// Applies batches whose callers were answered early, off the writer's thread (with a
    /// ledger only); reads wait for it too.
    applier: Option<Applier<BlockWork>>,
    /// No reopen is tried before this (a failed one backs off, so a store that cannot be
    /// reopened yet costs each batch one check, not a reopen).
    next_reopen: std::sync::Mutex<Option<std::time::Instant>>,
    /// The ledger and the outage note; none for a temporary store.
    ledger: Option<std::sync::Mutex<Ledger>>,
    /// The newest sequence number written (to the ledger, applied or not): a batch that
    /// would number a record at or below it is refused, so no record is ever written over.
    written: std::sync::atomic::AtomicU64,
    /// Free bytes the store leaves on its file system: below this a batch is refused before
    /// anything is written, so that neither the ledger nor sled ever meets a full disk (sled
    /// 0.34 cannot go on after a failed write until it is reopened).
    reserve: u64,
}

/// Free space a reopen after a failed write waits for (sled writes as it opens).
const REOPEN_FREE: u64 = 1024 * 1024;

/// Once the ledger holds this much, sled is made durable and the ledger emptied.
const LEDGER_LIMIT: u64 = 12 * 1024 * 1024;

impl SledAudit {
    /// A store with no ledger: nothing it holds survives a crash (temporary stores).
    pub(crate) fn new(cell: Arc<SledCell>) -> Result<Self, StoreError> {
        cell.tree(TREE)?;
        Ok(SledAudit {
            cell,
            broken: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            next_reopen: std::sync::Mutex::new(None),
            applying: std::sync::Mutex::new(()),
            applier: None,
            ledger: None,
            written: std::sync::atomic::AtomicU64::new(0),
            reserve: 0,
        })
    }

    fn tree(&self) -> Result<sled::Tree, StoreError> {
        self.cell.tree(TREE)
    }

    /// The store of data directory `dir`: opens its ledger and applies the frames sled lacks
    /// (a crash came between the ledger's `fdatasync` and sled's own flush), then empties it.
    ///
    /// Each record of a frame applied here must follow the one before it and carry its
    /// chain's seal, under the keyring in `dir` (secrets it lacks looked up among `keys`):
    /// a frame written without the key is refused before any of it takes effect.
    pub(crate) fn with_ledger(
        cell: Arc<SledCell>,
        dir: &std::path::Path,
        reserve: u64,
        keys: &[Vec<u8>],
    ) -> Result<Self, StoreError> {
        let mut store = SledAudit::new(cell)?;
        store.reserve = reserve;
        let (mut ledger, frames, damage) = Ledger::open(dir)?;
        if let Some(damage) = damage {
            store.judge(dir, &damage)?;
        }
        store.check_frames(dir, &frames, keys)?;
        store.replay(&mut ledger, frames)?;
        store.ledger = Some(std::sync::Mutex::new(ledger));
        let cell = store.cell.clone();
        store.applier = Some(Applier::start(
            Box::new(move |works| apply_blocks(&cell, works)),
            store.broken.clone(),
        )?);
        Ok(store)
    }

    /// Whether the store can start over a ledger damaged before its end: only when sled holds
    /// every record of the frames after the damage (so the bad frame's too, which comes before
    /// them). Else it refuses, naming the frame: starting would leave a hole in the log, or
    /// apply a forged or damaged frame.
    fn judge(&self, dir: &std::path::Path, damage: &ledger::Damage) -> Result<(), StoreError> {
        let mut stored = self.last()?.map_or(0, |r| r.seq);
        if let Some(cp) = self.checkpoint()? {
            stored = stored.max(cp.seq);
        }
        let next = damage.after.first().map_or(0, |f| f.first);
        let needed = damage.after.iter().map(|f| f.last).max().unwrap_or(0);
        let wal = dir.join("ledger").join("wal");
        if needed <= stored {
            tracing::warn!(
                ledger = %wal.display(),
                at = damage.at,
                stored,
                "the ledger is damaged at byte {} (a frame that does not check, with valid frames after it), but the store already holds every record after it; the ledger is emptied",
                damage.at
            );
            return Ok(());
        }
        Err(StoreError(format!(
            "the audit ledger {} is damaged at byte {}: the frame there does not check, and {} valid frames follow it (records {next} to {needed}), so this is not a write a crash cut short. The store holds records through {stored} only, so starting would leave a hole in the log or apply a damaged frame, and toolgate refuses. Keep a copy of the data directory. To start anyway, move ledger/wal aside: the records after {stored} are then lost, and `toolgate audit verify` reports the cut",
            wal.display(),
            damage.at,
            damage.after.len(),
        )))
    }

    /// Checks the links of every record in the `frames` sled lacks, from sled's head on.
    fn check_frames(
        &self,
        dir: &std::path::Path,
        frames: &[Frame],
        keys: &[Vec<u8>],
    ) -> Result<(), StoreError> {
        let mut head = self.last()?;
        let cp = self.checkpoint()?;
        let mut at = head.as_ref().map_or(0, |r| r.seq);
        let mut prev = head.take().map(|r| r.hash);
        if let Some(cp) = cp
            && cp.seq >= at
        {
            at = cp.seq;
            prev = Some(cp.hash);
        }
        if at == 0 {
            prev = Some(super::record::GENESIS.to_owned());
        }
        let fresh: Vec<&Frame> = frames.iter().filter(|f| f.last > at).collect();
        if fresh.is_empty() {
            return Ok(());
        }
        let (chain, _) = super::keys::chain_for_verify(dir, keys).map_err(|e| {
            StoreError(format!(
                "cannot check the audit ledger's frames before applying them: {e}"
            ))
        })?;
        let wal = dir.join("ledger").join("wal");
        for frame in fresh {
            let records = Block::decode(&log_key(frame.first), &frame.block).records;
            for r in records {
                let r = r.map_err(|e| {
                    StoreError(format!(
                        "a frame of the audit ledger {} holds a record that does not parse ({e}); nothing from the ledger was applied",
                        wal.display()
                    ))
                })?;
                // A gap before this frame is reported by `verify`; its seal is checked all
                // the same.
                let fault = match &prev {
                    Some(p) if r.seq == at + 1 => super::record::link_fault(&chain, p, &r),
                    _ => super::record::seal_fault(&chain, &r),
                };
                if let Some(why) = fault {
                    return Err(StoreError(format!(
                        "the audit ledger {} holds record {} that the chain does not seal: {why}. A frame written without the chain's key is forged (or the key it was sealed with is not given: `audit.hmac_key_file`), so nothing from the ledger was applied and toolgate refuses to start. Keep a copy of the data directory; to start anyway, move ledger/wal aside (its records are then lost, and `toolgate audit verify` reports the cut)",
                        wal.display(),
                        r.seq
                    )));
                }
                at = r.seq;
                prev = Some(r.hash);
            }
        }
        Ok(())
    }

    /// Applies the ledger's frames that sled lacks, makes sled durable, and empties the
    /// ledger.
    fn replay(&self, ledger: &mut Ledger, frames: Vec<Frame>) -> Result<(), StoreError> {
        let mut head = self.last()?.map_or(0, |r| r.seq);
        if let Some(cp) = self.checkpoint()? {
            head = head.max(cp.seq);
        }
        let mut replayed = 0usize;
        for frame in frames {
            if frame.last <= head {
                continue;
            }
            if frame.first != head + 1 {
                tracing::error!(
                    expected = head + 1,
                    found = frame.first,
                    "the ledger does not continue the stored log; applying it anyway (verify will show the gap)"
                );
            }
            let Frame {
                first,
                last,
                block,
                effects,
            } = frame;
            let records: Vec<Record> = Block::decode(&log_key(first), &block)
                .records
                .into_iter()
                .collect::<Result<_, _>>()
                .map_err(|e| {
                    StoreError(format!(
                        "a ledger frame holds a record that does not parse: {e}"
                    ))
                })?;
            self.commit(first, block, &records, &effects)?;
            head = last;
            replayed += 1;
        }
        self.written.fetch_max(head, Ordering::Relaxed);
        if replayed > 0 {
            tracing::warn!(
                batches = replayed,
                head,
                "applied batches from the ledger that the store lacked (a crash before its flush)"
            );
        }
        if ledger.len() > 0 {
            self.cell.db()?.flush().map_err(StoreError::from_sled)?;
            ledger.sync_data_dir()?;
            ledger.reset(head.saturating_add(1))?;
        }
        Ok(())
    }

    /// Reopens sled after a failed write (it refuses everything until then) and applies what
    /// the ledger holds beyond it.
    fn recover(&self, ledger: &mut Ledger) -> Result<(), StoreError> {
        let now = std::time::Instant::now();
        let mut next = self
            .next_reopen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if next.is_some_and(|at| now < at) {
            return Err(StoreError(
                "the store failed a write and is reopened once the cause is gone (free disk space); retrying".to_owned(),
            ));
        }
        // Tried again in a second, whatever happens now.
        *next = Some(now + std::time::Duration::from_secs(1));
        drop(next);
        if ledger.free_bytes().is_some_and(|free| free < REOPEN_FREE) {
            return Err(StoreError(format!(
                "the store failed a write, and the disk has under {} MiB free to reopen it; free some space (it is reopened by itself)",
                REOPEN_FREE / (1024 * 1024)
            )));
        }
        self.cell.reopen()?;
        let frames = ledger.frames()?;
        self.replay(ledger, frames)?;
        self.broken.store(false, Ordering::Relaxed);
        tracing::warn!("the audit store recovered from a failed write");
        Ok(())
    }

    /// Stores one block (with its index entries) and applies `effects`, in one sled
    /// transaction when there are effects.
    ///
    /// Without effects, the index entries and then the block are inserted one by one, not
    /// as a sled batch: sled writes its whole IO buffer to disk (`pwrite` and a waiting
    /// `sync_file_range`, twice) around every batch or transaction, so a batch per decision
    /// put two device writes beside each ledger `fdatasync`. One by one, sled writes only
    /// when its buffer fills or at the ledger's checkpoint flush. Nothing is lost by it:
    /// readers wait for `settled`, and sled recovers a prefix of its writes, so a
    /// block it recovers has its index entries; a block it lost is in the ledger, which
    /// applies every frame past the newest stored block again.
    fn commit(
        &self,
        first: u64,
        block: Vec<u8>,
        batch: &[Record],
        effects: &[Effect],
    ) -> Result<(), StoreError> {
        let work = block_work(first, block, batch);
        if effects.is_empty() {
            return apply_blocks(&self.cell, vec![work]);
        }
        fail::fail_point!("store-apply-error", |_| Err(StoreError(
            "injected store failure (TOOLGATE_FAILPOINTS)".to_owned()
        )));
        let mut b = sled::Batch::default();
        for (k, v) in group_puts(vec![work])? {
            b.insert(k, v);
        }
        self.transact(Some(&b), effects)
    }

    /// Applies `batch` to the audit tree (if any) and `effects` to their trees, atomically.
    fn transact(&self, batch: Option<&sled::Batch>, effects: &[Effect]) -> Result<(), StoreError> {
        use sled::Transactional;
        let mut names: Vec<&str> = effects.iter().map(|e| e.tree.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        let mut trees = vec![self.tree()?];
        for name in &names {
            trees.push(self.cell.tree(name)?);
        }
        let slot = |name: &str| names.binary_search(&name).map(|i| i + 1).unwrap_or(0);
        trees
            .as_slice()
            .transaction(|txs| {
                if let (Some(b), Some(audit)) = (batch, txs.first()) {
                    audit.apply_batch(b)?;
                }
                for e in effects {
                    let Some(tx) = txs.get(slot(&e.tree)) else {
                        continue;
                    };
                    match &e.value {
                        Some(v) => {
                            tx.insert(e.key.as_slice(), v.as_slice())?;
                        }
                        None => {
                            tx.remove(e.key.as_slice())?;
                        }
                    }
                }
                Ok::<(), sled::transaction::ConflictableTransactionError<()>>(())
            })
            .map_err(|e| StoreError(format!("state change not applied: {e:?}")))
    }

    /// [`AuditStore::append`]; with `on_durable`, a batch with no effects is acknowledged
    /// once durable in the ledger, before sled has it. If sled then fails, the records stay in
    /// the ledger (they were acknowledged) and the next batch reopens sled and applies them.
    fn append_inner(
        &self,
        batch: &[Record],
        effects: &[Effect],
        durable: bool,
        mut on_durable: Option<&mut dyn FnMut()>,
    ) -> Result<(), StoreError> {
        let (Some(first), Some(last)) = (batch.first().map(|r| r.seq), batch.last().map(|r| r.seq))
        else {
            return self.apply(effects);
        };
        if batch.len() > MAX_BLOCK {
            return Err(StoreError(format!(
                "a batch of {} records exceeds the block limit of {MAX_BLOCK}",
                batch.len()
            )));
        }
        let block = encode_block(batch)?;
        let Some(ledger) = &self.ledger else {
            self.commit(first, block, batch, effects)?;
            if durable {
                self.cell.db()?.flush().map_err(StoreError::from_sled)?;
            }
            return Ok(());
        };
        let mut ledger = ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.check_space(&ledger)?;
        if self.broken.load(Ordering::Acquire) {
            // Not while the applier may still be writing to the store being reopened.
            self.wait_applied();
            self.recover(&mut ledger)?;
        }
        fail::fail_point!("ledger-write-error", !effects.is_empty(), |_| Err(
            StoreError("injected failure (TOOLGATE_FAILPOINTS)".to_owned())
        ));
        let written = self.written.load(Ordering::Relaxed);
        if first <= written {
            return Err(StoreError(format!(
                "a batch from record {first} would write over records the log holds (through {written}); refused, and the writer continues after them"
            )));
        }
        let mark = ledger.len();
        ledger.append(&ledger::encode(first, last, &block, effects)?)?;
        // From here the frame may be in the ledger, and so applied at recovery, until it is
        // cut back.
        self.written.store(last, Ordering::Relaxed);
        let cut_back = |ledger: &mut Ledger| match ledger.truncate(mark) {
            Ok(()) => self.written.store(written, Ordering::Relaxed),
            // Sequence numbers still go on past it, so nothing is written over.
            Err(e) => tracing::error!(
                error = %e,
                "a batch whose write failed could not be cut from the ledger: its records may still be applied when the store reopens, so a caller answered 503 may find them in the log"
            ),
        };
        fail::fail_point!("ledger-appended", !effects.is_empty(), |_| {
            std::process::abort()
        });
        if durable && let Err(e) = ledger.sync() {
            cut_back(&mut ledger);
            return Err(e);
        }
        fail::fail_point!("ledger-synced", !effects.is_empty(), |_| {
            std::process::abort()
        });
        if effects.is_empty()
            && let (Some(answer), Some(applier)) = (on_durable.as_mut(), &self.applier)
        {
            // Handed over before the answer, so a read after it waits for the apply.
            let handed = applier.push(block_work(first, block, batch));
            answer();
            if let Err(work) = handed {
                // The applier has stopped: applied here, as before there was one.
                if let Err(e) = apply_blocks(&self.cell, vec![work]) {
                    self.broken.store(true, Ordering::Release);
                    tracing::error!(error = %e, "an acknowledged batch is in the ledger but not yet in the store; it is applied when the store is reopened");
                }
            }
            self.empty_when_full(&mut ledger, last);
            return Ok(());
        }
        // A batch whose callers wait for the store: everything before it is applied first
        // (its failure is then seen here, and the order of applies is the ledger's).
        self.wait_applied();
        if self.broken.load(Ordering::Acquire) {
            cut_back(&mut ledger);
            return Err(StoreError(
                "the store failed to apply an earlier batch; nothing changed, and the store is reopened with the next write".to_owned(),
            ));
        }
        let applying = self
            .applying
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let early = match on_durable.as_mut() {
            Some(answer) if effects.is_empty() => {
                answer();
                true
            }
            _ => false,
        };
        let committed = self.commit(first, block, batch, effects);
        drop(applying);
        if let Err(e) = committed {
            // sled refuses everything after a failed write until it is reopened: the next
            // append does, and applies what the ledger holds.
            self.broken.store(true, Ordering::Relaxed);
            if early {
                tracing::error!(error = %e, "an acknowledged batch is in the ledger but not yet in the store; it is applied when the store is reopened");
                return Ok(());
            }
            // Not in the store, so not in the ledger either: nothing happened.
            cut_back(&mut ledger);
            return Err(e);
        }
        self.empty_when_full(&mut ledger, last);
        Ok(())
    }

    /// Once the ledger holds [`LEDGER_LIMIT`]: everything applied, sled made durable past
    /// the ledger (its flush, then an fsync of each of its files), then the ledger emptied.
    fn empty_when_full(&self, ledger: &mut Ledger, last: u64) {
        if ledger.len() <= LEDGER_LIMIT {
            return;
        }
        self.wait_applied();
        if self.broken.load(Ordering::Acquire) {
            // Kept: the reopen applies it.
            return;
        }
        let emptied = self
            .cell
            .db()
            .and_then(|db| db.flush().map_err(StoreError::from_sled))
            .and_then(|_| ledger.sync_data_dir())
            .and_then(|()| ledger.reset(last.saturating_add(1)));
        if let Err(e) = emptied {
            tracing::warn!(error = %e, "the ledger could not be emptied; it is kept and tried again");
        }
    }

    /// Waits until the applier has applied (or skipped) every batch handed to it.
    fn wait_applied(&self) {
        if let Some(applier) = &self.applier {
            applier.wait();
        }
    }

    /// Waits for a batch being applied after its callers were answered.
    fn settled(&self) {
        self.wait_applied();
        drop(
            self.applying
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
    }

    /// Refuses a write that would leave less than the reserve free.
    fn check_space(&self, ledger: &Ledger) -> Result<(), StoreError> {
        match ledger.free_bytes() {
            Some(free) if free < self.reserve => Err(StoreError(format!(
                "the data directory's disk has {} MiB free, under the {} MiB the store keeps in reserve; nothing was written (free some space: writing resumes by itself)",
                free / (1024 * 1024),
                self.reserve / (1024 * 1024)
            ))),
            _ => Ok(()),
        }
    }

    /// The block holding position `seq`, if any.
    fn block_at(&self, seq: u64) -> Result<Option<Block>, StoreError> {
        let found = self
            .tree()?
            .range(log_key(0)..=log_key(seq))
            .next_back()
            .transpose()
            .map_err(StoreError::from_sled)?;
        Ok(found.map(|(k, v)| Block::decode(&k, &v)))
    }
}

/// Applies `works` (consecutive batches, in order) to the log's tree: runs of small ones
/// (raw JSON lines, numbered one after the other) become one block, up to [`MAX_BLOCK`]
/// records and [`MERGE_BYTES`] of lines.
fn apply_blocks(cell: &SledCell, works: Vec<BlockWork>) -> Result<(), StoreError> {
    // sled meeting a disk error (EIO, a read-only file system) fails the write and refuses
    // everything after it (tests inject it).
    fail::fail_point!("store-apply-error", |_| Err(StoreError(
        "injected store failure (TOOLGATE_FAILPOINTS)".to_owned()
    )));
    let tree = cell.tree(TREE)?;
    let mut works = works.into_iter().peekable();
    while let Some(w) = works.next() {
        let raw = |w: &BlockWork| w.block.first() != Some(&DEFLATED);
        let mut records = w.count;
        let mut bytes = w.block.len();
        let mut last = w.last;
        let mergeable = raw(&w);
        let mut group = vec![w];
        while let Some(next) = works.peek()
            && mergeable
            && raw(next)
            && next.first == last + 1
            && records + next.count <= MAX_BLOCK
            && bytes + next.block.len() < MERGE_BYTES
        {
            records += next.count;
            bytes += next.block.len() + 1;
            last = next.last;
            group.extend(works.next());
        }
        for (k, v) in group_puts(group)? {
            tree.insert(k, v).map_err(StoreError::from_sled)?;
        }
    }
    Ok(())
}

/// Most bytes of JSON lines the applier merges into one block.
const MERGE_BYTES: usize = 256 * 1024;

impl AuditStore for SledAudit {
    fn head_record(&self) -> Result<Option<Record>, StoreError> {
        if let Some(ledger) = &self.ledger {
            let frames = ledger
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .frames()?;
            // The ledger holds every batch since it was last emptied, in order.
            if let Some(frame) = frames.last() {
                return match Block::decode(&log_key(frame.first), &frame.block)
                    .records
                    .pop()
                {
                    Some(r) => r.map(Some).map_err(|e| {
                        StoreError(format!("the ledger's newest record does not parse: {e}"))
                    }),
                    None => Err(StoreError("the ledger's newest frame is empty".to_owned())),
                };
            }
        }
        self.last()
    }

    fn append(
        &self,
        batch: &[Record],
        effects: &[Effect],
        durable: bool,
    ) -> Result<(), StoreError> {
        self.append_inner(batch, effects, durable, None)
    }

    fn append_early(
        &self,
        batch: &[Record],
        effects: &[Effect],
        durable: bool,
        on_durable: &mut dyn FnMut(),
    ) -> Result<(), StoreError> {
        self.append_inner(batch, effects, durable, Some(on_durable))
    }

    fn apply(&self, effects: &[Effect]) -> Result<(), StoreError> {
        if effects.is_empty() {
            return Ok(());
        }
        self.transact(None, effects)
    }

    fn sync(&self) -> Result<(), StoreError> {
        match &self.ledger {
            Some(ledger) => ledger
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .sync(),
            None => self
                .cell
                .db()?
                .flush()
                .map(|_| ())
                .map_err(StoreError::from_sled),
        }
    }

    fn note_outage(&self, text: Option<&str>) -> Result<(), StoreError> {
        match &self.ledger {
            Some(ledger) => ledger
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .note_outage(text),
            None => Ok(()),
        }
    }

    fn outage(&self) -> Option<String> {
        self.ledger.as_ref().and_then(|l| {
            l.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .outage()
        })
    }

    fn last(&self) -> Result<Option<Record>, StoreError> {
        self.settled();
        let found = self
            .tree()?
            .scan_prefix([LOG])
            .next_back()
            .transpose()
            .map_err(StoreError::from_sled)?;
        let Some((k, v)) = found else { return Ok(None) };
        match Block::decode(&k, &v).records.pop() {
            Some(r) => r
                .map(Some)
                .map_err(|e| StoreError(format!("the newest record does not parse: {e}"))),
            None => Ok(None),
        }
    }

    fn scan(&self, from_unit: u64, limit: usize) -> Result<Vec<Stored>, StoreError> {
        self.settled();
        let mut out = Vec::new();
        for kv in self.tree()?.range(log_key(from_unit)..=log_key(u64::MAX)) {
            if out.len() >= limit {
                break;
            }
            let (k, v) = kv.map_err(StoreError::from_sled)?;
            let block = Block::decode(&k, &v);
            let first = block.first;
            out.extend(
                block
                    .records
                    .into_iter()
                    .enumerate()
                    .map(|(i, record)| Stored {
                        unit: first,
                        key_seq: first.saturating_add(i as u64),
                        record,
                    }),
            );
        }
        Ok(out)
    }

    fn query(&self, q: &Query) -> Result<Vec<Record>, StoreError> {
        self.settled();
        let limit = q.limit.max(1);
        let upper = q.before_seq.unwrap_or(u64::MAX);
        let wanted = q.wanted();
        let keep = |r: &Record| {
            let e = &r.entry;
            r.seq < upper
                && wanted
                    .iter()
                    .zip(indexed(e))
                    .all(|(want, have)| want.is_none_or(|w| Some(w) == have))
                && q.since_ms.is_none_or(|s| e.at_ms >= s)
                && q.until_ms.is_none_or(|u| e.at_ms < u)
        };
        // Walk the first index that applies (newest first); without one, the log itself.
        let index = INDEXED
            .iter()
            .zip(wanted)
            .find_map(|(f, v)| v.map(|v| index_prefix(f, v)));
        let mut out = Vec::new();
        match index {
            Some(prefix) => {
                let mut hi = prefix.clone();
                hi.extend_from_slice(&upper.to_be_bytes());
                let mut cached: Option<Block> = None;
                for kv in self.tree()?.range(prefix.clone()..hi).rev() {
                    let (k, offsets) = kv.map_err(StoreError::from_sled)?;
                    let Some(first) = seq_of(&k) else { continue };
                    for pair in offsets.chunks_exact(2).rev() {
                        let Ok(pair) = <[u8; 2]>::try_from(pair) else {
                            continue;
                        };
                        let offset = u16::from_be_bytes(pair);
                        let seq = first.saturating_add(u64::from(offset));
                        if cached.as_ref().is_none_or(|b| b.first != first) {
                            cached = self.block_at(seq)?;
                        }
                        let Some(block) = &cached else { continue };
                        let found = seq
                            .checked_sub(block.first)
                            .and_then(|i| block.records.get(usize::try_from(i).ok()?));
                        if let Some(Ok(r)) = found
                            && keep(r)
                        {
                            out.push(r.clone());
                            if out.len() >= limit {
                                return Ok(out);
                            }
                        }
                    }
                }
            }
            None => {
                for kv in self.tree()?.range(log_key(0)..log_key(upper)).rev() {
                    let (k, v) = kv.map_err(StoreError::from_sled)?;
                    let block = Block::decode(&k, &v);
                    for r in block.records.iter().rev() {
                        let r = r.as_ref().map_err(|e| {
                            StoreError(format!("a stored record does not parse: {e}"))
                        })?;
                        if keep(r) {
                            out.push(r.clone());
                            if out.len() >= limit {
                                return Ok(out);
                            }
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    fn cut_point(
        &self,
        through_seq: Option<u64>,
        before_ms: Option<u64>,
    ) -> Result<Option<Record>, StoreError> {
        let mut cut = None;
        for kv in self.tree()?.range(log_key(0)..=log_key(u64::MAX)) {
            let (k, v) = kv.map_err(StoreError::from_sled)?;
            let Some(Ok(last)) = Block::decode(&k, &v).records.pop() else {
                break;
            };
            let goes = through_seq.is_some_and(|t| last.seq <= t)
                || before_ms.is_some_and(|b| last.entry.at_ms < b);
            if !goes {
                break;
            }
            cut = Some(last);
        }
        Ok(cut)
    }

    fn cut(&self, cp: &Checkpoint) -> Result<u64, StoreError> {
        let mut b = sled::Batch::default();
        let mut removed = 0u64;
        for kv in self.tree()?.range(log_key(0)..=log_key(cp.seq)) {
            let (k, v) = kv.map_err(StoreError::from_sled)?;
            let block = Block::decode(&k, &v);
            let end = block.position(block.records.len().saturating_sub(1));
            if end > cp.seq {
                return Err(StoreError(format!(
                    "cannot cut at record {}: it is inside a block ending at {end}",
                    cp.seq
                )));
            }
            removed += block.records.len() as u64;
            b.remove(k);
        }
        for kv in self.tree()?.scan_prefix([INDEX]) {
            let (k, _) = kv.map_err(StoreError::from_sled)?;
            if seq_of(&k).is_some_and(|first| first <= cp.seq) {
                b.remove(k);
            }
        }
        let bytes = serde_json::to_vec(cp).map_err(|e| StoreError(e.to_string()))?;
        b.insert(CHECKPOINT, bytes);
        self.tree()?.apply_batch(b).map_err(StoreError::from_sled)?;
        self.cell.db()?.flush().map_err(StoreError::from_sled)?;
        if let Some(ledger) = &self.ledger {
            // sled's flush stops at sync_file_range: fsyncs of its files make the cut durable.
            ledger
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .sync_data_dir()?;
        }
        Ok(removed)
    }

    fn checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
        self.tree()?
            .get(CHECKPOINT)
            .map_err(StoreError::from_sled)?
            .map(|v| {
                serde_json::from_slice(&v).map_err(|e| {
                    StoreError(format!("the retention checkpoint does not parse: {e}"))
                })
            })
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::record::Entry;
    use crate::audit::{Chain, GENESIS, verify::ChainVerdict, verify::verify};

    fn entry(n: u64) -> Entry {
        Entry {
            id: format!("d{n}"),
            at_ms: n,
            principal: Some("Agent::\"a\"".into()),
            decision: "allow".into(),
            ..Entry::blank()
        }
    }

    /// Batches answered early reach sled through the applier; a query right after the last
    /// answer sees every record, with the index pointing at the right ones, and the chain
    /// verifies. A run of small batches applied together is one block.
    #[test]
    fn batches_applied_behind_the_ledger_are_merged_and_read_back_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::audit::cell::sled_config(&dir.path().join("db"), 1 << 20)
            .open()
            .unwrap();
        let store = SledAudit::with_ledger(SledCell::new(db, None), dir.path(), 0, &[]).unwrap();
        let chain = Chain::plain();
        let mut prev = GENESIS.to_owned();
        for seq in 1..=30u64 {
            let mut e = entry(seq);
            if seq % 3 == 0 {
                e.decision = "deny".into();
            }
            let r = chain.seal(&prev, seq, e);
            prev.clone_from(&r.hash);
            let mut answered = false;
            store
                .append_early(&[r], &[], true, &mut || answered = true)
                .unwrap();
            assert!(answered, "batch {seq} was not answered once durable");
        }
        let denied = store
            .query(&Query {
                decision: Some("deny".into()),
                limit: 100,
                ..Query::default()
            })
            .unwrap();
        let seqs: Vec<u64> = denied.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, (1..=10).rev().map(|i| i * 3).collect::<Vec<u64>>());
        let all: Vec<u64> = store
            .scan(0, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|s| s.record.unwrap().seq)
            .collect();
        assert_eq!(all, (1..=30).collect::<Vec<u64>>());
        assert!(matches!(
            verify(&store, &chain, None).unwrap(),
            ChainVerdict::Intact { .. }
        ));

        // Gathered together, five one-record batches become one block.
        let db = sled::Config::new().temporary(true).open().unwrap();
        let merged = SledAudit::new(SledCell::new(db, None)).unwrap();
        let mut prev = GENESIS.to_owned();
        let mut works = Vec::new();
        for seq in 1..=5u64 {
            let r = chain.seal(&prev, seq, entry(seq));
            prev.clone_from(&r.hash);
            let batch = [r];
            works.push(block_work(seq, encode_block(&batch).unwrap(), &batch));
        }
        apply_blocks(&merged.cell, works).unwrap();
        assert_eq!(merged.tree().unwrap().scan_prefix([LOG]).count(), 1);
        let found = merged
            .query(&Query {
                principal: Some("Agent::\"a\"".into()),
                limit: 100,
                ..Query::default()
            })
            .unwrap();
        assert_eq!(
            found.iter().map(|r| r.seq).collect::<Vec<u64>>(),
            vec![5, 4, 3, 2, 1]
        );
        assert!(matches!(
            verify(&merged, &chain, None).unwrap(),
            ChainVerdict::Intact { .. }
        ));
    }

    /// A quiet moment's batch is stored as JSON lines (no compression on the durable path),
    /// a busy one deflated; both read back in order.
    #[test]
    fn a_busy_batch_is_deflated_and_a_quiet_one_is_not() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let store = SledAudit::new(SledCell::new(db, None)).unwrap();
        let chain = Chain::plain();
        let mut prev = GENESIS.to_owned();
        let mut records = Vec::new();
        for seq in 1..=40 {
            let r = chain.seal(&prev, seq, entry(seq));
            prev.clone_from(&r.hash);
            records.push(r);
        }
        store.append(&records[..1], &[], true).unwrap();
        store.append(&records[1..], &[], true).unwrap();
        let tree = store.tree().unwrap();
        assert_eq!(tree.get(log_key(1)).unwrap().unwrap().first(), Some(&b'{'));
        assert_eq!(
            tree.get(log_key(2)).unwrap().unwrap().first(),
            Some(&DEFLATED)
        );
        let all: Vec<u64> = store
            .scan(0, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|s| s.record.unwrap().seq)
            .collect();
        assert_eq!(all, (1..=40).collect::<Vec<_>>());
    }

    #[test]
    fn blocks_stored_before_compression_still_read_query_and_verify() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let store = SledAudit::new(SledCell::new(db, None)).unwrap();
        let chain = Chain::plain();
        let r1 = chain.seal(GENESIS, 1, entry(1));
        let r2 = chain.seal(&r1.hash, 2, entry(2));
        let r3 = chain.seal(&r2.hash, 3, entry(3));
        // Record 1 as a block was stored before compression: the bare JSON line, indexed.
        store
            .tree()
            .unwrap()
            .insert(log_key(1), serde_json::to_vec(&r1).unwrap())
            .unwrap();
        let mut k = index_prefix("principal", "Agent::\"a\"");
        k.extend_from_slice(&1u64.to_be_bytes());
        store
            .tree()
            .unwrap()
            .insert(k, 0u16.to_be_bytes().to_vec())
            .unwrap();
        store.append(&[r2.clone(), r3.clone()], &[], true).unwrap();
        // A batch this small is stored as JSON lines too (see `COMPRESS_FROM`).
        let stored = store.tree().unwrap().get(log_key(2)).unwrap().unwrap();
        assert_eq!(stored.first(), Some(&b'{'));

        assert_eq!(store.last().unwrap(), Some(r3.clone()));
        let all: Vec<Record> = store
            .scan(0, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|s| s.record.unwrap())
            .collect();
        assert_eq!(all, [r1.clone(), r2.clone(), r3.clone()]);
        let q = Query {
            principal: Some("Agent::\"a\"".into()),
            limit: 10,
            ..Query::default()
        };
        assert_eq!(store.query(&q).unwrap(), [r3, r2, r1]);
        assert!(matches!(
            verify(&store, &chain, None).unwrap(),
            ChainVerdict::Intact { records: 3, .. }
        ));
    }

    #[test]
    fn a_block_that_does_not_inflate_is_reported_not_trusted() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let store = SledAudit::new(SledCell::new(db, None)).unwrap();
        let chain = Chain::plain();
        let r1 = chain.seal(GENESIS, 1, entry(1));
        store.append(&[r1], &[], true).unwrap();
        store
            .tree()
            .unwrap()
            .insert(log_key(1), vec![DEFLATED, 0xff, 0x00, 0x12])
            .unwrap();
        match verify(&store, &chain, None).unwrap() {
            ChainVerdict::Broken { seq: 1, why } => assert!(why.contains("inflate"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
