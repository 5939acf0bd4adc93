//! Where grants are kept: the [`GrantStore`] trait and its sled implementation (tree
//! `grants`, one JSON value per grant id, flushed before a change is reported done).

use std::fmt::Debug;

use super::Grant;
use crate::audit::StoreError;

/// Durable grants.
pub trait GrantStore: Send + Sync + Debug {
    /// Saves `grant` (durably) under its id.
    fn put(&self, grant: &Grant) -> Result<(), StoreError>;
    /// Removes the grant `id` (durably); the removed grant, if there was one.
    fn remove(&self, id: &str) -> Result<Option<Grant>, StoreError>;
    /// Every stored grant.
    fn all(&self) -> Result<Vec<Grant>, StoreError>;
}

/// Grants in a sled tree.
#[derive(Debug)]
pub(crate) struct SledGrants {
    tree: sled::Tree,
}

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError(format!("grants: {e}"))
}

impl SledGrants {
    pub(crate) fn new(db: &sled::Db) -> Result<Self, StoreError> {
        Ok(SledGrants {
            tree: db.open_tree("grants").map_err(err)?,
        })
    }
}

impl GrantStore for SledGrants {
    fn put(&self, grant: &Grant) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(grant).map_err(err)?;
        self.tree.insert(grant.id.as_bytes(), bytes).map_err(err)?;
        self.tree.flush().map_err(err)?;
        Ok(())
    }

    fn remove(&self, id: &str) -> Result<Option<Grant>, StoreError> {
        let old = self.tree.remove(id.as_bytes()).map_err(err)?;
        self.tree.flush().map_err(err)?;
        old.map(|bytes| serde_json::from_slice(&bytes).map_err(err))
            .transpose()
    }

    fn all(&self) -> Result<Vec<Grant>, StoreError> {
        self.tree
            .iter()
            .map(|kv| {
                let (_, bytes) = kv.map_err(err)?;
                serde_json::from_slice(&bytes).map_err(err)
            })
            .collect()
    }
}
