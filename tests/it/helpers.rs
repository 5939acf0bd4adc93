//! Shared fixtures: the shipped policy set, demo tokens, temp copies, one-shot HTTP requests.

use std::path::{Path, PathBuf};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use toolgate::api::router;
use toolgate::auth::Authenticator;
use toolgate::config::AuthConfig;
use toolgate::gateway::Gateway;
use toolgate::policy::{Snapshot, Sources, load};

pub const DEV: &str = "demo-dev-token";
pub const SRE: &str = "demo-sre-token";
pub const RELEASE: &str = "demo-release-token";
pub const PO: &str = "demo-po-token";
pub const ALICE: &str = "demo-alice-token";
/// An AWS access key id of the right shape (not a documentation example).
pub const AWS: &str = "AKIAQWERTYUIOPASDFGH";

/// Every shipped tool, in manifest order.
pub const SHIPPED_TOOLS: [&str; 16] = [
    "bash",
    "echo",
    "git_status",
    "install_deps",
    "read_file",
    "list_files",
    "search_files",
    "count_matches",
    "edit_file",
    "delete_file",
    "git_log",
    "git_diff",
    "run_tests",
    "http_fetch",
    "write_file",
    "git_push",
];

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn shipped_sources() -> Sources {
    Sources::new(repo().join("policies"), repo().join("schemas"))
}

pub fn shipped_snapshot() -> Snapshot {
    load(&shipped_sources())
        .expect("shipped policies load")
        .snapshot
}

/// The shipped snapshot, loaded once per test binary (for property tests' many cases).
pub fn shared_snapshot() -> &'static Snapshot {
    static SNAP: std::sync::OnceLock<Snapshot> = std::sync::OnceLock::new();
    SNAP.get_or_init(shipped_snapshot)
}

pub fn demo_auth() -> Authenticator {
    Authenticator::from_config(&AuthConfig {
        tokens_file: Some(repo().join("examples/demo-tokens.json")),
        ..AuthConfig::default()
    })
    .unwrap()
}

/// The router over the shipped policies with the demo tokens.
pub fn app() -> Router {
    app_with(shipped_snapshot(), demo_auth())
}

pub fn app_with(snapshot: Snapshot, auth: Authenticator) -> Router {
    router(Gateway::new(snapshot, auth, 64 * 1024).unwrap())
}

/// The state behind [`app`], for tests that read its audit log or swap a service.
pub fn shipped_state() -> Gateway {
    Gateway::new(shipped_snapshot(), demo_auth(), 64 * 1024).unwrap()
}

/// A temp copy of the shipped policies and schemas, to break or extend.
pub struct TempSet {
    pub dir: tempfile::TempDir,
}

impl TempSet {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(&repo().join("policies"), &dir.path().join("policies"));
        copy_dir(&repo().join("schemas"), &dir.path().join("schemas"));
        TempSet { dir }
    }
    pub fn sources(&self) -> Sources {
        Sources::new(
            self.dir.path().join("policies"),
            self.dir.path().join("schemas"),
        )
    }
    pub fn policies(&self) -> PathBuf {
        self.dir.path().join("policies")
    }
    pub fn write(&self, rel: &str, text: &str) {
        std::fs::write(self.dir.path().join(rel), text).unwrap();
    }
    /// Edits the manifest of `tool` in place (the Cedar schema is left as it was).
    pub fn edit_manifest(&self, tool: &str, change: impl FnOnce(&mut Value)) {
        let path = self
            .sources()
            .schemas_dir
            .join(format!("tools/{tool}.json"));
        let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        change(&mut m);
        std::fs::write(&path, m.to_string()).unwrap();
    }
    /// Regenerates the Cedar schema from the manifests, as `toolgate schema` does.
    pub fn regenerate_schema(&self) {
        let schemas = self.sources().schemas_dir;
        let (text, _) = toolgate::policy::schema_text(&schemas).unwrap();
        std::fs::write(schemas.join("toolgate.cedarschema"), text).unwrap();
    }
    /// The official `cedar validate --deny-warnings` on one policy file of this set against
    /// its schema; `None` where the CLI is not installed (CI installs it).
    pub fn cedar_validate(&self, policy_file: &str) -> Option<std::process::Output> {
        std::process::Command::new("cedar")
            .args(["validate", "--deny-warnings", "--schema"])
            .arg(self.dir.path().join("schemas/toolgate.cedarschema"))
            .arg("--policies")
            .arg(self.policies().join(policy_file))
            .output()
            .ok()
    }
    pub fn append(&self, rel: &str, text: &str) {
        let path = self.dir.path().join(rel);
        let mut old = std::fs::read_to_string(&path).unwrap_or_default();
        old.push_str(text);
        std::fs::write(path, old).unwrap();
    }
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A policy `long-chain` forbidding `echo` when `message` is one of `m0`…`m{n-1}`, written as
/// one `||` chain: deep enough to exhaust a 2 MiB stack in Cedar's evaluator.
pub fn long_or_chain_policy(n: usize) -> String {
    let terms: Vec<String> = (0..n)
        .map(|i| format!("context.args.message == \"m{i}\""))
        .collect();
    format!(
        "@id(\"long-chain\")\nforbid (principal, action == Action::\"echo\", resource)\nwhen {{ {} }};\n",
        terms.join(" || ")
    )
}

/// Sends one request; returns status and JSON body (Null when not JSON).
pub async fn send(
    app: &Router,
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (StatusCode, Value) {
    let (status, _, json) = send_full(app, method, uri, token, body).await;
    (status, json)
}

/// Like [`send`], with the response headers.
pub async fn send_full(
    app: &Router,
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (StatusCode, axum::http::HeaderMap, Value) {
    // Every HTTP/1.1 client names the host it called.
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "localhost");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    let req = req
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_owned())))
        .unwrap();
    oneshot(app, req).await
}

/// Sends `req` as it is: status, headers and JSON body (Null if none).
pub async fn oneshot(
    app: &Router,
    req: Request<Body>,
) -> (StatusCode, axum::http::HeaderMap, Value) {
    let (status, headers, bytes) = oneshot_bytes(app, req).await;
    (
        status,
        headers,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Sends `req` as it is: status, headers and the body's bytes.
pub async fn oneshot_bytes(
    app: &Router,
    req: Request<Body>,
) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, bytes.to_vec())
}

/// `POST path` with a JSON body as `token`: status and body.
pub async fn post(app: &Router, path: &str, token: &str, body: &Value) -> (StatusCode, Value) {
    send(app, "POST", path, Some(token), Some(&body.to_string())).await
}

/// `POST /v1/results` as `token`: status and body.
pub async fn report(app: &Router, token: &str, body: &Value) -> (StatusCode, Value) {
    post(app, "/v1/results", token, body).await
}

/// `POST /v1/authorize` as `token`: status and body.
pub async fn decide(app: &Router, token: &str, body: &Value) -> (StatusCode, Value) {
    post(app, "/v1/authorize", token, body).await
}

/// The `kind` of each violation in a gate's answer, in order.
pub fn violation_kinds(answer: &Value) -> Vec<&str> {
    answer["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["kind"].as_str().unwrap())
        .collect()
}

/// `POST /v1/authorize` as `token`; asserts 200 and returns the decision body.
pub async fn authorize(app: &Router, token: &str, body: &Value) -> Value {
    let (status, json) = decide(app, token, body).await;
    assert_eq!(status, StatusCode::OK, "{json}");
    json
}

/// The router over the shipped set with `audit` as its audit trail (fault injection).
pub fn app_over_audit(audit: std::sync::Arc<toolgate::audit::Audit>) -> Router {
    let stores = toolgate::storage::Stores::temporary().unwrap();
    router(Gateway::with_services(
        std::sync::Arc::new(toolgate::reload::PolicyStore::new(shipped_snapshot(), None)),
        demo_auth(),
        64 * 1024,
        audit,
        std::sync::Arc::new(
            toolgate::approvals::Approvals::new(
                stores.approvals,
                toolgate::approvals::Ttl::default(),
                toolgate::approvals::Bounds::default(),
            )
            .unwrap(),
        ),
    ))
}

/// `GET uri` without credentials; the status and the body as text.
pub async fn send_text(app: &Router, uri: &str) -> (StatusCode, String) {
    let req = Request::builder().uri(uri).body(Body::empty()).unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// The audit records of `stage` (at most 1,000).
pub fn recorded_at(audit: &toolgate::audit::Audit, stage: &str) -> Vec<toolgate::audit::Record> {
    audit
        .store()
        .query(&toolgate::audit::Query {
            stage: Some(stage.into()),
            limit: 1000,
            ..toolgate::audit::Query::default()
        })
        .unwrap()
}

/// `POST /v1/execute` of `tool` with `args` as `token`: status and body.
pub async fn execute(app: &Router, token: &str, tool: &str, args: Value) -> (StatusCode, Value) {
    post(
        app,
        "/v1/execute",
        token,
        &serde_json::json!({"tool": tool, "args": args}),
    )
    .await
}

/// A symbolic link at `at` to `target`.
pub fn link(target: &str, at: &Path) {
    std::os::unix::fs::symlink(target, at).unwrap();
}

/// The hostile tree of the path-jail tests, in `root` with a canary in `outside`: links to
/// `/`, to a parent, to the canary by absolute path, a chain out of the root, a dangling link
/// out, `.ENV` and a link to it, beside an ordinary `ok.txt` ("fine"). Answers the paths an
/// attacker tries with it; none may reach the canary, `/etc/passwd` or `.ENV`.
pub fn hostile_tree(root: &Path, outside: &Path) -> Vec<String> {
    std::fs::write(outside.join("canary"), "CANARY-OUTSIDE").unwrap();
    std::fs::write(root.join("ok.txt"), "fine").unwrap();
    std::fs::write(root.join(".ENV"), "CANARY-ENV").unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    link("/", &root.join("to_root"));
    link("..", &root.join("sub/up"));
    link(outside.join("canary").to_str().unwrap(), &root.join("abs"));
    link("sub/up/../x", &root.join("chain1"));
    link("chain1", &root.join("chain2"));
    link(
        outside.join("nope").to_str().unwrap(),
        &root.join("dangling"),
    );
    link(".ENV", &root.join("env_link"));
    let canary_rel = format!(
        "../{}/canary",
        outside.file_name().unwrap().to_str().unwrap()
    );
    vec![
        "to_root/etc/passwd".to_owned(),
        "sub/up/../../etc/passwd".to_owned(),
        "abs".to_owned(),
        "chain2".to_owned(),
        "dangling".to_owned(),
        ".ENV".to_owned(),
        ".env".to_owned(),
        "env_link".to_owned(),
        canary_rel,
        outside.join("canary").display().to_string(),
        "/proc/self/root/etc/passwd".to_owned(),
    ]
}

/// A loopback port free now (for a server a test starts).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

// The `toolgate` binary.

pub fn toolgate() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
    c.env("NO_COLOR", "1").env_remove("TOOLGATE_CONFIG");
    c
}

/// `toolgate ARGS…` run from the repository root (the shipped set).
pub fn in_repo(args: &[&str]) -> std::process::Output {
    toolgate().current_dir(repo()).args(args).output().unwrap()
}

/// Asserts the command succeeded, showing its stderr otherwise.
pub fn assert_ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `toolgate SUBCOMMAND --policies … --schemas …` over a temp set.
pub fn on(set: &TempSet, subcommand: &str) -> std::process::Command {
    let mut c = toolgate();
    c.arg(subcommand)
        .arg("--policies")
        .arg(set.policies())
        .arg("--schemas")
        .arg(set.dir.path().join("schemas"));
    c
}

/// A policy letting product owners run tests: a widening of the shipped set (one action).
pub const PO_RUNS_TESTS: &str = "\n@id(\"po-run-tests\")\npermit (principal in Role::\"product_owner\", action == Action::\"run_tests\", resource);\n";

/// A policy that does not validate (`context.nope`), to append to a policy file.
pub const BROKEN_POLICY: &str = "\nforbid (principal, action, resource) when { context.nope };\n";

/// Processes whose command line holds `marker` (runs that outlived their call).
pub fn survivors(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline"))
            && String::from_utf8_lossy(&cmd).contains(marker)
        {
            found.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

/// An audit entry with `fields` set and the rest empty, as the store would read it back (an
/// entry is otherwise built only from an `audit::Event`): for tests that write records
/// directly, forged ones included.
pub fn raw_entry(fields: Value) -> toolgate::audit::Entry {
    let mut v = serde_json::json!({"at_ms": 0, "decision": "", "id": "", "kind": "decision"});
    if let (Some(base), Some(extra)) = (v.as_object_mut(), fields.as_object()) {
        for (k, x) in extra {
            base.insert(k.clone(), x.clone());
        }
    }
    serde_json::from_value(v).unwrap()
}

/// Every record id in `data`, read offline once the app has let go of it (its last threads
/// end just after `serve` returns; 10 s at most).
pub fn logged_ids(data: &std::path::Path) -> Vec<String> {
    let start = std::time::Instant::now();
    let stores = loop {
        match toolgate::storage::Stores::open_existing(data, toolgate::storage::DEFAULT_CACHE_BYTES)
        {
            Ok(stores) => break stores,
            Err(e) => {
                assert!(start.elapsed() < std::time::Duration::from_secs(10), "{e}");
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    };
    stores
        .audit
        .scan(1, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|s| s.record.unwrap().entry.id)
        .collect()
}
