//! Audit shipping through the real binary: every committed record lands in the JSON Lines
//! file once, in order, chained (`prev` of each line is the `hash` of the one before), across
//! rotations and `kill -9` restarts, and a torn last line is dropped, not shipped twice.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::*;
use crate::process::{Server, exchange, metrics, start_with};

const SHIP: &str =
    "[audit]\nship_file = \"ship/audit.jsonl\"\nship_rotate_kb = 8\nship_keep = 100\n";

/// Every shipped line, oldest first: the rotated files (highest number first), then the file.
fn shipped(dir: &Path) -> Vec<Value> {
    let file = dir.join("ship/audit.jsonl");
    let mut files: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(dir.join("ship"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n = name.strip_prefix("audit.jsonl.")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.0));
    files.push((0, file));
    let mut out = Vec::new();
    for (_, f) in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for line in text.lines() {
            out.push(serde_json::from_str(line).unwrap_or_else(|e| panic!("{f:?}: {e}: {line}")));
        }
    }
    out
}

fn calls(server: &Server, n: usize) {
    for i in 0..n {
        let call = json!({"tool": "read_file", "args": {"path": format!("src/f{i}.rs")}});
        let (s, d) =
            exchange(server.port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
        assert_eq!((s, d["decision"].as_str()), (200, Some("allow")), "{d}");
    }
}

fn head(server: &Server) -> u64 {
    let (_, h) = exchange(server.port, "GET", "/v1/audit/head", Some(ALICE), None).unwrap();
    h["seq"].as_u64().unwrap()
}

/// Waits until the lines reach `seq`; then checks they are 1..=seq, each chained to the last.
fn complete_through(dir: &Path, seq: u64) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = shipped(dir);
        let last = lines.last().and_then(|l| l["seq"].as_u64()).unwrap_or(0);
        if last >= seq {
            let seqs: Vec<u64> = lines.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
            let want: Vec<u64> = (1..=last).collect();
            assert_eq!(seqs, want, "no gap, no duplicate");
            for pair in lines.windows(2) {
                assert_eq!(
                    pair[1]["prev"], pair[0]["hash"],
                    "chained: {}",
                    pair[1]["seq"]
                );
            }
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "shipped through {last}, not {seq}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn shipping_survives_kill_9_and_torn_lines_without_gap_or_duplicate() {
    let set = TempSet::new();
    let server = start_with(&set, SHIP);
    calls(&server, 30);
    let first = head(&server);
    complete_through(set.dir.path(), first);
    let rotated = set.dir.path().join("ship/audit.jsonl.1");
    assert!(rotated.exists(), "8 KiB files rotate");
    // The counters follow the file: lag 0 once it holds everything.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = metrics(server.port);
        if text.contains("toolgate_audit_ship_lag_records 0") {
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server); // SIGKILL

    // A crash in the middle of a line: the torn part is dropped at start, not shipped.
    let file = set.dir.path().join("ship/audit.jsonl");
    let mut torn = std::fs::read(&file).unwrap();
    torn.extend_from_slice(br#"{"seq": 99999, "prev": "#);
    std::fs::write(&file, torn).unwrap();
    let server = start_with(&set, SHIP);
    calls(&server, 20);
    let second = head(&server);
    assert!(second > first);
    let lines = complete_through(set.dir.path(), second);
    assert_eq!(lines.last().unwrap()["seq"].as_u64(), Some(second));

    // Killed again with records committed but maybe not shipped: the next start ships them.
    calls(&server, 5);
    let third = head(&server);
    drop(server);
    let server = start_with(&set, SHIP);
    complete_through(set.dir.path(), third);
    // And the decisions themselves are what the log holds: the same hashes.
    let (_, page) = exchange(server.port, "GET", "/v1/audit?limit=1", Some(ALICE), None).unwrap();
    let newest = &page["records"][0];
    let lines = complete_through(set.dir.path(), newest["seq"].as_u64().unwrap());
    let same = lines.iter().find(|l| l["seq"] == newest["seq"]).unwrap();
    assert_eq!(same["hash"], newest["hash"]);
}

#[test]
fn shipping_settings_are_checked_at_start() {
    let set = TempSet::new();
    let err = crate::process::serve_refuses(&set, "[audit]\nship_rotate_kb = 10\n");
    assert!(err.contains("need `audit.ship_file`"), "{err}");
    let err =
        crate::process::serve_refuses(&set, "[audit]\nship_file = \"a.jsonl\"\nship_keep = 0\n");
    assert!(err.contains("audit.ship_keep"), "{err}");
    set.write("not-a-log.jsonl", "hello\n");
    let err = crate::process::serve_refuses(&set, "[audit]\nship_file = \"not-a-log.jsonl\"\n");
    assert!(err.contains("is not an audit record"), "{err}");
}

#[test]
fn audit_export_works_online_on_a_running_sidecar() {
    let set = TempSet::new();
    let server = start_with(&set, SHIP);
    calls(&server, 6);
    let last = head(&server);
    let lines = complete_through(set.dir.path(), last);
    let url = server.url();
    let out = crate::process::toolgate(
        set.dir.path(),
        &["audit", "export", "--online", "--url", &url, "--from", "3"],
        &[("TOOLGATE_TOKEN", ALICE)],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exported: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The same records the ship file holds, from 3 on (the export may also hold the
    // records written since `last`).
    let shipped_from_3: Vec<&Value> = lines
        .iter()
        .filter(|l| l["seq"].as_u64() >= Some(3))
        .collect();
    assert_eq!(exported.first().unwrap()["seq"], 3);
    for (a, b) in shipped_from_3.iter().zip(&exported) {
        assert_eq!(a["hash"], b["hash"]);
    }
    // An agent's token cannot export.
    let out = crate::process::toolgate(
        set.dir.path(),
        &["audit", "export", "--online", "--url", &url],
        &[("TOOLGATE_TOKEN", DEV)],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("wrong_principal_kind"));
}

/// The log records the OTLP receiver decoded, in arrival order.
fn otlp_logs(out: &Path) -> Vec<Value> {
    let mut path = out.as_os_str().to_owned();
    path.push(".logs");
    std::fs::read_to_string(PathBuf::from(path))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Waits until the receiver holds every record through `seq` (a record sent twice, after a
/// crash, counts once); checks the chain and that each body is the record the log holds.
fn otlp_complete_through(out: &Path, seq: u64) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let logs = otlp_logs(out);
        let mut by_seq = std::collections::BTreeMap::new();
        for l in &logs {
            let s = l["attributes"]["toolgate.audit.seq"].as_i64().unwrap() as u64;
            let body: Value = serde_json::from_str(l["body"].as_str().unwrap()).unwrap();
            assert_eq!(body["seq"].as_u64(), Some(s), "{l}");
            assert_eq!(body["hash"], l["attributes"]["toolgate.audit.hash"], "{l}");
            if let Some(earlier) = by_seq.insert(s, body.clone()) {
                assert_eq!(earlier, body, "a record sent again is the same record");
            }
        }
        if by_seq.keys().next_back().copied().unwrap_or(0) >= seq {
            let seqs: Vec<u64> = by_seq.keys().copied().collect();
            assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "no gap");
            let bodies: Vec<Value> = by_seq.into_values().collect();
            for pair in bodies.windows(2) {
                assert_eq!(pair[1]["prev"], pair[0]["hash"], "chained");
            }
            return logs;
        }
        assert!(
            Instant::now() < deadline,
            "OTLP logs through {seq} not received"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn otlp_logs_reach_a_real_receiver_in_order_through_refusals_and_kill_9() {
    let Some(python) = crate::traces::receiver_python() else {
        return;
    };
    let set = TempSet::new();
    let rx = crate::traces::receiver(&python, set.dir.path());
    let config = format!(
        "[audit]\nship_otlp_url = \"http://127.0.0.1:{}/v1/logs\"\nship_otlp_timeout_ms = 2000\n",
        rx.http
    );
    let server = start_with(&set, &config);
    calls(&server, 10);
    let first = head(&server);
    let logs = otlp_complete_through(&rx.out, first);
    let one = &logs[0];
    assert_eq!(one["service"], "toolgate", "{one}");
    assert_eq!(one["scope"], "toolgate.audit", "{one}");
    assert_eq!(one["severity"], "INFO", "{one}");
    let decision = logs
        .iter()
        .find(|l| l["attributes"]["toolgate.audit.tool"] == "read_file")
        .unwrap();
    assert_eq!(decision["attributes"]["toolgate.audit.decision"], "allow");
    assert!(decision["time_unix_nano"].as_u64().unwrap() > 1_700_000_000_000_000_000);

    // A collector that refuses (503): retried from the same record, nothing skipped.
    let mut refuse = rx.out.as_os_str().to_owned();
    refuse.push(".refuse");
    std::fs::write(PathBuf::from(&refuse), "").unwrap();
    calls(&server, 5);
    let second = head(&server);
    let mut refused = rx.out.as_os_str().to_owned();
    refused.push(".refused");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !PathBuf::from(&refused).exists() {
        assert!(
            Instant::now() < deadline,
            "the sidecar never tried while refused"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = metrics(server.port);
    assert!(
        !text.contains("toolgate_audit_otlp_failures_total 0"),
        "{text}"
    );
    std::fs::remove_file(PathBuf::from(&refuse)).unwrap();
    otlp_complete_through(&rx.out, second);

    // kill -9, more records, a restart: it resumes from its position, no gap.
    drop(server);
    let server = start_with(&set, &config);
    calls(&server, 5);
    let third = head(&server);
    otlp_complete_through(&rx.out, third);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = metrics(server.port);
        if text.contains("toolgate_audit_otlp_lag_records 0") {
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Resumed, not started over: record 1 arrived once before the restart, and at most one
    // batch (the last before the kill) may arrive twice.
    let logs = otlp_logs(&rx.out);
    let ones = logs
        .iter()
        .filter(|l| l["attributes"]["toolgate.audit.seq"] == 1)
        .count();
    assert_eq!(ones, 1, "the restart did not ship from the start again");
}

#[test]
fn otlp_settings_are_checked_at_start() {
    let set = TempSet::new();
    for (extra, says) in [
        (
            "[audit]\nship_otlp_timeout_ms = 500\n",
            "needs `audit.ship_otlp_url`",
        ),
        (
            "[audit]\nship_otlp_url = \"grpc://c:4317\"\n",
            "not an http(s) URL",
        ),
        (
            "[audit]\nship_otlp_url = \"http://c:4318/v1/logs\"\nship_otlp_timeout_ms = 5\n",
            "`audit.ship_otlp_timeout_ms` = 5",
        ),
    ] {
        let err = crate::process::serve_refuses(&set, extra);
        assert!(err.contains(says), "{extra}: {err}");
    }
}
