//! `GET /metrics`: the Prometheus text exposition. Decisions and latencies are recorded as
//! they happen (see [`crate::metrics`]); the counters and gauges other components keep are
//! copied into the recorder here, at scrape time, so nothing extra runs per decision.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::UNIX_EPOCH;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::approvals::WebhookStats;
use crate::clock::now_ms;
use crate::gateway::Gateway;

fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

fn webhook(state: &Gateway, name: &'static str, stats: Option<&WebhookStats>) {
    let Some(w) = stats else { return };
    let m = &state.metrics;
    m.set_counter(name, &[("result", "delivered")], get(&w.delivered));
    m.set_counter(name, &[("result", "failed")], get(&w.failed));
    m.set_counter(name, &[("result", "dropped")], get(&w.dropped));
}

/// Renders the metrics.
pub async fn render(State(state): State<Gateway>) -> impl IntoResponse {
    let snap = state.policy.current();
    let m = &state.metrics;
    m.set_counter(
        "toolgate_rate_limited_total",
        &[],
        state.limiter.rejections(),
    );
    m.set_gauge(
        "toolgate_held_by_agents",
        &[],
        state.held.agents_holding() as f64,
    );
    for (kind, n) in state.monitor.stats.raised() {
        m.set_counter("toolgate_anomalies_total", &[("kind", kind.as_str())], n);
    }
    m.set_counter(
        "toolgate_anomaly_observations_dropped_total",
        &[],
        get(&state.monitor.stats.dropped),
    );
    webhook(
        &state,
        "toolgate_anomaly_webhook_total",
        state.monitor.webhook_stats.as_deref(),
    );
    webhook(
        &state,
        "toolgate_approval_webhook_total",
        state.approvals.webhook_stats(),
    );
    if let Some(ship) = state.audit.ship_stats() {
        let shipped = get(&ship.shipped_seq);
        m.set_gauge(
            "toolgate_audit_ship_lag_records",
            &[],
            state.audit.head().seq.saturating_sub(shipped) as f64,
        );
        m.set_gauge("toolgate_audit_shipped_seq", &[], shipped as f64);
        m.set_counter("toolgate_audit_ship_lines_total", &[], get(&ship.lines));
        m.set_counter(
            "toolgate_audit_ship_rotations_total",
            &[],
            get(&ship.rotations),
        );
        m.set_counter(
            "toolgate_audit_ship_failures_total",
            &[],
            get(&ship.failures),
        );
        m.set_counter("toolgate_audit_ship_skipped_total", &[], get(&ship.skipped));
    }
    if let Some(otlp) = state.audit.otlp_stats() {
        let shipped = get(&otlp.shipped_seq);
        m.set_gauge(
            "toolgate_audit_otlp_lag_records",
            &[],
            state.audit.head().seq.saturating_sub(shipped) as f64,
        );
        m.set_counter("toolgate_audit_otlp_records_total", &[], get(&otlp.lines));
        m.set_counter(
            "toolgate_audit_otlp_failures_total",
            &[],
            get(&otlp.failures),
        );
    }
    if let Some(fleet) = &state.fleet {
        let status = fleet.status();
        m.set_gauge(
            "toolgate_shared_state_fresh",
            &[],
            f64::from(u8::from(status.fresh)),
        );
        m.set_counter("toolgate_shared_state_failures_total", &[], status.failures);
    }
    if let Some(hub) = &state.upstreams {
        for u in hub.status() {
            let name = [("upstream", u.name.as_str())];
            m.set_gauge(
                "toolgate_mcp_upstream_up",
                &name,
                f64::from(u8::from(u.state == "up")),
            );
            m.set_counter("toolgate_mcp_upstream_starts_total", &name, u.starts);
        }
        for (name, counts) in hub.call_counts() {
            for (outcome, n) in counts.get() {
                m.set_counter(
                    "toolgate_mcp_upstream_calls_total",
                    &[("upstream", name), ("outcome", outcome)],
                    n,
                );
            }
        }
    }
    let r = &state.policy.stats;
    let reloads = "toolgate_policy_reloads_total";
    m.set_counter(reloads, &[("result", "applied")], get(&r.applied));
    m.set_counter(reloads, &[("result", "failed")], get(&r.failed));
    m.set_counter(reloads, &[("result", "unchanged")], get(&r.unchanged));
    m.set_counter(reloads, &[("result", "held")], get(&r.held));
    m.set_counter(
        "toolgate_policy_remember_failures_total",
        &[],
        get(&r.remember_failed),
    );
    let flag = |b: bool| f64::from(u8::from(b));
    m.set_gauge("toolgate_policy_stale", &[], flag(state.policy.stale()));
    m.set_gauge(
        "toolgate_policy_held",
        &[],
        flag(state.policy.held().is_some()),
    );
    m.set_gauge(
        "toolgate_policy_ready",
        &[],
        flag(state.policy.origin() != crate::reload::Origin::Nothing),
    );
    let failing = state.policy.last_error().is_some();
    m.set_gauge(
        "toolgate_policy_reload_failing",
        &[],
        f64::from(u8::from(failing)),
    );
    let loaded = snap
        .loaded_at
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    m.set_gauge("toolgate_policy_loaded_timestamp_seconds", &[], loaded);
    // Counted in memory as approvals open, close and expire: no store read per scrape.
    let (pending, _) = state.approvals.pending_counts("", now_ms());
    m.set_gauge("toolgate_approvals_pending", &[], pending as f64);
    m.set_gauge(
        "toolgate_quarantined_agents",
        &[],
        state.admin.quarantine().len() as f64,
    );
    m.set_gauge(
        "toolgate_kill_switch_on",
        &[],
        f64::from(u8::from(state.admin.kill_switch_on())),
    );
    m.set_gauge(
        "toolgate_audit_store_failing",
        &[],
        flag(state.audit.failure().is_some()),
    );
    let mut out = m.render();
    // The revision label changes on every reload, so this family is written here rather than
    // kept in the recorder, where each past revision would stay as a series.
    let _ = writeln!(
        out,
        "# HELP toolgate_policy_info The policy revision in force.\n# TYPE toolgate_policy_info gauge\ntoolgate_policy_info{{revision=\"{}\"}} 1",
        snap.revision
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}
