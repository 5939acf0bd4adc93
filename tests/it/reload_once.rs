//! Regression (issue 21, item 8): each broken policy edit was logged twice as a failed reload.
//! Any later trigger on the same broken files (the next file-system event in a watched
//! directory, such as an editor's swap file or the server's own log, the 30 s full re-read, a
//! SIGHUP) re-reported the kept failure, and the watcher recorded it again; a held change was
//! recorded again the same way. One distinct state now gives one record. And a SIGHUP that
//! found the trigger queue full was lost without a trace. All through the real binary, with
//! file-system events on.

use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::helpers::*;
use crate::process::{Server, request, start_watching};

/// Events, a fast poll and a short debounce, so every trigger path runs within the test.
const WATCHING: &str = "watch = true\npoll_ms = 200\ndebounce_ms = 50";

/// Long enough for the debounce, several polls and any trailing events to have run.
const SETTLE: Duration = Duration::from_millis(1200);

/// The decisions of the `reload` records, oldest first.
fn reload_decisions(port: u16) -> Vec<String> {
    let log = request(
        port,
        "GET",
        "/v1/audit?stage=reload&limit=1000",
        Some(ALICE),
        None,
    )
    .unwrap();
    let mut records: Vec<&Value> = log["records"].as_array().unwrap().iter().collect();
    records.sort_by_key(|r| r["seq"].as_u64());
    records
        .iter()
        .map(|r| {
            r["entry"]["decision"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

fn count(decisions: &[String], what: &str) -> usize {
    decisions.iter().filter(|d| *d == what).count()
}

/// Waits (10 s at most) until `/v1/policies` satisfies `done`.
fn wait_policies(port: u16, what: &str, done: impl Fn(&Value) -> bool) {
    let start = Instant::now();
    loop {
        let status = request(port, "GET", "/v1/policies", Some(ALICE), None).unwrap();
        if done(&status) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: {status}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn error_message(status: &Value) -> &str {
    status["last_reload_error"]["message"]
        .as_str()
        .unwrap_or_default()
}

/// How editors save: the new text in a temp file next to the target, renamed over it.
fn save_by_rename(path: &Path, text: &str) {
    let tmp = path.with_file_name(".tiers.cedar.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// How other editors save: truncate in place, write in several pieces, sync.
fn save_in_place(path: &Path, text: &str) {
    let mut f = std::fs::File::create(path).unwrap();
    for piece in text.as_bytes().chunks(64) {
        f.write_all(piece).unwrap();
        f.flush().unwrap();
    }
    f.sync_all().unwrap();
}

fn sighup(server: &Server) {
    let status = Command::new("kill")
        .args(["-HUP", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// What keeps happening while the files stay as they are: an editor's swap file written in
/// the watched directory, and a forced reload.
fn poke(server: &Server, policies: &Path) {
    std::fs::write(policies.join(".tiers.cedar.swp"), b"swap").unwrap();
    std::thread::sleep(SETTLE);
    sighup(server);
    std::thread::sleep(SETTLE);
}

#[test]
fn each_distinct_broken_policy_state_is_recorded_as_one_failed_reload() {
    let set = TempSet::new();
    let policies = set.policies();
    let tiers = policies.join("tiers.cedar");
    let good = std::fs::read_to_string(&tiers).unwrap();
    let server = start_watching(&set, &format!("{WATCHING}\nwidening = \"apply\""));
    let port = server.port;
    wait_policies(port, "startup", |s| s["revision"].is_string());
    std::thread::sleep(SETTLE);
    let before = reload_decisions(port);
    assert_eq!(count(&before, "failed"), 0, "{before:?}");

    // A first broken edit, saved by rename.
    let broken_a = format!("{good}\npermit(principal, action, resource\n");
    save_by_rename(&tiers, &broken_a);
    wait_policies(port, "the first broken edit was never seen", |s| {
        !error_message(s).is_empty()
    });
    std::thread::sleep(SETTLE);
    poke(&server, &policies);
    let after_a = reload_decisions(port);
    assert_eq!(
        count(&after_a, "failed"),
        1,
        "one broken state: {after_a:?}"
    );

    // A different broken edit, written in place (truncate, several writes).
    let first_error = {
        let s = request(port, "GET", "/v1/policies", Some(ALICE), None).unwrap();
        s["last_reload_error"].clone()
    };
    let broken_b = format!("{good}\nforbid(principal, action, resource) when {{ nope }};\n");
    save_in_place(&tiers, &broken_b);
    wait_policies(port, "the second broken edit was never seen", |s| {
        !error_message(s).is_empty() && s["last_reload_error"] != first_error
    });
    std::thread::sleep(SETTLE);
    poke(&server, &policies);
    let after_b = reload_decisions(port);
    assert_eq!(
        count(&after_b, "failed"),
        2,
        "a second broken state: {after_b:?}"
    );

    // Fixed (a new good set): applied once, the failure cleared.
    save_by_rename(&tiers, &format!("{good}\n// reviewed\n"));
    wait_policies(port, "the fix was never applied", |s| {
        s["last_reload_error"].is_null()
    });
    std::thread::sleep(SETTLE);
    std::fs::write(policies.join(".tiers.cedar.swp"), b"swap again").unwrap();
    std::thread::sleep(SETTLE);
    let fixed = reload_decisions(port);
    assert_eq!(count(&fixed, "failed"), 2, "{fixed:?}");
    assert_eq!(
        count(&fixed, "applied") - count(&before, "applied"),
        1,
        "{fixed:?}"
    );
    assert_eq!(
        fixed.last().map(String::as_str),
        Some("applied"),
        "{fixed:?}"
    );

    // Broken again exactly as the first time, after a good state: a new record.
    save_by_rename(&tiers, &broken_a);
    wait_policies(port, "the repeated broken edit was never seen", |s| {
        !error_message(s).is_empty()
    });
    std::thread::sleep(SETTLE);
    poke(&server, &policies);
    let again = reload_decisions(port);
    assert_eq!(count(&again, "failed"), 3, "{again:?}");
    assert_eq!(
        again.last().map(String::as_str),
        Some("failed"),
        "{again:?}"
    );

    // Undone back to the live files: nothing new to apply, but the log says the files are in
    // force again, once; and the next identical break counts again.
    save_by_rename(&tiers, &format!("{good}\n// reviewed\n"));
    wait_policies(port, "the undo was never seen", |s| {
        s["last_reload_error"].is_null()
    });
    std::thread::sleep(SETTLE);
    std::fs::write(policies.join(".tiers.cedar.swp"), b"swap once more").unwrap();
    std::thread::sleep(SETTLE);
    let undone = reload_decisions(port);
    assert_eq!(undone.len(), again.len() + 1, "{undone:?}");
    assert_eq!(
        undone.last().map(String::as_str),
        Some("applied"),
        "{undone:?}"
    );
    save_in_place(&tiers, &broken_a);
    wait_policies(port, "the last broken edit was never seen", |s| {
        !error_message(s).is_empty()
    });
    std::thread::sleep(SETTLE);
    let last = reload_decisions(port);
    assert_eq!(count(&last, "failed"), 4, "{last:?}");
}

#[test]
fn a_held_policy_change_is_recorded_once_while_it_waits() {
    let set = TempSet::new();
    let policies = set.policies();
    // The default widening: hold.
    let server = start_watching(&set, WATCHING);
    let port = server.port;
    wait_policies(port, "startup", |s| s["revision"].is_string());
    std::thread::sleep(SETTLE);

    let tiers = policies.join("tiers.cedar");
    let text = std::fs::read_to_string(&tiers).unwrap();

    // Removing a file of forbids widens every write: held.
    std::fs::remove_file(&tiers).unwrap();
    wait_policies(port, "the change was never held", |s| {
        s["held"]["revision"].is_string()
    });
    std::thread::sleep(SETTLE);
    poke(&server, &policies);
    let decisions = reload_decisions(port);
    assert_eq!(count(&decisions, "held"), 1, "{decisions:?}");
    assert_eq!(count(&decisions, "failed"), 0, "{decisions:?}");

    // Undone: the held change is gone, and the log says the files are in force again, once.
    std::fs::write(&tiers, &text).unwrap();
    wait_policies(port, "the undo was never seen", |s| s["held"].is_null());
    std::thread::sleep(SETTLE);
    std::fs::write(policies.join(".tiers.cedar.swp"), b"swap again").unwrap();
    std::thread::sleep(SETTLE);
    let undone = reload_decisions(port);
    assert_eq!(undone.len(), decisions.len() + 1, "{undone:?}");
    assert_eq!(
        undone.last().map(String::as_str),
        Some("applied"),
        "{undone:?}"
    );

    // Held again (a new record), then approved: the approval route records it, and the
    // watcher, finding the files live, adds nothing.
    std::fs::remove_file(&tiers).unwrap();
    wait_policies(port, "the change was never held again", |s| {
        s["held"]["revision"].is_string()
    });
    std::thread::sleep(SETTLE);
    let status = request(port, "GET", "/v1/policies", Some(ALICE), None).unwrap();
    let held = status["held"]["revision"].clone();
    let again = reload_decisions(port);
    assert_eq!(count(&again, "held"), 2, "{again:?}");
    let (code, body) = crate::process::exchange(
        port,
        "POST",
        "/v1/policies/held/approve",
        Some(ALICE),
        Some(&serde_json::json!({ "revision": held })),
    )
    .unwrap();
    assert_eq!(code, 200, "{body}");
    let approved = reload_decisions(port);
    std::fs::write(policies.join(".tiers.cedar.swp"), b"swap after approval").unwrap();
    std::thread::sleep(SETTLE);
    let after = reload_decisions(port);
    assert_eq!(after, approved, "{after:?}");
    assert_eq!(
        after.last().map(String::as_str),
        Some("applied"),
        "{after:?}"
    );
}

/// The `reload` records' entries, oldest first.
fn reload_entries(port: u16) -> Vec<Value> {
    let log = request(
        port,
        "GET",
        "/v1/audit?stage=reload&limit=1000",
        Some(ALICE),
        None,
    )
    .unwrap();
    let mut records: Vec<Value> = log["records"].as_array().unwrap().clone();
    records.sort_by_key(|r| r["seq"].as_u64());
    records.into_iter().map(|r| r["entry"].clone()).collect()
}

/// A SIGHUP sent while a long reload runs and a burst of events fills the trigger queue (a
/// `git checkout` in the policies directory) was dropped: no forced reload, no record.
#[test]
fn a_sighup_during_a_long_reload_and_a_burst_of_events_is_not_lost() {
    let set = TempSet::new();
    let policies = set.policies();
    let server = start_watching(
        &set,
        "watch = true\npoll_ms = 0\ndebounce_ms = 50\nwidening = \"apply\"",
    );
    let port = server.port;
    wait_policies(port, "startup", |s| s["revision"].is_string());
    std::thread::sleep(SETTLE);
    let live = request(port, "GET", "/v1/policies", Some(ALICE), None).unwrap()["revision"].clone();

    // A large set: building and reviewing it keeps the reload thread busy for seconds.
    let big: String = (0..2000)
        .map(|i| {
            format!(
                "@id(\"f{i}\")\nforbid (principal, action == Action::\"echo\", resource) when {{ context.args.message == \"m{i}\" }};\n"
            )
        })
        .collect();
    let tmp = policies.join(".big.tmp");
    std::fs::write(&tmp, big).unwrap();
    std::fs::rename(&tmp, policies.join("big.cedar")).unwrap();
    // Past the debounce: the reload runs. Then a burst of events, then SIGHUP.
    std::thread::sleep(Duration::from_millis(400));
    let busy = request(port, "GET", "/v1/policies", Some(ALICE), None).unwrap();
    assert_eq!(
        busy["revision"], live,
        "the reload must still be running: {busy}"
    );
    for i in 0..200 {
        std::fs::write(policies.join(".big.cedar.swp"), format!("swap {i}")).unwrap();
    }
    sighup(&server);

    // The big set applies, then the forced reload re-parses it: `applied` from it to itself.
    let start = Instant::now();
    loop {
        let entries = reload_entries(port);
        let forced = entries.iter().any(|e| {
            e["decision"] == "applied"
                && e["policy_revision"] != live
                && e["detail"].as_str().is_some_and(|d| {
                    let rev = e["policy_revision"].as_str().unwrap_or_default();
                    d.starts_with(&format!("from {rev} to {rev}"))
                })
        });
        if forced {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the SIGHUP was lost: {entries:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
