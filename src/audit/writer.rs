//! The one writer: a dedicated thread that numbers, chains and stores entries with group
//! commit. Every entry queued while a flush runs goes into the next batch, and one flush
//! acknowledges the whole batch, so durability costs one fsync per batch, not per decision.
//!
//! Fail closed: when a batch cannot be stored, every entry in it gets an error (the caller
//! denies and answers without claiming a record), the writer reports unhealthy, and the chain
//! head is re-read from the store before the next batch.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};

use super::record::{Chain, Entry, GENESIS};
use super::store::{AuditStore, StoreError};

/// Most entries one batch holds.
const MAX_BATCH: usize = 1024;

/// Whether an acknowledged record is on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Every batch is flushed to disk before it is acknowledged (group commit).
    Group,
    /// Acknowledged once in the store's memory; the store flushes in the background
    /// (sled: every 500 ms). A crash can lose the last moments.
    Buffered,
}

/// Where the chain stands: the newest record's number and hash.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
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

/// A handle to the audit trail. Cheap to share; dropping the last one stops the writer after
/// it has stored what was queued.
pub struct Audit {
    tx: Mutex<Option<Sender<Job>>>,
    shared: Arc<Mutex<Shared>>,
    store: Arc<dyn AuditStore>,
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
        let (tx, rx) = channel();
        let thread = {
            let (store, shared) = (store.clone(), shared.clone());
            std::thread::Builder::new()
                .name("toolgate-audit".to_owned())
                .spawn(move || write_loop(&rx, store.as_ref(), &chain, durability, &shared))
                .map_err(|e| StoreError(format!("cannot start the audit writer: {e}")))?
        };
        Ok(Audit {
            tx: Mutex::new(Some(tx)),
            shared,
            store,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Appends `entry` and waits until it is stored (durably, under group commit). Returns its
    /// sequence number.
    pub async fn record(&self, entry: Entry) -> Result<u64, StoreError> {
        let (ack, done) = tokio::sync::oneshot::channel();
        self.send(entry, Some(ack))?;
        done.await
            .map_err(|_| StoreError("the audit writer stopped".to_owned()))?
    }

    /// Appends `entry` without waiting (reload and expiry events, recorded from threads that
    /// must not block on disk). A failure shows in [`Audit::failure`].
    pub fn record_detached(&self, entry: Entry) {
        if let Err(e) = self.send(entry, None) {
            tracing::error!(error = %e, "audit entry not queued");
        }
    }

    fn send(&self, entry: Entry, ack: Option<Ack>) -> Result<(), StoreError> {
        let guard = self.tx.lock().unwrap_or_else(PoisonError::into_inner);
        let tx = guard
            .as_ref()
            .ok_or_else(|| StoreError("the audit writer stopped".to_owned()))?;
        tx.send((entry, ack))
            .map_err(|_| StoreError("the audit writer stopped".to_owned()))
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

fn write_loop(
    rx: &Receiver<Job>,
    store: &dyn AuditStore,
    chain: &Chain,
    durability: Durability,
    shared: &Mutex<Shared>,
) {
    while let Ok(first) = rx.recv() {
        let mut queued = vec![first];
        while queued.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(next) => queued.push(next),
                Err(_) => break,
            }
        }
        let start = shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .head
            .clone();
        let mut prev = start.hash.clone();
        let mut records = Vec::with_capacity(queued.len());
        let mut acks = Vec::with_capacity(queued.len());
        for (i, (entry, ack)) in queued.into_iter().enumerate() {
            let seq = start.seq + 1 + i as u64;
            let record = chain.seal(&prev, seq, entry);
            prev.clone_from(&record.hash);
            records.push(record);
            acks.push((seq, ack));
        }
        let result = store.append(&records, durability == Durability::Group);
        let mut s = shared.lock().unwrap_or_else(PoisonError::into_inner);
        match &result {
            Ok(()) => {
                if let Some(last) = records.last() {
                    s.head = Head {
                        seq: last.seq,
                        hash: last.hash.clone(),
                    };
                }
                s.failure = None;
            }
            Err(e) => {
                tracing::error!(error = %e, records = records.len(), "audit batch not stored; denying until it recovers");
                s.failure = Some(e.to_string());
                // The batch may or may not have reached the store: continue from what is there.
                if let Ok(head) = current_head(store) {
                    s.head = head;
                }
            }
        }
        drop(s);
        for (seq, ack) in acks {
            if let Some(ack) = ack {
                let _ = ack.send(result.clone().map(|()| seq));
            }
        }
    }
}
