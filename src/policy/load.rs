//! Reads `policies/` and `schemas/` and builds a [`Snapshot`], reporting every problem at once.
//! `toolgate validate`, `toolgate serve` and every reload use this one loader.
//!
//! Layout read: `schemas/tools/*.json` (manifests), `schemas/toolgate.cedarschema` (must equal
//! what `toolgate schema` generates), `policies/*.cedar`, `policies/entities.json`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use cedar_policy::{
    Authorizer, Entities, Entity, PolicyId, PolicySet, RestrictedExpression, Schema,
    ValidationMode, Validator,
};
use sha2::{Digest, Sha256};

use super::Snapshot;
use super::diag::{Level, LoadError, Problem};
use super::schema_gen::{self, SCHEMA_FILE};
use crate::tools::{Tool, compile_manifest};

/// Where the loader reads from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sources {
    /// Directory of `*.cedar` files and `entities.json`.
    pub policies_dir: PathBuf,
    /// Directory of the Cedar schema and `tools/*.json` manifests.
    pub schemas_dir: PathBuf,
}

/// A successful load: the snapshot plus non-blocking warnings.
#[derive(Debug)]
pub struct Loaded {
    /// The validated policy set.
    pub snapshot: Snapshot,
    /// Validator warnings and similar; the set loaded anyway.
    pub warnings: Vec<Problem>,
}

/// File name of the entities file inside the policies directory.
pub const ENTITIES_FILE: &str = "entities.json";

/// Loads and validates everything; on any error returns all problems found.
pub fn load(sources: &Sources) -> Result<Loaded, LoadError> {
    let mut problems = Vec::new();
    let mut hasher = Sha256::new();

    let tools = load_manifests(&sources.schemas_dir, &mut hasher, &mut problems);
    let schema = load_schema(&sources.schemas_dir, &tools, &mut hasher, &mut problems);
    let (policies, policy_files) = load_policies(&sources.policies_dir, &mut hasher, &mut problems);
    if let Some(schema) = &schema {
        validate_policies(schema, &policies, &policy_files, &mut problems);
    }
    let entities = schema.as_ref().and_then(|schema| {
        load_entities(
            &sources.policies_dir,
            schema,
            &tools,
            &mut hasher,
            &mut problems,
        )
    });

    let blocked = problems.iter().any(|p| p.level == Level::Error);
    match (schema, entities) {
        (Some(schema), Some(entities)) if !blocked => {
            let digest = hex::encode(hasher.finalize());
            let revision = format!("sha256:{}", digest.get(..16).unwrap_or(&digest));
            Ok(Loaded {
                snapshot: Snapshot {
                    revision,
                    loaded_at: SystemTime::now(),
                    policies: policies.set,
                    schema,
                    entities,
                    tools,
                    policy_files: policy_files
                        .into_iter()
                        .map(|(id, src)| (id, src.file.display().to_string()))
                        .collect(),
                    authorizer: Authorizer::new(),
                },
                warnings: problems,
            })
        }
        _ => Err(LoadError { problems }),
    }
}

/// Compiles only the tool manifests (what `toolgate schema` needs: the policies may not match
/// the old schema yet).
pub fn load_tools(schemas_dir: &Path) -> Result<BTreeMap<String, Tool>, LoadError> {
    let mut problems = Vec::new();
    let tools = load_manifests(schemas_dir, &mut Sha256::new(), &mut problems);
    if problems.iter().any(|p| p.level == Level::Error) {
        Err(LoadError { problems })
    } else {
        Ok(tools)
    }
}

/// Files in `dir` with extension `ext`, sorted by name.
fn list(dir: &Path, ext: &str, problems: &mut Vec<Problem>) -> Vec<PathBuf> {
    match fs::read_dir(dir) {
        Ok(entries) => {
            let mut files: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == ext) && p.is_file())
                .collect();
            files.sort();
            files
        }
        Err(e) => {
            problems.push(Problem::in_file(
                dir,
                format!("cannot read directory: {e}"),
                Some("check the path in the config and that the directory exists".to_owned()),
            ));
            Vec::new()
        }
    }
}

fn read(path: &Path, hasher: &mut Sha256, problems: &mut Vec<Problem>) -> Option<String> {
    match fs::read_to_string(path) {
        Ok(text) => {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            hasher.update((name.len() as u64).to_le_bytes());
            hasher.update(name.as_bytes());
            hasher.update((text.len() as u64).to_le_bytes());
            hasher.update(text.as_bytes());
            Some(text)
        }
        Err(e) => {
            problems.push(Problem::in_file(
                path,
                format!("cannot read file: {e}"),
                None,
            ));
            None
        }
    }
}

fn load_manifests(
    dir: &Path,
    hasher: &mut Sha256,
    problems: &mut Vec<Problem>,
) -> BTreeMap<String, Tool> {
    let mut tools = BTreeMap::new();
    for path in list(&dir.join("tools"), "json", problems) {
        let Some(text) = read(&path, hasher, problems) else {
            continue;
        };
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        match compile_manifest(&text, &stem) {
            Ok(tool) => {
                tools.insert(tool.name.clone(), tool);
            }
            Err(e) => problems.push(match (e.line, e.column) {
                (Some(l), Some(c)) => Problem::at_line(&path, &text, l, c, e.message, e.help),
                _ => Problem::in_file(&path, e.message, e.help),
            }),
        }
    }
    tools
}

fn load_schema(
    dir: &Path,
    tools: &BTreeMap<String, Tool>,
    hasher: &mut Sha256,
    problems: &mut Vec<Problem>,
) -> Option<Schema> {
    let path = dir.join(SCHEMA_FILE);
    let text = read(&path, hasher, problems)?;
    let schema = match Schema::from_cedarschema_str(&text) {
        Ok((schema, _warnings)) => schema,
        Err(e) => {
            problems.extend(Problem::from_diagnostic(&path, &text, &e, Level::Error));
            return None;
        }
    };
    if text != schema_gen::generate(tools.values()) {
        problems.push(Problem::in_file(
            &path,
            "the Cedar schema does not match the tool manifests",
            Some(
                "run `toolgate schema` to regenerate it, then review and commit the result"
                    .to_owned(),
            ),
        ));
    }
    Some(schema)
}

/// Where a policy came from.
struct PolicySource {
    file: PathBuf,
    text: std::sync::Arc<str>,
}

struct Policies {
    set: PolicySet,
}

fn load_policies(
    dir: &Path,
    hasher: &mut Sha256,
    problems: &mut Vec<Problem>,
) -> (Policies, HashMap<String, PolicySource>) {
    let mut set = PolicySet::new();
    let mut sources: HashMap<String, PolicySource> = HashMap::new();
    let files = list(dir, "cedar", problems);
    if files.is_empty() && dir.is_dir() {
        problems.push(Problem::in_file(
            dir,
            "no `.cedar` files: every call would be denied",
            Some("add policies, or point `policies_dir` at the right directory".to_owned()),
        ));
    }
    for path in files {
        let Some(text) = read(&path, hasher, problems) else {
            continue;
        };
        if text.trim().is_empty() {
            problems.push(Problem::in_file(
                &path,
                "the file is empty",
                Some(
                    "an empty policy file is usually a half-written one; delete it or add policies"
                        .to_owned(),
                ),
            ));
            continue;
        }
        let parsed: PolicySet = match text.parse() {
            Ok(p) => p,
            Err(e) => {
                problems.extend(Problem::from_diagnostic(&path, &text, &e, Level::Error));
                continue;
            }
        };
        if parsed.templates().next().is_some() {
            problems.push(Problem::in_file(
                &path,
                "policy templates are not supported",
                Some("write concrete policies; toolgate links no templates".to_owned()),
            ));
        }
        let shared: std::sync::Arc<str> = text.as_str().into();
        for policy in parsed.policies() {
            // Cedar numbers unnamed policies `policy0`, `policy1`, … in source order.
            let id = policy.annotation("id").map_or_else(
                || {
                    format!(
                        "{}#{}",
                        file_name(&path),
                        policy.id().to_string().trim_start_matches("policy")
                    )
                },
                str::to_owned,
            );
            if let Some(prev) = sources.get(&id) {
                let message = format!(
                    "duplicate policy id `{id}` (also in {})",
                    prev.file.display()
                );
                let help =
                    Some("every `@id(\"...\")` must be unique across all policy files".to_owned());
                problems.push(match line_of(&text, &format!("@id(\"{id}\")")) {
                    Some(line) => Problem::at_line(&path, &text, line, 1, message, help),
                    None => Problem::in_file(&path, message, help),
                });
                continue;
            }
            if let Err(e) = set.add(policy.new_id(PolicyId::new(&id))) {
                problems.push(Problem::in_file(&path, e.to_string(), None));
                continue;
            }
            sources.insert(
                id,
                PolicySource {
                    file: path.clone(),
                    text: shared.clone(),
                },
            );
        }
    }
    (Policies { set }, sources)
}

fn validate_policies(
    schema: &Schema,
    policies: &Policies,
    sources: &HashMap<String, PolicySource>,
    problems: &mut Vec<Problem>,
) {
    let result = Validator::new(schema.clone()).validate(&policies.set, ValidationMode::Strict);
    let located = |id: &PolicyId| sources.get(id.to_string().as_str());
    for e in result.validation_errors() {
        if let Some(src) = located(e.policy_id()) {
            problems.extend(Problem::from_diagnostic(
                &src.file,
                &src.text,
                e,
                Level::Error,
            ));
        }
    }
    for w in result.validation_warnings() {
        if let Some(src) = located(w.policy_id()) {
            problems.extend(Problem::from_diagnostic(
                &src.file,
                &src.text,
                w,
                Level::Warning,
            ));
        }
    }
}

fn load_entities(
    dir: &Path,
    schema: &Schema,
    tools: &BTreeMap<String, Tool>,
    hasher: &mut Sha256,
    problems: &mut Vec<Problem>,
) -> Option<Entities> {
    let path = dir.join(ENTITIES_FILE);
    let text = read(&path, hasher, problems)?;
    let declared = match Entities::from_json_str(&text, Some(schema)) {
        Ok(e) => e,
        Err(e) => {
            problems.extend(Problem::from_diagnostic(&path, &text, &e, Level::Error));
            return None;
        }
    };
    let tool_type = "Tool";
    let mut seen_tools = HashSet::new();
    for entity in declared.iter() {
        if entity.uid().type_name().to_string() == tool_type {
            seen_tools.insert(entity.uid().to_string());
        }
    }
    if !seen_tools.is_empty() {
        problems.push(Problem::in_file(
            &path,
            format!(
                "`Tool` entities are generated from the manifests: remove {}",
                seen_tools.into_iter().collect::<Vec<_>>().join(", ")
            ),
            None,
        ));
        return None;
    }
    let tool_entities = tools
        .values()
        .map(tool_entity)
        .collect::<Result<Vec<_>, _>>();
    match tool_entities.map(|t| declared.add_entities(t, Some(schema)).map_err(Box::new)) {
        Ok(Ok(all)) => Some(all),
        Ok(Err(e)) => {
            problems.push(Problem::in_file(&path, e.to_string(), None));
            None
        }
        Err(e) => {
            problems.push(Problem::in_file(&path, e, None));
            None
        }
    }
}

fn tool_entity(tool: &Tool) -> Result<Entity, String> {
    Entity::new(
        tool.resource_uid.clone(),
        HashMap::from([
            (
                "risk".to_owned(),
                RestrictedExpression::new_string(tool.risk.as_str().to_owned()),
            ),
            (
                "classification".to_owned(),
                RestrictedExpression::new_string(tool.classification.as_str().to_owned()),
            ),
        ]),
        HashSet::new(),
    )
    .map_err(|e| format!("tool `{}`: {e}", tool.name))
}

/// 1-based line of the last occurrence of `needle` (a duplicate is the later one).
fn line_of(text: &str, needle: &str) -> Option<usize> {
    text.rfind(needle)
        .map(|at| text.get(..at).map_or(0, |b| b.matches('\n').count()) + 1)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
