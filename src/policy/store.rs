//! The live policy set: one [`Snapshot`] behind an `ArcSwap`, replaced whole by [`reload`]
//! and never by anything that failed to load. Requests call [`PolicyStore::current`] once and
//! use that snapshot to the end.
//!
//! Owns: the reload decision (unchanged, applied, failed), the last error, and reload counters.
//! Does not own: noticing changes (see `watch`).
//!
//! [`reload`]: PolicyStore::reload

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;

use super::Snapshot;
use super::diag::{LoadError, Problem};
use super::inputs::read_stable;
use super::load::{Sources, build_with};
use super::validate::LoadCache;

/// What a reload did.
#[derive(Debug, Clone)]
pub enum ReloadOutcome {
    /// The files hash to the live revision; nothing was parsed.
    Unchanged,
    /// A new snapshot is live.
    Applied {
        /// The revision replaced.
        from: String,
        /// The revision now live.
        to: String,
    },
    /// The files do not load; the live snapshot stays.
    Failed(Arc<LoadError>),
    /// This store was built without sources (tests, offline use).
    NoSources,
}

/// Reload counters, for `/metrics`.
#[derive(Debug, Default)]
pub struct ReloadStats {
    /// Reloads that swapped in a new snapshot.
    pub applied: AtomicU64,
    /// Reloads refused because the files did not load.
    pub failed: AtomicU64,
    /// Reloads that found nothing new.
    pub unchanged: AtomicU64,
}

#[derive(Debug, Default)]
struct Failure {
    error: Option<Arc<LoadError>>,
    /// The input revision that failed, so polling does not re-parse the same broken files.
    revision: Option<String>,
}

/// The live policy snapshot and what is known about reloading it.
#[derive(Debug)]
pub struct PolicyStore {
    live: ArcSwap<Snapshot>,
    sources: Option<Sources>,
    failure: Mutex<Failure>,
    /// Serializes reloads (watcher, poll, SIGHUP) and holds what earlier reloads validated;
    /// never taken on the request path.
    reloading: Mutex<LoadCache>,
    /// Counters.
    pub stats: ReloadStats,
}

/// Drops a replaced snapshot on this (reload) thread. Requests in flight hold it for
/// microseconds; whoever drops the last reference frees every policy, which for a large set
/// takes milliseconds that must not land on a request.
fn release_here(old: Arc<Snapshot>) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while Arc::strong_count(&old) > 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(old);
}

impl PolicyStore {
    /// A store serving `snapshot`, reloadable from `sources` when given.
    pub fn new(snapshot: Snapshot, sources: Option<Sources>) -> Self {
        PolicyStore {
            live: ArcSwap::from_pointee(snapshot),
            sources,
            failure: Mutex::new(Failure::default()),
            reloading: Mutex::new(LoadCache::new()),
            stats: ReloadStats::default(),
        }
    }

    /// Loads `sources` and serves the result, keeping what the load parsed and validated, so
    /// the first reload after an edit re-validates only the files that changed. Returns the
    /// load's warnings alongside.
    pub fn open(sources: Sources) -> Result<(Self, Vec<Problem>), LoadError> {
        let mut cache = LoadCache::new();
        let loaded = build_with(read_stable(&sources), &mut cache)?;
        let store = PolicyStore {
            reloading: Mutex::new(cache),
            ..PolicyStore::new(loaded.snapshot, Some(sources))
        };
        Ok((store, loaded.warnings))
    }

    /// The live snapshot. Load it once per request.
    pub fn current(&self) -> Arc<Snapshot> {
        self.live.load_full()
    }

    /// Where this store reloads from.
    pub fn sources(&self) -> Option<&Sources> {
        self.sources.as_ref()
    }

    /// The error of the most recent reload, while it is still the latest word on the files.
    pub fn last_error(&self) -> Option<Arc<LoadError>> {
        self.failure.lock().ok().and_then(|f| f.error.clone())
    }

    /// Reads the sources and swaps in a new snapshot if they changed and load. `force` parses
    /// even when the content hash is unchanged (SIGHUP). Blocking: call it off the request path.
    pub fn reload(&self, force: bool) -> ReloadOutcome {
        let Some(sources) = &self.sources else {
            return ReloadOutcome::NoSources;
        };
        let mut cache = self
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let inputs = read_stable(sources);
        let from = self.live.load().revision.clone();
        if !force && inputs.problems.is_empty() && inputs.revision == from {
            self.clear_failure();
            self.stats.unchanged.fetch_add(1, Ordering::Relaxed);
            return ReloadOutcome::Unchanged;
        }
        if let Some(e) = self.known_failure(&inputs.revision).filter(|_| !force) {
            return ReloadOutcome::Failed(e);
        }
        let revision = inputs.revision.clone();
        match build_with(inputs, &mut cache) {
            Ok(loaded) => {
                let to = loaded.snapshot.revision.clone();
                for w in &loaded.warnings {
                    tracing::warn!(problem = %w, "policy warning");
                }
                let old = {
                    // Swap and clear under the failure lock: whoever sees the new revision and
                    // then asks for the last error sees it cleared.
                    let mut failure = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
                    let old = self.live.swap(Arc::new(loaded.snapshot));
                    *failure = Failure::default();
                    old
                };
                release_here(old);
                self.stats.applied.fetch_add(1, Ordering::Relaxed);
                tracing::info!(from, to, "policy set reloaded");
                ReloadOutcome::Applied { from, to }
            }
            Err(e) => {
                let e = Arc::new(e);
                if let Ok(mut f) = self.failure.lock() {
                    f.error = Some(e.clone());
                    f.revision = Some(revision);
                }
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                let first = e.first().map(ToString::to_string).unwrap_or_default();
                tracing::warn!(
                    live = from,
                    problems = e.problems.len(),
                    first,
                    "policy reload refused; last good set stays in force"
                );
                ReloadOutcome::Failed(e)
            }
        }
    }

    /// The error of the last reload, if it failed on exactly this input revision.
    fn known_failure(&self, revision: &str) -> Option<Arc<LoadError>> {
        let f = self.failure.lock().ok()?;
        if f.revision.as_deref() == Some(revision) {
            f.error.clone()
        } else {
            None
        }
    }

    fn clear_failure(&self) {
        if let Ok(mut f) = self.failure.lock() {
            *f = Failure::default();
        }
    }
}
