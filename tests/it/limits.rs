//! Rate limits through HTTP, on a virtual clock: burst, 429 with its headers and body, refill,
//! a manifest's own rate, and unknown tools that create no buckets.

use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::json;

use toolgate::api::router;
use toolgate::gateway::Gateway;
use toolgate::limits::{LimitConfig, Limiter, ManualClock, Rate};

use crate::helpers::*;

fn limited_app(
    config: LimitConfig,
    snapshot: toolgate::policy::Snapshot,
) -> (axum::Router, Gateway, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::default());
    let state = Gateway::new(snapshot, demo_auth(), 64 * 1024)
        .unwrap()
        .with_limiter(Limiter::new(config, clock.clone()));
    (router(state.clone()), state, clock)
}

const READ: &str = r#"{"tool":"read_file","args":{"path":"src/main.rs"}}"#;

fn header(h: &axum::http::HeaderMap, name: &str) -> String {
    h.get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_burst_is_allowed_then_429_with_retry_after_until_the_bucket_refills() {
    let config = LimitConfig {
        per_principal_tool: Some(Rate::bucket(0.5, 3)),
        ..LimitConfig::default()
    };
    let (app, state, clock) = limited_app(config, shipped_snapshot());
    for left in ["2", "1", "0"] {
        let (s, h, d) = send_full(&app, "POST", "/v1/authorize", Some(DEV), Some(READ)).await;
        assert_eq!(
            (s, d["decision"].as_str()),
            (StatusCode::OK, Some("allow")),
            "{d}"
        );
        assert_eq!(header(&h, "x-ratelimit-limit"), "3");
        assert_eq!(header(&h, "x-ratelimit-remaining"), left);
    }
    let (s, h, d) = send_full(&app, "POST", "/v1/authorize", Some(DEV), Some(READ)).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{d}");
    assert_eq!(header(&h, "retry-after"), "2");
    assert_eq!(header(&h, "x-ratelimit-remaining"), "0");
    assert_eq!(header(&h, "x-ratelimit-reset"), "6");
    assert_eq!(d["error"], "rate_limited");
    assert_eq!(d["retry_after"], 2);
    assert!(
        d["message"].as_str().unwrap().contains("retry in 2 s"),
        "{d}"
    );
    assert_eq!(
        (d["decision"].as_str(), d["stage"].as_str()),
        (Some("deny"), Some("rate_limit"))
    );
    // Other tools and other agents are not affected.
    let echo = r#"{"tool":"echo","args":{"message":"hi"}}"#;
    let (s, _) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(echo)).await;
    assert_eq!(s, StatusCode::OK);
    // The refusal is in the audit log, like any deny.
    let limited = recorded_at(&state.audit, "rate_limit");
    assert_eq!(limited.len(), 1);
    assert_eq!(limited[0].entry.id, d["decision_id"].as_str().unwrap());
    // Two seconds bring one call back.
    clock.advance_ms(1_999);
    let (s, _) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(READ)).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    clock.advance_ms(1);
    let (s, _) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(READ)).await;
    assert_eq!(s, StatusCode::OK);
    let (_, m) = send_text(&app, "/metrics").await;
    assert!(m.contains("toolgate_rate_limited_total 2"), "{m}");
}

#[tokio::test]
async fn a_manifest_rate_overrides_the_default_and_unknown_tools_make_no_buckets() {
    let set = TempSet::new();
    set.edit_manifest("echo", |m| {
        m["limits"]["rate"] = json!({"per_second": 1, "burst": 1});
    });
    let snapshot = toolgate::policy::load(&set.sources()).unwrap().snapshot;
    let config = LimitConfig {
        per_principal_tool: Some(Rate::bucket(100.0, 100)),
        ..LimitConfig::default()
    };
    let (app, state, _) = limited_app(config, snapshot);
    let echo = r#"{"tool":"echo","args":{"message":"hi"}}"#;
    let (s, d) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(echo)).await;
    assert_eq!(s, StatusCode::OK, "{d}");
    assert_eq!(d["limits"]["rate"]["burst"], 1);
    let (s, _) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(echo)).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    let (s, _) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(READ)).await;
    assert_eq!(s, StatusCode::OK);
    let before = state.limiter.buckets();
    for i in 0..50 {
        let body = format!(r#"{{"tool":"nope-{i}","args":{{}}}}"#);
        let (s, d) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(&body)).await;
        assert_eq!((s, d["stage"].as_str()), (StatusCode::OK, Some("registry")));
    }
    assert_eq!(state.limiter.buckets(), before);
}

#[tokio::test]
async fn a_bad_rate_in_a_manifest_names_the_field() {
    let set = TempSet::new();
    set.edit_manifest("echo", |m| {
        m["limits"]["rate"] = json!({"per_second": 0, "burst": 1});
    });
    let err = toolgate::policy::load(&set.sources()).unwrap_err();
    let text = format!("{:?}", err.problems);
    assert!(
        text.contains("limits.rate") && text.contains("per_second"),
        "{text}"
    );
}

#[tokio::test]
async fn a_fixed_window_per_hour_answers_429_until_the_next_hour() {
    let config = LimitConfig {
        per_principal: Some(Rate {
            per_hour: Some(2),
            ..Rate::default()
        }),
        ..LimitConfig::default()
    };
    let (app, _, clock) = limited_app(config, shipped_snapshot());
    // 10:59:30 on some day (the test clock's time is read as UTC).
    let start = (20 * 24 + 10) * 3_600_000 + 59 * 60_000 + 30_000;
    clock.set_ms(start);
    for left in ["1", "0"] {
        let (s, h, d) = send_full(&app, "POST", "/v1/authorize", Some(DEV), Some(READ)).await;
        assert_eq!(s, StatusCode::OK, "{d}");
        assert_eq!(header(&h, "x-ratelimit-limit"), "2");
        assert_eq!(header(&h, "x-ratelimit-remaining"), left);
        assert_eq!(header(&h, "x-ratelimit-reset"), "30");
    }
    let (s, h, d) = send_full(&app, "POST", "/v1/authorize", Some(DEV), Some(READ)).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{d}");
    assert_eq!(header(&h, "retry-after"), "30");
    assert_eq!(
        (d["scope"].as_str(), d["per"].as_str()),
        (Some("principal"), Some("hour"))
    );
    assert!(
        d["message"].as_str().unwrap().contains("2 calls per hour"),
        "{d}"
    );
    // The window is the agent's, across tools; another agent has its own.
    let echo = r#"{"tool":"echo","args":{"message":"hi"}}"#;
    let (s, _) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(echo)).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    let (s, _) = send(&app, "POST", "/v1/authorize", Some(SRE), Some(READ)).await;
    assert_eq!(s, StatusCode::OK);
    // On the hour it starts again.
    clock.set_ms(start + 29_999);
    let (s, _) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(READ)).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    clock.set_ms(start + 30_000);
    let (s, h, _) = send_full(&app, "POST", "/v1/authorize", Some(DEV), Some(READ)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(header(&h, "x-ratelimit-reset"), "3600");
}

#[test]
fn window_limits_in_the_config_are_checked_by_name() {
    let set = TempSet::new();
    for (extra, says) in [
        (
            "[rate_limits]\nper_principal = { per_hour = 0 }\n",
            "`rate_limits.per_principal`: `per_hour` must be at least 1",
        ),
        (
            "[rate_limits]\nglobal = { per_second = 5 }\n",
            "`rate_limits.global`: a token bucket needs both",
        ),
        ("[rate_limits]\nglobal = { per_week = 5 }\n", "per_week"),
    ] {
        let err = crate::process::serve_refuses(&set, extra);
        assert!(err.contains(says), "{err}");
    }
}

/// Many requests race one limit through the router on a multi-threaded runtime: exactly the
/// capacity is admitted, the rest are answered 429, and the audit log has every answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_requests_get_exactly_the_capacity_of_a_bucket_or_a_window() {
    for (rate, capacity) in [
        (Rate::bucket(0.001, 25), 25),
        (
            Rate {
                per_minute: Some(30),
                ..Rate::default()
            },
            30,
        ),
    ] {
        let config = LimitConfig {
            per_principal: Some(rate),
            ..LimitConfig::default()
        };
        let (app, state, clock) = limited_app(config, shipped_snapshot());
        clock.set_ms(60_000 * 1000 + 1);
        let tasks: Vec<_> = (0..120)
            .map(|_| {
                let app = app.clone();
                tokio::spawn(async move {
                    send(&app, "POST", "/v1/authorize", Some(DEV), Some(READ))
                        .await
                        .0
                })
            })
            .collect();
        let mut ok = 0;
        let mut limited = 0;
        for t in tasks {
            match t.await.unwrap() {
                StatusCode::OK => ok += 1,
                StatusCode::TOO_MANY_REQUESTS => limited += 1,
                other => panic!("unexpected {other}"),
            }
        }
        assert_eq!((ok, limited), (capacity, 120 - capacity), "{rate:?}");
        assert_eq!(
            recorded_at(&state.audit, "rate_limit").len(),
            120 - capacity
        );
    }
}
