//! The data directory: one sled database holding the audit log, the approvals, the kill
//! switch, the last good policy set and the grants, opened once and handed out only as the
//! store traits (no sled type leaves this module).

use std::path::Path;
use std::sync::Arc;

use crate::admin::{AdminStore, SledAdmin};
use crate::approvals::{ApprovalStore, SledApprovals};
use crate::audit::{AuditStore, SledAudit, StoreError};
use crate::grants::{GrantStore, SledGrants};
use crate::policy::{GoodSets, SledGoodSets};

/// The stores of one data directory.
pub struct Stores {
    /// The audit log.
    pub audit: Arc<dyn AuditStore>,
    /// The approvals.
    pub approvals: Arc<dyn ApprovalStore>,
    /// Administrative state (the kill switch).
    pub admin: Arc<dyn AdminStore>,
    /// The last good policy set.
    pub policies: Arc<dyn GoodSets>,
    /// Grants (template links with an expiry).
    pub grants: Arc<dyn GrantStore>,
}

impl Stores {
    /// Opens (creating if needed) the data directory `dir`. Only one process may hold it.
    pub fn open(dir: &Path) -> Result<Stores, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError(format!(
                "cannot create data directory {}: {e}",
                dir.display()
            ))
        })?;
        let db = sled::Config::new().path(dir).open().map_err(|e| {
            StoreError(format!(
                "cannot open data directory {} ({e}); is another toolgate using it?",
                dir.display()
            ))
        })?;
        Self::from_db(db)
    }

    /// Opens an existing data directory (for offline tools: a missing one is an error, not a
    /// new empty log).
    pub fn open_existing(dir: &Path) -> Result<Stores, StoreError> {
        if !dir.join("conf").is_file() {
            return Err(StoreError(format!(
                "{} is not a toolgate data directory (no sled database there); pass --data-dir or --config",
                dir.display()
            )));
        }
        Self::open(dir)
    }

    /// Stores in a temporary directory removed on drop (tests, `toolgate authorize`).
    pub fn temporary() -> Result<Stores, StoreError> {
        let db = sled::Config::new()
            .temporary(true)
            .open()
            .map_err(|e| StoreError(format!("cannot open a temporary store: {e}")))?;
        Self::from_db(db)
    }

    fn from_db(db: sled::Db) -> Result<Stores, StoreError> {
        Ok(Stores {
            approvals: Arc::new(SledApprovals::new(&db)?),
            admin: Arc::new(SledAdmin::new(&db)?),
            policies: Arc::new(SledGoodSets::new(&db)?),
            grants: Arc::new(SledGrants::new(&db)?),
            audit: Arc::new(SledAudit::new(db)?),
        })
    }
}
