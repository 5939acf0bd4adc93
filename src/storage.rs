//! The data directory: one sled database holding the audit log, the approvals, the kill
//! switch, the last good policy set and the grants, behind the audit write-ahead ledger
//! (`ledger/wal`, applied again at open where sled lacks it); opened once and handed out only
//! as the store traits (no sled type leaves this module).
//!
//! Every change to approvals, grants, the kill switch, quarantine and the remembered policy
//! set is written through the audit writer ([`crate::audit::Audit::commit`]) as an effect of
//! the record that attests it; the stores here read.
//!
//! sled keeps a page cache of its own, 1 GiB unless told otherwise; every directory opened
//! here gets a configured one ([`DEFAULT_CACHE_BYTES`], `[audit] cache_mb`), so the sidecar's
//! memory has a bound someone chose.

use std::path::Path;
use std::sync::Arc;

use crate::admin::{AdminStore, SledAdmin};
use crate::approvals::{ApprovalStore, SledApprovals};
use crate::audit::{AuditStore, SledAudit, SledCell, StoreError, sled_config};
use crate::grants::{GrantStore, SledGrants};
use crate::reload::{GoodSets, SledGoodSets};

/// The page cache a data directory gets unless `[audit] cache_mb` says otherwise: 64 MiB.
/// sled's own default is 1 GiB, which the cache fills under sustained load (the outside run
/// saw RSS climb past 600 MB). The working set is the newest audit blocks and index keys,
/// the approvals and the grants; older blocks are read back only by queries and `verify`.
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// Free space the store leaves on the data directory's disk unless `[audit] reserve_mb` says
/// otherwise: 32 MiB. Below it nothing is written (every decision is denied, 503) until space
/// returns; sled never meets a full disk, which it cannot recover from while open.
pub const DEFAULT_RESERVE_BYTES: u64 = 32 * 1024 * 1024;

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
    /// The page cache sled was opened with, in bytes (read back from sled's configuration).
    cache_bytes: u64,
}

impl Stores {
    /// Opens (creating if needed) the data directory `dir` with the default page cache. Only
    /// one process may hold it.
    pub fn open(dir: &Path) -> Result<Stores, StoreError> {
        Self::open_with_cache(dir, DEFAULT_CACHE_BYTES)
    }

    /// Opens (creating if needed) the data directory `dir` with a page cache of
    /// `cache_bytes`. Only one process may hold it.
    pub fn open_with_cache(dir: &Path, cache_bytes: u64) -> Result<Stores, StoreError> {
        Self::open_configured(dir, cache_bytes, DEFAULT_RESERVE_BYTES)
    }

    /// Opens (creating if needed) the data directory `dir` with a page cache of
    /// `cache_bytes`, keeping `reserve_bytes` free on its disk. Only one process may hold it.
    pub fn open_configured(
        dir: &Path,
        cache_bytes: u64,
        reserve_bytes: u64,
    ) -> Result<Stores, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError(format!(
                "cannot create data directory {}: {e}",
                dir.display()
            ))
        })?;
        let config = sled_config(dir, cache_bytes);
        let db = config.open().map_err(|e| {
            StoreError(format!(
                "cannot open data directory {} ({e}); is another toolgate using it?",
                dir.display()
            ))
        })?;
        let cell = SledCell::new(db, Some((dir.to_path_buf(), config.cache_capacity)));
        let audit = SledAudit::with_ledger(cell.clone(), dir, reserve_bytes)?;
        Self::from_parts(&cell, audit, config.cache_capacity)
    }

    /// Opens an existing data directory (for offline tools: a missing one is an error, not a
    /// new empty log).
    pub fn open_existing(dir: &Path, cache_bytes: u64) -> Result<Stores, StoreError> {
        if !dir.join("conf").is_file() {
            return Err(StoreError(format!(
                "{} is not a toolgate data directory (no sled database there); pass --data-dir or --config",
                dir.display()
            )));
        }
        Self::open_with_cache(dir, cache_bytes)
    }

    /// Stores in a temporary directory removed on drop (tests, `toolgate authorize`).
    pub fn temporary() -> Result<Stores, StoreError> {
        let config = sled::Config::new()
            .cache_capacity(DEFAULT_CACHE_BYTES)
            .temporary(true);
        let db = config
            .open()
            .map_err(|e| StoreError(format!("cannot open a temporary store: {e}")))?;
        let cell = SledCell::new(db, None);
        let audit = SledAudit::new(cell.clone())?;
        Self::from_parts(&cell, audit, config.cache_capacity)
    }

    /// The page cache the directory was opened with, in bytes.
    pub fn cache_bytes(&self) -> u64 {
        self.cache_bytes
    }

    fn from_parts(
        cell: &Arc<SledCell>,
        audit: SledAudit,
        cache_bytes: u64,
    ) -> Result<Stores, StoreError> {
        Ok(Stores {
            cache_bytes,
            approvals: Arc::new(SledApprovals::new(cell.clone())?),
            admin: Arc::new(SledAdmin::new(cell.clone())?),
            policies: Arc::new(SledGoodSets::new(cell.clone())?),
            grants: Arc::new(SledGrants::new(cell.clone())?),
            audit: Arc::new(audit),
        })
    }
}
