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
    let _ = writeln!(
        out,
        "# HELP toolgate_decisions_total Tool-call decisions answered, by outcome."
    );
    let _ = writeln!(out, "# TYPE toolgate_decisions_total counter");
    for (label, v) in [
        ("allow", get(&d.allow)),
        ("deny", get(&d.deny)),
        ("pending_approval", get(&d.pending)),
    ] {
        let _ = writeln!(out, "toolgate_decisions_total{{decision=\"{label}\"}} {v}");
    }
    let _ = writeln!(
        out,
        "# HELP toolgate_policy_reloads_total Policy reload attempts, by result."
    );
    let _ = writeln!(out, "# TYPE toolgate_policy_reloads_total counter");
    for (label, v) in [
        ("applied", get(&r.applied)),
        ("failed", get(&r.failed)),
        ("unchanged", get(&r.unchanged)),
    ] {
        let _ = writeln!(
            out,
            "toolgate_policy_reloads_total{{result=\"{label}\"}} {v}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP toolgate_policy_reload_failing 1 while the files on disk do not load and the last good set is serving."
    );
    let _ = writeln!(out, "# TYPE toolgate_policy_reload_failing gauge");
    let _ = writeln!(
        out,
        "toolgate_policy_reload_failing {}",
        u8::from(state.policy.last_error().is_some())
    );
    let _ = writeln!(
        out,
        "# HELP toolgate_policy_info The policy revision in force."
    );
    let _ = writeln!(out, "# TYPE toolgate_policy_info gauge");
    let _ = writeln!(
        out,
        "toolgate_policy_info{{revision=\"{}\"}} 1",
        snap.revision
    );
    let _ = writeln!(
        out,
        "# HELP toolgate_policy_loaded_timestamp_seconds When the policy set in force was loaded."
    );
    let _ = writeln!(out, "# TYPE toolgate_policy_loaded_timestamp_seconds gauge");
    let _ = writeln!(out, "toolgate_policy_loaded_timestamp_seconds {loaded:.3}");
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}
