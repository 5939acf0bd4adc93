//! Quarantine: principals whose every call is denied until a human releases them.
//!
//! A principal enters quarantine when an anomaly signal of a configured kind is raised for it
//! (`[anomaly] quarantine_on`), or when a human the policies allow puts it there by hand. Only
//! a human the policies allow releases it (`Action::"quarantine"` with `on: false`). A human's
//! change is stored with its audit record before it takes effect here; an anomaly's takes
//! effect at once (it only denies more) and is stored with its record right after.
//!
//! The decision path reads an immutable map through one `ArcSwap` load: no lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use super::AdminStore;
use super::AdminStoreError;

/// One quarantined principal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quarantined {
    /// The principal (`Agent::"dev-agent"`).
    pub principal: String,
    /// What put it there: an anomaly kind (`sequence`, …) or `manual`.
    pub cause: String,
    /// Who: `anomaly` or the human (`Human::"alice"`).
    pub by: String,
    /// The anomaly's detail or the human's reason.
    pub reason: String,
    /// When, unix ms.
    pub at_ms: u64,
}

type Map = HashMap<String, Arc<Quarantined>>;

/// The live quarantine list.
pub struct Quarantine {
    live: ArcSwap<Map>,
    /// Serializes changes: store, then swap.
    write: Mutex<()>,
    /// Whether a fleet shares the list ([`Quarantine::share`]).
    shared: AtomicBool,
    /// Entries this sidecar entered that the fleet has not been told of yet: kept through
    /// [`Quarantine::adopt`] until they are.
    unshared: Mutex<Vec<Quarantined>>,
}

impl std::fmt::Debug for Quarantine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quarantine")
            .field("principals", &self.live.load().len())
            .finish_non_exhaustive()
    }
}

impl Quarantine {
    /// The list as stored.
    pub(super) fn open(store: Arc<dyn AdminStore>) -> Result<Quarantine, AdminStoreError> {
        let map: Map = store
            .load_quarantined()?
            .into_iter()
            .map(|q| (q.principal.clone(), Arc::new(q)))
            .collect();
        Ok(Quarantine {
            live: ArcSwap::from_pointee(map),
            write: Mutex::new(()),
            shared: AtomicBool::new(false),
            unshared: Mutex::new(Vec::new()),
        })
    }

    /// An empty list kept in memory only.
    pub(super) fn unstored() -> Quarantine {
        Quarantine {
            live: ArcSwap::from_pointee(Map::new()),
            write: Mutex::new(()),
            shared: AtomicBool::new(false),
            unshared: Mutex::new(Vec::new()),
        }
    }

    /// The entry for `principal` if it is quarantined (one atomic load and a map lookup).
    pub fn get(&self, principal: &str) -> Option<Arc<Quarantined>> {
        let live = self.live.load();
        if live.is_empty() {
            return None;
        }
        live.get(principal).cloned()
    }

    /// How many principals are quarantined.
    pub fn len(&self) -> usize {
        self.live.load().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.live.load().is_empty()
    }

    /// Every quarantined principal, oldest first.
    pub fn list(&self) -> Vec<Quarantined> {
        let mut all: Vec<Quarantined> = self.live.load().values().map(|q| (**q).clone()).collect();
        all.sort_by(|a, b| (a.at_ms, &a.principal).cmp(&(b.at_ms, &b.principal)));
        all
    }

    /// Puts `entry.principal` in quarantine (in force; storing it is the caller's commit).
    /// `false` when it was already quarantined (the first entry is kept).
    pub fn enter(&self, entry: Quarantined) -> bool {
        let _guard = self.write.lock().unwrap_or_else(PoisonError::into_inner);
        let current = self.live.load_full();
        if current.contains_key(&entry.principal) {
            return false;
        }
        let mut next = (*current).clone();
        if self.shared.load(Ordering::Acquire) {
            self.unshare(entry.clone());
        }
        next.insert(entry.principal.clone(), Arc::new(entry));
        self.live.store(Arc::new(next));
        true
    }

    /// From now on a fleet holds the list: entries entered here wait in
    /// [`Quarantine::unshared`] until the fleet has them.
    pub fn share(&self) {
        self.shared.store(true, Ordering::Release);
        // Entries stored before there was a fleet join it (the first entry is kept there).
        for q in self.list() {
            self.unshare(q);
        }
    }

    /// Takes the entries the fleet has not been told of.
    pub fn unshared(&self) -> Vec<Quarantined> {
        std::mem::take(&mut *self.unshared.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The fleet has been told of `principal`'s entry (or release) by other means: a later
    /// round must not send the entry again (it would undo a release made elsewhere).
    pub fn shared_now(&self, principal: &str) {
        self.unshared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|q| q.principal != principal);
    }

    /// Puts `entry` (back) among those the fleet has not been told of.
    pub fn unshare(&self, entry: Quarantined) {
        self.unshared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(entry);
    }

    /// Makes the list the fleet's `shared` list, plus the entries still on their way to it;
    /// the principals it released.
    pub fn adopt(&self, shared: Vec<Quarantined>) -> Vec<String> {
        let _guard = self.write.lock().unwrap_or_else(PoisonError::into_inner);
        let pending = self
            .unshared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut next: Map = shared
            .into_iter()
            .map(|q| (q.principal.clone(), Arc::new(q)))
            .collect();
        for q in pending {
            next.entry(q.principal.clone())
                .or_insert_with(|| Arc::new(q));
        }
        let current = self.live.load();
        if **current == next {
            return Vec::new();
        }
        let released = current
            .keys()
            .filter(|p| !next.contains_key(*p))
            .cloned()
            .collect();
        self.live.store(Arc::new(next));
        released
    }

    /// Releases `principal` (stored already, with its record). `None` when it was not
    /// quarantined.
    pub fn release(&self, principal: &str) -> Option<Quarantined> {
        let _guard = self.write.lock().unwrap_or_else(PoisonError::into_inner);
        let current = self.live.load_full();
        let entry = current.get(principal).cloned()?;
        self.shared_now(principal);
        let mut next = (*current).clone();
        next.remove(principal);
        self.live.store(Arc::new(next));
        Some((*entry).clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(p: &str, at_ms: u64) -> Quarantined {
        Quarantined {
            principal: p.to_owned(),
            cause: "sequence".to_owned(),
            by: "anomaly".to_owned(),
            reason: "r".to_owned(),
            at_ms,
        }
    }

    #[test]
    fn enter_once_release_once() {
        let q = Quarantine::unstored();
        assert!(q.get("Agent::\"a\"").is_none());
        assert!(q.enter(entry("Agent::\"a\"", 2)));
        assert!(!q.enter(entry("Agent::\"a\"", 3)));
        assert!(q.enter(entry("Agent::\"b\"", 1)));
        assert_eq!(q.get("Agent::\"a\"").unwrap().at_ms, 2);
        let listed: Vec<_> = q.list().into_iter().map(|e| e.principal).collect();
        assert_eq!(listed, ["Agent::\"b\"", "Agent::\"a\""]);
        assert_eq!(q.release("Agent::\"a\"").unwrap().at_ms, 2);
        assert!(q.release("Agent::\"a\"").is_none());
        assert!(q.get("Agent::\"a\"").is_none());
        assert!(q.get("Agent::\"b\"").is_some());
    }
}
