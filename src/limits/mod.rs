//! Rate limits: per (principal, tool), per principal and global, checked before Cedar.
//!
//! Each level has a [`Rate`]: a token bucket (`burst` calls at once, refilled at
//! `per_second`), fixed windows (`per_minute`, `per_hour`, `per_day`, reset on the minute, the
//! hour and at 00:00 UTC), or both. A call takes one unit from every limit that applies, or
//! none: a limit that refuses leaves the others untouched (units already taken further down are
//! returned), so concurrent callers never get more than a limit allows.
//!
//! Time comes from a [`Clock`]: monotonic for buckets and wall time for windows in the server,
//! a [`ManualClock`] in tests. Limits live in sharded maps; an entry that is full (bucket) and
//! unused (windows) is the same as no entry, so such entries are dropped when a shard grows,
//! which keeps memory bounded by the keys that are actually busy. Counts are in memory: a
//! restart starts every limit afresh.
//!
//! [`Held`] bounds something else: how many requests each principal holds open at once (long
//! polls, event streams, held MCP calls), not how many it makes.

mod clock;
mod held;
mod rate;

pub use clock::{Clock, ManualClock, MonotonicClock};
pub use held::{Held, HeldBounds, HeldFull, HeldKind, HeldPermit, Holder};
pub use rate::{LimitConfig, Per, Rate};

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;

/// Shards of the maps (a power of two).
const SHARDS: usize = 16;
/// Entries per shard above which unused entries are dropped.
const SWEEP_ABOVE: usize = 1024;
const NS: f64 = 1e9;

/// Now, as each kind of limit reads it.
#[derive(Debug, Clone, Copy)]
struct Now {
    /// Monotonic ns (buckets).
    ns: u64,
    /// Unix ms (windows); 0 when no window applies.
    unix_ms: u64,
}

/// A fixed window's count: which window (unix ms / length) and how many calls in it.
#[derive(Debug, Clone, Copy, Default)]
struct Count {
    window: u64,
    calls: u32,
}

impl Count {
    /// The calls in the window `now` falls in. A clock that stepped back into the window just
    /// before keeps counting in the later one (no quota twice for a small NTP step); a jump
    /// back further than that is a correction of a bad forward jump and starts afresh, so a
    /// clock once set years ahead does not lock callers out for years.
    fn current(&mut self, per: Per, now: Now) -> u32 {
        let window = now.unix_ms / per.window_ms();
        if window > self.window || self.window - window > 1 {
            *self = Count { window, calls: 0 };
        }
        self.calls
    }
}

/// The state of one key's limit.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    last_ns: u64,
    /// Per minute, hour, day.
    counts: [Count; 3],
    /// The rate it was last used with (a reload may change a tool's rate).
    rate: Rate,
}

impl Bucket {
    fn full(rate: &Rate, now: Now) -> Bucket {
        Bucket {
            tokens: f64::from(rate.burst.unwrap_or(0)),
            last_ns: now.ns,
            counts: [Count::default(); 3],
            rate: *rate,
        }
    }

    /// Adds what accrued since the last look at `rate`. A clock that went backwards adds
    /// nothing.
    fn refill(&mut self, rate: &Rate, now: Now) {
        if let (Some(per_second), Some(burst)) = (rate.per_second, rate.burst) {
            let elapsed = now.ns.saturating_sub(self.last_ns) as f64 / NS;
            self.tokens = (self.tokens + elapsed * per_second).min(f64::from(burst));
        }
        self.last_ns = self.last_ns.max(now.ns);
        self.rate = *rate;
    }

    /// Whether it holds no state at `now`: bucket full, no calls in the current windows.
    fn unused_at(&self, now: Now) -> bool {
        let mut probe = *self;
        probe.refill(&self.rate, now);
        let bucket_full = probe.tokens >= f64::from(self.rate.burst.unwrap_or(0));
        bucket_full
            && Per::WINDOWS
                .into_iter()
                .zip(probe.counts.iter_mut())
                .all(|(per, c)| c.current(per, now) == 0)
    }

    /// Every limit of `rate` as (quota, seconds until one more call may pass): the bucket,
    /// then the windows (no allocation: at most four limits).
    fn quotas(&mut self, rate: &Rate, scope: Scope, now: Now) -> Quotas {
        let mut out = Quotas::default();
        if let (Some(per_second), Some(burst)) = (rate.per_second, rate.burst) {
            let missing = f64::from(burst) - self.tokens;
            let quota = Quota {
                scope,
                per: Per::Bucket,
                limit: burst,
                remaining: self.tokens.max(0.0).floor() as u32,
                reset_secs: (missing / per_second).ceil().max(0.0) as u64,
            };
            let wait = ((1.0 - self.tokens) / per_second).ceil().max(1.0) as u64;
            out.0[0] = Some((quota, wait));
        }
        let slots = out.0.iter_mut().skip(1);
        for ((per, count), slot) in Per::WINDOWS
            .into_iter()
            .zip(self.counts.iter_mut())
            .zip(slots)
        {
            let Some(limit) = rate.window(per) else {
                continue;
            };
            let calls = count.current(per, now);
            let len = per.window_ms();
            let ends_in_ms = len - now.unix_ms % len;
            let reset_secs = ends_in_ms.div_ceil(1000).max(1);
            let quota = Quota {
                scope,
                per,
                limit,
                remaining: limit.saturating_sub(calls),
                reset_secs,
            };
            *slot = Some((quota, reset_secs));
        }
        out
    }
}

/// The limits of one entry: bucket, minute, hour, day (each when configured).
#[derive(Debug, Default)]
struct Quotas([Option<(Quota, u64)>; 4]);

impl Quotas {
    fn iter(&self) -> impl Iterator<Item = &(Quota, u64)> {
        self.0.iter().flatten()
    }
}

/// Which bucket a quota is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// This principal's calls to this tool.
    PrincipalTool,
    /// This principal's calls.
    Principal,
    /// All calls.
    Global,
}

/// Where a caller stands with the tightest limit that applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// The level.
    pub scope: Scope,
    /// The kind of limit: a token bucket or a fixed window.
    pub per: Per,
    /// Its size (`X-RateLimit-Limit`).
    pub limit: u32,
    /// Calls left (`X-RateLimit-Remaining`).
    pub remaining: u32,
    /// Seconds until it is full again (`X-RateLimit-Reset`).
    pub reset_secs: u64,
}

/// A refused call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    /// The limit that refused (the one with the longest wait), as a quota.
    pub quota: Quota,
    /// Seconds until a call may pass (`Retry-After`, at least 1).
    pub retry_after_secs: u64,
}

/// One entry a call draws from: its scope, key and rate. The key is also the key of the
/// shared entry when a fleet shares its limits (`[fleet]`).
#[derive(Debug, Clone)]
pub struct Slot {
    /// The level.
    pub scope: Scope,
    /// Tagged by scope, so no principal name can collide with a (principal, tool) key. Empty
    /// for the global entry.
    pub key: String,
    /// The limit.
    pub rate: Rate,
}

impl Slot {
    fn new(scope: Scope, principal: &str, tool: &str, rate: Rate) -> Slot {
        let key = match scope {
            Scope::PrincipalTool => format!("t{principal}\u{0}{tool}"),
            Scope::Principal => format!("p{principal}"),
            Scope::Global => String::new(),
        };
        Slot { scope, key, rate }
    }
}

/// One shard of the entries.
#[derive(Default)]
struct Shard {
    map: HashMap<String, Bucket>,
    /// Sweep when the map grows past this (and past [`SWEEP_ABOVE`]).
    sweep_above: usize,
}

/// The limiter.
pub struct Limiter {
    config: LimitConfig,
    clock: Arc<dyn Clock>,
    global: Mutex<Option<Bucket>>,
    shards: Vec<Mutex<Shard>>,
    hasher: RandomState,
    /// Calls refused so far.
    rejections: AtomicU64,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Limiter {
    /// A limiter with `config`, on `clock`.
    pub fn new(config: LimitConfig, clock: Arc<dyn Clock>) -> Limiter {
        Limiter {
            config,
            clock,
            global: Mutex::new(None),
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            hasher: RandomState::new(),
            rejections: AtomicU64::new(0),
        }
    }

    /// The configured limits.
    pub fn config(&self) -> &LimitConfig {
        &self.config
    }

    /// Takes one unit for a call by `principal` to `tool` from every limit that applies.
    /// `tool_rate` is the tool's own rate (its manifest); `None` for a registered tool without
    /// one uses the configured default, and `registered = false` skips the per-tool limit
    /// (unknown names must not create entries). `Ok(None)`: no limit applies.
    pub fn check(
        &self,
        principal: &str,
        tool: &str,
        registered: bool,
        tool_rate: Option<Rate>,
    ) -> Result<Option<Quota>, Limited> {
        self.take_all(&self.slots(principal, tool, registered, tool_rate))
    }

    /// [`Limiter::check`] on the limits [`Limiter::slots`] gave (for a caller that needs them
    /// again: a fleet's shared limits are the same entries).
    pub fn take_all(&self, slots: &[Slot]) -> Result<Option<Quota>, Limited> {
        if slots.is_empty() {
            return Ok(None);
        }
        // Wall time is read even when this call's limits have no windows: a sweep it
        // triggers must judge other entries' windows by the real time.
        let now = self.now();
        let mut tightest: Option<Quota> = None;
        for (i, slot) in slots.iter().enumerate() {
            match self.take(slot, now) {
                Ok(q) => {
                    if tightest.is_none_or(|t| q.remaining < t.remaining) {
                        tightest = Some(q);
                    }
                }
                Err(limited) => {
                    self.rejections.fetch_add(1, Ordering::Relaxed);
                    for taken in slots.iter().take(i) {
                        self.give_back(taken, now);
                    }
                    return Err(limited);
                }
            }
        }
        Ok(tightest)
    }

    /// The limits a call by `principal` to `tool` draws from, in order: (principal, tool),
    /// principal, global; each when configured. Arguments as for [`Limiter::check`].
    pub fn slots(
        &self,
        principal: &str,
        tool: &str,
        registered: bool,
        tool_rate: Option<Rate>,
    ) -> Vec<Slot> {
        let per_tool = if registered {
            tool_rate.or(self.config.per_principal_tool)
        } else {
            None
        };
        [
            (Scope::PrincipalTool, per_tool),
            (Scope::Principal, self.config.per_principal),
            (Scope::Global, self.config.global),
        ]
        .into_iter()
        .filter_map(|(scope, rate)| rate.map(|r| Slot::new(scope, principal, tool, r)))
        .collect()
    }

    /// Returns the units a [`Limiter::check`] that passed took: a shared limit refused the
    /// call after it (`refused`: counted as a rate-limit refusal), or could not be asked.
    pub fn refund(&self, slots: &[Slot], refused: bool) {
        if refused {
            self.rejections.fetch_add(1, Ordering::Relaxed);
        }
        let now = self.now();
        for slot in slots {
            self.give_back(slot, now);
        }
    }

    fn now(&self) -> Now {
        Now {
            ns: self.clock.now_ns(),
            unix_ms: self.clock.unix_ms(),
        }
    }

    /// Runs `f` on the entry for `slot`, created unused when absent.
    fn with_bucket<T>(&self, slot: &Slot, now: Now, f: impl FnOnce(&mut Bucket) -> T) -> T {
        let rate = &slot.rate;
        if slot.scope == Scope::Global {
            let mut g = self.global.lock().unwrap_or_else(PoisonError::into_inner);
            let b = g.get_or_insert_with(|| Bucket::full(rate, now));
            b.refill(rate, now);
            return f(b);
        }
        let key = &slot.key;
        let shard = (self.hasher.hash_one(key) as usize) & (SHARDS - 1);
        // Unreachable misses (the index is masked) fail closed with an empty entry.
        let empty = || Bucket {
            tokens: 0.0,
            last_ns: now.ns,
            counts: [Count {
                window: u64::MAX,
                calls: u32::MAX,
            }; 3],
            rate: *rate,
        };
        let Some(shard) = self.shards.get(shard) else {
            return f(&mut empty());
        };
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        // The busy path: one lookup, no allocation.
        if let Some(b) = shard.map.get_mut(key) {
            b.refill(rate, now);
            return f(b);
        }
        if shard.map.len() > shard.sweep_above.max(SWEEP_ABOVE) {
            // Unused entries carry no state: dropping them changes no answer. The next sweep
            // waits until the shard doubles, so a shard of busy keys is not swept per insert.
            shard.map.retain(|_, b| !b.unused_at(now));
            shard.sweep_above = shard.map.len().saturating_mul(2);
        }
        let b = shard
            .map
            .entry(key.clone())
            .or_insert_with(|| Bucket::full(rate, now));
        f(b)
    }

    /// Takes one unit from every limit of `slot`, or none if any refuses.
    fn take(&self, slot: &Slot, now: Now) -> Result<Quota, Limited> {
        let (rate, scope) = (&slot.rate, slot.scope);
        self.with_bucket(slot, now, |b| {
            let mut quotas = b.quotas(rate, scope, now);
            let refusing = quotas
                .iter()
                .filter(|(q, _)| q.remaining == 0)
                .max_by_key(|(_, wait)| *wait)
                .copied();
            if let Some((quota, wait)) = refusing {
                return Err(Limited {
                    quota,
                    retry_after_secs: wait,
                });
            }
            if let (Some(per_second), Some(burst)) = (rate.per_second, rate.burst) {
                b.tokens -= 1.0;
                if let Some(Some((q, _))) = quotas.0.first_mut() {
                    q.reset_secs = ((f64::from(burst) - b.tokens) / per_second).ceil() as u64;
                }
            }
            for (per, count) in Per::WINDOWS.into_iter().zip(b.counts.iter_mut()) {
                if rate.window(per).is_some() {
                    count.calls = count.calls.saturating_add(1);
                }
            }
            // Every limit gave one unit: the quotas as they stand after this call.
            let tightest = quotas
                .iter()
                .map(|(q, _)| Quota {
                    remaining: q.remaining.saturating_sub(1),
                    ..*q
                })
                .min_by_key(|q| q.remaining);
            // `quotas` holds at least one limit: `Rate::check` refuses a rate with none.
            tightest.ok_or(Limited {
                quota: Quota {
                    scope,
                    per: Per::Bucket,
                    limit: 0,
                    remaining: 0,
                    reset_secs: 1,
                },
                retry_after_secs: 1,
            })
        })
    }

    fn give_back(&self, slot: &Slot, now: Now) {
        let rate = &slot.rate;
        self.with_bucket(slot, now, |b| {
            if let Some(burst) = rate.burst {
                b.tokens = (b.tokens + 1.0).min(f64::from(burst));
            }
            for (per, count) in Per::WINDOWS.into_iter().zip(b.counts.iter_mut()) {
                // Only into the window the unit was taken from: if a later call already moved
                // the count on to the next window, that window's calls are not ours to lower.
                let taken_in = now.unix_ms / per.window_ms();
                if rate.window(per).is_some() && count.window == taken_in && count.calls > 0 {
                    count.calls -= 1;
                }
            }
        });
    }

    /// Calls refused so far (`toolgate_rate_limited_total`).
    pub fn rejections(&self) -> u64 {
        self.rejections.load(Ordering::Relaxed)
    }

    /// Entries currently held (for tests and metrics).
    pub fn buckets(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).map.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(per_second: f64, burst: u32) -> Rate {
        Rate::bucket(per_second, burst)
    }

    fn now(ms: u64) -> Now {
        Now {
            ns: ms * 1_000_000,
            unix_ms: ms,
        }
    }

    fn limiter(config: LimitConfig) -> (Limiter, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::default());
        (Limiter::new(config, clock.clone()), clock)
    }

    fn per_tool(r: Rate) -> LimitConfig {
        LimitConfig {
            per_principal_tool: Some(r),
            ..LimitConfig::default()
        }
    }

    #[test]
    fn a_burst_then_the_sustained_rate() {
        let (l, clock) = limiter(per_tool(rate(2.0, 5)));
        let remaining: Vec<u32> = (0..5)
            .map(|_| l.check("a", "t", true, None).unwrap().unwrap().remaining)
            .collect();
        assert_eq!(remaining, [4, 3, 2, 1, 0]);
        let refused = l.check("a", "t", true, None).unwrap_err();
        assert_eq!(refused.retry_after_secs, 1);
        assert_eq!(refused.quota.scope, Scope::PrincipalTool);
        // 2 per second: half a second brings one token, and no more.
        clock.advance_ms(500);
        assert!(l.check("a", "t", true, None).is_ok());
        assert!(l.check("a", "t", true, None).is_err());
        // Ten seconds of sustained calls at the rate all pass; one more in the same
        // instant does not.
        for _ in 0..20 {
            clock.advance_ms(500);
            assert!(l.check("a", "t", true, None).is_ok());
        }
        assert!(l.check("a", "t", true, None).is_err());
        // Other principals and tools have their own buckets.
        assert!(l.check("b", "t", true, None).is_ok());
        assert!(l.check("a", "u", true, None).is_ok());
    }

    #[test]
    fn refill_stops_at_the_burst_and_clock_jumps_do_no_harm() {
        let (l, clock) = limiter(per_tool(rate(1.0, 3)));
        clock.set_ms(10_000);
        for _ in 0..3 {
            assert!(l.check("a", "t", true, None).is_ok());
        }
        // A jump far ahead refills to the burst, not beyond.
        clock.set_ms(10_000 + 86_400_000);
        let q = l.check("a", "t", true, None).unwrap().unwrap();
        assert_eq!((q.remaining, q.limit), (2, 3));
        assert!(l.check("a", "t", true, None).is_ok());
        assert!(l.check("a", "t", true, None).is_ok());
        // A jump back adds nothing, and moving forward again only counts new time.
        clock.set_ms(5_000);
        assert!(l.check("a", "t", true, None).is_err());
        clock.set_ms(10_000 + 86_400_000 + 999);
        assert!(l.check("a", "t", true, None).is_err());
        clock.set_ms(10_000 + 86_400_000 + 1_000);
        assert!(l.check("a", "t", true, None).is_ok());
    }

    #[test]
    fn a_refusal_further_up_gives_the_tokens_back() {
        let (l, _) = limiter(LimitConfig {
            per_principal_tool: Some(rate(1.0, 5)),
            per_principal: Some(rate(1.0, 2)),
            global: None,
        });
        assert!(l.check("a", "t", true, None).is_ok());
        assert!(l.check("a", "t", true, None).is_ok());
        let refused = l.check("a", "t", true, None).unwrap_err();
        assert_eq!(refused.quota.scope, Scope::Principal);
        // The tool bucket got its token back: 3 of 5 left (two calls went through).
        let slot = Slot::new(Scope::PrincipalTool, "a", "t", rate(1.0, 5));
        let q = l.with_bucket(&slot, now(0), |b| b.tokens);
        assert!((q - 3.0).abs() < 1e-9, "{q}");
    }

    #[test]
    fn racing_callers_get_exactly_the_burst() {
        let (l, _) = limiter(LimitConfig {
            global: Some(rate(0.001, 100)),
            ..LimitConfig::default()
        });
        let l = Arc::new(l);
        let admitted = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..8 {
                let (l, admitted) = (l.clone(), &admitted);
                s.spawn(move || {
                    for i in 0..100 {
                        if l.check(&format!("p{t}-{i}"), "t", true, None).is_ok() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.load(Ordering::Relaxed), 100);
    }

    #[test]
    fn unknown_tools_make_no_buckets_and_full_buckets_are_dropped() {
        let (l, clock) = limiter(per_tool(rate(100.0, 1)));
        for i in 0..5000 {
            let _ = l.check("a", &format!("nope-{i}"), false, None);
        }
        assert_eq!(l.buckets(), 0);
        for i in 0..20_000 {
            let _ = l.check(&format!("p{i}"), "t", true, None);
        }
        assert_eq!(l.buckets(), 20_000);
        // A second later every one of those buckets is full again, which is the same as
        // absent: new keys sweep them away instead of adding to them.
        clock.advance_ms(1_000);
        for i in 0..20_000 {
            let _ = l.check(&format!("q{i}"), "t", true, None);
        }
        assert!(l.buckets() < 25_000, "{}", l.buckets());
    }

    #[test]
    fn a_refund_returns_what_a_check_took() {
        let (l, _) = limiter(LimitConfig {
            per_principal_tool: Some(rate(1.0, 2)),
            per_principal: Some(windows(Some(1), None)),
            global: None,
        });
        let slots = l.slots("a", "t", true, None);
        assert_eq!(slots.len(), 2);
        assert!(l.check("a", "t", true, None).is_ok());
        assert!(l.check("a", "t", true, None).is_err());
        // A shared limit refused the call that passed: its units come back.
        l.refund(&slots, true);
        assert!(l.check("a", "t", true, None).is_ok());
        assert_eq!(l.rejections(), 2);
        // Redis could not be asked: the units come back, and no refusal is counted.
        l.refund(&slots, false);
        assert!(l.check("a", "t", true, None).is_ok());
        assert_eq!(l.rejections(), 2);
    }

    #[test]
    fn rates_are_checked() {
        assert!(rate(0.0, 1).check().is_err());
        assert!(rate(f64::NAN, 1).check().is_err());
        assert!(rate(1.0, 0).check().is_err());
        assert!(rate(0.5, 1).check().is_ok());
        let only = |r: Rate| r.check();
        assert!(only(Rate::default()).unwrap_err().contains("per_day"));
        assert!(
            only(Rate {
                per_second: Some(1.0),
                ..Rate::default()
            })
            .unwrap_err()
            .contains("both")
        );
        assert!(
            only(Rate {
                per_hour: Some(0),
                ..Rate::default()
            })
            .unwrap_err()
            .contains("per_hour")
        );
        assert!(
            only(Rate {
                per_day: Some(5),
                ..rate(1.0, 2)
            })
            .is_ok()
        );
    }

    const MINUTE: u64 = 60_000;
    const DAY: u64 = 86_400_000;

    fn windows(per_minute: Option<u32>, per_day: Option<u32>) -> Rate {
        Rate {
            per_minute,
            per_day,
            ..Rate::default()
        }
    }

    #[test]
    fn fixed_windows_reset_on_the_minute_and_at_midnight_utc() {
        let (l, clock) = limiter(per_tool(windows(Some(2), Some(3))));
        // 20 days and 59 min 45 s after the epoch: 15 s to the next minute.
        let start = 20 * DAY + 59 * MINUTE + 45_000;
        clock.set_ms(start);
        let q = l.check("a", "t", true, None).unwrap().unwrap();
        assert_eq!(
            (q.per, q.limit, q.remaining, q.reset_secs),
            (Per::Minute, 2, 1, 15)
        );
        assert!(l.check("a", "t", true, None).is_ok());
        let refused = l.check("a", "t", true, None).unwrap_err();
        assert_eq!(refused.quota.per, Per::Minute);
        assert_eq!(refused.retry_after_secs, 15);
        // The next minute: the day allows one more.
        clock.set_ms(start + 15_000);
        let q = l.check("a", "t", true, None).unwrap().unwrap();
        assert_eq!((q.per, q.remaining), (Per::Day, 0));
        let refused = l.check("a", "t", true, None).unwrap_err();
        assert_eq!(refused.quota.per, Per::Day);
        assert_eq!(refused.retry_after_secs, (DAY - 60 * MINUTE) / 1000);
        // A clock that steps back into the minute before does not reopen it.
        clock.set_ms(start);
        assert!(l.check("a", "t", true, None).is_err());
        // At midnight UTC both windows start afresh.
        clock.set_ms(21 * DAY);
        assert!(l.check("a", "t", true, None).is_ok());
        assert!(l.check("a", "t", true, None).is_ok());
        assert!(l.check("a", "t", true, None).is_err());
    }

    #[test]
    fn a_clock_set_far_ahead_then_corrected_does_not_lock_callers_out() {
        let (l, clock) = limiter(per_tool(windows(Some(1), Some(1))));
        clock.set_ms(3 * DAY);
        assert!(l.check("a", "t", true, None).is_ok());
        // Set a year ahead by mistake: a new day, one call.
        clock.set_ms(368 * DAY);
        assert!(l.check("a", "t", true, None).is_ok());
        assert!(l.check("a", "t", true, None).is_err());
        // Corrected to the day after the first call: counted afresh, not against next year.
        clock.set_ms(4 * DAY);
        assert!(l.check("a", "t", true, None).is_ok());
        assert!(l.check("a", "t", true, None).is_err());
    }

    #[test]
    fn a_give_back_never_lowers_a_later_window() {
        let (l, _) = limiter(per_tool(windows(Some(2), None)));
        let slot = Slot::new(Scope::PrincipalTool, "a", "t", windows(Some(2), None));
        // One call in minute 5 (at 5:59.999), then one in minute 6 moves the count on.
        assert!(l.take(&slot, now(6 * MINUTE - 1)).is_ok());
        assert!(l.take(&slot, now(6 * MINUTE)).is_ok());
        // The first call is refused further up: its give-back must not touch minute 6.
        l.give_back(&slot, now(6 * MINUTE - 1));
        assert!(l.take(&slot, now(6 * MINUTE)).is_ok());
        assert!(l.take(&slot, now(6 * MINUTE)).is_err());
    }

    #[test]
    fn a_window_that_refuses_takes_nothing_from_the_bucket() {
        let (l, clock) = limiter(per_tool(Rate {
            per_minute: Some(1),
            ..rate(1.0, 5)
        }));
        clock.set_ms(MINUTE);
        let q = l.check("a", "t", true, None).unwrap().unwrap();
        assert_eq!((q.per, q.remaining), (Per::Minute, 0));
        for _ in 0..10 {
            assert_eq!(
                l.check("a", "t", true, None).unwrap_err().quota.per,
                Per::Minute
            );
        }
        clock.set_ms(2 * MINUTE);
        let slot = Slot::new(Scope::PrincipalTool, "a", "t", rate(1.0, 5));
        assert!(l.check("a", "t", true, None).is_ok());
        let tokens = l.with_bucket(&slot, now(2 * MINUTE), |b| b.tokens);
        assert!((tokens - 4.0).abs() < 1e-9, "{tokens}");
    }

    #[test]
    fn racing_callers_get_exactly_the_window() {
        let (l, clock) = limiter(LimitConfig {
            per_principal: Some(windows(None, Some(250))),
            ..LimitConfig::default()
        });
        clock.set_ms(DAY + 1);
        let l = Arc::new(l);
        let admitted = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                let (l, admitted) = (l.clone(), &admitted);
                s.spawn(move || {
                    for _ in 0..100 {
                        if l.check("a", "t", true, None).is_ok() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.load(Ordering::Relaxed), 250);
    }

    #[test]
    fn entries_with_calls_in_the_current_window_are_kept() {
        let (l, clock) = limiter(per_tool(windows(None, Some(1))));
        clock.set_ms(DAY);
        for i in 0..20_000 {
            assert!(l.check(&format!("p{i}"), "t", true, None).is_ok());
        }
        // Still the same day (and over the sweep threshold): sweeping must not forget who used
        // their call.
        for i in 0..20_000 {
            assert!(l.check(&format!("q{i}"), "t", true, None).is_ok());
        }
        assert_eq!(l.buckets(), 40_000);
        assert!(l.check("p0", "t", true, None).is_err());
        // The next day they are unused and get swept as new keys arrive.
        clock.set_ms(2 * DAY);
        for i in 0..40_000 {
            assert!(l.check(&format!("r{i}"), "t", true, None).is_ok());
        }
        assert!(l.buckets() < 60_000, "{}", l.buckets());
    }
}
