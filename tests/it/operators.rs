//! The human subcommands against a real sidecar: `toolgate approvals …` and `toolgate audit
//! query|tail` online, `toolgate audit verify|export` offline on its data directory.

use serde_json::{Value, json};

use crate::helpers::*;
use crate::process::{Server, exchange, start, toolgate};

const BOB: &str = "demo-bob-token";

fn run(
    set: &TempSet,
    server: Option<&Server>,
    token: &str,
    args: &[&str],
) -> (i32, String, String) {
    let url = server.map(Server::url).unwrap_or_default();
    let out = toolgate(
        set.dir.path(),
        args,
        &[("TOOLGATE_URL", &url), ("TOOLGATE_TOKEN", token)],
    );
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn pending(server: &Server, content: &str) -> String {
    let call = json!({"tool": "write_file", "args": {"path": "src/lib.rs", "content": content}});
    let (s, d) = exchange(server.port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
    assert_eq!(
        (s, d["decision"].as_str()),
        (200, Some("pending_approval")),
        "{d}"
    );
    d["approval_id"].as_str().unwrap().to_owned()
}

fn verify_against_head(set: &TempSet) -> (i32, String, String) {
    let args = [
        "audit",
        "verify",
        "--data-dir",
        "data",
        "--head",
        "head.json",
    ];
    run(set, None, "", &args)
}

#[test]
fn approvers_and_auditors_work_from_the_command_line() {
    let set = TempSet::new();
    let server = start(&set);
    let first = pending(&server, "mail payload-a@example.com");
    let second = pending(&server, "mail payload-b@example.com");

    let (code, out, err) = run(&set, Some(&server), BOB, &["approvals", "list"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&first) && out.contains(&second), "{out}");
    assert!(
        out.contains("write_file") && out.contains("pending"),
        "{out}"
    );

    let (code, out, _) = run(&set, Some(&server), BOB, &["approvals", "show", &first]);
    assert_eq!(code, 0);
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["status"], "pending");

    let (code, out, err) = run(
        &set,
        Some(&server),
        BOB,
        &["approvals", "approve", &first, "--reason", "reviewed"],
    );
    assert_eq!(
        (code, out.trim()),
        (0, format!("{first}: approved").as_str()),
        "{err}"
    );
    let (code, out, _) = run(&set, Some(&server), BOB, &["approvals", "deny", &second]);
    assert_eq!(
        (code, out.trim()),
        (0, format!("{second}: denied").as_str())
    );

    // An agent's token cannot approve; the server's reason is shown, exit 2.
    let third = pending(&server, "mail payload-c@example.com");
    let (code, _, err) = run(&set, Some(&server), DEV, &["approvals", "approve", &third]);
    assert_eq!(code, 2);
    assert!(err.contains("403"), "{err}");
    // A bad token says what to do.
    let (code, _, err) = run(&set, Some(&server), "nope", &["approvals", "list"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("401") && err.contains("TOOLGATE_TOKEN"),
        "{err}"
    );

    let (code, out, err) = run(
        &set,
        Some(&server),
        BOB,
        &["audit", "query", "--decision", "approved", "--limit", "5"],
    );
    assert_eq!(code, 0, "{err}");
    let approved: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(approved.len(), 1, "{out}");
    assert_eq!(approved[0]["entry"]["id"], first.as_str());

    let (code, out, _) = run(&set, Some(&server), BOB, &["audit", "tail", "-n", "3"]);
    assert_eq!(code, 0);
    let seqs: Vec<u64> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs.len(), 3);
    assert!(seqs.windows(2).all(|w| w[0] + 1 == w[1]), "{seqs:?}");

    let head = exchange(server.port, "GET", "/v1/audit/head", Some(BOB), None)
        .unwrap()
        .1;
    // Offline tools need the sidecar to let go of the data directory.
    let (code, _, err) = run(&set, None, "", &["audit", "verify", "--data-dir", "data"]);
    assert_eq!(code, 2);
    assert!(err.contains("another toolgate"), "{err}");
    drop(server);

    let head_file = set.dir.path().join("head.json");
    std::fs::write(&head_file, head.to_string()).unwrap();
    let (code, out, err) = verify_against_head(&set);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("ok: "), "{out}");

    // A head the log no longer reaches: the tail was cut.
    let far = json!({"seq": head["seq"].as_u64().unwrap() + 5, "hash": head["hash"]});
    std::fs::write(&head_file, far.to_string()).unwrap();
    let (code, out, _) = verify_against_head(&set);
    assert_eq!(code, 1);
    assert!(out.contains("BROKEN") && out.contains("truncated"), "{out}");

    let (code, out, err) = run(&set, None, "", &["audit", "export", "--data-dir", "data"]);
    assert_eq!(code, 0, "{err}");
    let exported: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(exported.len() as u64, head["seq"].as_u64().unwrap());
    assert_eq!(exported.last().unwrap()["hash"], head["hash"]);
    // Arguments are exported only as their digest and redacted preview.
    assert!(
        !out.contains("@example.com") && out.contains("<redacted:email>"),
        "personal data is never exported in clear"
    );

    let (code, _, err) = run(
        &set,
        None,
        "",
        &["audit", "verify", "--data-dir", "missing"],
    );
    assert_eq!(code, 2);
    assert!(err.contains("not a toolgate data directory"), "{err}");
}
