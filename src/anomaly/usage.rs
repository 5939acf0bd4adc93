//! `context.usage`: sliding-window counts of each principal's calls, read and bumped on the
//! decision path in one sharded-map lookup per counter, so a policy sees every earlier call
//! (no lag, no lost update under concurrency). Memory is bounded: principals are
//! authenticated, tools are registered (unknown names are not counted per tool), and entries
//! idle for an hour are swept once a shard grows.

use std::collections::HashMap;
use std::hash::BuildHasher as _;
use std::sync::{Arc, Mutex, PoisonError};

use super::window::{BUCKETS, Window};
use crate::authz::Usage;
use crate::limits::Clock;

const SHARDS: usize = 16;
const SWEEP_ABOVE: usize = 2048;
const SECOND_NS: u64 = 1_000_000_000;
const MINUTE_NS: u64 = 60 * SECOND_NS;

#[derive(Debug, Default)]
struct ToolCounts {
    /// Per second.
    minute: Window,
    /// Per minute.
    hour: Window,
}

#[derive(Debug, Default)]
struct PrincipalCounts {
    /// Calls per second.
    calls: Window,
    /// Denials per second.
    denials: Window,
}

/// A map split into locked shards; each value remembers when it was last used.
struct Sharded<V> {
    shards: Vec<Mutex<Shard<V>>>,
    hasher: std::hash::RandomState,
}

struct Shard<V> {
    map: HashMap<String, (u64, V)>,
    /// Sweep when the map grows past this (and past [`SWEEP_ABOVE`]): the next sweep waits
    /// until the shard doubles, so a shard of busy keys is not swept on every insert.
    sweep_above: usize,
}

impl<V: Default> Sharded<V> {
    fn new() -> Self {
        Sharded {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        map: HashMap::new(),
                        sweep_above: SWEEP_ABOVE,
                    })
                })
                .collect(),
            hasher: std::hash::RandomState::new(),
        }
    }

    /// Runs `f` on the entry for `key` (created empty when absent) and marks it used `now`.
    fn with<T>(&self, key: &str, now: u64, f: impl FnOnce(&mut V) -> T) -> Option<T> {
        let shard = (self.hasher.hash_one(key) as usize) & (SHARDS - 1);
        let mut shard = self
            .shards
            .get(shard)?
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((used, v)) = shard.map.get_mut(key) {
            *used = now;
            return Some(f(v));
        }
        if shard.map.len() > shard.sweep_above {
            // An entry idle for an hour counts nothing any window can see.
            shard
                .map
                .retain(|_, (used, _)| now.saturating_sub(*used) < 60 * MINUTE_NS);
            shard.sweep_above = shard.map.len().saturating_mul(2).max(SWEEP_ABOVE);
        }
        let (_, v) = shard
            .map
            .entry(key.to_owned())
            .or_insert((now, V::default()));
        Some(f(v))
    }

    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).map.len())
            .sum()
    }
}

/// The counters.
pub struct UsageCounters {
    clock: Arc<dyn Clock>,
    tools: Sharded<ToolCounts>,
    principals: Sharded<PrincipalCounts>,
}

impl std::fmt::Debug for UsageCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UsageCounters")
            .field("entries", &self.entries())
            .finish_non_exhaustive()
    }
}

impl UsageCounters {
    /// Counters on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        UsageCounters {
            clock,
            tools: Sharded::new(),
            principals: Sharded::new(),
        }
    }

    /// The usage before this call, then counts the call. `registered = false` (an unknown
    /// tool name) counts the call for the principal only.
    pub fn call(&self, principal: &str, tool: &str, registered: bool) -> Usage {
        let now = self.clock.now_ns();
        let (sec, min) = (now / SECOND_NS, now / MINUTE_NS);
        let mut usage = Usage::default();
        self.principals.with(principal, now, |p| {
            usage.calls_last_minute = p.calls.recent(sec);
            usage.denials_last_minute = p.denials.recent(sec);
            p.calls.add(sec);
        });
        if registered {
            let key = format!("{principal}\u{0}{tool}");
            self.tools.with(&key, now, |t| {
                usage.tool_last_minute = t.minute.recent(sec);
                // The current minute plus the 59 before it.
                usage.tool_last_hour = t.hour.sum(min.saturating_sub(BUCKETS - 1), min);
                t.minute.add(sec);
                t.hour.add(min);
            });
        }
        usage
    }

    /// Counts a denied call of `principal`.
    pub fn denied(&self, principal: &str) {
        let now = self.clock.now_ns();
        self.principals
            .with(principal, now, |p| p.denials.add(now / SECOND_NS));
    }

    /// Entries held (tests, metrics).
    pub fn entries(&self) -> usize {
        self.tools.len() + self.principals.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::ManualClock;

    #[test]
    fn racing_calls_are_all_counted() {
        let u = Arc::new(UsageCounters::new(Arc::new(ManualClock::default())));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let u = u.clone();
                std::thread::spawn(move || {
                    for _ in 0..500 {
                        u.call("a", "t", true);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let seen = u.call("a", "t", true);
        assert_eq!(
            (seen.tool_last_minute, seen.calls_last_minute),
            (4000, 4000)
        );
    }

    #[test]
    fn windows_slide_with_the_clock() {
        let clock = Arc::new(ManualClock::default());
        let u = UsageCounters::new(clock.clone());
        for _ in 0..3 {
            u.call("a", "t", true);
        }
        u.denied("a");
        let seen = u.call("a", "t", true);
        assert_eq!(
            (
                seen.tool_last_minute,
                seen.tool_last_hour,
                seen.calls_last_minute,
                seen.denials_last_minute
            ),
            (3, 3, 3, 1)
        );
        // Another principal and another tool start from zero.
        assert_eq!(u.call("b", "t", true), Usage::default());
        assert_eq!(u.call("a", "other", true).tool_last_minute, 0);
        clock.advance_ms(61_000);
        let later = u.call("a", "t", true);
        assert_eq!((later.tool_last_minute, later.tool_last_hour), (0, 4));
        clock.advance_ms(3_600_000);
        assert_eq!(u.call("a", "t", true).tool_last_hour, 0);
        // Unknown tools are not counted per tool.
        let before = u.entries();
        u.call("a", "no-such-tool", false);
        assert_eq!(u.entries(), before);
    }
}
