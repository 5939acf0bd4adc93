//! Where approvals live: the [`ApprovalStore`] trait and its sled implementation (tree
//! [`TREE`], id → JSON). It only reads: every write is an effect committed with its audit
//! record ([`super::Approval::effect`]).

use super::Approval;

/// A failure of the approval store: its sled tree, or the audit commit an approval change rides on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("approval store: {0}")]
pub struct ApprovalStoreError(pub String);

impl From<crate::audit::StoreError> for ApprovalStoreError {
    /// The data directory's failure (opening a tree, committing through the audit log),
    /// under this store's name, the audit store's message kept (`grant store: audit
    /// store: …`).
    fn from(e: crate::audit::StoreError) -> Self {
        ApprovalStoreError(e.to_string())
    }
}

/// The sled tree approvals are kept in.
pub(crate) const TREE: &str = "approvals";

/// Stored approvals, read.
pub trait ApprovalStore: Send + Sync {
    /// The approval with `id`.
    fn get(&self, id: &str) -> Result<Option<Approval>, ApprovalStoreError>;
    /// Every approval (read once, at start).
    fn all(&self) -> Result<Vec<Approval>, ApprovalStoreError>;
    /// Visits approvals newest first (ids are UUIDv7, so by id) until `visit` answers
    /// `false`: a listing reads only as far as it needs.
    fn newest(&self, visit: &mut dyn FnMut(Approval) -> bool) -> Result<(), ApprovalStoreError>;
}

/// The sled implementation.
pub(crate) struct SledApprovals {
    cell: std::sync::Arc<crate::audit::SledCell>,
}

fn err(e: impl std::fmt::Display) -> ApprovalStoreError {
    ApprovalStoreError(e.to_string())
}

impl SledApprovals {
    pub(crate) fn new(
        cell: std::sync::Arc<crate::audit::SledCell>,
    ) -> Result<Self, ApprovalStoreError> {
        cell.tree(TREE)?;
        Ok(SledApprovals { cell })
    }

    fn tree(&self) -> Result<sled::Tree, ApprovalStoreError> {
        Ok(self.cell.tree(TREE)?)
    }
}

impl ApprovalStore for SledApprovals {
    fn get(&self, id: &str) -> Result<Option<Approval>, ApprovalStoreError> {
        self.tree()?
            .get(id.as_bytes())
            .map_err(err)?
            .map(|v| serde_json::from_slice(&v).map_err(err))
            .transpose()
    }

    fn all(&self) -> Result<Vec<Approval>, ApprovalStoreError> {
        self.tree()?
            .iter()
            .values()
            .map(|v| {
                let v = v.map_err(err)?;
                serde_json::from_slice(&v).map_err(err)
            })
            .collect()
    }

    fn newest(&self, visit: &mut dyn FnMut(Approval) -> bool) -> Result<(), ApprovalStoreError> {
        for v in self.tree()?.iter().values().rev() {
            let a = serde_json::from_slice(&v.map_err(err)?).map_err(err)?;
            if !visit(a) {
                break;
            }
        }
        Ok(())
    }
}
