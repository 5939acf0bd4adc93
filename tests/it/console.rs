//! The approver console's server side and the notices, below the browser tests
//! (`tests/browser`): sign-in and session cookies, CSRF on every cookie-borne change, the
//! SSE queue, the online audit verify and export, and every webhook event (JSON and Slack)
//! from the real binary.

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use serde_json::{Value, json};

use crate::helpers::*;
use crate::process::{exchange, start_configured, start_with};
use crate::webhook::{Seen, receiver};

const BOB: &str = "demo-bob-token";
const GRACE: &str = "demo-grace-token";

async fn raw(app: &Router, req: Request<Body>) -> (StatusCode, HeaderMap, Value) {
    oneshot(app, req).await
}

/// Signs `token` in; the cookie (`toolgate_session=…`) and the CSRF token.
async fn sign_in(app: &Router, token: &str) -> (String, String) {
    let req = Request::post("/ui/session")
        .header("content-type", "application/json")
        .header("host", "127.0.0.1:8181")
        .header("origin", "http://127.0.0.1:8181")
        .body(Body::from(json!({ "token": token }).to_string()))
        .unwrap();
    let (status, headers, body) = raw(app, req).await;
    assert_eq!(status, 200, "{body}");
    let cookie = headers["set-cookie"].to_str().unwrap().to_owned();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attr), "{cookie}");
    }
    let pair = cookie.split(';').next().unwrap().to_owned();
    (pair, body["csrf"].as_str().unwrap().to_owned())
}

fn kill_switch(cookie: &str, extra: &[(&str, &str)]) -> Request<Body> {
    let mut req = Request::post("/v1/admin/kill-switch")
        .header("content-type", "application/json")
        .header("host", "127.0.0.1:8181")
        .header("cookie", cookie);
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    req.body(Body::from(r#"{"on": true, "reason": "drill"}"#))
        .unwrap()
}

#[tokio::test]
async fn a_console_session_stands_for_its_human_and_every_change_needs_its_csrf_token() {
    let app = app();
    // Pages carry a strict CSP and no inline script.
    let (status, headers, _) = raw(&app, Request::get("/ui").body(Body::empty()).unwrap()).await;
    assert_eq!(status, 200);
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));
    assert!(!csp.contains("unsafe-inline"));
    // Agents do not sign in; nor do unknown tokens.
    let agent = Request::post("/ui/session")
        .header("content-type", "application/json")
        .body(Body::from(json!({ "token": DEV }).to_string()))
        .unwrap();
    let (status, _, body) = raw(&app, agent).await;
    assert_eq!(
        (status.as_u16(), body["error"].as_str()),
        (403, Some("wrong_principal_kind"))
    );
    let unknown = Request::post("/ui/session")
        .header("content-type", "application/json")
        .body(Body::from(r#"{"token": "nope"}"#))
        .unwrap();
    assert_eq!(raw(&app, unknown).await.0, 401);
    // A sign-in posted from another origin is refused.
    let cross = Request::post("/ui/session")
        .header("content-type", "application/json")
        .header("host", "127.0.0.1:8181")
        .header("origin", "http://evil.example")
        .body(Body::from(json!({ "token": ALICE }).to_string()))
        .unwrap();
    assert_eq!(raw(&app, cross).await.2["error"], "csrf_rejected");

    let (cookie, csrf) = sign_in(&app, ALICE).await;
    let read = |with_token: bool| {
        let mut r = Request::get("/v1/admin/kill-switch").header("cookie", &cookie);
        if with_token {
            r = r.header("x-toolgate-csrf", &csrf);
        }
        r.body(Body::empty()).unwrap()
    };
    // The cookie alone opens nothing, reads included (other ports of the host receive it).
    let (status, _, body) = raw(&app, read(false)).await;
    assert_eq!(
        (status.as_u16(), body["error"].as_str()),
        (403, Some("csrf_rejected"))
    );
    let alone = Request::get("/ui/session")
        .header("cookie", &cookie)
        .body(Body::empty())
        .unwrap();
    let (status, _, body) = raw(&app, alone).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.get("csrf").is_none());
    // With the session's token, it stands for alice.
    assert_eq!(raw(&app, read(true)).await.2["on"], false);
    // Changes need the token, from this origin.
    for (extra, why) in [
        (vec![], "needs the session's token"),
        (vec![("x-toolgate-csrf", "0000")], "does not match"),
        (
            vec![
                ("x-toolgate-csrf", csrf.as_str()),
                ("origin", "http://127.0.0.1:9999"),
            ],
            "another origin",
        ),
        (
            vec![
                ("x-toolgate-csrf", csrf.as_str()),
                ("sec-fetch-site", "same-site"),
            ],
            "another origin",
        ),
    ] {
        let (status, _, body) = raw(&app, kill_switch(&cookie, &extra)).await;
        assert_eq!(status, 403, "{body}");
        assert_eq!(body["error"], "csrf_rejected");
        assert!(body["message"].as_str().unwrap().contains(why), "{body}");
    }
    assert_eq!(
        raw(&app, read(true)).await.2["on"],
        false,
        "nothing changed"
    );
    let ok = kill_switch(
        &cookie,
        &[
            ("x-toolgate-csrf", csrf.as_str()),
            ("origin", "http://127.0.0.1:8181"),
            ("sec-fetch-site", "same-origin"),
        ],
    );
    let (status, _, body) = raw(&app, ok).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["set"]["by"], "Human::\"alice\"");
    // Cedar still decides: grace's session may read the audit log but not flip the switch.
    let (grace, grace_csrf) = sign_in(&app, GRACE).await;
    let (status, _, body) = raw(
        &app,
        kill_switch(&grace, &[("x-toolgate-csrf", grace_csrf.as_str())]),
    )
    .await;
    assert_eq!(
        (status.as_u16(), body["error"].as_str()),
        (403, Some("not_eligible")),
        "{body}"
    );
    // Signing out ends the session: the cookie stands for nobody.
    let out = Request::delete("/ui/session")
        .header("cookie", &grace)
        .header("x-toolgate-csrf", &grace_csrf)
        .body(Body::empty())
        .unwrap();
    assert_eq!(raw(&app, out).await.0, 200);
    let after = Request::get("/v1/audit/head")
        .header("cookie", &grace)
        .header("x-toolgate-csrf", &grace_csrf)
        .body(Body::empty())
        .unwrap();
    assert_eq!(raw(&app, after).await.0, 401);
    // An agent's bearer token is untouched by the layer.
    let (status, d) = decide(
        &app,
        DEV,
        &json!({"tool": "read_file", "args": {"path": "a"}}),
    )
    .await;
    assert_eq!(
        (status.as_u16(), d["stage"].as_str()),
        (200, Some("kill_switch"))
    );
}

#[test]
fn the_queue_streams_over_sse_only_what_the_human_may_decide() {
    use std::io::{BufRead as _, BufReader, Write as _};
    let set = TempSet::new();
    let server = start_with(&set, "");
    let open = |token: &str| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(
            format!(
                "GET /v1/approvals/events HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
        BufReader::new(s)
    };
    let next_queue = |r: &mut BufReader<std::net::TcpStream>| -> Value {
        loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            assert!(!line.is_empty(), "the stream ended");
            if let Some(data) = line.strip_prefix("data: ") {
                return serde_json::from_str(data).unwrap();
            }
        }
    };
    let mut bob = open(BOB);
    let mut grace = open(GRACE);
    assert_eq!(next_queue(&mut bob)["approvals"], json!([]));
    assert_eq!(next_queue(&mut grace)["approvals"], json!([]));
    let call = json!({"tool": "write_file", "args": {"path": "a.txt", "content": "x"}});
    let (_, d) = exchange(server.port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
    assert_eq!(d["decision"], "pending_approval");
    let q = next_queue(&mut bob);
    assert_eq!(q["approvals"][0]["id"], d["approval_id"], "{q}");
    assert_eq!(q["approvals"][0]["arguments"]["path"], "a.txt");
    assert_eq!(
        q["approvals"][0]["waiting_on"],
        json!(["tier-high-needs-approval"])
    );
    let path = format!(
        "/v1/approvals/{}/approve",
        d["approval_id"].as_str().unwrap()
    );
    let (s, _) = exchange(server.port, "POST", &path, Some(BOB), Some(&json!({}))).unwrap();
    assert_eq!(s, 200);
    assert_eq!(next_queue(&mut bob)["approvals"], json!([]));
    // Grace may not decide it: her stream never showed it (its next event would have).
    let mut line = String::new();
    grace
        .get_mut()
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let _ = grace.read_line(&mut line);
    assert!(!line.contains("a.txt"), "{line}");
    // Agents get no stream.
    let (s, body) = exchange(server.port, "GET", "/v1/approvals/events", Some(DEV), None).unwrap();
    assert_eq!(
        (s, body["error"].as_str()),
        (403, Some("wrong_principal_kind"))
    );
}

#[tokio::test]
async fn the_audit_log_is_verified_and_exported_online() {
    let app = app();
    for _ in 0..3 {
        decide(
            &app,
            DEV,
            &json!({"tool": "read_file", "args": {"path": "a"}}),
        )
        .await;
    }
    decide(
        &app,
        DEV,
        &json!({"tool": "read_file", "args": {"path": ".env"}}),
    )
    .await;
    let (status, v) = send(&app, "GET", "/v1/audit/verify", Some(GRACE), None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"], "intact", "{v}");
    assert!(v["records"].as_u64().unwrap() >= 4, "{v}");
    let req = Request::get("/v1/audit/export?decision=allow")
        .header("authorization", format!("Bearer {GRACE}"))
        .body(Body::empty())
        .unwrap();
    let (_, headers, bytes) = oneshot_bytes(&app, req).await;
    assert_eq!(headers["content-type"], "application/x-ndjson");
    let text = String::from_utf8(bytes).unwrap();
    let seqs: Vec<u64> = text
        .lines()
        .map(|l| {
            let r: Value = serde_json::from_str(l).unwrap();
            assert_eq!(r["entry"]["decision"], "allow");
            r["seq"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(seqs.len(), 3, "{text}");
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "oldest first: {seqs:?}"
    );
    let (status, body) = send(&app, "GET", "/v1/audit/verify", Some(DEV), None).await;
    assert_eq!(
        (status.as_u16(), body["error"].as_str()),
        (403, Some("wrong_principal_kind"))
    );
}

/// The next notice of `event`, skipping others; panics after `within`.
fn notice(seen: &std::sync::mpsc::Receiver<Seen>, event: &str, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = seen
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no `{event}` notice within {within:?}"));
        let v: Value = serde_json::from_str(&n.body).unwrap();
        let name = v["event"].as_str().unwrap_or_default();
        if name == event || (event == "slack" && v.get("text").is_some()) {
            return v;
        }
    }
}

#[test]
fn every_notice_reaches_the_webhook_with_a_console_link() {
    let (hook, seen) = receiver(vec![200; 64]);
    let set = TempSet::new();
    let server = start_configured(
        &set,
        &format!(
            "[approvals]\nwebhook_url = \"http://127.0.0.1:{hook}/hook\"\nconsole_url = \"https://toolgate.example/ui/\"\nttl_secs = 6\n"
        ),
        "widening = \"hold\"",
        &[],
    );
    let port = server.port;
    let ask = |path: &str| {
        let call = json!({"tool": "write_file", "args": {"path": path, "content": "x"}});
        let (_, d) = exchange(port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
        assert_eq!(d["decision"], "pending_approval", "{d}");
        d["approval_id"].as_str().unwrap().to_owned()
    };
    let id = ask("a.txt");
    let pending = notice(&seen, "approval.pending", Duration::from_secs(15));
    assert_eq!(pending["approval"]["id"], id.as_str());
    assert_eq!(
        pending["console"],
        format!("https://toolgate.example/ui#queue/{id}")
    );
    let path = format!("/v1/approvals/{id}/deny");
    exchange(
        port,
        "POST",
        &path,
        Some(BOB),
        Some(&json!({"reason": "no"})),
    )
    .unwrap();
    let decided = notice(&seen, "approval.decided", Duration::from_secs(15));
    assert_eq!(decided["approval"]["status"], "denied");
    assert_eq!(decided["approval"]["decided_by"], "Human::\"bob\"");
    assert_eq!(decided["approval"]["reason"], "no");

    // One left alone: reminded at half its 6 s, then expired.
    let started = Instant::now();
    let id = ask("b.txt");
    let reminder = notice(&seen, "approval.reminder", Duration::from_secs(15));
    assert_eq!(reminder["approval"]["id"], id.as_str());
    assert!(
        started.elapsed() >= Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    let expired = notice(&seen, "approval.expired", Duration::from_secs(15));
    assert_eq!(expired["approval"]["id"], id.as_str());

    // Operators' changes.
    let body = json!({"agent": "dev-agent", "on": true, "reason": "odd reads"});
    let (s, _) = exchange(
        port,
        "POST",
        "/v1/admin/quarantine",
        Some(ALICE),
        Some(&body),
    )
    .unwrap();
    assert_eq!(s, 200);
    let q = notice(&seen, "quarantine", Duration::from_secs(15));
    assert_eq!(
        (q["agent"].as_str(), q["on"].as_bool()),
        (Some("Agent::\"dev-agent\""), Some(true))
    );
    assert_eq!(q["console"], "https://toolgate.example/ui#operations");
    let body = json!({"on": true, "reason": "drill"});
    exchange(
        port,
        "POST",
        "/v1/admin/kill-switch",
        Some(ALICE),
        Some(&body),
    )
    .unwrap();
    let k = notice(&seen, "kill_switch", Duration::from_secs(15));
    assert_eq!(
        (k["on"].as_bool(), k["reason"].as_str()),
        (Some(true), Some("drill"))
    );

    // A widening policy change is held, and announced.
    set.append("policies/roles.cedar", PO_RUNS_TESTS);
    let pid = i32::try_from(server.child.id()).unwrap();
    std::process::Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    // The reload proves the change with cvc5 first, which takes a while on a loaded machine.
    let held = notice(&seen, "policy.held", Duration::from_secs(60));
    assert!(
        held["revision"].as_str().unwrap().starts_with("sha256:"),
        "{held}"
    );
    assert_ne!(held["revision"], held["from"]);
}

#[test]
fn slack_notices_are_one_line_of_text_with_a_link_and_no_argument_values() {
    let (hook, seen) = receiver(vec![200; 8]);
    let set = TempSet::new();
    let server = start_with(
        &set,
        &format!(
            "[approvals]\nwebhook_url = \"http://127.0.0.1:{hook}/services/T0/B0/x\"\nwebhook_format = \"slack\"\nconsole_url = \"https://toolgate.example/ui\"\n"
        ),
    );
    let call = json!({"tool": "write_file", "args": {"path": "secret-plan.txt", "content": "<!channel> x"}});
    let (_, d) = exchange(server.port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
    let id = d["approval_id"].as_str().unwrap();
    let msg = notice(&seen, "slack", Duration::from_secs(15));
    let text = msg["text"].as_str().unwrap();
    assert_eq!(msg.as_object().unwrap().len(), 1, "{msg}");
    assert!(
        text.contains("`write_file`") && text.contains("tier-high-needs-approval"),
        "{text}"
    );
    assert!(
        text.ends_with(&format!(
            "<https://toolgate.example/ui#queue/{id}|Open the console>"
        )),
        "{text}"
    );
    assert!(
        !text.contains("secret-plan") && !text.contains("<!channel>"),
        "{text}"
    );
}

#[test]
fn a_console_url_that_is_not_a_url_is_refused_at_start() {
    let set = TempSet::new();
    let err = crate::process::serve_refuses(&set, "[approvals]\nconsole_url = \"toolgate/ui\"\n");
    assert!(err.contains("approvals.console_url"), "{err}");
    let err = crate::process::serve_refuses(&set, "[approvals]\nwebhook_format = \"teams\"\n");
    assert!(err.contains("webhook_format"), "{err}");
}

/// A key an approver pastes into a reason is masked before the reason is stored, recorded,
/// shipped or sent to the webhook (real binary); so is one in a kill switch's reason.
#[test]
fn an_approvers_reason_is_screened_everywhere_it_goes() {
    const KEY: &str = "AKIAZ7XQ3RT5KJH2WB4N";
    let (hook, seen) = receiver(vec![200; 64]);
    let set = TempSet::new();
    let server = start_configured(
        &set,
        &format!(
            "[approvals]\nwebhook_url = \"http://127.0.0.1:{hook}/hook\"\n[audit]\nship_file = \"ship.jsonl\"\n"
        ),
        "widening = \"hold\"",
        &[],
    );
    let port = server.port;
    let call = json!({"tool": "write_file", "args": {"path": "a.txt", "content": "x"}});
    let (_, d) = exchange(port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
    assert_eq!(d["decision"], "pending_approval", "{d}");
    let id = d["approval_id"].as_str().unwrap().to_owned();
    let reason = format!("fine, deploy with {KEY} as agreed");
    let (s, answer) = exchange(
        port,
        "POST",
        &format!("/v1/approvals/{id}/approve"),
        Some(BOB),
        Some(&json!({"reason": reason})),
    )
    .unwrap();
    assert_eq!(s, 200, "{answer}");
    let decided = notice(&seen, "approval.decided", Duration::from_secs(15));
    let (s, _) = exchange(
        port,
        "POST",
        "/v1/admin/kill-switch",
        Some(BOB),
        Some(&json!({"on": false, "reason": format!("key {KEY}")})),
    )
    .unwrap();
    assert!(s < 500, "{s}");
    let (_, shown) =
        exchange(port, "GET", &format!("/v1/approvals/{id}"), Some(BOB), None).unwrap();
    assert!(
        shown["reason"]
            .as_str()
            .unwrap_or_default()
            .starts_with("fine, deploy with <redacted"),
        "{shown}"
    );
    let (_, audit) = exchange(port, "GET", "/v1/audit?limit=1000", Some(BOB), None).unwrap();
    // The ship file catches up within a second or so.
    let ship = set.dir.path().join("ship.jsonl");
    let deadline = Instant::now() + Duration::from_secs(10);
    let shipped = loop {
        let text = std::fs::read_to_string(&ship).unwrap_or_default();
        if text.contains("fine, deploy with") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(shipped.contains("fine, deploy with"), "{shipped}");
    for (place, text) in [
        ("the answer", answer.to_string()),
        ("the webhook", decided.to_string()),
        ("the approval", shown.to_string()),
        ("the audit log", audit.to_string()),
        ("the ship file", shipped),
    ] {
        assert!(!text.contains(KEY), "{place} holds the key: {text}");
    }
}
