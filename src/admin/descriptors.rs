//! Approved MCP descriptors: when an upstream changes a tool's descriptor (its hash differs
//! from the manifest's `mcp.pin`), the tool is hidden and its calls denied until a human the
//! policies allow (`Action::"approve_descriptor"`) approves that exact new hash. The approval
//! is stored with its audit record, then put in force here; it holds until the manifest is
//! regenerated (`toolgate mcp sync`) or the upstream changes the descriptor again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use super::{AdminStore, AdminStoreError, TREE};
use crate::audit::Effect;

/// Approved descriptors are keyed `descriptor/<tool>`.
pub(super) const DESCRIPTOR_PREFIX: &str = "descriptor/";

/// A human's approval of one tool's new descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovedDescriptor {
    /// The tool (namespaced: `everything.echo`).
    pub tool: String,
    /// The manifest's pin it replaces.
    pub was: String,
    /// The approved hash (`sha256:<hex>`).
    pub pin: String,
    /// Who approved it (`Human::"alice"`).
    pub by: String,
    /// Why.
    pub reason: String,
    /// When, unix ms.
    pub at_ms: u64,
}

/// The effect that stores `entry` (or removes the tool's approval).
pub fn descriptor_effect(
    tool: &str,
    entry: Option<&ApprovedDescriptor>,
) -> Result<Effect, AdminStoreError> {
    let key = format!("{DESCRIPTOR_PREFIX}{tool}").into_bytes();
    match entry {
        Some(e) => Ok(Effect::put_json(TREE, key, e)?),
        None => Ok(Effect::remove(TREE, key)),
    }
}

type Map = HashMap<String, Arc<ApprovedDescriptor>>;

/// The approved descriptors in force.
pub struct Descriptors {
    live: ArcSwap<Map>,
    write: Mutex<()>,
}

impl std::fmt::Debug for Descriptors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Descriptors")
            .field("approved", &self.live.load().len())
            .finish_non_exhaustive()
    }
}

impl Descriptors {
    pub(super) fn open(store: &Arc<dyn AdminStore>) -> Result<Descriptors, AdminStoreError> {
        let map: Map = store
            .load_descriptors()?
            .into_iter()
            .map(|d| (d.tool.clone(), Arc::new(d)))
            .collect();
        Ok(Descriptors {
            live: ArcSwap::from_pointee(map),
            write: Mutex::new(()),
        })
    }

    pub(super) fn unstored() -> Descriptors {
        Descriptors {
            live: ArcSwap::from_pointee(Map::new()),
            write: Mutex::new(()),
        }
    }

    /// Whether `pin` is approved for `tool` in place of the manifest's `was`.
    pub fn approved(&self, tool: &str, was: &str, pin: &str) -> bool {
        self.live
            .load()
            .get(tool)
            .is_some_and(|d| d.pin == pin && d.was == was)
    }

    /// Every approval in force.
    pub fn list(&self) -> Vec<ApprovedDescriptor> {
        let mut v: Vec<_> = self.live.load().values().map(|d| (**d).clone()).collect();
        v.sort_by(|a, b| a.tool.cmp(&b.tool));
        v
    }

    /// Puts a stored approval in force.
    pub fn put(&self, entry: ApprovedDescriptor) {
        let _w = self.write.lock().unwrap_or_else(PoisonError::into_inner);
        let mut next = (**self.live.load()).clone();
        next.insert(entry.tool.clone(), Arc::new(entry));
        self.live.store(Arc::new(next));
    }
}
