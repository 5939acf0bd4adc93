//! The live policy set: one [`Snapshot`] behind an `ArcSwap`, replaced whole by [`reload`]
//! and never by anything that failed to load. Requests call [`PolicyStore::current`] once and
//! use that snapshot to the end.
//!
//! Owns: the reload decision (unchanged, applied, held, failed), the review of each change
//! (a symbolic diff against the live set), holding widening changes for a human
//! (`reload.widening = "hold"`), remembering the last good set in the data directory and
//! serving it after a restart with broken files (stale), the last error, and reload counters.
//! Does not own: noticing changes (see `watch`).
//!
//! [`reload`]: PolicyStore::reload

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use serde::Serialize;

use super::remember::{GoodSets, RememberError, StoredSet};
use crate::clock::now_ms;
use crate::policy::{Link, LinkError};
use crate::policy::{LoadCache, LoadError, Problem, Snapshot, Sources, build_with, read_stable};

/// What to do with a reload that lets some action do more than before, or that cannot be
/// proved not to (no solver, a changed schema).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Widening {
    /// Apply it like any other change (it is still reviewed and audited). An explicit
    /// choice: a change that removes a forbid then takes effect with no human looking.
    Apply,
    /// Keep serving the live set until an authorized human approves the new one. The
    /// default: a file that loses its forbids (deleted, cut short) must not widen access
    /// on its own.
    #[default]
    Hold,
}

/// The review of one change: which actions it widens or narrows, proved by the solver, or
/// why it could not be proved (then it counts as widening).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Review {
    /// Actions the new set allows more for (including those changed both ways).
    pub widened: Vec<String>,
    /// Actions the new set allows less for (including those changed both ways).
    pub narrowed: Vec<String>,
    /// Whether the diff was proved; `false` when no solver ran or the sets could not be
    /// compared (e.g. the schema changed).
    pub proved: bool,
    /// Why it was not proved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// What changed in the deployment data (entities: agents, humans, roles, tools), one
    /// line per change. Outside the proof: each counts as widening, and `widened` names the
    /// entity or attribute (`data Human::"carol".payees`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub data: Vec<String>,
}

impl Review {
    /// Whether the change must be treated as a widening (fail closed: unproved counts).
    pub fn widens(&self) -> bool {
        !self.proved || !self.widened.is_empty()
    }

    /// One line for logs and the audit log.
    pub fn summary(&self) -> String {
        if !self.proved {
            return format!(
                "not proved ({}); treated as widening",
                self.note.as_deref().unwrap_or("unknown")
            );
        }
        match (self.widened.is_empty(), self.narrowed.is_empty()) {
            (true, true) => "equal".to_owned(),
            (false, true) => format!("widened {}", self.widened.join(", ")),
            (true, false) => format!("narrowed {}", self.narrowed.join(", ")),
            (false, false) => format!(
                "widened {}; narrowed {}",
                self.widened.join(", "),
                self.narrowed.join(", ")
            ),
        }
    }
}

/// Compares the live set with a candidate, on a scratch thread (the solver runs on its own
/// runtime, which must not nest in a caller's).
fn review(old: &Snapshot, new: &Snapshot) -> Review {
    use crate::review::diff;
    // Symbolic compilation recurses over each policy's expression tree: deep `||` chains
    // need far more than a default thread's 2 MiB of stack.
    let result = std::thread::scope(|s| {
        let worker = std::thread::Builder::new()
            .name("toolgate-diff".to_owned())
            .stack_size(256 * 1024 * 1024)
            .spawn_scoped(s, || {
                diff::diff(
                    &diff::static_policies(&old.policies),
                    &diff::static_policies(&new.policies),
                    &new.schema,
                    Some(new),
                )
            });
        match worker {
            Ok(handle) => handle.join().map_err(|_| "the diff failed".to_owned()),
            Err(e) => Err(format!("cannot start the diff: {e}")),
        }
    });
    let templates = diff::template_changes(&old.policies, &new.policies);
    let mut review = match result {
        Ok(Ok(d)) => Review {
            widened: d
                .actions
                .iter()
                .filter(|a| a.change.widens())
                .map(|a| a.action.clone())
                .collect(),
            narrowed: d
                .actions
                .iter()
                .filter(|a| a.change.narrows())
                .map(|a| a.action.clone())
                .collect(),
            proved: true,
            note: None,
            data: Vec::new(),
        },
        Ok(Err(e)) => Review {
            note: Some(e.to_string()),
            ..Review::default()
        },
        Err(why) => Review {
            note: Some(why),
            ..Review::default()
        },
    };
    // Deployment data is outside the proof too, and has no provable direction (a new payee
    // widens an allow-list, a removed domain a deny-list): every change counts as widening.
    let data = crate::review::data::data_changes(old, new);
    review
        .widened
        .extend(data.touched.iter().map(|t| format!("data {t}")));
    review.data = data.lines;
    // Templates are outside the proof: an added or changed one counts as widening.
    review.widened.extend(
        templates
            .added
            .iter()
            .chain(&templates.changed)
            .map(|t| format!("template {t}")),
    );
    review
        .narrowed
        .extend(templates.removed.iter().map(|t| format!("template {t}")));
    review
}

/// Where the live set came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// The policy files.
    Files,
    /// The data directory's remembered last good set, because the files do not load.
    Remembered,
    /// Nothing ever loaded: no policies, no tools, every call denied; not ready.
    Nothing,
}

/// A change waiting for a human (`reload.widening = "hold"`).
#[derive(Debug, Clone)]
pub struct Held {
    /// The revision waiting.
    pub revision: String,
    /// The live revision it would replace.
    pub from: String,
    /// What it changes.
    pub review: Review,
    /// When it was held (Unix ms).
    pub at_ms: u64,
    snapshot: Arc<Snapshot>,
    /// Shared, so that handing out the held change copies no file contents.
    stored: Option<Arc<StoredSet>>,
}

/// Why a held change could not be activated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoldError {
    /// Nothing is held.
    #[error("no policy change is waiting for approval")]
    NothingHeld,
    /// Another revision is held (the files changed since the approver looked).
    #[error("the held change is {held}, not {asked}; review it and approve that revision")]
    OtherRevision {
        /// What is held.
        held: String,
        /// What was approved.
        asked: String,
    },
    /// Its record (with the remembered set) could not be stored: nothing changed.
    #[error("the approval could not be recorded, so the change is still held: {0}")]
    NotRecorded(RememberError),
}

/// What [`PolicyStore::start`] gives: the store, the load's warnings, and the files' error
/// when they did not load.
pub type Started = (PolicyStore, Vec<Problem>, Option<Arc<LoadError>>);

/// Options of a store that serves.
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    /// Where the last good set is remembered (none: not remembered).
    pub remember: Option<Arc<dyn GoodSets>>,
    /// What to do with widening changes.
    pub widening: Widening,
}

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
        /// What changed (none when there was no live set to compare with).
        review: Option<Review>,
    },
    /// The new set widens and waits for a human; the live set stays.
    Held {
        /// The live revision.
        from: String,
        /// The revision waiting.
        to: String,
        /// What it changes.
        review: Review,
    },
    /// The files do not load; the live snapshot stays.
    Failed {
        /// The input revision that failed (a digest of every source file's bytes).
        revision: String,
        /// Why.
        error: Arc<LoadError>,
    },
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
    /// Reloads held for a human's approval.
    pub held: AtomicU64,
    /// Failures to remember the last good set in the data directory.
    pub remember_failed: AtomicU64,
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
    options: StoreOptions,
    origin: Mutex<Origin>,
    held: Mutex<Option<Held>>,
    /// Template links (grants) every set that goes live gets.
    links: Mutex<Vec<Link>>,
    /// The links that did not link into the set being served, by id, with why.
    link_problems: Mutex<BTreeMap<String, String>>,
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
            options: StoreOptions::default(),
            origin: Mutex::new(Origin::Files),
            held: Mutex::new(None),
            links: Mutex::new(Vec::new()),
            link_problems: Mutex::new(BTreeMap::new()),
            stats: ReloadStats::default(),
        }
    }

    /// The store `serve` runs: the files if they load, else the remembered last good set
    /// (stale), else nothing (every call denied, not ready), and never an error. With
    /// `widening = hold` and a remembered set that differs from the files, the remembered set
    /// serves first and the files go through review on the first reload, like any edit.
    /// Returns the store, the load's warnings, and the files' error when they did not load.
    /// Fails only if even the empty set cannot be built.
    pub fn start(sources: Sources, options: StoreOptions) -> Result<Started, LoadError> {
        let mut cache = LoadCache::new();
        let inputs = read_stable(&sources);
        let programs = inputs.programs.clone();
        let deny = inputs.deny.clone();
        let stored_files = options
            .remember
            .as_ref()
            .map(|_| StoredSet::from_inputs(&inputs, now_ms()));
        let remembered = options.remember.as_ref().and_then(|r| match r.load() {
            Ok(set) => set,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the remembered policy set");
                None
            }
        });
        let files_revision = inputs.revision.clone();
        let from_files = build_with(inputs, &mut cache);
        let rebuild = |set: StoredSet| {
            build_with(
                set.into_inputs(programs.clone(), deny.clone()),
                &mut LoadCache::new(),
            )
            .ok()
        };
        let serve_files_now = match (&from_files, &remembered) {
            (Ok(_), None) => true,
            (Ok(_), Some(r)) => r.revision == files_revision || options.widening == Widening::Apply,
            (Err(_), _) => false,
        };
        let (live, origin, warnings, error) = match from_files {
            Ok(loaded) if serve_files_now => {
                if let (Some(r), Some(stored)) = (&options.remember, &stored_files) {
                    remember(r.as_ref(), stored, None);
                }
                (loaded.snapshot, Origin::Files, loaded.warnings, None)
            }
            Ok(loaded) => match remembered.and_then(rebuild) {
                // Hold: the remembered set serves; the watcher's first check reviews the files.
                Some(r) => (r.snapshot, Origin::Files, loaded.warnings, None),
                None => (loaded.snapshot, Origin::Files, loaded.warnings, None),
            },
            Err(e) => {
                let e = Arc::new(e);
                match remembered.and_then(rebuild) {
                    Some(r) => (r.snapshot, Origin::Remembered, r.warnings, Some(e)),
                    None => (Snapshot::nothing()?, Origin::Nothing, Vec::new(), Some(e)),
                }
            }
        };
        let store = PolicyStore {
            reloading: Mutex::new(cache),
            failure: Mutex::new(Failure {
                error: error.clone(),
                revision: error.as_ref().map(|_| files_revision),
            }),
            options,
            origin: Mutex::new(origin),
            ..PolicyStore::new(live, Some(sources))
        };
        Ok((store, warnings, error))
    }

    /// This store with `options` (a store from [`PolicyStore::open`] or
    /// [`PolicyStore::new`] holds widening changes and remembers nothing).
    #[must_use]
    pub fn with_options(mut self, options: StoreOptions) -> Self {
        self.options = options;
        self
    }

    /// What this store does with widening changes.
    pub fn widening(&self) -> Widening {
        self.options.widening
    }

    /// Where the live set came from.
    pub fn origin(&self) -> Origin {
        *self.origin.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the live set is not what the files say: they do not load (the remembered set
    /// or nothing serves), or a change is held.
    pub fn stale(&self) -> bool {
        self.origin() != Origin::Files || self.held_slot().is_some()
    }

    fn held_slot(&self) -> std::sync::MutexGuard<'_, Option<Held>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The change waiting for approval, if any.
    pub fn held(&self) -> Option<Held> {
        self.held_slot().clone()
    }

    /// The held change, if it is `revision` (what an approver reviewed); the one check both
    /// the approval route and [`PolicyStore::approve_held`] make.
    pub fn held_as(&self, revision: &str) -> Result<Held, HoldError> {
        held_as(self.held_slot().as_ref(), revision).cloned()
    }

    /// Activates the held change `revision` (the caller has checked, with Cedar, that the
    /// human may). Returns (from, to, review).
    pub fn approve_held(&self, revision: &str) -> Result<(String, String, Review), HoldError> {
        self.approve_held_with(revision, |_| Ok(()))
    }

    /// [`PolicyStore::approve_held`] with its record: `commit` stores the record together with
    /// the effect that remembers the approved set (when sets are remembered) before the set
    /// goes live, under the reload lock, so no edit comes in between. If `commit` fails, the
    /// change stays held and nothing is remembered.
    pub fn approve_held_with(
        &self,
        revision: &str,
        commit: impl FnOnce(Vec<crate::audit::Effect>) -> Result<(), crate::audit::StoreError>,
    ) -> Result<(String, String, Review), HoldError> {
        let _serial = self
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut slot = self.held_slot();
        held_as(slot.as_ref(), revision)?;
        let held = slot.take().ok_or(HoldError::NothingHeld)?;
        let effects = match (&self.options.remember, held.stored.as_deref()) {
            (Some(_), Some(stored)) => match super::remember::remember_effect(stored) {
                Ok(e) => vec![e],
                Err(e) => {
                    *slot = Some(held);
                    return Err(HoldError::NotRecorded(e));
                }
            },
            _ => Vec::new(),
        };
        if let Err(e) = commit(effects) {
            *slot = Some(held);
            return Err(HoldError::NotRecorded(e.into()));
        }
        drop(slot);
        let from = self.live.load().revision.clone();
        // Remembered already, by the commit.
        self.go_live(held.snapshot, None);
        Ok((from, held.revision, held.review))
    }

    /// Serves the live files with `links` (grants) linked in place of the current ones, and
    /// keeps them for every set that goes live after. A link that does not link (its template
    /// is gone, a slot has the wrong type) is left out: it grants nothing, and
    /// [`PolicyStore::link_problems`] says why.
    pub fn set_links(&self, links: Vec<Link>) {
        let _serial = self
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (linked, failed) = self.live.load().relinked(&links);
        *self.links.lock().unwrap_or_else(PoisonError::into_inner) = links;
        self.note_link_problems(failed);
        let old = self.live.swap(Arc::new(linked));
        // Freed elsewhere: the caller holds locks, and requests (a tool run) may hold the old
        // set for long.
        let _ = std::thread::Builder::new()
            .name("toolgate-release".to_owned())
            .spawn(move || release_here(old));
    }

    /// The links left out of the set being served, by id, with why.
    pub fn link_problems(&self) -> BTreeMap<String, String> {
        self.link_problems
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn note_link_problems(&self, failed: Vec<(String, LinkError)>) {
        let problems = failed
            .into_iter()
            .map(|(grant, e)| {
                tracing::warn!(grant, error = %e, "grant not linked into the policy set; it grants nothing");
                (grant, e.to_string())
            })
            .collect();
        *self
            .link_problems
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = problems;
    }

    /// `snapshot` with the kept links.
    fn linked(&self, snapshot: Arc<Snapshot>) -> Arc<Snapshot> {
        let links = self
            .links
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if links.is_empty() && snapshot.links().next().is_none() {
            return snapshot;
        }
        let (linked, failed) = snapshot.relinked(&links);
        self.note_link_problems(failed);
        Arc::new(linked)
    }

    /// Swaps `snapshot` in (with the kept links), remembers it, and clears the failure.
    fn go_live(&self, snapshot: Arc<Snapshot>, stored: Option<&StoredSet>) {
        if let (Some(r), Some(stored)) = (&self.options.remember, stored) {
            remember(r.as_ref(), stored, Some(&self.stats));
        }
        let snapshot = self.linked(snapshot);
        let old = {
            // Swap and clear under the failure lock: whoever sees the new revision and then
            // asks for the last error sees it cleared.
            let mut failure = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
            let old = self.live.swap(snapshot);
            *failure = Failure::default();
            *self.origin.lock().unwrap_or_else(PoisonError::into_inner) = Origin::Files;
            old
        };
        release_here(old);
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
            // The files are the live set again: a held change was reverted, a broken edit
            // undone.
            *self.held_slot() = None;
            *self.origin.lock().unwrap_or_else(PoisonError::into_inner) = Origin::Files;
            self.clear_failure();
            self.stats.unchanged.fetch_add(1, Ordering::Relaxed);
            return ReloadOutcome::Unchanged;
        }
        if let Some(error) = self.known_failure(&inputs.revision).filter(|_| !force) {
            return ReloadOutcome::Failed {
                revision: inputs.revision,
                error,
            };
        }
        if let Some(review) = self
            .held_slot()
            .as_ref()
            .filter(|h| h.revision == inputs.revision && !force)
            .map(|h| h.review.clone())
        {
            return ReloadOutcome::Held {
                from,
                to: inputs.revision,
                review,
            };
        }
        let revision = inputs.revision.clone();
        let stored = self
            .options
            .remember
            .as_ref()
            .map(|_| StoredSet::from_inputs(&inputs, now_ms()));
        match build_with(inputs, &mut cache) {
            Ok(loaded) => {
                let to = loaded.snapshot.revision.clone();
                for w in &loaded.warnings {
                    tracing::warn!(problem = %w, "policy warning");
                }
                let snapshot = Arc::new(loaded.snapshot);
                // From nothing there is nothing to compare with (and nobody the empty set
                // lets approve): the first good set applies. The live set is taken as an Arc,
                // not a short-lived arc-swap guard: the diff holds it for hundreds of ms.
                let review = (self.origin() != Origin::Nothing).then(|| {
                    if to == from {
                        // The live files, parsed again (SIGHUP): equal by construction, so
                        // nothing is held for want of a solver.
                        Review {
                            proved: true,
                            note: Some("the files of the live set".to_owned()),
                            ..Review::default()
                        }
                    } else {
                        review(&self.live.load_full(), &snapshot)
                    }
                });
                if let Some(r) = review
                    .as_ref()
                    .filter(|r| self.options.widening == Widening::Hold && r.widens())
                {
                    *self.held_slot() = Some(Held {
                        revision: to.clone(),
                        from: from.clone(),
                        review: r.clone(),
                        at_ms: now_ms(),
                        snapshot,
                        stored: stored.map(Arc::new),
                    });
                    self.clear_failure();
                    self.stats.held.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        from,
                        to,
                        review = r.summary(),
                        "policy change held for approval"
                    );
                    return ReloadOutcome::Held {
                        from,
                        to,
                        review: r.clone(),
                    };
                }
                // A newer change that applies supersedes any held one.
                *self.held_slot() = None;
                self.go_live(snapshot, stored.as_ref());
                self.stats.applied.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    from,
                    to,
                    review = review.as_ref().map(Review::summary),
                    "policy set reloaded"
                );
                ReloadOutcome::Applied { from, to, review }
            }
            Err(e) => {
                let e = Arc::new(e);
                if let Ok(mut f) = self.failure.lock() {
                    f.error = Some(e.clone());
                    f.revision = Some(revision.clone());
                }
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                let first = e.first().map(ToString::to_string).unwrap_or_default();
                tracing::warn!(
                    live = from,
                    problems = e.problems.len(),
                    first,
                    "policy reload refused; last good set stays in force"
                );
                ReloadOutcome::Failed { revision, error: e }
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

/// `held` if it is `revision`.
fn held_as<'a>(held: Option<&'a Held>, revision: &str) -> Result<&'a Held, HoldError> {
    match held {
        None => Err(HoldError::NothingHeld),
        Some(h) if h.revision != revision => Err(HoldError::OtherRevision {
            held: h.revision.clone(),
            asked: revision.chars().take(80).collect(),
        }),
        Some(h) => Ok(h),
    }
}

/// Remembers `set`; a failure is logged and counted, never fatal (the live set is right; only
/// a restart with broken files would serve an older one).
fn remember(store: &dyn GoodSets, set: &StoredSet, stats: Option<&ReloadStats>) {
    if let Err(e) = store.save(set) {
        tracing::error!(error = %e, revision = set.revision, "cannot remember the policy set");
        if let Some(s) = stats {
            s.remember_failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}
