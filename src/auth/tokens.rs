//! The tokens file: `{"tokens": [{"sha256": "<hex>", "kind": "agent", "id": "dev-agent"}]}`.
//! Only hashes are stored; a presented token is hashed and looked up.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::AuthSetupError;
use crate::authz::{Principal, PrincipalKind};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default, rename = "_comment")]
    _comment: Option<String>,
    tokens: Vec<RawToken>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToken {
    sha256: String,
    kind: RawKind,
    id: String,
    #[serde(default, rename = "note")]
    _note: Option<String>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum RawKind {
    Agent,
    Human,
}

/// SHA-256 digests of tokens → principals.
#[derive(Debug)]
pub struct TokenTable {
    by_hash: HashMap<[u8; 32], Principal>,
}

impl TokenTable {
    /// Reads a tokens file.
    pub fn from_file(path: &Path) -> Result<TokenTable, AuthSetupError> {
        let err = |message: String| AuthSetupError::Tokens {
            path: path.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let raw: RawFile = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
        let mut by_hash = HashMap::new();
        for (i, t) in raw.tokens.into_iter().enumerate() {
            let mut digest = [0_u8; 32];
            hex::decode_to_slice(t.sha256.trim(), &mut digest)
                .map_err(|_| err(format!("entry {i}: `sha256` must be 64 hex digits")))?;
            if t.id.is_empty() {
                return Err(err(format!("entry {i}: `id` is empty")));
            }
            let kind = match t.kind {
                RawKind::Agent => PrincipalKind::Agent,
                RawKind::Human => PrincipalKind::Human,
            };
            if by_hash.insert(digest, Principal::new(kind, t.id)).is_some() {
                return Err(err(format!("entry {i}: the same token hash appears twice")));
            }
        }
        Ok(TokenTable { by_hash })
    }

    /// The principal a token stands for.
    pub fn lookup(&self, token: &str) -> Option<&Principal> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        self.by_hash.get(&digest)
    }

    /// Every principal in the file.
    pub fn principals(&self) -> Vec<&Principal> {
        self.by_hash.values().collect()
    }
}
