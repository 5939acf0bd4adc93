//! The last good policy set, remembered in the data directory: every input file's bytes as
//! they were when the set last loaded and went live. After a restart with a broken policy
//! directory the sidecar rebuilds and serves this set (and says it is stale).
//!
//! Owns: the stored form ([`StoredSet`]) and its store trait; the sled implementation lives
//! here too, behind the trait (no sled type in a public signature).

use std::fmt::Debug;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::policy::{Inputs, SourceFile};

/// A failure of the remembered policy set: its sled tree, or the audit commit that remembers a set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("remembered policy set: {0}")]
pub struct RememberError(pub String);

impl From<crate::audit::StoreError> for RememberError {
    /// The data directory's failure (opening a tree, committing through the audit log),
    /// under this store's name, the audit store's message kept (`grant store: audit
    /// store: …`).
    fn from(e: crate::audit::StoreError) -> Self {
        RememberError(e.to_string())
    }
}

/// Where remembered sets are kept.
pub trait GoodSets: Send + Sync + Debug {
    /// Replaces the remembered set, durably.
    fn save(&self, set: &StoredSet) -> Result<(), RememberError>;
    /// The remembered set, if any.
    fn load(&self) -> Result<Option<StoredSet>, RememberError>;
}

/// Which input a stored file was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// `schemas/tools/*.json`.
    Tool,
    /// The Cedar schema.
    Schema,
    /// A `.cedar` file.
    Policy,
    /// `entities.json`.
    Entities,
    /// `attributes.json`.
    Attributes,
}

/// One stored input file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredFile {
    /// Which input.
    pub role: Role,
    /// Its path when it was read.
    pub path: PathBuf,
    /// Its contents.
    pub text: String,
}

/// A whole remembered input set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredSet {
    /// The revision the files hashed to.
    pub revision: String,
    /// When it was saved (Unix ms).
    pub saved_at_ms: u64,
    /// Every input file.
    pub files: Vec<StoredFile>,
}

impl StoredSet {
    /// The stored form of `inputs`.
    pub fn from_inputs(inputs: &Inputs, now_ms: u64) -> Self {
        let one = |role, f: &SourceFile| StoredFile {
            role,
            path: f.path.clone(),
            text: f.text.clone(),
        };
        let mut files = Vec::new();
        files.extend(inputs.manifests.iter().map(|f| one(Role::Tool, f)));
        files.extend(inputs.schema.iter().map(|f| one(Role::Schema, f)));
        files.extend(inputs.policies.iter().map(|f| one(Role::Policy, f)));
        files.extend(inputs.entities.iter().map(|f| one(Role::Entities, f)));
        files.extend(inputs.attributes.iter().map(|f| one(Role::Attributes, f)));
        StoredSet {
            revision: inputs.revision.clone(),
            saved_at_ms: now_ms,
            files,
        }
    }

    /// Back to inputs, checked against today's allowlist of executables.
    pub fn into_inputs(
        self,
        programs: crate::tools::Programs,
        deny: std::sync::Arc<crate::globs::PathGuard>,
    ) -> Inputs {
        let mut inputs = Inputs {
            manifests: Vec::new(),
            schema: None,
            attributes: None,
            policies: Vec::new(),
            entities: None,
            problems: Vec::new(),
            revision: self.revision,
            programs,
            deny,
        };
        for f in self.files {
            let file = SourceFile {
                path: f.path,
                text: f.text,
            };
            match f.role {
                Role::Tool => inputs.manifests.push(file),
                Role::Schema => inputs.schema = Some(file),
                Role::Policy => inputs.policies.push(file),
                Role::Entities => inputs.entities = Some(file),
                Role::Attributes => inputs.attributes = Some(file),
            }
        }
        inputs
    }
}

const KEY: &[u8] = b"last_good";
/// The sled tree of the remembered set.
const TREE: &str = "policies";

/// The effect that remembers `set` (committed with the record of an approved held change).
pub fn remember_effect(set: &StoredSet) -> Result<crate::audit::Effect, RememberError> {
    Ok(crate::audit::Effect::put_json(TREE, KEY, set)?)
}

/// The sled implementation: one key in the `policies` tree.
#[derive(Debug)]
pub(crate) struct SledGoodSets {
    cell: std::sync::Arc<crate::audit::SledCell>,
}

fn err(e: impl std::fmt::Display) -> RememberError {
    RememberError(e.to_string())
}

impl SledGoodSets {
    pub(crate) fn new(cell: std::sync::Arc<crate::audit::SledCell>) -> Result<Self, RememberError> {
        cell.tree(TREE)?;
        Ok(SledGoodSets { cell })
    }

    fn tree(&self) -> Result<sled::Tree, RememberError> {
        Ok(self.cell.tree(TREE)?)
    }
}

impl GoodSets for SledGoodSets {
    fn save(&self, set: &StoredSet) -> Result<(), RememberError> {
        let bytes = serde_json::to_vec(set).map_err(err)?;
        self.tree()?.insert(KEY, bytes).map_err(err)?;
        self.tree()?.flush().map_err(err)?;
        Ok(())
    }

    fn load(&self) -> Result<Option<StoredSet>, RememberError> {
        match self.tree()?.get(KEY).map_err(err)? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(err),
        }
    }
}
