//! The real `toolgate` binary: a server on a free loopback port over a temp set, plain
//! HTTP/1.1 requests to it, and CLI runs.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::helpers::*;

pub struct Server {
    pub child: Child,
    pub port: u16,
}

impl Server {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGKILL: the crash tests rely on it being abrupt.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request over a fresh connection; the status and JSON body of a complete answer.
pub fn exchange(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Option<(u16, Value)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    // One write: `write!` on a bare socket sends each piece of the format on its own.
    let text = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(text.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split(' ').nth(1)?.parse().ok()?;
    Some((
        status,
        serde_json::from_str(out.split("\r\n\r\n").nth(1)?).ok()?,
    ))
}

/// `GET /metrics` as text (empty when the server does not answer).
pub fn metrics(port: u16) -> String {
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

/// Like [`exchange`], the body only.
pub fn request(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Option<Value> {
    exchange(port, method, path, token, body).map(|(_, v)| v)
}

/// `toolgate serve` over `set` (data in `set/data`), with `extra` appended to its config.
pub fn start_with(set: &TempSet, extra: &str) -> Server {
    start_with_env(set, extra, &[])
}

/// Like [`start_with`], with `env` set for the server.
pub fn start_with_env(set: &TempSet, extra: &str, env: &[(&str, &str)]) -> Server {
    start_configured(set, extra, "", env)
}

/// Like [`start_with_env`], with `reload` added to the `[reload]` table (watching and
/// polling are off there: reloads come from SIGHUP).
pub fn start_configured(set: &TempSet, extra: &str, reload: &str, env: &[(&str, &str)]) -> Server {
    let reload = format!("watch = false\npoll_ms = 0\n{reload}");
    start_full(set, extra, &reload, env, &[])
}

/// `toolgate serve` over `set` that notices edits by itself: `reload` is the whole `[reload]`
/// table (e.g. `watch = true`, a short `poll_ms` and `debounce_ms`).
pub fn start_watching(set: &TempSet, reload: &str) -> Server {
    start_full(set, "", reload, &[], &[])
}

/// Like [`start_with_env`], the binary run by `wrapper` (e.g. `prlimit --nofile=256 --`).
pub fn start_wrapped(set: &TempSet, extra: &str, env: &[(&str, &str)], wrapper: &[&str]) -> Server {
    start_full(set, extra, "watch = false\npoll_ms = 0", env, wrapper)
}

/// Like [`start_with_env`], but a server that exits or does not come up is an `Err` holding
/// its log, for tests in which refusing to start is an allowed outcome.
pub fn try_start_with_env(
    set: &TempSet,
    extra: &str,
    env: &[(&str, &str)],
) -> Result<Server, String> {
    try_start_full(set, extra, "watch = false\npoll_ms = 0", env, &[])
}

fn start_full(
    set: &TempSet,
    extra: &str,
    reload: &str,
    env: &[(&str, &str)],
    wrapper: &[&str],
) -> Server {
    try_start_full(set, extra, reload, env, wrapper)
        .unwrap_or_else(|log| panic!("toolgate serve did not come up:\n{log}"))
}

fn try_start_full(
    set: &TempSet,
    extra: &str,
    reload: &str,
    env: &[(&str, &str)],
    wrapper: &[&str],
) -> Result<Server, String> {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = set.dir.path().join("toolgate.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\ndata_dir = \"data\"\npolicies_dir = \"policies\"\nschemas_dir = \"schemas\"\n{extra}\n[auth]\ntokens_file = \"{}\"\n[reload]\n{reload}\n",
            repo().join("examples/demo-tokens.json").display()
        ),
    )
    .unwrap();
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut cmd = Command::new(program);
            cmd.args(args).arg(env!("CARGO_BIN_EXE_toolgate"));
            cmd
        }
        None => Command::new(env!("CARGO_BIN_EXE_toolgate")),
    };
    cmd.args(["serve", "--config"])
        .arg(&config)
        .env_remove("RUST_MIN_STACK")
        .env_remove("TOOLGATE_KILL_SWITCH")
        .env_remove("TOOLGATE_LISTEN")
        .env_remove("TOOLGATE_DATA_DIR")
        .env_remove("TOOLGATE_LOG_FORMAT")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(set.dir.path().join("serve.log")).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap();
    let mut server = Server { child, port };
    let start = Instant::now();
    while request(port, "GET", "/healthz", None, None).is_none() {
        let exited = server.child.try_wait().unwrap();
        if exited.is_some() || start.elapsed() > Duration::from_secs(20) {
            let log = std::fs::read_to_string(set.dir.path().join("serve.log")).unwrap_or_default();
            return Err(format!("({exited:?}):\n{log}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(server)
}

/// Runs `toolgate serve` on a config of `set` with `extra` (before `[auth]`), expects it to
/// refuse to start, and returns what it printed on stderr.
pub fn serve_refuses(set: &TempSet, extra: &str) -> String {
    std::fs::write(
        set.dir.path().join("bad.toml"),
        format!(
            "policies_dir = \"policies\"\nschemas_dir = \"schemas\"\n{extra}\n[auth]\ntokens_file = \"{}\"\n",
            repo().join("examples/demo-tokens.json").display()
        ),
    )
    .unwrap();
    let out = toolgate(set.dir.path(), &["serve", "--config", "bad.toml"], &[]);
    assert!(!out.status.success(), "serve started with:\n{extra}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn start(set: &TempSet) -> Server {
    start_with(set, "")
}

/// Runs the binary with `args` in `dir`, with `env` set.
pub fn toolgate(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.current_dir(dir).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}
