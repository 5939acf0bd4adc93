//! The built-in file tools through `POST /v1/execute` over the shipped policies: every tool and
//! every error code, approvals for writes and deletions, secrets blocked before a write, the
//! output gate on reads, locks (busy while another process holds one, free once it is killed),
//! parallel edits without a lost update or a torn file, and property tests of
//! `edit_file` (the file equals the model after a good edit list, is byte-identical after an
//! aborted one).

use axum::Router;
use axum::http::StatusCode;
use serde_json::{Value, json};
use toolgate::api::router;
use toolgate::exec::{ExecSettings, Runner};
use toolgate::gateway::Gateway;
use toolgate::policy::Snapshot;

use crate::helpers::*;

const BOB: &str = "demo-bob-token";

pub(crate) struct Rig {
    pub(crate) app: Router,
    pub(crate) state: Gateway,
    pub(crate) root: tempfile::TempDir,
    pub(crate) locks: tempfile::TempDir,
}

impl Rig {
    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.root.path().join(rel)
    }
    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }
}

pub(crate) async fn rig_with(snap: Snapshot, lock_timeout_ms: u64) -> Rig {
    let root = tempfile::tempdir().unwrap();
    let locks = tempfile::tempdir().unwrap();
    let settings = ExecSettings {
        root: Some(root.path().to_path_buf()),
        lock_dir: Some(locks.path().to_path_buf()),
        lock_timeout_ms,
        // As a config below the root would: the sidecar's own files.
        protected: vec![
            root.path().join("toolgate-data"),
            root.path().join("policies"),
        ],
        ..ExecSettings::default()
    };
    let runner = Runner::start(settings, env!("CARGO_BIN_EXE_toolgate").into())
        .await
        .unwrap();
    let state = Gateway::new(snap, demo_auth(), 4 * 1024 * 1024)
        .unwrap()
        .with_exec(runner);
    Rig {
        app: router(state.clone()),
        state,
        root,
        locks,
    }
}

async fn rig() -> Rig {
    rig_with(shipped_snapshot(), 2000).await
}

/// Sends the call; if it is pending, `approver` approves it and the call is sent again.
async fn approved(
    app: &Router,
    token: &str,
    approver: &str,
    tool: &str,
    args: Value,
) -> (StatusCode, Value) {
    let (s, v) = execute(app, token, tool, args.clone()).await;
    if s != StatusCode::ACCEPTED {
        return (s, v);
    }
    let id = v["approval_id"].as_str().unwrap().to_owned();
    let (s, a) = send(
        app,
        "POST",
        &format!("/v1/approvals/{id}/approve"),
        Some(approver),
        Some("{}"),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{a}");
    post(
        app,
        "/v1/execute",
        token,
        &json!({"tool": tool, "args": args, "approval_id": id}),
    )
    .await
}

pub(crate) fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_lists_searches_and_counts() {
    let r = rig().await;
    std::fs::create_dir_all(r.path("src/deep")).unwrap();
    std::fs::create_dir_all(r.path(".git")).unwrap();
    std::fs::write(
        r.path("src/main.rs"),
        "fn main() {\n    println!(\"hi\");\n}\n",
    )
    .unwrap();
    std::fs::write(
        r.path("src/deep/lib.rs"),
        "pub fn one() {}\npub fn two() {}\n",
    )
    .unwrap();
    std::fs::write(r.path(".env"), "TOKEN=x").unwrap();
    std::fs::write(r.path(".git/config"), "fn hidden() {}").unwrap();
    std::fs::write(r.path("blob.bin"), b"\x7fELF\x00\x01").unwrap();
    std::fs::write(r.path("latin1.txt"), b"caf\xe9").unwrap();
    std::fs::write(r.path("big.txt"), "x".repeat(200_000)).unwrap();
    std::fs::write(r.path("leak.txt"), format!("key = {AWS}\n")).unwrap();
    std::os::unix::fs::symlink("src/main.rs", r.path("main_link")).unwrap();

    let (s, v) = execute(&r.app, DEV, "read_file", json!({"path": "src/main.rs"})).await;
    assert_eq!(
        (s, v["status"].as_str()),
        (StatusCode::OK, Some("success")),
        "{v}"
    );
    assert_eq!(
        v["data"]["content"],
        "fn main() {\n    println!(\"hi\");\n}\n"
    );
    assert_eq!(
        (v["data"]["lines"].as_u64(), v["data"]["bytes"].as_u64()),
        (Some(3), Some(34))
    );
    // Through a link inside the root: the resolved path is answered.
    let (_, v) = execute(&r.app, DEV, "read_file", json!({"path": "main_link"})).await;
    assert_eq!(v["data"]["path"], "src/main.rs", "{v}");
    let cases = [
        (json!({"path": "blob.bin"}), "not_text", "binary"),
        (json!({"path": "latin1.txt"}), "not_text", "UTF-8"),
        (json!({"path": "big.txt"}), "too_large", "max_bytes"),
        (
            json!({"path": "src/main.rs", "max_bytes": 5}),
            "too_large",
            "max_bytes",
        ),
        (json!({"path": "nope.txt"}), "file_not_found", "list_files"),
        (json!({"path": "src"}), "not_a_file", "list_files"),
    ];
    for (args, want, hint) in cases {
        let (s, v) = execute(&r.app, DEV, "read_file", args.clone()).await;
        assert_eq!((s, code(&v)), (StatusCode::OK, want), "{args}: {v}");
        assert_eq!(v["status"], "error");
        let text = format!("{} {}", v["error"]["message"], v["error"]["suggestion"]);
        assert!(text.contains(hint), "{args}: {v}");
    }
    let (_, v) = execute(
        &r.app,
        DEV,
        "read_file",
        json!({"path": "big.txt", "max_bytes": 300000}),
    )
    .await;
    assert_eq!(v["data"]["bytes"], 200_000);
    // The output gate screens what is read.
    let (_, v) = execute(&r.app, DEV, "read_file", json!({"path": "leak.txt"})).await;
    assert!(!v.to_string().contains(AWS), "{v}");
    assert_ne!(v["output"]["found"], 0, "{v}");

    // Listing: deny-listed names are not shown, links are shown as links.
    let (_, v) = execute(&r.app, DEV, "list_files", json!({"path": "."})).await;
    let names: Vec<&str> = v["data"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "big.txt",
            "blob.bin",
            "latin1.txt",
            "leak.txt",
            "main_link",
            "src"
        ],
        "{v}"
    );
    assert_eq!(v["data"]["entries"][4]["type"], "symlink");
    assert_eq!(v["data"]["entries"][0]["size"], 200_000);
    let (_, v) = execute(
        &r.app,
        DEV,
        "list_files",
        json!({"path": "src", "recursive": true}),
    )
    .await;
    assert_eq!(
        v["data"]["entries"],
        json!([
            {"path": "src/deep", "type": "dir"},
            {"path": "src/deep/lib.rs", "type": "file", "size": 32},
            {"path": "src/main.rs", "type": "file", "size": 34},
        ])
    );
    let (_, v) = execute(
        &r.app,
        DEV,
        "list_files",
        json!({"path": "src", "recursive": true, "max_depth": 1}),
    )
    .await;
    // One level down: src/deep's entries, not deeper.
    assert_eq!(v["data"]["entries"].as_array().unwrap().len(), 3, "{v}");
    let (_, v) = execute(
        &r.app,
        DEV,
        "list_files",
        json!({"recursive": true, "max_entries": 2}),
    )
    .await;
    assert_eq!(
        (
            v["data"]["entries"].as_array().unwrap().len(),
            &v["data"]["truncated"]
        ),
        (2, &json!(true))
    );
    let (_, v) = execute(&r.app, DEV, "list_files", json!({"path": "src/main.rs"})).await;
    assert_eq!(code(&v), "not_a_directory", "{v}");

    // Search: line numbers and snippets; deny-listed and binary files are never searched.
    let (_, v) = execute(&r.app, DEV, "search_files", json!({"regex": r"fn \w+\("})).await;
    assert_eq!(
        v["data"]["matches"],
        json!([
            {"path": "src/deep/lib.rs", "line": 1, "column": 5, "text": "pub fn one() {}"},
            {"path": "src/deep/lib.rs", "line": 2, "column": 5, "text": "pub fn two() {}"},
            {"path": "src/main.rs", "line": 1, "column": 1, "text": "fn main() {"},
        ]),
        "{v}"
    );
    assert_eq!(v["data"]["truncated"], false);
    // blob.bin and latin1.txt are not text; .env and .git are not even looked at.
    assert_eq!(v["data"]["files_skipped"], 2, "{v}");
    let (_, v) = execute(
        &r.app,
        DEV,
        "search_files",
        json!({"regex": "fn", "max_matches": 1}),
    )
    .await;
    assert_eq!(
        (
            v["data"]["stopped"].as_str(),
            v["data"]["truncated"].as_bool()
        ),
        (Some("max_matches"), Some(true))
    );
    let (_, v) = execute(
        &r.app,
        DEV,
        "search_files",
        json!({"regex": "(", "path": "src"}),
    )
    .await;
    assert_eq!(code(&v), "invalid_pattern", "{v}");
    let (_, v) = execute(
        &r.app,
        DEV,
        "search_files",
        json!({"regex": "(", "literal": true, "path": "src/main.rs"}),
    )
    .await;
    assert_eq!(v["data"]["matches"][0]["line"], 1, "{v}");

    // Counts, as edit_file counts.
    let (_, v) = execute(
        &r.app,
        DEV,
        "count_matches",
        json!({"regex": "pub fn", "path": "src"}),
    )
    .await;
    assert_eq!(v["data"]["total"], 2, "{v}");
    assert_eq!(
        v["data"]["files"],
        json!([{"path": "src/deep/lib.rs", "count": 2}])
    );
    let (_, v) = execute(
        &r.app,
        DEV,
        "count_matches",
        json!({"regex": "fn", "recursive": false}),
    )
    .await;
    assert_eq!(v["data"]["total"], 0, "{v}");
    // A pattern that hangs a backtracking engine is linear here.
    let (_, v) = execute(
        &r.app,
        DEV,
        "count_matches",
        json!({"regex": "(x+x+)+y", "path": "big.txt"}),
    )
    .await;
    assert_eq!(
        (v["status"].as_str(), v["data"]["total"].as_u64()),
        (Some("success"), Some(0)),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_need_approval_are_atomic_and_never_carry_a_secret() {
    let r = rig().await;
    std::fs::create_dir(r.path("docs")).unwrap();
    // High risk: pending until a human approves this exact call.
    let args = json!({"path": "docs/notes.md", "content": "# Notes\n"});
    let (s, v) = execute(&r.app, DEV, "write_file", args.clone()).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    assert!(!r.path("docs/notes.md").exists());
    let (s, v) = approved(&r.app, DEV, BOB, "write_file", args).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v["data"],
        json!({"path": "docs/notes.md", "bytes": 8, "created": true})
    );
    assert_eq!(r.read("docs/notes.md"), "# Notes\n");
    // Replacing keeps the file's mode and leaves no temporary file.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(
        r.path("docs/notes.md"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let (_, v) = approved(
        &r.app,
        DEV,
        BOB,
        "write_file",
        json!({"path": "docs/notes.md", "content": "v2"}),
    )
    .await;
    assert_eq!(v["data"]["created"], false, "{v}");
    assert_eq!(r.read("docs/notes.md"), "v2");
    let mode = std::fs::metadata(r.path("docs/notes.md"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(std::fs::read_dir(r.path("docs")).unwrap().count(), 1);
    // A secret in the content is denied at the gate: nothing is asked, nothing written.
    let (s, v) = execute(
        &r.app,
        DEV,
        "write_file",
        json!({"path": "docs/key.txt", "content": format!("aws {AWS}")}),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    assert_eq!(v["decision"]["stage"], "gate");
    assert!(!r.path("docs/key.txt").exists());
    // A missing directory, a directory as the target.
    let (_, v) = approved(
        &r.app,
        DEV,
        BOB,
        "write_file",
        json!({"path": "nodir/x.txt", "content": "x"}),
    )
    .await;
    assert_eq!(code(&v), "file_not_found", "{v}");
    let (_, v) = approved(
        &r.app,
        DEV,
        BOB,
        "write_file",
        json!({"path": "docs", "content": "x"}),
    )
    .await;
    assert_eq!(code(&v), "not_a_file", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_apply_all_or_nothing_with_codes_an_agent_can_act_on() {
    let r = rig().await;
    let original = "alpha\nbeta\nbeta\ngamma\nomega\n";
    std::fs::write(r.path("f.txt"), original).unwrap();
    let edit = |edits: Value| json!({"path": "f.txt", "edits": edits});
    let (s, v) = execute(&r.app, DEV, "edit_file", edit(json!([
        {"operation": "replace", "spec": "alpha", "content": "ALPHA"},
        {"operation": "delete", "spec": "beta\n", "count": 2},
        {"operation": "append_after", "spec": "gamma\n", "content": "delta\n"},
        {"operation": "prepend_before", "match_mode": "regex", "spec": "(?m)^om", "content": "# o\n"},
    ]))).await;
    assert_eq!(
        (s, v["status"].as_str()),
        (StatusCode::OK, Some("success")),
        "{v}"
    );
    assert_eq!(r.read("f.txt"), "ALPHA\ngamma\ndelta\n# o\nomega\n");
    assert_eq!(v["data"]["edits"][1], json!({"index": 1, "matches": 2}));
    std::fs::write(r.path("f.txt"), original).unwrap();
    let refusals = [
        (
            json!([{"operation": "replace", "spec": "beta", "content": "B"}]),
            "match_count_mismatch",
            "found 2",
        ),
        (
            json!([{"operation": "delete", "spec": "zeta"}]),
            "match_count_mismatch",
            "found 0",
        ),
        (
            json!([
                {"operation": "replace", "spec": "alpha", "content": "A"},
                {"operation": "replace", "spec": "ha\nbe", "content": "B"},
            ]),
            "overlapping_edits",
            "overlapping",
        ),
        (
            json!([{"operation": "replace", "spec": "alpha"}]),
            "invalid_edit",
            "required",
        ),
        (
            json!([{"operation": "replace", "match_mode": "regex", "spec": "(", "content": "x"}]),
            "invalid_edit",
            "regular expression",
        ),
    ];
    for (edits, want, hint) in refusals {
        let (s, v) = execute(&r.app, DEV, "edit_file", edit(edits.clone())).await;
        assert_eq!((s, code(&v)), (StatusCode::OK, want), "{edits}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(hint),
            "{v}"
        );
        assert!(!v["error"]["suggestion"].as_str().unwrap().is_empty());
        assert_eq!(r.read("f.txt"), original, "{edits} changed the file");
    }
    let (_, v) = execute(
        &r.app,
        DEV,
        "edit_file",
        json!({"path": "missing.txt", "edits": [{"operation": "delete", "spec": "x"}]}),
    )
    .await;
    assert_eq!(code(&v), "file_not_found", "{v}");
    // Edits to build and CI files wait for a human.
    std::fs::write(r.path("Cargo.toml"), "[package]\n").unwrap();
    let (s, v) = execute(&r.app, DEV, "edit_file", json!({"path": "Cargo.toml", "edits": [{"operation": "append_after", "spec": "[package]\n", "content": "x = 1\n"}]})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    assert_eq!(r.read("Cargo.toml"), "[package]\n");
    // The audit record names the outcome code.
    let recs = recorded_at(&r.state.audit, "execution");
    assert!(
        recs.iter()
            .any(|x| x.entry.reasons == ["match_count_mismatch"]),
        "{recs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletions_are_critical_and_only_of_files() {
    let r = rig().await;
    std::fs::write(r.path("old.log"), "bye").unwrap();
    std::fs::create_dir(r.path("dir")).unwrap();
    // Developers may not delete at all; SREs need a director's approval.
    let (s, v) = execute(&r.app, DEV, "delete_file", json!({"path": "old.log"})).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    let (s, v) = execute(&r.app, SRE, "delete_file", json!({"path": "old.log"})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    let id = v["approval_id"].as_str().unwrap();
    let (s, _) = send(
        &r.app,
        "POST",
        &format!("/v1/approvals/{id}/approve"),
        Some(BOB),
        Some("{}"),
    )
    .await;
    assert_eq!(
        s,
        StatusCode::FORBIDDEN,
        "an approver may not approve a critical call"
    );
    let (s, v) = approved(
        &r.app,
        SRE,
        ALICE,
        "delete_file",
        json!({"path": "old.log"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v["data"],
        json!({"path": "old.log", "bytes": 3, "deleted": true})
    );
    assert!(!r.path("old.log").exists());
    let (_, v) = approved(&r.app, SRE, ALICE, "delete_file", json!({"path": "dir"})).await;
    assert_eq!(code(&v), "not_a_file", "{v}");
    assert!(r.path("dir").is_dir());
    let (_, v) = approved(
        &r.app,
        SRE,
        ALICE,
        "delete_file",
        json!({"path": "old.log"}),
    )
    .await;
    assert_eq!(code(&v), "file_not_found", "{v}");
}

/// The lock file of `rel` in the rig's lock directory.
fn lock_path(r: &Rig, rel: &str) -> std::path::PathBuf {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(rel.as_bytes());
    r.locks
        .path()
        .join(format!("{}.lock", hex::encode(&digest[..16])))
}

/// Another process holding the lock of `lock` (an exclusive `flock`, as the sidecar takes
/// it): a shell that locks the file through `flock(1)` of util-linux, says so, and sleeps with
/// the lock open. Killed (SIGKILL) and reaped on drop.
struct Holder(std::process::Child);

impl Holder {
    fn lock(lock: &std::path::Path) -> Holder {
        use std::io::BufRead as _;
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                r#"exec 9>"$1" && flock -x 9 && echo held && exec sleep 30"#,
                "sh",
            ])
            .arg(lock)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let holder = Holder(child);
        assert_eq!(
            line, "held\n",
            "the holder needs `flock` (util-linux) on PATH"
        );
        holder
    }

    /// SIGKILL, as a sidecar killed mid-edit: nothing of the holder's runs after it.
    fn kill(mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn replace_a_with(to: &str) -> Value {
    json!({"path": "f.txt", "edits": [{"operation": "replace", "spec": "a", "content": to}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_by_a_live_process_makes_an_edit_wait_then_answer_busy() {
    let r = rig_with(shipped_snapshot(), 300).await;
    std::fs::write(r.path("f.txt"), "a\n").unwrap();
    let holder = Holder::lock(&lock_path(&r, "f.txt"));
    let started = std::time::Instant::now();
    let (s, v) = execute(&r.app, DEV, "edit_file", replace_a_with("b")).await;
    let waited = started.elapsed();
    assert_eq!((s, code(&v)), (StatusCode::OK, "resource_busy"), "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("waited"),
        "{v}"
    );
    assert!(
        waited >= std::time::Duration::from_millis(300),
        "{waited:?}"
    );
    assert_eq!(r.read("f.txt"), "a\n");
    let recs = recorded_at(&r.state.audit, "execution");
    assert_eq!(recs.last().unwrap().entry.reasons, ["resource_busy"]);
    // However long it is held, a live holder's lock is never taken from it.
    let (_, v) = execute(&r.app, DEV, "edit_file", replace_a_with("b")).await;
    assert_eq!(code(&v), "resource_busy", "{v}");
    drop(holder);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_whose_holder_was_killed_blocks_no_edit() {
    let r = rig_with(shipped_snapshot(), 10_000).await;
    std::fs::write(r.path("f.txt"), "a\n").unwrap();
    let lock = lock_path(&r, "f.txt");
    // Killed while holding the lock: its lock file is left behind, its lock is not.
    Holder::lock(&lock).kill();
    assert!(lock.exists());
    let started = std::time::Instant::now();
    let (_, v) = execute(&r.app, DEV, "edit_file", replace_a_with("b")).await;
    assert_eq!(v["status"], "success", "{v}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "no wait for a dead holder: {:?}",
        started.elapsed()
    );
    assert_eq!(r.read("f.txt"), "b\n");
    assert!(!lock.exists(), "the lock file goes with its release");

    // Two edits waiting on a live holder go through, one after the other, once it is killed.
    std::fs::write(r.path("f.txt"), "a\nc\n").unwrap();
    let holder = Holder::lock(&lock);
    let edits = [("a", "x"), ("c", "y")].map(|(spec, to)| {
        let app = r.app.clone();
        let args =
            json!({"path": "f.txt", "edits": [{"operation": "replace", "spec": spec, "content": to}]});
        tokio::spawn(async move { execute(&app, DEV, "edit_file", args).await })
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(
        edits.iter().all(|e| !e.is_finished()),
        "both wait for the lock"
    );
    assert_eq!(r.read("f.txt"), "a\nc\n");
    let killed = std::time::Instant::now();
    holder.kill();
    for edit in edits {
        let (_, v) = edit.await.unwrap();
        assert_eq!(v["status"], "success", "{v}");
    }
    assert!(killed.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(r.read("f.txt"), "x\ny\n");
    assert!(!lock.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_edits_lose_no_update_and_never_tear_the_file() {
    let r = rig_with(shipped_snapshot(), 20_000).await;
    std::fs::write(r.path("list.txt"), "BEGIN\nEND\n").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (stop, file) = (stop.clone(), r.path("list.txt"));
        std::thread::spawn(move || {
            let mut reads = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let text = std::fs::read_to_string(&file).unwrap();
                assert!(
                    text.starts_with("BEGIN\n") && text.ends_with("END\n"),
                    "torn: {text:?}"
                );
                reads += 1;
            }
            reads
        })
    };
    let calls = (0..32).map(|i| {
        let app = r.app.clone();
        tokio::spawn(async move {
            let args = json!({"path": "list.txt", "edits": [
                {"operation": "prepend_before", "spec": "END\n", "content": format!("item {i}\n")}
            ]});
            execute(&app, DEV, "edit_file", args).await
        })
    });
    for call in calls.collect::<Vec<_>>() {
        let (s, v) = call.await.unwrap();
        assert_eq!(
            (s, v["status"].as_str()),
            (StatusCode::OK, Some("success")),
            "{v}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
    let text = r.read("list.txt");
    let mut items: Vec<&str> = text.lines().filter(|l| l.starts_with("item ")).collect();
    items.sort();
    let mut want: Vec<String> = (0..32).map(|i| format!("item {i}")).collect();
    want.sort();
    assert_eq!(items, want, "{text}");
    assert_eq!(
        std::fs::read_dir(r.root.path()).unwrap().count(),
        1,
        "no temporary file is left"
    );
}

/// A file of `n` numbered lines and an edit list over distinct lines, with the text the
/// model says the file must hold afterwards.
fn model(lines: &[String], picks: &[(usize, u8)]) -> (Value, String) {
    let mut edits = Vec::new();
    let mut out = String::new();
    let mut chosen = std::collections::BTreeMap::new();
    for &(i, op) in picks {
        chosen.entry(i % lines.len()).or_insert(op % 4);
    }
    for (i, line) in lines.iter().enumerate() {
        let new = format!("new {i}\n");
        match chosen.get(&i) {
            None => out.push_str(line),
            Some(0) => {
                edits.push(json!({"operation": "replace", "spec": line, "content": new}));
                out.push_str(&new);
            }
            Some(1) => {
                edits.push(json!({"operation": "append_after", "spec": line, "content": new}));
                out.push_str(line);
                out.push_str(&new);
            }
            Some(2) => {
                edits.push(json!({"operation": "prepend_before", "spec": line, "content": new}));
                out.push_str(&new);
                out.push_str(line);
            }
            Some(_) => edits.push(json!({"operation": "delete", "spec": line})),
        }
    }
    (json!(edits), out)
}

#[test]
fn edit_lists_match_the_model_and_aborted_ones_change_nothing() {
    use proptest::prelude::*;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt.block_on(rig());
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 64,
        ..proptest::test_runner::Config::default()
    });
    let strategy = (
        prop::collection::vec("[a-z ]{0,12}", 1..20),
        prop::collection::vec((0usize..40, 0u8..4), 1..8),
        0u8..3,
    );
    runner
        .run(&strategy, |(words, picks, abort)| {
            let lines: Vec<String> = words
                .iter()
                .enumerate()
                .map(|(i, w)| format!("line-{i}: {w}\n"))
                .collect();
            let original: String = lines.concat();
            std::fs::write(r.path("p.txt"), &original).unwrap();
            let (mut edits, want) = model(&lines, &picks);
            let first = edits[0]["spec"].clone();
            // Abort kinds: 0 none, 1 a spec that is not there, 2 an edit overlapping another.
            match abort {
                1 => edits
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"operation": "delete", "spec": "absent\n"})),
                2 => edits
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"operation": "replace", "spec": first, "content": "x"})),
                _ => {}
            }
            let (s, v) = rt.block_on(execute(
                &r.app,
                DEV,
                "edit_file",
                json!({"path": "p.txt", "edits": edits}),
            ));
            prop_assert_eq!(s, StatusCode::OK);
            let now = std::fs::read(r.path("p.txt")).unwrap();
            if abort == 0 {
                prop_assert_eq!(&v["status"], "success", "{}", v);
                prop_assert_eq!(String::from_utf8(now).unwrap(), want);
            } else {
                let want_code = if abort == 1 {
                    "match_count_mismatch"
                } else {
                    "overlapping_edits"
                };
                prop_assert_eq!(code(&v), want_code, "{}", v);
                prop_assert_eq!(now, original.into_bytes());
            }
            Ok(())
        })
        .unwrap();
}
