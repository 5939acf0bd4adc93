//! Tool manifests: MCP-shaped tool definitions plus governance fields, compiled once into
//! [`Tool`]s (argument validator, Cedar argument type, action and resource ids).
//!
//! Owns: reading `schemas/tools/*.json`, checking each manifest, compiling its JSON Schema with
//! external `$ref` resolution off, and mapping it to a Cedar record type. Does not own: the
//! Cedar schema file (see `policy::schema_gen`) or any decision (see `authz`).

mod args;
mod builtin;
mod executor;
mod facts;
mod fields;
mod manifest;
pub mod strict_json;

pub use args::{ArgError, CedarType, RecordAttr, untyped_reason};
pub use builtin::Builtin;
pub use executor::{
    Access, CompileError, DEFAULT_PROGRAMS, Executor, GitSpec, Keep, LimitOverrides, Parser,
    Program, Programs, RawAccess, RawExecutor, RenderError, Retry, Truncate,
};
pub use facts::{ArgFacts, FactKind, FactValue, Facts, GateOverrides, scan_args, top_level};
pub use fields::{FieldPolicy, Filtered};
pub use manifest::{Classification, Limits, ManifestError, Risk, compile_manifest};

use cedar_policy::{EntityUid, RestrictedExpression};
use serde_json::Value;

/// A tool compiled from its manifest. Immutable; shared by every request of a policy snapshot.
#[derive(Debug)]
pub struct Tool {
    /// The tool's name, which is also its Cedar action id and `Tool` entity id.
    pub name: String,
    /// Human-readable description, shown to agents in `GET /v1/tools`.
    pub description: String,
    /// Risk tier, visible to policies as `resource.risk`.
    pub risk: Risk,
    /// Classification, which places the action in its Cedar action group.
    pub classification: Classification,
    /// Execution limits, returned with each decision.
    pub limits: Limits,
    /// The argument JSON Schema as written, for OpenAI function definitions.
    pub input_schema: Value,
    /// Top-level string arguments that are paths: normalized and jailed before Cedar sees them.
    pub path_args: Vec<String>,
    /// The Cedar type of `context.args`: only the parts of the JSON Schema Cedar can express.
    pub args_type: Vec<RecordAttr>,
    /// Compiled once at load; validates arguments on every call.
    pub(crate) validator: jsonschema::Validator,
    /// The `outputSchema`, compiled: results reported to `/v1/results` must match it.
    pub(crate) output_validator: Option<jsonschema::Validator>,
    /// Which parts of a result reach the agent (`None`: all of it, screened by the output
    /// gate).
    pub output_fields: Option<FieldPolicy>,
    /// How toolgate runs the tool (`None`: the agent runtime runs it and reports results).
    pub executor: Option<crate::tools::Executor>,
    /// The file tool toolgate implements itself, if this is one.
    pub builtin: Option<crate::tools::Builtin>,
    /// The MCP upstream tool this one forwards to, if it is one.
    pub mcp: Option<McpBinding>,
    /// Derived facts per argument (`context.facts.<arg>`), sorted by argument.
    pub facts: Vec<ArgFacts>,
    /// The tool_call gate's rules for this tool and its arguments.
    pub gate: GateOverrides,
    /// `Action::"<name>"`, built once.
    pub action_uid: EntityUid,
    /// `Tool::"<name>"`, built once.
    pub resource_uid: EntityUid,
}

/// A manifest's `mcp`: the upstream tool it stands for, and the descriptor hash it was
/// generated from (written by `toolgate mcp sync`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpBinding {
    /// The `[[mcp.upstreams]]` name.
    pub upstream: String,
    /// The tool's name at the upstream.
    pub tool: String,
    /// `sha256:<hex>` of the reviewed descriptor: a live descriptor with another hash is
    /// hidden and its calls denied until a human approves it.
    pub pin: String,
}

/// Where one path argument leads, as the pipeline found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// The argument's name.
    pub arg: String,
    /// Its value as resolved (normalized): facts about another value are not used for it.
    pub asked: String,
    /// The path it leads to (relative to the roots), or why execution would refuse it.
    pub outcome: Result<String, String>,
}

/// One JSON Schema violation, described without the offending value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ArgViolation {
    /// JSON pointer to the offending argument (`""` for the whole argument object).
    pub instance_path: String,
    /// What is wrong, never quoting the value itself.
    pub message: String,
}

impl ArgViolation {
    /// The instance path for messages: `/` for the whole document.
    pub fn at(&self) -> &str {
        if self.instance_path.is_empty() {
            "/"
        } else {
            &self.instance_path
        }
    }
}

/// At most this many schema violations are reported per call.
const MAX_VIOLATIONS: usize = 20;

impl Tool {
    /// Validates `args` against the tool's JSON Schema, listing every violation (up to a cap)
    /// by instance path. The values themselves are never quoted: they may hold secrets.
    pub fn check_args(&self, args: &Value) -> Vec<ArgViolation> {
        self.validator
            .iter_errors(args)
            .take(MAX_VIOLATIONS)
            .map(|e| ArgViolation {
                instance_path: e.instance_path().to_string(),
                message: args::describe_violation(&e),
            })
            .collect()
    }

    /// Checks a reported result against the `outputSchema` (none: anything goes), listing
    /// violations by instance path without quoting values.
    pub fn check_output(&self, output: &Value) -> Vec<ArgViolation> {
        let Some(v) = &self.output_validator else {
            return Vec::new();
        };
        v.iter_errors(output)
            .take(MAX_VIOLATIONS)
            .map(|e| ArgViolation {
                instance_path: e.instance_path().to_string(),
                message: args::describe_violation(&e),
            })
            .collect()
    }

    /// What policies cannot see about this tool's arguments: properties whose JSON Schema has
    /// no Cedar type, and undeclared properties when `additionalProperties` is not `false`.
    /// Each is a (message, help) pair, reported as a load warning.
    pub fn blind_spots(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Some(props) = self
            .input_schema
            .get("properties")
            .and_then(Value::as_object)
        {
            for (name, sub) in props {
                if !self.args_type.iter().any(|a| &a.name == name) {
                    let why = args::untyped_reason(sub, &self.input_schema).unwrap_or_else(|| {
                        "its name cannot be written in a Cedar schema".to_owned()
                    });
                    let traced = if args::may_hold_text(sub) {
                        " (`context.provenance` still traces its strings)"
                    } else {
                        ""
                    };
                    out.push((
                        format!(
                            "argument `{name}` of `{}` is untyped for policies: {why}{traced}",
                            self.name
                        ),
                        "give it a type Cedar can express (string, integer, number, boolean, array, object; optional as `anyOf` with null; local `$ref`s)".to_owned(),
                    ));
                }
            }
        }
        if self.input_schema.get("additionalProperties") != Some(&Value::Bool(false)) {
            out.push((
                format!(
                    "`{}` accepts undeclared arguments, which policies cannot see",
                    self.name
                ),
                "add `\"additionalProperties\": false` to its inputSchema".to_owned(),
            ));
        }
        out
    }

    /// The `context.paths` record: facts about each path argument present in the (normalized)
    /// `args`, or `None` for a tool without path arguments.
    ///
    /// With `resolved` (what the pipeline found on the file system through the jail), the
    /// facts describe the path the argument leads to (`resolved`, and its `segments`, `name`
    /// and `ext`), and `denied` says whether execution would refuse it: a link out of the
    /// roots or into deny-listed or protected places, a hard-linked file, a file system
    /// error. An argument without a resolution of its exact value is denied (fail closed).
    /// Without `resolved` (no service root, or an evaluation without a server), the facts
    /// describe the path as asked and `denied` is `guard`'s verdict on it: the deny list
    /// (case-insensitive globs over folded names) and the sidecar's own files below the root.
    pub fn paths_to_cedar(
        &self,
        args: &Value,
        guard: &crate::globs::PathGuard,
        resolved: Option<&[Resolution]>,
    ) -> Result<Option<RestrictedExpression>, ArgError> {
        if self.path_args.is_empty() {
            return Ok(None);
        }
        let mut fields = Vec::with_capacity(self.path_args.len());
        for name in &self.path_args {
            let Some(path) = args.get(name).and_then(Value::as_str) else {
                continue;
            };
            let (target, denied) = match resolved {
                None => (path, guard.refuses(path).is_some()),
                Some(all) => match all.iter().find(|r| &r.arg == name && r.asked == path) {
                    Some(Resolution {
                        outcome: Ok(target),
                        ..
                    }) => (target.as_str(), false),
                    _ => (path, true),
                },
            };
            let f = crate::paths::path_facts(target);
            let segments = RestrictedExpression::new_set(
                f.segments.into_iter().map(RestrictedExpression::new_string),
            );
            let facts = RestrictedExpression::new_record([
                ("segments".to_owned(), segments),
                ("name".to_owned(), RestrictedExpression::new_string(f.name)),
                ("ext".to_owned(), RestrictedExpression::new_string(f.ext)),
                ("denied".to_owned(), RestrictedExpression::new_bool(denied)),
                (
                    "resolved".to_owned(),
                    RestrictedExpression::new_string(target.to_owned()),
                ),
            ])
            .map_err(|_| ArgError::Cedar(format!("/{name}")))?;
            fields.push((name.clone(), facts));
        }
        RestrictedExpression::new_record(fields)
            .map(Some)
            .map_err(|_| ArgError::Cedar("/".to_owned()))
    }

    /// The `context.facts` record (facts about each declared argument present in `args`), or
    /// `None` when the manifest declares none.
    pub fn facts_to_cedar(&self, args: &Value) -> Result<Option<RestrictedExpression>, ArgError> {
        facts::facts_to_cedar(&self.facts, args).map_err(|_| ArgError::Cedar("/".to_owned()))
    }

    /// The facts its manifest declares, of `args` (what `context.facts` holds).
    pub fn facts(&self, args: &Value) -> facts::Facts {
        facts::facts_of(&self.facts, args)
    }

    /// The top-level arguments policies can read (typed in `context.args`), with whether each
    /// is required.
    pub fn typed_args(&self) -> impl Iterator<Item = (&str, bool, &CedarType)> {
        self.args_type
            .iter()
            .map(|a| (a.name.as_str(), a.required, &a.ty))
    }

    /// The top-level arguments that can hold text: typed ones with a string in them (a
    /// string, or a set or record with strings in it), then any other whose schema allows a
    /// string, array or object (untyped ones, not in `context.args`; free-form objects whose
    /// members Cedar does not type). The attributes
    /// of `context.provenance`, with whether each is required: provenance reads every string
    /// leaf of a value, typed or not.
    pub fn text_args(&self) -> impl Iterator<Item = (&str, bool)> {
        let typed = self
            .args_type
            .iter()
            .filter(|a| a.ty.holds_text())
            .map(|a| (a.name.as_str(), a.required));
        let required: Vec<&str> = self
            .input_schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let untyped = self
            .input_schema
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter(|(name, sub)| {
                !self
                    .args_type
                    .iter()
                    .any(|a| &a.name == *name && a.ty.holds_text())
                    && args::may_hold_text(sub)
            })
            .map(move |(name, _)| (name.as_str(), required.contains(&name.as_str())));
        typed.chain(untyped)
    }

    /// The top-level arguments provenance cannot trace: those whose schema allows only
    /// numbers, booleans or null.
    pub fn untraced_args(&self) -> Vec<&str> {
        let traced: Vec<&str> = self.text_args().map(|(n, _)| n).collect();
        self.input_schema
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(n, _)| n.as_str())
            .filter(|n| !traced.contains(n))
            .collect()
    }

    /// The text arguments present in `args`, with their values as policies see them (path
    /// arguments normalized, so `a/x/../b` is traced as `a/b`): what provenance traces.
    pub fn traced_values<'a>(
        &'a self,
        args: &'a Value,
    ) -> Vec<(&'a str, std::borrow::Cow<'a, Value>)> {
        self.text_args()
            .filter_map(|(name, _)| {
                let v = args.get(name)?;
                let normalized = self
                    .path_args
                    .iter()
                    .any(|p| p == name)
                    .then(|| {
                        v.as_str()
                            .and_then(|s| crate::paths::normalize_path(s).ok())
                    })
                    .flatten();
                Some((
                    name,
                    normalized.map_or(std::borrow::Cow::Borrowed(v), |n| {
                        std::borrow::Cow::Owned(Value::String(n))
                    }),
                ))
            })
            .collect()
    }

    /// Converts validated `args` into the Cedar `context.args` record.
    pub fn args_to_cedar(&self, args: &Value) -> Result<RestrictedExpression, ArgError> {
        args::record_to_expr(&self.args_type, args, "")
    }
}
