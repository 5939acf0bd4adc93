//! Where the limiter (and the usage counters) get time: a monotonic clock for rates and
//! windows that slide, wall time for fixed windows that reset on the minute, hour and UTC day.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Where time comes from, in nanoseconds since an arbitrary start.
pub trait Clock: Send + Sync {
    /// Now.
    fn now_ns(&self) -> u64;
    /// Wall time, unix ms (fixed windows align to it). Defaults to [`Clock::now_ns`] read as
    /// unix time, which is what a test clock wants.
    fn unix_ms(&self) -> u64 {
        self.now_ns() / 1_000_000
    }
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

    fn unix_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
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
