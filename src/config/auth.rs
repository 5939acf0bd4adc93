//! `[auth]`: how callers authenticate (a tokens file, JWTs, or dev mode on loopback), with
//! the key files resolved against the config file's directory, and the OAuth protected
//! resource this sidecar is when the audience is a URL.

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
    #[serde(default)]
    jwks_url: Option<String>,
    #[serde(default = "default_jwks_refresh")]
    jwks_refresh_secs: u64,
    #[serde(default)]
    on_behalf_of_claim: Option<String>,
    #[serde(default)]
    scopes_supported: Vec<String>,
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
fn default_jwks_refresh() -> u64 {
    300
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
    /// The issuer's JWKS endpoint, fetched at start, every `jwks_refresh_secs`, and when a
    /// token names a key id not held.
    pub jwks_url: Option<JwksUrl>,
    /// How often the JWKS URL is fetched again.
    pub jwks_refresh_secs: u64,
    /// A claim naming the human the agent acts for, besides RFC 8693's `act`.
    pub on_behalf_of_claim: Option<String>,
    /// Scopes listed in the protected resource metadata.
    pub scopes_supported: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway_secs: u64,
}

/// An `https` URL, or `http` to a loopback host (a provider beside the sidecar, or a test).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwksUrl(String);

impl JwksUrl {
    /// Checks the scheme and host.
    pub fn parse(raw: &str) -> Result<JwksUrl, String> {
        let url = url::Url::parse(raw).map_err(|e| format!("`{raw}` is not a URL: {e}"))?;
        let loopback = match url.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            None => false,
        };
        match url.scheme() {
            "https" => Ok(JwksUrl(raw.to_owned())),
            "http" if loopback => Ok(JwksUrl(raw.to_owned())),
            "http" => Err(format!(
                "`{raw}` is plain http to a host that is not loopback: keys fetched so can be swapped on the way"
            )),
            other => Err(format!("`{raw}` has scheme `{other}`: use https")),
        }
    }

    /// The URL as configured.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The protected resource this sidecar is, when `auth.jwt.audience` is an absolute http(s)
/// URL (RFC 8707 resource indicator): the metadata document's address (RFC 9728).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// The resource identifier (the audience).
    pub id: String,
    /// Where its metadata is served, absolute: `/.well-known/oauth-protected-resource` with
    /// the resource's path appended.
    pub metadata_url: String,
    /// The same, as a path on this listener.
    pub metadata_path: String,
}

impl JwtConfig {
    /// The resource this sidecar is to OAuth clients, if the audience is a URL.
    pub fn resource(&self) -> Option<Resource> {
        let url = url::Url::parse(&self.audience).ok()?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return None;
        }
        let path = url.path().trim_end_matches('/');
        let metadata_path = format!("/.well-known/oauth-protected-resource{path}");
        Some(Resource {
            id: self.audience.clone(),
            metadata_url: format!("{}{metadata_path}", url.origin().ascii_serialization()),
            metadata_path,
        })
    }
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
    let jwks_url = match raw.jwt.as_ref().and_then(|j| j.jwks_url.as_deref()) {
        Some(u) => match JwksUrl::parse(u) {
            Ok(u) => Some(u),
            Err(m) => {
                problems.push((
                    format!("`auth.jwt.jwks_url`: {m}"),
                    "give the issuer's `jwks_uri` (from its /.well-known/openid-configuration) over https",
                ));
                None
            }
        },
        None => None,
    };
    if raw.jwt.as_ref().is_some_and(|j| j.jwks_refresh_secs < 30) {
        problems.push((
            "`auth.jwt.jwks_refresh_secs` is under 30".to_owned(),
            "fetch keys at most every 30 s (300 is the default); a key id not held triggers a fetch anyway",
        ));
    }
    for scope in raw.jwt.iter().flat_map(|j| &j.scopes_supported) {
        let ok = !scope.is_empty()
            && scope
                .bytes()
                .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b));
        if !ok {
            problems.push((
                format!(
                    "`auth.jwt.scopes_supported` has `{scope}`, which is not an OAuth scope token"
                ),
                "a scope is printable ASCII without spaces, `\"` or `\\` (RFC 6749 §3.3)",
            ));
        }
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
        jwks_url: jwks_url.clone(),
        jwks_refresh_secs: j.jwks_refresh_secs,
        on_behalf_of_claim: j.on_behalf_of_claim.clone(),
        scopes_supported: j.scopes_supported.clone(),
        leeway_secs: j.leeway_secs,
    });
    if let Some(j) = &jwt
        && j.hs256_secret_file.is_none()
        && j.rsa_public_key_files.is_empty()
        && j.ed25519_public_key_files.is_empty()
        && j.jwks_file.is_none()
        && raw.jwt.as_ref().is_some_and(|r| r.jwks_url.is_none())
    {
        problems.push((
            "`auth.jwt` has no keys".to_owned(),
            "set `jwks_url`, `jwks_file`, `hs256_secret_file`, `rsa_public_key_files` or `ed25519_public_key_files`",
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
