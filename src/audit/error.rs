//! The audit store's one error: what failed, in words. Beneath every file of the module, so
//! the ledger, the sled cell and the store share it without importing each other.

/// A storage failure. The message says what failed; the sidecar denies while it lasts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("audit store: {0}")]
pub struct StoreError(pub String);

impl StoreError {
    pub(super) fn from_sled(e: impl std::fmt::Display) -> Self {
        StoreError(e.to_string())
    }
}
