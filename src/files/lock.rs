//! Advisory per-file locks for the file tools that change files (`write_file`, `edit_file`,
//! `delete_file`), so two agents editing one file are serialized instead of one losing its
//! update.
//!
//! A lock is a file in the lock directory (`[exec] lock_dir`, by default `<data_dir>/locks`),
//! named by a hash of the file's path below the service root and created with `O_EXCL`; it
//! holds a random token, the holder's pid and its creation time. A waiter polls until the
//! lock is free or `lock_timeout_ms` has passed (then `ResourceBusy`). A lock older than
//! `stale_lock_ms` is presumed abandoned (a sidecar killed mid-edit leaves one behind) and is
//! taken over: logged here, and audited by the caller.
//!
//! Every removal (release or takeover) first renames the lock file aside and checks its
//! token, putting back a lock that turned out to be someone else's, so nobody deletes a lock
//! they do not hold. Before a holder replaces the file it checks it still holds the lock
//! ([`Held::still_held`]); a holder whose lock was taken over writes nothing.
//!
//! A writer's time budget is kept under half the stale age (see `exec::Runner::files`), so a
//! live holder always gives up before its lock can be judged stale: takeovers only ever
//! happen to holders that died or hung.
//!
//! The locks bind toolgate's own file tools (of every sidecar sharing the lock directory);
//! other programs writing the same files do not see them.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

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

/// A stale lock this call took over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeOver {
    /// How old the lock was, ms.
    pub age_ms: u64,
    /// What the lock file said about its holder (`pid=… at_ms=…`).
    pub holder: String,
}

/// The lock directory and its timings.
#[derive(Debug)]
pub struct Locks {
    dir: PathBuf,
    timeout: Duration,
    stale_after: Duration,
}

/// A lock this call holds; released on drop.
#[derive(Debug)]
pub struct Held {
    path: PathBuf,
    token: String,
    /// The stale lock taken over to get this one, if any.
    pub took_over: Option<TakeOver>,
}

impl Locks {
    /// Creates the lock directory (mode 0700) if needed.
    pub fn new(dir: PathBuf, timeout: Duration, stale_after: Duration) -> std::io::Result<Locks> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        Ok(Locks {
            dir,
            timeout,
            stale_after,
        })
    }

    /// The lock directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes the lock of `key` (a file's path below its root), waiting up to the timeout.
    pub fn acquire(&self, key: &str) -> Result<Held, LockError> {
        let digest = sha2::Sha256::digest(key.as_bytes());
        let name = hex::encode(digest.get(..16).unwrap_or_default());
        let path = self.dir.join(format!("{name}.lock"));
        let token = uuid::Uuid::new_v4().simple().to_string();
        let started = Instant::now();
        let mut took_over = None;
        let mut pause = Duration::from_millis(1);
        loop {
            let created = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path);
            match created {
                Ok(mut file) => {
                    let line = format!(
                        "{token} pid={} at_ms={}\n",
                        std::process::id(),
                        crate::clock::now_ms()
                    );
                    file.write_all(line.as_bytes())
                        .map_err(|e| LockError::Io(e.to_string()))?;
                    return Ok(Held {
                        path,
                        token,
                        took_over,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if let Some(t) = self.take_stale(&path, key) {
                        took_over = Some(t);
                        continue;
                    }
                }
                Err(e) => return Err(LockError::Io(e.to_string())),
            }
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

    /// Removes the lock at `path` if it is older than the stale age, and says whose it was.
    fn take_stale(&self, path: &Path, key: &str) -> Option<TakeOver> {
        // Age and token from one open file: the lock judged stale is the one whose token is
        // checked when it is removed, never a newer lock that took its place meanwhile.
        let mut file = std::fs::File::open(path).ok()?;
        let modified = file.metadata().ok()?.modified().ok()?;
        let age = SystemTime::now()
            .duration_since(modified)
            .unwrap_or_default();
        if age < self.stale_after {
            return None;
        }
        let mut text = String::new();
        std::io::Read::read_to_string(&mut file, &mut text).ok()?;
        let (token, holder) = text.trim().split_once(' ').unwrap_or((text.trim(), ""));
        if !claim(path, token) {
            return None;
        }
        let age_ms = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
        tracing::warn!(
            path = key,
            age_ms,
            holder,
            "took over a stale file lock (its holder never released it)"
        );
        Some(TakeOver {
            age_ms,
            holder: holder.to_owned(),
        })
    }
}

impl Held {
    /// Whether the lock is still this call's (not taken over as stale).
    pub fn still_held(&self) -> bool {
        std::fs::read_to_string(&self.path)
            .is_ok_and(|text| text.split_whitespace().next() == Some(self.token.as_str()))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // A lock taken over is left alone: moving it aside, even briefly, would let a third
        // call in.
        if self.still_held() {
            claim(&self.path, &self.token);
        }
    }
}

/// Moves the lock at `path` aside and removes it if its token is `token`; a lock that turns
/// out to be another's is put back (unless a newer one took its place, in which case its
/// holder finds out through [`Held::still_held`]). Whether a lock with `token` was removed.
fn claim(path: &Path, token: &str) -> bool {
    let aside = path.with_extension(format!("claim-{}", uuid::Uuid::new_v4().simple()));
    if std::fs::rename(path, &aside).is_err() {
        return false;
    }
    let ours = std::fs::read_to_string(&aside)
        .is_ok_and(|text| text.split_whitespace().next() == Some(token));
    if ours
        || rustix::fs::renameat_with(
            rustix::fs::CWD,
            &aside,
            rustix::fs::CWD,
            path,
            rustix::fs::RenameFlags::NOREPLACE,
        )
        .is_err()
    {
        let _ = std::fs::remove_file(&aside);
    }
    ours
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locks(dir: &Path, stale_ms: u64) -> Locks {
        Locks::new(
            dir.join("locks"),
            Duration::from_millis(50),
            Duration::from_millis(stale_ms),
        )
        .unwrap()
    }

    #[test]
    fn a_held_lock_makes_others_wait_then_fail_busy() {
        let tmp = tempfile::tempdir().unwrap();
        let l = locks(tmp.path(), 60_000);
        let held = l.acquire("a.txt").unwrap();
        assert!(matches!(l.acquire("a.txt"), Err(LockError::Busy { .. })));
        // Another file is independent.
        let other = l.acquire("b.txt").unwrap();
        assert!(held.still_held() && other.still_held());
        drop(held);
        assert!(l.acquire("a.txt").is_ok());
        // Released locks leave nothing behind.
        drop(other);
        assert_eq!(std::fs::read_dir(l.dir()).unwrap().count(), 0);
    }

    #[test]
    fn a_stale_lock_is_taken_over_and_its_holder_notices() {
        let tmp = tempfile::tempdir().unwrap();
        let l = locks(tmp.path(), 0);
        let old = l.acquire("a.txt").unwrap();
        let new = l.acquire("a.txt").unwrap();
        let t = new.took_over.clone().unwrap();
        assert!(t.holder.contains("pid="), "{t:?}");
        assert!(!old.still_held());
        assert!(new.still_held());
        // The old holder's release leaves the new lock alone.
        drop(old);
        assert!(new.still_held());
    }
}
