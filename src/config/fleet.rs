//! `[fleet]`: the Redis a fleet of sidecars shares its limits, kill switch, quarantines and
//! grants through; checked once into [`crate::fleet::FleetSettings`].

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::outputs::shown as printable;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFleet {
    redis_url: Option<String>,
    password_file: Option<std::path::PathBuf>,
    key_prefix: Option<String>,
    timeout_ms: Option<u64>,
    poll_ms: Option<u64>,
    stale_ms: Option<u64>,
}

/// `[fleet]` → the settings (`None`: no fleet), or every problem found.
pub(super) fn fleet(
    raw: &RawFleet,
    base: &Path,
) -> Result<Option<crate::fleet::FleetSettings>, Vec<(String, String)>> {
    let Some(url) = &raw.redis_url else {
        let set = raw.password_file.is_some()
            || raw.key_prefix.is_some()
            || raw.timeout_ms.is_some()
            || raw.poll_ms.is_some()
            || raw.stale_ms.is_some();
        return if set {
            Err(vec![(
                "`[fleet]` keys need `fleet.redis_url`".to_owned(),
                "set `redis_url = \"redis://127.0.0.1:6379/0\"`, or remove the `[fleet]` section to keep state per sidecar".to_owned(),
            )])
        } else {
            Ok(None)
        };
    };
    let mut found = Vec::new();
    let scheme_ok = url
        .strip_prefix("redis://")
        .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'));
    if !scheme_ok || url.chars().any(char::is_whitespace) {
        found.push((
            format!("`fleet.redis_url` = `{}` is not a redis:// URL with a host", printable(url)),
            "write `redis://host:port/db` (TLS `rediss://` is not built in: reach Redis over loopback or a TLS sidecar such as stunnel)".to_owned(),
        ));
    }
    let prefix = raw
        .key_prefix
        .clone()
        .unwrap_or_else(|| "toolgate:".to_owned());
    if prefix.is_empty() || prefix.len() > 64 || !prefix.chars().all(|c| c.is_ascii_graphic()) {
        found.push((
            format!(
                "`fleet.key_prefix` = `{}` is not 1 to 64 printable ASCII characters",
                printable(&prefix)
            ),
            "use something like `toolgate:prod:`; every sidecar of one fleet must use the same"
                .to_owned(),
        ));
    }
    let mut ms =
        |name: &str, v: Option<u64>, default: u64, range: std::ops::RangeInclusive<u64>| {
            let v = v.unwrap_or(default);
            if !range.contains(&v) {
                found.push((
                    format!("`fleet.{name}` = {v} is out of range"),
                    format!(
                        "use {} to {} (ms; default {default})",
                        range.start(),
                        range.end()
                    ),
                ));
            }
            Duration::from_millis(v)
        };
    let timeout = ms("timeout_ms", raw.timeout_ms, 200, 10..=10_000);
    let poll = ms("poll_ms", raw.poll_ms, 250, 50..=10_000);
    let stale = ms("stale_ms", raw.stale_ms, 1_000, 100..=60_000);
    // A round makes up to three Redis calls in a row, each allowed `timeout_ms`.
    if found.is_empty() && stale < poll + 3 * timeout {
        found.push((
            format!(
                "`fleet.stale_ms` = {} is less than `poll_ms` + 3 × `timeout_ms` ({})",
                stale.as_millis(),
                (poll + 3 * timeout).as_millis()
            ),
            "raise `stale_ms`: a sidecar would deny between two good reads".to_owned(),
        ));
    }
    if !found.is_empty() {
        return Err(found);
    }
    Ok(Some(crate::fleet::FleetSettings {
        url: url.clone(),
        password_file: raw.password_file.as_ref().map(|p| base.join(p)),
        prefix,
        timeout,
        poll,
        stale,
    }))
}
