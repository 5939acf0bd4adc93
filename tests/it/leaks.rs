//! No raw secret reaches the disk or the logs: the real binary (debug logging on, known
//! secrets configured) receives every kind of corpus secret through every route that takes
//! content — authorize (blocked, masked, pending approval), the five gates, results, and
//! malformed bodies — then every file under its data directory, the audit log as exported
//! (its blocks are deflated on disk) and the server's log are searched for each raw value (and
//! its JSON-escaped form).

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;

use base64::Engine;
use serde_json::{Value, json};

use crate::corpus::positives;
use crate::helpers::*;
use crate::process::{exchange, start_with_env};

const ENV_SECRET: &str = "env-secret-Hq3Zr8Wn5Ky1";
const FILE_SECRET: &str = "file-secret-Vx9Qm2Lp7Rt4";

/// Sends `body` as is (it may not be valid JSON); the status.
fn raw(port: u16, path: &str, body: &str) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {DEV}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split(' ').nth(1).unwrap().parse().unwrap()
}

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

#[test]
fn no_raw_secret_reaches_the_data_directory_or_the_logs() {
    let set = TempSet::new();
    set.write("known.txt", &format!("{FILE_SECRET}\n"));
    let extra = "[redaction]\nknown_secrets_env = [\"TG_LEAK_KEY\"]\nknown_secrets_files = [\"known.txt\"]\n";
    let server = start_with_env(
        &set,
        extra,
        &[("TG_LEAK_KEY", ENV_SECRET), ("RUST_LOG", "debug")],
    );
    let port = server.port;
    let post = |path: &str, token: &str, body: Value| {
        exchange(port, "POST", path, Some(token), Some(&body)).unwrap()
    };
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut secrets: Vec<String> = vec![ENV_SECRET.to_owned(), FILE_SECRET.to_owned()];
    let mut lines: Vec<String> = vec![
        format!("export TOKEN={ENV_SECRET}"),
        format!("auth {}", b64(&format!("user:{FILE_SECRET}"))),
        format!("hex {}", hex::encode(ENV_SECRET)),
    ];
    for (kind, secret, line) in positives() {
        if ["instruction-override", "fake-tool-call", "hidden-unicode"].contains(&kind) {
            continue;
        }
        secrets.push(secret);
        lines.push(line);
    }
    for (i, line) in lines.iter().enumerate() {
        let (s, d) = post(
            "/v1/authorize",
            DEV,
            json!({"tool": "search_files", "args": {"regex": line}}),
        );
        assert_eq!(s, 200, "{d}");
        // Every line once more through one of the other content routes.
        let (s, _) = match i % 6 {
            0 | 1 => post(
                "/v1/results",
                DEV,
                json!({"tool": "search_files", "output": line}),
            ),
            2 | 3 => post(
                "/v1/gates/stream",
                DEV,
                json!({"stream_id": format!("s{i}"), "content": line, "final": true}),
            ),
            n => {
                let gate = ["input", "context", "tool_call", "output"][(i / 6 + n) % 4];
                post(
                    &format!("/v1/gates/{gate}"),
                    DEV,
                    json!({"content": {"text": line}}),
                )
            }
        };
        assert_eq!(s, 200);
        if i % 10 == 0 {
            // Pending approvals keep a preview.
            let (_, d) = post(
                "/v1/authorize",
                DEV,
                json!({"tool": "write_file", "args": {"path": "notes.txt", "content": line}}),
            );
            assert!(
                ["pending_approval", "deny"].contains(&d["decision"].as_str().unwrap()),
                "{d}"
            );
        }
        // Malformed bodies and unknown fields carrying the secret.
        if i % 8 != 0 {
            continue;
        }
        assert_eq!(
            raw(port, "/v1/authorize", &format!("{{\"tool\": \"{line}")),
            400
        );
        let odd = json!({"tool": "search_files", "args": {}, line.clone(): 1}).to_string();
        assert_eq!(raw(port, "/v1/authorize", &odd), 400);
    }
    // Let group commit and sled settle, then stop the server.
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(server);
    let mut all = Vec::new();
    files(&set.dir.path().join("data"), &mut all);
    all.push(set.dir.path().join("serve.log"));
    // Audit blocks are deflated on disk, so their bytes are searched as `audit export` reads
    // them back.
    let export = set.dir.path().join("audit.jsonl");
    let out = toolgate()
        .args(["audit", "export", "--data-dir"])
        .arg(set.dir.path().join("data"))
        .arg("--out")
        .arg(&export)
        .output()
        .unwrap();
    assert_ok(&out);
    all.push(export);
    let mut haystack = Vec::new();
    for f in &all {
        haystack.extend(std::fs::read(f).unwrap());
        haystack.push(0);
    }
    let text = String::from_utf8_lossy(&haystack);
    // The search reads the right bytes: redacted previews and logged decisions are there.
    assert!(text.contains("<redacted:email>") && text.contains("<redacted:known-secret>"));
    assert!(text.contains("secret_in_arguments"));
    // One pass over the bytes for every raw value and its JSON-escaped form.
    let mut needles = Vec::new();
    for s in &secrets {
        let escaped = serde_json::to_string(s).unwrap();
        needles.push(s.clone());
        needles.push(escaped[1..escaped.len() - 1].to_owned());
    }
    let ac = aho_corasick::AhoCorasick::new(&needles).unwrap();
    let mut leaked: Vec<&str> = ac
        .find_overlapping_iter(&haystack)
        .map(|m| secrets[m.pattern().as_usize() / 2].as_str())
        .collect();
    leaked.sort();
    leaked.dedup();
    eprintln!(
        "searched {} bytes in {} files for {} secrets",
        haystack.len(),
        all.len(),
        secrets.len()
    );
    assert!(
        leaked.is_empty(),
        "{} of {} secrets leaked: {leaked:?}",
        leaked.len(),
        secrets.len()
    );
    assert!(secrets.len() >= 300, "{}", secrets.len());
}
