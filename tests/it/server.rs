//! The real `toolgate serve` process on a loopback port: SIGHUP forces a reload, and a deeply
//! nested policy evaluates on the server's own threads (they need more than 2 MiB of stack), and
//! the threads carry the scheduler hints of `toolgate::sched`.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::*;
use crate::process::{metrics, request, start, start_configured};

fn revision(port: u16) -> String {
    request(port, "GET", "/readyz", None, None).unwrap()["revision"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn sighup_forces_a_reload_and_deep_policies_evaluate_on_server_threads() {
    let set = TempSet::new();
    // `apply`: this is about SIGHUP; without a solver the added forbid could not be proved
    // narrowing and would be held under the default `hold`.
    let server = start_configured(&set, "", "widening = \"apply\"", &[]);
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

/// `(nice, slice in ns)` of each of the process's threads named `name`, from `/proc`.
#[cfg(target_os = "linux")]
fn threads_named(pid: u32, name: &str) -> Vec<(i64, Option<u64>)> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = task.unwrap().path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue; // the thread ended meanwhile
        };
        if comm.trim() != name {
            continue;
        }
        let sched = std::fs::read_to_string(dir.join("sched")).unwrap();
        let field = |key: &str| {
            sched.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == key)
                    .then(|| v.trim().parse::<i64>().ok())
                    .flatten()
            })
        };
        let prio = field("prio").unwrap();
        found.push((prio - 120, field("se.slice").map(|v| v as u64)));
    }
    found
}

#[cfg(target_os = "linux")]
#[test]
fn serving_threads_preempt_the_reload_thread() {
    let set = TempSet::new();
    let server = start(&set);
    let pid = server.child.id();
    let workers = threads_named(pid, "tokio-rt-worker");
    assert!(!workers.is_empty(), "no runtime worker threads found");
    let reload = threads_named(pid, "toolgate-reload");
    assert_eq!(reload.len(), 1, "{reload:?}");
    let (reload_nice, reload_slice) = reload[0];
    assert_eq!(reload_nice, 19, "the reload thread runs at nice 19");
    // Kernels that show the slice (6.6+) and accept a requested one (6.12+) must have it.
    let supports_slices = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .and_then(|r| {
            let mut v = r.trim().split(['.', '-']).map(|p| p.parse::<u32>().ok());
            Some((v.next()??, v.next()??))
        })
        .is_some_and(|v| v >= (6, 12));
    if supports_slices {
        for (nice, slice) in &workers {
            assert_eq!(*nice, 0);
            assert_eq!(
                *slice,
                Some(toolgate::sched::SERVING_SLICE_NS),
                "{workers:?}"
            );
        }
        assert_ne!(reload_slice, Some(toolgate::sched::SERVING_SLICE_NS));
    }
}
