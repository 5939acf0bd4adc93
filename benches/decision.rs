//! In-process decision cost. Run: `cargo bench --bench decision`.
//!
//! - `decision/*`: a toolgate decision over the shipped policies next to one bare Cedar
//!   `is_authorized` over the same (whole) policy set with the request prebuilt (the floor).
//! - `scale/*`: the same decision over 30 policies (3 tools) and 5,000 policies (500 tools);
//!   per-action slicing keeps them equal.
//! - `reload/*`: building a snapshot of the 5,000-policy set from disk cold (startup), and a
//!   reload after one policy file changed (validation of unchanged files is remembered).
//! - `approvals_pending/*`: one `POST /v1/authorize` through the in-process router that opens
//!   a new pending approval, with 1 to 100,000 approvals already stored, under `sync = "off"`
//!   (the approval path alone) and `sync = "group"` (with the flushed commit).
//! - `approvals_tick/*`: one expiry and retention tick over 100,000 stored, nothing due.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing
)]

#[path = "support/scale.rs"]
mod scale;

use std::path::{Path, PathBuf};

use cedar_policy::{Context, EntityUid, Request, RestrictedExpression};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

use toolgate::authz::{Call, Correlation, Principal, PrincipalKind, decide};
use toolgate::policy::{Snapshot, Sources, load};

fn sources(root: &Path) -> Sources {
    Sources::new(root.join("policies"), root.join("schemas"))
}

fn call(tool: &str, args: serde_json::Value) -> Call {
    Call {
        tool: tool.to_owned(),
        args,
        correlation: Correlation::default(),
    }
}

/// The request toolgate builds for `args` (arguments, path facts, approval not granted, quiet
/// usage and anomaly signals), built
/// once with the tool's own converters, so the floor evaluates the same context.
fn bare_request(snap: &Snapshot, tool: &str, args: &serde_json::Value) -> Request {
    let t = snap.tools.get(tool).unwrap();
    let approval = RestrictedExpression::new_record([(
        "granted".to_owned(),
        RestrictedExpression::new_bool(false),
    )])
    .unwrap();
    let zero = || RestrictedExpression::new_long(0);
    let usage = RestrictedExpression::new_record(
        [
            "tool_last_minute",
            "tool_last_hour",
            "calls_last_minute",
            "denials_last_minute",
        ]
        .map(|k| (k.to_owned(), zero())),
    )
    .unwrap();
    let anomaly = RestrictedExpression::new_record([
        ("active".to_owned(), RestrictedExpression::new_bool(false)),
        ("kinds".to_owned(), RestrictedExpression::new_set([])),
    ])
    .unwrap();
    let mut pairs = vec![
        ("args".to_owned(), t.args_to_cedar(args).unwrap()),
        ("approval".to_owned(), approval),
        ("usage".to_owned(), usage),
        ("anomaly".to_owned(), anomaly),
    ];
    pairs.extend(
        t.paths_to_cedar(args, &snap.deny, None)
            .unwrap()
            .map(|p| ("paths".to_owned(), p)),
    );
    let ctx = Context::from_pairs(pairs).unwrap();
    let agent: EntityUid = r#"Agent::"dev-agent""#.parse().unwrap();
    Request::new(
        agent,
        t.action_uid.clone(),
        t.resource_uid.clone(),
        ctx,
        None,
    )
    .unwrap()
}

fn decisions(c: &mut Criterion) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let snap = load(&sources(&root)).unwrap().snapshot;
    let agent = Principal::new(PrincipalKind::Agent, "dev-agent");
    let read_args = json!({"path": "src/main.rs", "max_bytes": 4096});
    let allow = call("read_file", read_args.clone());
    let pending = call("write_file", json!({"path": "src/lib.rs", "content": "x"}));
    let request = bare_request(&snap, "read_file", &read_args);

    let mut g = c.benchmark_group("decision");
    g.bench_function("bare_cedar_is_authorized", |b| {
        b.iter(|| {
            snap.authorizer
                .is_authorized(&request, &snap.policies, &snap.entities)
        })
    });
    g.bench_function("toolgate_allow_read_file", |b| {
        b.iter(|| decide(&snap, &agent, &allow))
    });
    g.bench_function("toolgate_pending_write_file", |b| {
        b.iter(|| decide(&snap, &agent, &pending))
    });
    g.finish();
}

fn scaled(tools: usize, per_tool: usize) -> (tempfile::TempDir, Snapshot) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    scale::write_scaled_set(&root, dir.path(), tools, per_tool).unwrap();
    let snap = load(&sources(dir.path())).unwrap().snapshot;
    (dir, snap)
}

fn scale(c: &mut Criterion) {
    let agent = Principal::new(PrincipalKind::Agent, "dev-agent");
    let t = call("t0000", json!({"path": "src/a.rs", "n": 5, "tags": ["x"]}));
    let (_small_dir, small) = scaled(3, 10);
    let (big_dir, big) = scaled(500, 10);
    // Plus five `approve` policies naming the shipped roles (outside every tool's slice).
    assert_eq!(small.policy_count(), 35);
    assert_eq!(big.policy_count(), 5005);
    let mut g = c.benchmark_group("scale");
    g.bench_function("decision_30_policies", |b| {
        b.iter(|| decide(&small, &agent, &t))
    });
    g.bench_function("decision_5000_policies", |b| {
        b.iter(|| decide(&big, &agent, &t))
    });
    g.finish();

    let mut g = c.benchmark_group("reload");
    g.sample_size(10);
    let src = sources(big_dir.path());
    g.bench_function("build_5000_policies_cold", |b| {
        b.iter(|| load(&src).unwrap())
    });
    // What a reload after an edit costs: one of the ten policy files changed, the others
    // already validated under the same schema.
    // `apply`: without a solver the edit cannot be proved equal and would be held.
    let store = toolgate::reload::PolicyStore::open(src.clone())
        .unwrap()
        .0
        .with_options(toolgate::reload::StoreOptions {
            widening: toolgate::reload::Widening::Apply,
            ..Default::default()
        });
    let file = big_dir.path().join("policies/tools-0000.cedar");
    let original = std::fs::read_to_string(&file).unwrap();
    let mut flip = false;
    g.bench_function("reload_5000_policies_one_file_changed", |b| {
        b.iter(|| {
            flip = !flip;
            let text = if flip {
                format!("{original}\n// edited\n")
            } else {
                original.clone()
            };
            std::fs::write(&file, text).unwrap();
            assert!(matches!(
                store.reload(false),
                toolgate::reload::ReloadOutcome::Applied { .. }
            ));
        })
    });
    g.finish();
}

/// The rate limiter's cost per call, with all three levels configured (the most it does).
fn limiter(c: &mut Criterion) {
    use toolgate::limits::{LimitConfig, Limiter, MonotonicClock, Rate};
    let wide = Rate::bucket(1e12, u32::MAX);
    let limiter = Limiter::new(
        LimitConfig {
            global: Some(wide),
            per_principal: Some(wide),
            per_principal_tool: Some(wide),
        },
        std::sync::Arc::new(MonotonicClock::default()),
    );
    let agent = Principal::new(PrincipalKind::Agent, "dev-agent")
        .uid
        .to_string();
    let mut g = c.benchmark_group("limits");
    g.bench_function("check_three_buckets", |b| {
        b.iter(|| limiter.check(&agent, "read_file", true, None))
    });
    // The same three levels with a bucket and all three fixed windows each.
    let windowed = Rate {
        per_minute: Some(u32::MAX),
        per_hour: Some(u32::MAX),
        per_day: Some(u32::MAX),
        ..wide
    };
    let limiter = Limiter::new(
        LimitConfig {
            global: Some(windowed),
            per_principal: Some(windowed),
            per_principal_tool: Some(windowed),
        },
        std::sync::Arc::new(MonotonicClock::default()),
    );
    g.bench_function("check_three_buckets_and_windows", |b| {
        b.iter(|| limiter.check(&agent, "read_file", true, None))
    });
    g.finish();
}

/// What the decision path records per answer in the metrics recorder: the decision counter
/// (tool, outcome, stage), the latency histogram, the per-tool summary and the audit write
/// latency. Upkeep runs now and then so recorded samples do not pile up.
fn metrics(c: &mut Criterion) {
    use std::time::Duration;
    use toolgate::authz::{Outcome, Stage};
    let m = toolgate::metrics::Metrics::new();
    let mut g = c.benchmark_group("metrics");
    let mut n = 0u32;
    g.bench_function("record_decision", |b| {
        b.iter(|| {
            m.decision(
                Some("read_file"),
                Outcome::Allow,
                Stage::Policy,
                Duration::from_micros(120),
            );
            m.audit_write(Duration::from_micros(40));
            n = n.wrapping_add(1);
            if n.is_multiple_of(100_000) {
                m.upkeep();
            }
        })
    });
    g.finish();
}

/// The anomaly hook's cost per call on the decision path: usage counters read and bumped,
/// raised signals read, and the answered decision queued for the detectors' thread.
fn anomaly(c: &mut Criterion) {
    use toolgate::anomaly::{Alerts, DetectorConfig, Monitor};
    use toolgate::authz::{Outcome, Stage};
    use toolgate::limits::MonotonicClock;
    let monitor = Monitor::start(
        DetectorConfig::default(),
        std::sync::Arc::new(MonotonicClock::default()),
        Alerts::default(),
    )
    .unwrap();
    let agent = Principal::new(PrincipalKind::Agent, "dev-agent")
        .uid
        .to_string();
    let mut g = c.benchmark_group("anomaly");
    g.bench_function("signals_and_observe", |b| {
        b.iter(|| {
            let s = monitor.signals(&agent, "read_file", true);
            monitor.observe(&agent, "read_file", Outcome::Allow, Stage::Policy);
            s
        })
    });
    g.finish();
}

/// The full detector set over mixed text (prose, code, logs, JSON, a few secrets): bytes per
/// second on one core.
fn redact(c: &mut Criterion) {
    use toolgate::redact::{RedactConfig, Redactor};
    let r = Redactor::new(&RedactConfig::default()).unwrap();
    let block = [
        "The deploy finished at 2026-11-23T04:10:00Z after 3 retries; see https://ci.example.com/runs/8812.\n",
        "fn handle(req: Request) -> Result<Response, Error> { let id = req.header(\"x-request-id\")?; Ok(ok(id)) }\n",
        "{\"user\": {\"name\": \"Ann Lee\", \"plan\": \"pro\", \"seats\": 12}, \"commit\": \"9fceb02d0ae598e95dc970b74767f19372d61af8\"}\n",
        "INFO worker-3 processed batch 1182 in 41 ms (queue depth 7, p99 12 ms)\n",
        "Les résultats sont prêts : 42 fichiers traités, aucune erreur. 完成。\n",
        "export STRIPE_API_KEY=sk_live_4eC39HqLyjWDarjtT1zdp7dc and mail ops@example.com\n",
    ]
    .concat();
    let text = block.repeat(1 + (1 << 20) / block.len());
    let mut g = c.benchmark_group("redact");
    g.throughput(criterion::Throughput::Bytes(text.len() as u64));
    g.bench_function("scan_1mb_mixed", |b| b.iter(|| r.scan(&text).len()));
    let plain = Redactor::new(&RedactConfig {
        entropy: None,
        ..RedactConfig::default()
    })
    .unwrap();
    g.bench_function("scan_1mb_mixed_no_entropy", |b| {
        b.iter(|| plain.scan(&text).len())
    });
    // No line twice: every secret, address and number differs (a repeated value is judged
    // once per text, so the repeated block above is the friendlier case).
    let mut distinct = String::with_capacity(text.len() + 1024);
    let mut n: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        n ^= n << 13;
        n ^= n >> 7;
        n ^= n << 17;
        n
    };
    const AN: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    while distinct.len() < 1 << 20 {
        let key: String = (0..24)
            .map(|_| char::from(AN[(next() % AN.len() as u64) as usize]))
            .collect();
        let id = next() % 100_000;
        distinct.push_str(&format!(
            "The deploy {id} finished at 2026-11-23T04:10:00Z after 3 retries; see https://ci.example.com/runs/{id}.\n\
             fn handle_{id}(req: Request) -> Result<Response, Error> {{ let id = req.header(\"x-request-id\")?; Ok(ok(id)) }}\n\
             INFO worker-3 processed batch {id} in 41 ms (queue depth 7, p99 12 ms)\n\
             Les résultats sont prêts : {id} fichiers traités, aucune erreur. 完成。\n\
             export STRIPE_API_KEY=sk_live_{key} and mail ops{id}@example.com\n\
             db_password: Tr0ub-{key}\n"
        ));
    }
    g.throughput(criterion::Throughput::Bytes(distinct.len() as u64));
    g.bench_function("scan_1mb_distinct", |b| b.iter(|| r.scan(&distinct).len()));
    // Hostile input: a megabyte of private-key headers with no END line, and of certificate
    // headers (each pairs with an END line by binary search, never by searching ahead).
    let headers = "-----BEGIN RSA PRIVATE KEY-----\nabc\n-----BEGIN CERTIFICATE-----\n"
        .repeat((1 << 20) / 64);
    g.throughput(criterion::Throughput::Bytes(headers.len() as u64));
    g.bench_function("scan_1mb_key_headers", |b| {
        b.iter(|| r.scan(&headers).len())
    });
    g.finish();
    // What the tool_call gate adds to a decision: one scan of the arguments giving the
    // verdict and the redacted preview.
    use toolgate::redact::{Gate, Gates};
    let gates = Gates::builtin().unwrap();
    let rules = gates.rules_for(Gate::ToolCall);
    let small = serde_json::json!({"path": "src/main.rs", "max_bytes": 4096});
    let kib = serde_json::json!({
        "query": "fn handle(req: Request) -> Result<Response, Error> ".repeat(12),
        "path": "src/api/handlers.rs",
        "note": "ask ops@example.com before merging",
        "regex": true,
    });
    let mut g = c.benchmark_group("tool_call_gate");
    g.bench_function("small_args", |b| {
        b.iter(|| gates.redactor().screen_and_redact(rules, &small, true))
    });
    g.bench_function("one_kib_args", |b| {
        b.iter(|| gates.redactor().screen_and_redact(rules, &kib, true))
    });
    g.finish();
}

/// The per-run sandbox plan over this checkout as the quickstart's root (its `target/`
/// included), and over the system directories: what every `/v1/execute` run pays before
/// its launcher starts.
fn sandbox(c: &mut Criterion) {
    use toolgate::exec::sandbox::{Exclusions, Plan, SYSTEM_READ};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .canonicalize()
        .unwrap();
    let protected: Vec<std::path::PathBuf> =
        ["policies", "schemas", "data", "examples/demo-tokens.json"]
            .iter()
            .map(|p| root.join(p))
            .collect();
    let deny = toolgate::globs::SegmentGlobs::default();
    let inodes = toolgate::exec::sandbox::inodes(&protected);
    let ex = Exclusions {
        paths: &protected,
        deny: &deny,
        exempt: &[],
        inodes: &inodes,
        cache: None,
    };
    let cache = toolgate::exec::sandbox::DirCache::default();
    let cached = Exclusions {
        cache: Some(&cache),
        ..ex
    };
    let mut g = c.benchmark_group("sandbox");
    // The floor: listing every directory of the same tree (names and types, as `read_dir`
    // gives them), with no look at any entry and no plan.
    g.bench_function("walk_checkout_root_floor", |b| {
        b.iter(|| {
            let mut seen = 0usize;
            let mut stack = vec![root.clone()];
            while let Some(dir) = stack.pop() {
                let Ok(rd) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for e in rd.flatten() {
                    seen += 1;
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        stack.push(e.path());
                    }
                }
            }
            seen
        })
    });
    g.bench_function("plan_checkout_root", |b| {
        b.iter(|| {
            let mut plan = Plan::default();
            plan.add(&root, &ex, true).unwrap();
            plan.grants.len()
        })
    });
    g.bench_function("plan_checkout_root_cached", |b| {
        b.iter(|| {
            let mut plan = Plan::default();
            plan.add(&root, &cached, true).unwrap();
            plan.grants.len()
        })
    });
    g.bench_function("plan_system_dirs", |b| {
        b.iter(|| {
            let mut plan = Plan::default();
            for d in SYSTEM_READ {
                plan.add(std::path::Path::new(d), &ex, false).unwrap();
            }
            plan.grants.len()
        })
    });
    g.finish();
}

/// An in-process sidecar over the shipped set, its approvals stored in a temporary directory
/// that already holds `n` approvals: every tenth pending (for its own call), the others
/// denied or used. The ended ones are dated a day ahead, so the retention the bench runs with
/// (0 s), which removes what each sample opened, leaves those `n` in place.
mod approvals_bench {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use axum::Router;
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use serde_json::{Value, json};
    use tower::ServiceExt;

    use toolgate::api::router;
    use toolgate::approvals::{Approval, Approvals, Bounds, Status, Ttl};
    use toolgate::audit::{Audit, Chain, Durability, Effect};
    use toolgate::auth::Authenticator;
    use toolgate::config::AuthConfig;
    use toolgate::gateway::Gateway;
    use toolgate::storage::Stores;

    pub struct Sidecar {
        pub app: Router,
        pub state: Gateway,
        pub approvals: Arc<Approvals>,
    }

    fn stored(i: usize, now: u64, ahead: u64) -> Approval {
        let status = match i % 10 {
            0 => Status::Pending,
            1..=5 => Status::Denied,
            _ => Status::Used,
        };
        Approval {
            id: uuid::Uuid::now_v7().to_string(),
            principal: format!("Agent::\"agent-{}\"", i % 50),
            on_behalf_of: None,
            tool: "write_file".to_owned(),
            risk: "high".to_owned(),
            args_sha256: format!("{i:064x}"),
            args_preview: "{\"path\":10,\"content\":8}".to_owned(),
            policy_revision: "bench".to_owned(),
            decision_id: uuid::Uuid::now_v7().to_string(),
            created_ms: now,
            expires_ms: now + 86_400_000,
            status,
            decided_by: (status != Status::Pending).then(|| "Human::\"bob\"".to_owned()),
            reason: None,
            decided_ms: (status != Status::Pending).then_some(now + ahead),
            used_ms: (status == Status::Used).then_some(now + ahead),
            waiting_on: vec!["tier-high-needs-approval".to_owned()],
            provenance: Default::default(),
        }
    }

    /// `n` approvals stored, ended ones dated `ahead` ms from now, the sidecar answering
    /// under `durability` and removing ended approvals after `retain_secs`.
    pub fn sidecar(n: usize, durability: Durability, ahead: u64, retain_secs: u64) -> Sidecar {
        let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let stores = Stores::temporary().unwrap();
        let audit = Arc::new(Audit::start(stores.audit, Chain::plain(), durability).unwrap());
        let rt = tokio::runtime::Runtime::new().unwrap();
        let now = toolgate::clock::now_ms();
        let all: Vec<Effect> = (0..n)
            .map(|i| stored(i, now, ahead).effect().unwrap())
            .collect();
        for chunk in all.chunks(2_000) {
            rt.block_on(audit.commit(Vec::new(), chunk.to_vec()))
                .unwrap();
        }
        let approvals = Arc::new(
            Approvals::new(
                stores.approvals,
                Ttl::default(),
                Bounds {
                    per_agent: Bounds::MAX,
                    total: Bounds::MAX,
                },
            )
            .unwrap()
            .with_retention(retain_secs),
        );
        let snap = toolgate::policy::load(&super::sources(&root))
            .unwrap()
            .snapshot;
        let auth = Authenticator::from_config(&AuthConfig {
            tokens_file: Some(root.join("examples/demo-tokens.json")),
            ..AuthConfig::default()
        })
        .unwrap();
        let state = Gateway::with_services(
            Arc::new(toolgate::reload::PolicyStore::new(snap, None)),
            auth,
            64 * 1024,
            audit,
            approvals.clone(),
        );
        Sidecar {
            app: router(state.clone()),
            state,
            approvals,
        }
    }

    pub async fn post(app: &Router, path: &str, token: &str, body: &Value) -> Value {
        let req = Request::builder()
            .method("POST")
            .uri(path)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    /// Times `iters` calls that each open a new pending approval; untimed, denies each, then
    /// removes them (retention 0 s), so every call finds the same `n` stored.
    pub fn open_new(
        rt: &tokio::runtime::Runtime,
        s: &Sidecar,
        iters: u64,
        seq: &mut u64,
    ) -> Duration {
        rt.block_on(async {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                *seq += 1;
                let call = json!({"tool": "write_file", "args": {"path": "src/lib.rs", "content": format!("bench {seq}")}});
                let start = Instant::now();
                let d = post(&s.app, "/v1/authorize", "demo-dev-token", &call).await;
                spent += start.elapsed();
                assert_eq!(d["decision"], "pending_approval", "{d}");
                let id = d["approval_id"].as_str().unwrap();
                let denied = post(&s.app, &format!("/v1/approvals/{id}/deny"), "demo-bob-token", &json!({})).await;
                assert_eq!(denied["status"], "denied", "{denied}");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            toolgate::gateway::expire_due(&s.state).await;
            spent
        })
    }
}

/// Pending-call cost against the number of approvals stored (issue 21 item 5): flat, since
/// neither opening an approval nor the expiry tick reads the stored approvals.
fn approvals(c: &mut Criterion) {
    use toolgate::audit::Durability;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let day = 86_400_000;
    for (mode, durability) in [("off", Durability::Off), ("group", Durability::Group)] {
        let mut g = c.benchmark_group("approvals_pending");
        g.sample_size(20);
        g.warm_up_time(std::time::Duration::from_millis(500));
        g.measurement_time(std::time::Duration::from_secs(3));
        for n in [1, 1_000, 10_000, 100_000] {
            let s = approvals_bench::sidecar(n, durability, day, 0);
            let mut seq = 0;
            g.bench_function(format!("{mode}_open_new_with_{n}_stored"), |b| {
                b.iter_custom(|iters| approvals_bench::open_new(&rt, &s, iters, &mut seq))
            });
            let left = s
                .approvals
                .list(None, toolgate::clock::now_ms(), usize::MAX, |_| true)
                .unwrap()
                .len();
            assert_eq!(left, n, "the bench kept {n} stored");
        }
        g.finish();
    }
    // The tick the sidecar runs every second, over 100,000 stored (ended ones within the
    // default day's retention, pending ones not yet expired): nothing is due.
    let s = approvals_bench::sidecar(
        100_000,
        Durability::Group,
        0,
        toolgate::approvals::RETAIN_SECS,
    );
    let mut g = c.benchmark_group("approvals_tick");
    g.bench_function("expire_due_100000_stored_none_due", |b| {
        b.iter(|| rt.block_on(toolgate::gateway::expire_due(&s.state)))
    });
    g.finish();
}

/// Provenance per call: remembering a 4 KiB tool output, then tracing a call's three text
/// arguments in a conversation holding ~2,000 tokens, next to the decision itself.
fn provenance(c: &mut Criterion) {
    use toolgate::provenance::{Memory, Settings, Source};
    let memory = Memory::new(Settings::default());
    let p = "Agent::\"dev-agent\"";
    memory.record(
        p,
        "c",
        Source::User,
        &json!("Email the Q3 notes to bob@corp.example"),
    );
    let page: String = (0..400)
        .map(|i| format!("word{i} "))
        .chain(["contact eve@evil.example or https://evil.example/x ".to_owned()])
        .collect();
    for _ in 0..5 {
        memory.record(p, "c", Source::Tool, &json!({"body": page}));
    }
    let output = json!({"status": 200, "body": page.get(..4096).unwrap_or(&page)});
    let args = json!({"to": ["bob@corp.example", "eve@evil.example"], "subject": "Q3 notes",
                      "body": "Hi Bob, the notes are attached. See https://evil.example/x"});
    let values: Vec<(&str, &serde_json::Value)> = ["to", "subject", "body"]
        .iter()
        .map(|k| (*k, &args[*k]))
        .collect();
    let mut g = c.benchmark_group("provenance");
    g.bench_function("record_4kib_tool_output", |b| {
        b.iter(|| memory.record(p, "c", Source::Tool, &output))
    });
    g.bench_function("classify_three_arguments", |b| {
        b.iter(|| memory.classify(p, Some("c"), values.iter().copied()))
    });
    g.finish();
}

criterion_group!(
    benches, decisions, scale, limiter, anomaly, metrics, redact, sandbox, approvals, provenance
);
criterion_main!(benches);
