//! From an upstream's live `tools/list` and its overlay (`schemas/mcp/<upstream>.json`) to
//! tool manifests (`schemas/tools/<prefix><separator><tool>.json`), which the one manifest
//! compiler then types for Cedar like any other tool. `toolgate mcp sync` writes them.
//!
//! A tool's governance comes from its overlay entry first, then from its MCP annotations:
//! `readOnlyHint: true` → `read`, risk `low`; `destructiveHint: true` → `destructive`, risk
//! `high`; both hints `false` → `write`, risk `medium`. `openWorldHint` is kept and reported.
//! A tool that neither classifies is not exposed (default deny), nor is one whose overlay
//! says `"expose": false`.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::Descriptor;

/// `schemas/mcp/<upstream>.json`: what the team decided about an upstream's tools.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Overlay {
    /// Per tool, by its name at the upstream.
    #[serde(default)]
    pub tools: BTreeMap<String, OverlayEntry>,
}

/// One tool's overlay entry; every field is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverlayEntry {
    /// `false`: never exposed, whatever its annotations say.
    pub expose: Option<bool>,
    /// `low`, `medium`, `high` or `critical`.
    pub risk: Option<String>,
    /// `read`, `write` or `destructive`.
    pub classification: Option<String>,
    /// Top-level string arguments that are paths (normalized and jailed for policies).
    pub path_args: Option<Vec<String>>,
    /// `limits` of the manifest (`timeout_ms`, `max_output_bytes`, `rate`).
    pub limits: Option<Value>,
    /// `output_fields` of the manifest: which parts of the MCP result reach the agent.
    pub output_fields: Option<Value>,
}

impl Overlay {
    /// Parses an overlay file's text.
    pub fn parse(text: &str) -> Result<Overlay, String> {
        serde_json::from_str(text).map_err(|e| {
            format!(
                "line {} column {}: {e} (an overlay is {{\"tools\": {{\"<tool>\": {{\"risk\", \"classification\", \"path_args\", \"limits\", \"output_fields\", \"expose\"}}}}}})",
                e.line(),
                e.column()
            )
        })
    }
}

/// An upstream's tool or prompt name as clients see it: `<prefix><separator><name>`, or the
/// name itself for an upstream mounted without a prefix (`prefix = ""`).
pub fn mounted(prefix: &str, separator: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}{separator}{name}")
    }
}

/// What becomes of one upstream tool.
#[derive(Debug, Clone, PartialEq)]
pub enum Placed {
    /// Exposed: the manifest to write, under its namespaced name.
    Exposed {
        /// `<prefix><separator><tool>`.
        name: String,
        /// The manifest.
        manifest: Value,
        /// `overlay` or `annotations`: where its classification came from.
        from: &'static str,
        /// It declares `openWorldHint: true` (reaches beyond the local system).
        open_world: bool,
    },
    /// Not exposed, and why.
    Hidden {
        /// The tool's name at the upstream.
        tool: String,
        /// Why.
        why: String,
    },
}

/// Places every descriptor of `upstream` (its tools named `<prefix><separator><tool>`).
pub fn place(
    upstream: &str,
    prefix: &str,
    separator: &str,
    descriptors: &[Descriptor],
    overlay: &Overlay,
) -> Vec<Placed> {
    descriptors
        .iter()
        .map(|d| place_one(upstream, prefix, separator, d, overlay.tools.get(&d.name)))
        .collect()
}

fn place_one(
    upstream: &str,
    prefix: &str,
    separator: &str,
    d: &Descriptor,
    entry: Option<&OverlayEntry>,
) -> Placed {
    let hidden = |why: String| Placed::Hidden {
        tool: d.name.clone(),
        why,
    };
    let plain = !d.name.is_empty()
        && d.name.len() <= 128
        && !d.name.starts_with('.')
        && d.name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !plain {
        return hidden(
            "its name is not 1 to 128 of [A-Za-z0-9_.-] (the MCP tool-name rule)".to_owned(),
        );
    }
    if entry.and_then(|e| e.expose) == Some(false) {
        return hidden("its overlay entry says `\"expose\": false`".to_owned());
    }
    let hints = d.raw.get("annotations").and_then(Value::as_object);
    let hint = |k: &str| hints.and_then(|h| h.get(k)).and_then(Value::as_bool);
    let from_hints = match (hint("readOnlyHint"), hint("destructiveHint")) {
        (Some(true), _) => Some(("read", "low")),
        (_, Some(true)) => Some(("destructive", "high")),
        (Some(false), Some(false)) => Some(("write", "medium")),
        _ => None,
    };
    let classification = entry
        .and_then(|e| e.classification.clone())
        .or_else(|| from_hints.map(|(c, _)| c.to_owned()));
    let Some(classification) = classification else {
        return hidden(
            "neither its overlay entry nor its annotations (readOnlyHint, destructiveHint) classify it; add it to the overlay with a `classification` and `risk` to expose it".to_owned(),
        );
    };
    let risk = entry.and_then(|e| e.risk.clone()).or_else(|| {
        from_hints
            .filter(|(c, _)| *c == classification)
            .map(|(_, r)| r.to_owned())
    });
    let Some(risk) = risk else {
        return hidden(format!(
            "its overlay sets `classification: {classification}` but no `risk`; add one"
        ));
    };
    let from = if entry.is_some_and(|e| e.classification.is_some()) {
        "overlay"
    } else {
        "annotations"
    };
    let name = mounted(prefix, separator, &d.name);
    let open_world = hint("openWorldHint") == Some(true);
    let description = d
        .raw
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut m = Map::new();
    m.insert("name".to_owned(), json!(name));
    if let Some(t) = d.raw.get("title").filter(|t| t.is_string()) {
        m.insert("title".to_owned(), t.clone());
    }
    m.insert(
        "description".to_owned(),
        json!(if description.is_empty() {
            format!("`{}` of the MCP upstream `{upstream}`", d.name)
        } else {
            description.to_owned()
        }),
    );
    // Arguments the schema does not declare are refused before the upstream sees them:
    // policies can read every argument that reaches it.
    let mut input = d
        .raw
        .get("inputSchema")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}));
    if let Some(obj) = input.as_object_mut()
        && !obj.contains_key("additionalProperties")
    {
        obj.insert("additionalProperties".to_owned(), json!(false));
    }
    m.insert("inputSchema".to_owned(), input);
    if let Some(out) = d.raw.get("outputSchema").filter(|o| o.is_object()) {
        m.insert("outputSchema".to_owned(), out.clone());
    }
    // The hints as toolgate classifies the tool (an overlay may disagree with the upstream).
    let mut annotations = Map::new();
    annotations.insert("readOnlyHint".to_owned(), json!(classification == "read"));
    if classification != "read" {
        annotations.insert(
            "destructiveHint".to_owned(),
            json!(classification == "destructive"),
        );
    }
    for k in ["title", "idempotentHint", "openWorldHint"] {
        if let Some(v) = hints.and_then(|h| h.get(k)) {
            annotations.insert(k.to_owned(), v.clone());
        }
    }
    m.insert("annotations".to_owned(), Value::Object(annotations));
    m.insert("risk".to_owned(), json!(risk));
    m.insert("classification".to_owned(), json!(classification));
    if let Some(e) = entry {
        if let Some(l) = &e.limits {
            m.insert("limits".to_owned(), l.clone());
        }
        if let Some(p) = &e.path_args {
            m.insert("path_args".to_owned(), json!(p));
        }
        if let Some(o) = &e.output_fields {
            m.insert("output_fields".to_owned(), o.clone());
        }
    }
    m.insert(
        "mcp".to_owned(),
        json!({"upstream": upstream, "tool": d.name, "pin": d.pin}),
    );
    Placed::Exposed {
        name,
        manifest: Value::Object(m),
        from,
        open_world,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(raw: Value) -> Descriptor {
        Descriptor::new(raw)
    }

    #[test]
    fn annotations_classify_and_unclassified_tools_are_hidden() {
        let tools = [
            d(
                json!({"name": "r", "description": "x", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true, "openWorldHint": true}}),
            ),
            d(
                json!({"name": "w", "inputSchema": {"type": "object"}, "annotations": {"destructiveHint": true}}),
            ),
            d(json!({"name": "u", "inputSchema": {"type": "object"}})),
        ];
        let placed = place("up", "up", ".", &tools, &Overlay::default());
        match &placed[0] {
            Placed::Exposed {
                name,
                manifest,
                from,
                open_world,
            } => {
                assert_eq!(name, "up.r");
                assert_eq!(manifest["risk"], "low");
                assert_eq!(manifest["classification"], "read");
                assert_eq!(manifest["mcp"]["pin"], json!(tools[0].pin));
                assert_eq!(*from, "annotations");
                assert!(*open_world);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(&placed[1], Placed::Exposed { manifest, .. } if manifest["classification"] == "destructive" && manifest["risk"] == "high")
        );
        assert!(matches!(&placed[2], Placed::Hidden { tool, .. } if tool == "u"));
    }

    #[test]
    fn the_overlay_overrides_annotations_and_can_hide() {
        let overlay = Overlay::parse(
            r#"{"tools": {"r": {"classification": "write", "risk": "high", "path_args": ["p"]}, "u": {"expose": false}}}"#,
        )
        .expect("overlay");
        let tools = [
            d(
                json!({"name": "r", "inputSchema": {"type": "object", "properties": {"p": {"type": "string"}}}, "annotations": {"readOnlyHint": true}}),
            ),
            d(
                json!({"name": "u", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}),
            ),
        ];
        let placed = place("up", "x", "__", &tools, &overlay);
        assert!(
            matches!(&placed[0], Placed::Exposed { name, manifest, from: "overlay", .. } if name == "x__r" && manifest["classification"] == "write" && manifest["annotations"]["readOnlyHint"] == false && manifest["path_args"] == json!(["p"]))
        );
        assert!(matches!(&placed[1], Placed::Hidden { .. }));
        assert!(Overlay::parse(r#"{"tools": {"r": {"riks": "low"}}}"#).is_err());
    }
}
