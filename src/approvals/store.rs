//! Where approvals live: the [`ApprovalStore`] trait and its sled implementation (tree
//! `approvals`, id → JSON). Every write is flushed before it returns, so an approval that was
//! acknowledged survives a crash.

use super::Approval;
use crate::audit::StoreError;

/// Durable storage of approvals with compare-and-swap updates.
pub trait ApprovalStore: Send + Sync {
    /// Stores a new approval (its id must be new).
    fn insert(&self, approval: &Approval) -> Result<(), StoreError>;
    /// The approval with `id`.
    fn get(&self, id: &str) -> Result<Option<Approval>, StoreError>;
    /// Every approval.
    fn all(&self) -> Result<Vec<Approval>, StoreError>;
    /// Replaces `current` with `next` if the stored value still equals `current`.
    fn swap(&self, current: &Approval, next: &Approval) -> Result<bool, StoreError>;
}

/// The sled implementation.
pub(crate) struct SledApprovals {
    tree: sled::Tree,
}

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError(format!("approvals: {e}"))
}

fn encode(a: &Approval) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(a).map_err(err)
}

impl SledApprovals {
    pub(crate) fn new(db: &sled::Db) -> Result<Self, StoreError> {
        Ok(SledApprovals {
            tree: db.open_tree("approvals").map_err(err)?,
        })
    }
}

impl ApprovalStore for SledApprovals {
    fn insert(&self, approval: &Approval) -> Result<(), StoreError> {
        let new = encode(approval)?;
        match self
            .tree
            .compare_and_swap(approval.id.as_bytes(), None as Option<&[u8]>, Some(new))
            .map_err(err)?
        {
            Ok(()) => {}
            Err(_) => return Err(err(format!("approval id {} exists", approval.id))),
        }
        self.tree.flush().map_err(err)?;
        Ok(())
    }

    fn get(&self, id: &str) -> Result<Option<Approval>, StoreError> {
        self.tree
            .get(id.as_bytes())
            .map_err(err)?
            .map(|v| serde_json::from_slice(&v).map_err(err))
            .transpose()
    }

    fn all(&self) -> Result<Vec<Approval>, StoreError> {
        self.tree
            .iter()
            .values()
            .map(|v| {
                let v = v.map_err(err)?;
                serde_json::from_slice(&v).map_err(err)
            })
            .collect()
    }

    fn swap(&self, current: &Approval, next: &Approval) -> Result<bool, StoreError> {
        let old = encode(current)?;
        let new = encode(next)?;
        let swapped = self
            .tree
            .compare_and_swap(current.id.as_bytes(), Some(old), Some(new))
            .map_err(err)?
            .is_ok();
        if swapped {
            self.tree.flush().map_err(err)?;
        }
        Ok(swapped)
    }
}
