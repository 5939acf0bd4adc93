//! Verification keys: each with the one algorithm it may verify, and the usable keys of a JWK
//! set (RS256, EdDSA, HS256 signing keys; others are skipped). Shared by the configured keys
//! (`jwt`) and the fetched ones (`jwks`).

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey};

/// A verification key with the one algorithm it may verify.
pub(super) struct Key {
    /// The key id (`kid`), if the key has one.
    pub(super) kid: Option<String>,
    /// The one algorithm it verifies.
    pub(super) alg: Algorithm,
    /// The key.
    pub(super) key: DecodingKey,
}

/// The keys of a JWK set that toolgate can use (others, e.g. encryption keys, are skipped).
pub(super) fn keys_from_set(set: &JwkSet) -> Result<Vec<Key>, String> {
    let mut keys = Vec::new();
    for jwk in &set.keys {
        if jwk
            .common
            .public_key_use
            .as_ref()
            .is_some_and(|u| *u != jsonwebtoken::jwk::PublicKeyUse::Signature)
        {
            continue;
        }
        let Some(alg) = jwk_algorithm(jwk) else {
            continue;
        };
        let key = DecodingKey::from_jwk(jwk).map_err(|e| e.to_string())?;
        keys.push(Key {
            kid: jwk.common.key_id.clone(),
            alg,
            key,
        });
    }
    Ok(keys)
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
