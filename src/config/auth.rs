//! `[auth]`: how callers authenticate (a tokens file, JWTs, or dev mode on loopback), with
//! the key files resolved against the config file's directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAuth {
    tokens_file: Option<PathBuf>,
    dev_principal: Option<String>,
    jwt: Option<RawJwt>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJwt {
    issuer: String,
    audience: String,
    #[serde(default = "default_principal_claim")]
    principal_claim: String,
    #[serde(default = "default_roles_claim")]
    roles_claim: String,
    #[serde(default)]
    hs256_secret_file: Option<PathBuf>,
    #[serde(default)]
    rsa_public_key_files: Vec<PathBuf>,
    #[serde(default)]
    ed25519_public_key_files: Vec<PathBuf>,
    #[serde(default)]
    jwks_file: Option<PathBuf>,
    #[serde(default = "default_leeway")]
    leeway_secs: u64,
}

fn default_principal_claim() -> String {
    "sub".to_owned()
}
fn default_roles_claim() -> String {
    "roles".to_owned()
}
fn default_leeway() -> u64 {
    30
}

/// How callers authenticate. At least one method is needed to serve.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// File of SHA-256 token hashes and the principals they stand for.
    pub tokens_file: Option<PathBuf>,
    /// Dev mode: every request is this agent. Allowed only on loopback.
    pub dev_principal: Option<String>,
    /// JWT verification.
    pub jwt: Option<JwtConfig>,
}

/// JWT verification settings.
#[derive(Debug, Clone)]
pub struct JwtConfig {
    /// Required `iss`.
    pub issuer: String,
    /// Required `aud`.
    pub audience: String,
    /// Claim naming the principal (default `sub`).
    pub principal_claim: String,
    /// Claim listing the principal's roles (default `roles`).
    pub roles_claim: String,
    /// HS256 shared secret.
    pub hs256_secret_file: Option<PathBuf>,
    /// RS256 public keys (PEM).
    pub rsa_public_key_files: Vec<PathBuf>,
    /// EdDSA public keys (PEM).
    pub ed25519_public_key_files: Vec<PathBuf>,
    /// A JWKS document (e.g. a copy of an OIDC issuer's or the Kubernetes API server's keys).
    pub jwks_file: Option<PathBuf>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway_secs: u64,
}

/// Checks `[auth]` (dev mode only on a loopback `listen`, and alone; JWTs with keys) and
/// resolves its files against `base`.
pub(super) fn settings(
    raw: &RawAuth,
    base: &Path,
    listen: &SocketAddr,
) -> Result<AuthConfig, Vec<(String, &'static str)>> {
    let mut problems = Vec::new();
    if raw.dev_principal.is_some() && !listen.ip().is_loopback() {
        problems.push((
            "`auth.dev_principal` (dev mode) is set but `listen` is not a loopback address"
                .to_owned(),
            "dev mode trusts every caller: use it only on 127.0.0.1, or configure tokens or JWT",
        ));
    }
    if raw.dev_principal.is_some() && (raw.tokens_file.is_some() || raw.jwt.is_some()) {
        problems.push((
            "`auth.dev_principal` cannot be combined with `tokens_file` or `jwt`".to_owned(),
            "dev mode ignores credentials; remove it to use real authentication",
        ));
    }
    let jwt = raw.jwt.as_ref().map(|j| JwtConfig {
        issuer: j.issuer.clone(),
        audience: j.audience.clone(),
        principal_claim: j.principal_claim.clone(),
        roles_claim: j.roles_claim.clone(),
        hs256_secret_file: j.hs256_secret_file.as_ref().map(|p| base.join(p)),
        rsa_public_key_files: j
            .rsa_public_key_files
            .iter()
            .map(|p| base.join(p))
            .collect(),
        ed25519_public_key_files: j
            .ed25519_public_key_files
            .iter()
            .map(|p| base.join(p))
            .collect(),
        jwks_file: j.jwks_file.as_ref().map(|p| base.join(p)),
        leeway_secs: j.leeway_secs,
    });
    if let Some(j) = &jwt
        && j.hs256_secret_file.is_none()
        && j.rsa_public_key_files.is_empty()
        && j.ed25519_public_key_files.is_empty()
        && j.jwks_file.is_none()
    {
        problems.push((
            "`auth.jwt` has no keys".to_owned(),
            "set `hs256_secret_file`, `rsa_public_key_files`, `ed25519_public_key_files` or `jwks_file`",
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(AuthConfig {
        tokens_file: raw.tokens_file.as_ref().map(|p| base.join(p)),
        dev_principal: raw.dev_principal.clone(),
        jwt,
    })
}

impl JwtConfig {
    /// The key files named (each is in the protected set).
    pub fn key_files(&self) -> impl Iterator<Item = &PathBuf> {
        self.hs256_secret_file
            .iter()
            .chain(&self.rsa_public_key_files)
            .chain(&self.ed25519_public_key_files)
            .chain(&self.jwks_file)
    }
}
