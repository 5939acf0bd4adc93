//! sled's side of a batch, applied off the answer path: once a batch's ledger frame is
//! durable and its callers answered, its block and index entries go to a thread of their own,
//! so the next batch's write and `fdatasync` never wait behind sled.
//!
//! The thread lets batches gather for up to [`LINGER`] and applies them together: the store
//! merges small ones into one block, because sled's cost is per key inserted (each insert
//! copies a node, and every eighth or so splits one), about 13 µs each on the 2-core machine,
//! seven keys per block. A quiet sidecar's one-record batches then share their index keys.
//!
//! Reads of one's own writes still hold: the store's reads first ask for everything handed
//! over to be applied now, and wait for it ([`Applier::wait`]). A batch sled fails to apply
//! stays in the ledger (it was acknowledged); the store is marked broken, later work is
//! skipped until the writer reopens sled, which applies the ledger's frames again. The queue
//! is bounded, so a store slower than the disk holds the writer back instead of growing
//! memory.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use super::error::StoreError;

/// Batches that may wait to be applied before the writer waits for the applier.
const QUEUE: usize = 256;

/// How long batches may gather before they are applied (a read asks for them at once).
const LINGER: std::time::Duration = std::time::Duration::from_millis(5);

/// Most records applied together.
const GATHER: usize = 256;

/// What the applier is handed: a batch (its last sequence number and record count known).
pub(crate) trait Batch: Send + 'static {
    /// The batch's last sequence number.
    fn last(&self) -> u64;
    /// How many records it holds.
    fn records(&self) -> usize;
}

/// Applies gathered batches, in order.
pub(crate) type ApplyFn<W> = Box<dyn Fn(Vec<W>) -> Result<(), StoreError> + Send>;

enum Msg<W> {
    Work(W),
    /// A reader waits: apply what is gathered now.
    Now,
}

/// How far the applier has come: the last sequence number handed over, and the last one
/// applied (or skipped while the store is broken).
#[derive(Default)]
struct Progress {
    handed: u64,
    done: u64,
}

/// The applier thread and what it has done.
pub(crate) struct Applier<W: Batch> {
    tx: Mutex<Option<SyncSender<Msg<W>>>>,
    progress: Arc<(Mutex<Progress>, Condvar)>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl<W: Batch> Applier<W> {
    /// Starts the thread applying with `apply`; a failed apply sets `broken`.
    pub(crate) fn start(apply: ApplyFn<W>, broken: Arc<AtomicBool>) -> Result<Self, StoreError> {
        let (tx, rx) = sync_channel(QUEUE);
        let progress: Arc<(Mutex<Progress>, Condvar)> = Arc::default();
        let shared = progress.clone();
        let thread = std::thread::Builder::new()
            .name("toolgate-apply".to_owned())
            .spawn(move || run(&rx, &apply, &broken, &shared))
            .map_err(|e| StoreError(format!("cannot start the audit store's applier: {e}")))?;
        Ok(Applier {
            tx: Mutex::new(Some(tx)),
            progress,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Hands `work` over (waiting while the queue is full). Gives it back when the thread
    /// has stopped, for the caller to apply itself.
    pub(crate) fn push(&self, work: W) -> Result<(), W> {
        let guard = self.tx.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(tx) = guard.as_ref() else {
            return Err(work);
        };
        let last = work.last();
        {
            let (lock, _) = &*self.progress;
            let mut p = lock.lock().unwrap_or_else(PoisonError::into_inner);
            p.handed = p.handed.max(last);
        }
        let Err(refused) = tx.send(Msg::Work(work)) else {
            return Ok(());
        };
        // Nothing will apply it: taken back, and nobody waits for it.
        let (lock, cv) = &*self.progress;
        let mut p = lock.lock().unwrap_or_else(PoisonError::into_inner);
        p.done = p.done.max(last);
        cv.notify_all();
        match refused.0 {
            Msg::Work(w) => Err(w),
            Msg::Now => Ok(()),
        }
    }

    /// Has everything handed over so far applied now, and waits for it (or for it to be
    /// skipped: a broken store).
    pub(crate) fn wait(&self) {
        let (lock, cv) = &*self.progress;
        let p = lock.lock().unwrap_or_else(PoisonError::into_inner);
        let want = p.handed;
        let done = p.done;
        drop(p);
        if done >= want {
            return;
        }
        // A full queue is being taken off already: nothing lingers then.
        if let Some(tx) = self
            .tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            let _ = tx.try_send(Msg::Now);
        }
        if let Some(t) = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            t.thread().unpark();
        }
        let mut p = lock.lock().unwrap_or_else(PoisonError::into_inner);
        while p.done < want {
            p = cv
                .wait_timeout(p, std::time::Duration::from_millis(100))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            if p.done < want && self.stopped() {
                // A thread that died (a panic in sled) never gets there: the reader goes on
                // with what the store holds, and the ledger still holds the rest.
                tracing::error!(
                    "the audit store's applier stopped; recent records are in the ledger and applied at the next start"
                );
                return;
            }
        }
    }

    /// Whether the thread has ended.
    fn stopped(&self) -> bool {
        self.thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_none_or(std::thread::JoinHandle::is_finished)
    }
}

impl<W: Batch> Drop for Applier<W> {
    fn drop(&mut self) {
        close(&self.tx, &self.thread);
    }
}

/// Closes a worker thread's queue (`tx`) and waits for `thread` to finish what it holds
/// (woken first, in case it sleeps while work gathers).
pub(super) fn close<T>(tx: &Mutex<Option<T>>, thread: &Mutex<Option<std::thread::JoinHandle<()>>>) {
    drop(tx.lock().unwrap_or_else(PoisonError::into_inner).take());
    if let Some(t) = thread.lock().unwrap_or_else(PoisonError::into_inner).take() {
        t.thread().unpark();
        let _ = t.join();
    }
}

fn run<W: Batch>(
    rx: &Receiver<Msg<W>>,
    apply: &ApplyFn<W>,
    broken: &AtomicBool,
    progress: &(Mutex<Progress>, Condvar),
) {
    use std::sync::mpsc::TryRecvError;
    loop {
        let work = match rx.recv() {
            Ok(Msg::Work(w)) => w,
            Ok(Msg::Now) => continue,
            Err(_) => break,
        };
        let mut records = work.records();
        let mut works = vec![work];
        // Asleep while batches gather, so that handing one over wakes nobody; a reader
        // wakes it ([`Applier::wait`]).
        let deadline = std::time::Instant::now() + LINGER;
        let mut now = false;
        while records < GATHER && !now {
            match rx.try_recv() {
                Ok(Msg::Work(w)) => {
                    records += w.records();
                    works.push(w);
                }
                Ok(Msg::Now) | Err(TryRecvError::Disconnected) => now = true,
                Err(TryRecvError::Empty) => {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    std::thread::park_timeout(left);
                }
            }
        }
        let last = works.last().map_or(0, Batch::last);
        if !broken.load(Ordering::Acquire)
            && let Err(e) = apply(works)
        {
            // sled refuses everything after a failed write until it is reopened: the writer's
            // next batch reopens it and applies the ledger's frames again.
            broken.store(true, Ordering::Release);
            tracing::error!(error = %e, "an acknowledged batch is in the ledger but not yet in the store; it is applied when the store is reopened");
        }
        let (lock, cv) = progress;
        let mut p = lock.lock().unwrap_or_else(PoisonError::into_inner);
        p.done = p.done.max(last);
        cv.notify_all();
    }
}
