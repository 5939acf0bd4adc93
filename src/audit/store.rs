//! Where audit records live: the [`AuditStore`] trait and its sled implementation.
//!
//! Layout (one sled tree, so a batch of records and their index entries is applied
//! atomically): `L` + seq (big-endian) → the record as JSON; `I` + field + 0 + value + 0 + seq
//! → nothing, for the indexed fields (principal, tool, decision, stage, conv_id, trace_id).
//! A filtered query walks one index prefix instead of the whole log.

use serde::Serialize;

use super::record::{Entry, Record};

/// A storage failure. The message says what failed; the sidecar denies while it lasts.
#[derive(Debug, Clone, thiserror::Error)]
#[error("audit store: {0}")]
pub struct StoreError(pub String);

impl StoreError {
    fn from_sled(e: impl std::fmt::Display) -> Self {
        StoreError(e.to_string())
    }
}

/// Filters for [`AuditStore::query`]. Results come newest first.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Query {
    /// Exact principal, e.g. `Agent::"dev-agent"`.
    pub principal: Option<String>,
    /// Exact tool name.
    pub tool: Option<String>,
    /// allow | deny | pending_approval (or an approval or reload event).
    pub decision: Option<String>,
    /// Deciding stage.
    pub stage: Option<String>,
    /// Conversation id.
    pub conv_id: Option<String>,
    /// Trace id.
    pub trace_id: Option<String>,
    /// Records at or after this time (unix ms).
    pub since_ms: Option<u64>,
    /// Records before this time (unix ms).
    pub until_ms: Option<u64>,
    /// Only records with a sequence number below this (the cursor of the previous page).
    pub before_seq: Option<u64>,
    /// Page size.
    pub limit: usize,
}

/// Durable, append-only storage of audit records.
pub trait AuditStore: Send + Sync {
    /// Appends `batch` (consecutive records) atomically and, when `durable`, waits until it is
    /// on disk.
    fn append(&self, batch: &[Record], durable: bool) -> Result<(), StoreError>;
    /// The newest record.
    fn last(&self) -> Result<Option<Record>, StoreError>;
    /// Stored records from position `from` on, oldest first, at most `limit`, each with the
    /// position it is stored under and the record, or why its bytes do not parse.
    fn scan(&self, from: u64, limit: usize) -> Result<Vec<Stored>, StoreError>;
    /// Records matching `q`, newest first.
    fn query(&self, q: &Query) -> Result<Vec<Record>, StoreError>;
}

/// A record as found in the store.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The position it is stored under.
    pub key_seq: u64,
    /// The record, or why it does not parse.
    pub record: Result<Record, String>,
}

const LOG: u8 = b'L';
const INDEX: u8 = b'I';

fn log_key(seq: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = LOG;
    k[1..].copy_from_slice(&seq.to_be_bytes());
    k
}

fn index_prefix(field: &str, value: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(field.len() + value.len() + 11);
    k.push(INDEX);
    k.extend_from_slice(field.as_bytes());
    k.push(0);
    k.extend_from_slice(value.as_bytes());
    k.push(0);
    k
}

fn seq_of(key: &[u8]) -> Option<u64> {
    let tail: [u8; 8] = key.get(key.len().checked_sub(8)?..)?.try_into().ok()?;
    Some(u64::from_be_bytes(tail))
}

/// The indexed fields, most selective first (a query walks the first one it constrains).
const INDEXED: [&str; 6] = [
    "conv_id",
    "trace_id",
    "principal",
    "tool",
    "stage",
    "decision",
];

/// An entry's values for [`INDEXED`], in that order.
fn indexed(e: &Entry) -> [Option<&str>; 6] {
    [
        e.conv_id.as_deref(),
        e.trace_id.as_deref(),
        e.principal.as_deref(),
        e.tool.as_deref(),
        e.stage.as_deref(),
        Some(e.decision.as_str()),
    ]
}

impl Query {
    /// The wanted values for [`INDEXED`], in that order.
    fn wanted(&self) -> [Option<&str>; 6] {
        [
            self.conv_id.as_deref(),
            self.trace_id.as_deref(),
            self.principal.as_deref(),
            self.tool.as_deref(),
            self.stage.as_deref(),
            self.decision.as_deref(),
        ]
    }
}

/// The sled implementation.
pub(crate) struct SledAudit {
    tree: sled::Tree,
    db: sled::Db,
}

impl SledAudit {
    pub(crate) fn new(db: sled::Db) -> Result<Self, StoreError> {
        let tree = db.open_tree("audit").map_err(StoreError::from_sled)?;
        Ok(SledAudit { tree, db })
    }

    fn decode(bytes: &[u8]) -> Result<Record, StoreError> {
        serde_json::from_slice(bytes)
            .map_err(|e| StoreError(format!("a stored record does not parse: {e}")))
    }

    fn get(&self, seq: u64) -> Result<Option<Record>, StoreError> {
        self.tree
            .get(log_key(seq))
            .map_err(StoreError::from_sled)?
            .map(|v| Self::decode(&v))
            .transpose()
    }
}

impl AuditStore for SledAudit {
    fn append(&self, batch: &[Record], durable: bool) -> Result<(), StoreError> {
        let mut b = sled::Batch::default();
        for r in batch {
            let bytes = serde_json::to_vec(r).map_err(|e| StoreError(e.to_string()))?;
            b.insert(&log_key(r.seq), bytes);
            for (field, value) in INDEXED.iter().zip(indexed(&r.entry)) {
                let Some(value) = value else { continue };
                let mut k = index_prefix(field, value);
                k.extend_from_slice(&r.seq.to_be_bytes());
                b.insert(k, &[] as &[u8]);
            }
        }
        self.tree.apply_batch(b).map_err(StoreError::from_sled)?;
        if durable {
            self.db.flush().map_err(StoreError::from_sled)?;
        }
        Ok(())
    }

    fn last(&self) -> Result<Option<Record>, StoreError> {
        match self
            .tree
            .scan_prefix([LOG])
            .next_back()
            .transpose()
            .map_err(StoreError::from_sled)?
        {
            Some((_, v)) => Self::decode(&v).map(Some),
            None => Ok(None),
        }
    }

    fn scan(&self, from: u64, limit: usize) -> Result<Vec<Stored>, StoreError> {
        let mut out = Vec::new();
        for kv in self.tree.range(log_key(from)..=log_key(u64::MAX)) {
            let (k, v) = kv.map_err(StoreError::from_sled)?;
            if out.len() >= limit {
                break;
            }
            out.push(Stored {
                key_seq: seq_of(&k).unwrap_or(0),
                record: Self::decode(&v).map_err(|e| e.0),
            });
        }
        Ok(out)
    }

    fn query(&self, q: &Query) -> Result<Vec<Record>, StoreError> {
        let limit = q.limit.max(1);
        let upper = q.before_seq.unwrap_or(u64::MAX);
        let wanted = q.wanted();
        let keep = |r: &Record| {
            let e = &r.entry;
            wanted
                .iter()
                .zip(indexed(e))
                .all(|(want, have)| want.is_none_or(|w| Some(w) == have))
                && q.since_ms.is_none_or(|s| e.at_ms >= s)
                && q.until_ms.is_none_or(|u| e.at_ms < u)
        };
        // Walk the first index that applies (newest first); without one, the log itself.
        let index = INDEXED
            .iter()
            .zip(wanted)
            .find_map(|(f, v)| v.map(|v| index_prefix(f, v)));
        let mut out = Vec::new();
        match index {
            Some(prefix) => {
                let mut hi = prefix.clone();
                hi.extend_from_slice(&upper.to_be_bytes());
                for kv in self.tree.range(prefix.clone()..hi).rev() {
                    let (k, _) = kv.map_err(StoreError::from_sled)?;
                    let Some(seq) = seq_of(&k) else { continue };
                    if let Some(r) = self.get(seq)?
                        && keep(&r)
                    {
                        out.push(r);
                        if out.len() >= limit {
                            break;
                        }
                    }
                }
            }
            None => {
                for kv in self.tree.range(log_key(0)..log_key(upper)).rev() {
                    let (_, v) = kv.map_err(StoreError::from_sled)?;
                    let r = Self::decode(&v)?;
                    if keep(&r) {
                        out.push(r);
                        if out.len() >= limit {
                            break;
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}
