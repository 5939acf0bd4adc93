//! Regression (issue 20, item 4): reload failed open. A policy file replaced by a dangling
//! symlink, a directory or a FIFO was skipped in silence and the rest of the set applied, so
//! with `tiers.cedar` pointing nowhere a high-risk write ran without approval. Every entry named
//! like a source must be a readable regular file (or a symlink to one), at start and at reload;
//! on failure the last good set stays, `/readyz` says so and the audit log records it. And a
//! widening change is held under the default config. All through the real binary.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::*;
use crate::process::{Server, request, start};

/// How an entry named like a policy file is broken.
#[derive(Debug, Clone, Copy)]
enum Broken {
    DanglingSymlink,
    Directory,
    Fifo,
}

const ALL: [Broken; 3] = [Broken::DanglingSymlink, Broken::Directory, Broken::Fifo];

/// Replaces `path` (a file) with a broken entry of the same name.
fn break_entry(path: &Path, how: Broken) {
    std::fs::remove_file(path).unwrap();
    match how {
        Broken::DanglingSymlink => {
            let target = Path::new("gone").join(path.file_name().unwrap());
            std::os::unix::fs::symlink(target, path).unwrap();
        }
        Broken::Directory => std::fs::create_dir(path).unwrap(),
        Broken::Fifo => {
            let status = Command::new("mkfifo").arg(path).status().unwrap();
            assert!(status.success(), "mkfifo {}", path.display());
        }
    }
}

/// Puts `text` back as a regular file at `path`, whatever is there now.
fn restore(path: &Path, text: &str) {
    if path.symlink_metadata().unwrap().is_dir() {
        std::fs::remove_dir(path).unwrap();
    } else {
        std::fs::remove_file(path).unwrap();
    }
    std::fs::write(path, text).unwrap();
}

fn sighup(server: &Server) {
    let status = Command::new("kill")
        .args(["-HUP", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

fn readyz(port: u16) -> Value {
    request(port, "GET", "/readyz", None, None).unwrap()
}

/// Polls `/readyz` until `done` holds (30 s at most: a held change waits for a cvc5 proof,
/// which takes seconds on a loaded machine).
fn wait_ready(port: u16, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let ready = readyz(port);
        if done(&ready) {
            return ready;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{what}: {ready}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn decision(port: u16, token: &str, call: &Value) -> String {
    let got = request(port, "POST", "/v1/authorize", Some(token), Some(call)).unwrap();
    got["decision"].as_str().unwrap_or_default().to_owned()
}

fn write_call() -> Value {
    json!({"tool": "write_file", "args": {"path": "notes.txt", "content": "x"}})
}

fn push_call() -> Value {
    json!({"tool": "git_push", "args": {"remote": "origin", "branch": "feature/x"}})
}

/// The last good set's answers: each of these flips to `allow` without `tiers.cedar`.
fn assert_tiers_in_force(port: u16, why: &str) {
    assert_eq!(
        decision(port, DEV, &write_call()),
        "pending_approval",
        "{why}: a high-risk write needs approval"
    );
    assert_eq!(
        decision(port, RELEASE, &push_call()),
        "pending_approval",
        "{why}: a push is critical, approved by a director"
    );
    assert_eq!(
        decision(port, DEV, &push_call()),
        "deny",
        "{why}: only release managers push"
    );
}

#[test]
fn a_policy_file_replaced_by_a_dangling_symlink_a_directory_or_a_fifo_keeps_the_last_good_set() {
    let set = TempSet::new();
    let tiers = set.policies().join("tiers.cedar");
    let text = std::fs::read_to_string(&tiers).unwrap();
    let server = start(&set);
    let port = server.port;
    let good = wait_ready(port, "startup", |r| r["ready"] == true)["revision"].clone();
    assert_tiers_in_force(port, "before");

    for how in ALL {
        break_entry(&tiers, how);
        sighup(&server);
        let ready = wait_ready(port, "the broken entry was never reported", |r| {
            r["degraded"] == true
        });
        assert_eq!(
            ready["ready"], true,
            "{how:?}: the last good set serves: {ready}"
        );
        assert_eq!(ready["revision"], good, "{how:?}: {ready}");
        assert!(
            ready["last_reload_error_at"]
                .as_str()
                .is_some_and(|at| at.ends_with("tiers.cedar")),
            "{how:?}: {ready}"
        );
        assert_tiers_in_force(port, &format!("{how:?}"));
        let status = request(port, "GET", "/v1/policies", Some(ALICE), None).unwrap();
        let message = status["last_reload_error"]["message"]
            .as_str()
            .unwrap_or("");
        let kind = match how {
            Broken::DanglingSymlink => "is a symlink to `gone/tiers.cedar`, which does not exist",
            Broken::Directory => "is a directory, not a regular file",
            Broken::Fifo => "is a FIFO (named pipe), not a regular file",
        };
        assert!(message.contains(kind), "{how:?}: {status}");

        // Fixed: the same revision as before, so nothing needs approval.
        restore(&tiers, &text);
        sighup(&server);
        wait_ready(port, "the fix was never picked up", |r| {
            r["degraded"] == false
        });
    }

    // Each refused reload is in the audit log, naming the file.
    let log = request(port, "GET", "/v1/audit?stage=reload", Some(ALICE), None).unwrap();
    let failed: Vec<&Value> = log["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["entry"])
        .filter(|e| e["decision"] == "failed")
        .collect();
    assert_eq!(failed.len(), ALL.len(), "{log}");
    for r in failed {
        assert!(r["detail"].as_str().unwrap().contains("tiers.cedar"), "{r}");
    }
}

/// A ConfigMap-style symlink to a regular file keeps working (the fix must not refuse it).
#[test]
fn a_policy_file_that_is_a_symlink_to_a_regular_file_still_loads() {
    let set = TempSet::new();
    let tiers = set.policies().join("tiers.cedar");
    let data = set.dir.path().join("..data");
    std::fs::create_dir(&data).unwrap();
    std::fs::rename(&tiers, data.join("tiers.cedar")).unwrap();
    std::os::unix::fs::symlink("../..data/tiers.cedar", &tiers).unwrap();
    let out = on(&set, "validate").output().unwrap();
    assert_ok(&out);
    let server = start(&set);
    wait_ready(server.port, "startup", |r| {
        r["ready"] == true && r["degraded"] == false
    });
    assert_tiers_in_force(server.port, "through a symlink");
}

/// Runs `toolgate validate` on `set`, killed after 20 s: a FIFO opened blocking would hang it.
fn validate_bounded(set: &TempSet) -> (Option<i32>, String) {
    let mut child = on(set, "validate")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`toolgate validate` blocked (a FIFO opened for reading?)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn broken_source_entries_at_start_fail_validate_and_serve_naming_the_file() {
    // Every kind of source: a policy file, the entities file, the schema, a tool manifest.
    let entries = [
        "policies/tiers.cedar",
        "policies/entities.json",
        "schemas/toolgate.cedarschema",
        "schemas/tools/write_file.json",
    ];
    for entry in entries {
        for how in ALL {
            let set = TempSet::new();
            break_entry(&set.dir.path().join(entry), how);
            let (code, err) = validate_bounded(&set);
            assert_eq!(code, Some(1), "{entry} as {how:?}: {err}");
            let name = Path::new(entry).file_name().unwrap().to_str().unwrap();
            let said = |l: &str| {
                l.contains(name)
                    && (l.contains("not a regular file") || l.contains("which does not exist"))
            };
            assert!(err.lines().any(said), "{entry} as {how:?}: {err}");
        }
    }

    // `serve` with no good set ever: reports the file, serves nothing, is not ready.
    for how in ALL {
        let set = TempSet::new();
        break_entry(&set.policies().join("tiers.cedar"), how);
        let server = start(&set);
        let ready = readyz(server.port);
        assert_eq!(ready["ready"], false, "{how:?}: {ready}");
        assert!(
            ready["last_reload_error_at"]
                .as_str()
                .is_some_and(|at| at.ends_with("tiers.cedar")),
            "{how:?}: {ready}"
        );
        assert_eq!(decision(server.port, DEV, &write_call()), "deny", "{how:?}");
        drop(server);
        let log = std::fs::read_to_string(set.dir.path().join("serve.log")).unwrap();
        assert!(log.contains("tiers.cedar"), "{how:?}: {log}");
    }
}

/// Restarted over a broken entry, `serve` keeps the remembered last good set (stale), not
/// the set without the file.
#[test]
fn a_restart_over_a_dangling_policy_symlink_serves_the_remembered_set() {
    let set = TempSet::new();
    let good = {
        let server = start(&set);
        wait_ready(server.port, "startup", |r| r["ready"] == true)["revision"].clone()
    };
    break_entry(&set.policies().join("tiers.cedar"), Broken::DanglingSymlink);
    let server = start(&set);
    let ready = readyz(server.port);
    assert_eq!(
        (&ready["ready"], &ready["policy_origin"], &ready["revision"]),
        (&json!(true), &json!("remembered"), &good),
        "{ready}"
    );
    assert_tiers_in_force(server.port, "after a restart");
}

#[test]
fn a_widening_change_is_held_under_the_default_config() {
    let set = TempSet::new();
    // The default config: no `widening` key.
    let server = start(&set);
    let port = server.port;
    let live = wait_ready(port, "startup", |r| r["ready"] == true)["revision"].clone();
    let solver = toolgate::review::diff::find_solver().is_ok();
    let ready = readyz(port);
    assert_eq!(ready["solver"]["present"], solver, "{ready}");
    assert_eq!(ready["solver"]["widening"], "hold", "{ready}");
    assert!(
        ready["solver"].get("path").is_none(),
        "no path without a credential"
    );

    // Removing a file of forbids widens every write.
    std::fs::remove_file(set.policies().join("tiers.cedar")).unwrap();
    sighup(&server);
    let ready = wait_ready(port, "the change was never held", |r| {
        r["held_revision"].is_string()
    });
    assert_eq!(ready["revision"], live, "{ready}");
    assert_tiers_in_force(port, "held");
    let status = request(port, "GET", "/v1/policies", Some(ALICE), None).unwrap();
    assert_eq!(status["held"]["review"]["proved"], solver, "{status}");
    assert_eq!(status["solver"]["present"], solver, "{status}");
    if solver {
        let widened = status["held"]["review"]["widened"].to_string();
        assert!(widened.contains("write_file"), "{status}");
    }
    let log = request(port, "GET", "/v1/audit?stage=reload", Some(ALICE), None).unwrap();
    assert!(
        log["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["entry"]["decision"] == "held"),
        "{log}"
    );
}

/// `toolgate test` reads fixtures the same way: a fixture entry that is not a regular file is
/// an error, not a file of cases quietly left out.
#[test]
fn a_broken_fixture_entry_fails_toolgate_test_naming_it() {
    for how in ALL {
        let set = TempSet::new();
        let fixture = set.policies().join("tests/tiers.json");
        break_entry(&fixture, how);
        let out = on(&set, "test").output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{how:?}: {err}");
        assert!(err.contains("tiers.json"), "{how:?}: {err}");
    }
}
