//! Credentials: missing, malformed and unknown tokens; JWTs (HS256, RS256, EdDSA via PEM and
//! JWKS) valid, expired, unsigned and wrongly signed; dev mode.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};

use crate::helpers::*;
use toolgate::auth::Authenticator;
use toolgate::config::Config;

fn fixture(name: &str) -> std::path::PathBuf {
    repo().join("tests/fixtures/jwt").join(name)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn claims(sub: &str, roles: &[&str], exp_offset: i64) -> Value {
    json!({"sub": sub, "roles": roles, "iss": "https://issuer.test", "aud": "toolgate",
           "exp": (now() as i64 + exp_offset), "iat": now()})
}

fn jwt_app() -> axum::Router {
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        "[auth.jwt]\nissuer = \"https://issuer.test\"\naudience = \"toolgate\"\nleeway_secs = 0\n\
         hs256_secret_file = \"{}\"\nrsa_public_key_files = [\"{}\"]\njwks_file = \"{}\"\n",
        fixture("hs256.secret").display(),
        fixture("rsa.pub").display(),
        fixture("jwks.json").display(),
    );
    let path = dir.path().join("c.toml");
    std::fs::write(&path, cfg).unwrap();
    let config = Config::from_file(&path).unwrap();
    app_with(
        shipped_snapshot(),
        Authenticator::from_config(&config.auth).unwrap(),
    )
}

fn hs(claims: &Value) -> String {
    let secret = std::fs::read(fixture("hs256.secret")).unwrap();
    encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(&secret),
    )
    .unwrap()
}

fn echo() -> Value {
    json!({"tool": "echo", "args": {"message": "x"}})
}

fn push() -> Value {
    json!({"tool": "git_push", "args": {"remote": "origin", "branch": "feature/x"}})
}

#[tokio::test]
async fn missing_malformed_and_unknown_credentials_are_denied_at_auth() {
    let app = app();
    use axum::body::Body;
    use tower::ServiceExt;
    for header in [
        None,
        Some("Basic abc"),
        Some("Bearer"),
        Some("Bearer not-a-known-token"),
        Some("Bearer a.b.c"),
    ] {
        let mut req =
            axum::http::Request::post("/v1/authorize").header("content-type", "application/json");
        if let Some(h) = header {
            req = req.header("authorization", h);
        }
        let resp = app
            .clone()
            .oneshot(req.body(Body::from(echo().to_string())).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{header:?}");
        assert_eq!(resp.headers()["www-authenticate"], "Bearer");
        let body: Value = serde_json::from_slice(
            &http_body_util::BodyExt::collect(resp.into_body())
                .await
                .unwrap()
                .to_bytes(),
        )
        .unwrap();
        assert_eq!(body["decision"], "deny");
        assert_eq!(body["stage"], "auth");
        assert!(
            !body.to_string().contains("not-a-known-token"),
            "credential echoed: {body}"
        );
    }
}

#[tokio::test]
async fn a_valid_hs256_jwt_names_the_principal_and_its_roles() {
    let app = jwt_app();
    let (status, got) = decide(
        &app,
        &hs(&claims("ci-bot", &["release_manager"], 300)),
        &push(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(got["decision"], "pending_approval", "{got}");
    let (_, got) = decide(&app, &hs(&claims("ci-bot", &["developer"], 300)), &push()).await;
    assert_eq!(got["decision"], "deny", "{got}");
    let (_, got) = decide(&app, &hs(&claims("ci-bot", &[], 300)), &echo()).await;
    assert_eq!(got["decision"], "deny", "no roles, no permits: {got}");
    // Roles come only from the token: `dev-agent`'s roles in entities.json are not added.
    let (_, got) = decide(&app, &hs(&claims("dev-agent", &[], 300)), &echo()).await;
    assert_eq!(got["decision"], "deny", "{got}");
}

#[tokio::test]
async fn rs256_and_eddsa_jwts_verify_against_pem_and_jwks_keys() {
    let app = jwt_app();
    let rsa = EncodingKey::from_rsa_pem(&std::fs::read(fixture("rsa.key")).unwrap()).unwrap();
    let token = encode(
        &Header::new(Algorithm::RS256),
        &claims("a", &["developer"], 300),
        &rsa,
    )
    .unwrap();
    let (_, got) = decide(&app, &token, &echo()).await;
    assert_eq!(got["decision"], "allow", "{got}");

    let ed = EncodingKey::from_ed_pem(&std::fs::read(fixture("ed25519.key")).unwrap()).unwrap();
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some("test-ed".to_owned());
    let token = encode(&header, &claims("b", &["developer"], 300), &ed).unwrap();
    let (_, got) = decide(&app, &token, &echo()).await;
    assert_eq!(got["decision"], "allow", "{got}");
}

#[tokio::test]
async fn expired_unsigned_wrongly_signed_and_foreign_jwts_are_rejected() {
    let app = jwt_app();
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let good = claims("ci-bot", &["release_manager"], 300);
    let unsigned = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT"})),
        b64(&good)
    );
    let wrong_key = encode(
        &Header::new(Algorithm::HS256),
        &good,
        &EncodingKey::from_secret(b"another-secret-another-secret-00"),
    )
    .unwrap();
    let valid = hs(&good);
    let mut parts: Vec<&str> = valid.split('.').collect();
    let forged_claims = b64(&claims("ci-bot", &["release_manager", "sre"], 300));
    parts[1] = &forged_claims;
    let tampered = parts.join(".");
    let mut wrong_iss = good.clone();
    wrong_iss["iss"] = json!("https://evil.test");
    let mut wrong_aud = good.clone();
    wrong_aud["aud"] = json!("other");
    let mut no_exp = good.clone();
    no_exp.as_object_mut().unwrap().remove("exp");
    let cases = [
        ("expired", hs(&claims("ci-bot", &["release_manager"], -120))),
        ("alg none", unsigned),
        ("wrong key", wrong_key),
        ("tampered claims", tampered),
        ("wrong issuer", hs(&wrong_iss)),
        ("wrong audience", hs(&wrong_aud)),
        ("no exp", hs(&no_exp)),
        (
            "HS384",
            encode(
                &Header::new(Algorithm::HS384),
                &good,
                &EncodingKey::from_secret(b"test-only-hs256-secret-0123456789abcdef"),
            )
            .unwrap(),
        ),
    ];
    for (name, token) in cases {
        let (status, got) = decide(&app, &token, &push()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{name}: {got}");
        assert_eq!(got["stage"], "auth", "{name}");
    }
}

#[tokio::test]
async fn dev_mode_is_one_fixed_agent_and_loopback_only() {
    let cfg = Config::from_file(&repo().join("examples/dev-mode.toml")).unwrap();
    let app = app_with(
        shipped_snapshot(),
        Authenticator::from_config(&cfg.auth).unwrap(),
    );
    let (status, got) = send(
        &app,
        "POST",
        "/v1/authorize",
        None,
        Some(&push().to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got["decision"], "deny", "dev-agent may not push: {got}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "listen = \"0.0.0.0:8181\"\n[auth]\ndev_principal = \"dev-agent\"\n",
    )
    .unwrap();
    let err = Config::from_file(&path).unwrap_err().to_string();
    assert!(err.contains("loopback"), "{err}");
}

#[test]
fn the_tokens_file_holds_no_token_in_clear() {
    let text = std::fs::read_to_string(repo().join("examples/demo-tokens.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    for t in v["tokens"].as_array().unwrap() {
        assert_eq!(t["sha256"].as_str().unwrap().len(), 64);
    }
}

/// Dev mode takes every caller for its one agent, so a web page whose DNS name was rebound
/// to 127.0.0.1 must not reach any route: the real binary on the shipped dev-mode config
/// answers only requests that name it as `Host`.
#[test]
fn dev_mode_refuses_a_foreign_host_on_every_route() {
    use std::io::{Read as _, Write as _};
    let data = tempfile::tempdir().unwrap();
    let port = crate::helpers::free_port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--config"])
        .arg(repo().join("examples/dev-mode.toml"))
        .env("TOOLGATE_LISTEN", format!("127.0.0.1:{port}"))
        .env("TOOLGATE_DATA_DIR", data.path())
        .env_remove("TOOLGATE_KILL_SWITCH")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ask = |method: &str, path: &str, host: &str| -> (u16, String) {
        let once = || -> Option<(u16, String)> {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
            s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .ok()?;
            let body = push().to_string();
            let text = format!(
                "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            s.write_all(text.as_bytes()).ok()?;
            let mut out = String::new();
            s.read_to_string(&mut out).ok()?;
            Some((out.split(' ').nth(1)?.parse().ok()?, out))
        };
        once().unwrap_or((0, String::new()))
    };
    let start = std::time::Instant::now();
    while ask("GET", "/healthz", "localhost").0 != 200 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "not up"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let own = format!("127.0.0.1:{port}");
    for host in ["localhost", own.as_str(), "[::1]:8181", "LOCALHOST:1"] {
        let (status, out) = ask("POST", "/v1/authorize", host);
        assert_eq!(status, 200, "{host}: {out}");
    }
    for (method, path) in [
        ("POST", "/v1/authorize"),
        ("POST", "/v1/execute"),
        ("GET", "/v1/tools"),
        ("GET", "/healthz"),
        ("POST", "/mcp"),
    ] {
        for host in [
            "attacker.example",
            "attacker.example:8181",
            "127.0.0.1.nip.io",
        ] {
            let (status, out) = ask(method, path, host);
            assert_eq!(status, 403, "{method} {path} as {host}: {out}");
            if path != "/mcp" {
                assert!(out.contains("host_rejected"), "{out}");
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// `[auth.jwt]` settings that would weaken sign-in are refused at load, each naming its fix.
#[test]
fn unsafe_oauth_settings_are_refused_with_their_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    for (jwt, said) in [
        (
            "jwks_url = \"http://idp.example.com/jwks\"",
            "plain http to a host that is not loopback",
        ),
        ("jwks_url = \"ftp://idp.example.com/jwks\"", "use https"),
        ("jwks_url = \"not a url\"", "is not a URL"),
        (
            "jwks_url = \"https://idp.example.com/jwks\"\njwks_refresh_secs = 1",
            "jwks_refresh_secs",
        ),
        (
            "jwks_url = \"https://idp.example.com/jwks\"\nscopes_supported = [\"a b\"]",
            "not an OAuth scope token",
        ),
        ("leeway_secs = 0", "has no keys"),
    ] {
        std::fs::write(
            &path,
            format!(
                "[auth.jwt]\nissuer = \"https://idp.example.com\"\naudience = \"https://tg.example.com/mcp\"\n{jwt}\n"
            ),
        )
        .unwrap();
        let err = format!("{:?}", Config::from_file(&path).unwrap_err());
        assert!(err.contains(said), "{jwt}: `{said}` not in {err}");
    }
}

/// A delegation token (RFC 8693 `act`) names the agent in `act.sub` and the human in `sub`;
/// `on_behalf_of_claim` names the human for tokens without `act`. Cedar sees the human as
/// `context.on_behalf_of`; a token naming the same id twice, or an `act` without `sub`, is
/// refused.
#[tokio::test]
async fn the_human_an_agent_acts_for_reaches_cedar() {
    let set = TempSet::new();
    set.write(
        "policies/own_user.cedar",
        "@id(\"for-alice-only\")\npermit (principal == Agent::\"pay-agent\", action == Action::\"echo\", resource)\nwhen { context has on_behalf_of && context.on_behalf_of == Human::\"alice\" };\n",
    );
    let snapshot = toolgate::policy::load(&set.sources()).unwrap().snapshot;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        format!(
            "[auth.jwt]\nissuer = \"https://issuer.test\"\naudience = \"toolgate\"\nhs256_secret_file = \"{}\"\non_behalf_of_claim = \"user\"\n",
            fixture("hs256.secret").display()
        ),
    )
    .unwrap();
    let config = Config::from_file(&path).unwrap();
    let app = app_with(snapshot, Authenticator::from_config(&config.auth).unwrap());
    let token = |extra: Value| {
        let mut c = json!({"iss": "https://issuer.test", "aud": "toolgate", "exp": now() + 600});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        hs(&c)
    };
    for (claims, decision) in [
        (
            json!({"sub": "alice", "act": {"sub": "pay-agent"}}),
            "allow",
        ),
        (
            json!({"sub": "bob", "act": {"sub": "pay-agent", "act": {"sub": "x"}}}),
            "deny",
        ),
        (json!({"sub": "pay-agent", "user": "alice"}), "allow"),
        (json!({"sub": "pay-agent"}), "deny"),
        (
            json!({"sub": "alice", "act": {"sub": "other-agent"}}),
            "deny",
        ),
    ] {
        let (status, got) = decide(&app, &token(claims.clone()), &echo()).await;
        assert_eq!(status, StatusCode::OK, "{claims}: {got}");
        assert_eq!(got["decision"], decision, "{claims}: {got}");
    }
    for (claims, said) in [
        (
            json!({"sub": "alice", "act": {"iss": "x"}}),
            "no `sub` naming the agent",
        ),
        (json!({"sub": "pay-agent", "user": "pay-agent"}), "same id"),
        (
            json!({"sub": "pay-agent", "user": 7}),
            "not a non-empty string",
        ),
    ] {
        let (status, got) = decide(&app, &token(claims.clone()), &echo()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{claims}: {got}");
        assert!(
            got.to_string().contains(said),
            "{claims}: `{said}` not in {got}"
        );
    }
}
