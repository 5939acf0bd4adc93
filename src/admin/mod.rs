//! The kill switch: while it is on, every tool call is denied. It is turned on and off through
//! `POST /v1/admin/kill-switch` (Cedar decides who may), stored so it survives a restart, and
//! can also be forced on by the config (`kill_switch = true`) or the environment
//! (`TOOLGATE_KILL_SWITCH=1`); a forced switch cannot be turned off through the API.
//!
//! The decision path reads one atomic flag. The [`Quarantine`] list lives here too: it is
//! stored the same way and changed through the same kind of Cedar-authorized route.
//!
//! Nothing here writes the store: a change is stored as an effect of the audit record that
//! attests it ([`kill_switch_effect`], [`quarantine_effect`], committed with
//! [`crate::audit::Audit::commit`]), and only then put in force here.

mod descriptors;
mod quarantine;

pub use descriptors::{ApprovedDescriptor, Descriptors, descriptor_effect};
pub use quarantine::{Quarantine, Quarantined};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::audit::Effect;

/// A failure of the admin store (the kill switch and quarantine): its sled tree, or the
/// audit commit an admin change rides on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("admin store: {0}")]
pub struct AdminStoreError(pub String);

impl From<crate::audit::StoreError> for AdminStoreError {
    /// The data directory's failure, under this store's name, the audit store's message kept.
    fn from(e: crate::audit::StoreError) -> Self {
        AdminStoreError(e.to_string())
    }
}

/// The switch as last set through the API.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KillSwitch {
    /// Whether calls are stopped.
    pub on: bool,
    /// Who set it (`Human::"alice"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When, unix ms (0: never set).
    pub at_ms: u64,
}

/// Where the switch and the quarantine list are kept (read; see the module doc for writes).
pub trait AdminStore: Send + Sync {
    /// The stored switch, if it was ever set.
    fn load_kill_switch(&self) -> Result<Option<KillSwitch>, AdminStoreError>;
    /// Every stored quarantine entry.
    fn load_quarantined(&self) -> Result<Vec<Quarantined>, AdminStoreError>;
    /// Every stored approval of a changed MCP descriptor.
    fn load_descriptors(&self) -> Result<Vec<ApprovedDescriptor>, AdminStoreError>;
}

/// The sled implementation (tree [`TREE`]).
pub(crate) struct SledAdmin {
    cell: std::sync::Arc<crate::audit::SledCell>,
}

/// The sled tree of the switch, the quarantine list and approved MCP descriptors.
const TREE: &str = "admin";
const KILL_SWITCH_KEY: &[u8] = b"kill_switch";
/// Quarantine entries are keyed `quarantine/<principal>`.
const QUARANTINE_PREFIX: &str = "quarantine/";

/// The effect that stores `switch`.
pub fn kill_switch_effect(switch: &KillSwitch) -> Result<Effect, AdminStoreError> {
    Ok(Effect::put_json(TREE, KILL_SWITCH_KEY, switch)?)
}

/// The effect that stores `principal`'s quarantine `entry`, or removes it (`None`).
pub fn quarantine_effect(
    principal: &str,
    entry: Option<&Quarantined>,
) -> Result<Effect, AdminStoreError> {
    let key = format!("{QUARANTINE_PREFIX}{principal}").into_bytes();
    match entry {
        Some(e) => Ok(Effect::put_json(TREE, key, e)?),
        None => Ok(Effect::remove(TREE, key)),
    }
}

fn store_err(e: impl std::fmt::Display) -> AdminStoreError {
    AdminStoreError(e.to_string())
}

impl SledAdmin {
    pub(crate) fn new(
        cell: std::sync::Arc<crate::audit::SledCell>,
    ) -> Result<Self, AdminStoreError> {
        cell.tree(TREE)?;
        Ok(SledAdmin { cell })
    }

    fn tree(&self) -> Result<sled::Tree, AdminStoreError> {
        Ok(self.cell.tree(TREE)?)
    }
}

impl AdminStore for SledAdmin {
    fn load_kill_switch(&self) -> Result<Option<KillSwitch>, AdminStoreError> {
        self.tree()?
            .get(KILL_SWITCH_KEY)
            .map_err(store_err)?
            .map(|v| {
                serde_json::from_slice(&v).map_err(|e| {
                    AdminStoreError(format!("the stored kill switch does not parse: {e}"))
                })
            })
            .transpose()
    }

    fn load_quarantined(&self) -> Result<Vec<Quarantined>, AdminStoreError> {
        self.tree()?
            .scan_prefix(QUARANTINE_PREFIX)
            .map(|kv| {
                let (_, v) = kv.map_err(store_err)?;
                serde_json::from_slice(&v).map_err(|e| {
                    AdminStoreError(format!("a stored quarantine entry does not parse: {e}"))
                })
            })
            .collect()
    }

    fn load_descriptors(&self) -> Result<Vec<ApprovedDescriptor>, AdminStoreError> {
        self.tree()?
            .scan_prefix(descriptors::DESCRIPTOR_PREFIX)
            .map(|kv| {
                let (_, v) = kv.map_err(store_err)?;
                serde_json::from_slice(&v).map_err(|e| {
                    AdminStoreError(format!("a stored descriptor approval does not parse: {e}"))
                })
            })
            .collect()
    }
}

/// Why a change was refused.
#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    /// Forced on outside the API.
    #[error("the kill switch is forced on by {0}; remove that setting and restart to turn it off")]
    Forced(String),
    /// The store failed; nothing changed.
    #[error(transparent)]
    Store(#[from] AdminStoreError),
}

/// The live switch.
pub struct Admin {
    forced: Option<String>,
    /// Held by a human's change from its check until it is in force.
    changing: Arc<tokio::sync::Mutex<()>>,
    on: AtomicBool,
    current: Mutex<KillSwitch>,
    quarantine: Quarantine,
    descriptors: Descriptors,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("kill_switch_on", &self.kill_switch_on())
            .finish_non_exhaustive()
    }
}

impl Admin {
    /// Reads the stored switch (if there is a store). `forced` names what forces it on.
    pub fn open(
        store: Option<Arc<dyn AdminStore>>,
        forced: Option<String>,
    ) -> Result<Admin, AdminStoreError> {
        let (current, quarantine, descriptors) = match &store {
            Some(s) => (
                s.load_kill_switch()?.unwrap_or_default(),
                Quarantine::open(s.clone())?,
                Descriptors::open(s)?,
            ),
            None => (
                KillSwitch::default(),
                Quarantine::unstored(),
                Descriptors::unstored(),
            ),
        };
        Ok(Admin {
            on: AtomicBool::new(current.on || forced.is_some()),
            changing: Arc::default(),
            forced,
            current: Mutex::new(current),
            quarantine,
            descriptors,
        })
    }

    /// A switch kept in memory only (tests, `toolgate authorize`), off.
    pub fn unstored() -> Admin {
        Admin {
            changing: Arc::default(),
            forced: None,
            on: AtomicBool::new(false),
            current: Mutex::new(KillSwitch::default()),
            quarantine: Quarantine::unstored(),
            descriptors: Descriptors::unstored(),
        }
    }

    /// The quarantine list.
    pub fn quarantine(&self) -> &Quarantine {
        &self.quarantine
    }

    /// Approved MCP descriptors.
    pub fn descriptors(&self) -> &Descriptors {
        &self.descriptors
    }

    /// Whether calls are stopped now (one atomic load).
    pub fn kill_switch_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// The switch as set through the API, and what forces it on, if anything.
    pub fn kill_switch(&self) -> (KillSwitch, Option<String>) {
        let current = self
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        (current, self.forced.clone())
    }

    /// What forces the switch on outside the API, if anything.
    pub fn forced_by(&self) -> Option<&str> {
        self.forced.as_deref()
    }

    /// Serializes human changes (kill switch, quarantine): held from the check through the
    /// commit until the change is in force, so changes take force in the order recorded.
    pub async fn changing(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.changing.clone().lock_owned().await
    }

    /// Puts the fleet's switch `next` in force here (a forced switch stays on).
    pub fn adopt_kill_switch(&self, next: KillSwitch) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if *current == next {
            return;
        }
        self.on
            .store(next.on || self.forced.is_some(), Ordering::Release);
        if next.on != current.on {
            tracing::warn!(
                on = next.on,
                by = next.by,
                "kill switch changed by the fleet"
            );
        }
        *current = next;
    }

    /// Puts `next` in force (stored already, with its record).
    pub fn set_kill_switch(&self, next: KillSwitch) -> Result<(), SwitchError> {
        if let (false, Some(by)) = (next.on, &self.forced) {
            return Err(SwitchError::Forced(by.clone()));
        }
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        self.on
            .store(next.on || self.forced.is_some(), Ordering::Release);
        *current = next;
        Ok(())
    }
}
