//! OpenTelemetry traces, end to end: a real `toolgate serve` exports to a real OTLP receiver
//! (tests/otlp/receiver.py, which decodes ExportTraceServiceRequest with the official
//! protobuf definitions of PyPI `opentelemetry-proto`), over OTLP/HTTP and OTLP/gRPC. Checked:
//! one root span per request with a child per stage and one per gate (`guardrail.<gate>`),
//! a blocked call's spans in error, no argument value anywhere in what was sent, an incoming
//! `traceparent` as the root's parent, its trace id in the audit record, and the context a
//! program sees in `TRACEPARENT` (the execution span's, or with traces off the caller's).
//!
//! The receiver's Python packages come from `.ci/otlp-deps` (`TOOLGATE_OTLP_DEPS`, default
//! `/opt/toolgate-ci/otlp`); without them the receiver tests say so and pass, unless
//! `TOOLGATE_REQUIRE_OTLP=1` (CI), where they fail.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::*;
use crate::process::exchange;

/// The caller's context in the tests: trace 4bf9…4736, parent span 00f0…02b7, sampled.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";
/// Words sent as arguments; none may reach the receiver.
const MARKER: &str = "hello-marker-91c4e7";

fn traceparent(trace: &str, parent: &str) -> String {
    format!("00-{trace}-{parent}-01")
}

/// The receiver's venv, or `None` (skipped) when it is not installed.
pub(crate) fn receiver_python() -> Option<PathBuf> {
    let root = PathBuf::from(
        std::env::var("TOOLGATE_OTLP_DEPS").unwrap_or_else(|_| "/opt/toolgate-ci/otlp".to_owned()),
    );
    let python = root.join("bin/python3");
    let ok = python.exists()
        && Command::new(&python)
            .args([
                "-c",
                "import grpc; from opentelemetry.proto.collector.trace.v1 import trace_service_pb2",
            ])
            .status()
            .is_ok_and(|s| s.success());
    if ok {
        return Some(python);
    }
    assert!(
        std::env::var("TOOLGATE_REQUIRE_OTLP").as_deref() != Ok("1"),
        "TOOLGATE_REQUIRE_OTLP=1 but the OTLP receiver's packages are missing under {}: run .ci/otlp-deps",
        root.display()
    );
    eprintln!(
        "SKIPPED: the OTLP receiver's packages are not installed under {} (run .ci/otlp-deps)",
        root.display()
    );
    None
}

/// A child process killed when the test ends, pass or fail.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) struct Receiver {
    _child: Killed,
    pub(crate) out: PathBuf,
    pub(crate) http: u16,
    grpc: u16,
}

pub(crate) fn receiver(python: &Path, dir: &Path) -> Receiver {
    let out = dir.join("spans.jsonl");
    let mut child = Command::new(python)
        .arg(repo().join("tests/otlp/receiver.py"))
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let ports: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    Receiver {
        _child: Killed(child),
        out,
        http: u16::try_from(ports["http"].as_u64().unwrap()).unwrap(),
        grpc: u16::try_from(ports["grpc"].as_u64().unwrap()).unwrap(),
    }
}

/// A tool that prints the `TRACEPARENT` it was given.
fn show_trace_tool() -> Value {
    json!({
        "name": "show_trace",
        "description": "prints the trace context it runs under",
        "inputSchema": {"type": "object", "properties": {}, "additionalProperties": false},
        "risk": "low",
        "classification": "read",
        "limits": {"timeout_ms": 5000, "max_output_bytes": 4096},
        "executor": {"program": "sh", "argv": ["-c", "printf %s \"$TRACEPARENT\""]},
    })
}

struct Sidecar {
    child: Killed,
    port: u16,
    log: PathBuf,
    _set: TempSet,
}

/// A temp set (the shipped one plus `show_trace`) and a config over it, running tools, with
/// `telemetry` as its `[telemetry]` section (empty: traces off), listening on the port given.
fn configured(telemetry: &str) -> (TempSet, PathBuf, u16) {
    let set = TempSet::new();
    set.write(
        "schemas/tools/show_trace.json",
        &show_trace_tool().to_string(),
    );
    set.regenerate_schema();
    std::fs::create_dir(set.dir.path().join("root")).unwrap();
    let port = free_port();
    let config = set.dir.path().join("toolgate.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\npolicies_dir = \"policies\"\nschemas_dir = \"schemas\"\n[auth]\ntokens_file = \"{}\"\n[reload]\nwatch = false\npoll_ms = 0\n[audit]\ncache_mb = 4\n[exec]\nroot = \"root\"\nprograms = [\"git\", \"printf\", \"npm\", \"sh\"]\n[telemetry]\n{telemetry}\n",
            repo().join("examples/demo-tokens.json").display()
        ),
    )
    .unwrap();
    (set, config, port)
}

/// `toolgate serve` over [`configured`]'s set and config, sending batches every 100 ms.
fn sidecar(telemetry: &str) -> Sidecar {
    sidecar_batching(telemetry, "100")
}

/// [`sidecar`], sending batches every `batch_ms` (the SDK reads `OTEL_BSP_SCHEDULE_DELAY`).
fn sidecar_batching(telemetry: &str, batch_ms: &str) -> Sidecar {
    let (set, config, port) = configured(telemetry);
    let log = set.dir.path().join("serve.log");
    let child = toolgate()
        .args(["serve", "--config"])
        .arg(&config)
        .env_remove("TOOLGATE_DATA_DIR")
        .env_remove("TOOLGATE_LISTEN")
        .env_remove("RUST_LOG")
        .env("OTEL_BSP_SCHEDULE_DELAY", batch_ms)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    let start = Instant::now();
    while exchange(port, "GET", "/readyz", None, None).is_none_or(|(s, _)| s != 200) {
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!(
                "serve exited ({status}): {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "not ready: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Sidecar {
        child,
        port,
        log,
        _set: set,
    }
}

/// One POST with the dev agent's token and, when given, a `traceparent` header.
fn post(port: u16, path: &str, body: &Value, traceparent: Option<&str>) -> (u16, Value) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = body.to_string();
    let tp = traceparent
        .map(|t| format!("traceparent: {t}\r\n"))
        .unwrap_or_default();
    let text = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {DEV}\r\n{tp}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(text.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.split(' ').nth(1).unwrap().parse().unwrap();
    let json = serde_json::from_str(out.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    (status, json)
}

/// The audit record with id `id` (a decision or execution id), read by a human.
fn audit_record(port: u16, id: &str) -> Value {
    let (status, page) = exchange(port, "GET", "/v1/audit?limit=100", Some(ALICE), None).unwrap();
    assert_eq!(status, 200, "{page}");
    page["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["entry"]["id"] == id)
        .unwrap_or_else(|| panic!("no audit record {id}: {page}"))["entry"]
        .clone()
}

/// The spans received so far.
fn received(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Waits (15 s at most) until, for each `(name, n)` of `want`, `n` spans named `name` (the
/// requests' roots) arrived; their children end first, so they arrived with them or before.
fn roots_arrived(out: &Path, want: &[(&str, usize)], log: &Path) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let spans = received(out);
        let count = |name: &str| spans.iter().filter(|s| s["name"] == name).count();
        if want.iter().all(|(name, n)| count(name) >= *n) {
            return spans;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "not all of {want:?} arrived; spans: {spans:?}; log: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn root_of<'a>(spans: &'a [Value], decision_id: &str) -> &'a Value {
    spans
        .iter()
        .find(|s| s["attributes"]["toolgate.decision_id"] == decision_id)
        .unwrap_or_else(|| panic!("no root span for {decision_id}: {spans:?}"))
}

fn children<'a>(spans: &'a [Value], root: &Value) -> Vec<&'a Value> {
    spans
        .iter()
        .filter(|s| s["parent_span_id"] == root["span_id"])
        .collect()
}

fn names(spans: &[&Value]) -> Vec<String> {
    let mut n: Vec<String> = spans
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect();
    n.sort();
    n
}

/// Status codes of OTLP's `Status.code`.
const UNSET: u64 = 0;
const ERROR: u64 = 2;

/// The stages every decided call goes through, in span names.
const DECISION_STAGES: [&str; 7] = [
    "approval",
    "audit",
    "auth",
    "guardrail.tool_call",
    "policy",
    "rate_limit",
    "stops",
];

#[test]
fn traces_reach_a_real_otlp_http_receiver_with_a_span_per_stage_and_gate() {
    let Some(python) = receiver_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rx = receiver(&python, dir.path());
    let started = Instant::now();
    let sc = sidecar(&format!(
        "otlp_endpoint = \"http://127.0.0.1:{}\"\notlp_protocol = \"http\"\nservice_name = \"toolgate-test\"",
        rx.http
    ));
    let incoming = traceparent(TRACE, PARENT);

    // An allowed call, under the caller's trace.
    let (s, allowed) = post(
        sc.port,
        "/v1/authorize",
        &json!({"tool": "echo", "args": {"message": MARKER}}),
        Some(&incoming),
    );
    assert_eq!(
        (s, allowed["decision"].as_str()),
        (200, Some("allow")),
        "{allowed}"
    );
    // A call the tool_call gate blocks: a secret in the arguments.
    let (s, blocked) = post(
        sc.port,
        "/v1/authorize",
        &json!({"tool": "echo", "args": {"message": format!("{MARKER} {AWS}")}}),
        None,
    );
    assert_eq!(s, 200, "{blocked}");
    assert_eq!(blocked["stage"], "gate", "{blocked}");
    // A run: the program prints the TRACEPARENT it got.
    let other_trace = "0af7651916cd43dd8448eb211c80319c";
    let (s, ran) = post(
        sc.port,
        "/v1/execute",
        &json!({"tool": "show_trace", "args": {}}),
        Some(&traceparent(other_trace, "b7ad6b7169203331")),
    );
    assert_eq!(s, 200, "{ran}");

    // A result reported: the output gate masks the key.
    let (s, reported) = post(
        sc.port,
        "/v1/results",
        &json!({"tool": "echo", "output": format!("{MARKER} {AWS}")}),
        Some(&incoming),
    );
    assert_eq!(s, 200, "{reported}");

    let spans = roots_arrived(
        &rx.out,
        &[
            ("toolgate.authorize", 2),
            ("toolgate.execute", 1),
            ("toolgate.results", 1),
        ],
        &sc.log,
    );
    for s in &spans {
        assert_eq!(s["transport"], "http");
        assert_eq!(s["service"], "toolgate-test");
    }

    // The allowed call: the root is the caller's span's child, in its trace, with a child
    // per stage and one guardrail span.
    let id = allowed["decision_id"].as_str().unwrap();
    let root = root_of(&spans, id);
    assert_eq!(root["name"], "toolgate.authorize");
    assert_eq!(root["trace_id"], TRACE);
    assert_eq!(root["parent_span_id"], PARENT);
    assert_eq!(root["kind"], 2, "SPAN_KIND_SERVER");
    assert_eq!(root["status_code"], UNSET);
    let a = &root["attributes"];
    assert_eq!(a["toolgate.decision"], "allow");
    assert_eq!(a["toolgate.stage"], "policy");
    assert_eq!(a["toolgate.tool"], "echo");
    assert_eq!(a["toolgate.findings.count"], 0);
    let kids = children(&spans, root);
    assert_eq!(names(&kids), DECISION_STAGES, "{kids:?}");
    assert!(kids.iter().all(|k| k["trace_id"] == TRACE));
    let policy = kids.iter().find(|k| k["name"] == "policy").unwrap();
    assert_eq!(policy["attributes"]["toolgate.decision"], "allow");
    let gate = kids
        .iter()
        .find(|k| k["name"] == "guardrail.tool_call")
        .unwrap();
    assert_eq!(gate["attributes"]["toolgate.gate.action"], "allow");
    assert_eq!(gate["status_code"], UNSET);
    // Its trace id is in the audit record.
    assert_eq!(audit_record(sc.port, id)["otel_trace_id"], TRACE);

    // The blocked call: a trace of its own, the root and the gate's span in error, the
    // findings counted by kind.
    let id = blocked["decision_id"].as_str().unwrap();
    let root = root_of(&spans, id);
    assert_eq!(root["parent_span_id"], "", "no traceparent: a root");
    assert_ne!(root["trace_id"], TRACE);
    assert_eq!(root["status_code"], ERROR);
    assert_eq!(root["attributes"]["toolgate.decision"], "deny");
    assert_eq!(root["attributes"]["toolgate.stage"], "gate");
    let kids = children(&spans, root);
    assert_eq!(names(&kids), DECISION_STAGES, "{kids:?}");
    let gate = kids
        .iter()
        .find(|k| k["name"] == "guardrail.tool_call")
        .unwrap();
    assert_eq!(gate["status_code"], ERROR, "{gate}");
    assert_eq!(gate["attributes"]["toolgate.gate.action"], "block");
    assert_eq!(gate["attributes"]["toolgate.findings.count"], 1);
    let kinds = gate["attributes"]["toolgate.findings.kinds"]
        .as_str()
        .unwrap();
    assert!(kinds.split(',').any(|k| k == "secret"), "{kinds}");
    assert_eq!(
        audit_record(sc.port, id)["otel_trace_id"],
        root["trace_id"],
        "a trace started here is recorded too"
    );

    // The run: stages, then the execution and the output gate; the program got the
    // execution span's context.
    let id = ran["metadata"]["decision_id"].as_str().unwrap();
    let root = root_of(&spans, id);
    assert_eq!(root["name"], "toolgate.execute");
    assert_eq!(root["trace_id"], other_trace);
    let kids = children(&spans, root);
    let mut want: Vec<&str> = DECISION_STAGES.to_vec();
    want.extend(["execution", "guardrail.output"]);
    want.sort_unstable();
    assert_eq!(names(&kids), want, "{kids:?}");
    let execution = kids.iter().find(|k| k["name"] == "execution").unwrap();
    assert_eq!(execution["attributes"]["toolgate.exit_code"], 0);
    assert_eq!(
        ran["data"].as_str().unwrap(),
        format!(
            "00-{other_trace}-{}-01",
            execution["span_id"].as_str().unwrap()
        ),
        "the program's TRACEPARENT names the execution span"
    );
    let execution_id = ran["metadata"]["execution_id"].as_str().unwrap();
    assert_eq!(
        audit_record(sc.port, execution_id)["otel_trace_id"],
        other_trace
    );

    // The result: its root in the caller's trace, the output gate's span with its findings.
    let root = spans
        .iter()
        .find(|s| s["name"] == "toolgate.results")
        .unwrap();
    assert_eq!(root["trace_id"], TRACE);
    assert_eq!(root["parent_span_id"], PARENT);
    assert_eq!(root["attributes"]["toolgate.tool"], "echo");
    let kids = children(&spans, root);
    assert_eq!(names(&kids), ["guardrail.output"], "{kids:?}");
    let gate = &kids[0]["attributes"];
    assert_eq!(gate["toolgate.gate"], "output");
    assert_eq!(gate["toolgate.gate.action"], reported["decision"]);
    assert!(
        gate["toolgate.findings.count"].as_i64().unwrap() >= 1,
        "{gate}"
    );
    let kinds = gate["toolgate.findings.kinds"].as_str().unwrap();
    assert!(kinds.split(',').any(|k| k == "secret"), "{kinds}");
    let result_id = reported["result_id"].as_str().unwrap();
    assert_eq!(audit_record(sc.port, result_id)["otel_trace_id"], TRACE);

    // No argument value anywhere in what reached the receiver, decoded or not.
    let raw = std::fs::read(rx.out.with_extension("jsonl.raw")).unwrap();
    let decoded = std::fs::read_to_string(&rx.out).unwrap();
    for value in [MARKER, AWS] {
        assert!(!decoded.contains(value), "{value} in the spans");
        assert!(
            !raw.windows(value.len()).any(|w| w == value.as_bytes()),
            "{value} in the bytes sent"
        );
    }
    // Nothing of the spans in the log.
    let log = std::fs::read_to_string(&sc.log).unwrap();
    assert!(!log.contains("guardrail"), "{log}");
    eprintln!("otlp/http: {:?}", started.elapsed());
    drop(sc.child);
}

#[test]
fn traces_reach_a_real_otlp_grpc_receiver() {
    let Some(python) = receiver_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rx = receiver(&python, dir.path());
    let sc = sidecar(&format!(
        "otlp_endpoint = \"http://127.0.0.1:{}\"\notlp_protocol = \"grpc\"",
        rx.grpc
    ));
    let (s, blocked) = post(
        sc.port,
        "/v1/authorize",
        &json!({"tool": "echo", "args": {"message": AWS}}),
        Some(&traceparent(TRACE, PARENT)),
    );
    assert_eq!(s, 200, "{blocked}");
    let spans = roots_arrived(&rx.out, &[("toolgate.authorize", 1)], &sc.log);
    let root = root_of(&spans, blocked["decision_id"].as_str().unwrap());
    assert_eq!(root["transport"], "grpc");
    assert_eq!(root["service"], "toolgate");
    assert_eq!(root["trace_id"], TRACE);
    assert_eq!(root["parent_span_id"], PARENT);
    assert_eq!(root["status_code"], ERROR);
    let kids = children(&spans, root);
    assert_eq!(names(&kids), DECISION_STAGES, "{kids:?}");
    let gate = kids
        .iter()
        .find(|k| k["name"] == "guardrail.tool_call")
        .unwrap();
    assert_eq!(gate["status_code"], ERROR);
    let raw = std::fs::read(rx.out.with_extension("jsonl.raw")).unwrap();
    assert!(!raw.windows(AWS.len()).any(|w| w == AWS.as_bytes()));
}

#[test]
fn with_traces_off_a_program_still_gets_the_callers_traceparent_and_the_audit_its_trace_id() {
    let sc = sidecar("");
    let incoming = traceparent(TRACE, PARENT);
    let (s, ran) = post(
        sc.port,
        "/v1/execute",
        &json!({"tool": "show_trace", "args": {}}),
        Some(&incoming),
    );
    assert_eq!(s, 200, "{ran}");
    assert_eq!(ran["data"], incoming, "passed on unchanged");
    let id = ran["metadata"]["decision_id"].as_str().unwrap();
    assert_eq!(audit_record(sc.port, id)["otel_trace_id"], TRACE);
    // Without a traceparent: nothing to pass on, nothing recorded.
    let (s, ran) = post(
        sc.port,
        "/v1/execute",
        &json!({"tool": "show_trace", "args": {}}),
        None,
    );
    assert_eq!(s, 200, "{ran}");
    assert_eq!(ran["data"], "");
    let id = ran["metadata"]["decision_id"].as_str().unwrap();
    assert!(audit_record(sc.port, id).get("otel_trace_id").is_none());
    // A malformed one is ignored (W3C: start afresh), not an error.
    let (s, ran) = post(
        sc.port,
        "/v1/execute",
        &json!({"tool": "show_trace", "args": {}}),
        Some("00-nothex-00f067aa0ba902b7-01"),
    );
    assert_eq!(s, 200, "{ran}");
    assert_eq!(ran["data"], "");
}

#[test]
fn a_receiver_that_is_down_changes_no_answer_and_the_log_says_spans_were_lost() {
    // Nothing listens there.
    let sc = sidecar(&format!(
        "otlp_endpoint = \"http://127.0.0.1:{}\"",
        free_port()
    ));
    let started = Instant::now();
    let (s, d) = post(
        sc.port,
        "/v1/authorize",
        &json!({"tool": "echo", "args": {"message": "x"}}),
        None,
    );
    assert_eq!((s, d["decision"].as_str()), (200, Some("allow")), "{d}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "export held up the answer"
    );
    let id = d["decision_id"].as_str().unwrap();
    assert!(audit_record(sc.port, id)["otel_trace_id"].is_string());
    let start = Instant::now();
    loop {
        let log = std::fs::read_to_string(&sc.log).unwrap_or_default();
        if log.contains("BatchSpanProcessor.ExportError") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no export failure logged: {log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One JSON-RPC message to `toolgate mcp` on stdio.
fn rpc(stdin: &mut std::process::ChildStdin, message: &Value) {
    writeln!(stdin, "{message}").unwrap();
    stdin.flush().unwrap();
}

/// The answer to request `id`, skipping notifications (10 s at most).
fn rpc_answer(lines: &std::sync::mpsc::Receiver<Value>, id: u64) -> Value {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let v = lines
            .recv_timeout(left)
            .expect("no answer from toolgate mcp");
        if v["id"] == id {
            return v;
        }
    }
}

#[test]
fn an_mcp_tools_call_continues_the_trace_its_meta_names() {
    let Some(python) = receiver_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rx = receiver(&python, dir.path());
    let (set, config, _) = configured(&format!("otlp_endpoint = \"http://127.0.0.1:{}\"", rx.http));
    let log = set.dir.path().join("mcp.log");
    let mut child = Killed(
        toolgate()
            .args(["mcp", "--config"])
            .arg(&config)
            .env_remove("TOOLGATE_DATA_DIR")
            .env_remove("TOOLGATE_LISTEN")
            .env_remove("RUST_LOG")
            .env("TOOLGATE_TOKEN", DEV)
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut stdin = child.0.stdin.take().unwrap();
    let stdout = child.0.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && tx.send(v).is_err()
            {
                return;
            }
        }
    });
    rpc(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "traces-test", "version": "1"}}}),
    );
    let init = rpc_answer(&lines, 1);
    assert!(init.get("result").is_some(), "{init}");
    rpc(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    rpc(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "show_trace", "arguments": {},
            "_meta": {"traceparent": traceparent(TRACE, PARENT)}}}),
    );
    let called = rpc_answer(&lines, 2);
    let printed = called["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| {
            panic!(
                "{called}; log: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        })
        .to_owned();
    let spans = roots_arrived(&rx.out, &[("toolgate.mcp.tools_call", 1)], &log);
    let root = spans
        .iter()
        .find(|s| s["name"] == "toolgate.mcp.tools_call")
        .unwrap();
    assert_eq!(root["trace_id"], TRACE);
    assert_eq!(root["parent_span_id"], PARENT);
    assert_eq!(root["attributes"]["toolgate.decision"], "allow");
    assert_eq!(root["attributes"]["toolgate.tool"], "show_trace");
    let kids = children(&spans, root);
    let execution = kids.iter().find(|k| k["name"] == "execution").unwrap();
    assert!(
        printed.contains(&format!(
            "00-{TRACE}-{}-01",
            execution["span_id"].as_str().unwrap()
        )),
        "{printed}"
    );
}

#[test]
fn a_bad_telemetry_section_stops_serve_before_it_listens_naming_each_key() {
    let (_set, config, port) =
        configured("otlp_endpoint = \"udp://collector\"\notlp_protocol = \"thrift\"");
    for command in ["serve", "validate"] {
        let out = toolgate()
            .args([command, "--config"])
            .arg(&config)
            .env_remove("TOOLGATE_DATA_DIR")
            .env_remove("TOOLGATE_LISTEN")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{command} accepted it");
        let said = String::from_utf8_lossy(&out.stderr);
        for key in ["`telemetry.otlp_endpoint`", "`telemetry.otlp_protocol`"] {
            assert!(said.contains(key), "{command}: {key} not named: {said}");
        }
    }
    assert!(exchange(port, "GET", "/readyz", None, None).is_none());
}

#[test]
fn spans_still_queued_are_flushed_when_serve_stops() {
    let Some(python) = receiver_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rx = receiver(&python, dir.path());
    // Batches a minute apart: nothing goes out before the stop.
    let mut sc = sidecar_batching(
        &format!("otlp_endpoint = \"http://127.0.0.1:{}\"", rx.http),
        "60000",
    );
    let (s, d) = post(
        sc.port,
        "/v1/authorize",
        &json!({"tool": "echo", "args": {"message": "x"}}),
        None,
    );
    assert_eq!(s, 200, "{d}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(received(&rx.out).is_empty(), "exported before the stop");
    let pid = sc.child.0.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(sent.success());
    let start = Instant::now();
    while sc.child.0.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "serve still running after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let spans = received(&rx.out);
    let root = root_of(&spans, d["decision_id"].as_str().unwrap());
    assert_eq!(
        children(&spans, root).len(),
        DECISION_STAGES.len(),
        "{spans:?}"
    );
}
