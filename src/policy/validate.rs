//! What a reload can reuse from the previous load, by content hash: parsed policy files, the
//! parsed schema, and which (schema, file) pairs validated. And validation itself, one file at a
//! time.
//!
//! Cedar validates each policy on its own, so validating file by file reports exactly what
//! validating the whole set would. Cedar's strict validator costs about half a millisecond per
//! policy with hundreds of actions in the schema; remembering which (schema, file) pairs passed
//! lets a reload re-validate only the files that changed. Each cache keeps only the entries of
//! the latest load, so memory stays bounded by one policy set.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use cedar_policy::{Policy, PolicySet, Schema, Template, ValidationMode, Validator};
use sha2::{Digest, Sha256};

use super::diag::{Level, Problem};

/// One parsed policy file, borrowing the text that was read.
pub(super) struct ParsedFile<'a> {
    pub path: &'a Path,
    pub text: &'a str,
    /// [`file_key`] of path and text.
    pub key: [u8; 32],
    /// Its policies, already renamed to their final ids.
    pub policies: Vec<Policy>,
    /// Its templates (linked by grants), renamed the same way.
    pub templates: Vec<Template>,
}

/// One file's policies, renamed to their final ids, each with the copy evaluated inside its
/// action's slice (see `slice`), and its templates.
#[derive(Debug, Default)]
pub(super) struct ParsedPolicies {
    pub policies: Vec<(Policy, Policy)>,
    pub templates: Vec<Template>,
    /// Ids of the `Role` entities its policies and templates name (`Role::"x"`), which
    /// makes a role in `entities.json` known.
    pub roles: std::collections::BTreeSet<String>,
}

/// What the previous load parsed and validated, by content hash.
#[derive(Debug, Default)]
pub struct LoadCache {
    /// (schema, file) hashes that validated without errors or warnings.
    passed: HashSet<[u8; 32]>,
    /// File hash → its parsed policies and templates.
    pub(super) parsed: HashMap<[u8; 32], Arc<ParsedPolicies>>,
    /// The last parsed schema and the hash of its text.
    pub(super) schema: Option<([u8; 32], Schema)>,
}

impl LoadCache {
    /// An empty cache (a cold load).
    pub fn new() -> Self {
        LoadCache::default()
    }

    /// Number of files whose validation is remembered.
    pub fn validated_files(&self) -> usize {
        self.passed.len()
    }
}

/// Hash of a file's path and contents.
pub(super) fn file_key(path: &std::path::Path, text: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(path.as_os_str().as_encoded_bytes());
    h.update([0]);
    h.update(text.as_bytes());
    h.finalize().into()
}

/// Said with every Cedar validator warning, which toolgate refuses like an error.
const WARNING_HELP: &str = "Cedar reports this as a warning, and toolgate refuses the set as `cedar validate --deny-warnings` does: a policy Cedar warns about usually never does what it says (check names behind `has` guards)";

/// Validates every file (strict mode), refusing Cedar's warnings like its errors, reusing
/// `cache` for files seen before under the same schema. Afterwards the cache holds exactly the files of this set that passed, so it never
/// grows beyond one policy set.
pub(super) fn validate_files(
    schema: &Schema,
    schema_key: [u8; 32],
    files: &[ParsedFile<'_>],
    cache: &mut LoadCache,
    problems: &mut Vec<Problem>,
) {
    let validator = Validator::new(schema.clone());
    let mut next = HashSet::with_capacity(files.len());
    for file in files {
        let key: [u8; 32] = {
            let mut h = Sha256::new();
            h.update(schema_key);
            h.update(file.key);
            h.finalize().into()
        };
        if cache.passed.remove(&key) {
            next.insert(key);
            continue;
        }
        let mut set = PolicySet::new();
        for p in &file.policies {
            // INVARIANT: ids are unique across the whole set, hence within a file.
            let _ = set.add(p.clone());
        }
        for t in &file.templates {
            let _ = set.add_template(t.clone());
        }
        let result = validator.validate(&set, ValidationMode::Strict);
        let mut found = Vec::new();
        for e in result.validation_errors() {
            found.extend(Problem::from_diagnostic(
                file.path,
                file.text,
                e,
                Level::Error,
            ));
        }
        // Warnings block the load too, as `cedar validate --deny-warnings` does in CI: an
        // impossible policy (a typo behind a `has` guard) is a deny rule that never fires.
        for w in result.validation_warnings() {
            found.extend(
                Problem::from_diagnostic(file.path, file.text, w, Level::Error)
                    .into_iter()
                    .map(|p| p.with_more_help(WARNING_HELP)),
            );
        }
        if found.is_empty() {
            next.insert(key);
        }
        problems.extend(found);
    }
    cache.passed = next;
}
