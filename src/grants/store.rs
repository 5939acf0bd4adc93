//! Where grants are kept: the [`GrantStore`] trait and its sled implementation (tree
//! [`TREE`], one JSON value per grant id). It only reads: writes are effects committed with
//! their audit records ([`put`], [`remove`]).

use std::fmt::Debug;

use super::Grant;
use crate::audit::{Effect, StoreError};

/// The sled tree grants are kept in.
const TREE: &str = "grants";

/// The effect that stores `grant` under its id.
pub(super) fn put(grant: &Grant) -> Result<Effect, StoreError> {
    Effect::put_json(TREE, grant.id.as_bytes(), grant)
}

/// The effect that removes grant `id`.
pub(super) fn remove(id: &str) -> Effect {
    Effect::remove(TREE, id.as_bytes())
}

/// Stored grants, read.
pub trait GrantStore: Send + Sync + Debug {
    /// Every stored grant.
    fn all(&self) -> Result<Vec<Grant>, StoreError>;
}

/// Grants in a sled tree.
#[derive(Debug)]
pub(crate) struct SledGrants {
    cell: std::sync::Arc<crate::audit::SledCell>,
}

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError(format!("grants: {e}"))
}

impl SledGrants {
    pub(crate) fn new(cell: std::sync::Arc<crate::audit::SledCell>) -> Result<Self, StoreError> {
        cell.tree(TREE)?;
        Ok(SledGrants { cell })
    }

    fn tree(&self) -> Result<sled::Tree, StoreError> {
        self.cell.tree(TREE)
    }
}

impl GrantStore for SledGrants {
    fn all(&self) -> Result<Vec<Grant>, StoreError> {
        self.tree()?
            .iter()
            .map(|kv| {
                let (_, bytes) = kv.map_err(err)?;
                serde_json::from_slice(&bytes).map_err(err)
            })
            .collect()
    }
}
