//! Authentication: `Authorization: Bearer …` → [`Principal`]. Identity comes only from the
//! credential, never from a request body.
//!
//! Owns: the tokens file (SHA-256 hashes only, never tokens in clear), JWT verification
//! (HS256, RS256, EdDSA; PEM keys, a JWKS file or an issuer's JWKS URL), the OAuth protected
//! resource this sidecar is to MCP clients (RFC 9728 metadata, the `WWW-Authenticate`
//! challenge that points at it) and dev mode. Does not decide anything about tools: an
//! authenticated principal still goes through every policy.

mod jwks;
mod jwt;
mod keys;
mod tokens;

pub use jwt::JwtVerifier;
pub use tokens::TokenTable;

use axum::http::HeaderValue;
use serde_json::{Value, json};

use crate::authz::{Principal, PrincipalKind};
use crate::config::AuthConfig;

/// Why a credential was refused. Messages never echo the credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization` header.
    #[error("missing credential: send `Authorization: Bearer <token>`")]
    Missing,
    /// The header is not `Bearer <token>`.
    #[error("malformed `Authorization` header: expected `Bearer <token>`")]
    Malformed,
    /// Not a known token and not a valid JWT.
    #[error("invalid credential: {0}")]
    Invalid(String),
}

/// A credential source that cannot be loaded.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum AuthSetupError {
    /// The tokens file is unreadable or malformed.
    #[error("tokens file `{path}`: {message}")]
    #[diagnostic(help(
        "each entry is {{\"sha256\": \"<hex of SHA-256(token)>\", \"kind\": \"agent\"|\"human\", \"id\": \"<entity id>\"}}"
    ))]
    Tokens {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A JWT key is unreadable or malformed.
    #[error("jwt key `{path}`: {message}")]
    Key {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Nothing to authenticate with.
    #[error("no authentication is configured")]
    #[diagnostic(help(
        "set `auth.tokens_file` or `auth.jwt` in the config, or `auth.dev_principal` for a loopback-only demo"
    ))]
    NoneConfigured,
}

/// The demo tokens the docs publish (`docs/policies.md#demo-principals`).
const DEMO_TOKENS: [&str; 7] = [
    "demo-dev-token",
    "demo-sre-token",
    "demo-release-token",
    "demo-po-token",
    "demo-alice-token",
    "demo-bob-token",
    "demo-grace-token",
];

/// The OAuth protected resource this sidecar is (when `auth.jwt.audience` is a URL).
#[derive(Debug)]
pub struct ProtectedResource {
    /// Where its metadata document is served on this listener.
    pub path: String,
    /// The metadata document (RFC 9728 §2).
    pub metadata: Value,
    challenge: HeaderValue,
}

/// Turns credentials into principals.
#[derive(Debug)]
pub struct Authenticator {
    tokens: Option<TokenTable>,
    jwt: Option<JwtVerifier>,
    dev: Option<Principal>,
    resource: Option<ProtectedResource>,
}

impl Authenticator {
    /// Loads the configured credential sources.
    pub fn from_config(cfg: &AuthConfig) -> Result<Authenticator, AuthSetupError> {
        let tokens = cfg
            .tokens_file
            .as_deref()
            .map(TokenTable::from_file)
            .transpose()?;
        let jwt = cfg.jwt.as_ref().map(JwtVerifier::from_config).transpose()?;
        let dev = cfg
            .dev_principal
            .as_ref()
            .map(|id| Principal::new(PrincipalKind::Agent, id.as_str()));
        if tokens.is_none() && jwt.is_none() && dev.is_none() {
            return Err(AuthSetupError::NoneConfigured);
        }
        let resource = cfg.jwt.as_ref().and_then(protected_resource);
        Ok(Authenticator {
            tokens,
            jwt,
            dev,
            resource,
        })
    }

    /// The protected resource this sidecar is to OAuth clients, if it is one.
    pub fn protected_resource(&self) -> Option<&ProtectedResource> {
        self.resource.as_ref()
    }

    /// The `WWW-Authenticate` value of a 401: `Bearer`, naming the resource's metadata
    /// document (and the scopes to ask for) when there is one, so a client that starts with
    /// no token can find the issuer (MCP authorization, RFC 9728 §5.1).
    pub fn challenge(&self) -> HeaderValue {
        self.resource.as_ref().map_or_else(
            || HeaderValue::from_static("Bearer"),
            |r| r.challenge.clone(),
        )
    }

    /// Whether dev mode is on (every caller is one fixed agent).
    pub fn dev_principal(&self) -> Option<&Principal> {
        self.dev.as_ref()
    }

    /// Principals named by the tokens file, to check against the entities at startup.
    pub fn token_principals(&self) -> Vec<&Principal> {
        self.tokens
            .as_ref()
            .map(TokenTable::principals)
            .unwrap_or_default()
    }

    /// The principals that the published demo tokens (`examples/demo-tokens.json`, listed in
    /// the docs) authenticate here: anyone who reads the docs can act as them.
    pub fn demo_principals(&self) -> Vec<String> {
        let Some(tokens) = &self.tokens else {
            return Vec::new();
        };
        DEMO_TOKENS
            .iter()
            .filter_map(|t| tokens.lookup(t))
            .map(|p| p.uid.to_string())
            .collect()
    }

    /// Authenticates the value of the `Authorization` header.
    pub fn authenticate(&self, header: Option<&[u8]>) -> Result<Principal, AuthError> {
        if let Some(dev) = &self.dev {
            return Ok(dev.clone());
        }
        let header = header.ok_or(AuthError::Missing)?;
        let header = std::str::from_utf8(header).map_err(|_| AuthError::Malformed)?;
        let (scheme, token) = header.trim().split_once(' ').ok_or(AuthError::Malformed)?;
        let token = token.trim();
        if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
            return Err(AuthError::Malformed);
        }
        if let Some(p) = self.tokens.as_ref().and_then(|t| t.lookup(token)) {
            return Ok(p.clone());
        }
        match &self.jwt {
            Some(jwt) if token.matches('.').count() == 2 => jwt.verify(token),
            _ => Err(AuthError::Invalid("unknown token".to_owned())),
        }
    }
}

fn protected_resource(jwt: &crate::config::JwtConfig) -> Option<ProtectedResource> {
    let r = jwt.resource()?;
    let mut metadata = serde_json::Map::new();
    metadata.insert("resource".to_owned(), json!(r.id));
    metadata.insert("authorization_servers".to_owned(), json!([jwt.issuer]));
    metadata.insert("bearer_methods_supported".to_owned(), json!(["header"]));
    metadata.insert("resource_name".to_owned(), json!("toolgate"));
    let mut challenge = format!("Bearer resource_metadata=\"{}\"", r.metadata_url);
    if !jwt.scopes_supported.is_empty() {
        metadata.insert("scopes_supported".to_owned(), json!(jwt.scopes_supported));
        challenge.push_str(&format!(", scope=\"{}\"", jwt.scopes_supported.join(" ")));
    }
    // Quotes and control characters cannot be in a URL or a scope token; a value that still
    // does not fit a header falls back to the bare challenge.
    let challenge =
        HeaderValue::from_str(&challenge).unwrap_or_else(|_| HeaderValue::from_static("Bearer"));
    Some(ProtectedResource {
        path: r.metadata_path,
        metadata: Value::Object(metadata),
        challenge,
    })
}
