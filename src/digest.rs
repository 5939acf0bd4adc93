//! Keyed digests: HMAC-SHA-256 as lowercase hex, shared by the audit chain and the signed
//! approval webhooks.

use sha2::Sha256;

/// Hex HMAC-SHA-256 under `key` of `parts`, concatenated: the one keyed MAC the sidecar uses
/// (chain links, checkpoints, webhook signatures).
pub fn hmac_sha256_hex(key: &[u8], parts: &[&[u8]]) -> String {
    use hmac::{Mac, SimpleHmac};
    // HMAC accepts keys of any length, so `new_from_slice` cannot fail here.
    match <SimpleHmac<Sha256> as Mac>::new_from_slice(key) {
        Ok(mut mac) => {
            for part in parts {
                mac.update(part);
            }
            hex::encode(mac.finalize().into_bytes())
        }
        Err(_) => String::new(),
    }
}
