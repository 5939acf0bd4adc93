//! `GET /metrics`: Prometheus text exposition of decision and reload counters. Counters are
//! relaxed atomics: one increment per decision, no lock on the request path.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::UNIX_EPOCH;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::AppState;
use crate::authz::Outcome;

/// Decisions answered, by outcome.
#[derive(Debug, Default)]
pub struct DecisionStats {
    allow: AtomicU64,
    deny: AtomicU64,
    pending: AtomicU64,
}

impl DecisionStats {
    /// Counts one decision.
    pub fn count(&self, outcome: Outcome) {
        let c = match outcome {
            Outcome::Allow => &self.allow,
            Outcome::Deny => &self.deny,
            Outcome::PendingApproval => &self.pending,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// Renders the metrics.
pub async fn render(State(state): State<AppState>) -> impl IntoResponse {
    let snap = state.policy.current();
    let r = &state.policy.stats;
    let d = &state.decisions;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let loaded = snap
        .loaded_at
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let mut out = String::with_capacity(1024);
    family(
        &mut out,
        "toolgate_decisions_total",
        "counter",
        "Tool-call decisions answered, by outcome.",
        &[
            ("decision=\"allow\"", get(&d.allow).to_string()),
            ("decision=\"deny\"", get(&d.deny).to_string()),
            ("decision=\"pending_approval\"", get(&d.pending).to_string()),
        ],
    );
    family(
        &mut out,
        "toolgate_rate_limited_total",
        "counter",
        "Calls refused by a rate limit (answered 429).",
        &[("", state.limiter.rejections().to_string())],
    );
    let anomalies: Vec<(String, String)> = state
        .monitor
        .stats
        .raised()
        .map(|(kind, n)| (format!("kind=\"{}\"", kind.as_str()), n.to_string()))
        .collect();
    family(
        &mut out,
        "toolgate_anomalies_total",
        "counter",
        "Anomaly signals raised (one per episode and principal), by kind.",
        &anomalies,
    );
    family(
        &mut out,
        "toolgate_anomaly_observations_dropped_total",
        "counter",
        "Decisions the anomaly detectors never saw because their queue was full.",
        &[("", get(&state.monitor.stats.dropped).to_string())],
    );
    if let Some(w) = state.approvals.webhook_stats() {
        family(
            &mut out,
            "toolgate_approval_webhook_total",
            "counter",
            "Approver notifications, by result.",
            &[
                ("result=\"delivered\"", get(&w.delivered).to_string()),
                ("result=\"failed\"", get(&w.failed).to_string()),
                ("result=\"dropped\"", get(&w.dropped).to_string()),
            ],
        );
    }
    family(
        &mut out,
        "toolgate_policy_reloads_total",
        "counter",
        "Policy reload attempts, by result.",
        &[
            ("result=\"applied\"", get(&r.applied).to_string()),
            ("result=\"failed\"", get(&r.failed).to_string()),
            ("result=\"unchanged\"", get(&r.unchanged).to_string()),
        ],
    );
    family(
        &mut out,
        "toolgate_policy_reload_failing",
        "gauge",
        "1 while the files on disk do not load and the last good set is serving.",
        &[(
            "",
            u8::from(state.policy.last_error().is_some()).to_string(),
        )],
    );
    let revision = format!("revision=\"{}\"", snap.revision);
    family(
        &mut out,
        "toolgate_policy_info",
        "gauge",
        "The policy revision in force.",
        &[(&revision, "1".to_owned())],
    );
    family(
        &mut out,
        "toolgate_policy_loaded_timestamp_seconds",
        "gauge",
        "When the policy set in force was loaded.",
        &[("", format!("{loaded:.3}"))],
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}

/// One metric family: HELP and TYPE lines, then one sample per (labels, value).
fn family<L: AsRef<str>>(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    samples: &[(L, String)],
) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        let labels = labels.as_ref();
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
}
