//! Semantic policy diffs: for every action of the schema, does NEW allow exactly what OLD
//! allows, less (narrowed), more (widened), or some of each? Proved by Cedar's symbolic
//! compiler (`cedar-policy-symcc`) with the cvc5 SMT solver, for every request the schema
//! admits and every entity store; each example call is confirmed with Cedar's ordinary
//! authorizer before it is shown.
//!
//! Owns: the per-action comparison, finding the solver, and examples. Entity files are not
//! part of the proof (symcc quantifies over all entity stores), so role membership changes are
//! reported by the caller, not here.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use cedar_policy::{Authorizer, Decision, Entity, EntityId, EntityUid, PolicySet, Request, Schema};
use cedar_policy_symcc::solver::LocalSolver;
use cedar_policy_symcc::{CedarSymCompiler, CompiledPolicySet, Env};
use serde::Serialize;
use serde_json::Value;

use crate::policy::Snapshot;

/// Why a diff could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// No cvc5 binary where `CVC5` or `PATH` points.
    #[error(
        "no SMT solver: cvc5 was not found ({0}); install it (`apt-get install cvc5`) or set CVC5=/path/to/cvc5"
    )]
    NoSolver(String),
    /// The solver or the symbolic compiler failed on one action.
    #[error("symbolic analysis of `{action}` failed: {message}")]
    Analysis {
        /// The action being compared.
        action: String,
        /// What went wrong.
        message: String,
    },
    /// No async runtime could be built to drive the solver.
    #[error("cannot start the solver's runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

/// How one action's permissions changed from OLD to NEW.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Exactly the same requests are allowed.
    Equal,
    /// NEW allows a subset of what OLD allows.
    Narrowed,
    /// NEW allows a superset of what OLD allows.
    Widened,
    /// Some requests gained, others lost.
    Both,
}

impl Change {
    /// The word reports use.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Equal => "equal",
            Change::Narrowed => "narrowed",
            Change::Widened => "widened",
            Change::Both => "changed both ways",
        }
    }

    /// Whether NEW allows something OLD denied.
    pub fn widens(self) -> bool {
        matches!(self, Change::Widened | Change::Both)
    }

    /// Whether NEW denies something OLD allowed.
    pub fn narrows(self) -> bool {
        matches!(self, Change::Narrowed | Change::Both)
    }
}

/// A concrete request one set allows and the other denies.
#[derive(Debug, Clone, Serialize)]
pub struct Example {
    /// The principal, e.g. `Agent::"a"`.
    pub principal: String,
    /// Its roles and other ancestors in the example's entity store.
    pub principal_in: Vec<String>,
    /// The resource, e.g. `Tool::"t"`, with its attributes.
    pub resource: String,
    /// The resource's attributes (a tool's `risk` and `classification`).
    pub resource_attrs: Value,
    /// The request context: `args`, `approval`, `usage`, `anomaly`, `paths`, …
    pub context: Value,
    /// Whether Cedar's authorizer agreed with the solver on both sets (always true unless the
    /// analysis and the evaluator disagree, which is reported, never hidden).
    pub confirmed: bool,
    /// The policies that allow the request in the set that allows it.
    pub allowed_by: Vec<String>,
    /// For tool actions: whether the same call (same roles, same context) still differs with
    /// your entities: the real `Tool` entity with its risk tier, the real roles. `false` means
    /// the difference needs an entity unlike yours (a tool with another risk, a role you do
    /// not have); it is still a difference in the policies.
    pub on_your_entities: Option<bool>,
}

/// One action's result.
#[derive(Debug, Clone, Serialize)]
pub struct ActionDiff {
    /// The action (a tool name, or `approve`, `kill_switch`, `quarantine`).
    pub action: String,
    /// How it changed.
    pub change: Change,
    /// A request NEW allows and OLD denies (when widened).
    pub widening: Option<Example>,
    /// A request OLD allows and NEW denies (when narrowed).
    pub narrowing: Option<Example>,
}

/// The whole diff, one entry per action of the schema, sorted by action.
#[derive(Debug, Clone, Serialize)]
pub struct Diff {
    /// Per action.
    pub actions: Vec<ActionDiff>,
}

impl Diff {
    /// Whether any action widened.
    pub fn widens(&self) -> bool {
        self.actions.iter().any(|a| a.change.widens())
    }

    /// Whether any action changed at all.
    pub fn changes(&self) -> bool {
        self.actions.iter().any(|a| a.change != Change::Equal)
    }

    /// Counts per kind of change.
    pub fn summary(&self) -> BTreeMap<Change, usize> {
        let mut out = BTreeMap::new();
        for a in &self.actions {
            *out.entry(a.change).or_insert(0) += 1;
        }
        out
    }
}

/// Where the solver is: `$CVC5`, else `cvc5` on `PATH`.
pub fn find_solver() -> Result<PathBuf, DiffError> {
    if let Some(path) = std::env::var_os("CVC5") {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(DiffError::NoSolver(format!(
                "CVC5={} is not a file",
                path.display()
            )))
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("cvc5"))
        .find(|p| p.is_file())
        .ok_or_else(|| DiffError::NoSolver("not on PATH and CVC5 is unset".to_owned()))
}

/// Only the policies written in files: template-linked grants are not part of a file diff.
pub fn static_policies(set: &PolicySet) -> PolicySet {
    let mut out = PolicySet::new();
    for p in set.policies().filter(|p| p.is_static()) {
        // Ids are unique in `set`, so adding cannot fail.
        let _ = out.add(p.clone());
    }
    out
}

/// How the templates (which grants link) differ between two sets. The symbolic comparison
/// covers static policies only; a template is a promise about every grant that links it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TemplateChanges {
    /// New templates: grants can now give what they say.
    pub added: Vec<String>,
    /// Templates whose text changed: every grant linking one changes with it.
    pub changed: Vec<String>,
    /// Removed templates: grants linking them grant nothing any more.
    pub removed: Vec<String>,
}

impl TemplateChanges {
    /// Whether grants may allow more (an added or changed template), which a review must treat
    /// as widening: no solver looks at templates.
    pub fn widens(&self) -> bool {
        !self.added.is_empty() || !self.changed.is_empty()
    }

    /// Whether nothing differs.
    pub fn is_empty(&self) -> bool {
        !self.widens() && self.removed.is_empty()
    }
}

/// The templates added, changed (by text) and removed from `old` to `new`, by id.
pub fn template_changes(old: &PolicySet, new: &PolicySet) -> TemplateChanges {
    let texts = |set: &PolicySet| -> BTreeMap<String, String> {
        set.templates()
            .map(|t| (t.id().to_string(), t.to_string()))
            .collect()
    };
    let (old, new) = (texts(old), texts(new));
    let mut out = TemplateChanges::default();
    for (id, text) in &new {
        match old.get(id) {
            None => out.added.push(id.clone()),
            Some(before) if before != text => out.changed.push(id.clone()),
            Some(_) => {}
        }
    }
    out.removed = old
        .keys()
        .filter(|id| !new.contains_key(*id))
        .cloned()
        .collect();
    out
}

/// Compares `old` and `new` (both validated against `schema`) action by action. Blocking: it
/// runs the solver on a private single-threaded runtime.
/// `ground`, when given, is the snapshot whose entities and tools examples are re-checked on.
pub fn diff(
    old: &PolicySet,
    new: &PolicySet,
    schema: &Schema,
    ground: Option<&Snapshot>,
) -> Result<Diff, DiffError> {
    find_solver()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(diff_async(old, new, schema, ground))
}

async fn diff_async(
    old: &PolicySet,
    new: &PolicySet,
    schema: &Schema,
    ground: Option<&Snapshot>,
) -> Result<Diff, DiffError> {
    // `--strings-exp`: cvc5 1.0 (Debian's) refuses symcc's string terms (`like`) without it;
    // later versions accept the flag. The time limit is per query.
    let solver = LocalSolver::cvc5_with_args(["--tlimit=60000", "--strings-exp"])
        .map_err(|e| DiffError::NoSolver(e.to_string()))?;
    let mut compiler = CedarSymCompiler::new(solver).map_err(|e| DiffError::Analysis {
        action: String::new(),
        message: e.to_string(),
    })?;
    let mut actions = Vec::new();
    for env in schema.request_envs() {
        let action = env.action().id().unescaped().to_owned();
        let fail = |e: cedar_policy_symcc::err::Error| DiffError::Analysis {
            action: action.clone(),
            message: e.to_string(),
        };
        let old_c = CompiledPolicySet::compile(old, &env, schema).map_err(fail)?;
        let new_c = CompiledPolicySet::compile(new, &env, schema).map_err(fail)?;
        // A request NEW allows and OLD does not: `new ⇒ old` fails.
        let gained = compiler
            .check_implies_with_counterexample_opt(&new_c, &old_c)
            .await
            .map_err(fail)?;
        let lost = compiler
            .check_implies_with_counterexample_opt(&old_c, &new_c)
            .await
            .map_err(fail)?;
        let change = match (&gained, &lost) {
            (None, None) => Change::Equal,
            (Some(_), None) => Change::Widened,
            (None, Some(_)) => Change::Narrowed,
            (Some(_), Some(_)) => Change::Both,
        };
        actions.push(ActionDiff {
            action,
            change,
            widening: gained.map(|env| example(&env, new, old, ground)),
            narrowing: lost.map(|env| example(&env, old, new, ground)),
        });
    }
    actions.sort_by(|a, b| a.action.cmp(&b.action));
    Ok(Diff { actions })
}

/// Renders a solver counterexample, confirming that `allows` allows it and `denies` does not.
fn example(
    env: &Env,
    allows: &PolicySet,
    denies: &PolicySet,
    ground: Option<&Snapshot>,
) -> Example {
    let authorizer = Authorizer::new();
    let yes = authorizer.is_authorized(&env.request, allows, &env.entities);
    let no = authorizer.is_authorized(&env.request, denies, &env.entities);
    let confirmed = yes.decision() == Decision::Allow && no.decision() == Decision::Deny;
    let principal = env.request.principal();
    let resource = env.request.resource();
    let principal_in = principal
        .and_then(|p| env.entities.ancestors(p))
        .map(|it| it.map(ToString::to_string).collect::<Vec<_>>())
        .unwrap_or_default();
    let resource_attrs = resource
        .and_then(|r| env.entities.get(r))
        .and_then(|e| e.to_json_value().ok())
        .and_then(|mut v| v.get_mut("attrs").map(Value::take))
        .unwrap_or(Value::Null);
    let mut allowed_by: Vec<String> = yes
        .diagnostics()
        .reason()
        .map(ToString::to_string)
        .collect();
    allowed_by.sort();
    Example {
        principal: principal.map(ToString::to_string).unwrap_or_default(),
        principal_in,
        resource: resource.map(ToString::to_string).unwrap_or_default(),
        resource_attrs,
        context: env
            .request
            .context()
            .and_then(|c| c.to_json_value().ok())
            .unwrap_or(Value::Null),
        confirmed,
        allowed_by,
        on_your_entities: ground.and_then(|snap| grounded(env, allows, denies, snap)),
    }
}

/// Re-decides the example as a call to the real tool, by a principal holding those of the
/// example's roles that exist in `snap`, with `snap`'s entities. `None` for actions that are
/// not tools (approve, operator actions).
fn grounded(env: &Env, allows: &PolicySet, denies: &PolicySet, snap: &Snapshot) -> Option<bool> {
    let action = env.request.action()?;
    let tool = snap.tools.get(action.id().unescaped())?;
    let principal = env.request.principal()?;
    let roles: HashSet<EntityUid> = env
        .entities
        .ancestors(principal)
        .into_iter()
        .flatten()
        .filter(|r| snap.entities.get(r).is_some())
        .cloned()
        .collect();
    let who = EntityUid::from_type_name_and_id(
        principal.type_name().clone(),
        EntityId::new("example-principal"),
    );
    let entities = snap
        .entities
        .clone()
        .add_entities([Entity::new_no_attrs(who.clone(), roles)], None)
        .ok()?;
    let context = env.request.context()?.clone();
    let request = Request::new(
        who,
        action.clone(),
        tool.resource_uid.clone(),
        context,
        None,
    )
    .ok()?;
    let authorizer = Authorizer::new();
    let yes = authorizer.is_authorized(&request, allows, &entities);
    let no = authorizer.is_authorized(&request, denies, &entities);
    Some(yes.decision() == Decision::Allow && no.decision() == Decision::Deny)
}
