//! Advisory per-file locks for the file tools that change files (`write_file`, `edit_file`,
//! `delete_file`), so two agents editing one file are serialized instead of one losing its
//! update.
//!
//! A lock is an exclusive OS file lock (`flock`) on a file in the lock directory (`[exec]
//! lock_dir`, by default `<data_dir>/locks`), named by a hash of the file's path below the
//! service root. A waiter tries again every few milliseconds until the lock is free or
//! `lock_timeout_ms` has passed (then `ResourceBusy`). The kernel releases the lock when its
//! holder closes the file or its process ends, however it ends: a sidecar killed mid-edit
//! blocks nobody, and no live holder ever loses its lock.
//!
//! A holder removes the lock file before letting go, so the directory holds only locks in use
//! (and the files of processes that died holding one, which the next writer reuses and
//! removes). A waiter whose lock turns out to be on a file removed meanwhile tries again on
//! the file now at that name.
//!
//! The locks bind toolgate's own file tools (of every sidecar sharing the lock directory);
//! other programs writing the same files do not see them.

use std::fs::{File, TryLockError};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::Digest as _;

/// Why a lock could not be had.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Held by another call for longer than the timeout.
    #[error("another call holds the file's lock (waited {waited_ms} ms)")]
    Busy {
        /// How long this call waited.
        waited_ms: u64,
    },
    /// The lock directory cannot be used.
    #[error("the lock directory cannot be used: {0}")]
    Io(String),
}

/// The lock directory and how long a writer waits.
#[derive(Debug)]
pub struct Locks {
    dir: PathBuf,
    timeout: Duration,
}

/// A lock this call holds; released on drop.
#[derive(Debug)]
pub struct Held {
    path: PathBuf,
    /// The locked file: closing it releases the lock.
    _file: File,
}

impl Locks {
    /// Creates the lock directory (mode 0700) if needed.
    pub fn new(dir: PathBuf, timeout: Duration) -> std::io::Result<Locks> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        Ok(Locks { dir, timeout })
    }

    /// Takes the lock of `key` (a file's path below its root), waiting up to the timeout.
    pub fn acquire(&self, key: &str) -> Result<Held, LockError> {
        let digest = sha2::Sha256::digest(key.as_bytes());
        let name = hex::encode(digest.get(..16).unwrap_or_default());
        let path = self.dir.join(format!("{name}.lock"));
        let io = |e: std::io::Error| LockError::Io(e.to_string());
        let started = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&path)
                .map_err(io)?;
            match file.try_lock() {
                Ok(()) if still_named(&file, &path).map_err(io)? => {
                    return Ok(Held { path, _file: file });
                }
                // Its holder removed it between our open and our lock: the next file at that
                // name is the lock now.
                Ok(()) => continue,
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) => return Err(io(e)),
            }
            drop(file);
            let waited = started.elapsed();
            if waited >= self.timeout {
                return Err(LockError::Busy {
                    waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                });
            }
            std::thread::sleep(pause.min(self.timeout.saturating_sub(waited)));
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }
}

/// Whether `path` still names the open `file`.
fn still_named(file: &File, path: &Path) -> std::io::Result<bool> {
    let open = file.metadata()?;
    match std::fs::symlink_metadata(path) {
        Ok(named) => Ok(named.dev() == open.dev() && named.ino() == open.ino()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Removed while still locked (the file closes after this body), so a waiter holding
        // the old file finds it gone and starts over. Best effort: a file left behind is
        // reused by the next writer.
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locks(dir: &Path, timeout_ms: u64) -> Locks {
        Locks::new(dir.join("locks"), Duration::from_millis(timeout_ms)).unwrap()
    }

    #[test]
    fn a_held_lock_makes_others_wait_then_fail_busy() {
        let tmp = tempfile::tempdir().unwrap();
        let l = locks(tmp.path(), 50);
        let held = l.acquire("a.txt").unwrap();
        let started = Instant::now();
        assert!(matches!(l.acquire("a.txt"), Err(LockError::Busy { .. })));
        assert!(started.elapsed() >= Duration::from_millis(50));
        // Another file is independent.
        let other = l.acquire("b.txt").unwrap();
        drop(held);
        assert!(l.acquire("a.txt").is_ok());
        // Released locks leave nothing behind.
        drop(other);
        assert_eq!(
            std::fs::read_dir(tmp.path().join("locks")).unwrap().count(),
            0
        );
    }

    #[test]
    fn holders_never_overlap_while_lock_files_come_and_go() {
        let tmp = tempfile::tempdir().unwrap();
        let l = locks(tmp.path(), 20_000);
        let inside = std::sync::atomic::AtomicUsize::new(0);
        let overlaps = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..200 {
                        let held = l.acquire("a.txt").unwrap();
                        if inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst) != 0 {
                            overlaps.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        std::thread::yield_now();
                        inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                        drop(held);
                    }
                });
            }
        });
        assert_eq!(overlaps.into_inner(), 0);
    }
}
