//! Deployment data: the attributes agents and humans carry, declared by users in
//! `schemas/attributes.json` and merged into the generated Cedar schema, so `entities.json`
//! can give an owner `contacts` or `payees` and policies can read them
//! (`principal.owner.contacts`).
//!
//! Owns: the file's format (raw JSON → validated [`Attributes`]) and the Cedar type grammar it
//! accepts. The file is optional; without it agents and humans carry only the built-in
//! `owner`.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use super::diag::Problem;

/// File name of the attribute declarations inside the schemas directory.
pub const ATTRIBUTES_FILE: &str = "attributes.json";

/// The entity types users may extend.
const EXTENSIBLE: [&str; 2] = ["Agent", "Human"];

/// One declared attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribute {
    /// Its name.
    pub name: String,
    /// Whether entities must give it (a name written without a trailing `?`).
    pub required: bool,
    /// Its Cedar type, as the schema writes it.
    pub ty: String,
}

/// Every declared attribute, per extensible entity type, sorted by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    /// `Agent`'s attributes (besides the built-in `owner`).
    pub agent: Vec<Attribute>,
    /// `Human`'s attributes.
    pub human: Vec<Attribute>,
}

impl Attributes {
    /// The schema text of an entity type's extra attributes (one line each, indented).
    pub fn lines(list: &[Attribute]) -> String {
        let mut out = String::new();
        for a in list {
            let _ = writeln!(
                out,
                "  {}{}: {},",
                a.name,
                if a.required { "" } else { "?" },
                a.ty
            );
        }
        out
    }

    /// Parses the file's text; an error names the line and what to write instead.
    pub fn parse(path: &Path, text: &str) -> Result<Attributes, Box<Problem>> {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            Box::new(Problem::at_line(
                path,
                text,
                e.line(),
                e.column(),
                format!("not valid JSON: {e}"),
                None,
            ))
        })?;
        let locate = |needle: &str, message: String, help: &str| {
            let (line, column) = find(text, needle);
            Box::new(Problem::at_line(
                path,
                text,
                line,
                column,
                message,
                Some(help.to_owned()),
            ))
        };
        let Value::Object(types) = value else {
            return Err(Box::new(Problem::in_file(
                path,
                "must be a JSON object keyed by entity type",
                Some(r#"write e.g. {"Human": {"contacts": "Set<String>"}}"#.to_owned()),
            )));
        };
        let mut out = Attributes::default();
        for (entity, attrs) in types {
            let list = match entity.as_str() {
                "Agent" => &mut out.agent,
                "Human" => &mut out.human,
                _ => {
                    return Err(locate(
                        &format!("\"{entity}\""),
                        format!("`{entity}` is not an entity type that carries attributes"),
                        &format!("declare attributes of {}", EXTENSIBLE.join(" or ")),
                    ));
                }
            };
            let Value::Object(attrs) = attrs else {
                return Err(locate(
                    &format!("\"{entity}\""),
                    format!("`{entity}` must map attribute names to Cedar types"),
                    r#"write e.g. {"contacts": "Set<String>", "email?": "String"}"#,
                ));
            };
            for (raw_name, ty) in attrs {
                let (name, required) = match raw_name.strip_suffix('?') {
                    Some(n) => (n.to_owned(), false),
                    None => (raw_name.clone(), true),
                };
                let at = format!("\"{raw_name}\"");
                if !is_ident(&name) {
                    return Err(locate(
                        &at,
                        format!("`{raw_name}` is not a valid attribute name"),
                        "use letters, digits and `_`, starting with a letter (`?` at the end makes it optional)",
                    ));
                }
                if entity == "Agent" && name == "owner" {
                    return Err(locate(
                        &at,
                        "`owner` is built in (an agent's owner is a Human)".to_owned(),
                        "remove it from attributes.json; set it in entities.json",
                    ));
                }
                if list.iter().any(|a: &Attribute| a.name == name) {
                    return Err(locate(
                        &at,
                        format!("`{entity}` declares `{name}` twice"),
                        "keep one declaration",
                    ));
                }
                let Some(text_ty) = ty.as_str() else {
                    return Err(locate(
                        &at,
                        format!("the type of `{entity}.{name}` must be a string"),
                        TYPES_HELP,
                    ));
                };
                let Some(ty) = cedar_type(text_ty) else {
                    return Err(locate(
                        &at,
                        format!(
                            "`{text_ty}` (type of `{entity}.{name}`) is not a type attributes can have"
                        ),
                        TYPES_HELP,
                    ));
                };
                list.push(Attribute { name, required, ty });
            }
            list.sort_by(|a, b| a.name.cmp(&b.name));
        }
        Ok(out)
    }

    /// Reads `<schemas_dir>/attributes.json`; a missing file declares nothing.
    pub fn read(schemas_dir: &Path) -> Result<Attributes, Box<Problem>> {
        let path = schemas_dir.join(ATTRIBUTES_FILE);
        if std::fs::symlink_metadata(&path).is_err() {
            return Ok(Attributes::default());
        }
        let text =
            super::read_source(&path).map_err(|e| Problem::in_file(&path, e.to_string(), None))?;
        Attributes::parse(&path, &text)
    }
}

const TYPES_HELP: &str = "use String, Long, Bool, decimal, Human, Agent, Role or Set<…> of one";

/// The canonical schema text of a type written in `attributes.json`, if it is one.
fn cedar_type(text: &str) -> Option<String> {
    let t = text.trim();
    if let Some(inner) = t.strip_prefix("Set<").and_then(|r| r.strip_suffix('>')) {
        return cedar_type(inner).map(|i| format!("Set<{i}>"));
    }
    match t {
        "String" | "Long" | "Bool" | "Human" | "Agent" | "Role" => Some(t.to_owned()),
        "decimal" | "Decimal" => Some("decimal".to_owned()),
        _ => None,
    }
}

fn is_ident(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !matches!(
            name,
            "true" | "false" | "if" | "then" | "else" | "in" | "is" | "like" | "has"
        )
}

/// 1-based line and column of the first `needle` in `text` (1:1 when absent).
fn find(text: &str, needle: &str) -> (usize, usize) {
    let Some(at) = text.find(needle) else {
        return (1, 1);
    };
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let column = at - before.rfind('\n').map_or(0, |n| n + 1) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_become_schema_lines_and_mistakes_name_their_line() {
        let p = Path::new("attributes.json");
        let a = Attributes::parse(
            p,
            r#"{"Human": {"payees": "Set<String>", "email?": "String"}, "Agent": {"limit": "decimal"}}"#,
        )
        .unwrap();
        assert_eq!(
            Attributes::lines(&a.human),
            "  email?: String,\n  payees: Set<String>,\n"
        );
        assert_eq!(a.agent[0].ty, "decimal");
        let bad = Attributes::parse(p, "{\n \"Human\": {\n  \"x\": \"Set<Int>\"}}").unwrap_err();
        assert_eq!(bad.line, Some(3));
        assert!(bad.message.contains("Set<Int>"), "{}", bad.message);
        assert!(Attributes::parse(p, r#"{"Tool": {}}"#).is_err());
        assert!(Attributes::parse(p, r#"{"Agent": {"owner": "Human"}}"#).is_err());
        assert!(Attributes::parse(p, r#"{"Agent": {"a b": "String"}}"#).is_err());
    }
}
