//! Where the sidecar sends things, as configured: webhooks (`[approvals]`, `[anomaly]`), the
//! console link in notices, and the audit ship file (`[audit] ship_file`).

use std::path::Path;

use super::{RawAudit, WebhookSettings};

/// Whether `url` is `http://` or `https://` followed by a host.
/// A URL or other user input as a message echoes it: no control characters, at most 100
/// characters, and no credentials (what comes before `@` in `scheme://…@host`).
pub(super) fn shown(s: &str) -> String {
    let without = match (s.split_once("://"), s.rsplit_once('@')) {
        (Some((scheme, _)), Some((_, host))) => format!("{scheme}://…@{host}"),
        _ => s.to_owned(),
    };
    without
        .chars()
        .filter(|c| !c.is_control())
        .take(100)
        .collect()
}

fn has_http_host(url: &str) -> bool {
    url.strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .and_then(|rest| rest.split(['/', '?', '#']).next())
        .is_some_and(|host| !host.is_empty())
}

/// A webhook section's settings (`[section] webhook_url`, ...); `None` without a URL.
pub(super) fn webhook(
    section: &str,
    url: Option<&str>,
    secret_file: Option<&Path>,
    timeout_ms: Option<u64>,
    attempts: Option<u32>,
    base: &Path,
) -> Result<Option<WebhookSettings>, (String, &'static str)> {
    let Some(url) = url else { return Ok(None) };
    if !has_http_host(url) {
        // The URL is not echoed: webhook URLs often carry a secret.
        return Err((
            format!("`{section}.webhook_url` is not an http(s) URL with a host"),
            "use a URL such as `https://hooks.example.com/toolgate`",
        ));
    }
    let attempts = attempts.unwrap_or(3);
    if !(1..=10).contains(&attempts) {
        return Err((
            format!("`{section}.webhook_attempts` = {attempts} is out of range"),
            "use 1 to 10 attempts",
        ));
    }
    Ok(Some(WebhookSettings {
        url: url.to_owned(),
        secret_file: secret_file.map(|p| base.join(p)),
        timeout: std::time::Duration::from_millis(timeout_ms.unwrap_or(2000).clamp(100, 30_000)),
        attempts,
        format: crate::approvals::Format::Json,
        console_url: None,
    }))
}

/// `[audit] ship_file`, `ship_rotate_kb` (default 65536: 64 MiB) and `ship_keep` (default 5).
pub(super) fn ship_settings(
    raw: &RawAudit,
    base: &Path,
) -> Result<Option<crate::audit::ShipSettings>, (String, &'static str)> {
    let Some(file) = &raw.ship_file else {
        if raw.ship_rotate_kb.is_some() || raw.ship_keep.is_some() {
            return Err((
                "`audit.ship_rotate_kb` and `audit.ship_keep` need `audit.ship_file`".to_owned(),
                "set `ship_file = \"audit.jsonl\"` (relative to the config file) to ship records",
            ));
        }
        return Ok(None);
    };
    let kb = raw.ship_rotate_kb.unwrap_or(64 * 1024);
    if !(1..=16 * 1024 * 1024).contains(&kb) {
        return Err((
            format!("`audit.ship_rotate_kb` = {kb} is out of range"),
            "use 1 to 16777216 (KiB a file reaches before it is rotated; default 65536)",
        ));
    }
    let keep = raw.ship_keep.unwrap_or(5);
    if !(1..=1000).contains(&keep) {
        return Err((
            format!("`audit.ship_keep` = {keep} is out of range"),
            "use 1 to 1000 rotated files",
        ));
    }
    Ok(Some(crate::audit::ShipSettings {
        path: base.join(file),
        rotate_bytes: kb * 1024,
        keep,
    }))
}

/// `[audit] ship_otlp_url` (an http(s) OTLP/HTTP logs endpoint) and its timeout.
pub(super) fn otlp_settings(
    raw: &RawAudit,
) -> Result<Option<crate::audit::OtlpSettings>, (String, &'static str)> {
    let Some(url) = &raw.ship_otlp_url else {
        if raw.ship_otlp_timeout_ms.is_some() {
            return Err((
                "`audit.ship_otlp_timeout_ms` needs `audit.ship_otlp_url`".to_owned(),
                "set `ship_otlp_url = \"http://127.0.0.1:4318/v1/logs\"` to ship records over OTLP",
            ));
        }
        return Ok(None);
    };
    if !has_http_host(url) || url.chars().any(char::is_whitespace) {
        return Err((
            format!(
                "`audit.ship_otlp_url` = `{}` is not an http(s) URL with a host",
                shown(url)
            ),
            "give the collector's OTLP/HTTP logs endpoint, e.g. `http://127.0.0.1:4318/v1/logs`",
        ));
    }
    let ms = raw.ship_otlp_timeout_ms.unwrap_or(10_000);
    if !(100..=120_000).contains(&ms) {
        return Err((
            format!("`audit.ship_otlp_timeout_ms` = {ms} is out of range"),
            "use 100 to 120000 (ms one export may take; default 10000)",
        ));
    }
    Ok(Some(crate::audit::OtlpSettings {
        url: url.clone(),
        timeout: std::time::Duration::from_millis(ms),
    }))
}

/// `[approvals] console_url`: an http(s) URL, linked from notices.
pub(super) fn console_url(url: Option<&str>) -> Result<Option<String>, (String, &'static str)> {
    let Some(url) = url else { return Ok(None) };
    if !has_http_host(url)
        || url
            .chars()
            .any(|c| c.is_whitespace() || c == '<' || c == '>' || c == '|')
    {
        return Err((
            format!("`approvals.console_url` = {url:?} is not an http(s) URL with a host"),
            "use the address approvers open the console at, e.g. `https://toolgate.example.com/ui`",
        ));
    }
    Ok(Some(url.to_owned()))
}
