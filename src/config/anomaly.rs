//! `[anomaly]` → the detectors' thresholds, sequence rules and which signals quarantine an
//! agent. The webhook settings of the table are checked with the others in the parent.

use std::path::PathBuf;

use serde::Deserialize;

use crate::anomaly::{DetectorConfig, SequenceRule};
use crate::authz::{AnomalyKind, AnomalyKinds};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAnomaly {
    pub(super) enabled: Option<bool>,
    pub(super) spike_factor: Option<f64>,
    pub(super) spike_min_calls: Option<u32>,
    pub(super) baseline_minutes: Option<u32>,
    pub(super) failures: Option<u32>,
    pub(super) failures_window: Option<u32>,
    pub(super) violations_per_minute: Option<u32>,
    pub(super) hold_secs: Option<u64>,
    #[serde(default)]
    sequences: Vec<RawSequence>,
    pub(super) webhook_url: Option<String>,
    pub(super) webhook_secret_file: Option<PathBuf>,
    pub(super) webhook_timeout_ms: Option<u64>,
    pub(super) webhook_attempts: Option<u32>,
    #[serde(default)]
    pub(super) quarantine_on: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSequence {
    pub(super) name: String,
    pub(super) first: Vec<String>,
    pub(super) then: Vec<String>,
    pub(super) within_secs: u64,
}

/// `[anomaly] quarantine_on` → the kinds that quarantine, each one a known kind.
pub(super) fn quarantine_kinds(raw: &RawAnomaly) -> Result<AnomalyKinds, (String, &'static str)> {
    let mut kinds = AnomalyKinds::NONE;
    for name in &raw.quarantine_on {
        let Some(kind) = AnomalyKind::parse(name) else {
            return Err((
                format!("`anomaly.quarantine_on` names an unknown kind `{name}`"),
                "use some of \"spike\", \"repeated_failures\", \"sequence\", \"violation_rate\"",
            ));
        };
        kinds.insert(kind);
    }
    if !kinds.is_empty() && raw.enabled == Some(false) {
        return Err((
            "`anomaly.quarantine_on` needs the detectors, but `anomaly.enabled = false`".to_owned(),
            "remove `enabled = false` or `quarantine_on`",
        ));
    }
    Ok(kinds)
}

/// `[anomaly]` → the detectors' thresholds, every one checked.
pub(super) fn detector_config(
    raw: RawAnomaly,
) -> Result<Option<DetectorConfig>, (String, &'static str)> {
    if raw.enabled == Some(false) {
        return Ok(None);
    }
    let d = DetectorConfig::default();
    let c = DetectorConfig {
        spike_factor: raw.spike_factor.unwrap_or(d.spike_factor),
        spike_min_calls: raw.spike_min_calls.unwrap_or(d.spike_min_calls),
        baseline_minutes: raw.baseline_minutes.unwrap_or(d.baseline_minutes),
        failures: raw.failures.unwrap_or(d.failures),
        failures_window: raw.failures_window.unwrap_or(d.failures_window),
        violations_per_minute: raw.violations_per_minute.unwrap_or(d.violations_per_minute),
        hold_secs: raw.hold_secs.unwrap_or(d.hold_secs),
        sequences: raw
            .sequences
            .into_iter()
            .map(|r| SequenceRule {
                name: r.name,
                first: r.first,
                then: r.then,
                within_secs: r.within_secs,
            })
            .collect(),
    };
    let bad = |m: String| {
        Err((
            m,
            "see docs/configuration.md (`[anomaly]`) for each setting's range",
        ))
    };
    if !(c.spike_factor.is_finite() && c.spike_factor >= 1.0) {
        return bad(format!(
            "`anomaly.spike_factor` = {} must be a number of at least 1",
            c.spike_factor
        ));
    }
    if c.spike_min_calls == 0 {
        return bad("`anomaly.spike_min_calls` must be at least 1".to_owned());
    }
    if !(1..=59).contains(&c.baseline_minutes) {
        return bad(format!(
            "`anomaly.baseline_minutes` = {} must be 1 to 59",
            c.baseline_minutes
        ));
    }
    if !(1..=1000).contains(&c.failures_window) || !(1..=c.failures_window).contains(&c.failures) {
        return bad(format!(
            "`anomaly.failures` = {} of `failures_window` = {}: need 1 <= failures <= failures_window <= 1000",
            c.failures, c.failures_window
        ));
    }
    if c.hold_secs == 0 {
        return bad("`anomaly.hold_secs` must be at least 1".to_owned());
    }
    for (i, r) in c.sequences.iter().enumerate() {
        if r.name.trim().is_empty() || r.first.is_empty() || r.then.is_empty() || r.within_secs == 0
        {
            return bad(format!(
                "`anomaly.sequences[{i}]` needs a `name`, non-empty `first` and `then` tool patterns and `within_secs` of at least 1"
            ));
        }
        for (key, patterns) in [("first", &r.first), ("then", &r.then)] {
            if let Err(e) = crate::globs::NameGlobs::new(patterns.iter()) {
                return bad(format!("`anomaly.sequences[{i}].{key}`: {e}"));
            }
        }
    }
    Ok(Some(c))
}
