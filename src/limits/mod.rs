//! Rate limits: token buckets per (principal, tool), per principal and global, checked before
//! Cedar. A bucket holds up to `burst` tokens and refills at `per_second`; a call takes one
//! token from each bucket that applies, or none (tokens already taken are returned when a
//! later bucket refuses), so concurrent callers never get more than a bucket holds.
//!
//! Time comes from a [`Clock`]: monotonic in the server, a [`ManualClock`] in tests. Buckets
//! live in sharded maps; a full bucket is the same as no bucket, so full ones are dropped when
//! a shard grows, which keeps memory bounded by the keys that are actually busy.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Shards of the bucket maps (a power of two).
const SHARDS: usize = 16;
/// Entries per shard above which full buckets are dropped.
const SWEEP_ABOVE: usize = 1024;
const NS: f64 = 1e9;

/// A rate: `burst` calls at once, refilled at `per_second`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    /// Tokens added per second (may be fractional: 0.5 is one call every two seconds).
    pub per_second: f64,
    /// Most tokens held: the largest burst.
    pub burst: u32,
}

impl Rate {
    /// Checks the numbers; the message says what to fix.
    pub fn check(&self) -> Result<(), String> {
        if !(self.per_second.is_finite() && self.per_second > 0.0) {
            return Err("`per_second` must be a number greater than 0".to_owned());
        }
        if self.burst == 0 {
            return Err("`burst` must be at least 1".to_owned());
        }
        Ok(())
    }
}

/// Where time comes from, in nanoseconds since an arbitrary start.
pub trait Clock: Send + Sync {
    /// Now.
    fn now_ns(&self) -> u64;
}

/// The server's clock: monotonic, immune to wall-clock changes.
#[derive(Debug)]
pub struct MonotonicClock(Instant);

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock(Instant::now())
    }
}

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A clock that moves only when told (tests).
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// Moves the clock forward by `ms`.
    pub fn advance_ms(&self, ms: u64) {
        self.0
            .fetch_add(ms.saturating_mul(1_000_000), Ordering::SeqCst);
    }
    /// Sets the clock (also backwards, to test jumps).
    pub fn set_ms(&self, ms: u64) {
        self.0.store(ms.saturating_mul(1_000_000), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The configured limits. A missing rate means no limit at that level.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LimitConfig {
    /// All calls together.
    pub global: Option<Rate>,
    /// All calls of one principal.
    pub per_principal: Option<Rate>,
    /// Calls of one principal to one tool, unless the tool's manifest sets its own rate.
    pub per_principal_tool: Option<Rate>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    last_ns: u64,
    /// The rate it was last used with (a reload may change a tool's rate).
    rate: Rate,
}

impl Bucket {
    fn full(rate: &Rate, now: u64) -> Bucket {
        Bucket {
            tokens: f64::from(rate.burst),
            last_ns: now,
            rate: *rate,
        }
    }

    /// Adds what accrued since the last look at `rate`. A clock that went backwards adds
    /// nothing.
    fn refill(&mut self, rate: &Rate, now: u64) {
        let elapsed = now.saturating_sub(self.last_ns) as f64 / NS;
        self.tokens = (self.tokens + elapsed * rate.per_second).min(f64::from(rate.burst));
        self.last_ns = self.last_ns.max(now);
        self.rate = *rate;
    }

    /// Whether it would be full at `now`, at its own rate.
    fn full_at(&self, now: u64) -> bool {
        let mut probe = *self;
        probe.refill(&self.rate, now);
        probe.tokens >= f64::from(self.rate.burst)
    }

    fn quota(&self, rate: &Rate, scope: Scope) -> Quota {
        let missing = f64::from(rate.burst) - self.tokens;
        Quota {
            scope,
            limit: rate.burst,
            remaining: self.tokens.max(0.0).floor() as u32,
            reset_secs: (missing / rate.per_second).ceil().max(0.0) as u64,
        }
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

/// Where a caller stands with the tightest bucket that applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// The bucket.
    pub scope: Scope,
    /// Its size (`X-RateLimit-Limit`).
    pub limit: u32,
    /// Whole tokens left (`X-RateLimit-Remaining`).
    pub remaining: u32,
    /// Seconds until it is full again (`X-RateLimit-Reset`).
    pub reset_secs: u64,
}

/// A refused call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    /// The bucket that refused, as a quota.
    pub quota: Quota,
    /// Seconds until one token is there (`Retry-After`, at least 1).
    pub retry_after_secs: u64,
}

/// One bucket a call draws from: its scope, map key and rate.
struct Slot {
    scope: Scope,
    /// Tagged by scope, so no principal name can collide with a (principal, tool) key. Unused
    /// for the global bucket.
    key: String,
    rate: Rate,
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

/// The limiter.
pub struct Limiter {
    config: LimitConfig,
    clock: Arc<dyn Clock>,
    global: Mutex<Option<Bucket>>,
    shards: Vec<Mutex<HashMap<String, Bucket>>>,
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
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            rejections: AtomicU64::new(0),
        }
    }

    /// The configured limits.
    pub fn config(&self) -> &LimitConfig {
        &self.config
    }

    /// Takes one token for a call by `principal` to `tool`. `tool_rate` is the tool's own rate
    /// (its manifest); `None` for a registered tool without one uses the configured default,
    /// and `registered = false` skips the per-tool bucket (unknown names must not create
    /// buckets). `Ok(None)`: no limit applies.
    pub fn check(
        &self,
        principal: &str,
        tool: &str,
        registered: bool,
        tool_rate: Option<Rate>,
    ) -> Result<Option<Quota>, Limited> {
        let per_tool = if registered {
            tool_rate.or(self.config.per_principal_tool)
        } else {
            None
        };
        if per_tool.is_none() && self.config.per_principal.is_none() && self.config.global.is_none()
        {
            return Ok(None);
        }
        let now = self.clock.now_ns();
        let mut taken: Vec<Slot> = Vec::with_capacity(3);
        let mut tightest: Option<Quota> = None;
        let steps = [
            (Scope::PrincipalTool, per_tool),
            (Scope::Principal, self.config.per_principal),
            (Scope::Global, self.config.global),
        ];
        for (scope, rate) in steps {
            let Some(rate) = rate else { continue };
            let slot = Slot::new(scope, principal, tool, rate);
            match self.take(&slot, now) {
                Ok(q) => {
                    taken.push(slot);
                    if tightest.is_none_or(|t| q.remaining < t.remaining) {
                        tightest = Some(q);
                    }
                }
                Err(limited) => {
                    self.rejections.fetch_add(1, Ordering::Relaxed);
                    for slot in &taken {
                        self.give_back(slot, now);
                    }
                    return Err(limited);
                }
            }
        }
        Ok(tightest)
    }

    /// Runs `f` on the bucket for `slot`, created full when absent.
    fn with_bucket<T>(&self, slot: &Slot, now: u64, f: impl FnOnce(&mut Bucket) -> T) -> T {
        let rate = &slot.rate;
        if slot.scope == Scope::Global {
            let mut g = self.global.lock().unwrap_or_else(PoisonError::into_inner);
            let b = g.get_or_insert_with(|| Bucket::full(rate, now));
            b.refill(rate, now);
            return f(b);
        }
        let key = &slot.key;
        let shard = (self.hasher.hash_one(key) as usize) & (SHARDS - 1);
        // Unreachable misses (the index is masked) fail closed with an empty bucket.
        let empty = || Bucket {
            tokens: 0.0,
            last_ns: now,
            rate: *rate,
        };
        let Some(shard) = self.shards.get(shard) else {
            return f(&mut empty());
        };
        let mut map = shard.lock().unwrap_or_else(PoisonError::into_inner);
        // The busy path: one lookup, no allocation.
        if let Some(b) = map.get_mut(key) {
            b.refill(rate, now);
            return f(b);
        }
        if map.len() > SWEEP_ABOVE {
            // Full buckets carry no state: dropping them changes no answer.
            map.retain(|_, b| !b.full_at(now));
        }
        let b = map
            .entry(key.clone())
            .or_insert_with(|| Bucket::full(rate, now));
        f(b)
    }

    fn take(&self, slot: &Slot, now: u64) -> Result<Quota, Limited> {
        let (rate, scope) = (&slot.rate, slot.scope);
        self.with_bucket(slot, now, |b| {
            if b.tokens >= 1.0 {
                b.tokens -= 1.0;
                Ok(b.quota(rate, scope))
            } else {
                let wait = ((1.0 - b.tokens) / rate.per_second).ceil().max(1.0) as u64;
                Err(Limited {
                    quota: b.quota(rate, scope),
                    retry_after_secs: wait,
                })
            }
        })
    }

    fn give_back(&self, slot: &Slot, now: u64) {
        self.with_bucket(slot, now, |b| {
            b.tokens = (b.tokens + 1.0).min(f64::from(slot.rate.burst));
        });
    }

    /// Calls refused so far (`toolgate_rate_limited_total`).
    pub fn rejections(&self) -> u64 {
        self.rejections.load(Ordering::Relaxed)
    }

    /// Buckets currently held (for tests and metrics).
    pub fn buckets(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(per_second: f64, burst: u32) -> Rate {
        Rate { per_second, burst }
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
        let q = l.with_bucket(&slot, 0, |b| b.tokens);
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
    fn rates_are_checked() {
        assert!(rate(0.0, 1).check().is_err());
        assert!(rate(f64::NAN, 1).check().is_err());
        assert!(rate(1.0, 0).check().is_err());
        assert!(rate(0.5, 1).check().is_ok());
    }
}
