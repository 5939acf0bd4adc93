//! Writes a synthetic policy set of `tools` tools with `per_tool` policies each (plus the
//! shipped entities), for the scale benchmarks and the load script. Every tool's policies have
//! the same shape, so a decision about one tool faces the same slice whatever the set's size.

use std::fmt::Write as _;
use std::path::Path;

/// Writes `dir/policies` and `dir/schemas`.
pub fn write_scaled_set(
    repo: &Path,
    dir: &Path,
    tools: usize,
    per_tool: usize,
) -> std::io::Result<()> {
    let policies = dir.join("policies");
    let manifests = dir.join("schemas/tools");
    std::fs::create_dir_all(&policies)?;
    std::fs::create_dir_all(&manifests)?;
    std::fs::copy(
        repo.join("policies/entities.json"),
        policies.join("entities.json"),
    )?;
    // The shipped entities' other roles, each named by one approval policy (a role no policy
    // names is a load error); `approve` has a slice of its own, so tool decisions see none of them.
    let mut roles = String::new();
    for role in [
        "release_manager",
        "product_owner",
        "approver",
        "director",
        "auditor",
    ] {
        let _ = writeln!(
            roles,
            "@id(\"synthetic-approve-{role}\")\npermit (principal in Role::\"{role}\", action == Action::\"approve\", resource) when {{ resource.risk == \"low\" }};"
        );
    }
    std::fs::write(policies.join("roles.cedar"), roles)?;
    let risks = ["low", "medium", "high", "critical"];
    let classes = ["read", "write", "destructive"];
    let mut text = String::new();
    for i in 0..tools {
        let name = format!("t{i:04}");
        let manifest = serde_json::json!({
            "name": name,
            "description": format!("synthetic tool {i}"),
            "inputSchema": {"type": "object", "properties": {
                "path": {"type": "string", "maxLength": 4096},
                "n": {"type": "integer", "minimum": 0, "maximum": 1000000},
                "tags": {"type": "array", "items": {"type": "string"}}},
                "required": ["path"], "additionalProperties": false},
            "risk": risks.get(i % 4).copied().unwrap_or("low"),
            "classification": classes.get(i % 3).copied().unwrap_or("read"),
            "path_args": ["path"]
        });
        std::fs::write(manifests.join(format!("{name}.json")), manifest.to_string())?;
        for k in 0..per_tool {
            let a = format!("Action::\"{name}\"");
            let _ = match k % 5 {
                0 => writeln!(
                    text,
                    "@id(\"{name}-p{k}\")\npermit (principal in Role::\"developer\", action == {a}, resource) when {{ context.args has n && context.args.n < {} }};",
                    1000 + k
                ),
                1 => writeln!(
                    text,
                    "@id(\"{name}-p{k}\")\npermit (principal in Role::\"sre\", action == {a}, resource);"
                ),
                2 => writeln!(
                    text,
                    "@id(\"{name}-p{k}\")\nforbid (principal, action == {a}, resource) when {{ context.args.path like \"*secret{k}*\" }};"
                ),
                3 => writeln!(
                    text,
                    "@id(\"{name}-p{k}\")\nforbid (principal, action == {a}, resource) when {{ context.args has tags && context.args.tags.contains(\"blocked{k}\") }};"
                ),
                _ => writeln!(
                    text,
                    "@id(\"{name}-p{k}\")\nforbid (principal, action == {a}, resource) when {{ resource.risk == \"critical\" }} unless {{ context.approval.granted }};"
                ),
            };
        }
        // One file per 50 tools keeps files reviewable-sized.
        if i % 50 == 49 || i + 1 == tools {
            std::fs::write(policies.join(format!("tools-{:04}.cedar", i / 50)), &text)?;
            text.clear();
        }
    }
    let schemas = dir.join("schemas");
    let (text, _) = toolgate::policy::schema_text(&schemas)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    std::fs::write(schemas.join("toolgate.cedarschema"), text)?;
    Ok(())
}
