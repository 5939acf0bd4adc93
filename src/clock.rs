//! Wall-clock time as milliseconds since the Unix epoch: the one clock records, approvals,
//! grants and locks stamp themselves with.

/// `t` in milliseconds since the Unix epoch (0 before it), as records store times.
pub fn unix_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    unix_ms(std::time::SystemTime::now())
}
