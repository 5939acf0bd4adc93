//! OAuth sign-in against a real OpenID provider (npm `oidc-provider`, run by
//! tests/mcp/oidc_provider.mjs): the protected resource metadata and the 401 that points at
//! it, the official MCP Python SDK signing in on its own (client_credentials) in its default
//! mode and calling a tool, tokens refused for another audience, expired, with an unknown key
//! id and while the provider is down (each recorded), a key rotation picked up from the JWKS
//! URL, and a delegation token's human reaching Cedar as `context.on_behalf_of`.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::Digest as _;

use super::helpers::{copy_dir, free_port, repo, toolgate};

struct Deps {
    oidc: PathBuf,
    client_python: PathBuf,
}

fn deps() -> Option<Deps> {
    let root = PathBuf::from(
        std::env::var("TOOLGATE_MCP_DEPS").unwrap_or_else(|_| "/opt/toolgate-ci/mcp".to_owned()),
    );
    let d = Deps {
        oidc: root.join("oidc"),
        client_python: root.join("client/bin/python3"),
    };
    if d.oidc.join("node_modules/oidc-provider").exists() && d.client_python.exists() {
        return Some(d);
    }
    assert!(
        std::env::var("TOOLGATE_REQUIRE_MCP").as_deref() != Ok("1"),
        "TOOLGATE_REQUIRE_MCP=1 but the OpenID provider or the MCP SDK is missing under {}: run .ci/mcp-deps",
        root.display()
    );
    eprintln!(
        "SKIPPED: the OpenID provider is not installed under {} (run .ci/mcp-deps)",
        root.display()
    );
    None
}

/// The OpenID provider, killed on drop.
struct Provider {
    child: Child,
    issuer: String,
}

impl Provider {
    fn start(d: &Deps, port: u16, keys: &Path, resource: &str, rotate: bool) -> Provider {
        let mut cmd = Command::new("node");
        cmd.arg(repo().join("tests/mcp/oidc_provider.mjs"))
            .args([
                "--port",
                &port.to_string(),
                "--resource",
                resource,
                "--keys",
            ])
            .arg(keys)
            .env("OIDC_PROVIDER_FROM", d.oidc.join("package.json"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if rotate {
            cmd.arg("--rotate");
        }
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let ready: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the provider did not start ({e}): {line:?}"));
        Provider {
            child,
            issuer: ready["issuer"].as_str().unwrap().to_owned(),
        }
    }

    /// A client_credentials access token for `client`, for `resource` (RFC 8707).
    fn token(&self, client: &str, resource: &str) -> String {
        let agent = http();
        let mut resp = agent
            .post(&format!("{}/token", self.issuer))
            .header(
                "authorization",
                &format!(
                    "Basic {}",
                    base64::Engine::encode(
                        &base64::engine::general_purpose::STANDARD,
                        format!("{client}:{client}-secret")
                    )
                ),
            )
            .send_form([
                ("grant_type", "client_credentials"),
                ("scope", "toolgate"),
                ("resource", resource),
            ])
            .unwrap();
        let body: Value = serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap();
        body["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no token for {client}: {body}"))
            .to_owned()
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http() -> ureq::Agent {
    ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build(),
    )
}

/// Status, `WWW-Authenticate` and JSON body of a request to the sidecar.
fn call(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, String, Value) {
    let url = format!("http://127.0.0.1:{port}{path}");
    let agent = http();
    let mut resp = if method == "GET" {
        let mut r = agent.get(&url);
        if let Some(t) = token {
            r = r.header("authorization", &format!("Bearer {t}"));
        }
        r.call().unwrap()
    } else {
        let mut r = agent
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(t) = token {
            r = r.header("authorization", &format!("Bearer {t}"));
        }
        r.send(body.unwrap_or(json!({})).to_string()).unwrap()
    };
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let text = resp.body_mut().read_to_string().unwrap();
    let body = serde_json::from_str(&text).unwrap_or(json!({ "raw": text }));
    (resp.status().as_u16(), challenge, body)
}

fn authorize(port: u16, token: &str, path: &str) -> (u16, Value) {
    let (status, _, body) = call(
        port,
        "POST",
        "/v1/authorize",
        Some(token),
        Some(json!({"tool": "write_file", "args": {"path": path, "content": "x"}})),
    );
    (status, body)
}

fn within<T>(wait: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + wait;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < until, "not within {wait:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Policies for agents that sign in: any may echo; `pay-agent` may write only for its owner.
const POLICIES: &str = r#"
@id("signed-in-agents-echo")
permit (principal, action == Action::"echo", resource);

@id("pay-agent-writes-only-for-its-owner")
permit (principal == Agent::"pay-agent", action == Action::"write_file", resource)
when { context has on_behalf_of && principal has owner && context.on_behalf_of == principal.owner };
"#;

const AUDITOR_TOKEN: &str = "oauth-test-auditor-token";

fn write_set(root: &Path, port: u16, issuer: &str, resource: &str) -> PathBuf {
    copy_dir(&repo().join("schemas"), &root.join("schemas"));
    std::fs::create_dir_all(root.join("policies")).unwrap();
    std::fs::write(root.join("policies/oauth.cedar"), POLICIES).unwrap();
    let entities = json!([
        {"uid": {"type": "Human", "id": "alice"}, "attrs": {}, "parents": []},
        {"uid": {"type": "Human", "id": "bob"}, "attrs": {}, "parents": []},
        {"uid": {"type": "Human", "id": "carol"}, "attrs": {}, "parents": []},
        {"uid": {"type": "Agent", "id": "pay-agent"},
         "attrs": {"owner": {"__entity": {"type": "Human", "id": "alice"}}}, "parents": []},
    ]);
    std::fs::write(root.join("policies/entities.json"), entities.to_string()).unwrap();
    let hash = hex::encode(sha2::Sha256::digest(AUDITOR_TOKEN.as_bytes()));
    std::fs::write(
        root.join("tokens.json"),
        json!({"tokens": [{"sha256": hash, "kind": "human", "id": "carol"}]}).to_string(),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("workspace")).unwrap();
    let config = root.join("toolgate.toml");
    std::fs::write(
        &config,
        format!(
            r#"listen = "127.0.0.1:{port}"
policies_dir = "policies"
schemas_dir = "schemas"
[exec]
root = "workspace"
[auth]
tokens_file = "tokens.json"
[auth.jwt]
issuer = "{issuer}"
audience = "{resource}"
jwks_url = "{issuer}/jwks"
scopes_supported = ["toolgate"]
leeway_secs = 0
"#
        ),
    )
    .unwrap();
    config
}

fn wait_port(port: u16) {
    within(Duration::from_secs(60), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    });
}

/// The auth-stage denies recorded so far, newest first.
fn refused(port: u16) -> Vec<Value> {
    let (status, _, body) = call(
        port,
        "GET",
        "/v1/audit?limit=200",
        Some(AUDITOR_TOKEN),
        None,
    );
    assert_eq!(status, 200, "{body}");
    body["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["entry"].clone())
        .filter(|e| e["stage"] == "auth")
        .collect()
}

fn assert_refused(port: u16, token: &str, why: &str) {
    let (status, body) = authorize(port, token, "notes/x.txt");
    assert_eq!(status, 401, "{body}");
    let message = body["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains(why), "`{why}` not in: {body}");
    let decision = body["decision_id"].as_str().unwrap().to_owned();
    assert!(
        refused(port).iter().any(|r| r["id"] == decision.as_str()),
        "the refusal {decision} ({why}) is not in the audit log"
    );
}

#[test]
fn oauth_sign_in_against_a_real_openid_provider() {
    let Some(d) = deps() else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::set_permissions(root, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let keys = root.join("provider-keys.json");
    let op_port = free_port();
    let mut op = Provider::start(&d, op_port, &keys, &resource, false);
    let config = write_set(root, port, &op.issuer, &resource);
    let log = std::fs::File::create(root.join("serve.log")).unwrap();
    let mut serve = toolgate()
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _serve = Kill(&mut serve);
    wait_port(port);

    // The metadata document (RFC 9728), at the resource's path and at the root.
    let metadata_url = format!("http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp");
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let (status, _, doc) = call(port, "GET", path, None, None);
        assert_eq!(status, 200, "{path}: {doc}");
        assert_eq!(doc["resource"], resource.as_str());
        assert_eq!(doc["authorization_servers"], json!([op.issuer]));
        assert_eq!(doc["scopes_supported"], json!(["toolgate"]));
    }
    let (status, _, _) = call(
        port,
        "GET",
        "/.well-known/oauth-protected-resource/other",
        None,
        None,
    );
    assert_eq!(status, 404);

    // No token: 401, naming the metadata document, on /mcp and on the HTTP API alike.
    for path in ["/mcp", "/v1/authorize"] {
        let (status, challenge, _) = call(port, "POST", path, None, Some(json!({})));
        assert_eq!(status, 401, "{path}");
        assert!(
            challenge.contains(&format!("resource_metadata=\"{metadata_url}\""))
                && challenge.contains("scope=\"toolgate\""),
            "{path}: {challenge}"
        );
    }

    // The official Python SDK, default mode, no token: it follows the 401 to the metadata, to
    // the provider, signs in (client_credentials, `resource` = /mcp), and calls.
    let mut client = Command::new(&d.client_python)
        .arg(repo().join("tests/mcp/driver.py"))
        .args([
            "--deadline-s",
            "120",
            "--mode",
            "default",
            "http",
            &resource,
        ])
        .args(["--oauth-client", "agent-a:agent-a-secret", "--oauth-issuer"])
        .arg(&op.issuer)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    {
        let mut stdin = client.stdin.take().unwrap();
        writeln!(stdin, r#"{{"id":1,"op":"list_tools"}}"#).unwrap();
        writeln!(
            stdin,
            r#"{{"id":2,"op":"call_tool","name":"echo","arguments":{{"message":"signed in"}}}}"#
        )
        .unwrap();
        let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
        let mut seen = Vec::new();
        let mut answered = 0;
        while answered < 2 {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("the client ended early: {seen:?}"))
                .unwrap();
            let v: Value = serde_json::from_str(&line).unwrap();
            if v.get("id").is_some() {
                answered += 1;
            }
            seen.push(v);
        }
        writeln!(stdin, r#"{{"id":3,"op":"close"}}"#).unwrap();
        for _ in lines.by_ref() {}
        let find = |f: &dyn Fn(&Value) -> bool| seen.iter().find(|v| f(v)).cloned();
        let token = find(&|v| v["event"] == "oauth_token").expect("never signed in");
        assert_eq!(token["sub"], "agent-a", "{token}");
        assert_eq!(token["aud"], resource.as_str(), "{token}");
        let ready = find(&|v| v["event"] == "ready").expect("not ready");
        assert_eq!(ready["protocolVersion"], "2026-07-28", "{ready}");
        let tools = find(&|v| v["id"] == 1).unwrap();
        assert!(
            tools["result"]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["name"] == "echo"),
            "{tools}"
        );
        let echoed = find(&|v| v["id"] == 2).unwrap();
        assert_eq!(echoed["ok"], true, "{echoed}");
        assert_eq!(echoed["result"]["isError"], false, "{echoed}");
        assert!(echoed.to_string().contains("signed in"), "{echoed}");
    }
    let _ = client.wait();

    // A token the provider made for another resource is not for this one.
    let other = op.token("agent-a", "https://other.example/mcp");
    assert_refused(port, &other, "audience");
    // Expired (the provider gives agent-short 2 seconds; no leeway is configured).
    let short = op.token("agent-short", &resource);
    let (status, body) = authorize(port, &short, "notes/x.txt");
    assert_eq!(
        (status, &body["stage"]),
        (200, &json!("policy")),
        "a fresh token is accepted (and then decided by the policies): {body}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_refused(port, &short, "expired");
    // Signed by a key the provider never had, under a made-up key id.
    let forged = {
        let pem = std::fs::read(repo().join("tests/fixtures/jwt/rsa.key")).unwrap();
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = Some("made-up-kid".to_owned());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        jsonwebtoken::encode(
            &header,
            &json!({"sub": "agent-a", "iss": op.issuer, "aud": resource, "exp": now + 600}),
            &jsonwebtoken::EncodingKey::from_rsa_pem(&pem).unwrap(),
        )
        .unwrap()
    };
    assert_refused(port, &forged, "no key `made-up-kid`");

    // Delegation (RFC 8693): the agent acts for alice, its owner, so it may write; acting
    // for bob it may not. The human is in the audit record.
    let for_alice = op.token("pay-agent-alice", &resource);
    let (status, body) = authorize(port, &for_alice, "notes/alice.txt");
    assert_eq!(
        (status, &body["decision"]),
        (200, &json!("allow")),
        "{body}"
    );
    let (status, body) = authorize(port, &for_alice, "notes/alice.txt");
    assert_eq!(status, 200, "{body}");
    let (_, _, audit) = call(port, "GET", "/v1/audit?limit=50", Some(AUDITOR_TOKEN), None);
    let record = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["entry"].clone())
        .find(|e| e["id"] == body["decision_id"])
        .unwrap_or_else(|| panic!("no record of {body} in {audit}"));
    assert_eq!(record["principal"], "Agent::\"pay-agent\"", "{record}");
    assert_eq!(record["on_behalf_of"], "Human::\"alice\"", "{record}");
    let for_bob = op.token("pay-agent-bob", &resource);
    let (status, body) = authorize(port, &for_bob, "notes/bob.txt");
    assert_eq!((status, &body["decision"]), (200, &json!("deny")), "{body}");

    // The provider rotates its key: a token under the new key id makes the sidecar fetch
    // the key set again (at most once per 5 s), and it is accepted.
    drop(op);
    op = Provider::start(&d, op_port, &keys, &resource, true);
    let rotated = op.token("pay-agent-alice", &resource);
    within(Duration::from_secs(15), || {
        let (status, body) = authorize(port, &rotated, "notes/alice.txt");
        (status == 200 && body["decision"] == "allow").then_some(())
    });

    // The provider rotates again and goes down before the sidecar saw the new key: a token
    // under it cannot be checked, and is refused (fail closed), saying why.
    drop(op);
    op = Provider::start(&d, op_port, &keys, &resource, true);
    let unseen = op.token("pay-agent-alice", &resource);
    drop(op);
    std::thread::sleep(Duration::from_secs(6));
    assert_refused(port, &unseen, "could not be fetched");
    // Keys already held still verify while the provider is down.
    let (status, body) = authorize(port, &rotated, "notes/alice.txt");
    assert_eq!(
        (status, &body["decision"]),
        (200, &json!("allow")),
        "{body}"
    );
}
