//! Validation of policies against the Cedar schema, one file at a time, remembered by content.
//!
//! Cedar validates each policy on its own, so validating file by file reports exactly what
//! validating the whole set would. Cedar's strict validator costs about half a millisecond per
//! policy with hundreds of actions in the schema; remembering which (schema, file) pairs passed
//! lets a reload re-validate only the files that changed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use cedar_policy::{Policy, PolicySet, Schema, ValidationMode, Validator};
use sha2::{Digest, Sha256};

use super::diag::{Level, Problem};

/// One parsed policy file.
pub(super) struct ParsedFile {
    pub path: PathBuf,
    pub text: Arc<str>,
    /// Its policies, already renamed to their final ids.
    pub policies: Vec<Policy>,
}

/// (schema, file) content hashes that validated without errors, with their warnings.
#[derive(Debug, Default)]
pub struct ValidationCache {
    passed: HashMap<[u8; 32], Vec<Problem>>,
}

impl ValidationCache {
    /// An empty cache (a cold load).
    pub fn new() -> Self {
        ValidationCache::default()
    }

    /// Number of remembered files.
    pub fn len(&self) -> usize {
        self.passed.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.passed.is_empty()
    }
}

/// Validates every file (strict mode), reusing `cache` for files seen before under the same
/// schema. Afterwards the cache holds exactly the files of this set that passed, so it never
/// grows beyond one policy set.
pub(super) fn validate_files(
    schema: &Schema,
    schema_text: &str,
    files: &[ParsedFile],
    cache: &mut ValidationCache,
    problems: &mut Vec<Problem>,
) {
    let schema_hash = Sha256::digest(schema_text.as_bytes());
    let validator = Validator::new(schema.clone());
    let mut next = HashMap::with_capacity(files.len());
    for file in files {
        let key: [u8; 32] = {
            let mut h = Sha256::new();
            h.update(schema_hash);
            h.update(file.path.as_os_str().as_encoded_bytes());
            h.update([0]);
            h.update(file.text.as_bytes());
            h.finalize().into()
        };
        if let Some(warnings) = cache.passed.remove(&key) {
            problems.extend(warnings.iter().cloned());
            next.insert(key, warnings);
            continue;
        }
        let mut set = PolicySet::new();
        for p in &file.policies {
            // INVARIANT: ids are unique across the whole set, hence within a file.
            let _ = set.add(p.clone());
        }
        let result = validator.validate(&set, ValidationMode::Strict);
        let mut found = Vec::new();
        for e in result.validation_errors() {
            found.extend(Problem::from_diagnostic(
                &file.path,
                &file.text,
                e,
                Level::Error,
            ));
        }
        for w in result.validation_warnings() {
            found.extend(Problem::from_diagnostic(
                &file.path,
                &file.text,
                w,
                Level::Warning,
            ));
        }
        if found.iter().all(|p| p.level == Level::Warning) {
            next.insert(key, found.clone());
        }
        problems.extend(found);
    }
    cache.passed = next;
}
