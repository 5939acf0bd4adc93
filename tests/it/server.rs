//! The real `toolgate serve` process on a loopback port: SIGHUP forces a reload, and a deeply
//! nested policy evaluates on the server's own threads (they need more than 2 MiB of stack).

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::*;

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request over a fresh connection; returns the JSON body.
fn request(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Option<Value> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    serde_json::from_str(out.split("\r\n\r\n").nth(1)?).ok()
}

fn start(set: &TempSet) -> Server {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = set.dir.path().join("toolgate.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\ndata_dir = \"data\"\npolicies_dir = \"policies\"\nschemas_dir = \"schemas\"\n[auth]\ntokens_file = \"{}\"\n[reload]\nwatch = false\npoll_ms = 0\n",
            repo().join("examples/demo-tokens.json").display()
        ),
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--config"])
        .arg(&config)
        .env_remove("RUST_MIN_STACK")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server { child, port };
    let start = Instant::now();
    while request(port, "GET", "/healthz", None, None).is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "toolgate serve did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

fn metrics(port: u16) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

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
