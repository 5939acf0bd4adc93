//! A sliding window of counts: 60 buckets, each one unit of time (a second or a minute) wide,
//! stamped with the unit it counts so stale buckets read as zero without a sweep.

/// Buckets per window.
pub(crate) const BUCKETS: u64 = 60;

/// Counts per time unit over the last [`BUCKETS`] units.
#[derive(Debug, Clone)]
pub(crate) struct Window {
    counts: [u32; BUCKETS as usize],
    /// The unit each bucket counts; a bucket whose stamp is outside the window is zero.
    stamps: [u64; BUCKETS as usize],
}

impl Default for Window {
    fn default() -> Self {
        Window {
            counts: [0; BUCKETS as usize],
            stamps: [0; BUCKETS as usize],
        }
    }
}

impl Window {
    /// Counts one event in time unit `unit`.
    pub(crate) fn add(&mut self, unit: u64) {
        let i = (unit % BUCKETS) as usize;
        if let (Some(count), Some(stamp)) = (self.counts.get_mut(i), self.stamps.get_mut(i)) {
            if *stamp != unit {
                *stamp = unit;
                *count = 0;
            }
            *count = count.saturating_add(1);
        }
    }

    /// Events in units `from..=to` (at most [`BUCKETS`] units back from `to`).
    pub(crate) fn sum(&self, from: u64, to: u64) -> u32 {
        let from = from.max(to.saturating_sub(BUCKETS - 1));
        self.counts
            .iter()
            .zip(&self.stamps)
            .filter(|(_, s)| (from..=to).contains(*s))
            .fold(0u32, |acc, (c, _)| acc.saturating_add(*c))
    }

    /// Events in the last [`BUCKETS`] units up to and including `now`.
    pub(crate) fn recent(&self, now: u64) -> u32 {
        self.sum(now.saturating_sub(BUCKETS - 1), now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_slide_out_and_backward_jumps_do_not_count_the_future() {
        let mut w = Window::default();
        for unit in [100, 100, 101, 159] {
            w.add(unit);
        }
        assert_eq!(w.recent(159), 4);
        assert_eq!(w.recent(160), 2, "unit 100 left the window");
        assert_eq!(w.recent(161), 1);
        assert_eq!(w.sum(100, 101), 3);
        // A clock that jumped back sees nothing newer than itself.
        assert_eq!(w.recent(100), 2);
        // A bucket reused for a new unit starts from zero.
        w.add(219);
        assert_eq!(w.recent(219), 1);
    }
}
