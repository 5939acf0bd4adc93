//! The approvals waiting for a human, in memory: how many each agent has and in total, and
//! which exact call each one is for. The store stays the truth; this mirror answers "is one
//! open for this call?" and "is there room for another?" without reading every stored
//! approval. It is rebuilt from the store at start, so it survives restarts, and one process
//! holds a data directory at a time, so no other writer can make it stale.
//!
//! An entry goes when its approval is decided, or when its expiry passes (checked on every
//! use, whether or not the expiry sweep has marked it in the store yet).

use std::collections::{BTreeSet, HashMap, HashSet};

use super::Approval;

/// How many approvals may wait for a human at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Per requesting agent (`[approvals] max_pending_per_agent`).
    pub per_agent: usize,
    /// For all agents together (`[approvals] max_pending`).
    pub total: usize,
}

impl Bounds {
    /// Default per agent: more than a human works through between two looks at the queue,
    /// far fewer than a runaway loop queues (the outside run queued 1,000 from one agent).
    pub const PER_AGENT: usize = 50;
    /// Default in total: twenty agents at their bound. Each pending approval is a flushed
    /// store write and a webhook notice, and lists and expiry sweeps read them all.
    pub const TOTAL: usize = 1000;
    /// Largest value either bound may take: a queue no human can review is not a bound.
    pub const MAX: usize = 100_000;
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            per_agent: Bounds::PER_AGENT,
            total: Bounds::TOTAL,
        }
    }
}

/// Which bound refused a new approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The requesting agent has `per_agent` approvals waiting.
    Agent,
    /// All agents together have `total` waiting.
    Total,
}

/// A new approval refused because a bound is reached: nothing was stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{pending} approvals are already waiting ({} bound {limit})", match .scope { Scope::Agent => "this agent's", Scope::Total => "the total" })]
pub struct Full {
    /// The bound that refused.
    pub scope: Scope,
    /// Its value.
    pub limit: usize,
    /// How many are waiting in that scope.
    pub pending: usize,
    /// Seconds until the oldest of them expires at the latest (a human may free one sooner).
    pub retry_after_secs: u64,
}

/// The exact call an approval is for.
type CallKey = (String, Option<String>, String, String);

fn key(a: &Approval) -> CallKey {
    (
        a.principal.clone(),
        a.on_behalf_of.clone(),
        a.tool.clone(),
        a.args_sha256.clone(),
    )
}

/// The pending approvals, indexed three ways.
#[derive(Debug, Default)]
pub(super) struct Waiting {
    /// By id: the approval as stored when it opened.
    by_id: HashMap<String, Approval>,
    /// By exact call: the id.
    by_call: HashMap<CallKey, String>,
    /// By requesting agent: (expiry, id), soonest first.
    by_agent: HashMap<String, BTreeSet<(u64, String)>>,
    /// All of them: (expiry, id), soonest first.
    by_expiry: BTreeSet<(u64, String)>,
    /// Places taken by [`Waiting::reuse_or_reserve`] whose approval is not stored yet: they
    /// count against the bounds, but are not listed (a human could not act on them yet).
    reserved: HashSet<String>,
}

impl Waiting {
    /// The index over `stored`, keeping those pending at `now_ms`.
    pub(super) fn of(stored: Vec<Approval>, now_ms: u64) -> Waiting {
        let mut w = Waiting::default();
        for a in stored {
            if a.status_at(now_ms) == super::Status::Pending {
                w.insert(a);
            }
        }
        w
    }

    fn insert(&mut self, a: Approval) {
        self.by_call.insert(key(&a), a.id.clone());
        self.by_agent
            .entry(a.principal.clone())
            .or_default()
            .insert((a.expires_ms, a.id.clone()));
        self.by_expiry.insert((a.expires_ms, a.id.clone()));
        self.by_id.insert(a.id.clone(), a);
    }

    /// Forgets approval `id` (decided, expired, or never stored).
    pub(super) fn remove(&mut self, id: &str) {
        self.reserved.remove(id);
        let Some(a) = self.by_id.remove(id) else {
            return;
        };
        let slot = (a.expires_ms, a.id.clone());
        self.by_expiry.remove(&slot);
        if let Some(set) = self.by_agent.get_mut(&a.principal) {
            set.remove(&slot);
            if set.is_empty() {
                self.by_agent.remove(&a.principal);
            }
        }
        let k = key(&a);
        if self.by_call.get(&k).is_some_and(|i| *i == a.id) {
            self.by_call.remove(&k);
        }
    }

    /// Forgets every approval expired at `now_ms`.
    fn prune(&mut self, now_ms: u64) {
        while let Some((expires, id)) = self.by_expiry.first().cloned() {
            if expires > now_ms {
                break;
            }
            self.remove(&id);
        }
    }

    /// The approval waiting for exactly `a`'s call, if one is; otherwise takes a place for
    /// `a` (answering `None`), or refuses when a bound is reached.
    pub(super) fn reuse_or_reserve(
        &mut self,
        a: &Approval,
        bounds: Bounds,
        now_ms: u64,
    ) -> Result<Option<Approval>, Full> {
        self.prune(now_ms);
        if let Some(open) = self.by_call.get(&key(a)).and_then(|id| self.by_id.get(id)) {
            return Ok(Some(open.clone()));
        }
        let retry = |soonest: Option<&(u64, String)>| {
            soonest.map_or(1, |(expires, _)| {
                expires.saturating_sub(now_ms).div_ceil(1000).max(1)
            })
        };
        let mine = self.by_agent.get(&a.principal);
        let agent_pending = mine.map_or(0, BTreeSet::len);
        if agent_pending >= bounds.per_agent {
            return Err(Full {
                scope: Scope::Agent,
                limit: bounds.per_agent,
                pending: agent_pending,
                retry_after_secs: retry(mine.and_then(BTreeSet::first)),
            });
        }
        if self.by_id.len() >= bounds.total {
            return Err(Full {
                scope: Scope::Total,
                limit: bounds.total,
                pending: self.by_id.len(),
                retry_after_secs: retry(self.by_expiry.first()),
            });
        }
        self.insert(a.clone());
        self.reserved.insert(a.id.clone());
        Ok(None)
    }

    /// Approval `id` if its place is reserved and it is not stored yet.
    pub(super) fn reserved(&self, id: &str) -> Option<Approval> {
        self.reserved
            .contains(id)
            .then(|| self.by_id.get(id).cloned())
            .flatten()
    }

    /// Approval `id`, reserved, is now stored: it is listed from now on.
    pub(super) fn stored(&mut self, id: &str) {
        self.reserved.remove(id);
    }

    /// Up to `limit` of those pending at `now_ms` that `keep` admits, newest first.
    pub(super) fn newest(
        &mut self,
        now_ms: u64,
        limit: usize,
        keep: impl Fn(&Approval) -> bool,
    ) -> Vec<Approval> {
        self.prune(now_ms);
        let mut found: Vec<&Approval> = self
            .by_id
            .values()
            .filter(|a| !self.reserved.contains(&a.id) && keep(a))
            .collect();
        found.sort_unstable_by(|a, b| b.id.cmp(&a.id));
        found.into_iter().take(limit).cloned().collect()
    }

    /// Whether approval `id` is pending (as last known; expiry not checked).
    pub(super) fn contains(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    /// How many are pending at `now_ms`: in total, and for `principal`.
    pub(super) fn counts(&mut self, principal: &str, now_ms: u64) -> (usize, usize) {
        self.prune(now_ms);
        (
            self.by_id.len(),
            self.by_agent.get(principal).map_or(0, BTreeSet::len),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approvals::Status;

    fn approval(id: &str, principal: &str, digest: &str, expires_ms: u64) -> Approval {
        Approval {
            id: id.to_owned(),
            principal: principal.to_owned(),
            on_behalf_of: None,
            tool: "write_file".to_owned(),
            risk: "high".to_owned(),
            args_sha256: digest.to_owned(),
            args_preview: String::new(),
            policy_revision: "r".to_owned(),
            decision_id: "d".to_owned(),
            created_ms: 0,
            expires_ms,
            status: Status::Pending,
            decided_by: None,
            reason: None,
            decided_ms: None,
            used_ms: None,
            waiting_on: Vec::new(),
            provenance: Default::default(),
        }
    }

    #[test]
    fn bounds_count_live_approvals_only() {
        let bounds = Bounds {
            per_agent: 2,
            total: 3,
        };
        let mut w = Waiting::default();
        for (id, who, digest) in [("1", "a", "x"), ("2", "a", "y"), ("3", "b", "x")] {
            assert_eq!(
                w.reuse_or_reserve(&approval(id, who, digest, 10_000), bounds, 0),
                Ok(None)
            );
        }
        // The same call again reuses its approval, bound or not.
        let again = w.reuse_or_reserve(&approval("9", "a", "x", 10_000), bounds, 0);
        assert_eq!(again.map(|a| a.map(|a| a.id)), Ok(Some("1".to_owned())));
        let full = w
            .reuse_or_reserve(&approval("4", "a", "z", 10_000), bounds, 1000)
            .unwrap_err();
        assert_eq!(
            (full.scope, full.limit, full.retry_after_secs),
            (Scope::Agent, 2, 9)
        );
        let full = w
            .reuse_or_reserve(&approval("4", "c", "z", 10_000), bounds, 0)
            .unwrap_err();
        assert_eq!((full.scope, full.pending), (Scope::Total, 3));
        // Deciding one frees a place; expiry frees the rest.
        w.remove("3");
        assert_eq!(
            w.reuse_or_reserve(&approval("4", "c", "z", 20_000), bounds, 0),
            Ok(None)
        );
        assert_eq!(w.counts("a", 10_000), (1, 0));
    }

    #[test]
    fn a_reserved_place_is_listed_only_once_stored() {
        let mut w = Waiting::default();
        let bounds = Bounds::default();
        assert_eq!(
            w.reuse_or_reserve(&approval("1", "a", "x", 10_000), bounds, 0),
            Ok(None)
        );
        // Reserved, not yet stored: it counts, but a human cannot see it (nor act on it).
        assert_eq!(w.counts("a", 0), (1, 1));
        assert!(w.newest(0, 10, |_| true).is_empty());
        assert_eq!(w.reserved("1").map(|a| a.id), Some("1".to_owned()));
        w.stored("1");
        assert!(w.reserved("1").is_none());
        let listed: Vec<String> = w
            .newest(0, 10, |_| true)
            .into_iter()
            .map(|a| a.id)
            .collect();
        assert_eq!(listed, ["1"]);
        // Approvals loaded from the store at start are listed at once.
        let w = &mut Waiting::of(vec![approval("2", "b", "y", 10_000)], 0);
        assert_eq!(w.newest(0, 10, |_| true).len(), 1);
    }

    /// An agent acting for one human never reuses, or redeems, the approval of the same call
    /// made for another.
    #[test]
    fn approvals_are_bound_to_the_human_the_agent_acts_for() {
        let mut w = Waiting::default();
        let bounds = Bounds::default();
        let for_alice = Approval {
            on_behalf_of: Some("Human::\"alice\"".to_owned()),
            ..approval("1", "a", "x", 10_000)
        };
        assert_eq!(w.reuse_or_reserve(&for_alice, bounds, 0), Ok(None));
        w.stored("1");
        let for_bob = Approval {
            on_behalf_of: Some("Human::\"bob\"".to_owned()),
            ..approval("2", "a", "x", 10_000)
        };
        assert_eq!(w.reuse_or_reserve(&for_bob, bounds, 0), Ok(None));
        let approved = Approval {
            status: Status::Approved,
            ..for_alice.clone()
        };
        assert_eq!(
            approved
                .redeemed(("a", Some("Human::\"bob\"")), "write_file", "x", 0)
                .map(|a| a.id),
            Err(crate::approvals::Refusal::Mismatch(
                "human the agent acts for"
            ))
        );
        assert_eq!(
            approved
                .redeemed(("a", None), "write_file", "x", 0)
                .map(|a| a.id),
            Err(crate::approvals::Refusal::Mismatch(
                "human the agent acts for"
            ))
        );
        assert_eq!(
            approved
                .redeemed(("a", Some("Human::\"alice\"")), "write_file", "x", 0)
                .map(|a| a.status),
            Ok(Status::Used)
        );
    }
}
