//! Where grants are kept: the [`GrantStore`] trait and its sled implementation (tree
//! [`TREE`], one JSON value per grant id). It only reads: writes are effects committed with
//! their audit records ([`put`], [`remove`]).

use std::fmt::Debug;

use super::Grant;
use crate::audit::Effect;

/// A failure of the grant store: its sled tree, or the audit commit a grant change rides on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("grant store: {0}")]
pub struct GrantStoreError(pub String);

impl From<crate::audit::StoreError> for GrantStoreError {
    /// The data directory's failure (opening a tree, committing through the audit log),
    /// under this store's name, the audit store's message kept (`grant store: audit
    /// store: …`).
    fn from(e: crate::audit::StoreError) -> Self {
        GrantStoreError(e.to_string())
    }
}

/// The sled tree grants are kept in.
const TREE: &str = "grants";

/// The effect that stores `grant` under its id.
pub(super) fn put(grant: &Grant) -> Result<Effect, GrantStoreError> {
    Ok(Effect::put_json(TREE, grant.id.as_bytes(), grant)?)
}

/// The effect that removes grant `id`.
pub(super) fn remove(id: &str) -> Effect {
    Effect::remove(TREE, id.as_bytes())
}

/// Stored grants, read.
pub trait GrantStore: Send + Sync + Debug {
    /// Every stored grant.
    fn all(&self) -> Result<Vec<Grant>, GrantStoreError>;
}

/// Grants in a sled tree.
#[derive(Debug)]
pub(crate) struct SledGrants {
    cell: std::sync::Arc<crate::audit::SledCell>,
}

fn err(e: impl std::fmt::Display) -> GrantStoreError {
    GrantStoreError(e.to_string())
}

impl SledGrants {
    pub(crate) fn new(
        cell: std::sync::Arc<crate::audit::SledCell>,
    ) -> Result<Self, GrantStoreError> {
        cell.tree(TREE)?;
        Ok(SledGrants { cell })
    }

    fn tree(&self) -> Result<sled::Tree, GrantStoreError> {
        Ok(self.cell.tree(TREE)?)
    }
}

impl GrantStore for SledGrants {
    fn all(&self) -> Result<Vec<Grant>, GrantStoreError> {
        self.tree()?
            .iter()
            .map(|kv| {
                let (_, bytes) = kv.map_err(err)?;
                serde_json::from_slice(&bytes).map_err(err)
            })
            .collect()
    }
}
