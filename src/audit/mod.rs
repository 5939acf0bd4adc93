//! The audit trail: every decision, approval event and policy reload as a hash-chained
//! [`Record`], stored behind the [`AuditStore`] trait (a write-ahead ledger file, then sled),
//! written by one group-commit writer ([`Audit`]) together with the state changes
//! ([`Effect`]s) the records attest, checked by [`verify()`], under the HMAC keys of
//! [`keys`].

mod apply;
mod attest;
mod block;
mod cell;
mod error;
mod event;
pub mod keys;
mod ledger;
mod otlp;
mod record;
mod ship;
mod store;
mod verify;
mod writer;

pub use attest::{ATTESTED_TREES, Expected, STATE_CHECKED, Said, expected_state, state_checked};
pub(crate) use cell::{SledCell, clear_snapshot_debris, lock_held, sled_config};
pub use error::StoreError;
pub use event::{
    Approval as ApprovalEvent, CallFacts, Decision as DecisionEvent, Event,
    Execution as ExecutionEvent, Operator, Screened, Sidecar,
};
pub use ledger::Effect;
pub use otlp::{OtlpSettings, position_file as otlp_position_file};
pub use record::{
    Attest, Chain, Checkpoint, Entry, EntryKind, GENESIS, Head, Link, LinkFault, Record, RingKey,
    args_digest, args_preview, canonical_json, key_id, redacted_preview,
};
pub use ship::ShipSettings;
pub(crate) use store::SledAudit;
pub use store::{AuditStore, Query, Stored};
pub use verify::{ChainVerdict, verify, verify_through};
pub use writer::{Audit, Durability, MAX_COMMIT, Pruned, Retention, ShipStats};
