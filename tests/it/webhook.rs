//! The approver webhook through the real binary: a new pending approval is POSTed, signed,
//! retried after a failure, counted in `/metrics`; a receiver that hangs never delays a decision.

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::*;
use crate::process::{exchange, metrics, start_with};

/// One request as the receiver saw it.
pub struct Seen {
    pub headers: Vec<String>,
    pub body: String,
}

/// A receiver answering each request with the next status of `statuses` (0: never answer).
pub fn receiver(statuses: Vec<u16>) -> (u16, mpsc::Receiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for (stream, status) in listener.incoming().zip(statuses) {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut headers = Vec::new();
            let mut len = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let line = line.trim_end().to_owned();
                if line.is_empty() {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
                headers.push(line);
            }
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            let _ = tx.send(Seen {
                headers,
                body: String::from_utf8(body).unwrap(),
            });
            if status == 0 {
                held.push(stream);
                continue;
            }
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    (port, rx)
}

fn ask_approval(port: u16) -> (Duration, Value) {
    let call = json!({"tool": "write_file", "args": {"path": "src/lib.rs", "content": "x"}});
    let started = Instant::now();
    let (s, d) = exchange(port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
    assert_eq!(
        (s, d["decision"].as_str()),
        (200, Some("pending_approval")),
        "{d}"
    );
    (started.elapsed(), d)
}

#[test]
fn a_pending_approval_is_announced_signed_and_retried() {
    let (hook, seen) = receiver(vec![500, 200]);
    let set = TempSet::new();
    set.write("hook.key", "hook-secret\n");
    let server = start_with(
        &set,
        &format!(
            "[approvals]\nwebhook_url = \"http://127.0.0.1:{hook}/hook/T0KEN\"\nwebhook_secret_file = \"hook.key\"\n"
        ),
    );
    let (_, d) = ask_approval(server.port);
    let first = seen.recv_timeout(Duration::from_secs(10)).unwrap();
    let second = seen.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(first.body, second.body, "a retry sends the same notice");
    let notice: Value = serde_json::from_str(&second.body).unwrap();
    assert_eq!(notice["event"], "approval.pending");
    assert_eq!(notice["approval"]["id"], d["approval_id"]);
    assert_eq!(notice["approval"]["tool"], "write_file");
    assert!(
        !second.body.contains("\"x\""),
        "arguments are not sent in clear"
    );
    let ts = second
        .headers
        .iter()
        .find_map(|h| {
            h.to_ascii_lowercase()
                .strip_prefix("x-toolgate-timestamp: ")
                .map(str::to_owned)
        })
        .expect("a timestamp header");
    let signature = format!(
        "x-toolgate-signature: sha256={}",
        toolgate::approvals::sign(b"hook-secret", &format!("{ts}.{}", second.body))
    );
    assert!(
        second
            .headers
            .iter()
            .any(|h| h.to_ascii_lowercase() == signature),
        "{:?}",
        second.headers
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = metrics(server.port);
        if text.contains("toolgate_approval_webhook_total{result=\"delivered\"} 1") {
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_hanging_receiver_never_delays_a_decision() {
    let (hook, seen) = receiver(vec![0; 8]);
    let set = TempSet::new();
    let server = start_with(
        &set,
        &format!(
            "[approvals]\nwebhook_url = \"http://127.0.0.1:{hook}/\"\nwebhook_timeout_ms = 5000\n"
        ),
    );
    for i in 0..3 {
        let call = json!({"tool": "write_file", "args": {"path": "src/lib.rs", "content": format!("{i}")}});
        let started = Instant::now();
        let (s, d) =
            exchange(server.port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
        assert_eq!((s, d["decision"].as_str()), (200, Some("pending_approval")));
        // The receiver holds each notice for 5 s; the decision does not wait for it.
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }
    // The notice did go out.
    seen.recv_timeout(Duration::from_secs(5)).unwrap();
}
