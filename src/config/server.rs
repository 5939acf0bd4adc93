//! `[server]` → [`ServerSettings`]: how many connections are served at once, how many of them
//! agents may not hold open (the reserve for humans and probes), how many long polls and event
//! streams one principal may hold open, how long a connection may take to send a request head,
//! a request body, or nothing at all between requests, and how long a shutdown waits for
//! requests in flight. How connections are served is the HTTP front end's business
//! (`api::serve`); this module only checks the numbers.

use std::time::Duration;

use serde::Deserialize;

/// Default `[server] max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default `[server] header_timeout_ms`.
pub const DEFAULT_HEADER_TIMEOUT_MS: u64 = 10_000;
/// Default `[server] body_timeout_ms`.
pub const DEFAULT_BODY_TIMEOUT_MS: u64 = 30_000;
/// Default `[server] idle_timeout_ms`.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 60_000;
/// Default `[server] shutdown_timeout_ms`.
pub const DEFAULT_SHUTDOWN_TIMEOUT_MS: u64 = 10_000;
/// Default `[server] reserved_connections`: an eighth of the default cap.
pub const DEFAULT_RESERVED_CONNECTIONS: usize = DEFAULT_MAX_CONNECTIONS / 8;
/// Default `[server] max_waits_per_principal`.
pub const DEFAULT_MAX_WAITS_PER_PRINCIPAL: usize = 16;
/// Default `[server] max_streams_per_principal`.
pub const DEFAULT_MAX_STREAMS_PER_PRINCIPAL: usize = 8;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    max_connections: Option<usize>,
    header_timeout_ms: Option<u64>,
    body_timeout_ms: Option<u64>,
    idle_timeout_ms: Option<u64>,
    shutdown_timeout_ms: Option<u64>,
    reserved_connections: Option<usize>,
    max_waits_per_principal: Option<usize>,
    max_streams_per_principal: Option<usize>,
}

/// Validated `[server]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerSettings {
    /// Connections served at once. Past it, a new connection takes the place of one that has
    /// no request in progress, or is answered 503.
    pub max_connections: usize,
    /// From accepting a connection, or from the first byte after an idle spell, to the end of
    /// the request head.
    pub header_timeout: Duration,
    /// From the end of the request head to the end of its body.
    pub body_timeout: Duration,
    /// Between the end of a response and the first byte of the next request.
    pub idle_timeout: Duration,
    /// From the shutdown signal to closing the connections still open.
    pub shutdown_timeout: Duration,
    /// Connections agents may not hold open with long polls, streams and held calls: kept for
    /// humans, health probes and short requests (below `max_connections`).
    pub reserved_connections: usize,
    /// Long polls (`?wait=`) one principal may hold at once.
    pub max_waits_per_principal: usize,
    /// Event streams (`GET /mcp`, `GET /v1/approvals/events`) one principal may hold open.
    pub max_streams_per_principal: usize,
}

impl ServerSettings {
    /// Requests all agents together may hold open: the connections less the reserve.
    pub fn agents_may_hold(&self) -> usize {
        self.max_connections
            .saturating_sub(self.reserved_connections)
            .max(1)
    }
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: Duration::from_millis(DEFAULT_HEADER_TIMEOUT_MS),
            body_timeout: Duration::from_millis(DEFAULT_BODY_TIMEOUT_MS),
            idle_timeout: Duration::from_millis(DEFAULT_IDLE_TIMEOUT_MS),
            shutdown_timeout: Duration::from_millis(DEFAULT_SHUTDOWN_TIMEOUT_MS),
            reserved_connections: DEFAULT_RESERVED_CONNECTIONS,
            max_waits_per_principal: DEFAULT_MAX_WAITS_PER_PRINCIPAL,
            max_streams_per_principal: DEFAULT_MAX_STREAMS_PER_PRINCIPAL,
        }
    }
}

/// Checks `[server]`; each problem names the key and its allowed range, all of them at once.
pub(super) fn settings(raw: &RawServer) -> Result<ServerSettings, Vec<(String, &'static str)>> {
    let d = ServerSettings::default();
    let mut problems = Vec::new();
    let max_connections = match raw.max_connections {
        Some(n) if !(1..=1_000_000).contains(&n) => {
            problems.push((
                format!("`server.max_connections` = {n} is out of range"),
                "use a value from 1 to 1000000",
            ));
            d.max_connections
        }
        Some(n) => n,
        None => d.max_connections,
    };
    // Unset, the reserve follows the cap: an eighth of it.
    let reserved_connections = match raw.reserved_connections {
        Some(n) if n >= max_connections => {
            problems.push((
                format!(
                    "`server.reserved_connections` = {n} is not below `server.max_connections` = {max_connections}"
                ),
                "reserve fewer connections than the cap (0 turns the reserve off), or raise `server.max_connections`",
            ));
            max_connections / 8
        }
        Some(n) => n,
        None => max_connections / 8,
    };
    let mut per_principal = |key: &str, value: Option<usize>, default: usize| match value {
        Some(n) if !(1..=100_000).contains(&n) => {
            problems.push((
                format!("`server.{key}` = {n} is out of range"),
                "use a value from 1 to 100000: past it, the principal's next one is answered 429",
            ));
            default
        }
        Some(n) => n,
        None => default,
    };
    let max_waits_per_principal = per_principal(
        "max_waits_per_principal",
        raw.max_waits_per_principal,
        d.max_waits_per_principal,
    );
    let max_streams_per_principal = per_principal(
        "max_streams_per_principal",
        raw.max_streams_per_principal,
        d.max_streams_per_principal,
    );
    let mut ms = |key: &str, value: Option<u64>, default: Duration, max: u64| match value {
        Some(v) if !(100..=max).contains(&v) => {
            problems.push((
                format!("`server.{key}` = {v} is out of range"),
                if max == 600_000 {
                    "use a value from 100 to 600000 (milliseconds)"
                } else {
                    "use a value from 100 to 3600000 (milliseconds)"
                },
            ));
            default
        }
        Some(v) => Duration::from_millis(v),
        None => default,
    };
    let settings = ServerSettings {
        max_connections,
        reserved_connections,
        max_waits_per_principal,
        max_streams_per_principal,
        header_timeout: ms(
            "header_timeout_ms",
            raw.header_timeout_ms,
            d.header_timeout,
            600_000,
        ),
        body_timeout: ms(
            "body_timeout_ms",
            raw.body_timeout_ms,
            d.body_timeout,
            600_000,
        ),
        idle_timeout: ms(
            "idle_timeout_ms",
            raw.idle_timeout_ms,
            d.idle_timeout,
            3_600_000,
        ),
        shutdown_timeout: ms(
            "shutdown_timeout_ms",
            raw.shutdown_timeout_ms,
            d.shutdown_timeout,
            600_000,
        ),
    };
    if problems.is_empty() {
        Ok(settings)
    } else {
        Err(problems)
    }
}
