//! Metrics: one Prometheus recorder per server (the `metrics` facade with
//! `metrics-exporter-prometheus`, never installed globally, so tests each get their own).
//!
//! Owns the names, help texts and label sets. Recorded as they happen: decisions by tool,
//! decision and stage; the decision latency histogram; per-tool latency quantiles (p50, p95,
//! p99 over the last minute, a Prometheus summary); audit write latency. Copied in at scrape
//! time from the components that count them: everything else (see `api::metrics`).
//!
//! Labels stay bounded: `tool` is a registered tool's name or `unregistered`, the other labels
//! are fixed enums. No argument values, no principal ids.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use metrics::{Counter, Histogram, Key, KeyName, Label, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use crate::authz::{Outcome, Stage};

/// Decisions answered.
pub const DECISIONS: &str = "toolgate_decisions_total";
/// Time from request to answer (audit write included), as a histogram.
pub const DECISION_SECONDS: &str = "toolgate_decision_duration_seconds";
/// The same per tool, as quantiles over the last minute.
pub const TOOL_SECONDS: &str = "toolgate_tool_decision_duration_seconds";
/// Time the decision path waited for its audit record.
pub const AUDIT_WRITE_SECONDS: &str = "toolgate_audit_write_duration_seconds";
/// Gate verdicts.
pub const GATES: &str = "toolgate_gate_decisions_total";
/// Tool runs, by tool and how they ended.
pub const RUNS: &str = "toolgate_tool_runs_total";
/// Tool run wall-clock time, by tool.
pub const RUN_SECONDS: &str = "toolgate_tool_run_duration_seconds";
/// Tool runs whose output was cut, by tool.
pub const RUN_TRUNCATIONS: &str = "toolgate_tool_run_truncations_total";
/// Runs the sandbox or the runner refused, by tool and code.
pub const RUN_REFUSALS: &str = "toolgate_tool_run_refusals_total";
/// The label value for calls naming no registered tool.
pub const UNREGISTERED: &str = "unregistered";

/// Histogram buckets, seconds: 25 µs to 1 s.
const BUCKETS: [f64; 14] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 1.0,
];
/// Quantiles of the per-tool summary.
const QUANTILES: [f64; 3] = [0.5, 0.95, 0.99];
/// Tool runs take from milliseconds (a file read) to an hour (`limits.timeout_ms`).
const RUN_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0, 300.0, 3600.0,
];

const OUTCOMES: [Outcome; 3] = [Outcome::Allow, Outcome::Deny, Outcome::PendingApproval];

/// One tool's handles, registered on first use (the recorder's own lookup hashes every label
/// per call; this is one map lookup by tool name and two array indexes).
struct ToolHandles {
    /// By outcome, then stage.
    decisions: [[OnceLock<Counter>; Stage::ALL.len()]; OUTCOMES.len()],
    latency: Histogram,
}

/// The recorder, its renderer, and the handles the decision path uses.
pub struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// Registered tool names (and `unregistered`): bounded by the manifests.
    tools: RwLock<HashMap<String, Arc<ToolHandles>>>,
    /// `toolgate_decision_duration_seconds` by outcome.
    latency: [Histogram; OUTCOMES.len()],
    audit_write: Histogram,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

static NO_METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, None);

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A recorder with toolgate's buckets, quantiles and help texts.
    pub fn new() -> Metrics {
        let built = PrometheusBuilder::new()
            .set_quantiles(&QUANTILES)
            // Three 20 s buckets: quantiles over the last minute.
            .and_then(|b| b.set_bucket_duration(Duration::from_secs(20)))
            .and_then(|b| {
                b.set_buckets_for_metric(Matcher::Full(DECISION_SECONDS.to_owned()), &BUCKETS)
            })
            .and_then(|b| {
                b.set_buckets_for_metric(Matcher::Full(AUDIT_WRITE_SECONDS.to_owned()), &BUCKETS)
            })
            .and_then(|b| {
                b.set_buckets_for_metric(Matcher::Full(RUN_SECONDS.to_owned()), &RUN_BUCKETS)
            });
        let recorder = match built {
            Ok(builder) => builder.build_recorder(),
            Err(e) => {
                // Only a constant above can cause this; metrics degrade, decisions do not.
                tracing::error!(error = %e, "metrics buckets refused; using the exporter's defaults");
                PrometheusBuilder::new().build_recorder()
            }
        };
        let handle = recorder.handle();
        let histogram = |name: &'static str, labels: Vec<Label>| {
            recorder.register_histogram(&Key::from_parts(name, labels), &NO_METADATA)
        };
        let latency = OUTCOMES.map(|o| {
            histogram(
                DECISION_SECONDS,
                vec![Label::from_static_parts("decision", o.as_str())],
            )
        });
        let audit_write = histogram(AUDIT_WRITE_SECONDS, Vec::new());
        let metrics = Metrics {
            recorder,
            handle,
            tools: RwLock::default(),
            latency,
            audit_write,
        };
        for (name, help) in HELP {
            metrics.recorder.describe_counter(
                KeyName::from_const_str(name),
                None::<Unit>,
                SharedString::const_str(help),
            );
        }
        metrics
    }

    /// Records one answered decision. `tool` is the registered tool's name (`None`: the call
    /// named no registered tool).
    pub fn decision(&self, tool: Option<&str>, outcome: Outcome, stage: Stage, took: Duration) {
        let tool = tool.unwrap_or(UNREGISTERED);
        let secs = took.as_secs_f64();
        let handles = self.tool(tool);
        let counter = handles
            .decisions
            .get(outcome as usize)
            .and_then(|by_stage| by_stage.get(stage as usize));
        if let Some(counter) = counter {
            counter
                .get_or_init(|| {
                    self.counter(
                        DECISIONS,
                        vec![
                            Label::new("tool", tool.to_owned()),
                            Label::from_static_parts("decision", outcome.as_str()),
                            Label::from_static_parts("stage", stage.as_str()),
                        ],
                    )
                })
                .increment(1);
        }
        if let Some(h) = self.latency.get(outcome as usize) {
            h.record(secs);
        }
        handles.latency.record(secs);
    }

    /// Counts one gate verdict (`gate` and `decision` are fixed names).
    pub fn gate(&self, gate: &'static str, decision: &'static str) {
        self.counter(
            GATES,
            vec![
                Label::from_static_parts("gate", gate),
                Label::from_static_parts("decision", decision),
            ],
        )
        .increment(1);
    }

    /// Records a tool run (`/v1/execute`, MCP `tools/call`): how it ended (`success`,
    /// `exit_nonzero`, `timeout`, `memory`, `signal`, `error`), how long it took, and whether its output
    /// was cut.
    pub fn tool_run(
        &self,
        tool: &str,
        result: &'static str,
        took: Option<Duration>,
        truncated: bool,
    ) {
        let name = || Label::new("tool", tool.to_owned());
        self.counter(
            RUNS,
            vec![name(), Label::from_static_parts("result", result)],
        )
        .increment(1);
        if let Some(took) = took {
            self.recorder
                .register_histogram(&Key::from_parts(RUN_SECONDS, vec![name()]), &NO_METADATA)
                .record(took.as_secs_f64());
        }
        if truncated {
            self.counter(RUN_TRUNCATIONS, vec![name()]).increment(1);
        }
    }

    /// Records a run refused before or while starting it (a jailed path, an option-like
    /// value, the sandbox or the program unavailable, too many runs), by its error code.
    pub fn tool_refused(&self, tool: &str, code: &'static str) {
        self.counter(
            RUN_REFUSALS,
            vec![
                Label::new("tool", tool.to_owned()),
                Label::from_static_parts("code", code),
            ],
        )
        .increment(1);
    }

    /// Records how long the decision path waited for its audit record.
    pub fn audit_write(&self, took: Duration) {
        self.audit_write.record(took.as_secs_f64());
    }

    /// `tool`'s handles, registered on first use.
    fn tool(&self, tool: &str) -> Arc<ToolHandles> {
        if let Some(h) = self
            .tools
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tool)
        {
            return h.clone();
        }
        let mut tools = self.tools.write().unwrap_or_else(PoisonError::into_inner);
        tools
            .entry(tool.to_owned())
            .or_insert_with(|| {
                Arc::new(ToolHandles {
                    decisions: Default::default(),
                    latency: self.recorder.register_histogram(
                        &Key::from_parts(TOOL_SECONDS, vec![Label::new("tool", tool.to_owned())]),
                        &NO_METADATA,
                    ),
                })
            })
            .clone()
    }

    /// Sets a counter kept by a component to its current `value` (at scrape time).
    pub fn set_counter(&self, name: &'static str, labels: &[(&'static str, &str)], value: u64) {
        self.counter(name, static_labels(labels)).absolute(value);
    }

    /// Sets a gauge to `value` (at scrape time).
    pub fn set_gauge(&self, name: &'static str, labels: &[(&'static str, &str)], value: f64) {
        self.recorder
            .register_gauge(&Key::from_parts(name, static_labels(labels)), &NO_METADATA)
            .set(value);
    }

    /// The exposition text. Histograms recorded since the last call are folded in first.
    pub fn render(&self) -> String {
        self.handle.render()
    }

    /// Folds recorded samples into their histograms and summaries, so memory stays bounded
    /// even when nobody scrapes (the server runs this every few seconds).
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }

    fn counter(&self, name: &'static str, labels: Vec<Label>) -> metrics::Counter {
        self.recorder
            .register_counter(&Key::from_parts(name, labels), &NO_METADATA)
    }
}

fn static_labels(labels: &[(&'static str, &str)]) -> Vec<Label> {
    labels
        .iter()
        .map(|(k, v)| Label::new(*k, (*v).to_owned()))
        .collect()
}

/// Help text of every family the recorder renders.
const HELP: [(&str, &str); 36] = [
    (
        GATES,
        "Gate verdicts, by gate and decision (allow, warn, mask, block).",
    ),
    (
        RUNS,
        "Tool runs (/v1/execute, MCP), by tool and result: success, exit_nonzero, timeout, memory, signal, error.",
    ),
    (RUN_SECONDS, "Wall-clock time of each tool run, by tool."),
    (
        RUN_TRUNCATIONS,
        "Tool runs whose output was cut to the tool's limit.",
    ),
    (
        RUN_REFUSALS,
        "Runs refused by the sandbox or the runner (jailed path, option-like value, unavailable, busy), by tool and code.",
    ),
    (
        DECISIONS,
        "Tool-call decisions answered, by tool, outcome and deciding stage.",
    ),
    (
        DECISION_SECONDS,
        "Time from request to answer, audit write included, by outcome.",
    ),
    (
        TOOL_SECONDS,
        "Time from request to answer per tool: p50, p95 and p99 over the last minute.",
    ),
    (
        AUDIT_WRITE_SECONDS,
        "Time the decision path waited for its audit record (durable in group mode).",
    ),
    (
        "toolgate_rate_limited_total",
        "Calls refused by a rate limit (answered 429).",
    ),
    (
        "toolgate_anomalies_total",
        "Anomaly signals raised (one per episode and principal), by kind.",
    ),
    (
        "toolgate_anomaly_observations_dropped_total",
        "Decisions the anomaly detectors never saw because their queue was full.",
    ),
    (
        "toolgate_anomaly_webhook_total",
        "Anomaly notifications, by result.",
    ),
    (
        "toolgate_approval_webhook_total",
        "Approver notifications, by result.",
    ),
    (
        "toolgate_audit_ship_lag_records",
        "Committed audit records not yet in the ship file ([audit] ship_file).",
    ),
    (
        "toolgate_audit_shipped_seq",
        "The last audit record written to the ship file.",
    ),
    (
        "toolgate_audit_ship_lines_total",
        "Audit records written to the ship file.",
    ),
    (
        "toolgate_audit_ship_rotations_total",
        "Ship file rotations.",
    ),
    (
        "toolgate_audit_ship_failures_total",
        "Failed shipping passes (each retried; a torn batch is dropped first).",
    ),
    (
        "toolgate_audit_ship_skipped_total",
        "Audit records removed by retention before they were shipped.",
    ),
    (
        "toolgate_policy_reloads_total",
        "Policy reload attempts, by result.",
    ),
    (
        "toolgate_policy_reload_failing",
        "1 while the files on disk do not load and the last good set is serving.",
    ),
    (
        "toolgate_policy_stale",
        "1 while the live policy set is not what the files say: remembered after a restart with broken files, nothing loaded yet, or a change held for approval.",
    ),
    (
        "toolgate_policy_held",
        "1 while a widening policy change waits for a human's approval (reload.widening = hold).",
    ),
    (
        "toolgate_policy_ready",
        "0 while no policy set has ever loaded (every call denied).",
    ),
    (
        "toolgate_policy_remember_failures_total",
        "Failures to save the last good policy set in the data directory.",
    ),
    (
        "toolgate_policy_loaded_timestamp_seconds",
        "When the policy set in force was loaded (unix seconds).",
    ),
    (
        "toolgate_approvals_pending",
        "Approvals waiting for a human (the approval queue depth).",
    ),
    (
        "toolgate_quarantined_agents",
        "Agents quarantined now (every call denied until a human releases them).",
    ),
    (
        "toolgate_kill_switch_on",
        "1 while the kill switch denies every call.",
    ),
    (
        "toolgate_audit_otlp_lag_records",
        "Committed audit records the OTLP logs endpoint has not accepted yet ([audit] ship_otlp_url).",
    ),
    (
        "toolgate_audit_otlp_records_total",
        "Audit records the OTLP logs endpoint accepted since start.",
    ),
    (
        "toolgate_audit_otlp_failures_total",
        "OTLP log exports that failed (each retried from the same record).",
    ),
    (
        "toolgate_shared_state_fresh",
        "1 while the fleet's Redis was read within `stale_ms`; 0 means every call is denied at stage shared_state (only with [fleet]).",
    ),
    (
        "toolgate_shared_state_failures_total",
        "Redis calls (limit scripts, reads, shared changes) that failed (only with [fleet]).",
    ),
    (
        "toolgate_audit_store_failing",
        "1 while audit records cannot be stored (every decision is denied, 503); it returns to 0 by itself once the store recovers.",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_names_match_the_wire_names() {
        for stage in Stage::ALL {
            assert_eq!(
                serde_json::to_value(stage).unwrap(),
                serde_json::Value::from(stage.as_str())
            );
        }
        for outcome in [Outcome::Allow, Outcome::Deny, Outcome::PendingApproval] {
            assert_eq!(
                serde_json::to_value(outcome).unwrap(),
                serde_json::Value::from(outcome.as_str())
            );
        }
    }

    #[test]
    fn decisions_render_with_bounded_labels_histogram_and_quantiles() {
        let m = Metrics::new();
        for us in [100, 200, 300, 400, 5_000] {
            m.decision(
                Some("read_file"),
                Outcome::Allow,
                Stage::Policy,
                Duration::from_micros(us),
            );
        }
        m.decision(
            None,
            Outcome::Deny,
            Stage::Registry,
            Duration::from_micros(50),
        );
        m.audit_write(Duration::from_micros(700));
        let text = m.render();
        assert!(
            text.contains(
                "toolgate_decisions_total{tool=\"read_file\",decision=\"allow\",stage=\"policy\"} 5"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "toolgate_decisions_total{tool=\"unregistered\",decision=\"deny\",stage=\"registry\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("# TYPE toolgate_decision_duration_seconds histogram"),
            "{text}"
        );
        assert!(
            text.contains(
                "toolgate_decision_duration_seconds_bucket{decision=\"allow\",le=\"0.00025\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains("toolgate_decision_duration_seconds_count{decision=\"allow\"} 5"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE toolgate_tool_decision_duration_seconds summary"),
            "{text}"
        );
        let p50 = text
            .lines()
            .find(|l| {
                l.starts_with(
                    "toolgate_tool_decision_duration_seconds{tool=\"read_file\",quantile=\"0.5\"}",
                )
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap();
        assert!((0.000_29..0.000_31).contains(&p50), "{p50}\n{text}");
        assert!(
            text.contains("toolgate_audit_write_duration_seconds_count 1"),
            "{text}"
        );
    }
}
