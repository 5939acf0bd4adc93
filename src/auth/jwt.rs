//! JWT verification against configured keys. Accepts HS256, RS256 and EdDSA only; `alg: none`
//! and every other algorithm are refused, as are expired, not-yet-valid, wrongly issued and
//! wrongly signed tokens. Claims name the principal and its roles (OIDC and Kubernetes
//! service-account tokens are the common case: `sub` plus a roles claim).

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use serde_json::{Map, Value};

use super::{AuthError, AuthSetupError};
use crate::authz::{Principal, PrincipalKind};
use crate::config::JwtConfig;

/// A verification key with the one algorithm it may verify.
struct Key {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
}

/// Verifies bearer JWTs.
pub struct JwtVerifier {
    keys: Vec<Key>,
    issuer: String,
    audience: String,
    principal_claim: String,
    roles_claim: String,
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
            for jwk in &set.keys {
                let Some(alg) = jwk_algorithm(jwk) else {
                    continue;
                };
                let key = DecodingKey::from_jwk(jwk).map_err(|e| bad(p, &e))?;
                keys.push(Key {
                    kid: jwk.common.key_id.clone(),
                    alg,
                    key,
                });
            }
        }
        Ok(JwtVerifier {
            keys,
            issuer: cfg.issuer.clone(),
            audience: cfg.audience.clone(),
            principal_claim: cfg.principal_claim.clone(),
            roles_claim: cfg.roles_claim.clone(),
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
        let candidates = self.keys.iter().filter(|k| {
            k.alg == header.alg && (header.kid.is_none() || k.kid.is_none() || k.kid == header.kid)
        });
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

    fn principal(&self, claims: &Map<String, Value>) -> Result<Principal, AuthError> {
        let id = claims
            .get(&self.principal_claim)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                AuthError::Invalid(format!("JWT has no `{}` claim", self.principal_claim))
            })?;
        let roles = match claims.get(&self.roles_claim) {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        Ok(Principal::new(PrincipalKind::Agent, id).with_token_roles(roles))
    }
}

fn jwk_algorithm(jwk: &jsonwebtoken::jwk::Jwk) -> Option<Algorithm> {
    use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, KeyAlgorithm};
    match (&jwk.common.key_algorithm, &jwk.algorithm) {
        (Some(KeyAlgorithm::HS256), _) => Some(Algorithm::HS256),
        (Some(KeyAlgorithm::RS256), _) | (None, AlgorithmParameters::RSA(_)) => {
            Some(Algorithm::RS256)
        }
        (Some(KeyAlgorithm::EdDSA), _) => Some(Algorithm::EdDSA),
        (None, AlgorithmParameters::OctetKeyPair(p)) if p.curve == EllipticCurve::Ed25519 => {
            Some(Algorithm::EdDSA)
        }
        _ => None,
    }
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
