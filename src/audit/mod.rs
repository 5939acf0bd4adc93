//! The audit trail: every decision, approval event and policy reload as a hash-chained
//! [`Record`], stored behind the [`AuditStore`] trait (sled inside), written by one
//! group-commit writer ([`Audit`]), checked by [`verify()`], under the HMAC keys of
//! [`keys`].

pub mod keys;
mod record;
mod store;
mod verify;
mod writer;

pub use record::{
    Chain, Checkpoint, Entry, EntryKind, GENESIS, Link, LinkFault, Operator, Record, RingKey,
    args_digest, args_preview, canonical_json, hmac_sha256_hex, key_id, now_ms, redacted_preview,
    unix_ms,
};
pub(crate) use store::SledAudit;
pub use store::{AuditStore, Query, StoreError, Stored};
pub use verify::{Verdict as ChainVerdict, verify, verify_through};
pub use writer::{Audit, Durability, Head, Pruned, Retention};
