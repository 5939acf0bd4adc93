//! JWT verification against configured keys (files, or an issuer's JWKS URL). Accepts HS256,
//! RS256 and EdDSA only; `alg: none` and every other algorithm are refused, as are expired,
//! not-yet-valid, wrongly issued, wrongly addressed and wrongly signed tokens. Claims name the
//! principal, its roles and the human it acts for (OIDC, OAuth access tokens (RFC 9068) and
//! Kubernetes service-account tokens are the common case: `sub` plus a roles claim; a
//! delegation token (RFC 8693) names the human in `sub` and the agent in `act.sub`).

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use serde_json::{Map, Value};

use super::jwks::{FETCH_GAP, RemoteKeys};
use super::keys::{Key, keys_from_set};
use super::{AuthError, AuthSetupError};
use crate::authz::{Principal, PrincipalKind};
use crate::config::JwtConfig;

/// Verifies bearer JWTs.
pub struct JwtVerifier {
    keys: Vec<Key>,
    remote: Option<std::sync::Arc<RemoteKeys>>,
    issuer: String,
    audience: String,
    principal_claim: String,
    roles_claim: String,
    on_behalf_of_claim: Option<String>,
    leeway: u64,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("keys", &self.keys.len())
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

impl JwtVerifier {
    /// Loads the configured keys.
    pub fn from_config(cfg: &JwtConfig) -> Result<JwtVerifier, AuthSetupError> {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| AuthSetupError::Key {
                path: p.display().to_string(),
                message: e.to_string(),
            })
        };
        let bad = |p: &std::path::Path, e: &dyn std::fmt::Display| AuthSetupError::Key {
            path: p.display().to_string(),
            message: e.to_string(),
        };
        let mut keys = Vec::new();
        if let Some(p) = &cfg.hs256_secret_file {
            let secret = read(p)?;
            let secret = secret.trim_ascii();
            if secret.len() < 32 {
                return Err(bad(p, &"an HS256 secret must be at least 32 bytes"));
            }
            keys.push(Key {
                kid: None,
                alg: Algorithm::HS256,
                key: DecodingKey::from_secret(secret),
            });
        }
        for p in &cfg.rsa_public_key_files {
            let key = DecodingKey::from_rsa_pem(&read(p)?).map_err(|e| bad(p, &e))?;
            keys.push(Key {
                kid: None,
                alg: Algorithm::RS256,
                key,
            });
        }
        for p in &cfg.ed25519_public_key_files {
            let key = DecodingKey::from_ed_pem(&read(p)?).map_err(|e| bad(p, &e))?;
            keys.push(Key {
                kid: None,
                alg: Algorithm::EdDSA,
                key,
            });
        }
        if let Some(p) = &cfg.jwks_file {
            let set: JwkSet = serde_json::from_slice(&read(p)?).map_err(|e| bad(p, &e))?;
            keys.extend(keys_from_set(&set).map_err(|e| bad(p, &e))?);
        }
        let remote = cfg.jwks_url.clone().map(|url| {
            RemoteKeys::start(url, std::time::Duration::from_secs(cfg.jwks_refresh_secs))
        });
        Ok(JwtVerifier {
            keys,
            remote,
            issuer: cfg.issuer.clone(),
            audience: cfg.audience.clone(),
            principal_claim: cfg.principal_claim.clone(),
            roles_claim: cfg.roles_claim.clone(),
            on_behalf_of_claim: cfg.on_behalf_of_claim.clone(),
            leeway: cfg.leeway_secs,
        })
    }

    /// Verifies a token and maps its claims to a principal.
    pub fn verify(&self, token: &str) -> Result<Principal, AuthError> {
        let invalid = |m: &str| AuthError::Invalid(m.to_owned());
        let header =
            decode_header(token).map_err(|_| invalid("malformed or unsupported JWT header"))?;
        if !matches!(
            header.alg,
            Algorithm::HS256 | Algorithm::RS256 | Algorithm::EdDSA
        ) {
            return Err(invalid(
                "JWT algorithm not accepted (HS256, RS256 or EdDSA)",
            ));
        }
        let fits = |k: &&Key| {
            k.alg == header.alg && (header.kid.is_none() || k.kid.is_none() || k.kid == header.kid)
        };
        let mut fetched = self.remote.as_ref().map(|r| r.keys());
        let held = |fetched: &Option<std::sync::Arc<Vec<Key>>>| {
            self.keys.iter().filter(fits).count()
                + fetched
                    .as_ref()
                    .map_or(0, |f| f.iter().filter(fits).count())
        };
        if let Some(remote) = &self.remote
            && held(&fetched) == 0
        {
            // A key id not held: the issuer may have rotated its keys.
            let fetch_error = remote.refresh(FETCH_GAP);
            fetched = Some(remote.keys());
            if held(&fetched) == 0 {
                let kid = header.kid.as_deref().unwrap_or("(none)");
                return Err(AuthError::Invalid(match fetch_error {
                    Some(e) => format!(
                        "no signing key `{kid}` is held and the issuer's keys could not be fetched from {}: {e}",
                        remote.url()
                    ),
                    None => format!(
                        "the issuer's key set ({}) has no key `{kid}` for {:?}",
                        remote.url(),
                        header.alg
                    ),
                }));
            }
        }
        let candidates = self
            .keys
            .iter()
            .filter(fits)
            .chain(fetched.iter().flat_map(|f| f.iter().filter(fits)));
        let mut last = invalid("no configured key matches the JWT's algorithm");
        for key in candidates {
            let mut v = Validation::new(key.alg);
            v.set_issuer(&[&self.issuer]);
            v.set_audience(&[&self.audience]);
            v.set_required_spec_claims(&["exp", "iss", "aud"]);
            v.leeway = self.leeway;
            v.validate_nbf = true;
            match decode::<Map<String, Value>>(token, &key.key, &v) {
                Ok(data) => return self.principal(&data.claims),
                Err(e) => last = AuthError::Invalid(describe(&e)),
            }
        }
        Err(last)
    }

    /// The agent, its roles and the human it acts for. A delegation token (RFC 8693 `act`)
    /// names the acting agent in `act.sub` and the human in the principal claim; otherwise
    /// the principal claim names the agent and `on_behalf_of_claim`, when set, the human.
    fn principal(&self, claims: &Map<String, Value>) -> Result<Principal, AuthError> {
        let subject = text(claims.get(&self.principal_claim)).ok_or_else(|| {
            AuthError::Invalid(format!("JWT has no `{}` claim", self.principal_claim))
        })?;
        let (id, human) = match claims.get("act") {
            None => {
                let human = match &self.on_behalf_of_claim {
                    Some(c) => match claims.get(c) {
                        None => None,
                        found => Some(text(found).ok_or_else(|| {
                            AuthError::Invalid(format!("JWT claim `{c}` is not a non-empty string"))
                        })?),
                    },
                    None => None,
                };
                (subject, human)
            }
            Some(act) => {
                // The current actor is the outermost `act`; nested ones are earlier actors.
                let actor = text(act.get("sub")).ok_or_else(|| {
                    AuthError::Invalid("JWT `act` claim has no `sub` naming the agent".to_owned())
                })?;
                (actor, Some(subject))
            }
        };
        if human.is_some_and(|h| h == id) {
            return Err(AuthError::Invalid(
                "JWT names the same id as the agent and the human it acts for".to_owned(),
            ));
        }
        let roles = match claims.get(&self.roles_claim) {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        let mut who = Principal::new(PrincipalKind::Agent, id).with_token_roles(roles);
        if let Some(human) = human {
            who = who.on_behalf_of(human);
        }
        Ok(who)
    }
}

/// A claim's value when it is a non-empty string.
fn text(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn describe(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind as K;
    match e.kind() {
        K::ExpiredSignature => "JWT has expired",
        K::ImmatureSignature => "JWT is not valid yet",
        K::InvalidIssuer => "JWT issuer is not accepted",
        K::InvalidAudience => "JWT audience is not accepted",
        K::InvalidSignature => "JWT signature does not verify",
        K::MissingRequiredClaim(_) => "JWT lacks a required claim (exp, iss, aud)",
        _ => "JWT could not be verified",
    }
    .to_owned()
}
