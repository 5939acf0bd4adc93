//! Noticing policy changes: file-system events (notify) as hints, debounced, plus a periodic
//! poll as a fallback, plus forced reloads (SIGHUP). Every trigger leads to the same thing: a
//! full re-read and hash in [`PolicyStore::reload`], off the request path. Outcomes are
//! recorded in the audit log once per distinct state of the files (see [`Recorded`]).
//!
//! Watched: the policies and schemas directories (recursively), their resolved targets when
//! they are symlinks, and their parent directories, so a renamed-over file, a Kubernetes
//! ConfigMap `..data` swap, a retargeted symlink and a deleted-and-recreated directory are all
//! seen. Watches are re-established after every reload attempt, since targets move.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use notify::{RecursiveMode, Watcher as _};
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::store::{PolicyStore, ReloadOutcome};
use crate::audit::{Audit, Entry, EntryKind, Event, Sidecar};
use crate::policy::{LoadError, Sources, fingerprint};

/// How changes are noticed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchOptions {
    /// Use file-system events (otherwise only the poll and forced reloads).
    pub events: bool,
    /// Quiet time after the last event before reloading.
    pub debounce: Duration,
    /// Re-read interval regardless of events; `None` disables polling.
    pub poll: Option<Duration>,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            events: true,
            debounce: Duration::from_millis(150),
            poll: Some(Duration::from_secs(2)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    Event,
    Poll,
    Force,
}

/// Contents are re-read at least this often even when metadata looks unchanged.
const FULL_READ_EVERY: Duration = Duration::from_secs(30);

/// A running watcher; dropping it stops watching.
#[derive(Debug)]
pub struct PolicyWatcher {
    trigger: mpsc::Sender<Trigger>,
    /// A forced reload is owed. A flag, not only a message: the trigger channel is full
    /// whenever a burst of events arrived during a long reload, and a SIGHUP sent then must
    /// not be lost.
    force: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl PolicyWatcher {
    /// Starts watching `store`'s sources. Must be called inside a tokio runtime.
    /// Watches are in place when this returns, and one re-check follows at once, so a change
    /// made between loading the snapshot and starting the watcher is not missed.
    pub fn spawn(store: Arc<PolicyStore>, opts: WatchOptions) -> Self {
        Self::spawn_audited(store, opts, None)
    }

    /// [`PolicyWatcher::spawn`], recording every applied or failed reload in `audit`.
    pub fn spawn_audited(
        store: Arc<PolicyStore>,
        opts: WatchOptions,
        audit: Option<Arc<Audit>>,
    ) -> Self {
        let (tx, rx) = mpsc::channel(64);
        let mut fs_watch = opts.events.then(|| FsWatch::new(tx.clone())).flatten();
        if let (Some(w), Some(sources)) = (fs_watch.as_mut(), store.sources()) {
            let _ = w.refresh(sources);
        }
        let _ = tx.try_send(Trigger::Event);
        let force = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(run(store, opts, fs_watch, rx, force.clone(), audit));
        PolicyWatcher {
            trigger: tx,
            force,
            task,
        }
    }

    /// Requests a reload that parses even unchanged content (SIGHUP).
    pub fn force_reload(&self) {
        self.force.store(true, Ordering::SeqCst);
        // A full channel already holds triggers that wake the loop, which then sees the flag.
        let _ = self.trigger.try_send(Trigger::Force);
    }
}

impl Drop for PolicyWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run(
    store: Arc<PolicyStore>,
    opts: WatchOptions,
    mut fs_watch: Option<FsWatch>,
    mut rx: mpsc::Receiver<Trigger>,
    forced: Arc<AtomicBool>,
    audit: Option<Arc<Audit>>,
) {
    let Some(sources) = store.sources().cloned() else {
        return;
    };
    let mut poll = opts.poll.map(|p| {
        let mut i = tokio::time::interval(p);
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    });
    // Polls compare a metadata fingerprint first and read contents only when it changed, or
    // when the last full read is older than FULL_READ_EVERY (same-size, same-mtime rewrites).
    let mut last_fp: Option<[u8; 32]> = None;
    let mut last_full = tokio::time::Instant::now();
    let reloader = match reload_thread(store.clone(), sources.clone(), audit) {
        Ok(tx) => tx,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the policy reload thread; reloads are off");
            return;
        }
    };
    // Set when new watches were added: whatever changed between the last read and the new
    // watch existing must be read once more.
    let mut recheck = false;
    loop {
        // A poll's fingerprint, taken before anything is read, serves the reload it triggers.
        let mut polled = None;
        let first = if std::mem::take(&mut recheck) {
            Trigger::Event
        } else {
            tokio::select! {
                t = rx.recv() => match t { Some(t) => t, None => return },
                () = tick(poll.as_mut()) => {
                    let src = sources.clone();
                    let fp = tokio::task::spawn_blocking(move || fingerprint(&src)).await.ok();
                    let stale = last_full.elapsed() >= FULL_READ_EVERY;
                    if fp.is_some() && fp == last_fp && !stale {
                        continue;
                    }
                    polled = fp;
                    Trigger::Poll
                }
            }
        };

        if first == Trigger::Event {
            // Debounce: wait for a quiet period, but not forever under a constant stream.
            let deadline = tokio::time::Instant::now() + opts.debounce * 20;
            loop {
                match tokio::time::timeout(opts.debounce, rx.recv()).await {
                    Ok(Some(_)) => {}
                    Ok(None) => return,
                    Err(_) => break,
                }
                if tokio::time::Instant::now() >= deadline {
                    break;
                }
            }
        }
        // Taken once, here: a Force message whose flag an earlier reload already took forces
        // nothing twice.
        let force = forced.swap(false, Ordering::SeqCst);
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        if reloader.send((force, polled, done_tx)).is_err() {
            tracing::error!("the policy reload thread is gone; the last good set stays in force");
            return;
        }
        let outcome = done_rx.await.map(|fp| last_fp = Some(fp));
        last_full = tokio::time::Instant::now();
        // Targets move (symlink swaps, recreated directories): re-resolve after every attempt.
        if let Some(w) = fs_watch.as_mut() {
            recheck = w.refresh(&sources);
        }
        if outcome.is_err() {
            tracing::error!("policy reload task panicked; the last good set stays in force");
        }
    }
}

/// A reload request: parse even unchanged content; the fingerprint a poll already took (else
/// the thread takes one before reading); where to send the fingerprint used.
type ReloadRequest = (
    bool,
    Option<[u8; 32]>,
    tokio::sync::oneshot::Sender<[u8; 32]>,
);

/// Reloads run on one dedicated thread at the lowest scheduling priority: building a large
/// policy set takes a core for hundreds of milliseconds, and requests must win that core.
/// 8 MiB of stack, since Cedar's validator also refuses to recurse near the end of the stack.
fn reload_thread(
    store: Arc<PolicyStore>,
    sources: Sources,
    audit: Option<Arc<Audit>>,
) -> std::io::Result<std::sync::mpsc::Sender<ReloadRequest>> {
    let (tx, rx) = std::sync::mpsc::channel::<ReloadRequest>();
    std::thread::Builder::new()
        .name("toolgate-reload".to_owned())
        .stack_size(8 * 1024 * 1024)
        .spawn(move || {
            crate::sched::background();
            let mut recorded = Recorded::default();
            while let Ok((force, polled, done)) = rx.recv() {
                // Fingerprint before reading: a change after this point shows up at the next poll.
                let fp = polled.unwrap_or_else(|| fingerprint(&sources));
                let outcome = store.reload(force);
                let live = store.current().revision.clone();
                if let (Some(audit), Some(entry)) = (&audit, recorded.entry(&outcome, &live)) {
                    audit.record_detached(entry);
                }
                let _ = done.send(fp);
            }
        })?;
    Ok(tx)
}

/// The state of the files the last record left standing, so that each distinct state is
/// recorded once: a kept failure or a held change is reported again by every later trigger
/// (a file-system event anywhere in a watched directory, the periodic full re-read, SIGHUP),
/// and those re-reports are not new events.
#[derive(Debug, Default, PartialEq, Eq)]
enum Recorded {
    /// Nothing outstanding: the files are the live set (or the last record was `applied`).
    #[default]
    Settled,
    /// The files do not load; the key digests their input revision and every problem.
    Failed([u8; 32]),
    /// A change waits for approval.
    Held {
        /// The live revision it would replace.
        from: String,
        /// The revision waiting.
        to: String,
    },
}

impl Recorded {
    /// The entry to record for `outcome` (`live`: the revision serving after it), or none
    /// when it only repeats the state recorded last.
    fn entry(&mut self, outcome: &ReloadOutcome, live: &str) -> Option<Entry> {
        let now = match outcome {
            ReloadOutcome::Failed { revision, error } => {
                Recorded::Failed(failure_key(revision, error))
            }
            ReloadOutcome::Held { from, to, .. } => Recorded::Held {
                from: from.clone(),
                to: to.clone(),
            },
            ReloadOutcome::Applied { .. } => Recorded::Settled,
            // Reading nothing says nothing about the files: keep what was recorded.
            ReloadOutcome::NoSources => return None,
            ReloadOutcome::Unchanged => {
                let before = std::mem::take(self);
                return undone_entry(&before, live);
            }
        };
        // `applied` is always news (a SIGHUP over good files included, as before).
        let repeat = now != Recorded::Settled && *self == now;
        *self = now;
        if repeat { None } else { reload_entry(outcome) }
    }
}

/// Identifies a broken state: the digest of the source files' bytes (the input revision) and
/// the text of every problem.
fn failure_key(revision: &str, error: &LoadError) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(revision.as_bytes());
    for p in &error.problems {
        h.update([0]);
        h.update(p.to_string().as_bytes());
    }
    h.finalize().into()
}

/// The record for files that are the live set again after a recorded failure or held change
/// (the edit was undone): the files are in force again, so the log does not end on a failure
/// or a held change that no longer exists. Nothing when a held change went live by approval
/// (the approval route recorded that) or nothing was outstanding.
fn undone_entry(before: &Recorded, live: &str) -> Option<Entry> {
    let detail = match before {
        Recorded::Settled => return None,
        Recorded::Held { to, .. } if to == live => return None,
        Recorded::Failed(_) => {
            format!(
                "from {live} to {live}; the files are the live set again (the broken edit was undone)"
            )
        }
        Recorded::Held { to, .. } => format!(
            "from {live} to {live}; the files are the live set again ({to} is no longer held)"
        ),
    };
    Some(
        Event::Sidecar(Sidecar {
            decision: "applied".to_owned(),
            revision: Some(live.to_owned()),
            detail: Some(detail),
            ..reload_base()
        })
        .into(),
    )
}

/// A `reload` record by the watcher, with nothing said yet.
fn reload_base() -> Sidecar {
    Sidecar {
        kind: EntryKind::Reload,
        stage: Some("reload".to_owned()),
        ..Sidecar::default()
    }
}

/// The audit entry for a reload that applied, was held or failed (unchanged ones are not
/// recorded).
fn reload_entry(outcome: &ReloadOutcome) -> Option<Entry> {
    let base = reload_base();
    let said = match outcome {
        ReloadOutcome::Applied { from, to, review } => Some(Sidecar {
            decision: "applied".to_owned(),
            revision: Some(to.clone()),
            reasons: review.iter().flat_map(|r| r.widened.clone()).collect(),
            detail: Some(format!(
                "from {from} to {to}; diff: {}",
                review
                    .as_ref()
                    .map_or_else(|| "none (no set was live)".to_owned(), |r| r.summary())
            )),
            ..base
        }),
        ReloadOutcome::Held { from, to, review } => Some(Sidecar {
            decision: "held".to_owned(),
            revision: Some(from.clone()),
            reasons: review.widened.clone(),
            detail: Some(format!(
                "{to} held for approval, {from} stays live; diff: {}",
                review.summary()
            )),
            ..base
        }),
        ReloadOutcome::Failed { error, .. } => Some(Sidecar {
            decision: "failed".to_owned(),
            reasons: error
                .problems
                .iter()
                .take(5)
                .map(|p| p.location())
                .collect(),
            detail: error.problems.first().map(ToString::to_string),
            ..base
        }),
        ReloadOutcome::Unchanged | ReloadOutcome::NoSources => None,
    };
    said.map(|s| Event::Sidecar(s).into())
}

async fn tick(poll: Option<&mut tokio::time::Interval>) {
    match poll {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// The notify watcher and the paths it currently watches.
struct FsWatch {
    watcher: notify::RecommendedWatcher,
    watched: BTreeSet<(PathBuf, bool)>,
}

impl FsWatch {
    fn new(tx: mpsc::Sender<Trigger>) -> Option<Self> {
        let handler = move |res: notify::Result<notify::Event>| {
            // Reading the files (our own reload) produces open and close-without-write events;
            // reacting to them would reload forever.
            if res.is_ok_and(|e| changes_content(&e.kind)) {
                // A full channel already holds a pending trigger: dropping this one loses nothing.
                let _ = tx.try_send(Trigger::Event);
            }
        };
        match notify::recommended_watcher(handler) {
            Ok(watcher) => Some(FsWatch {
                watcher,
                watched: BTreeSet::new(),
            }),
            Err(e) => {
                tracing::warn!(error = %e, "file-system events unavailable; relying on polling");
                None
            }
        }
    }

    /// Watches what the sources resolve to now, and stops watching what they no longer do.
    /// Returns whether a new watch was added.
    fn refresh(&mut self, sources: &Sources) -> bool {
        let wanted = targets(sources);
        for (path, recursive) in self.watched.difference(&wanted) {
            let _ = self.watcher.unwatch(path);
            tracing::debug!(path = %path.display(), recursive, "unwatched");
        }
        let mut now = BTreeSet::new();
        for (path, recursive) in &wanted {
            let key = (path.clone(), *recursive);
            if self.watched.contains(&key) {
                now.insert(key);
                continue;
            }
            let mode = if *recursive {
                RecursiveMode::Recursive
            } else {
                RecursiveMode::NonRecursive
            };
            // A missing directory is fine: its parent is watched and the poll re-reads.
            if self.watcher.watch(path, mode).is_ok() {
                now.insert(key);
            }
        }
        let added = now.difference(&self.watched).next().is_some();
        self.watched = now;
        added
    }
}

/// Whether an event can mean changed content: anything but reads (open, read, close after
/// reading).
fn changes_content(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode, EventKind};
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Each source directory (recursive), its resolved target if different, and its parent.
fn targets(sources: &Sources) -> BTreeSet<(PathBuf, bool)> {
    let mut out = BTreeSet::new();
    for dir in [&sources.policies_dir, &sources.schemas_dir] {
        out.insert((dir.clone(), true));
        if let Ok(real) = dir.canonicalize() {
            out.insert((real, true));
        }
        let parent = dir
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), PathBuf::from);
        if let Ok(real) = parent.canonicalize() {
            out.insert((real, false));
        }
        out.insert((parent, false));
        // ConfigMap mounts: files are symlinks through `..data`; watch the directory it points to.
        if let Ok(data) = dir.join("..data").canonicalize() {
            out.insert((data, true));
        }
    }
    out
}
