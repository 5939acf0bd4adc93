//! [`Held`]: how many requests each principal holds open at once, by kind (long polls, event
//! streams, held MCP calls), and how many all agents hold together. Each request that may stay
//! open for minutes takes a [`HeldPermit`] after its caller is known and gives it back when its
//! answer ends (the permit rides on the answer). Over a bound the request is refused at once,
//! so one principal cannot take every connection, and agents together cannot take the slots
//! kept for humans and probes. Which routes hold, and how a refusal is answered, is the front
//! ends' business; this module only counts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// What a held request is; each kind has its own bound per principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeldKind {
    /// A long poll (`GET /v1/approvals/{id}?wait=…`).
    Wait,
    /// An event stream (`GET /v1/approvals/events`, `GET /mcp`).
    Stream,
    /// An MCP tool call held while a human decides its approval.
    Call,
}

impl HeldKind {
    /// The config key of this kind's bound per principal.
    pub fn key(self) -> &'static str {
        match self {
            HeldKind::Wait => "server.max_waits_per_principal",
            HeldKind::Stream => "server.max_streams_per_principal",
            HeldKind::Call => "mcp.max_held_calls_per_principal",
        }
    }

    /// What is held, in the plural, for messages.
    pub fn what(self) -> &'static str {
        match self {
            HeldKind::Wait => "long polls (`?wait=`)",
            HeldKind::Stream => "event streams",
            HeldKind::Call => "held MCP tool calls",
        }
    }
}

/// The bounds, validated by the config (`[server]`, `[mcp]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldBounds {
    /// Long polls one principal may hold at once.
    pub waits: usize,
    /// Event streams one principal may hold open at once.
    pub streams: usize,
    /// MCP calls one principal may have held at once.
    pub calls: usize,
    /// Requests of every kind all agents together may hold: the connection cap less the
    /// slots reserved for humans, probes and short requests.
    pub agents: usize,
}

impl Default for HeldBounds {
    fn default() -> Self {
        HeldBounds {
            waits: 16,
            streams: 8,
            calls: 4,
            // `[server]`'s defaults: 1,024 connections, 128 of them reserved.
            agents: 1024 - 128,
        }
    }
}

impl HeldBounds {
    fn per_principal(&self, kind: HeldKind) -> usize {
        match kind {
            HeldKind::Wait => self.waits,
            HeldKind::Stream => self.streams,
            HeldKind::Call => self.calls,
        }
    }
}

/// Who holds: the bound on all agents together applies to agents only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// An agent: counted against its own bound and the agents' share.
    Agent,
    /// A human: counted against its own bound only (the reserved slots are theirs).
    Human,
}

/// A request refused because a bound is reached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeldFull {
    /// The principal holds its most of this kind.
    #[error(
        "you hold {limit} {what} already, the most one principal may hold at once (`{key}`); end one before opening another",
        what = kind.what(),
        key = kind.key()
    )]
    Principal {
        /// Which kind.
        kind: HeldKind,
        /// The bound.
        limit: usize,
    },
    /// Agents together hold every slot they may.
    #[error(
        "agents hold {limit} requests open already, every connection slot agents may hold (`server.max_connections` less `server.reserved_connections`); retry shortly"
    )]
    Agents {
        /// The bound.
        limit: usize,
    },
}

impl HeldFull {
    /// The config key that raises the bound that refused.
    pub fn key(&self) -> &'static str {
        match self {
            HeldFull::Principal { kind, .. } => kind.key(),
            HeldFull::Agents { .. } => "server.reserved_connections",
        }
    }
}

#[derive(Default)]
struct Counts {
    /// By principal and kind; an entry at zero is removed.
    by: HashMap<(Arc<str>, HeldKind), usize>,
    /// Held by agents, every kind.
    agents: usize,
}

/// The held requests, by principal and kind.
pub struct Held {
    bounds: HeldBounds,
    counts: Mutex<Counts>,
}

/// One held request's place, given back when dropped.
#[must_use = "the place is given back when the permit is dropped"]
pub struct HeldPermit {
    held: Arc<Held>,
    key: (Arc<str>, HeldKind),
    holder: Holder,
}

impl Held {
    /// Counts against `bounds`.
    pub fn new(bounds: HeldBounds) -> Held {
        Held {
            bounds,
            counts: Mutex::default(),
        }
    }

    /// The bounds in force.
    pub fn bounds(&self) -> HeldBounds {
        self.bounds
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for one more held request of `kind` by `principal`, or which bound refused.
    pub fn take(
        self: &Arc<Self>,
        principal: &str,
        holder: Holder,
        kind: HeldKind,
    ) -> Result<HeldPermit, HeldFull> {
        let limit = self.bounds.per_principal(kind);
        let key: (Arc<str>, HeldKind) = (Arc::from(principal), kind);
        let mut counts = self.counts();
        let mine = counts.by.get(&key).copied().unwrap_or(0);
        if mine >= limit {
            return Err(HeldFull::Principal { kind, limit });
        }
        if holder == Holder::Agent {
            if counts.agents >= self.bounds.agents {
                return Err(HeldFull::Agents {
                    limit: self.bounds.agents,
                });
            }
            counts.agents += 1;
        }
        counts.by.insert(key.clone(), mine + 1);
        Ok(HeldPermit {
            held: self.clone(),
            key,
            holder,
        })
    }

    /// How many `kind` requests `principal` holds now.
    pub fn holding(&self, principal: &str, kind: HeldKind) -> usize {
        let key: (Arc<str>, HeldKind) = (Arc::from(principal), kind);
        self.counts().by.get(&key).copied().unwrap_or(0)
    }

    /// How many requests agents hold now, every kind.
    pub fn agents_holding(&self) -> usize {
        self.counts().agents
    }
}

impl Drop for HeldPermit {
    fn drop(&mut self) {
        let mut counts = self.held.counts();
        if self.holder == Holder::Agent {
            counts.agents = counts.agents.saturating_sub(1);
        }
        match counts.by.get_mut(&self.key) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                counts.by.remove(&self.key);
                // Memory goes back after a flood of principals ends.
                if counts.by.capacity() > 64 && counts.by.len() < counts.by.capacity() / 4 {
                    counts.by.shrink_to_fit();
                }
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(agents: usize) -> Arc<Held> {
        Arc::new(Held::new(HeldBounds {
            waits: 2,
            streams: 1,
            calls: 1,
            agents,
        }))
    }

    #[test]
    fn a_principal_gets_its_bound_and_no_more_and_others_are_unaffected() {
        let h = held(100);
        let a = h.take("a", Holder::Agent, HeldKind::Wait).unwrap();
        let _b = h.take("a", Holder::Agent, HeldKind::Wait).unwrap();
        let e = h.take("a", Holder::Agent, HeldKind::Wait).err().unwrap();
        assert_eq!(
            e,
            HeldFull::Principal {
                kind: HeldKind::Wait,
                limit: 2
            }
        );
        assert!(
            e.to_string().contains("`server.max_waits_per_principal`"),
            "{e}"
        );
        // Another kind, another principal: unaffected.
        let _s = h.take("a", Holder::Agent, HeldKind::Stream).unwrap();
        let _o = h.take("b", Holder::Agent, HeldKind::Wait).unwrap();
        drop(a);
        let _again = h.take("a", Holder::Agent, HeldKind::Wait).unwrap();
        assert_eq!(h.holding("a", HeldKind::Wait), 2);
    }

    #[test]
    fn agents_together_leave_the_reserve_to_humans() {
        let h = held(2);
        let _a = h.take("a", Holder::Agent, HeldKind::Wait).unwrap();
        let _b = h.take("b", Holder::Agent, HeldKind::Wait).unwrap();
        let e = h.take("c", Holder::Agent, HeldKind::Stream).err().unwrap();
        assert_eq!(e, HeldFull::Agents { limit: 2 });
        assert_eq!(e.key(), "server.reserved_connections");
        let _human = h.take("alice", Holder::Human, HeldKind::Stream).unwrap();
        assert_eq!(h.agents_holding(), 2);
    }

    #[test]
    fn permits_given_back_leave_nothing_behind() {
        let h = held(1000);
        let permits: Vec<_> = (0..500)
            .map(|i| {
                h.take(&format!("p{i}"), Holder::Agent, HeldKind::Wait)
                    .unwrap()
            })
            .collect();
        assert_eq!(h.agents_holding(), 500);
        drop(permits);
        assert_eq!(h.agents_holding(), 0);
        assert!(h.counts().by.is_empty());
        assert!(h.counts().by.capacity() <= 64 * 4);
    }
}
