//! `context.usage` and `context.anomaly` through HTTP: a policy on call volume, signals raised
//! by the detectors (audited, counted, visible to policies until their hold ends), and the
//! anomaly webhook of the real binary.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::{Value, json};

use toolgate::anomaly::{Alerts, DetectorConfig, Monitor};
use toolgate::api::router;
use toolgate::authz::AnomalyKind;
use toolgate::gateway::Gateway;
use toolgate::limits::ManualClock;

use crate::helpers::*;

const ECHO: &str = r#"{"tool":"echo","args":{"message":"hi"}}"#;
const DEV_AGENT: &str = "Agent::\"dev-agent\"";

fn snapshot_with(policy: &str) -> toolgate::policy::Snapshot {
    let set = TempSet::new();
    set.write("policies/signals-test.cedar", policy);
    toolgate::policy::load(&set.sources()).unwrap().snapshot
}

/// State over `snap` with the detectors running on a virtual clock, alerting to its audit log.
fn detecting(
    snap: toolgate::policy::Snapshot,
    config: DetectorConfig,
) -> (Gateway, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::default());
    let state = Gateway::new(snap, demo_auth(), 64 * 1024).unwrap();
    let alerts = Alerts {
        audit: Some(state.audit.clone()),
        webhook: None,
        quarantine: None,
    };
    let monitor = Monitor::start(config, clock.clone(), alerts).unwrap();
    (state.with_monitor(monitor), clock)
}

async fn echo(app: &axum::Router) -> Value {
    let (s, d) = send(app, "POST", "/v1/authorize", Some(DEV), Some(ECHO)).await;
    assert_eq!(s, StatusCode::OK, "{d}");
    d
}

#[tokio::test]
async fn a_policy_limits_calls_per_minute_with_context_usage() {
    let snap = snapshot_with(
        r#"@id("echo-volume")
forbid (principal, action == Action::"echo", resource)
when { context.usage.tool_last_minute >= 3 };"#,
    );
    let clock = Arc::new(ManualClock::default());
    let state = Gateway::new(snap, demo_auth(), 64 * 1024)
        .unwrap()
        .with_monitor(Monitor::counting_only(clock.clone()));
    let app = router(state);
    for _ in 0..3 {
        assert_eq!(echo(&app).await["decision"], "allow");
    }
    let d = echo(&app).await;
    assert_eq!(d["decision"], "deny", "{d}");
    assert_eq!(d["reasons"], json!(["echo-volume"]), "{d}");
    // Other tools are counted apart.
    let (_, d) = send(
        &app,
        "POST",
        "/v1/authorize",
        Some(DEV),
        Some(r#"{"tool":"git_log","args":{}}"#),
    )
    .await;
    assert_eq!(d["decision"], "allow", "{d}");
    // A minute later the window has slid past the calls.
    clock.advance_ms(61_000);
    assert_eq!(echo(&app).await["decision"], "allow");
}

#[tokio::test]
async fn policy_violations_raise_a_signal_that_policies_see_until_the_hold_ends() {
    let snap = snapshot_with(
        r#"@id("stop-on-violations")
forbid (principal, action in [Action::"read", Action::"write", Action::"destructive"], resource)
when { context.anomaly.kinds.contains("violation_rate") };"#,
    );
    let (state, clock) = detecting(
        snap,
        DetectorConfig {
            violations_per_minute: 2,
            hold_secs: 300,
            ..DetectorConfig::default()
        },
    );
    let app = router(state.clone());
    assert_eq!(echo(&app).await["decision"], "allow");
    // Three policy denials (a deny-listed path) within the minute: over 2 a minute.
    let secret = r#"{"tool":"read_file","args":{"path":".env"}}"#;
    for _ in 0..3 {
        let (_, d) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(secret)).await;
        assert_eq!(
            (d["decision"].as_str(), d["stage"].as_str()),
            (Some("deny"), Some("policy")),
            "{d}"
        );
    }
    // The detectors run off the request path: wait (bounded) for the signal.
    raised(&state, AnomalyKind::ViolationRate).await;
    let d = echo(&app).await;
    assert_eq!(d["decision"], "deny", "{d}");
    assert_eq!(d["reasons"], json!(["stop-on-violations"]));
    // Other agents are not affected.
    let (_, d) = send(&app, "POST", "/v1/authorize", Some(SRE), Some(ECHO)).await;
    assert_eq!(d["decision"], "allow", "{d}");
    // The alert: one audit record and one count, although the signal fired again.
    let start = Instant::now();
    let recorded = loop {
        let got = recorded_at(&state.audit, "anomaly");
        if !got.is_empty() || start.elapsed() > Duration::from_secs(5) {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    let entry = &recorded[0].entry;
    assert_eq!(entry.decision, "violation_rate");
    assert_eq!(entry.principal.as_deref(), Some(DEV_AGENT));
    assert!(
        entry
            .detail
            .as_deref()
            .unwrap()
            .contains("3 policy denials"),
        "{entry:?}"
    );
    let (_, text) = send_text(&app, "/metrics").await;
    assert!(
        text.contains("toolgate_anomalies_total{kind=\"violation_rate\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("toolgate_anomalies_total{kind=\"spike\"} 0"),
        "{text}"
    );
    // After the hold, policies no longer see it.
    clock.advance_ms(301_000);
    assert_eq!(echo(&app).await["decision"], "allow");
}

#[test]
fn a_configured_sequence_alerts_through_the_signed_webhook_of_the_real_binary() {
    let (port, seen) = crate::webhook::receiver(vec![200]);
    let set = TempSet::new();
    set.write("anomaly-secret", "s3cret\n");
    let server = crate::process::start_with(
        &set,
        &format!(
            "[anomaly]\nwebhook_url = \"http://127.0.0.1:{port}/hook\"\nwebhook_secret_file = \"anomaly-secret\"\n[[anomaly.sequences]]\nname = \"recon-then-push\"\nfirst = [\"git_log\"]\nthen = [\"git_*push\"]\nwithin_secs = 60\n"
        ),
    );
    let call = |tool: &str, args: Value| {
        crate::process::request(
            server.port,
            "POST",
            "/v1/authorize",
            Some(DEV),
            Some(&json!({"tool": tool, "args": args})),
        )
        .unwrap()
    };
    assert_eq!(call("git_log", json!({}))["decision"], "allow");
    // The push is the signal, whatever its own answer.
    call(
        "git_push",
        json!({"remote": "origin", "branch": "feature/x"}),
    );
    let got = seen
        .recv_timeout(Duration::from_secs(10))
        .expect("no alert");
    let body: Value = serde_json::from_str(&got.body).unwrap();
    assert_eq!(
        (
            body["event"].as_str(),
            body["kind"].as_str(),
            body["principal"].as_str()
        ),
        (Some("anomaly"), Some("sequence"), Some(DEV_AGENT)),
        "{body}"
    );
    assert!(body["detail"].as_str().unwrap().contains("recon-then-push"));
    assert!(
        got.headers.iter().any(|h| h
            .to_ascii_lowercase()
            .starts_with("x-toolgate-signature: sha256=")),
        "{:?}",
        got.headers
    );
    // And the next call of that agent sees it.
    let start = Instant::now();
    while !crate::process::metrics(server.port)
        .contains("toolgate_anomalies_total{kind=\"sequence\"} 1")
    {
        assert!(start.elapsed() < Duration::from_secs(5), "not counted");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until the detectors' thread has raised `kind` for the dev agent.
async fn raised(state: &Gateway, kind: AnomalyKind) {
    let start = Instant::now();
    while !state.monitor.raised_for(DEV_AGENT).contains(kind) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{kind:?} not raised"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_spike_over_the_agents_baseline_and_repeated_failures_reach_the_policies() {
    let snap = snapshot_with(
        r#"@id("stop-on-spike-or-failures")
forbid (principal, action in [Action::"read", Action::"write", Action::"destructive"], resource)
when { context.anomaly.kinds.containsAny(["spike", "repeated_failures"]) };"#,
    );
    let (state, clock) = detecting(
        snap,
        DetectorConfig {
            spike_factor: 2.0,
            spike_min_calls: 10,
            baseline_minutes: 2,
            ..DetectorConfig::default()
        },
    );
    let app = router(state.clone());
    // Two minutes at 3 calls a minute: the baseline.
    for _ in 0..2 {
        for _ in 0..3 {
            assert_eq!(echo(&app).await["decision"], "allow");
        }
        clock.advance_ms(60_000);
    }
    // Then 10 calls within the minute: over 2 × 3 and at least 10.
    for _ in 0..10 {
        assert_eq!(echo(&app).await["decision"], "allow");
    }
    raised(&state, AnomalyKind::Spike).await;
    let d = echo(&app).await;
    assert_eq!(d["reasons"], json!(["stop-on-spike-or-failures"]), "{d}");
    let records = recorded_at(&state.audit, "anomaly");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].entry.decision, "spike");

    // After the hold, 8 failures out of the last 10 calls (invalid arguments, not policy).
    clock.advance_ms(400_000);
    assert_eq!(echo(&app).await["decision"], "allow");
    let bad = r#"{"tool":"echo","args":{"message":7}}"#;
    for _ in 0..8 {
        let (_, d) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(bad)).await;
        assert_eq!(d["stage"], "validation", "{d}");
    }
    raised(&state, AnomalyKind::RepeatedFailures).await;
    let d = echo(&app).await;
    assert_eq!(d["decision"], "deny", "{d}");
}
