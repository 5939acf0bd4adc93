//! Issue 39: what one caller can hold is bounded, through the real `toolgate serve`. One agent
//! opening 20,000 MCP sessions took 3.5 GB that never came back; one agent holding ~1,100 long
//! polls or streams (or one human holding as many approval event streams) made every new
//! connection, `/healthz` included, get 503. Now each principal's MCP sessions, long polls,
//! event streams and held calls have bounds (429 past them, naming the config key), idle
//! sessions end and their memory goes back to the OS, and agents together cannot hold the
//! connections reserved for humans and probes.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::*;
use crate::process::{Server, exchange, metrics, serve_refuses, start, start_with};

const BOB: &str = "demo-bob-token";

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bounds","version":"1"}}}"#;

/// The floods hold over a thousand sockets in this process too.
fn raise_own_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    }
}

/// An answer read to its end (the request asked to close): status, head, body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }

    fn json(&self) -> Value {
        serde_json::from_str(self.body.trim()).unwrap_or(Value::Null)
    }
}

fn open(port: u16, request: &str) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    s
}

/// Reads an answer to the end of the connection (bodies are short or chunked; the server
/// closes after answering a `Connection: close` request).
fn finish(mut s: TcpStream) -> Answer {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    parse(&out)
}

fn parse(raw: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // Chunked bodies: the JSON bodies asserted on are one chunk.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body.split("\r\n").nth(1).unwrap_or("").to_owned()
    } else {
        body.to_owned()
    };
    Answer {
        status,
        head: head.to_owned(),
        body,
    }
}

/// The rest of a connection's bytes, as text (after [`head_of`]).
fn rest(mut s: TcpStream) -> String {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads a held answer's head only (an event stream stays open).
fn head_of(s: &mut TcpStream) -> Answer {
    let mut out = Vec::new();
    let mut byte = [0u8; 1];
    while !out.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => out.push(byte[0]),
            _ => break,
        }
    }
    parse(&out)
}

fn request(method: &str, path: &str, token: &str, extra: &str, body: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n{extra}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// `initialize` on `/mcp`: the answer, and the session it opened.
fn initialize(port: u16, token: &str) -> (Answer, Option<String>) {
    let a = finish(open(port, &request("POST", "/mcp", token, "", INIT)));
    let id = a.header("mcp-session-id");
    (a, id)
}

/// `GET /mcp` on `session`: the open event stream and its head.
fn stream(port: u16, token: &str, session: &str) -> (TcpStream, Answer) {
    let mut s = open(
        port,
        &request(
            "GET",
            "/mcp",
            token,
            &format!("Mcp-Session-Id: {session}\r\n"),
            "",
        ),
    );
    let head = head_of(&mut s);
    (s, head)
}

fn delete(port: u16, token: &str, session: &str) -> u16 {
    let extra = format!("Mcp-Session-Id: {session}\r\n");
    finish(open(port, &request("DELETE", "/mcp", token, &extra, ""))).status
}

fn sessions_open(port: u16) -> Option<u64> {
    gauge(port, "toolgate_mcp_sessions").map(|v| v as u64)
}

fn eventually<T>(what: &str, wait: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < wait, "not within {wait:?}: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A pending approval of `dev-agent`'s write (bob may decide it).
fn pending_approval(port: u16) -> String {
    let call = json!({"tool": "write_file", "args": {"path": "src/lib.rs", "content": "x"}});
    let (status, d) = exchange(port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
    assert_eq!(status, 200, "{d}");
    assert_eq!(d["decision"], "pending_approval", "{d}");
    d["approval_id"].as_str().unwrap().to_owned()
}

fn long_poll(port: u16, token: &str, approval: &str) -> TcpStream {
    open(
        port,
        &request(
            "GET",
            &format!("/v1/approvals/{approval}?wait=60s"),
            token,
            "",
            "",
        ),
    )
}

/// Waits until all but `held` of `polls` are answered (or closed), and a moment more in case
/// one more comes; returns the unanswered ones and the answers.
fn settle(polls: Vec<TcpStream>, held: usize) -> (Vec<TcpStream>, Vec<Answer>) {
    let start = Instant::now();
    let mut pending = polls;
    let mut answers = Vec::new();
    let mut quiet: Option<Instant> = None;
    loop {
        let mut still = Vec::new();
        for s in pending {
            s.set_nonblocking(true).unwrap();
            let mut byte = [0u8; 1];
            match s.peek(&mut byte) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => still.push(s),
                _ => {
                    s.set_nonblocking(false).unwrap();
                    answers.push(finish(s));
                }
            }
        }
        pending = still;
        if pending.len() <= held {
            match quiet {
                Some(t) if t.elapsed() > Duration::from_millis(500) => break,
                Some(_) => {}
                None => quiet = Some(Instant::now()),
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "{} requests still unanswered",
            pending.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for s in &pending {
        s.set_nonblocking(false).unwrap();
    }
    (pending, answers)
}

fn gauge(port: u16, name: &str) -> Option<f64> {
    metrics(port)
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Everyone else is answered: `/healthz`, `/readyz`, another agent's decision, a human's
/// queue, each on a new connection.
fn others_answered(port: u16) {
    for path in ["/healthz", "/readyz"] {
        let (status, body) = exchange(port, "GET", path, None, None).unwrap();
        assert_eq!(status, 200, "{path}: {body}");
    }
    let call = json!({"tool": "read_file", "args": {"path": "src/main.rs"}});
    let (status, d) = exchange(port, "POST", "/v1/authorize", Some(SRE), Some(&call)).unwrap();
    assert_eq!(status, 200, "{d}");
    assert!(d["decision"].is_string(), "{d}");
    let (status, q) =
        exchange(port, "GET", "/v1/approvals?status=pending", Some(BOB), None).unwrap();
    assert_eq!(status, 200, "{q}");
}

fn rss_kib(server: &Server) -> u64 {
    std::fs::read_to_string(format!("/proc/{}/status", server.child.id()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Opens `n` sessions as `token` from `threads` threads (raw `initialize`, keep-alive
/// connections, as an attacker would); returns how many opened.
fn session_flood(port: u16, token: &'static str, n: usize, threads: usize) -> usize {
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let count = n / threads + usize::from(t < n % threads);
            std::thread::spawn(move || {
                let keep = request("POST", "/mcp", token, "", INIT)
                    .replace("Connection: close", "Connection: keep-alive");
                let mut opened = 0;
                let mut conn: Option<TcpStream> = None;
                for _ in 0..count {
                    let mut s = match conn.take() {
                        Some(s) => s,
                        None => TcpStream::connect(("127.0.0.1", port)).unwrap(),
                    };
                    s.write_all(keep.as_bytes()).unwrap();
                    let (status, reusable) = read_chunked(&mut s);
                    if status == 200 {
                        opened += 1;
                    }
                    if reusable {
                        conn = Some(s);
                    }
                }
                opened
            })
        })
        .collect();
    workers.into_iter().map(|w| w.join().unwrap()).sum()
}

/// Reads one answer on a keep-alive connection: its status, and whether the connection may
/// carry the next request (a chunked body read to its end).
fn read_chunked(s: &mut TcpStream) -> (u16, bool) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&buf);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let status = head
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let lower = head.to_ascii_lowercase();
            if lower.contains("transfer-encoding: chunked") {
                if body.ends_with("0\r\n\r\n") {
                    return (status, !lower.contains("connection: close"));
                }
            } else if let Some(len) = lower
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                && body.len() >= len
            {
                return (status, !lower.contains("connection: close"));
            }
        }
        match s.read(&mut byte) {
            Ok(0) | Err(_) => {
                let text = String::from_utf8_lossy(&buf);
                let status = text
                    .split(' ')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                return (status, false);
            }
            Ok(n) => buf.extend_from_slice(&byte[..n]),
        }
    }
}

#[test]
fn sessions_are_bounded_per_principal_owned_and_end_when_idle() {
    let set = TempSet::new();
    let server = start_with(
        &set,
        "[mcp]\nmax_sessions_per_principal = 4\nsession_idle_secs = 1\n[server]\nmax_streams_per_principal = 2\n",
    );
    let port = server.port;
    let mine: Vec<String> = (0..4)
        .map(|_| {
            let (a, id) = initialize(port, DEV);
            assert_eq!(a.status, 200, "{}", a.body);
            id.unwrap()
        })
        .collect();
    // The fifth: 429, the code's error body, naming the key that raises the bound.
    let (a, id) = initialize(port, DEV);
    assert_eq!(a.status, 429, "{}", a.body);
    assert!(id.is_none());
    let e = a.json();
    assert_eq!(e["error"], "too_many_sessions", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("`mcp.max_sessions_per_principal`"),
        "{e}"
    );
    // Nothing else is affected: another agent opens a session; probes and humans answered.
    let (a, theirs) = initialize(port, SRE);
    assert_eq!(a.status, 200, "{}", a.body);
    let theirs = theirs.unwrap();
    others_answered(port);
    // A session is its opener's: to another agent it does not exist.
    let (_s, head) = stream(port, SRE, &mine[0]);
    assert_eq!(head.status, 404);
    assert_eq!(delete(port, SRE, &mine[0]), 404);
    // Event streams: two per principal, the third refused, naming its key.
    let (s1, head) = stream(port, DEV, &mine[0]);
    assert_eq!(head.status, 200, "{}", head.head);
    let (s2, head) = stream(port, DEV, &mine[1]);
    assert_eq!(head.status, 200, "{}", head.head);
    let (s3, head) = stream(port, DEV, &mine[2]);
    assert_eq!(head.status, 429, "{}", head.head);
    let refusal = rest(s3);
    assert!(
        refusal.contains("too_many_held") && refusal.contains("`server.max_streams_per_principal`"),
        "{refusal}"
    );
    let (t1, head) = stream(port, SRE, &theirs);
    assert_eq!(head.status, 200, "another agent's stream: {}", head.head);
    // Ended by hand: the place comes back at once.
    // Ended as the clients expect (the Python SDK warns on anything but 200, 204 or 405).
    assert_eq!(delete(port, DEV, &mine[3]), 204);
    let (a, fifth) = initialize(port, DEV);
    assert_eq!(a.status, 200, "{}", a.body);
    // Idle sessions end (1 s here): `mine[2]` and the fifth. A session with a stream open is
    // busy, not idle: `mine[0]`, `mine[1]` and the other agent's stay.
    eventually("idle sessions end", Duration::from_secs(10), || {
        (sessions_open(port) == Some(3)).then_some(())
    });
    for gone in [&mine[2], fifth.as_ref().unwrap()] {
        assert_eq!(stream(port, DEV, gone).1.status, 404);
    }
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(sessions_open(port), Some(3), "busy sessions stay");
    drop((s1, s2, t1));
    // Once nothing is in progress, every session ends and is forgotten: the count is back
    // to zero and the agent may open its four again.
    eventually("every session ends", Duration::from_secs(40), || {
        (sessions_open(port) == Some(0)).then_some(())
    });
    for _ in 0..4 {
        assert_eq!(initialize(port, DEV).0.status, 200);
    }
}

#[test]
fn with_the_defaults_one_agent_holding_1100_long_polls_locks_nobody_out() {
    raise_own_fd_limit();
    let set = TempSet::new();
    let server = start(&set);
    let port = server.port;
    let approval = pending_approval(port);
    let polls: Vec<TcpStream> = (0..1100).map(|_| long_poll(port, DEV, &approval)).collect();
    // 16 are held (the default `server.max_waits_per_principal`); the others are answered
    // 429 at once and their connections go idle (so the cap may close them).
    let (held, answers) = settle(polls, 16);
    let mut refused = 0;
    for a in &answers {
        match a.status {
            429 => {
                assert!(
                    a.body.contains("too_many_held")
                        && a.body.contains("`server.max_waits_per_principal`"),
                    "{}",
                    a.body
                );
                refused += 1;
            }
            // Closed unanswered: pushed out at the cap before its head was read.
            0 => {}
            other => panic!("a long poll answered {other}: {}", a.body),
        }
    }
    assert_eq!(held.len(), 16, "held long polls");
    assert!(refused >= 1000, "refused: {refused}");
    // Other agents, humans and probes are answered.
    others_answered(port);
    // The same agent's MCP sessions stop at the default 64; another agent's client works.
    let opened = session_flood(port, DEV, 200, 4);
    assert_eq!(opened, 64);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let listed = runtime.block_on(async {
        use rmcp::ServiceExt as _;
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let url = format!("http://127.0.0.1:{port}/mcp");
        let client = ()
            .serve(StreamableHttpClientTransport::from_config(
                StreamableHttpClientTransportConfig::with_uri(url.clone())
                    .auth_header(SRE.to_owned()),
            ))
            .await
            .unwrap();
        let server_name = client
            .peer_info()
            .and_then(|i| i.server_info.as_ref().map(|s| s.name.clone()));
        let tools = client.list_all_tools().await.unwrap();
        let _ = client.cancel().await;
        assert_eq!(server_name.as_deref(), Some("toolgate"));
        // The flooding agent's own client is refused a 65th session.
        let refused = ()
            .serve(StreamableHttpClientTransport::from_config(
                StreamableHttpClientTransportConfig::with_uri(url).auth_header(DEV.to_owned()),
            ))
            .await;
        assert!(refused.is_err());
        tools.len()
    });
    // No `[exec] root` here: the sidecar's own tools are not runnable, so none is listed.
    assert_eq!(listed, 0);
    // The approval decided, the held polls answer with it, and their places come back.
    let (status, body) = exchange(
        port,
        "POST",
        &format!("/v1/approvals/{approval}/approve"),
        Some(BOB),
        Some(&json!({})),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    for s in held {
        let a = finish(s);
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.json()["status"], "approved", "{}", a.body);
    }
    let (status, _) = exchange(
        port,
        "GET",
        &format!("/v1/approvals/{approval}?wait=1s"),
        Some(DEV),
        None,
    )
    .unwrap();
    assert_eq!(status, 200);
}

#[test]
fn agents_together_cannot_take_the_connections_reserved_for_humans_and_probes() {
    let set = TempSet::new();
    let server = start_with(
        &set,
        "[server]\nmax_connections = 48\nreserved_connections = 16\nmax_waits_per_principal = 100\nmax_streams_per_principal = 2\n",
    );
    let port = server.port;
    let approval = pending_approval(port);
    // 32 of 40 long polls are held (48 less the 16 reserved); the others are answered 503.
    let polls: Vec<TcpStream> = (0..40).map(|_| long_poll(port, DEV, &approval)).collect();
    let (held, answers) = settle(polls, 32);
    for a in &answers {
        assert_eq!(a.status, 503, "{}", a.body);
        assert_eq!(a.header("retry-after").as_deref(), Some("1"));
        assert!(
            a.body.contains("too_many_connections")
                && a.body.contains("`server.reserved_connections`"),
            "{}",
            a.body
        );
    }
    let full = answers.len();
    assert_eq!((held.len(), full), (32, 8));
    assert_eq!(gauge(port, "toolgate_held_by_agents"), Some(32.0));
    // The reserve: probes, other agents' short calls, and a human's event stream.
    others_answered(port);
    let mut events = open(port, &request("GET", "/v1/approvals/events", BOB, "", ""));
    let head = head_of(&mut events);
    assert_eq!(head.status, 200, "{}", head.head);
    // One human's streams are bounded too (2 here): the third is refused, naming the key.
    let mut second = open(port, &request("GET", "/v1/approvals/events", BOB, "", ""));
    assert_eq!(head_of(&mut second).status, 200);
    let third = finish(open(
        port,
        &request("GET", "/v1/approvals/events", BOB, "", ""),
    ));
    assert_eq!(third.status, 429, "{}", third.body);
    assert!(third.body.contains("`server.max_streams_per_principal`"));
    let (status, body) = exchange(
        port,
        "POST",
        &format!("/v1/approvals/{approval}/approve"),
        Some(BOB),
        Some(&json!({})),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    for s in held {
        assert_eq!(finish(s).status, 200);
    }
    eventually("held places given back", Duration::from_secs(10), || {
        (gauge(port, "toolgate_held_by_agents") == Some(0.0)).then_some(())
    });
}

#[test]
fn memory_taken_by_a_session_flood_goes_back_once_the_sessions_end() {
    raise_own_fd_limit();
    let set = TempSet::new();
    let server = start_with(
        &set,
        "[mcp]\nmax_sessions_per_principal = 100000\nsession_idle_secs = 3\n",
    );
    let port = server.port;
    // Warm up (first-use caches), and let those sessions end.
    assert_eq!(session_flood(port, DEV, 200, 4), 200);
    eventually("warm-up sessions end", Duration::from_secs(20), || {
        (sessions_open(port) == Some(0)).then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    let before = rss_kib(&server);
    assert_eq!(session_flood(port, DEV, 3000, 8), 3000);
    let flooded = rss_kib(&server);
    // Others answered while the sessions are open.
    others_answered(port);
    // The flood took real memory (else this test could not fail)…
    assert!(
        flooded > before + before / 4,
        "a flood of 3,000 sessions should take memory: {before} KiB → {flooded} KiB"
    );
    eventually("the flood's sessions end", Duration::from_secs(30), || {
        (sessions_open(port) == Some(0)).then_some(())
    });
    // …and it goes back, to within 20% of where it started.
    let after = eventually(
        &format!("memory goes back: {before} KiB before, {flooded} KiB flooded"),
        Duration::from_secs(20),
        || {
            let now = rss_kib(&server);
            (now <= before + before / 5).then_some(now)
        },
    );
    eprintln!(
        "RSS: {before} KiB before, {flooded} KiB after 3,000 sessions, {after} KiB once they ended"
    );
}

#[test]
fn bad_bounds_refuse_to_start_naming_the_key() {
    let set = TempSet::new();
    for (extra, key) in [
        (
            "[server]\nmax_connections = 64\nreserved_connections = 64\n",
            "`server.reserved_connections` = 64 is not below `server.max_connections` = 64",
        ),
        (
            "[server]\nmax_waits_per_principal = 0\n",
            "`server.max_waits_per_principal` = 0 is out of range",
        ),
        (
            "[server]\nmax_streams_per_principal = 100001\n",
            "`server.max_streams_per_principal` = 100001 is out of range",
        ),
        (
            "[mcp]\nmax_sessions_per_principal = 0\n",
            "`mcp.max_sessions_per_principal` = 0 is out of range",
        ),
        (
            "[mcp]\nsession_idle_secs = 0\n",
            "`mcp.session_idle_secs` = 0 is out of range",
        ),
        (
            "[mcp]\nmax_held_calls_per_principal = 1025\n",
            "`mcp.max_held_calls_per_principal` = 1025 is out of range",
        ),
    ] {
        let err = serve_refuses(&set, extra);
        assert!(err.contains(key), "{extra}: {err}");
    }
}
