//! Configuration: the TOML file as written (raw, unknown keys rejected) and the validated
//! [`Config`] the rest of the program takes. Relative paths are resolved against the config
//! file's directory, so a config works from any working directory.

mod anomaly;
mod auth;
mod exec;
mod fleet;
mod gates;
mod mcp;
mod outputs;
mod problems;
mod protected;
mod provenance;
mod server;
mod telemetry;

use outputs::{console_url, otlp_settings, ship_settings, webhook};

use anomaly::{RawAnomaly, detector_config, quarantine_kinds};
pub use auth::{AuthConfig, JwksUrl, JwtConfig, Resource};
use problems::Problems;
pub use problems::{ConfigError, KeyProblem};
pub use server::ServerSettings;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::anomaly::DetectorConfig;
use crate::approvals::{Bounds, Ttl};
use crate::audit::{Durability, Retention};
use crate::authz::AnomalyKinds;
use crate::limits::{LimitConfig, Rate};
use crate::redact::{Gate, GateRules, RedactConfig};

use std::time::Duration;

use crate::policy::Sources;

use crate::reload::WatchOptions;

/// Default listen address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8181";
/// Default request body limit.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024;

/// Settings a container or a command line sets over the config file's (`--listen`,
/// `TOOLGATE_LISTEN`, `--data-dir`, `TOOLGATE_DATA_DIR`).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `listen`, as written (validated like the file's).
    pub listen: Option<String>,
    /// `data_dir`, relative to the working directory.
    pub data_dir: Option<PathBuf>,
    /// `policies_dir`, relative to the working directory (joins the protected set like the
    /// file's).
    pub policies_dir: Option<PathBuf>,
    /// `schemas_dir`, relative to the working directory (likewise).
    pub schemas_dir: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    /// Where `listen` came from when the command line or environment set it.
    #[serde(skip)]
    listen_from: Option<&'static str>,
    /// Where a data directory was before the default moved beside the config file, when
    /// one is there and none is at the new place.
    #[serde(skip)]
    old_default_data: Option<PathBuf>,
    policies_dir: Option<PathBuf>,
    schemas_dir: Option<PathBuf>,
    max_body_bytes: Option<usize>,
    #[serde(default)]
    auth: auth::RawAuth,
    #[serde(default)]
    reload: RawReload,
    data_dir: Option<PathBuf>,
    #[serde(default)]
    audit: RawAudit,
    #[serde(default)]
    approvals: RawApprovals,
    #[serde(default)]
    rate_limits: RawRateLimits,
    #[serde(default)]
    kill_switch: bool,
    #[serde(default)]
    anomaly: RawAnomaly,
    #[serde(default)]
    redaction: gates::RawRedaction,
    #[serde(default)]
    gates: gates::RawGates,
    #[serde(default)]
    exec: exec::RawExec,
    #[serde(default)]
    server: server::RawServer,
    #[serde(default)]
    mcp: mcp::RawMcp,
    #[serde(default)]
    provenance: provenance::RawProvenance,
    #[serde(default)]
    fleet: fleet::RawFleet,
    #[serde(default)]
    telemetry: telemetry::RawTelemetry,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimits {
    global: Option<Rate>,
    per_principal: Option<Rate>,
    per_principal_tool: Option<Rate>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAudit {
    sync: Option<String>,
    hmac_key_file: Option<PathBuf>,
    retain_records: Option<u64>,
    retain_days: Option<u64>,
    cache_mb: Option<u64>,
    reserve_mb: Option<u64>,
    ship_file: Option<PathBuf>,
    ship_rotate_kb: Option<u64>,
    ship_keep: Option<usize>,
    ship_otlp_url: Option<String>,
    ship_otlp_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApprovals {
    ttl_secs: Option<u64>,
    #[serde(default)]
    ttl_secs_by_risk: std::collections::BTreeMap<String, u64>,
    webhook_url: Option<String>,
    webhook_secret_file: Option<PathBuf>,
    webhook_timeout_ms: Option<u64>,
    webhook_attempts: Option<u32>,
    webhook_format: Option<crate::approvals::Format>,
    console_url: Option<String>,
    max_pending_per_agent: Option<u64>,
    max_pending: Option<u64>,
    retain_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReload {
    widening: Option<crate::reload::Widening>,
    watch: Option<bool>,
    poll_ms: Option<u64>,
    debounce_ms: Option<u64>,
}

/// Validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where `serve` listens.
    pub listen: SocketAddr,
    /// Where policies and schemas are read from.
    pub sources: Sources,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// How callers authenticate.
    pub auth: AuthConfig,
    /// How policy changes are noticed.
    pub reload: WatchOptions,
    /// `[reload] widening`: hold widening policy changes for a human (default), or apply them.
    pub widening: crate::reload::Widening,
    /// Where the audit log and approvals are stored (default `./data`).
    pub data_dir: PathBuf,
    /// Whether each audit batch is flushed before decisions are answered.
    pub audit_durability: Durability,
    /// Key for HMAC chain links; without one, the sidecar generates a key at first start and
    /// keeps it in the data directory's keyring (`audit-keys.json`).
    pub audit_hmac_key_file: Option<PathBuf>,
    /// How long audit records are kept (everything, without one).
    pub audit_retention: Option<Retention>,
    /// `[audit] cache_mb`: the data directory's page cache, in bytes.
    pub store_cache_bytes: u64,
    /// `[audit] reserve_mb`: free space left on the data directory's disk, in bytes.
    pub store_reserve_bytes: u64,
    /// `[audit] ship_file`: committed records streamed to a JSON Lines file.
    pub audit_ship: Option<crate::audit::ShipSettings>,
    /// `[audit] ship_otlp_url`: committed records sent to an OTLP/HTTP logs endpoint.
    pub audit_otlp: Option<crate::audit::OtlpSettings>,
    /// How long approvals stay open.
    pub approval_ttl: Ttl,
    /// How many approvals may be pending at once, per agent and in total.
    pub approval_bounds: Bounds,
    /// `[approvals] retain_secs`: how long ended approvals stay stored before they are
    /// removed (the audit log keeps their history).
    pub approval_retain_secs: u64,
    /// Where new pending approvals are announced.
    pub approval_webhook: Option<WebhookSettings>,
    /// Rate limits (tools' manifests may set their own per-principal rate).
    pub rate_limits: LimitConfig,
    /// Kill switch forced on: every call denied, and the API cannot turn it off.
    pub kill_switch: bool,
    /// Anomaly detectors (`None`: off; usage counters still feed `context.usage`).
    pub anomaly: Option<DetectorConfig>,
    /// Where anomaly alerts are announced.
    pub anomaly_webhook: Option<WebhookSettings>,
    /// Anomaly kinds that quarantine the principal they are raised for.
    pub quarantine_on: AnomalyKinds,
    /// Which detectors run, and their thresholds.
    pub redaction: RedactConfig,
    /// Each gate's rules (checked against the detectors when they are built).
    pub gate_rules: Vec<(Gate, GateRules)>,
    /// `[exec]`: running CLI-backed tools.
    pub exec: crate::exec::ExecSettings,
    /// `[server]`: the connection cap and the connection timeouts.
    pub server: ServerSettings,
    /// `[mcp]`: the MCP gateway's upstreams.
    pub mcp: crate::upstream::McpSettings,
    /// `[provenance]`: the bounds of the per-conversation memory.
    pub provenance: crate::provenance::Settings,
    /// `[fleet]`: the Redis shared by a fleet of sidecars (`None`: state per sidecar).
    pub fleet: Option<crate::fleet::FleetSettings>,
    /// `[telemetry]`: where OpenTelemetry traces go (`None`: traces off).
    pub telemetry: Option<crate::telemetry::Settings>,
}

/// The approver webhook, as configured (the secret is read when serving starts).
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// `http://` or `https://` URL.
    pub url: String,
    /// File holding the HMAC key for `X-Toolgate-Signature`.
    pub secret_file: Option<PathBuf>,
    /// Bound on each attempt.
    pub timeout: std::time::Duration,
    /// Attempts per notification.
    pub attempts: u32,
    /// `webhook_format`: JSON events, or Slack-compatible messages.
    pub format: crate::approvals::Format,
    /// `console_url`: the console's address, linked from each notice.
    pub console_url: Option<String>,
}

impl Config {
    /// Reads and validates a config file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        Config::load(Some(path), &Overrides::default())
    }

    /// Reads a config file (or, with none, starts from the defaults), applies the command
    /// line's and the environment's `overrides`, then validates the result as one file.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        let (mut raw, base, shown) = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                let raw: RawConfig = toml::from_str(&text).map_err(|e| ConfigError::Parse {
                    path: path.to_owned(),
                    message: e.to_string().trim().replace('\n', " "),
                })?;
                let base = path.parent().unwrap_or_else(|| Path::new(".")).to_owned();
                (raw, base, path.to_owned())
            }
            None => (
                RawConfig::default(),
                PathBuf::from("."),
                PathBuf::from("<defaults>"),
            ),
        };
        if let Some(listen) = &overrides.listen {
            if let Some(file) = raw.listen.as_ref().filter(|f| *f != listen) {
                tracing::info!(
                    file,
                    listen,
                    "--listen or TOOLGATE_LISTEN overrides the config's `listen`"
                );
            }
            raw.listen = Some(listen.clone());
            raw.listen_from = Some("--listen or TOOLGATE_LISTEN");
        }
        // Named on the command line: relative to where the command runs, and protected from
        // tools like the file's own (they are built into the protected set below).
        if let Some(dir) = &overrides.policies_dir {
            raw.policies_dir = Some(std::path::absolute(dir).unwrap_or_else(|_| dir.clone()));
        }
        if let Some(dir) = &overrides.schemas_dir {
            raw.schemas_dir = Some(std::path::absolute(dir).unwrap_or_else(|_| dir.clone()));
        }
        if let Some(dir) = &overrides.data_dir {
            // A directory named on the command line or in the environment is relative to
            // where the command runs, not to the config file.
            let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
            if let Some(file) = &raw.data_dir {
                tracing::info!(
                    file = %base.join(file).display(),
                    data_dir = %dir.display(),
                    "--data-dir or TOOLGATE_DATA_DIR overrides the config's `data_dir`"
                );
            }
            raw.data_dir = Some(dir);
        } else if path.is_some() && raw.data_dir.is_none() {
            // The default used to be ./data: a log there must not be left behind silently
            // for an empty one beside the config (its kill switch, quarantines, approvals,
            // grants and audit keys would all be lost from view).
            let old = PathBuf::from("data");
            let new = base.join("data");
            let same = matches!(
                (std::fs::canonicalize(&old), std::fs::canonicalize(&new)),
                (Ok(a), Ok(b)) if a == b
            );
            if !same && old.join("conf").is_file() && !new.join("conf").exists() {
                raw.old_default_data = Some(std::path::absolute(&old).unwrap_or(old));
            }
        }
        Config::from_raw(raw, &base, &shown)
    }

    /// Only `[telemetry]` of a config file, checked as [`Config::load`] checks it: logging
    /// starts (with or without traces) before the rest of the file is loaded, so that the
    /// loader's own messages are logged. `None` without a file, or with traces off. The rest
    /// of the file is checked later by [`Config::load`].
    pub fn telemetry_only(
        path: Option<&Path>,
    ) -> Result<Option<crate::telemetry::Settings>, ConfigError> {
        #[derive(Deserialize)]
        struct Only {
            #[serde(default)]
            telemetry: telemetry::RawTelemetry,
        }
        let Some(path) = path else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let only: Only = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string().trim().replace('\n', " "),
        })?;
        telemetry::settings(&only.telemetry).map_err(|found| ConfigError::Invalid {
            path: path.to_owned(),
            problems: found
                .into_iter()
                .map(|(message, help)| KeyProblem {
                    message,
                    help: help.to_owned(),
                })
                .collect(),
        })
    }

    /// Defaults for running from a checkout: `./policies`, `./schemas`, no authentication.
    pub fn defaults() -> Config {
        Config::from_raw(
            RawConfig::default(),
            Path::new("."),
            Path::new("<defaults>"),
        )
        .unwrap_or_else(|_| Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8181)),
            sources: default_sources(Path::new(".")),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            auth: AuthConfig::default(),
            reload: WatchOptions::default(),
            widening: crate::reload::Widening::Hold,
            data_dir: PathBuf::from("data"),
            audit_durability: Durability::Group,
            audit_hmac_key_file: None,
            audit_retention: None,
            store_cache_bytes: crate::storage::DEFAULT_CACHE_BYTES,
            store_reserve_bytes: crate::storage::DEFAULT_RESERVE_BYTES,
            audit_ship: None,
            audit_otlp: None,
            approval_ttl: Ttl::default(),
            approval_bounds: Bounds::default(),
            approval_retain_secs: crate::approvals::RETAIN_SECS,
            approval_webhook: None,
            rate_limits: LimitConfig::default(),
            kill_switch: false,
            anomaly: Some(DetectorConfig::default()),
            anomaly_webhook: None,
            quarantine_on: AnomalyKinds::NONE,
            redaction: RedactConfig::default(),
            gate_rules: Gate::ALL
                .into_iter()
                .map(|g| (g, GateRules::default_for(g)))
                .collect(),
            exec: crate::exec::ExecSettings::default(),
            server: ServerSettings::default(),
            mcp: crate::upstream::McpSettings::default(),
            provenance: crate::provenance::Settings::default(),
            fleet: None,
            telemetry: None,
        })
    }

    fn from_raw(raw: RawConfig, base: &Path, path: &Path) -> Result<Config, ConfigError> {
        let mut problems = Problems::default();
        if let Some(old) = &raw.old_default_data {
            problems.add(
                format!(
                    "`data_dir` is not set, and its default is now `data` beside this file ({}), which holds no data yet, while {} does (the old default: the working directory's `data`)",
                    base.join("data").display(),
                    old.display()
                ),
                format!(
                    "set `data_dir = \"{}\"` (or pass --data-dir) to keep using it, or move it beside the config file",
                    old.display()
                ),
            );
        }
        let listen_text = raw.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
        let listen: SocketAddr = problems.take(
            listen_text.parse().map_err(|_| {
                (
                    format!(
                        "`listen` = `{listen_text}`{} is not an address",
                        raw.listen_from
                            .map(|from| format!(" (from {from})"))
                            .unwrap_or_default()
                    ),
                    "write it as `127.0.0.1:8181`",
                )
            }),
            || SocketAddr::from(([127, 0, 0, 1], 8181)),
        );
        let max_body_bytes = raw.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES);
        if !(1024..=16 * 1024 * 1024).contains(&max_body_bytes) {
            problems.add(
                format!("`max_body_bytes` = {max_body_bytes} is out of range"),
                "use a value from 1024 to 16777216",
            );
        }
        let auth = problems.take_all(
            auth::settings(&raw.auth, base, &listen),
            AuthConfig::default,
        );
        let defaults = WatchOptions::default();
        let debounce = match raw.reload.debounce_ms {
            Some(ms) if !(10..=10_000).contains(&ms) => {
                problems.add(
                    format!("`reload.debounce_ms` = {ms} is out of range"),
                    "use a value from 10 to 10000",
                );
                defaults.debounce
            }
            Some(ms) => Duration::from_millis(ms),
            None => defaults.debounce,
        };
        let poll = match raw.reload.poll_ms {
            Some(0) => None,
            Some(ms) if ms < 100 => {
                problems.add(
                    format!("`reload.poll_ms` = {ms} is too small"),
                    "use 0 to disable polling, or at least 100",
                );
                defaults.poll
            }
            Some(ms) => Some(Duration::from_millis(ms)),
            None => defaults.poll,
        };
        let reload = WatchOptions {
            events: raw.reload.watch.unwrap_or(defaults.events),
            debounce,
            poll,
        };
        let mut sources = default_sources(base);
        if let Some(p) = raw.policies_dir {
            sources.policies_dir = base.join(p);
        }
        if let Some(p) = raw.schemas_dir {
            sources.schemas_dir = base.join(p);
        }
        let audit_durability = match raw.audit.sync.as_deref() {
            None | Some("group") => Durability::Group,
            Some("buffered") => Durability::Buffered,
            Some("off") => Durability::Off,
            Some(other) => {
                problems.add(
                    format!("`audit.sync` = `{other}` is not a mode"),
                    "use `group` (flushed before answering), `buffered` or `off` (benchmarks only)",
                );
                Durability::Group
            }
        };
        let risks = ["low", "medium", "high", "critical"];
        if let Some(bad) = raw
            .approvals
            .ttl_secs_by_risk
            .keys()
            .find(|k| !risks.contains(&k.as_str()))
        {
            problems.add(
                format!("`approvals.ttl_secs_by_risk` names `{bad}`, which is not a risk tier"),
                "use low, medium, high or critical",
            );
        }
        let approval_bounds = problems.take(approval_bounds(&raw.approvals), Bounds::default);
        let approval_retain_secs = match raw.approvals.retain_secs {
            None => crate::approvals::RETAIN_SECS,
            Some(n) if (1..=MAX_APPROVAL_RETAIN_SECS).contains(&n) => n,
            Some(n) => {
                problems.add(
                    format!("`approvals.retain_secs` = {n} is out of range"),
                    format!(
                        "use 1 to {MAX_APPROVAL_RETAIN_SECS} (a year): ended approvals (denied, used, expired) are removed that long after they end (default {}, a day); the audit log keeps their history",
                        crate::approvals::RETAIN_SECS
                    ),
                );
                crate::approvals::RETAIN_SECS
            }
        };
        let approval_ttl = Ttl {
            default_secs: raw.approvals.ttl_secs.unwrap_or(300),
            by_risk: raw.approvals.ttl_secs_by_risk,
        };
        if approval_ttl.default_secs == 0 || approval_ttl.by_risk.values().any(|v| *v == 0) {
            problems.add(
                "approval lifetimes must be at least 1 second".to_owned(),
                "set `approvals.ttl_secs` (and `ttl_secs_by_risk`) to 1 or more",
            );
        }
        let audit_ship = problems.take(ship_settings(&raw.audit, base), || None);
        let audit_otlp = problems.take(otlp_settings(&raw.audit), || None);
        let store_reserve_bytes = match raw.audit.reserve_mb {
            None => crate::storage::DEFAULT_RESERVE_BYTES,
            Some(mb) if mb <= MAX_RESERVE_MB => mb * 1024 * 1024,
            Some(mb) => {
                problems.add(
                    format!("`audit.reserve_mb` = {mb} is out of range"),
                    format!(
                        "use 0 to {MAX_RESERVE_MB} (MiB left free on the data directory's disk; default {})",
                        crate::storage::DEFAULT_RESERVE_BYTES / (1024 * 1024)
                    ),
                );
                crate::storage::DEFAULT_RESERVE_BYTES
            }
        };
        let store_cache_bytes = match raw.audit.cache_mb {
            None => crate::storage::DEFAULT_CACHE_BYTES,
            Some(mb) if (MIN_CACHE_MB..=MAX_CACHE_MB).contains(&mb) => mb * 1024 * 1024,
            Some(mb) => {
                problems.add(
                    format!("`audit.cache_mb` = {mb} is out of range"),
                    format!(
                        "use {MIN_CACHE_MB} to {MAX_CACHE_MB} (MiB of page cache for the data directory; default {})",
                        crate::storage::DEFAULT_CACHE_BYTES / (1024 * 1024)
                    ),
                );
                crate::storage::DEFAULT_CACHE_BYTES
            }
        };
        let limits = &raw.rate_limits;
        for (name, rate) in [
            ("global", &limits.global),
            ("per_principal", &limits.per_principal),
            ("per_principal_tool", &limits.per_principal_tool),
        ] {
            if let Some(Err(why)) = rate.as_ref().map(Rate::check) {
                problems.add(
                    format!("`rate_limits.{name}`: {why}"),
                    "e.g. `per_principal = { per_second = 10, burst = 20 }` or `{ per_hour = 500 }`",
                );
            }
        }
        let rate_limits = LimitConfig {
            global: limits.global,
            per_principal: limits.per_principal,
            per_principal_tool: limits.per_principal_tool,
        };
        let approval_webhook = problems
            .take(
                webhook(
                    "approvals",
                    raw.approvals.webhook_url.as_deref(),
                    raw.approvals.webhook_secret_file.as_deref(),
                    raw.approvals.webhook_timeout_ms,
                    raw.approvals.webhook_attempts,
                    base,
                ),
                || None,
            )
            .map(|w| WebhookSettings {
                format: raw.approvals.webhook_format.unwrap_or_default(),
                ..w
            });
        let console_url = problems.take(console_url(raw.approvals.console_url.as_deref()), || None);
        let approval_webhook = approval_webhook.map(|w| WebhookSettings { console_url, ..w });
        let anomaly_webhook = problems.take(
            webhook(
                "anomaly",
                raw.anomaly.webhook_url.as_deref(),
                raw.anomaly.webhook_secret_file.as_deref(),
                raw.anomaly.webhook_timeout_ms,
                raw.anomaly.webhook_attempts,
                base,
            ),
            || None,
        );
        let quarantine_on = problems.take(quarantine_kinds(&raw.anomaly), Default::default);
        let provenance = problems.take_all(provenance::settings(&raw.provenance), Default::default);
        let fleet = problems.take_all(fleet::fleet(&raw.fleet, base), || None);
        let telemetry = problems.take_all(telemetry::settings(&raw.telemetry), || None);
        let known_secret_files: Vec<PathBuf> = raw
            .redaction
            .known_secrets_files
            .iter()
            .flatten()
            .map(|p| base.join(p))
            .collect();
        let redaction = problems.take(gates::redaction(&raw.redaction, base), Default::default);
        let gate_rules = problems.take(gates::gate_rules(raw.gates), || {
            Gate::ALL
                .into_iter()
                .map(|g| (g, GateRules::default_for(g)))
                .collect()
        });
        // Beside the config file, not wherever the sidecar happens to be started from.
        let data_dir = base.join(raw.data_dir.unwrap_or_else(|| PathBuf::from("data")));
        let mut exec = problems.take_all(
            exec::settings(raw.exec, base, &data_dir),
            crate::exec::ExecSettings::default,
        );
        sources.programs = exec.programs.clone();
        exec.protected
            .extend(protected::own_files(&protected::Named {
                sources: &sources,
                config: path,
                data_dir: &data_dir,
                auth: &auth,
                audit_hmac_key_file: raw.audit.hmac_key_file.as_ref().map(|p| base.join(p)),
                webhook_secrets: [&approval_webhook, &anomaly_webhook]
                    .into_iter()
                    .filter_map(|w| w.as_ref().and_then(|w| w.secret_file.clone()))
                    .collect(),
                known_secret_files: &known_secret_files,
                audit_ship: audit_ship.as_ref(),
                mcp_token_file: raw.mcp.token_file(base),
            }));
        let mcp = problems.take_all(
            mcp::settings(raw.mcp, base, exec.root.is_some()),
            crate::upstream::McpSettings::default,
        );
        sources.deny = std::sync::Arc::new(path_guard(&exec));
        let server = problems.take_all(server::settings(&raw.server), ServerSettings::default);
        let anomaly = problems.take(detector_config(raw.anomaly), Default::default);
        if raw.audit.retain_records == Some(0) || raw.audit.retain_days == Some(0) {
            problems.add(
                "audit retention of 0 would remove every record".to_owned(),
                "set `audit.retain_records` and `audit.retain_days` to 1 or more, or leave them out to keep everything",
            );
        }
        if !problems.0.is_empty() {
            return Err(ConfigError::Invalid {
                path: path.to_owned(),
                problems: problems.0,
            });
        }
        let audit_retention = (raw.audit.retain_records.is_some()
            || raw.audit.retain_days.is_some())
        .then(|| Retention {
            keep_records: raw.audit.retain_records,
            max_age_ms: raw.audit.retain_days.map(|d| d.saturating_mul(86_400_000)),
        });
        Ok(Config {
            audit_retention,
            store_cache_bytes,
            store_reserve_bytes,
            audit_ship,
            audit_otlp,
            approval_bounds,
            approval_retain_secs,
            data_dir,
            audit_durability,
            audit_hmac_key_file: raw.audit.hmac_key_file.map(|p| base.join(p)),
            approval_ttl,
            approval_webhook,
            rate_limits,
            kill_switch: raw.kill_switch,
            anomaly,
            anomaly_webhook,
            quarantine_on,
            redaction,
            gate_rules,
            exec,
            server,
            mcp,
            provenance,
            fleet,
            telemetry,
            listen,
            sources,
            max_body_bytes,
            auth,
            reload,
            widening: raw.reload.widening.unwrap_or_default(),
        })
    }
}

/// Smallest and largest `[audit] cache_mb`: below 4 MiB sled thrashes on every write; above
/// 64 GiB is a typo, not a sidecar's cache.
const MIN_CACHE_MB: u64 = 4;
const MAX_CACHE_MB: u64 = 65_536;
/// Largest `[approvals] retain_secs`: a year. Every ended approval stays in the store that
/// long, and longer is a typo; the audit log is the history.
const MAX_APPROVAL_RETAIN_SECS: u64 = 365 * 86_400;
/// Largest `[audit] reserve_mb`: 1 TiB.
const MAX_RESERVE_MB: u64 = 1_048_576;

/// `[approvals] max_pending_per_agent` and `max_pending`, each from 1 to [`Bounds::MAX`].
fn approval_bounds(raw: &RawApprovals) -> Result<Bounds, (String, String)> {
    let mut bounds = Bounds::default();
    for (key, value, slot) in [
        (
            "max_pending_per_agent",
            raw.max_pending_per_agent,
            &mut bounds.per_agent,
        ),
        ("max_pending", raw.max_pending, &mut bounds.total),
    ] {
        let Some(n) = value else { continue };
        match usize::try_from(n) {
            Ok(n) if (1..=Bounds::MAX).contains(&n) => *slot = n,
            _ => {
                return Err((
                    format!("`approvals.{key}` = {n} is out of range"),
                    format!(
                        "use 1 to {}: past the bound a call that needs approval is answered 429 instead of queueing another (defaults: {} per agent, {} in total)",
                        Bounds::MAX,
                        Bounds::PER_AGENT,
                        Bounds::TOTAL
                    ),
                ));
            }
        }
    }
    if raw.max_pending_per_agent.is_some()
        && raw.max_pending.is_some()
        && bounds.per_agent > bounds.total
    {
        return Err((
            format!(
                "`approvals.max_pending_per_agent` = {} is above `approvals.max_pending` = {}",
                bounds.per_agent, bounds.total
            ),
            "an agent can never have more pending than the total; lower `max_pending_per_agent`"
                .to_owned(),
        ));
    }
    Ok(bounds)
}

/// What decisions refuse as `context.paths.<arg>.denied`: the deny list, and the protected
/// set below the service root (as the jail computes it at start), so a policy denies what
/// execution would refuse.
fn path_guard(exec: &crate::exec::ExecSettings) -> crate::globs::PathGuard {
    let mut guard = crate::globs::PathGuard {
        deny: exec.deny.clone(),
        own: Vec::new(),
    };
    if let Some(root) = exec.root.as_ref().and_then(|r| r.canonicalize().ok()) {
        let mut protected = exec.protected.clone();
        protected.extend(exec.lock_dir.iter().cloned());
        guard.protect_below(&root, &crate::exec::sandbox::canonical_set(&protected));
    }
    guard
}

fn default_sources(base: &Path) -> Sources {
    Sources::new(base.join("policies"), base.join("schemas"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: "t.toml".into(),
            message: e.to_string(),
        })?;
        Config::from_raw(raw, Path::new("/etc/toolgate"), Path::new("t.toml"))
    }

    #[test]
    fn anomaly_settings_are_checked_and_sequences_parsed() {
        let c = parse(
            "[anomaly]\nviolations_per_minute = 2\n[[anomaly.sequences]]\nname = \"exfil\"\nfirst = [\"vault_*\"]\nthen = [\"http_*\"]\nwithin_secs = 60\n",
        )
        .unwrap();
        let d = c.anomaly.unwrap();
        assert_eq!(d.violations_per_minute, 2);
        assert_eq!(d.sequences[0].then, vec!["http_*".to_owned()]);
        assert!(
            parse("[anomaly]\nenabled = false\n")
                .unwrap()
                .anomaly
                .is_none()
        );
        for (bad, names) in [
            ("spike_factor = 0.5", "anomaly.spike_factor"),
            ("failures = 11", "anomaly.failures"),
            ("baseline_minutes = 60", "anomaly.baseline_minutes"),
            ("hold_secs = 0", "anomaly.hold_secs"),
            ("webhook_url = \"ftp://x\"", "anomaly.webhook_url"),
            (
                "[[anomaly.sequences]]\nname = \"x\"\nfirst = []\nthen = [\"a\"]\nwithin_secs = 5",
                "anomaly.sequences[0]",
            ),
        ] {
            let e = parse(&format!("[anomaly]\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(names), "{bad}: {e}");
        }
    }

    #[test]
    fn resolves_paths_against_the_config_directory() {
        let c = parse("policies_dir = \"p\"\n[auth]\ntokens_file = \"t.json\"\n").unwrap();
        assert_eq!(c.sources.policies_dir, Path::new("/etc/toolgate/p"));
        assert_eq!(
            c.auth.tokens_file.as_deref(),
            Some(Path::new("/etc/toolgate/t.json"))
        );
        assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
    }

    #[test]
    fn server_keys_are_read_and_checked() {
        let c = parse("[server]\nmax_connections = 10\nidle_timeout_ms = 250\n").unwrap();
        assert_eq!(c.server.max_connections, 10);
        assert_eq!(c.server.idle_timeout, Duration::from_millis(250));
        assert_eq!(c.server.header_timeout, Duration::from_secs(10));
        let e = parse("[server]\nbody_timeout_ms = 99\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`server.body_timeout_ms` = 99 is out of range"),
            "{e}"
        );
        assert!(parse("[server]\nmax_connections = 0\n").is_err());
        assert!(parse("[server]\nmax_conns = 10\n").is_err());
    }

    #[test]
    fn rejects_unknown_keys_and_unsafe_dev_mode() {
        assert!(matches!(
            parse("lisen = \"x\""),
            Err(ConfigError::Parse { .. })
        ));
        let e = parse("listen = \"0.0.0.0:8181\"\n[auth]\ndev_principal = \"a\"\n").unwrap_err();
        assert!(e.to_string().contains("loopback"), "{e}");
        assert!(parse("max_body_bytes = 10").is_err());
    }
}
