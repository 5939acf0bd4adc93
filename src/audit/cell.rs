//! The data directory's sled database behind one swappable handle, so that it can be
//! reopened while the sidecar runs.
//!
//! sled 0.34 keeps the first I/O error it meets (a full disk, say) and fails every later
//! operation with it until the database is opened again. Every store reads its tree through
//! this cell, per operation, so that the audit writer can reopen the database once the cause
//! is gone ([`SledCell::reopen`]): the old handle is dropped, sled recovers from its own
//! files, and the ledger supplies what sled lacks.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;

use super::error::StoreError;

/// How long a reopen waits for the old database to let go of its lock (requests still using
/// it finish within this).
const RELEASE_WAIT: Duration = Duration::from_secs(3);

/// The database, and how to open it again.
pub(crate) struct SledCell {
    db: ArcSwapOption<sled::Db>,
    /// `None` for a temporary database, which cannot be reopened.
    config: Option<(PathBuf, u64)>,
    reopening: Mutex<()>,
}

impl std::fmt::Debug for SledCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledCell")
            .field("dir", &self.config.as_ref().map(|(d, _)| d))
            .finish_non_exhaustive()
    }
}

/// Whether sled refused to open a database because a process holds its lock: another
/// toolgate, or this one's old handle during a reopen.
pub(crate) fn lock_held(e: &sled::Error) -> bool {
    e.to_string().contains("could not acquire lock")
}

fn sled_err(e: impl std::fmt::Display) -> StoreError {
    StoreError(e.to_string())
}

/// Removes what a snapshot sled did not finish leaves in `dir`: `snap.<lsn>.generating`,
/// written before it is renamed into place. A full disk or a crash can leave one, empty or
/// cut short, and sled 0.34 then reads it as the newest snapshot and refuses to open. It is
/// never needed: the snapshot it would have replaced is still there, or sled rebuilds from
/// its log. Call only when an open without the lock held failed. Returns the names removed.
pub(crate) fn clear_snapshot_debris(dir: &std::path::Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("snap.")
            && name.ends_with(".generating")
            && std::fs::remove_file(entry.path()).is_ok()
        {
            tracing::warn!(
                file = %entry.path().display(),
                "removed an unfinished sled snapshot (left by a full disk or a crash) that kept the data directory from opening"
            );
            removed.push(name);
        }
    }
    removed
}

/// sled's configuration for directory `dir` with a page cache of `cache_bytes`.
pub(crate) fn sled_config(dir: &std::path::Path, cache_bytes: u64) -> sled::Config {
    sled::Config::new()
        .cache_capacity(cache_bytes)
        .flush_every_ms(None)
        .path(dir)
}

impl SledCell {
    /// A cell over `db`, reopened from `dir` with `cache_bytes` when it fails (`None`: a
    /// temporary database).
    pub(crate) fn new(db: sled::Db, reopen_from: Option<(PathBuf, u64)>) -> Arc<SledCell> {
        Arc::new(SledCell {
            db: ArcSwapOption::from_pointee(db),
            config: reopen_from,
            reopening: Mutex::new(()),
        })
    }

    /// The database, unless it is being reopened.
    pub(crate) fn db(&self) -> Result<Arc<sled::Db>, StoreError> {
        self.db.load_full().ok_or_else(|| {
            StoreError("the data directory is being reopened after a storage error".to_owned())
        })
    }

    /// Tree `name` of the database.
    pub(crate) fn tree(&self, name: &str) -> Result<sled::Tree, StoreError> {
        self.db()?.open_tree(name).map_err(sled_err)
    }

    /// Drops the database and opens it again from its directory (sled recovers from its own
    /// files). Fails, leaving the cell empty, if the old handle does not let go in time or
    /// the open fails; call again later.
    pub(crate) fn reopen(&self) -> Result<(), StoreError> {
        let Some((dir, cache)) = &self.config else {
            return Err(StoreError(
                "a temporary store cannot be reopened".to_owned(),
            ));
        };
        let _one = self
            .reopening
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        drop(self.db.swap(None));
        let start = Instant::now();
        let mut cleared = false;
        loop {
            match sled_config(dir, *cache).open() {
                Ok(db) => {
                    self.db.store(Some(Arc::new(db)));
                    tracing::warn!(data_dir = %dir.display(), "the data directory was reopened after a storage error");
                    return Ok(());
                }
                // Requests still holding the old database keep its lock for a moment.
                Err(e) if lock_held(&e) && start.elapsed() < RELEASE_WAIT => {
                    tracing::debug!(error = %e, "waiting for the old database to close");
                    std::thread::sleep(Duration::from_millis(20));
                }
                // A snapshot the failure cut short: cleared once, then opened again.
                Err(e) if !lock_held(&e) && !cleared && !clear_snapshot_debris(dir).is_empty() => {
                    cleared = true;
                }
                Err(e) => {
                    return Err(StoreError(format!(
                        "cannot reopen the data directory {}: {e}",
                        dir.display()
                    )));
                }
            }
        }
    }
}
