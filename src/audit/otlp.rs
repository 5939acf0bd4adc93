//! Audit shipping over OTLP logs: every committed record, in order, sent to an OpenTelemetry
//! collector's OTLP/HTTP logs endpoint (`[audit] ship_otlp_url`, JSON encoding), one log
//! record per audit record. The body is the record as the JSON Lines sink writes it (`seq`,
//! `prev`, `hash`, `entry`), and the attributes repeat `seq`, `hash` and `prev`, so a
//! receiver can check the chain without parsing the body.
//!
//! Like the file sink, its own thread reads only what is durable, so it never delays a
//! decision. Delivery is at least once: the last record the collector accepted is kept in a
//! position file in the data directory (written and `fdatasync`ed after each accepted batch),
//! and after a crash between an accepted batch and that write, the batch is sent again (same
//! `seq`: a receiver drops what it has). A collector that refuses or cannot be reached is
//! retried with back-off, from the same record: nothing is skipped.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};

use super::ship::{Batch, Cursor};
use super::writer::{Audit, ShipStats};
use crate::canon::origin;

/// How often the head is looked at when nothing is new.
const POLL: Duration = Duration::from_millis(200);
/// First and longest wait after a failed export.
const BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// `[audit] ship_otlp_url` and its timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpSettings {
    /// The collector's OTLP/HTTP logs endpoint (`http://127.0.0.1:4318/v1/logs`).
    pub url: String,
    /// Longest wait for one export.
    pub timeout: Duration,
}

/// The file that holds the last record the collector accepted.
pub fn position_file(data_dir: &Path) -> PathBuf {
    data_dir.join("audit-otlp.position")
}

fn read_position(path: &Path) -> std::io::Result<u64> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.trim().parse().map_err(|_| {
            std::io::Error::other(format!(
                "{}: not a record number; remove it to ship every record again",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e),
    }
}

/// Replaces the position with `seq`: a new file, flushed, renamed over the old one.
fn write_position(path: &Path, seq: u64) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = std::fs::File::create(&tmp)?;
    writeln!(file, "{seq}")?;
    file.sync_data()?;
    std::fs::rename(&tmp, path)?;
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => std::fs::File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

/// Starts the OTLP shipper's thread over `audit`, resuming after the record in `position`.
pub fn start(
    audit: Arc<Audit>,
    settings: OtlpSettings,
    position: PathBuf,
) -> std::io::Result<Arc<ShipStats>> {
    let shipped = read_position(&position)?;
    let stats = Arc::new(ShipStats::default());
    stats.shipped_seq.store(shipped, Ordering::Relaxed);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(settings.timeout))
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let resource = resource();
    tracing::info!(to = %origin(&settings.url), from = shipped + 1, "audit shipping over OTLP on");
    let thread_stats = stats.clone();
    std::thread::Builder::new()
        .name("toolgate-audit-otlp".to_owned())
        .spawn(move || {
            let mut cursor = Cursor::after(shipped);
            let mut wait = BACKOFF;
            loop {
                let sent = cursor.read(&audit, &thread_stats).and_then(|batch| match batch {
                    None => Ok(false),
                    Some(batch) => {
                        export(&agent, &settings, &resource, &batch)?;
                        if let Some(last) = batch.records.last() {
                            write_position(&position, last.seq)?;
                        }
                        Ok(cursor.advance(&batch, &thread_stats))
                    }
                });
                match sent {
                    Ok(more) => {
                        thread_stats.failing.store(false, Ordering::Relaxed);
                        wait = BACKOFF;
                        if !more {
                            std::thread::sleep(POLL);
                        }
                    }
                    Err(e) => {
                        thread_stats.failures.fetch_add(1, Ordering::Relaxed);
                        thread_stats.failing.store(true, Ordering::Relaxed);
                        tracing::error!(error = %e, to = %origin(&settings.url), "audit shipping over OTLP failed; retrying");
                        std::thread::sleep(wait);
                        wait = (wait * 2).min(MAX_BACKOFF);
                    }
                }
            }
        })?;
    Ok(stats)
}

/// The resource every batch names: this service, and this instance (the host or pod name).
fn resource() -> Value {
    let instance = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .unwrap_or_default();
    json!({"attributes": [
        string_attr("service.name", "toolgate"),
        string_attr("service.version", env!("CARGO_PKG_VERSION")),
        string_attr("service.instance.id", &instance),
    ]})
}

fn string_attr(key: &str, value: &str) -> Value {
    json!({"key": key, "value": {"stringValue": value}})
}

/// One export request (OTLP/JSON `ExportLogsServiceRequest`) for `batch`; an error unless
/// the collector accepted it (2xx).
fn export(
    agent: &ureq::Agent,
    settings: &OtlpSettings,
    resource: &Value,
    batch: &Batch,
) -> std::io::Result<()> {
    if batch.records.is_empty() {
        return Ok(());
    }
    let observed = (crate::clock::now_ms() as u128 * 1_000_000).to_string();
    let mut logs = Vec::with_capacity(batch.records.len());
    for record in &batch.records {
        let line = serde_json::to_string(record)?;
        let e = &record.entry;
        let mut attributes = vec![
            json!({"key": "toolgate.audit.seq", "value": {"intValue": record.seq.to_string()}}),
            string_attr("toolgate.audit.hash", &record.hash),
            string_attr("toolgate.audit.prev", &record.prev),
            string_attr("toolgate.audit.decision", &e.decision),
        ];
        for (key, value) in [
            ("toolgate.audit.stage", &e.stage),
            ("toolgate.audit.tool", &e.tool),
            ("toolgate.audit.principal", &e.principal),
            ("toolgate.audit.on_behalf_of", &e.on_behalf_of),
        ] {
            if let Some(v) = value {
                attributes.push(string_attr(key, v));
            }
        }
        logs.push(json!({
            "timeUnixNano": (u128::from(e.at_ms) * 1_000_000).to_string(),
            "observedTimeUnixNano": observed,
            "severityNumber": 9,
            "severityText": "INFO",
            "body": {"stringValue": line},
            "attributes": attributes,
        }));
    }
    let request = json!({"resourceLogs": [{
        "resource": resource,
        "scopeLogs": [{
            "scope": {"name": "toolgate.audit", "version": env!("CARGO_PKG_VERSION")},
            "logRecords": logs,
        }],
    }]});
    let body = serde_json::to_vec(&request)?;
    let resp = agent
        .post(&settings.url)
        .header("Content-Type", "application/json")
        .header(
            "User-Agent",
            concat!("toolgate/", env!("CARGO_PKG_VERSION")),
        )
        .send(&body[..])
        .map_err(|e| {
            std::io::Error::other(e.to_string().replace(&settings.url, origin(&settings.url)))
        })?;
    if resp.status().is_success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "the collector answered {} for records {} to {}",
            resp.status(),
            batch.records.first().map_or(0, |r| r.seq),
            batch.records.last().map_or(0, |r| r.seq),
        )))
    }
}

impl Audit {
    /// Starts shipping committed records over OTLP logs (`[audit] ship_otlp_url`), resuming
    /// after the record in `position`.
    pub fn ship_otlp(
        self: &Arc<Self>,
        settings: OtlpSettings,
        position: std::path::PathBuf,
    ) -> std::io::Result<()> {
        let stats = start(self.clone(), settings, position)?;
        let _ = self.otlp.set(stats);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_drop_paths_and_positions_round_trip() {
        assert_eq!(origin("http://c:4318/v1/logs?k=s"), "http://c:4318");
        assert_eq!(origin("http://c"), "http://c");
        let dir = tempfile::tempdir().unwrap();
        let p = position_file(dir.path());
        assert_eq!(read_position(&p).unwrap(), 0);
        write_position(&p, 42).unwrap();
        assert_eq!(read_position(&p).unwrap(), 42);
        std::fs::write(&p, "x").unwrap();
        assert!(
            read_position(&p)
                .unwrap_err()
                .to_string()
                .contains("remove it")
        );
    }
}
