//! The real `toolgate serve` process on a loopback port: SIGHUP forces a reload, and a deeply
//! nested policy evaluates on the server's own threads (they need more than 2 MiB of stack).

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::*;
use crate::process::{metrics, request, start};

fn revision(port: u16) -> String {
    request(port, "GET", "/readyz", None, None).unwrap()["revision"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn sighup_forces_a_reload_and_deep_policies_evaluate_on_server_threads() {
    let set = TempSet::new();
    let server = start(&set);
    // The watcher re-checks once at startup; wait for it, so only SIGHUP can reload from here.
    let start = Instant::now();
    while !metrics(server.port).contains("toolgate_policy_reloads_total{result=\"unchanged\"} 1") {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no startup re-check"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = revision(server.port);

    set.write("policies/chain.cedar", &long_or_chain_policy(80));
    // Watching and polling are off: nothing changes until SIGHUP.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(revision(server.port), before);
    let status = Command::new("kill")
        .args(["-HUP", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let start = Instant::now();
    while revision(server.port) == before {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "SIGHUP did not reload"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let echo = |m: &str| {
        request(
            server.port,
            "POST",
            "/v1/authorize",
            Some(DEV),
            Some(&json!({"tool": "echo", "args": {"message": m}})),
        )
        .unwrap()
    };
    let got = echo("m79");
    assert_eq!(
        (got["decision"].as_str(), got["errors"][0]["code"].as_str()),
        (Some("deny"), Some("forbidden")),
        "{got}"
    );
    assert_eq!(echo("hello")["decision"], "allow");
}
