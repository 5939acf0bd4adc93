//! The build phase of a load: parses and validates [`Inputs`] into a [`Snapshot`], reporting
//! every problem at once. `toolgate validate`, `toolgate serve` and every reload use it.
//!
//! Layout read: `schemas/tools/*.json` (manifests), `schemas/toolgate.cedarschema` (must equal
//! what `toolgate schema` generates), `policies/*.cedar`, `policies/entities.json`.
//! Refused besides Cedar's errors: Cedar's validator warnings (as `cedar validate
//! --deny-warnings`), and a role in `entities.json` that no policy or template names.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use cedar_policy::{
    Authorizer, Entities, Entity, Policy, PolicyId, PolicySet, RestrictedExpression, Schema,
};

use super::Snapshot;
use super::attributes::Attributes;
use super::diag::{Level, LoadError, Problem};
use super::inputs::{Inputs, SourceFile, Sources, read_manifests, read_stable};
use super::links::template_scope_problem;
use super::schema_gen;
use super::slice::{Slices, without_action_scope};
use super::validate::{LoadCache, ParsedFile, ParsedPolicies, file_key, validate_files};
use crate::tools::{Tool, compile_manifest};

/// A successful load: the snapshot plus non-blocking warnings.
#[derive(Debug)]
pub struct Loaded {
    /// The validated policy set.
    pub snapshot: Snapshot,
    /// Manifest warnings (a program not installed, an argument policies cannot read); the set
    /// loaded anyway. Cedar's validator warnings are errors, never here.
    pub warnings: Vec<Problem>,
}

/// Reads (until two reads agree) and builds.
pub fn load(sources: &Sources) -> Result<Loaded, LoadError> {
    build(read_stable(sources))
}

/// Compiles only the tool manifests (what `toolgate schema` needs: the policies may not match
/// the old schema yet).
pub fn load_tools(schemas_dir: &Path) -> Result<BTreeMap<String, Tool>, LoadError> {
    let (files, mut problems) = read_manifests(schemas_dir);
    let tools = compile_manifests(&files, None, &mut problems);
    if problems.iter().any(|p| p.level == Level::Error) {
        Err(LoadError { problems })
    } else {
        Ok(tools)
    }
}

/// The Cedar schema text the manifests and `attributes.json` in `schemas_dir` generate (what
/// `toolgate schema` writes).
pub fn schema_text(schemas_dir: &Path) -> Result<(String, BTreeMap<String, Tool>), LoadError> {
    let tools = load_tools(schemas_dir)?;
    let attributes = Attributes::read(schemas_dir).map_err(|p| LoadError { problems: vec![*p] })?;
    Ok((schema_gen::generate(tools.values(), &attributes), tools))
}

/// Parses and validates inputs already in memory, with nothing remembered from earlier loads.
pub fn build(inputs: Inputs) -> Result<Loaded, LoadError> {
    build_with(inputs, &mut LoadCache::new())
}

/// Parses and validates inputs already in memory, re-validating only policy files that
/// `cache` has not seen pass under the same schema. Pure apart from the clock reading for
/// `loaded_at`.
pub fn build_with(inputs: Inputs, cache: &mut LoadCache) -> Result<Loaded, LoadError> {
    let Inputs {
        manifests,
        schema,
        attributes,
        policies,
        entities,
        mut problems,
        revision,
        programs,
        deny,
    } = inputs;
    let tools = compile_manifests(&manifests, Some(&programs), &mut problems);
    let attributes = match attributes {
        None => Attributes::default(),
        Some(f) => Attributes::parse(&f.path, &f.text).unwrap_or_else(|p| {
            problems.push(*p);
            Attributes::default()
        }),
    };
    let schema = schema.and_then(|f| parse_schema(&f, (&tools, &attributes), cache, &mut problems));
    let ParsedSet {
        set,
        sources,
        files,
        in_slice,
        roles,
    } = parse_policies(&policies, cache, &mut problems);
    if let Some((schema, key)) = &schema {
        validate_files(schema, *key, &files, cache, &mut problems);
        explain_untyped(&tools, &mut problems);
    }
    check_template_scopes(&set, &tools, &files, &mut problems);
    let schema = schema.map(|(s, _)| s);
    // A policy file that did not parse names no roles; its error is the one to report, not
    // every role only it named.
    let roles = (files.len() == policies.len()).then_some(roles);
    let entities = match (&schema, entities) {
        (Some(schema), Some(file)) => {
            parse_entities(&file, schema, &tools, roles.as_ref(), &mut problems)
        }
        _ => None,
    };
    let blocked = problems.iter().any(|p| p.level == Level::Error);
    match (schema, entities) {
        (Some(schema), Some(entities)) if !blocked => {
            let slices = Slices::build_prepared(&set, &in_slice, &entities, schema.actions());
            Ok(Loaded {
                snapshot: Snapshot {
                    revision,
                    loaded_at: SystemTime::now(),
                    policies: set,
                    slices,
                    schema,
                    entities,
                    tools: Arc::new(tools),
                    policy_files: sources
                        .into_iter()
                        .map(|(id, src)| (id, src.file.display().to_string()))
                        .collect(),
                    authorizer: Authorizer::new(),
                    deny,
                },
                warnings: problems,
            })
        }
        _ => Err(LoadError { problems }),
    }
}

/// Every template may give tool actions only (see [`template_scope_problem`]).
/// A policy that reads an argument its tool declares but Cedar cannot type gets Cedar's
/// "not found" (with a guess at another name): say instead that the argument is untyped, why,
/// and how to type it.
fn explain_untyped(tools: &BTreeMap<String, Tool>, problems: &mut [Problem]) {
    for p in problems.iter_mut() {
        let Some(rest) = p.message.split("attribute `args.").nth(1) else {
            continue;
        };
        let Some((arg, rest)) = rest.split_once('`') else {
            continue;
        };
        let Some(tool) = rest
            .split("Action::\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .and_then(|name| tools.get(name))
        else {
            continue;
        };
        let arg = arg.split('.').next().unwrap_or(arg);
        let Some(sub) = tool
            .input_schema
            .get("properties")
            .and_then(|props| props.get(arg))
        else {
            continue;
        };
        if let Some(why) = crate::tools::untyped_reason(sub, &tool.input_schema) {
            p.help = Some(format!(
                "`{arg}` is an argument of `{}`, but untyped for policies: {why}; give it a type Cedar can express (string, integer, number, boolean, array, object; optional as `anyOf` with null)",
                tool.name
            ));
        }
    }
}

fn check_template_scopes(
    set: &PolicySet,
    tools: &BTreeMap<String, Tool>,
    files: &[ParsedFile<'_>],
    problems: &mut Vec<Problem>,
) {
    let groups = ["read", "write", "destructive"]
        .into_iter()
        .filter_map(|g| {
            let ty: cedar_policy::EntityTypeName = "Action".parse().ok()?;
            Some(cedar_policy::EntityUid::from_type_name_and_id(
                ty,
                cedar_policy::EntityId::new(g),
            ))
        });
    let tool_actions: HashSet<cedar_policy::EntityUid> = tools
        .values()
        .map(|t| t.action_uid.clone())
        .chain(groups)
        .collect();
    for template in set.templates() {
        let Some(message) = template_scope_problem(template, &tool_actions) else {
            continue;
        };
        let help = Some(
            "write `action in [Action::\"read\", Action::\"write\", Action::\"destructive\"]` or name tool actions"
                .to_owned(),
        );
        let file = files
            .iter()
            .find(|f| f.templates.iter().any(|t| t.id() == template.id()));
        problems.push(match file {
            Some(f) => match line_of(f.text, &format!("@id(\"{}\")", template.id())) {
                Some(line) => Problem::at_line(f.path, f.text, line, 1, message, help),
                None => Problem::in_file(f.path, message, help),
            },
            None => Problem::in_file(Path::new("policies"), message, help),
        });
    }
}

fn compile_manifests(
    files: &[SourceFile],
    programs: Option<&crate::tools::Programs>,
    problems: &mut Vec<Problem>,
) -> BTreeMap<String, Tool> {
    let mut tools = BTreeMap::new();
    for f in files {
        let stem = f
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        match compile_manifest(&f.text, &stem, programs) {
            Ok(tool) => {
                if let Some(ex) = tool.executor.as_ref().filter(|e| e.program.path.is_none()) {
                    problems.push(Problem::warning(
                        &f.path,
                        format!(
                            "`{}` runs `{}`, which is not installed here: it cannot be executed",
                            tool.name, ex.program.written
                        ),
                        Some("install the program, or give its absolute path".to_owned()),
                    ));
                }
                problems.extend(
                    tool.blind_spots()
                        .into_iter()
                        .map(|(msg, help)| Problem::warning(&f.path, msg, Some(help))),
                );
                tools.insert(tool.name.clone(), tool);
            }
            Err(e) => problems.push(match (e.line, e.column) {
                (Some(l), Some(c)) => Problem::at_line(&f.path, &f.text, l, c, e.message, e.help),
                _ => Problem::in_file(&f.path, e.message, e.help),
            }),
        }
    }
    tools
}

fn parse_schema(
    file: &SourceFile,
    (tools, attributes): (&BTreeMap<String, Tool>, &Attributes),
    cache: &mut LoadCache,
    problems: &mut Vec<Problem>,
) -> Option<(Schema, [u8; 32])> {
    let key = file_key(&file.path, &file.text);
    let cached = cache
        .schema
        .as_ref()
        .filter(|(k, _)| *k == key)
        .map(|(_, s)| s.clone());
    let parsed = match cached {
        Some(schema) => Ok(schema),
        None => Schema::from_cedarschema_str(&file.text).map(|(s, _)| s),
    };
    let schema = match parsed {
        Ok(schema) => {
            cache.schema = Some((key, schema.clone()));
            schema
        }
        Err(e) => {
            problems.extend(Problem::from_diagnostic(
                &file.path,
                &file.text,
                &e,
                Level::Error,
            ));
            return None;
        }
    };
    if file.text != schema_gen::generate(tools.values(), attributes) {
        problems.push(Problem::in_file(
            &file.path,
            "the Cedar schema does not match the tool manifests",
            Some(
                "run `toolgate schema` to regenerate it, then review and commit the result"
                    .to_owned(),
            ),
        ));
    }
    Some((schema, key))
}

/// Where a policy came from.
struct PolicySource {
    file: PathBuf,
}

fn parse_policies<'a>(
    files: &'a [SourceFile],
    cache: &mut LoadCache,
    problems: &mut Vec<Problem>,
) -> ParsedSet<'a> {
    let mut prepared = HashMap::new();
    let mut parsed_files = Vec::with_capacity(files.len());
    let mut next_parsed = HashMap::with_capacity(files.len());
    let mut set = PolicySet::new();
    let mut sources: HashMap<String, PolicySource> = HashMap::new();
    let mut roles = BTreeSet::new();
    for SourceFile { path, text } in files {
        if text.trim().is_empty() {
            problems.push(Problem::in_file(
                path,
                "the file is empty",
                Some(
                    "an empty policy file is usually a half-written one; delete it or add policies"
                        .to_owned(),
                ),
            ));
            continue;
        }
        let key = file_key(path, text);
        let renamed = match cache.parsed.get(&key).cloned() {
            Some(parsed) => parsed,
            None => match parse_file(path, text, problems) {
                Some((policies, templates)) => Arc::new(ParsedPolicies {
                    roles: roles_named(&policies, &templates),
                    policies: policies
                        .into_iter()
                        .map(|p| {
                            let in_slice = without_action_scope(&p);
                            (p, in_slice)
                        })
                        .collect(),
                    templates,
                }),
                None => continue,
            },
        };
        next_parsed.insert(key, renamed.clone());
        roles.extend(renamed.roles.iter().cloned());
        let mut in_file = Vec::new();
        let mut templates_in_file = Vec::new();
        let ids = renamed
            .policies
            .iter()
            .map(|(p, _)| p.id())
            .chain(renamed.templates.iter().map(cedar_policy::Template::id));
        let mut fresh = std::collections::HashSet::new();
        for id in ids {
            let id = id.to_string();
            if let Some(prev) = sources.get(&id) {
                let message = format!(
                    "duplicate policy id `{id}` (also in {})",
                    prev.file.display()
                );
                let help =
                    Some("every `@id(\"...\")` must be unique across all policy files".to_owned());
                problems.push(match line_of(text, &format!("@id(\"{id}\")")) {
                    Some(line) => Problem::at_line(path, text, line, 1, message, help),
                    None => Problem::in_file(path, message, help),
                });
                continue;
            }
            sources.insert(id.clone(), PolicySource { file: path.clone() });
            fresh.insert(id);
        }
        // Each id once: a second policy with an id already taken was reported above.
        for (policy, in_slice) in &renamed.policies {
            if !fresh.remove(&policy.id().to_string()) {
                continue;
            }
            if let Err(e) = set.add(policy.clone()) {
                problems.push(Problem::in_file(path, e.to_string(), None));
                continue;
            }
            in_file.push(policy.clone());
            prepared.insert(policy.id().clone(), in_slice.clone());
        }
        for template in &renamed.templates {
            if !fresh.remove(&template.id().to_string()) {
                continue;
            }
            if let Err(e) = set.add_template(template.clone()) {
                problems.push(Problem::in_file(path, e.to_string(), None));
                continue;
            }
            templates_in_file.push(template.clone());
        }
        parsed_files.push(ParsedFile {
            path,
            text,
            key,
            policies: in_file,
            templates: templates_in_file,
        });
    }
    cache.parsed = next_parsed;
    ParsedSet {
        set,
        sources,
        files: parsed_files,
        in_slice: prepared,
        roles,
    }
}

/// The policy files of one load, parsed.
struct ParsedSet<'a> {
    set: PolicySet,
    sources: HashMap<String, PolicySource>,
    files: Vec<ParsedFile<'a>>,
    /// Each policy's copy for its action slices (action scope removed).
    in_slice: HashMap<PolicyId, Policy>,
    /// Ids of the roles some policy or template names.
    roles: BTreeSet<String>,
}

/// Ids of the `Role` entity literals in `policies` (scope and conditions) and `templates`.
fn roles_named(policies: &[Policy], templates: &[cedar_policy::Template]) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = policies
        .iter()
        .flat_map(Policy::entity_literals)
        .filter(|uid| uid.type_name().to_string() == ROLE)
        .map(|uid| uid.id().unescaped().to_owned())
        .collect();
    // Templates have no literal walk in Cedar's API; their JSON form names every entity as
    // `{"type": "Role", "id": "x"}` (scope) or `{"__entity": {…}}` (conditions).
    for t in templates {
        if let Ok(json) = t.to_json() {
            role_ids_in(&json, &mut out);
        }
    }
    out
}

fn role_ids_in(v: &serde_json::Value, out: &mut BTreeSet<String>) {
    match v {
        serde_json::Value::Object(map) => {
            if let (Some(ty), Some(serde_json::Value::String(id))) =
                (map.get("type"), map.get("id"))
                && ty == ROLE
            {
                out.insert(id.clone());
            }
            map.values().for_each(|v| role_ids_in(v, out));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| role_ids_in(v, out)),
        _ => {}
    }
}

/// The entity type of roles in the generated schema.
const ROLE: &str = "Role";

/// Parses one file and renames its policies to their final ids: the `@id` annotation, or
/// `file.cedar#N` (Cedar numbers unnamed policies `policy0`, `policy1`, … in source order).
fn parse_file(
    path: &Path,
    text: &str,
    problems: &mut Vec<Problem>,
) -> Option<(Vec<cedar_policy::Policy>, Vec<cedar_policy::Template>)> {
    let parsed: PolicySet = match text.parse() {
        Ok(p) => p,
        Err(e) => {
            problems.extend(Problem::from_diagnostic(path, text, &e, Level::Error));
            return None;
        }
    };
    let mut templates = Vec::new();
    for template in parsed.templates() {
        // Grants name the template they link, so it needs a stable name.
        let Some(id) = template.annotation("id") else {
            let message = "a template needs an `@id(\"...\")` annotation: grants name it";
            let help = Some("add `@id(\"grant-...\")` above the template".to_owned());
            let at = template.to_string();
            let line = at
                .lines()
                .next()
                .and_then(|first| line_of(text, first.trim()));
            problems.push(match line {
                Some(line) => Problem::at_line(path, text, line, 1, message, help),
                None => Problem::in_file(path, message, help),
            });
            return None;
        };
        templates.push(template.new_id(PolicyId::new(id)));
    }
    let mut out: Vec<cedar_policy::Policy> = parsed
        .policies()
        .map(|policy| {
            let id = policy.annotation("id").map_or_else(
                || {
                    format!(
                        "{}#{}",
                        file_name(path),
                        policy.id().to_string().trim_start_matches("policy")
                    )
                },
                str::to_owned,
            );
            policy.new_id(PolicyId::new(id))
        })
        .collect();
    // Source order, so a duplicate is reported at its later occurrence.
    out.sort_by_key(|p| {
        text.find(&format!("@id(\"{}\")", p.id()))
            .unwrap_or(usize::MAX)
    });
    Some((out, templates))
}

fn parse_entities(
    file: &SourceFile,
    schema: &Schema,
    tools: &BTreeMap<String, Tool>,
    known_roles: Option<&BTreeSet<String>>,
    problems: &mut Vec<Problem>,
) -> Option<Entities> {
    let declared = match Entities::from_json_str(&file.text, Some(schema)) {
        Ok(e) => e,
        Err(e) => {
            problems.extend(Problem::from_diagnostic(
                &file.path,
                &file.text,
                &e,
                Level::Error,
            ));
            return None;
        }
    };
    let declared_tools: Vec<String> = declared
        .iter()
        .filter(|e| e.uid().type_name().to_string() == "Tool")
        .map(|e| e.uid().to_string())
        .collect();
    if !declared_tools.is_empty() {
        problems.push(Problem::in_file(
            &file.path,
            format!(
                "`Tool` entities are generated from the manifests: remove {}",
                declared_tools.join(", ")
            ),
            None,
        ));
        return None;
    }
    let unknown = known_roles
        .map(|known| unknown_roles(file, &declared, known))
        .unwrap_or_default();
    if !unknown.is_empty() {
        problems.extend(unknown);
        return None;
    }
    let tool_entities = match tools
        .values()
        .map(tool_entity)
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(t) => t,
        Err(e) => {
            problems.push(Problem::in_file(&file.path, e, None));
            return None;
        }
    };
    match declared.add_entities(tool_entities, Some(schema)) {
        Ok(all) => Some(all),
        Err(e) => {
            problems.push(Problem::in_file(&file.path, e.to_string(), None));
            None
        }
    }
}

/// A role that `entities.json` declares or makes an agent or human a member of, which no
/// policy or template names: a typo (`Role::"devloper"`) or a role that grants nothing, and
/// either way not what the file's author meant. The generated schema declares `entity Role;`
/// without listing ids, so the policies are what makes a role known.
fn unknown_roles(file: &SourceFile, declared: &Entities, known: &BTreeSet<String>) -> Vec<Problem> {
    // role id → the entities naming it (the role itself when it is declared), sorted, so the
    // report does not depend on the entity store's hash order.
    let mut named: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for entity in declared.iter() {
        let (uid, _, parents) = entity.clone().into_inner();
        let is_role = |u: &cedar_policy::EntityUid| u.type_name().to_string() == ROLE;
        for role in parents
            .iter()
            .filter(|p| is_role(p))
            .chain(is_role(&uid).then_some(&uid))
        {
            named
                .entry(role.id().unescaped().to_owned())
                .or_default()
                .insert(uid.to_string());
        }
    }
    named
        .into_iter()
        .filter(|(role, _)| !known.contains(role))
        .map(|(role, by)| {
            let declared = by.contains(&format!("Role::{}", quoted(&role)));
            let message = match by.iter().next() {
                Some(member) if !declared => format!(
                    "role `{role}` (a parent of `{member}`{}) is named by no policy: it grants nothing",
                    match by.len() {
                        1 => String::new(),
                        n => format!(" and {} more", n - 1),
                    }
                ),
                _ => format!("role `{role}` is named by no policy: it grants nothing"),
            };
            let help = Some(
                "a typo? fix the name; a new role needs a policy naming `Role::\"…\"`; otherwise remove it"
                    .to_owned(),
            );
            match line_of_first(&file.text, &quoted(&role)) {
                Some((line, column)) => {
                    Problem::at_line(&file.path, &file.text, line, column, message, help)
                }
                None => Problem::in_file(&file.path, message, help),
            }
        })
        .collect()
}

/// `s` as a JSON string literal.
fn quoted(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// 1-based line and column of the first occurrence of `needle`.
fn line_of_first(text: &str, needle: &str) -> Option<(usize, usize)> {
    let at = text.find(needle)?;
    let before = text.get(..at)?;
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    Some((line, column))
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
