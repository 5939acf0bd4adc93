//! `POST /v1/execute` through the router with the real launcher (the `toolgate` binary): runaway
//! tools are stopped (timeout, ignored SIGTERM, fork bomb, a gigabyte of output) and leave no
//! process behind; payloads reach the program as one argv element each; path arguments cannot
//! leave the service root; option-like values are refused; output is parsed, stripped, cut and
//! audited with resource usage.

use std::path::Path;

use axum::Router;
use axum::http::StatusCode;
use serde_json::{Value, json};
use toolgate::api::router;
use toolgate::exec::{ExecSettings, Runner};
use toolgate::gateway::Gateway;
use toolgate::policy::load;
use toolgate::tools::Programs;

use crate::helpers::*;

/// Programs the test tools may run.
const PROGRAMS: [&str; 6] = ["printf", "git", "npm", "sh", "cat", "seq"];

struct Rig {
    app: Router,
    state: Gateway,
    root: tempfile::TempDir,
    outside: tempfile::TempDir,
    _set: TempSet,
}

fn tool(name: &str, props: Value, executor: Value, extra: Value) -> Value {
    let mut m = json!({
        "name": name,
        "description": format!("test tool {name}"),
        "inputSchema": {"type": "object", "properties": props, "additionalProperties": false},
        "risk": "low",
        "classification": "read",
        "limits": {"timeout_ms": 5000, "max_output_bytes": 65536},
        "executor": executor,
    });
    if let (Some(m), Some(e)) = (m.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            m.insert(k.clone(), v.clone());
        }
    }
    m
}

async fn rig(tools: &[Value]) -> Rig {
    let set = TempSet::new();
    for t in tools {
        set.write(
            &format!("schemas/tools/{}.json", t["name"].as_str().unwrap()),
            &t.to_string(),
        );
    }
    set.regenerate_schema();
    let programs = Programs::resolve(PROGRAMS.iter().map(|s| (*s).to_owned()));
    let mut sources = set.sources();
    sources.programs = programs.clone();
    let snap = load(&sources).expect("test tools load").snapshot;
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let settings = ExecSettings {
        root: Some(root.path().to_path_buf()),
        programs,
        grace_ms: 300,
        ..ExecSettings::default()
    };
    let runner = Runner::start(settings, env!("CARGO_BIN_EXE_toolgate").into())
        .await
        .unwrap();
    assert_eq!(runner.protections().error, None);
    let state = Gateway::new(snap, demo_auth(), 64 * 1024)
        .unwrap()
        .with_exec(runner);
    Rig {
        app: router(state.clone()),
        state,
        root,
        outside,
        _set: set,
    }
}

async fn run(app: &Router, tool: &str, args: Value) -> (StatusCode, Value) {
    execute(app, DEV, tool, args).await
}

fn sh(name: &str, script: &str, extra: Value) -> Value {
    tool(
        name,
        json!({}),
        json!({"program": "sh", "argv": ["-c", script]}),
        extra,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runaway_tools_are_stopped_and_leave_nothing_behind() {
    let r = rig(&[
        sh(
            "spin",
            "while :; do :; done # marker-spin-7f3a",
            json!({"limits": {"timeout_ms": 800, "max_output_bytes": 1024}}),
        ),
        sh(
            "stubborn",
            "trap '' TERM; sleep 60 & while :; do :; done # marker-stub-7f3a",
            json!({"limits": {"timeout_ms": 500, "max_output_bytes": 1024}}),
        ),
        sh(
            "bomb",
            "f() {{ f | f & }}; f; sleep 30 # marker-bomb-7f3a",
            json!({"limits": {"timeout_ms": 3000, "max_output_bytes": 4096},
                   "executor": {"program": "sh", "argv": ["-c", "f() {{ f | f & }}; f; sleep 30 # marker-bomb-7f3a"], "limits": {"processes": 40}}}),
        ),
        sh(
            "daemon",
            "setsid sleep 120 & echo started # marker-daemon-7f3a",
            json!({}),
        ),
    ])
    .await;
    // An infinite loop: stopped at the timeout (TERM is enough for sh).
    let started = std::time::Instant::now();
    let (s, v) = run(&r.app, "spin", json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "error");
    assert_eq!(v["error"]["code"], "timeout", "{v}");
    assert_eq!(v["metadata"]["timed_out"], true);
    assert!(v["metadata"]["cpu_ms"].as_u64().unwrap() > 100, "{v}");
    assert!(started.elapsed().as_millis() < 3000);
    // Ignores SIGTERM (and has a child): KILLed after the grace period.
    let (_, v) = run(&r.app, "stubborn", json!({})).await;
    assert_eq!(v["error"]["code"], "timeout", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("killed"),
        "{v}"
    );
    assert_eq!(v["metadata"]["signal"], 9);
    // A fork bomb: the process limit stops the forks; the timeout ends the rest.
    let (_, v) = run(&r.app, "bomb", json!({})).await;
    assert_eq!(v["status"], "error", "{v}");
    let stderr = v["stderr"].as_str().unwrap_or("");
    assert!(
        stderr.contains("fork") || stderr.contains("Resource temporarily unavailable"),
        "the process limit should refuse forks: {v}"
    );
    // A child that left the process group (setsid) is still killed when the tool exits.
    let (_, v) = run(&r.app, "daemon", json!({})).await;
    assert_eq!(v["status"], "success", "{v}");
    assert_eq!(v["data"], "started\n");
    for marker in ["marker-spin", "marker-stub", "marker-bomb", "marker-daemon"] {
        assert_eq!(survivors(marker), Vec::<String>::new(), "{marker} survived");
    }
    assert!(survivors("sleep 120").is_empty() && survivors("sleep 60").is_empty());
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gigabyte_of_output_is_capped_with_bounded_memory() {
    let r = rig(&[sh(
        "flood",
        "yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c 1000000000",
        json!({"limits": {"timeout_ms": 60000, "max_output_bytes": 65536}}),
    )])
    .await;
    let before = rss_kib();
    let (s, v) = run(&r.app, "flood", json!({})).await;
    let grew = rss_kib().saturating_sub(before);
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "success", "{v}");
    assert_eq!(v["metadata"]["bytes"], 1_000_000_000u64);
    assert_eq!(v["metadata"]["truncated"], true);
    let data = v["data"].as_str().unwrap();
    assert!(data.len() < 66_000, "{}", data.len());
    assert!(data.ends_with(&format!("[TRUNCATED] ({} bytes)", 1_000_000_000 - 65536)));
    assert!(grew < 64 * 1024, "the sidecar grew by {grew} KiB");
}

/// Payloads a shell would interpret; through the shipped `echo` tool each must come back as
/// sent and create nothing.
const PAYLOADS: [&str; 16] = [
    "; touch PWNED",
    "$(touch PWNED)",
    "`touch PWNED`",
    "| touch PWNED",
    "&& touch PWNED",
    "|| touch PWNED",
    "> PWNED",
    "< /etc/passwd",
    "a\ntouch PWNED",
    "'\"'\"'; touch PWNED",
    "${IFS}touch${IFS}PWNED",
    "*",
    "%s%n%x\\x41\\n",
    "-n --help",
    "--exec=touch PWNED",
    "-oProxyCommand=touch PWNED",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_metacharacters_come_back_byte_for_byte() {
    let r = rig(&[]).await;
    for p in PAYLOADS {
        let (s, v) = run(&r.app, "echo", json!({"message": p})).await;
        assert_eq!(s, StatusCode::OK, "{p}: {v}");
        assert_eq!(v["data"], p, "{v}");
        assert_eq!(v["metadata"]["exit_code"], 0);
    }
    assert!(!r.root.path().join("PWNED").exists());
    assert!(std::fs::read_dir(r.root.path()).unwrap().next().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn option_like_values_and_bad_paths_are_refused_before_running() {
    let target = tool(
        "fetch_ref",
        json!({"target": {"type": "string"}}),
        json!({"program": "printf", "argv": ["[%s]", "{target}"]}),
        json!({}),
    );
    let r = rig(&[target]).await;
    for payload in [
        "--upload-pack=touch PWNED",
        "-oProxyCommand=x",
        "--exec=id",
        "-",
    ] {
        let (s, v) = run(&r.app, "fetch_ref", json!({"target": payload})).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
        assert_eq!(v["error"]["code"], "option_injection");
    }
    let (s, v) = run(&r.app, "fetch_ref", json!({"target": "main"})).await;
    assert_eq!((s, v["data"].clone()), (StatusCode::OK, json!("[main]")));
    // The shipped git tools' patterns refuse option-like revisions outright.
    let (s, v) = run(&r.app, "git_log", json!({"rev": "--output=/tmp/x"})).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    assert_eq!(v["decision"]["stage"], "validation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_arguments_cannot_reach_outside_the_root() {
    let cat = tool(
        "show",
        json!({"path": {"type": "string"}}),
        json!({"program": "cat", "argv": ["--", "{path}"]}),
        json!({"path_args": ["path"]}),
    );
    let r = rig(&[cat]).await;
    let root = r.root.path();
    let out = r.outside.path();
    let attempts = hostile_tree(root, out);
    std::fs::write(root.join("%2e%2e"), "literal name").unwrap();
    for a in &attempts {
        let (s, v) = run(&r.app, "show", json!({"path": a})).await;
        let text = v.to_string();
        assert!(!text.contains("CANARY"), "{a}: {text}");
        assert!(!text.contains("root:x:0:0"), "{a}: {text}");
        assert_ne!(v["status"], "success", "{a}: {v}");
        assert!(s.is_client_error(), "{a}: {s} {v}");
    }
    let (_, v) = run(&r.app, "show", json!({"path": "%2e%2e"})).await;
    assert_eq!(v["data"], "literal name", "{v}");
    let (_, v) = run(&r.app, "show", json!({"path": "sub/../ok.txt"})).await;
    assert_eq!(v["data"], "fine", "{v}");
    // A link flipped between a good file and the canary while calls run: never the canary.
    let flip = root.join("flip");
    link("ok.txt", &flip);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flipper = {
        let (stop, flip, canary) = (stop.clone(), flip.clone(), out.join("canary"));
        std::thread::spawn(move || {
            let tmp = flip.with_extension("tmp");
            let mut good = true;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::remove_file(&tmp);
                let to = if good {
                    Path::new("ok.txt")
                } else {
                    canary.as_path()
                };
                std::os::unix::fs::symlink(to, &tmp).unwrap();
                std::fs::rename(&tmp, &flip).unwrap();
                good = !good;
            }
        })
    };
    for _ in 0..100 {
        let (_, v) = run(&r.app, "show", json!({"path": "flip"})).await;
        assert!(!v.to_string().contains("CANARY"), "{v}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    flipper.join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_is_parsed_stripped_cut_and_audited() {
    let r = rig(&[
        sh("json_out", "printf '{{\"a\": [1, 2]}}'", json!({"executor": {"program": "sh", "argv": ["-c", "printf '{{\"a\": [1, 2]}}'"], "parser": "json"}})),
        sh("colors", "printf '\\033[31mred\\033[0m plain'", json!({})),
        tool(
            "count",
            json!({"n": {"type": "integer", "minimum": 1}}),
            json!({"program": "seq", "argv": ["1", "{n}"], "truncate": {"keep": "tail", "lines": 3}}),
            json!({}),
        ),
        sh("flaky", "exit 75", json!({"executor": {"program": "sh", "argv": ["-c", "exit 75"], "retry": {"exit_codes": [75], "attempts": 2, "backoff_ms": 10}}})),
        sh("leaky", &format!("printf 'key {AWS}'"), json!({})),
    ])
    .await;
    let (_, v) = run(&r.app, "json_out", json!({})).await;
    assert_eq!(v["data"], json!({"a": [1, 2]}), "{v}");
    let (_, v) = run(&r.app, "colors", json!({})).await;
    assert_eq!(v["data"], "red plain");
    let (_, v) = run(&r.app, "count", json!({"n": 10000})).await;
    let data = v["data"].as_str().unwrap();
    assert!(data.starts_with("[TRUNCATED] ("), "{data}");
    assert!(data.ends_with("\n9998\n9999\n10000\n"), "{data}");
    let (_, v) = run(&r.app, "flaky", json!({})).await;
    assert_eq!(v["metadata"]["attempts"], 3, "{v}");
    assert_eq!(v["error"]["code"], "exit_nonzero");
    let (_, v) = run(&r.app, "leaky", json!({})).await;
    assert_eq!(v["data"], "key <redacted:aws-access-key>", "{v}");
    assert_eq!(v["output"]["decision"], "mask");
    // Every run is in the audit log with its resource usage, never its output.
    let records = recorded_at(&r.state.audit, "execution");
    let runs: Vec<_> = records
        .iter()
        .filter(|x| x.entry.kind == toolgate::audit::EntryKind::Execution)
        .collect();
    assert_eq!(runs.len(), 5);
    for x in &runs {
        let d = x.entry.detail.as_deref().unwrap();
        assert!(d.contains("cpu_ms=") && d.contains("max_rss_bytes="), "{d}");
        assert!(!serde_json::to_string(&x.entry).unwrap().contains(AWS));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execution_needs_an_allow_and_an_executor() {
    let risky = tool(
        "risky",
        json!({}),
        json!({"program": "printf", "argv": ["ran"]}),
        json!({"risk": "high"}),
    );
    let r = rig(&[risky]).await;
    // A high-risk tool: 202 pending with the approval id, nothing run.
    let (s, v) = run(&r.app, "risky", json!({})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["status"], "pending");
    assert!(v["approval_id"].is_string(), "{v}");
    assert_eq!(v["data"], Value::Null);
    // No executor: 409, and nothing decided.
    let (s, v) = run(&r.app, "http_fetch", json!({"url": "https://example.com/"})).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(v["error"]["code"], "not_executable");
    // npm install is refused by the argument policy; without a token, 401.
    let (s, v) = run(&r.app, "install_deps", json!({"command": "install"})).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    assert_eq!(v["decision"]["reasons"], json!(["install-lockfile-only"]));
    let (s, _) = send(
        &r.app,
        "POST",
        "/v1/execute",
        None,
        Some(&json!({"tool": "echo", "args": {"message": "x"}}).to_string()),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // Execution off: 503 with what to set.
    let off = router(shipped_state());
    let (s, v) = run(&off, "echo", json!({"message": "x"})).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert_eq!(v["error"]["code"], "execution_off");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_counted_per_tool_by_how_they_ended() {
    let r = rig(&[
        sh("ok", "echo fine", json!({})),
        sh("fails", "echo broken; exit 3", json!({})),
        sh(
            "slow",
            "sleep 5",
            json!({"limits": {"timeout_ms": 300, "max_output_bytes": 1024}}),
        ),
        sh(
            "chatty",
            "yes | head -c 100000",
            json!({"limits": {"timeout_ms": 5000, "max_output_bytes": 1024}}),
        ),
        tool(
            "fetch_ref",
            json!({"target": {"type": "string"}}),
            json!({"program": "printf", "argv": ["[%s]", "{target}"]}),
            json!({}),
        ),
    ])
    .await;
    for (t, args) in [
        ("ok", json!({})),
        ("ok", json!({})),
        ("fails", json!({})),
        ("slow", json!({})),
        ("chatty", json!({})),
        ("fetch_ref", json!({"target": "--exec=id"})),
    ] {
        run(&r.app, t, args).await;
    }
    let (_, text) = crate::helpers::send_text(&r.app, "/metrics").await;
    for line in [
        r#"toolgate_tool_runs_total{tool="ok",result="success"} 2"#,
        r#"toolgate_tool_runs_total{tool="fails",result="exit_nonzero"} 1"#,
        r#"toolgate_tool_runs_total{tool="slow",result="timeout"} 1"#,
        r#"toolgate_tool_run_truncations_total{tool="chatty"} 1"#,
        r#"toolgate_tool_run_refusals_total{tool="fetch_ref",code="option_injection"} 1"#,
        r#"toolgate_tool_run_duration_seconds_count{tool="ok"} 2"#,
    ] {
        assert!(text.contains(line), "{line} not in:\n{text}");
    }
    assert!(!text.contains("--exec"), "no argument values in labels");
}
