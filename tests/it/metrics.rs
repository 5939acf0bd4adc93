//! `/metrics` through HTTP: decisions by tool, outcome and stage; the latency histogram and
//! per-tool quantiles; audit write latency; the approval queue depth and other gauges; and
//! labels that stay bounded whatever the calls carry.

use serde_json::json;

use crate::helpers::*;

fn line_value(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn decisions_latencies_and_gauges_are_exported_with_bounded_labels() {
    let app = app();
    let read = json!({"tool": "read_file", "args": {"path": "src/secret-value-xyz.rs"}});
    for _ in 0..3 {
        assert_eq!(authorize(&app, DEV, &read).await["decision"], "allow");
    }
    let write = json!({"tool": "write_file", "args": {"path": "notes.txt", "content": "x"}});
    assert_eq!(
        authorize(&app, DEV, &write).await["decision"],
        "pending_approval"
    );
    // Unregistered names, however odd, share one label value.
    for name in ["nope", "evil\\\"} 1 fake_metric", "x-9f3c"] {
        let call = json!({"tool": name, "args": {}});
        let d = authorize(&app, DEV, &call).await;
        assert_eq!(d["stage"], "registry", "{d}");
    }
    let (s, _) = send(&app, "POST", "/v1/authorize", Some("wrong"), Some("{}")).await;
    assert_eq!(s, 401);

    let (_, text) = send_text(&app, "/metrics").await;
    let decisions =
        |labels: &str| line_value(&text, &format!("toolgate_decisions_total{{{labels}}} "));
    assert_eq!(
        decisions("tool=\"read_file\",decision=\"allow\",stage=\"policy\""),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        decisions("tool=\"write_file\",decision=\"pending_approval\",stage=\"approval\""),
        Some(1.0)
    );
    assert_eq!(
        decisions("tool=\"unregistered\",decision=\"deny\",stage=\"registry\""),
        Some(3.0)
    );
    assert_eq!(
        decisions("tool=\"unregistered\",decision=\"deny\",stage=\"auth\""),
        Some(1.0)
    );
    assert!(
        !text.contains("secret-value-xyz")
            && !text.contains("fake_metric")
            && !text.contains("x-9f3c")
    );
    // The histogram counts every answer; so does the audit write latency.
    assert_eq!(
        line_value(
            &text,
            "toolgate_decision_duration_seconds_count{decision=\"allow\"}"
        ),
        Some(3.0)
    );
    assert_eq!(
        line_value(
            &text,
            "toolgate_decision_duration_seconds_bucket{decision=\"deny\",le=\"+Inf\"}"
        ),
        Some(4.0)
    );
    assert_eq!(
        line_value(&text, "toolgate_audit_write_duration_seconds_count"),
        Some(8.0)
    );
    // Per-tool quantiles.
    for q in ["0.5", "0.95", "0.99"] {
        let v = line_value(
            &text,
            &format!(
                "toolgate_tool_decision_duration_seconds{{tool=\"read_file\",quantile=\"{q}\"}}"
            ),
        )
        .unwrap_or_else(|| panic!("no p{q}: {text}"));
        assert!(v > 0.0 && v < 5.0, "{v}");
    }
    assert_eq!(line_value(&text, "toolgate_approvals_pending "), Some(1.0));
    assert_eq!(line_value(&text, "toolgate_quarantined_agents "), Some(0.0));
    assert_eq!(line_value(&text, "toolgate_kill_switch_on "), Some(0.0));
    assert!(text.contains("# TYPE toolgate_decision_duration_seconds histogram"));
    assert!(text.contains("# TYPE toolgate_tool_decision_duration_seconds summary"));
    assert!(text.contains("toolgate_policy_info{revision=\"sha256:"));

    // A quarantine shows in its gauge.
    let body = json!({"agent": "dev-agent", "on": true, "reason": "test"}).to_string();
    let (s, v) = send(
        &app,
        "POST",
        "/v1/admin/quarantine",
        Some(ALICE),
        Some(&body),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(authorize(&app, DEV, &read).await["stage"], "quarantine");
    let (_, text) = send_text(&app, "/metrics").await;
    assert_eq!(line_value(&text, "toolgate_quarantined_agents "), Some(1.0));
    assert_eq!(
        line_value(
            &text,
            "toolgate_decisions_total{tool=\"read_file\",decision=\"deny\",stage=\"quarantine\"} "
        ),
        Some(1.0)
    );
}
