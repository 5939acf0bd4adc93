//! Fleets: two real sidecars sharing one real Redis (`[fleet]`). One agent's quota is shared
//! exactly under concurrent load; a kill switch, a quarantine or a grant set on one sidecar is
//! in force on the other within a second; Redis going away turns calls into denies (stage
//! `shared_state`), never into allows, and its return turns them back.
//!
//! Redis is Debian's `redis-server` (installed by `.ci/run`); each test starts its own on a
//! free loopback port. Without it the tests skip loudly, except under
//! `TOOLGATE_REQUIRE_REDIS=1` (CI), where they fail.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::*;
use crate::process::{Server, exchange, start_with};

/// A `redis-server` of this test's own; killed when dropped.
struct Redis {
    child: Child,
    port: u16,
    bin: PathBuf,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn redis_bin() -> Option<PathBuf> {
    let found = std::env::var_os("TOOLGATE_REDIS_SERVER")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join("redis-server"))
                    .find(|p| p.is_file())
            })
        });
    if found.is_none() {
        assert!(
            std::env::var("TOOLGATE_REQUIRE_REDIS").as_deref() != Ok("1"),
            "TOOLGATE_REQUIRE_REDIS=1 but no redis-server on PATH: install Debian's redis-server"
        );
        eprintln!("SKIPPED: no redis-server on PATH (apt-get install redis-server)");
    }
    found
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

/// `GET key` on the Redis at `port` (inline command; a bulk string or nil).
fn redis_get(port: u16, key: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.write_all(format!("GET {key}\r\n").as_bytes()).unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).unwrap();
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer).into_owned();
        if text == "$-1\r\n" {
            return None;
        }
        if let Some((len, rest)) = text.strip_prefix('$').and_then(|t| t.split_once("\r\n")) {
            let len: usize = len.parse().unwrap();
            if rest.len() >= len + 2 {
                return Some(rest[..len].to_owned());
            }
        }
        assert!(n > 0, "Redis closed: {text}");
    }
}

impl Redis {
    fn start() -> Option<Redis> {
        let bin = redis_bin()?;
        Some(Redis::on(bin, free_port()))
    }

    fn on(bin: PathBuf, port: u16) -> Redis {
        let child = Command::new(&bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let redis = Redis { child, port, bin };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ping(port) {
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer PING"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        redis
    }

    fn url(&self) -> String {
        format!(
            "[fleet]\nredis_url = \"redis://127.0.0.1:{}/0\"\n",
            self.port
        )
    }

    /// Stops it (SIGKILL) and returns what starts it again on the same port.
    fn stop(self) -> (PathBuf, u16) {
        (self.bin.clone(), self.port)
    }
}

/// Two sidecars over their own data directories, sharing `redis`, with `extra` config.
fn pair(redis: &Redis, extra: &str) -> (Server, Server, TempSet, TempSet) {
    let (a_set, b_set) = (TempSet::new(), TempSet::new());
    let config = format!("{extra}\n{}", redis.url());
    let a = start_with(&a_set, &config);
    let b = start_with(&b_set, &config);
    (a, b, a_set, b_set)
}

fn read_call(i: usize) -> Value {
    json!({"tool": "read_file", "args": {"path": format!("src/f{i}.rs")}})
}

fn authorize(server: &Server, token: &str, call: &Value) -> (u16, Value) {
    exchange(
        server.port,
        "POST",
        "/v1/authorize",
        Some(token),
        Some(call),
    )
    .unwrap()
}

/// Waits up to `within` for `server`'s answer to `call` to satisfy `want`; how long it took.
fn until(
    server: &Server,
    token: &str,
    call: &Value,
    within: Duration,
    want: impl Fn(u16, &Value) -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        let (s, d) = authorize(server, token, call);
        if want(s, &d) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "not within {within:?}; last answer {s} {d}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stage_is(stage: &'static str) -> impl Fn(u16, &Value) -> bool {
    move |_, d| d["decision"] == "deny" && d["stage"] == stage
}

fn allowed(s: u16, d: &Value) -> bool {
    s == 200 && d["decision"] == "allow"
}

#[test]
fn two_sidecars_share_one_agents_quota_exactly_under_concurrent_load() {
    let Some(redis) = Redis::start() else { return };
    // 40 calls for the agent, all sidecars together; the bucket refills one call in 1000 s.
    let (a, b, _sa, _sb) = pair(
        &redis,
        "[rate_limits]\nper_principal = { per_second = 0.001, burst = 40 }\n",
    );
    let (mut allow, mut limited, mut other) = (0, 0, Vec::new());
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let server = if t % 2 == 0 { &a } else { &b };
                s.spawn(move || {
                    (0..25)
                        .map(|i| authorize(server, DEV, &read_call(t * 100 + i)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for (status, d) in h.join().unwrap() {
                match (status, d["decision"].as_str(), d["stage"].as_str()) {
                    (200, Some("allow"), _) => allow += 1,
                    (429, Some("deny"), Some("rate_limit")) => limited += 1,
                    _ => other.push((status, d)),
                }
            }
        }
    });
    assert!(other.is_empty(), "unexpected answers: {other:?}");
    assert_eq!((allow, limited), (40, 160), "one quota for both sidecars");
    // Each sidecar alone would have allowed 40: the shared count is what refused.
    let (s, d) = authorize(&b, SRE, &read_call(0));
    assert_eq!((s, d["decision"].as_str()), (200, Some("allow")), "{d}");
    let (s, d) = authorize(&a, DEV, &read_call(1));
    assert_eq!(s, 429, "{d}");
    assert!(
        d["message"].as_str().unwrap_or("").contains("rate limit"),
        "{d}"
    );
}

#[test]
fn a_kill_switch_quarantine_or_grant_on_one_sidecar_holds_on_the_other_within_a_second() {
    let Some(redis) = Redis::start() else { return };
    let (a, b, _sa, _sb) = pair(&redis, "");
    let call = read_call(0);
    let (s, d) = authorize(&b, DEV, &call);
    assert!(allowed(s, &d), "{d}");

    let (s, v) = exchange(
        a.port,
        "POST",
        "/v1/admin/kill-switch",
        Some(ALICE),
        Some(&json!({"on": true, "reason": "fleet drill"})),
    )
    .unwrap();
    assert_eq!(s, 200, "{v}");
    let took = until(
        &b,
        DEV,
        &call,
        Duration::from_secs(1),
        stage_is("kill_switch"),
    );
    eprintln!("kill switch on A stopped B after {took:?}");
    let (_, ready) = exchange(b.port, "GET", "/readyz", None, None).unwrap();
    assert_eq!(ready["kill_switch"], true, "{ready}");
    assert_eq!(ready["shared_state"]["fresh"], true, "{ready}");
    // Turned off on B: A decides again.
    let (s, v) = exchange(
        b.port,
        "POST",
        "/v1/admin/kill-switch",
        Some(ALICE),
        Some(&json!({"on": false, "reason": "drill over"})),
    )
    .unwrap();
    assert_eq!(s, 200, "{v}");
    until(&a, DEV, &call, Duration::from_secs(1), allowed);

    // A quarantine by hand on B holds on A; a release on A frees B.
    let (s, v) = exchange(
        b.port,
        "POST",
        "/v1/admin/quarantine",
        Some(ALICE),
        Some(&json!({"agent": "dev-agent", "on": true, "reason": "suspicious"})),
    )
    .unwrap();
    assert_eq!(s, 200, "{v}");
    until(
        &a,
        DEV,
        &call,
        Duration::from_secs(1),
        stage_is("quarantine"),
    );
    let (_, listed) = exchange(a.port, "GET", "/v1/admin/quarantine", Some(ALICE), None).unwrap();
    assert_eq!(
        listed["quarantined"][0]["by"], "Human::\"alice\"",
        "{listed}"
    );
    assert!(
        authorize(&a, SRE, &call).1["decision"] == "allow",
        "others still pass"
    );
    let (s, v) = exchange(
        a.port,
        "POST",
        "/v1/admin/quarantine",
        Some(ALICE),
        Some(&json!({"agent": "dev-agent", "on": false, "reason": "cleared"})),
    )
    .unwrap();
    assert_eq!(s, 200, "{v}");
    until(&b, DEV, &call, Duration::from_secs(1), allowed);

    // A grant made on A lets the agent through on B; revoked on B, A denies again.
    let run_tests = json!({"tool": "run_tests", "args": {}});
    assert_eq!(authorize(&b, PO, &run_tests).1["decision"], "deny");
    let grant = json!({"template": "grant-tool-access",
                       "principal": {"type": "Agent", "id": "po-agent"},
                       "resource": {"type": "Tool", "id": "run_tests"},
                       "ttl_s": 600, "reason": "incident 42"});
    let (s, g) = exchange(a.port, "POST", "/v1/grants", Some(ALICE), Some(&grant)).unwrap();
    assert_eq!(s, 201, "{g}");
    until(&b, PO, &run_tests, Duration::from_secs(1), |_, d| {
        d["decision"] != "deny"
    });
    let id = g["id"].as_str().unwrap();
    let (_, listed) = exchange(b.port, "GET", "/v1/grants", Some(ALICE), None).unwrap();
    assert_eq!(listed["grants"][0]["id"], id, "{listed}");
    let (s, v) = exchange(
        b.port,
        "POST",
        &format!("/v1/grants/{id}/revoke"),
        Some(ALICE),
        Some(&json!({"reason": "done"})),
    )
    .unwrap();
    assert_eq!(s, 200, "{v}");
    until(&a, PO, &run_tests, Duration::from_secs(1), |_, d| {
        d["decision"] == "deny" && d["stage"] == "policy"
    });
}

#[test]
fn redis_going_away_gives_denies_and_its_return_gives_decisions() {
    let Some(redis) = Redis::start() else { return };
    let set = TempSet::new();
    let server = start_with(
        &set,
        &format!(
            "[rate_limits]\nper_principal = {{ per_second = 100, burst = 100 }}\n{}",
            redis.url()
        ),
    );
    let call = read_call(0);
    until(&server, DEV, &call, Duration::from_secs(2), allowed);

    let (bin, port) = redis.stop();
    // The shared limit fails at once; the switch's read goes stale within `stale_ms` (1 s).
    let took = until(
        &server,
        DEV,
        &call,
        Duration::from_secs(2),
        stage_is("shared_state"),
    );
    eprintln!("Redis gone: denied after {took:?}");
    for token in [DEV, SRE] {
        let (s, d) = authorize(&server, token, &call);
        assert_eq!((s, d["decision"].as_str()), (200, Some("deny")), "{d}");
        assert_eq!(d["errors"][0]["code"], "shared_state_unavailable", "{d}");
    }
    std::thread::sleep(Duration::from_millis(1200));
    let (s, d) = authorize(&server, DEV, &call);
    assert_eq!(
        (s, d["stage"].as_str()),
        (200, Some("shared_state")),
        "stale: {d}"
    );
    let (s, ready) = exchange(server.port, "GET", "/readyz", None, None).unwrap();
    assert_eq!(s, 503, "{ready}");
    assert_eq!(ready["shared_state"]["fresh"], false, "{ready}");
    // A human's change cannot reach the fleet: recorded here, answered 503 `not_shared`.
    let (s, v) = exchange(
        server.port,
        "POST",
        "/v1/admin/kill-switch",
        Some(ALICE),
        Some(&json!({"on": true, "reason": "while Redis is down"})),
    )
    .unwrap();
    assert_eq!((s, v["error"].as_str()), (503, Some("not_shared")), "{v}");
    // The denies are recorded like any other.
    let (_, log) = exchange(
        server.port,
        "GET",
        "/v1/audit?stage=shared_state",
        Some(ALICE),
        None,
    )
    .unwrap();
    assert!(
        log["records"].as_array().is_some_and(|r| !r.is_empty()),
        "{log}"
    );

    // Back on the same port, empty: the switch set while it was down is still in force here,
    // and reaches Redis at the next read; turning it off is shared too.
    let _redis = Redis::on(bin, port);
    until(
        &server,
        DEV,
        &call,
        Duration::from_secs(5),
        stage_is("kill_switch"),
    );
    let (s, ready) = exchange(server.port, "GET", "/readyz", None, None).unwrap();
    assert_eq!((s, &ready["kill_switch"]), (200, &json!(true)), "{ready}");
    // The change Redis missed was sent again once it answered: the fleet has it now.
    let shared = redis_get(port, "toolgate:kill_switch").expect("the queued switch was sent");
    assert!(shared.contains("\"on\":true"), "{shared}");
    let (s, v) = exchange(
        server.port,
        "POST",
        "/v1/admin/kill-switch",
        Some(ALICE),
        Some(&json!({"on": false, "reason": "Redis is back"})),
    )
    .unwrap();
    assert_eq!(s, 200, "{v}");
    until(&server, DEV, &call, Duration::from_secs(1), allowed);
}

#[test]
fn fleet_settings_are_checked() {
    let set = TempSet::new();
    for (extra, says) in [
        ("[fleet]\nredis_url = \"http://x\"\n", "not a redis:// URL"),
        ("[fleet]\nredis_url = \"rediss://h:6380\"\n", "TLS"),
        ("[fleet]\npoll_ms = 100\n", "need `fleet.redis_url`"),
        (
            "[fleet]\nredis_url = \"redis://:hunter2@h:1\"\nkey_prefix = \"\"\n",
            "`fleet.key_prefix`",
        ),
        (
            "[fleet]\nredis_url = \"redis://h:1\"\npoll_ms = 900\nstale_ms = 1000\n",
            "less than `poll_ms` + 3 × `timeout_ms`",
        ),
        (
            "[fleet]\nredis_url = \"redis://h:1\"\ntimeout_ms = 0\n",
            "`fleet.timeout_ms` = 0",
        ),
    ] {
        let err = crate::process::serve_refuses(&set, extra);
        assert!(err.contains(says), "{extra}: {err}");
        assert!(
            !err.contains("hunter2"),
            "a password is never echoed: {err}"
        );
    }
}

#[test]
fn a_shared_day_window_counts_every_sidecars_calls() {
    let Some(redis) = Redis::start() else { return };
    let (a, b, _sa, _sb) = pair(
        &redis,
        "[rate_limits]\nper_principal_tool = { per_day = 30 }\n",
    );
    let answers: Vec<(u16, Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|t| {
                let server = if t % 2 == 0 { &a } else { &b };
                s.spawn(move || {
                    (0..10)
                        .map(|i| authorize(server, DEV, &read_call(t * 100 + i)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let allow = answers.iter().filter(|(s, d)| allowed(*s, d)).count();
    let limited = answers.iter().filter(|(s, _)| *s == 429).count();
    assert_eq!(
        (allow, limited),
        (30, 30),
        "one day's count for both sidecars"
    );
    // Another tool has its own count; another agent too.
    let list = json!({"tool": "list_dir", "args": {"path": "src"}});
    assert!(allowed(
        authorize(&a, DEV, &list).0,
        &json!({"decision": "allow"})
    ));
    let (s, d) = authorize(&b, SRE, &read_call(0));
    assert!(allowed(s, &d), "{d}");
}

#[test]
fn an_anomaly_quarantine_on_one_sidecar_holds_on_the_other() {
    let Some(redis) = Redis::start() else { return };
    let (a, b, _sa, _sb) = pair(
        &redis,
        "[anomaly]\nviolations_per_minute = 2\nquarantine_on = [\"violation_rate\"]\n",
    );
    for _ in 0..3 {
        let denied = json!({"tool": "read_file", "args": {"path": ".env"}});
        assert_eq!(authorize(&a, DEV, &denied).1["stage"], "policy");
    }
    let took = until(
        &b,
        DEV,
        &read_call(0),
        Duration::from_secs(2),
        stage_is("quarantine"),
    );
    eprintln!("anomaly quarantine on A held on B after {took:?}");
    let (_, listed) = exchange(b.port, "GET", "/v1/admin/quarantine", Some(ALICE), None).unwrap();
    assert_eq!(
        listed["quarantined"][0]["cause"], "violation_rate",
        "{listed}"
    );
}

/// One command on the Redis at `port` (inline); its first reply line.
fn redis_cmd(port: u16, cmd: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.write_all(format!("{cmd}\r\n").as_bytes()).unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

#[test]
fn an_older_change_never_overwrites_a_newer_one_and_lost_state_is_written_back() {
    let Some(redis) = Redis::start() else { return };
    let (a, b, _sa, _sb) = pair(&redis, "");
    let call = read_call(0);
    let flip = |server: &Server, on: bool| {
        let body = json!({"on": on, "reason": "drill"});
        exchange(
            server.port,
            "POST",
            "/v1/admin/kill-switch",
            Some(ALICE),
            Some(&body),
        )
        .unwrap()
    };
    assert_eq!(flip(&a, true).0, 200);
    until(
        &b,
        DEV,
        &call,
        Duration::from_secs(1),
        stage_is("kill_switch"),
    );

    // Redis restarts empty (FLUSHALL): the sidecars write back what they hold, so the switch
    // stays on everywhere and Redis has it again.
    assert_eq!(redis_cmd(redis.port, "FLUSHALL"), "+OK");
    let deadline = Instant::now() + Duration::from_secs(3);
    while redis_get(redis.port, "toolgate:kill_switch").is_none() {
        assert!(Instant::now() < deadline, "the switch was not written back");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(600));
    for server in [&a, &b] {
        let (_, d) = authorize(server, DEV, &call);
        assert_eq!(d["stage"], "kill_switch", "{d}");
    }

    // A switch set later than any change a sidecar makes now (its at_ms is in the future):
    // turning it off from A is older, so Redis keeps it and the fleet stays stopped.
    let later = json!({"on": true, "by": "Human::\"alice\"", "reason": "later", "at_ms": 4_000_000_000_000u64});
    let set = format!(
        "SET toolgate:kill_switch '{}'",
        later.to_string().replace('\'', "")
    );
    assert_eq!(redis_cmd(redis.port, &set), "+OK");
    assert_eq!(
        redis_cmd(redis.port, "SET toolgate:version hand-edit"),
        "+OK"
    );
    assert_eq!(flip(&a, false).0, 200);
    std::thread::sleep(Duration::from_millis(800));
    let kept = redis_get(redis.port, "toolgate:kill_switch").unwrap();
    assert!(kept.contains("later"), "{kept}");
    until(
        &a,
        DEV,
        &call,
        Duration::from_secs(1),
        stage_is("kill_switch"),
    );
    let (_, d) = authorize(&b, DEV, &call);
    assert_eq!(d["stage"], "kill_switch", "{d}");
}

/// A Redis restarted empty loses the fleet's counters. Each sidecar adds its own calls of the
/// current windows back on its next call, so a shared day limit still holds across the
/// restart instead of starting again from zero.
#[test]
fn a_redis_restarted_empty_does_not_reset_the_shared_limits() {
    let Some(redis) = Redis::start() else { return };
    let (a, b, _sa, sb) = pair(
        &redis,
        "[rate_limits]\nper_principal_tool = { per_day = 20 }\n",
    );
    let mut passed = 0;
    for i in 0..12 {
        let server = if i % 3 == 0 { &b } else { &a };
        let (s, d) = authorize(server, DEV, &read_call(i));
        assert!(allowed(s, &d), "{d}");
        passed += 1;
    }
    // Redis restarts with nothing (no persistence), on the same port.
    let (bin, port) = redis.stop();
    let redis = Redis::on(bin, port);
    // Each sidecar decides again once it reads Redis (until then its calls are denied at
    // `shared_state`); the first call that gets a decision counts.
    for server in [&a, &b] {
        let start = Instant::now();
        loop {
            let (s, d) = authorize(server, DEV, &read_call(500));
            if allowed(s, &d) {
                passed += 1;
                break;
            }
            assert!(d["stage"] == "shared_state", "{s} {d}");
            assert!(start.elapsed() < Duration::from_secs(10), "{d}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let mut more = 0;
    for i in 100..140 {
        let server = if i % 2 == 0 { &a } else { &b };
        let (s, d) = authorize(server, DEV, &read_call(i));
        if allowed(s, &d) {
            more += 1;
        } else {
            assert_eq!(s, 429, "{d}");
        }
    }
    assert_eq!(
        passed + more,
        20,
        "the day's limit across the restart: {passed} before and while it came back, {more} after"
    );
    let log = std::fs::read_to_string(sb.dir.path().join("serve.log")).unwrap();
    assert!(log.contains("lost its limit counters"), "{log}");
    drop(redis);
}
