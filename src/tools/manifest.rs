//! The manifest file format (raw, serde, unknown fields rejected) and its conversion into a
//! compiled [`Tool`]. Every check a manifest can fail happens here, once, at load.

use std::fmt;

use cedar_policy::{EntityId, EntityTypeName, EntityUid};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Tool;
use super::args::{CedarType, record_attrs};

/// Risk tier of a tool, visible to policies as `resource.risk`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    /// Runs unattended.
    Low,
    /// Runs unattended within argument limits.
    Medium,
    /// Needs human approval.
    High,
    /// Needs approval from a specially eligible human.
    Critical,
}

impl Risk {
    /// The lowercase name used in Cedar and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
            Risk::Critical => "critical",
        }
    }
}

/// What a tool does to the world; each is a Cedar action group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Classification {
    /// Observes only.
    Read,
    /// Changes state.
    Write,
    /// Changes state irreversibly.
    Destructive,
}

impl Classification {
    /// The lowercase name, which is also the Cedar action group's id.
    pub fn as_str(self) -> &'static str {
        match self {
            Classification::Read => "read",
            Classification::Write => "write",
            Classification::Destructive => "destructive",
        }
    }

    /// Every classification, in schema order.
    pub const ALL: [Classification; 3] = [
        Classification::Read,
        Classification::Write,
        Classification::Destructive,
    ];
}

impl fmt::Display for Risk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Execution limits declared by a manifest.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock limit for one execution.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Output beyond this is cut off.
    #[serde(default = "default_max_output_bytes")]
    pub max_output_bytes: u64,
    /// Calls per principal to this tool (overrides `[rate_limits] per_principal_tool`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<crate::limits::Rate>,
}

fn default_timeout_ms() -> u64 {
    30_000
}
fn default_max_output_bytes() -> u64 {
    1_048_576
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout_ms: default_timeout_ms(),
            max_output_bytes: default_max_output_bytes(),
            rate: None,
        }
    }
}

/// MCP tool definition (`name`, `description`, `inputSchema`, `outputSchema`, `annotations`)
/// plus toolgate's governance fields.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    name: String,
    #[serde(default)]
    title: Option<String>,
    description: String,
    #[serde(rename = "inputSchema")]
    input_schema: Value,
    #[serde(rename = "outputSchema", default)]
    output_schema: Option<Value>,
    #[serde(default)]
    annotations: Option<RawAnnotations>,
    risk: Risk,
    classification: Classification,
    #[serde(default)]
    limits: Limits,
    /// Top-level string arguments holding paths relative to the service root.
    #[serde(default)]
    path_args: Vec<String>,
    /// Which parts of a reported result reach the agent.
    #[serde(default)]
    output_fields: Option<super::FieldPolicy>,
    /// How toolgate runs the tool itself (`POST /v1/execute`).
    #[serde(default)]
    executor: Option<crate::tools::RawExecutor>,
    /// A file tool toolgate implements itself (instead of an `executor`).
    #[serde(default)]
    builtin: Option<crate::tools::Builtin>,
    /// The MCP upstream tool it forwards to (written by `toolgate mcp sync`).
    #[serde(default)]
    mcp: Option<super::McpBinding>,
    /// Derived facts per top-level argument (`context.facts.<arg>`).
    #[serde(default)]
    facts: std::collections::BTreeMap<String, Vec<super::FactKind>>,
    /// The tool_call gate's rules for this tool and its arguments.
    #[serde(default)]
    gate: super::GateOverrides,
}

/// MCP tool annotations: hints, checked against the classification so they cannot mislead.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawAnnotations {
    #[serde(default)]
    #[expect(
        dead_code,
        reason = "accepted for MCP compatibility; not used in decisions"
    )]
    title: Option<String>,
    #[serde(default)]
    read_only_hint: Option<bool>,
    #[serde(default)]
    destructive_hint: Option<bool>,
    #[serde(default)]
    #[expect(
        dead_code,
        reason = "accepted for MCP compatibility; not used in decisions"
    )]
    idempotent_hint: Option<bool>,
    #[serde(default)]
    #[expect(
        dead_code,
        reason = "accepted for MCP compatibility; not used in decisions"
    )]
    open_world_hint: Option<bool>,
}

/// Names that would collide with the Cedar action groups or the approval action.
const RESERVED_NAMES: [&str; 4] = ["read", "write", "destructive", "approve"];

/// A manifest that cannot be loaded. `line` is set for JSON syntax and shape errors.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ManifestError {
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub help: Option<String>,
    /// 1-based line in the manifest file, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
}

impl ManifestError {
    fn new(message: impl Into<String>, help: impl Into<String>) -> Self {
        ManifestError {
            message: message.into(),
            help: Some(help.into()),
            line: None,
            column: None,
        }
    }
}

/// Parses and checks one manifest file's text. `file_stem` must equal the tool name, so a
/// reviewer finds `read_file` in `read_file.json`.
///
/// `programs` is the allowlist of executables an `executor` may name (`None`: not checked,
/// for `toolgate schema`, which only needs the argument types).
pub fn compile_manifest(
    text: &str,
    file_stem: &str,
    programs: Option<&crate::tools::Programs>,
) -> Result<Tool, ManifestError> {
    let mut raw: RawManifest = serde_json::from_str(text).map_err(|e| ManifestError {
        message: format!("invalid manifest: {e}"),
        help: Some(
            "a manifest is an MCP tool definition (`name`, `description`, `inputSchema`, \
             `outputSchema`, `annotations`) plus `risk`, `classification`, `limits`, `path_args`, `facts`, `gate`, `output_fields`, `executor` or `builtin`"
                .to_owned(),
        ),
        line: Some(e.line()),
        column: Some(e.column()),
    })?;
    check_name(&raw.name, file_stem, raw.mcp.is_some())?;
    if raw.mcp.is_some() && (raw.executor.is_some() || raw.builtin.is_some()) {
        return Err(ManifestError::new(
            "a manifest has one of `mcp`, `executor` and `builtin`",
            "an `mcp` tool is run by its upstream; remove `executor` / `builtin`",
        ));
    }
    check_annotations(&raw)?;
    check_input_schema(&raw)?;
    if raw.limits.timeout_ms == 0 || raw.limits.max_output_bytes == 0 {
        return Err(ManifestError::new(
            "`limits` values must be greater than zero",
            "omit a limit to use its default",
        ));
    }
    if let Some(rate) = &raw.limits.rate
        && let Err(why) = rate.check()
    {
        return Err(ManifestError::new(
            format!("`limits.rate`: {why}"),
            "e.g. `\"rate\": {\"per_second\": 2, \"burst\": 10}` or `{\"per_day\": 1000}`, or omit it for the configured default",
        ));
    }
    let validator = compile_schema(&raw.input_schema, "inputSchema")?;
    let output_validator = raw
        .output_schema
        .as_ref()
        .map(|out| compile_schema(out, "outputSchema"))
        .transpose()?;
    if let Some(fields) = &raw.output_fields {
        fields.check().map_err(|m| {
            ManifestError::new(
                m,
                "globs are dotted paths; `*` is one key or index, `**` any number",
            )
        })?;
    }
    if let Some(builtin) = raw.builtin {
        check_builtin(&raw, builtin)?;
    }
    let executor = match raw.executor {
        None => None,
        Some(ex) => {
            let any = crate::tools::Programs::any();
            let list = programs.unwrap_or(&any);
            Some(
                ex.compile(&raw.input_schema, &raw.path_args, list)
                    .map_err(|(m, h)| ManifestError::new(m, h))?,
            )
        }
    };
    raw.gate
        .check(&raw.input_schema)
        .map_err(|(m, h)| ManifestError::new(m, h))?;
    let facts = super::facts::compile_facts(std::mem::take(&mut raw.facts), &raw.input_schema)
        .map_err(|(m, h)| ManifestError::new(m, h))?;
    let action_uid = uid("Action", &raw.name)?;
    let resource_uid = uid("Tool", &raw.name)?;
    let description = match &raw.title {
        Some(t) if !raw.description.starts_with(t.as_str()) => {
            format!("{t}: {}", raw.description)
        }
        _ => raw.description.clone(),
    };
    Ok(Tool {
        args_type: record_attrs(&raw.input_schema),
        name: raw.name,
        description,
        risk: raw.risk,
        classification: raw.classification,
        limits: raw.limits,
        input_schema: raw.input_schema,
        path_args: raw.path_args,
        validator,
        output_validator,
        output_fields: raw.output_fields,
        executor,
        builtin: raw.builtin,
        mcp: raw.mcp,
        facts,
        gate: raw.gate,
        action_uid,
        resource_uid,
    })
}

/// A built-in tool's manifest must describe what the built-in does: no `executor` beside it,
/// only arguments it knows, the ones it needs required, `path` jailed, and a tool that
/// changes files not classified `read`.
fn check_builtin(raw: &RawManifest, builtin: crate::tools::Builtin) -> Result<(), ManifestError> {
    if raw.executor.is_some() {
        return Err(ManifestError::new(
            "a manifest has either `executor` or `builtin`, not both",
            "`builtin` tools are run by toolgate itself; remove `executor`",
        ));
    }
    let (known, needed) = builtin.arguments();
    let props = raw
        .input_schema
        .get("properties")
        .and_then(Value::as_object);
    if let Some(unknown) = props
        .into_iter()
        .flat_map(|p| p.keys())
        .find(|k| !known.contains(&k.as_str()))
    {
        return Err(ManifestError::new(
            format!("`inputSchema` offers `{unknown}`, which this built-in does not take"),
            format!("its arguments are: {}", known.join(", ")),
        ));
    }
    let required: Vec<&str> = raw
        .input_schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(missing) = needed.iter().find(|n| !required.contains(n)) {
        return Err(ManifestError::new(
            format!("`inputSchema` must require `{missing}` for this built-in"),
            "add it to `required` (and to `properties`)",
        ));
    }
    if props.is_some_and(|p| p.contains_key("path")) && !raw.path_args.iter().any(|a| a == "path") {
        return Err(ManifestError::new(
            "a built-in file tool's `path` must be listed in `path_args`",
            "add `\"path_args\": [\"path\"]` so policies see the normalized path",
        ));
    }
    if builtin.changes_files() && raw.classification == Classification::Read {
        return Err(ManifestError::new(
            "this built-in changes files and cannot be classified `read`",
            "use `write` (or `destructive` for deletions)",
        ));
    }
    Ok(())
}

/// Tool names follow the OpenAI function-name rule (1 to 64 of `[A-Za-z0-9_-]`); an MCP
/// upstream's tool may also hold `.` and be up to 128 long (the MCP rule), for the
/// `<upstream>.<tool>` names.
fn check_name(name: &str, file_stem: &str, mcp: bool) -> Result<(), ManifestError> {
    let max = if mcp { 128 } else { 64 };
    let valid = !name.is_empty()
        && name.len() <= max
        && !name.starts_with('.')
        && !name.ends_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || (mcp && c == '.'));
    if !valid {
        return Err(ManifestError::new(
            format!("tool name `{name}` is not valid"),
            if mcp {
                "use 1 to 128 characters from a-z, A-Z, 0-9, `_`, `-` and `.` (the MCP tool-name rule)"
            } else {
                "use 1 to 64 characters from a-z, A-Z, 0-9, `_` and `-` (the OpenAI function-name rule)"
            },
        ));
    }
    if RESERVED_NAMES.contains(&name) {
        return Err(ManifestError::new(
            format!("tool name `{name}` is reserved"),
            "`read`, `write`, `destructive` and `approve` are Cedar actions of toolgate itself",
        ));
    }
    if name != file_stem {
        return Err(ManifestError::new(
            format!("tool `{name}` is declared in a file named `{file_stem}.json`"),
            format!("rename the file to `{name}.json`"),
        ));
    }
    Ok(())
}

fn check_annotations(raw: &RawManifest) -> Result<(), ManifestError> {
    let Some(a) = &raw.annotations else {
        return Ok(());
    };
    let read = raw.classification == Classification::Read;
    let destructive = raw.classification == Classification::Destructive;
    if a.read_only_hint.is_some_and(|h| h != read) {
        return Err(ManifestError::new(
            format!(
                "`annotations.readOnlyHint` contradicts `classification: {}`",
                raw.classification.as_str()
            ),
            "make the hint agree with the classification, or drop the hint",
        ));
    }
    if a.destructive_hint == Some(true) && !destructive {
        return Err(ManifestError::new(
            format!(
                "`annotations.destructiveHint` contradicts `classification: {}`",
                raw.classification.as_str()
            ),
            "classify the tool as `destructive`, or drop the hint",
        ));
    }
    Ok(())
}

fn check_input_schema(raw: &RawManifest) -> Result<(), ManifestError> {
    if raw.input_schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(ManifestError::new(
            "`inputSchema` must have `\"type\": \"object\"`",
            "tool arguments are a JSON object; describe each argument under `properties`",
        ));
    }
    let props = raw
        .input_schema
        .get("properties")
        .and_then(Value::as_object);
    for arg in &raw.path_args {
        let ty = props
            .and_then(|p| p.get(arg))
            .map(CedarType::from_json_schema);
        if ty != Some(Some(CedarType::String)) {
            return Err(ManifestError::new(
                format!("path argument `{arg}` is not a string property of `inputSchema`"),
                "list in `path_args` only top-level properties declared as `\"type\": \"string\"`",
            ));
        }
    }
    Ok(())
}

/// Refuses every external `$ref`: a schema never reads the network or the disk.
struct NoRetrieval;

impl jsonschema::Retrieve for NoRetrieval {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(
            format!("external reference `{uri}` is not allowed: schemas must be self-contained")
                .into(),
        )
    }
}

fn compile_schema(schema: &Value, field: &str) -> Result<jsonschema::Validator, ManifestError> {
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .with_retriever(NoRetrieval)
        .build(schema)
        .map_err(|e| {
            ManifestError::new(
                format!("`{field}` is not a valid JSON Schema (draft 2020-12): {e}"),
                "external `$ref`s are refused; put shared definitions under `$defs`",
            )
        })
}

fn uid(ty: &str, id: &str) -> Result<EntityUid, ManifestError> {
    let ty: EntityTypeName = ty.parse().map_err(|e| {
        ManifestError::new(format!("internal: entity type `{ty}`: {e}"), "report a bug")
    })?;
    Ok(EntityUid::from_type_name_and_id(ty, EntityId::new(id)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn manifest(extra: Value) -> String {
        let mut m = json!({
            "name": "read_file",
            "description": "Read a file",
            "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
            "risk": "low",
            "classification": "read",
            "path_args": ["path"]
        });
        if let (Some(m), Some(extra)) = (m.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                m.insert(k.clone(), v.clone());
            }
        }
        m.to_string()
    }

    #[test]
    fn a_builtin_manifest_names_its_tool() {
        let tool = compile_manifest(
            &manifest(json!({"builtin": "read_file"})),
            "read_file",
            None,
        )
        .unwrap();
        assert_eq!(tool.builtin, Some(crate::tools::Builtin::ReadFile));
    }

    #[test]
    fn compiles_a_good_manifest() {
        let tool = compile_manifest(&manifest(json!({})), "read_file", None).unwrap();
        assert_eq!(tool.risk, Risk::Low);
        assert_eq!(tool.action_uid.to_string(), r#"Action::"read_file""#);
        assert!(tool.check_args(&json!({"path": "a"})).is_empty());
    }

    #[test]
    fn rejects_bad_manifests_with_a_reason() {
        let cases = [
            (json!({"riks": "low"}), "unknown field"),
            (json!({"risk": "severe"}), "unknown variant"),
            (json!({"name": "approve"}), "reserved"),
            (json!({"path_args": ["nope"]}), "path argument"),
            (json!({"inputSchema": {"type": "string"}}), "must have"),
            (
                json!({"inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "$ref": "https://example.com/s.json"}}),
                "not a valid JSON Schema",
            ),
            (
                json!({"inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "$ref": "file:///etc/passwd"}}),
                "not a valid JSON Schema",
            ),
            (
                json!({"annotations": {"readOnlyHint": false}}),
                "readOnlyHint",
            ),
            (json!({"limits": {"timeout_ms": 0}}), "greater than zero"),
            // Built-ins: the manifest must describe what the built-in does.
            (json!({"builtin": "cat_file"}), "unknown variant"),
            (
                json!({"builtin": "read_file", "executor": {"program": "cat", "argv": ["{path}"]}}),
                "not both",
            ),
            (
                json!({"builtin": "read_file", "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}, "follow": {"type": "boolean"}}, "required": ["path"]}}),
                "`follow`",
            ),
            (
                json!({"builtin": "read_file", "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}}),
                "must require `path`",
            ),
            (
                json!({"builtin": "read_file", "path_args": []}),
                "`path_args`",
            ),
            (
                json!({"builtin": "delete_file"}),
                "cannot be classified `read`",
            ),
        ];
        for (extra, want) in cases {
            let stem = extra
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("read_file")
                .to_owned();
            let err = compile_manifest(&manifest(extra.clone()), &stem, None).unwrap_err();
            assert!(err.message.contains(want), "{extra}: {}", err.message);
        }
    }

    #[test]
    fn argument_errors_never_quote_the_value() {
        let schema = json!({"inputSchema": {"type": "object", "properties": {
            "path": {"type": "string", "maxLength": 3}, "n": {"type": "integer"}}, "required": ["path"],
            "additionalProperties": false}});
        let tool = compile_manifest(&manifest(schema), "read_file", None).unwrap();
        let errs =
            tool.check_args(&json!({"path": "sk-live-SECRETVALUE", "n": "AKIASECRET", "x": 1}));
        assert_eq!(errs.len(), 3, "{errs:?}");
        for e in &errs {
            assert!(!e.message.contains("SECRET"), "{e:?}");
        }
    }
}
