//! Quarantine through the real binary: an anomaly of a configured kind quarantines the agent
//! (every call denied, recorded), the quarantine survives a crash, and only a human the
//! policies allow releases it; owners may quarantine their own agents by hand.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::*;
use crate::process::{exchange, start_with};

const BOB: &str = "demo-bob-token";
const QUARANTINE: &str = "/v1/admin/quarantine";
const CONFIG: &str = "[anomaly]\nviolations_per_minute = 2\nquarantine_on = [\"violation_rate\"]\n";

fn call(port: u16, token: &str, args: Value) -> String {
    let body = json!({"tool": "read_file", "args": args});
    let (_, d) = exchange(port, "POST", "/v1/authorize", Some(token), Some(&body)).unwrap();
    format!(
        "{}/{}",
        d["decision"].as_str().unwrap(),
        d["stage"].as_str().unwrap()
    )
}

fn read(port: u16, token: &str) -> String {
    call(port, token, json!({"path": "README.md"}))
}

fn set(port: u16, token: &str, agent: &str, on: bool) -> (u16, Value) {
    let body = json!({"agent": agent, "on": on, "reason": "reviewed"});
    exchange(port, "POST", QUARANTINE, Some(token), Some(&body)).unwrap()
}

fn listed(port: u16) -> Vec<(String, String)> {
    let (s, v) = exchange(port, "GET", QUARANTINE, Some(ALICE), None).unwrap();
    assert_eq!(s, 200, "{v}");
    v["quarantined"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["principal"].as_str().unwrap().to_owned(),
                q["cause"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn audit_decisions(port: u16, decision: &str) -> Vec<Value> {
    let (s, v) = exchange(
        port,
        "GET",
        &format!("/v1/audit?decision={decision}"),
        Some(ALICE),
        None,
    )
    .unwrap();
    assert_eq!(s, 200, "{v}");
    v["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["entry"].clone())
        .collect()
}

#[test]
fn an_anomaly_quarantines_until_a_permitted_human_releases_even_across_a_crash() {
    let dir = TempSet::new();
    let server = start_with(&dir, CONFIG);
    let port = server.port;
    assert_eq!(read(port, DEV), "allow/policy");
    // Three policy denials in a minute: over 2, so violation_rate, so quarantine.
    for _ in 0..3 {
        assert_eq!(call(port, DEV, json!({"path": ".env"})), "deny/policy");
    }
    let start = Instant::now();
    while read(port, DEV) != "deny/quarantine" {
        assert!(start.elapsed() < Duration::from_secs(5), "not quarantined");
        std::thread::sleep(Duration::from_millis(20));
    }
    let body = json!({"tool": "read_file", "args": {"path": "README.md"}});
    let (_, d) = exchange(port, "POST", "/v1/authorize", Some(DEV), Some(&body)).unwrap();
    assert_eq!(d["errors"][0]["code"], "quarantined", "{d}");
    assert!(
        d["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("violation_rate"),
        "{d}"
    );
    // Other agents go on.
    assert_eq!(read(port, SRE), "allow/policy");
    assert_eq!(
        listed(port),
        [(
            "Agent::\"dev-agent\"".to_owned(),
            "violation_rate".to_owned()
        )]
    );
    let recorded = audit_decisions(port, "quarantined");
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0]["principal"], "Agent::\"dev-agent\"");
    // Agents neither see nor change the list.
    let (s, _) = exchange(port, "GET", QUARANTINE, Some(DEV), None).unwrap();
    assert_eq!(s, 403);
    assert_eq!(set(port, DEV, "dev-agent", false).0, 403);

    drop(server); // SIGKILL
    let server = start_with(&dir, CONFIG);
    let port = server.port;
    assert_eq!(read(port, DEV), "deny/quarantine", "lost across a crash");

    // bob owns sre-agent: he may quarantine it by hand, but not release it or dev-agent.
    assert_eq!(set(port, BOB, "sre-agent", true).0, 200);
    assert_eq!(read(port, SRE), "deny/quarantine");
    let (s, v) = set(port, BOB, "Agent::\"sre-agent\"", false);
    assert_eq!((s, v["error"].as_str()), (403, Some("not_eligible")), "{v}");
    assert_eq!(set(port, BOB, "dev-agent", false).0, 403);
    assert_eq!(set(port, BOB, "dev-agent", true).0, 403);
    assert_eq!(audit_decisions(port, "quarantine_refused").len(), 3);
    // Bad names are refused before anything else.
    for bad in ["Human::\"alice\"", "", "Agent::oops"] {
        let (s, v) = set(port, ALICE, bad, false);
        assert_eq!(
            (s, v["error"].as_str()),
            (400, Some("invalid_agent")),
            "{v}"
        );
    }
    // alice (a director) releases dev-agent; its history is forgotten, so its next calls
    // are decided by the policies again and do not re-quarantine it.
    let (s, v) = set(port, ALICE, "dev-agent", false);
    assert_eq!(s, 200, "{v}");
    assert_eq!(read(port, DEV), "allow/policy");
    assert_eq!(read(port, DEV), "allow/policy");
    let (s, v) = set(port, ALICE, "dev-agent", false);
    assert_eq!(
        (s, v["error"].as_str()),
        (404, Some("not_quarantined")),
        "{v}"
    );
    let released = audit_decisions(port, "quarantine_released");
    assert_eq!(released.len(), 1, "{released:?}");
    assert_eq!(released[0]["principal"], "Human::\"alice\"");
    assert!(
        released[0]["detail"]
            .as_str()
            .unwrap()
            .contains("dev-agent"),
        "{released:?}"
    );

    drop(server);
    let server = start_with(&dir, CONFIG);
    assert_eq!(read(server.port, DEV), "allow/policy", "release lost");
    assert_eq!(
        read(server.port, SRE),
        "deny/quarantine",
        "manual quarantine lost"
    );
    assert_eq!(
        listed(server.port),
        [("Agent::\"sre-agent\"".to_owned(), "manual".to_owned())]
    );
}

#[test]
fn quarantine_on_must_name_known_kinds_and_needs_the_detectors() {
    let dir = TempSet::new();
    for (extra, says) in [
        (
            "[anomaly]\nquarantine_on = [\"spikes\"]\n",
            "unknown kind `spikes`",
        ),
        (
            "[anomaly]\nenabled = false\nquarantine_on = [\"sequence\"]\n",
            "needs the detectors",
        ),
    ] {
        let err = crate::process::serve_refuses(&dir, extra);
        assert!(err.contains(says), "{err}");
        assert!(err.contains("anomaly.quarantine_on"), "{err}");
    }
}
