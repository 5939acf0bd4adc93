//! The audit keyring: the HMAC keys that seal the chain, kept in `<data_dir>/audit-keys.json`
//! (mode 0600, written atomically), and the [`Chain`] built from it for the writer and for
//! offline verification. Also the Ed25519 signed checkpoints a verifier can hold elsewhere.
//!
//! Each key seals the records from its `from_seq` on; a new key (first start, rotation, a new
//! `audit.hmac_key_file`) starts after the newest record. Keys generated here are stored in
//! the keyring; a key from `audit.hmac_key_file` is only named (by its id), never copied.
//! Records written before the first key carry no key id and are checked as the keyring's
//! `unlabelled` field says (plain SHA-256, or the legacy key that sealed them). This module
//! does not write records: the caller records a key's start ([`Started`]).

use std::io::Write;
use std::path::{Path, PathBuf};

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};

use super::record::{Chain, Head, Link, Record, RingKey, key_id};
use crate::clock::now_ms;

/// The keyring's file name inside the data directory.
pub const KEYRING_FILE: &str = "audit-keys.json";

/// Bytes in a generated HMAC key.
const KEY_BYTES: usize = 32;

/// What the keyring says of records without a key id.
const PLAIN: &str = "plain";

/// A keyring or key file problem.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// A file could not be read or written.
    #[error("{what} `{path}`: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The keyring does not parse or holds a bad key.
    #[error("the audit keyring `{path}` is damaged: {why}")]
    Damaged {
        /// The keyring.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The keys configured and stored do not fit together or with the log.
    #[error("{0}")]
    Conflict(String),
    /// A key file is empty or not in the expected form.
    #[error("`{path}`: {why}")]
    BadKeyFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The system's random source failed.
    #[error("cannot generate a key: {0}")]
    Random(String),
}

/// The keyring as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRing {
    /// Format version (1).
    version: u32,
    /// How records without a key id are linked: `plain`, or the id of the legacy key.
    unlabelled: String,
    /// Keys by ascending `from_seq`.
    keys: Vec<RawKey>,
}

/// One stored key.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    /// Its id ([`key_id`]).
    id: String,
    /// The first record it seals.
    from_seq: u64,
    /// When it was added, unix ms.
    created_ms: u64,
    /// The key, hex; absent when it lives in `audit.hmac_key_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
}

/// A key that seals no record yet: the caller records its start as the first record under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// The new key's id.
    pub id: String,
    /// The first record it seals.
    pub from_seq: u64,
    /// The key it replaces, if any.
    pub previous: Option<String>,
    /// Whether it was generated (else it comes from `audit.hmac_key_file`).
    pub generated: bool,
}

impl Started {
    /// The words of the admin record that marks the key's start.
    pub fn detail(&self) -> String {
        let source = if self.generated {
            "generated, kept in the data directory's keyring"
        } else {
            "from audit.hmac_key_file"
        };
        match &self.previous {
            Some(p) => format!(
                "audit key rotated: key {} ({source}) seals records from {} on; key {p} before",
                self.id, self.from_seq
            ),
            None => format!(
                "audit key {} ({source}) seals records from {} on",
                self.id, self.from_seq
            ),
        }
    }
}

/// The keyring's path in `data_dir`.
pub fn keyring_path(data_dir: &Path) -> PathBuf {
    data_dir.join(KEYRING_FILE)
}

/// Reads an HMAC key file (its bytes are the key, as `audit.hmac_key_file` always was).
pub fn read_key_file(path: &Path) -> Result<Vec<u8>, KeyError> {
    let key = std::fs::read(path).map_err(|source| KeyError::Io {
        what: "cannot read the HMAC key file",
        path: path.to_path_buf(),
        source,
    })?;
    if key.is_empty() {
        return Err(KeyError::BadKeyFile {
            path: path.to_path_buf(),
            why: "the HMAC key file is empty".to_owned(),
        });
    }
    Ok(key)
}

fn load(path: &Path) -> Result<Option<RawRing>, KeyError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(KeyError::Io {
                what: "cannot read the audit keyring",
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let damaged = |why: String| KeyError::Damaged {
        path: path.to_path_buf(),
        why,
    };
    let ring: RawRing = serde_json::from_str(&text).map_err(|e| damaged(e.to_string()))?;
    if ring.version != 1 {
        return Err(damaged(format!("unknown version {}", ring.version)));
    }
    for k in &ring.keys {
        if let Some(s) = &k.secret {
            let key = hex::decode(s).map_err(|e| damaged(format!("key `{}`: {e}", k.id)))?;
            if key_id(&key) != k.id {
                return Err(damaged(format!("key `{}` does not match its id", k.id)));
            }
        }
    }
    if ring.keys.windows(2).any(|w| match w {
        [a, b] => a.from_seq > b.from_seq,
        _ => false,
    }) {
        return Err(damaged("keys are out of order".to_owned()));
    }
    Ok(Some(ring))
}

/// Writes the keyring atomically: a temporary file (0600) synced, renamed over the old one,
/// and the directory synced, so a crash leaves the old ring or the new one, never half.
fn store(path: &Path, ring: &RawRing) -> Result<(), KeyError> {
    let io = |what: &'static str| {
        move |source| KeyError::Io {
            what,
            path: path.to_path_buf(),
            source,
        }
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{KEYRING_FILE}.{}.tmp", std::process::id()));
    let bytes = serde_json::to_vec_pretty(ring).map_err(|e| KeyError::Damaged {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut f = opts
            .open(&tmp)
            .map_err(io("cannot write the audit keyring"))?;
        f.write_all(&bytes)
            .and_then(|()| f.sync_all())
            .map_err(io("cannot write the audit keyring"))?;
    }
    std::fs::rename(&tmp, path).map_err(io("cannot replace the audit keyring"))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(
            "cannot sync the data directory after writing the audit keyring",
        ))?;
    Ok(())
}

fn random_key() -> Result<Vec<u8>, KeyError> {
    let mut key = vec![0u8; KEY_BYTES];
    getrandom::fill(&mut key).map_err(|e| KeyError::Random(e.to_string()))?;
    Ok(key)
}

/// Builds the chain a ring describes, with secrets from the ring and from `extra` keys.
fn chain_of(ring: &RawRing, extra: &[Vec<u8>]) -> Result<Chain, KeyError> {
    let secret = |id: &str, stored: Option<&String>| -> Option<Vec<u8>> {
        stored
            .and_then(|s| hex::decode(s).ok())
            .or_else(|| extra.iter().find(|k| key_id(k) == id).cloned())
    };
    let unlabelled = if ring.unlabelled == PLAIN {
        Link::Plain
    } else {
        let stored = ring
            .keys
            .iter()
            .find(|k| k.id == ring.unlabelled)
            .and_then(|k| k.secret.as_ref());
        match secret(&ring.unlabelled, stored) {
            Some(k) => Link::Keyed(k),
            None => Link::Missing(ring.unlabelled.clone()),
        }
    };
    let keys = ring
        .keys
        .iter()
        .map(|k| RingKey {
            id: k.id.clone(),
            from_seq: k.from_seq,
            secret: secret(&k.id, k.secret.as_ref()),
        })
        .collect();
    Ok(Chain::ring(unlabelled, keys))
}

/// How the records already in the log (newest `head`, if any) were sealed, when a keyring is
/// first made for them: `plain`, or the id of `configured` (the legacy keyed chain).
fn unlabelled_of(head: Option<&Record>, configured: Option<&[u8]>) -> Result<String, KeyError> {
    let Some(r) = head else {
        return Ok(PLAIN.to_owned());
    };
    if let Some(k) = &r.key {
        return Err(KeyError::Conflict(format!(
            "the audit log's records are sealed with key `{k}`, but the data directory has no keyring ({KEYRING_FILE}); restore it from a backup"
        )));
    }
    let plain = Chain::plain().seal(&r.prev, r.seq, r.entry.clone());
    if plain.hash == r.hash {
        return Ok(PLAIN.to_owned());
    }
    if let Some(key) = configured
        && Chain::keyed(key.to_vec())
            .seal(&r.prev, r.seq, r.entry.clone())
            .hash
            == r.hash
    {
        return Ok(key_id(key));
    }
    Err(KeyError::Conflict(format!(
        "cannot tell how the audit log's newest record {} is sealed (neither plain nor under audit.hmac_key_file); run `toolgate audit verify`",
        r.seq
    )))
}

/// The chain the sidecar writes with, from the keyring in `data_dir` (made, or extended, as
/// needed): a key is generated at first start when `configured` (`audit.hmac_key_file`) is
/// unset, and a configured key that differs from the current one starts after `head`. Also
/// the key that seals no record yet, whose start the caller must record first.
pub fn open_for_serve(
    data_dir: &Path,
    configured: Option<&Path>,
    head: Option<&Record>,
) -> Result<(Chain, Option<Started>), KeyError> {
    let path = keyring_path(data_dir);
    let configured_key = configured.map(read_key_file).transpose()?;
    let next = head.map_or(1, |r| r.seq.saturating_add(1));
    let existing = load(&path)?;
    let mut changed = existing.is_none();
    let mut ring = match existing {
        Some(r) => r,
        None => RawRing {
            version: 1,
            unlabelled: unlabelled_of(head, configured_key.as_deref())?,
            keys: Vec::new(),
        },
    };
    let current = ring.keys.last().cloned();
    if let Some(cur) = &current
        && cur.from_seq > next
    {
        return Err(KeyError::Conflict(format!(
            "the audit keyring's key `{}` seals records from {} on, but the log ends at record {}: the log was truncated, or restored without its keyring; run `toolgate audit verify`",
            cur.id,
            cur.from_seq,
            next - 1
        )));
    }
    match (&configured_key, &current) {
        (Some(key), cur) => {
            let id = key_id(key);
            if cur.as_ref().is_none_or(|c| c.id != id) {
                if ring.keys.iter().any(|k| k.id == id) || ring.unlabelled == id && cur.is_some() {
                    return Err(KeyError::Conflict(format!(
                        "audit.hmac_key_file holds key `{id}`, which the keyring has retired; configure a new key, or remove audit.hmac_key_file to use the keyring's"
                    )));
                }
                ring.keys.push(RawKey {
                    id,
                    from_seq: next,
                    created_ms: now_ms(),
                    secret: None,
                });
                changed = true;
            }
        }
        (None, Some(cur)) if cur.secret.is_none() => {
            return Err(KeyError::Conflict(format!(
                "the audit chain is sealed with key `{}` from audit.hmac_key_file, which the config no longer names; restore the setting, or run `toolgate audit rotate-key` to continue with a generated key",
                cur.id
            )));
        }
        (None, Some(_)) => {}
        (None, None) => {
            let key = random_key()?;
            ring.keys.push(RawKey {
                id: key_id(&key),
                from_seq: next,
                created_ms: now_ms(),
                secret: Some(hex::encode(&key)),
            });
            changed = true;
        }
    }
    if changed {
        store(&path, &ring)?;
    }
    let extra: Vec<Vec<u8>> = configured_key.into_iter().collect();
    let chain = chain_of(&ring, &extra)?;
    let started = match ring.keys.last() {
        Some(k) if k.from_seq >= next => Some(Started {
            id: k.id.clone(),
            from_seq: k.from_seq,
            previous: ring
                .keys
                .iter()
                .rev()
                .nth(1)
                .map(|p| p.id.clone())
                .or_else(|| (ring.unlabelled != PLAIN).then(|| ring.unlabelled.clone())),
            generated: k.secret.is_some(),
        }),
        _ => None,
    };
    Ok((chain, started))
}

/// Adds a generated key that seals the records after `head` (`toolgate audit rotate-key`,
/// while the sidecar is stopped). The old keys stay in the ring, so older records still
/// verify. Refused while `audit.hmac_key_file` is configured (rotate by naming a new file).
pub fn rotate(
    data_dir: &Path,
    configured: Option<&Path>,
    head: Option<&Record>,
) -> Result<Started, KeyError> {
    if let Some(p) = configured {
        return Err(KeyError::Conflict(format!(
            "the config names audit.hmac_key_file `{}`: rotate by pointing it to a new key file and restarting",
            p.display()
        )));
    }
    let path = keyring_path(data_dir);
    let mut ring = match load(&path)? {
        Some(r) => r,
        None => RawRing {
            version: 1,
            unlabelled: unlabelled_of(head, None)?,
            keys: Vec::new(),
        },
    };
    let previous = ring.keys.last().map(|k| k.id.clone());
    let key = random_key()?;
    let started = Started {
        id: key_id(&key),
        from_seq: head.map_or(1, |r| r.seq.saturating_add(1)),
        previous,
        generated: true,
    };
    ring.keys.push(RawKey {
        id: started.id.clone(),
        from_seq: started.from_seq,
        created_ms: now_ms(),
        secret: Some(hex::encode(&key)),
    });
    store(&path, &ring)?;
    Ok(started)
}

/// The chain to verify `data_dir` with: its keyring (secrets it lacks looked up among
/// `extra`), or without one a legacy chain (keyed under the first of `extra`, else plain).
/// Also whether a keyring was found.
pub fn chain_for_verify(data_dir: &Path, extra: &[Vec<u8>]) -> Result<(Chain, bool), KeyError> {
    match load(&keyring_path(data_dir))? {
        Some(ring) => Ok((chain_of(&ring, extra)?, true)),
        None => Ok((
            extra
                .first()
                .map_or_else(Chain::plain, |k| Chain::keyed(k.clone())),
            false,
        )),
    }
}

/// A head signed with an Ed25519 key, to publish away from the sidecar: a verifier holding
/// the public key can tell that the log still reaches `seq` with `hash` there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedCheckpoint {
    /// The record signed for.
    pub seq: u64,
    /// Its hash.
    pub hash: String,
    /// When it was signed, unix ms.
    pub at_ms: u64,
    /// The public key, hex (which key to check it with).
    pub public_key: String,
    /// Ed25519 signature of `toolgate-checkpoint|seq|hash|at_ms`, hex.
    pub signature: String,
}

fn statement(seq: u64, hash: &str, at_ms: u64) -> Vec<u8> {
    format!("toolgate-checkpoint|{seq}|{hash}|{at_ms}").into_bytes()
}

/// Reads 32 hex-encoded bytes from `path` (an Ed25519 seed or public key).
fn read_hex32(path: &Path, what: &str) -> Result<[u8; 32], KeyError> {
    let text = std::fs::read_to_string(path).map_err(|source| KeyError::Io {
        what: "cannot read the key file",
        path: path.to_path_buf(),
        source,
    })?;
    let bad = |why: String| KeyError::BadKeyFile {
        path: path.to_path_buf(),
        why,
    };
    let bytes = hex::decode(text.trim()).map_err(|e| bad(format!("not a hex {what}: {e}")))?;
    <[u8; 32]>::try_from(bytes.as_slice())
        .map_err(|_| bad(format!("an {what} is 32 bytes (64 hex digits)")))
}

/// Writes `text` to a new file `path` with `mode`; an existing file is never overwritten.
fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), KeyError> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, mode);
    #[cfg(not(unix))]
    let _ = mode;
    opts.open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all()))
        .map_err(|source| KeyError::Io {
            what: "cannot write the key file",
            path: path.to_path_buf(),
            source,
        })
}

/// Generates an Ed25519 signing key at `secret` (0600) and its public key at `public`.
pub fn generate_signing_key(secret: &Path, public: &Path) -> Result<String, KeyError> {
    let seed = random_key()?;
    let seed = <[u8; 32]>::try_from(seed.as_slice())
        .map_err(|_| KeyError::Random("short seed".to_owned()))?;
    let key = SigningKey::from_bytes(&seed);
    let public_hex = hex::encode(key.verifying_key().to_bytes());
    write_new(secret, &format!("{}\n", hex::encode(seed)), 0o600)?;
    write_new(public, &format!("{public_hex}\n"), 0o644)?;
    Ok(public_hex)
}

/// Signs `head` with the Ed25519 seed in `signing_key`.
pub fn sign_checkpoint(head: &Head, signing_key: &Path) -> Result<SignedCheckpoint, KeyError> {
    let key = SigningKey::from_bytes(&read_hex32(signing_key, "Ed25519 signing key")?);
    let at_ms = now_ms();
    let sig = key.sign(&statement(head.seq, &head.hash, at_ms));
    Ok(SignedCheckpoint {
        seq: head.seq,
        hash: head.hash.clone(),
        at_ms,
        public_key: hex::encode(key.verifying_key().to_bytes()),
        signature: hex::encode(sig.to_bytes()),
    })
}

/// Checks `cp` against the Ed25519 public key in `public_key`; the head it vouches for.
pub fn check_checkpoint(cp: &SignedCheckpoint, public_key: &Path) -> Result<Head, KeyError> {
    let bad = |why: &str| KeyError::Conflict(format!("the signed checkpoint {why}"));
    let key = VerifyingKey::from_bytes(&read_hex32(public_key, "Ed25519 public key")?)
        .map_err(|_| bad("names an invalid public key"))?;
    if hex::encode(key.to_bytes()) != cp.public_key {
        return Err(bad("was signed by another key than --public-key"));
    }
    let sig = hex::decode(&cp.signature)
        .ok()
        .and_then(|b| <[u8; 64]>::try_from(b.as_slice()).ok())
        .map(|b| Signature::from_bytes(&b))
        .ok_or_else(|| bad("has a malformed signature"))?;
    key.verify(&statement(cp.seq, &cp.hash, cp.at_ms), &sig)
        .map_err(|_| bad("does not hold: its signature does not match its content"))?;
    Ok(Head {
        seq: cp.seq,
        hash: cp.hash.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{Entry, GENESIS};

    fn entry(n: u64) -> Entry {
        Entry {
            id: format!("e{n}"),
            decision: "allow".into(),
            ..Entry::blank()
        }
    }

    #[test]
    fn a_ring_seals_each_position_with_its_key_and_refuses_a_downgrade() {
        let dir = tempfile::tempdir().unwrap();
        let plain = Chain::plain();
        let r1 = plain.seal(GENESIS, 1, entry(1));
        let (chain, started) = open_for_serve(dir.path(), None, Some(&r1)).unwrap();
        let started = started.unwrap();
        assert_eq!(started.from_seq, 2);
        let r2 = chain.seal(&r1.hash, 2, entry(2));
        assert_eq!(r2.key.as_deref(), Some(started.id.as_str()));
        assert!(chain.check(&r1).is_ok() && chain.check(&r2).is_ok());
        // The same content re-chained plainly at a keyed position is refused.
        let forged = plain.seal(&r1.hash, 2, entry(2));
        assert!(chain.check(&forged).is_err());
        // A second start reuses the key and has nothing to record.
        let (again, none) = open_for_serve(dir.path(), None, Some(&r2)).unwrap();
        assert!(none.is_none());
        assert!(again.check(&r2).is_ok());
        // After a rotation, the old key's records still check and the next start records it.
        let rotated = rotate(dir.path(), None, Some(&r2)).unwrap();
        assert_eq!(rotated.from_seq, 3);
        let (after, next) = open_for_serve(dir.path(), None, Some(&r2)).unwrap();
        assert_eq!(next, Some(rotated));
        assert!(after.check(&r1).is_ok() && after.check(&r2).is_ok());
        // A log shorter than the keyring says (rolled back) is refused at start.
        let err = open_for_serve(dir.path(), None, Some(&r1)).unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(keyring_path(dir.path()))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn a_signed_checkpoint_holds_only_for_its_key_and_content() {
        let dir = tempfile::tempdir().unwrap();
        let (sk, pk) = (dir.path().join("k"), dir.path().join("k.pub"));
        generate_signing_key(&sk, &pk).unwrap();
        let head = Head {
            seq: 7,
            hash: "ab".repeat(32),
        };
        let cp = sign_checkpoint(&head, &sk).unwrap();
        assert_eq!(check_checkpoint(&cp, &pk).unwrap(), head);
        let forged = SignedCheckpoint { seq: 6, ..cp };
        assert!(check_checkpoint(&forged, &pk).is_err());
        // Never overwrites a key.
        assert!(generate_signing_key(&sk, &pk).is_err());
    }
}
