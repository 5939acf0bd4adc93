//! Audit records: what one entry says, its canonical bytes, and the chain hash that binds it
//! to the entry before it. Also the argument digest and the preview that stand in for
//! arguments, which are never stored in clear.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::ledger::Effect;
use crate::digest::hmac_sha256_hex;

/// What an entry is about.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A decision on a tool call, at any stage.
    #[default]
    Decision,
    /// An approval created, approved, denied, expired or used.
    Approval,
    /// A policy reload attempt.
    Reload,
    /// An administrative action.
    Admin,
    /// An anomaly signal raised for a principal.
    Anomaly,
    /// A gate found something (masked, blocked or warned; never the content itself).
    Gate,
    /// A tool result reported to `/v1/results` (sizes and kinds; never the content).
    Result,
    /// A tool run by `/v1/execute`: outcome, resource usage, kinds found in the output.
    Execution,
}

/// One audit entry as the sidecar submits it. The writer adds the sequence number and hashes.
///
/// The fields are declared in the byte order of their names, so serializing an entry gives
/// its canonical JSON directly (the chain hashes it without building a `Value`; a test holds
/// the two equal).
///
/// An entry is built from an [`Event`](super::Event); its fields can be read anywhere but not
/// written out one by one outside this module, not even on top of another entry:
///
/// ```compile_fail
/// let stored: toolgate::audit::Entry = serde_json::from_str(
///     r#"{"at_ms": 0, "decision": "deny", "id": "d1", "kind": "decision"}"#,
/// ).unwrap();
/// let forged = toolgate::audit::Entry { decision: "allow".into(), ..stored };
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// The arguments, redacted (secrets, personal data and high-entropy tokens masked),
    /// strings cut to 200 characters; only their shape (`<str:N>`) if the detectors are
    /// unavailable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args_preview: Option<String>,
    /// SHA-256 of the canonical JSON of the arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args_sha256: Option<String>,
    /// Unix time in milliseconds.
    pub at_ms: u64,
    /// Conversation id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conv_id: Option<String>,
    /// allow | deny | pending_approval; for approvals the event (created, approved, denied,
    /// expired, used); for reloads applied | failed.
    pub decision: String,
    /// Free-form detail: the approval id of a decision, the approver's reason, reload revisions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Time spent deciding, in microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_us: Option<u64>,
    /// The state changes committed with this record, each as the tree, the key and the
    /// SHA-256 of the value set (none: removed); on a `state_checked` record, the whole state
    /// it found. What `audit verify --state` and the start check hold the stored state to.
    /// Never on records written before it existed, so their hashes are unchanged.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub effects: Option<Vec<Attest>>,
    /// Decision id, approval id or event id.
    pub id: String,
    /// What the policies of a decision read besides its arguments and deployment data:
    /// `provenance` (argument → origin), `facts` (argument → fact → value, strings redacted),
    /// `findings` and `conversation`, each only when it says something. Never on records
    /// written before it existed, so their hashes are unchanged.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub inputs: Option<serde_json::Value>,
    /// Agent loop iteration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iter: Option<i64>,
    /// What the entry is about.
    pub kind: EntryKind,
    /// The human the agent acted for (`Human::"alice"`), when its verified token said so.
    /// Never on records of calls without one, so their hashes are unchanged.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub on_behalf_of: Option<String>,
    /// The W3C trace id (32 hex digits) of the request that made the entry: its span's when
    /// traces are on, else the incoming `traceparent`'s. Absent when neither; never on
    /// records written before traces existed, so their hashes are unchanged.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub otel_trace_id: Option<String>,
    /// The policy revision in force.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_revision: Option<String>,
    /// The principal (`Agent::"x"`, `Human::"y"`), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// Determining policy ids, or error codes.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub reasons: Vec<String>,
    /// The tool's risk tier, when registered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub risk: Option<String>,
    /// The stage that decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// The tool named in the call, when any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Trace id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Keeps entries from being written out field by field outside this module: an entry is
    /// built from an [`Event`](super::Event) (or read back from the store).
    #[serde(skip)]
    pub(super) sealed: Sealed,
}

/// The private part of an [`Entry`] (see its `sealed` field).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sealed;

impl Entry {
    /// An entry with nothing said yet (for [`super::Event`] to fill in).
    pub(super) fn blank() -> Entry {
        Entry {
            args_preview: None,
            args_sha256: None,
            at_ms: 0,
            conv_id: None,
            decision: String::new(),
            detail: None,
            duration_us: None,
            effects: None,
            id: String::new(),
            inputs: None,
            iter: None,
            kind: EntryKind::Decision,
            on_behalf_of: None,
            otel_trace_id: None,
            policy_revision: None,
            principal: None,
            reasons: Vec::new(),
            risk: None,
            stage: None,
            tool: None,
            trace_id: None,
            sealed: Sealed,
        }
    }
}

/// A stored entry: its place in the chain and the hashes that bind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// Position in the log, from 1, without gaps.
    pub seq: u64,
    /// Hash of the previous record (64 zeros before the first).
    pub prev: String,
    /// `H(prev ‖ canonical(seq, entry))`, hex.
    pub hash: String,
    /// The id of the HMAC key that sealed it ([`key_id`]); absent on records of a legacy
    /// chain (plain, or keyed before keyrings), which older logs hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The entry.
    pub entry: Entry,
}

/// Where retention cut the log: the last removed record's number and hash, so the chain
/// still verifies from there. Sealed with the chain's key (when there is one), and attested by
/// the retention record the writer appends before removing anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// The last removed record.
    pub seq: u64,
    /// Its hash: the `prev` of the first record kept.
    pub hash: String,
    /// When the cut was made, unix ms.
    pub at_ms: u64,
    /// `H(hash ‖ "checkpoint" ‖ seq ‖ at_ms)` under the chain's key.
    pub seal: String,
}

impl Checkpoint {
    /// The words the retention record carries in `detail` for this checkpoint.
    pub fn attestation(&self) -> String {
        format!("checkpoint {} {}", self.seq, self.hash)
    }
}

/// The hash before the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// How links are computed: plain SHA-256, or HMAC-SHA-256 with a secret key (then a forger
/// who can write the store still cannot produce valid links).
///
/// A chain is either a *legacy* chain (one way of linking for every record, records carry no
/// key id: [`Chain::plain`], [`Chain::keyed`]) or a *keyring* chain ([`Chain::ring`]): each
/// key seals the records from its `from_seq` on, records name the key that sealed them
/// ([`Record::key`]), and the records before the first key are checked as unlabelled ones.
#[derive(Clone)]
pub struct Chain {
    /// How records without a key id are linked.
    unlabelled: Link,
    /// Ring keys, by ascending `from_seq`; empty for a legacy chain.
    ring: Vec<RingKey>,
}

/// How one kind of record is linked.
#[derive(Clone)]
pub enum Link {
    /// SHA-256.
    Plain,
    /// HMAC-SHA-256 under this key.
    Keyed(Vec<u8>),
    /// HMAC-SHA-256 under the key with this id, which this process does not hold.
    Missing(String),
}

/// One key of a keyring chain, as the verifier and the writer need it.
#[derive(Clone)]
pub struct RingKey {
    /// The key id records carry ([`key_id`]).
    pub id: String,
    /// The first record it seals.
    pub from_seq: u64,
    /// The key itself, when this process holds it.
    pub secret: Option<Vec<u8>>,
}

/// Why a record's link does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkFault {
    /// The content does not match the hash under the key it should have.
    Altered,
    /// The record names another key (or none) than the one that seals its position.
    WrongKey {
        /// The key id it carries.
        found: Option<String>,
        /// The key id that seals its position (none: before the first key).
        expected: Option<String>,
    },
    /// The key that seals it is not available here.
    NoKey(String),
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("hmac", &self.is_keyed())
            .field(
                "ring",
                &self
                    .ring
                    .iter()
                    .map(|k| (&k.id, k.from_seq))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// The id of an HMAC key: the first 16 hex digits of `SHA-256("toolgate audit key" ‖ 0 ‖ key)`.
/// It names the key in records and keyrings without revealing it.
pub fn key_id(key: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(b"toolgate audit key");
    h.update([0]);
    h.update(key);
    let mut id = hex::encode(h.finalize());
    id.truncate(16);
    id
}

impl Link {
    /// `H(prev ‖ 0 ‖ body)`, keyed when there is a key; `None` without the key.
    fn mac(&self, prev: &str, body: &[u8]) -> Option<String> {
        match self {
            Link::Plain => {
                let mut h = Sha256::new();
                h.update(prev.as_bytes());
                h.update([0]);
                h.update(body);
                Some(hex::encode(h.finalize()))
            }
            Link::Keyed(key) => Some(hmac_sha256_hex(key, &[prev.as_bytes(), &[0], body])),
            Link::Missing(_) => None,
        }
    }
}

impl RingKey {
    fn link(&self) -> Link {
        match &self.secret {
            Some(k) => Link::Keyed(k.clone()),
            None => Link::Missing(self.id.clone()),
        }
    }
}

impl Chain {
    /// SHA-256 links, no key ids.
    pub fn plain() -> Self {
        Chain {
            unlabelled: Link::Plain,
            ring: Vec::new(),
        }
    }

    /// HMAC-SHA-256 links under `key`, no key ids (how keyed logs were written before
    /// keyrings).
    pub fn keyed(key: Vec<u8>) -> Self {
        Chain {
            unlabelled: Link::Keyed(key),
            ring: Vec::new(),
        }
    }

    /// A keyring chain: records before the first key's `from_seq` are checked under
    /// `unlabelled`; from there on each record is sealed by the key whose `from_seq` is the
    /// greatest at or below its own. New records are sealed by the last key.
    pub fn ring(unlabelled: Link, mut keys: Vec<RingKey>) -> Self {
        keys.sort_by_key(|k| k.from_seq);
        Chain {
            unlabelled,
            ring: keys,
        }
    }

    /// Whether links are HMACs (for new records, and for every record a keyring covers).
    pub fn is_keyed(&self) -> bool {
        !self.ring.is_empty() || matches!(self.unlabelled, Link::Keyed(_))
    }

    /// The keyring's keys (empty for a legacy chain).
    pub fn ring_keys(&self) -> &[RingKey] {
        &self.ring
    }

    /// How records before the first ring key (all records of a legacy chain) are linked.
    pub fn unlabelled(&self) -> &Link {
        &self.unlabelled
    }

    /// The ring key that seals position `seq`, if any.
    pub fn key_for(&self, seq: u64) -> Option<&RingKey> {
        self.ring.iter().rev().find(|k| k.from_seq <= seq)
    }

    /// The key new records are sealed with: its id (none for a legacy chain) and link.
    fn sealing(&self) -> (Option<String>, Link) {
        match self.ring.last() {
            Some(k) => (Some(k.id.clone()), k.link()),
            None => (None, self.unlabelled.clone()),
        }
    }

    /// The link for `entry` at `seq` after `prev`, under the key that seals new records
    /// (empty when this process does not hold it).
    pub fn link(&self, prev: &str, seq: u64, entry: &Entry) -> String {
        self.sealing()
            .1
            .mac(prev, &canonical_entry(seq, entry))
            .unwrap_or_default()
    }

    /// Checks `record`'s own hash: under the key that seals its position, which it must
    /// also name.
    pub fn check(&self, record: &Record) -> Result<(), LinkFault> {
        let expected = self.key_for(record.seq);
        let link = match (expected, &record.key) {
            (None, None) => self.unlabelled.clone(),
            (Some(k), Some(found)) if *found == k.id => k.link(),
            (expected, found) => {
                return Err(LinkFault::WrongKey {
                    found: found.clone(),
                    expected: expected.map(|k| k.id.clone()),
                });
            }
        };
        match link.mac(&record.prev, &canonical_entry(record.seq, &record.entry)) {
            None => Err(LinkFault::NoKey(record.key.clone().unwrap_or_else(
                || match &link {
                    Link::Missing(id) => id.clone(),
                    _ => String::new(),
                },
            ))),
            Some(h) if h == record.hash => Ok(()),
            Some(_) => Err(LinkFault::Altered),
        }
    }

    /// Seals a checkpoint after record `seq` (hash `hash`), cut at `at_ms`, under the key
    /// that seals new records.
    pub fn checkpoint(&self, seq: u64, hash: &str, at_ms: u64) -> Checkpoint {
        seal_checkpoint(&self.sealing().1, seq, hash, at_ms)
    }

    /// Whether `cp` was sealed under one of this chain's keys: a ring key, or (for a legacy
    /// chain, or a cut before the first ring key) the unlabelled link.
    pub fn checkpoint_holds(&self, cp: &Checkpoint) -> bool {
        let holds = |link: &Link| seal_checkpoint(link, cp.seq, &cp.hash, cp.at_ms).seal == cp.seal;
        let before_ring = self
            .ring
            .first()
            .is_none_or(|k| cp.seq.saturating_add(1) < k.from_seq);
        (before_ring && holds(&self.unlabelled))
            || self
                .ring
                .iter()
                .any(|k| k.secret.is_some() && holds(&k.link()))
    }

    /// Seals `entry` as record `seq` after `prev`.
    pub fn seal(&self, prev: &str, seq: u64, entry: Entry) -> Record {
        let (key, link) = self.sealing();
        let hash = link
            .mac(prev, &canonical_entry(seq, &entry))
            .unwrap_or_default();
        Record {
            seq,
            prev: prev.to_owned(),
            hash,
            key,
            entry,
        }
    }
}

fn seal_checkpoint(link: &Link, seq: u64, hash: &str, at_ms: u64) -> Checkpoint {
    let body = format!("checkpoint|{seq}|{at_ms}");
    Checkpoint {
        seq,
        hash: hash.to_owned(),
        at_ms,
        seal: link.mac(hash, body.as_bytes()).unwrap_or_default(),
    }
}

/// The bytes a link covers: the sequence number and the entry, as canonical JSON.
fn canonical_entry(seq: u64, entry: &Entry) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(seq.to_string().as_bytes());
    out.push(b'|');
    // Fields are declared sorted and hold only scalars and a list of strings, so this is the
    // canonical form. Serializing plain data to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut out, entry);
    out
}

/// `value` with every object's members in key order, so that it serializes as
/// [`canonical_json`] writes it (serde_json keeps insertion order here).
pub fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut members: Vec<(String, Value)> = map.into_iter().collect();
            members.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(members.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// Canonical JSON: object keys sorted by their UTF-8 bytes, no insignificant white space,
/// strings and numbers as serde_json writes them.
pub fn canonical_json(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_scalar(k, out);
                out.push(b':');
                if let Some(v) = map.get(k) {
                    canonical_json(v, out);
                }
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical_json(v, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

fn write_scalar<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
    // Writing a scalar to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// SHA-256 of the arguments' canonical JSON, hex: the same arguments in any key order give the
/// same digest. Approvals are bound to it.
pub fn args_digest(args: &Value) -> String {
    let mut bytes = Vec::with_capacity(128);
    canonical_json(args, &mut bytes);
    hex::encode(Sha256::digest(&bytes))
}

/// Longest preview kept when no limits are configured.
const PREVIEW_MAX: usize = 512;

/// The arguments' shape with every string replaced by its length (`<str:11>`): what is
/// stored when the redaction detectors are not available (no argument text at all).
/// Truncated to 512 bytes.
pub fn args_preview(args: &Value) -> String {
    fn shape(v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(format!("<str:{}>", s.chars().count())),
            Value::Array(items) => Value::Array(items.iter().map(shape).collect()),
            Value::Object(map) => {
                Value::Object(map.iter().map(|(k, v)| (k.clone(), shape(v))).collect())
            }
            other => other.clone(),
        }
    }
    bounded(&shape(args), PREVIEW_MAX)
}

/// A preview of arguments that are already redacted (every secret, personal datum and
/// high-entropy token masked): canonical JSON with each string cut to `string_chars`
/// characters, the whole to `bytes` (`[redaction] preview_string_chars`, `preview_bytes`).
pub fn redacted_preview(redacted: &Value, bytes: usize, string_chars: usize) -> String {
    fn cut(v: &Value, max: usize) -> Value {
        match v {
            Value::String(s) if s.chars().count() > max => {
                let mut t: String = s.chars().take(max).collect();
                t.push('…');
                Value::String(t)
            }
            Value::Array(items) => Value::Array(items.iter().map(|i| cut(i, max)).collect()),
            Value::Object(map) => {
                Value::Object(map.iter().map(|(k, v)| (k.clone(), cut(v, max))).collect())
            }
            other => other.clone(),
        }
    }
    bounded(&cut(redacted, string_chars), bytes)
}

/// Canonical JSON of `v`, cut to `max` bytes.
fn bounded(v: &Value, max: usize) -> String {
    let mut bytes = Vec::new();
    canonical_json(v, &mut bytes);
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if text.len() > max {
        text.truncate(text.floor_char_boundary(max));
        text.push('…');
    }
    text
}

/// Why a record's own link fails, in words.
pub(crate) fn fault_words(seq: u64, fault: &LinkFault) -> String {
    match fault {
        LinkFault::Altered => {
            format!("record {seq} was altered: its content does not match its hash")
        }
        LinkFault::WrongKey {
            found: None,
            expected: Some(k),
        } => format!(
            "record {seq} carries no key id, but key `{k}` seals records from here on: forged or re-chained without the key"
        ),
        LinkFault::WrongKey {
            found: Some(f),
            expected: None,
        } => format!(
            "record {seq} names key `{f}`, which seals no record at this position (no keyring, or the key starts later): forged, or pass the data directory's keyring"
        ),
        LinkFault::WrongKey { found, expected } => format!(
            "record {seq} names key `{}`, but key `{}` seals records at this position: forged or moved",
            found.as_deref().unwrap_or("none"),
            expected.as_deref().unwrap_or("none")
        ),
        LinkFault::NoKey(id) => format!(
            "record {seq} is sealed with key `{id}`, which this verifier does not hold: pass it with --hmac-key-file"
        ),
    }
}

/// Why `r` does not follow a record hashed `prev` under `chain`, in words, if it does not.
pub(crate) fn link_fault(chain: &Chain, prev: &str, r: &Record) -> Option<String> {
    if r.prev != prev {
        return Some(format!(
            "record {} does not follow the record before it (its previous hash differs)",
            r.seq
        ));
    }
    seal_fault(chain, r)
}

/// Why `r`'s own seal does not hold under `chain`, in words, if it does not.
pub(crate) fn seal_fault(chain: &Chain, r: &Record) -> Option<String> {
    chain.check(r).err().map(|f| fault_words(r.seq, &f))
}

/// Where the chain stands: the newest record's number and hash.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Head {
    /// Sequence number of the newest record (0 when empty).
    pub seq: u64,
    /// Its hash (the genesis hash when empty).
    pub hash: String,
}

/// One state change as a record names it. Fields in byte order of their names (canonical).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attest {
    /// The key: as text when it is UTF-8, else `0x` and hex.
    pub key: String,
    /// SHA-256 (hex) of the value set; absent when the key was removed.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sha256: Option<String>,
    /// The tree.
    pub tree: String,
}

impl Attest {
    /// `key` in `tree` holding `value` (`None`: removed).
    pub fn of(tree: &str, key: &[u8], value: Option<&[u8]>) -> Attest {
        Attest {
            key: key_text(key),
            sha256: value.map(|v| hex::encode(Sha256::digest(v))),
            tree: tree.to_owned(),
        }
    }

    /// What `effect` changes.
    pub fn effect(effect: &Effect) -> Attest {
        Attest::of(&effect.tree, &effect.key, effect.value.as_deref())
    }
}

fn key_text(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(s) if !s.starts_with("0x") => s.to_owned(),
        _ => format!("0x{}", hex::encode(key)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn digest_ignores_key_order_and_preview_hides_text() {
        let a = json!({"path": "src/main.rs", "opts": {"b": 1, "a": [true, "x"]}});
        let b: Value =
            serde_json::from_str(r#"{"opts":{"a":[true,"x"],"b":1},"path":"src/main.rs"}"#)
                .unwrap();
        assert_eq!(args_digest(&a), args_digest(&b));
        assert_ne!(
            args_digest(&a),
            args_digest(&json!({"path": "src/main.rS"}))
        );
        let p = args_preview(&json!({"token": "sk-live-123456", "n": 5}));
        assert_eq!(p, r#"{"n":5,"token":"<str:14>"}"#);
    }

    #[test]
    fn an_entry_serializes_canonically() {
        let e = Entry {
            kind: EntryKind::Approval,
            id: "d\"1".into(),
            at_ms: 7,
            principal: Some("Agent::\"a\"".into()),
            on_behalf_of: Some("Human::\"h\"".into()),
            tool: Some("t".into()),
            risk: Some("high".into()),
            decision: "allow".into(),
            stage: Some("policy".into()),
            reasons: vec!["p1".into(), "é".into()],
            policy_revision: Some("r".into()),
            args_sha256: Some("ab".into()),
            args_preview: Some("{}".into()),
            conv_id: Some("c".into()),
            trace_id: Some("t".into()),
            otel_trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
            iter: Some(-3),
            inputs: Some(sorted(
                serde_json::json!({"provenance": {"to": "tool", "body": "none"}}),
            )),
            duration_us: Some(9),
            effects: Some(vec![super::Attest::of("grants", b"g1", Some(b"{}"))]),
            detail: Some("x".into()),
            sealed: Sealed,
        };
        let mut canonical = Vec::new();
        canonical_json(&serde_json::to_value(&e).unwrap(), &mut canonical);
        assert_eq!(serde_json::to_vec(&e).unwrap(), canonical);
    }

    #[test]
    fn a_link_covers_every_field_and_the_key() {
        let e = Entry {
            kind: EntryKind::Decision,
            id: "d1".into(),
            decision: "allow".into(),
            ..Entry::blank()
        };
        let plain = Chain::plain();
        let h = plain.link(GENESIS, 1, &e);
        assert_eq!(h, plain.link(GENESIS, 1, &e));
        assert_ne!(h, plain.link(GENESIS, 2, &e));
        let mut changed = e.clone();
        changed.decision = "deny".into();
        assert_ne!(h, plain.link(GENESIS, 1, &changed));
        assert_ne!(h, Chain::keyed(b"k".to_vec()).link(GENESIS, 1, &e));
    }
}
