//! The policy set as one immutable [`Snapshot`]: Cedar policies, schema, entities and compiled
//! tools, loaded and validated together and identified by a content-hash revision.
//!
//! Owns: loading (`load`), diagnostics (`diag`) and the generated Cedar schema (`schema_gen`).
//! A snapshot is never modified after it is built; the server swaps whole snapshots, so a
//! request always sees one complete, validated set.

pub mod attributes;
mod diag;
mod inputs;
mod links;
mod load;
pub mod schema_gen;
mod slice;
mod validate;

pub use diag::{Level, LoadError, Problem};
pub use inputs::Sources;
pub use inputs::{
    ENTITIES_FILE, Inputs, SourceError, SourceFile, fingerprint, read_inputs, read_source,
    read_stable,
};
pub use links::{GRANT_FILE, Link, LinkError};
pub use load::{Loaded, build, build_with, load, load_tools, schema_text};
pub use slice::Slices;
pub use validate::LoadCache;

use std::collections::BTreeMap;
use std::time::SystemTime;

use cedar_policy::{Authorizer, Entities, EntityUid, PolicySet, Schema};

use crate::tools::Tool;

/// The revision of [`Snapshot::nothing`] (a loaded set's starts `sha256:`).
const NOTHING_REVISION: &str = "none";

/// One complete, validated policy set. Requests load it once and use it to the end.
#[derive(Debug)]
pub struct Snapshot {
    /// `sha256:` + the first 16 hex digits of the hash over every input file's name and bytes.
    pub revision: String,
    /// When this snapshot was built.
    pub loaded_at: SystemTime,
    /// Every policy, each with a unique id (its `@id` annotation, or `file#N`).
    pub policies: PolicySet,
    /// The same policies sliced per action; decisions evaluate only their action's slice.
    pub slices: Slices,
    /// The Cedar schema the policies were validated against.
    pub schema: Schema,
    /// Roles, humans and agents from `entities.json`, plus one `Tool` entity per manifest.
    pub entities: Entities,
    /// Compiled tools by name.
    pub tools: std::sync::Arc<BTreeMap<String, Tool>>,
    /// Which file each policy came from (policy id → file), for reports.
    pub policy_files: BTreeMap<String, String>,
    /// Cedar's authorizer (stateless; kept here so nothing is built per request).
    pub authorizer: Authorizer,
    /// The deny list behind `context.paths.<arg>.denied` (the one execution applies).
    pub deny: std::sync::Arc<crate::globs::PathGuard>,
}

impl Snapshot {
    /// The policies that can apply to `action` (the whole set when no slice was built).
    pub fn policies_for(&self, action: &EntityUid) -> &PolicySet {
        self.slices.get(action).unwrap_or(&self.policies)
    }

    /// The set served when nothing ever loaded: no policies, no tools, no entities, so every
    /// call is denied (`no_policy_set`) and every operator action refused.
    pub fn nothing() -> Result<Self, LoadError> {
        let schema = Schema::from_schema_fragments([]).map_err(|e| LoadError {
            problems: vec![Problem::in_file(
                std::path::Path::new("(empty schema)"),
                e.to_string(),
                None,
            )],
        })?;
        Ok(Snapshot {
            revision: NOTHING_REVISION.to_owned(),
            loaded_at: SystemTime::now(),
            policies: PolicySet::new(),
            slices: Slices::default(),
            schema,
            entities: Entities::empty(),
            tools: std::sync::Arc::default(),
            policy_files: BTreeMap::new(),
            authorizer: Authorizer::new(),
            deny: std::sync::Arc::default(),
        })
    }

    /// Whether this is [`Snapshot::nothing`]: no policy set ever loaded.
    pub fn is_nothing(&self) -> bool {
        self.revision == NOTHING_REVISION
    }

    /// Number of policies.
    pub fn policy_count(&self) -> usize {
        self.policies.policies().count()
    }
}
