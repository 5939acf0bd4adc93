//! The bridge from a tool's argument JSON Schema to Cedar: which parts of the schema become the
//! typed `context.args` record, and how validated argument values become Cedar values.
//!
//! Mapping: string → String, integer → Long, boolean → Bool, array → Set of its item type,
//! object with `properties` → Record (attributes in `required` are mandatory, the rest
//! optional). Anything else (numbers, unions, `$ref`s, untyped schemas) is left out of the Cedar
//! type: JSON Schema still validates it, policies cannot read it.

use cedar_policy::RestrictedExpression;
use serde_json::Value;

/// A Cedar type that a JSON Schema fragment maps onto.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CedarType {
    /// Cedar `String`.
    String,
    /// Cedar `Long` (i64).
    Long,
    /// Cedar `Bool`.
    Bool,
    /// Cedar `Set<T>`.
    Set(Box<CedarType>),
    /// Cedar record type.
    Record(Vec<RecordAttr>),
}

/// One attribute of a Cedar record type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordAttr {
    /// Attribute name (the JSON property name).
    pub name: String,
    /// Its Cedar type.
    pub ty: CedarType,
    /// Whether the JSON Schema lists it in `required`.
    pub required: bool,
}

/// A validated argument value that Cedar cannot hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    /// Out of Cedar's `Long` range, or a non-integral number where an integer was declared.
    #[error("argument `{0}` is not an integer Cedar can hold (64-bit signed)")]
    NotALong(String),
    /// The value's JSON type does not match the declared type (schema and Cedar type disagree).
    #[error("argument `{0}` does not have the type its schema declares")]
    WrongType(String),
    /// A required argument is absent.
    #[error("argument `{0}` is required")]
    Missing(String),
    /// Cedar refused to build the value.
    #[error("argument `{0}` could not be converted for policy evaluation")]
    Cedar(String),
}

impl CedarType {
    /// Maps a JSON Schema fragment, or `None` when Cedar cannot express it.
    pub fn from_json_schema(schema: &Value) -> Option<CedarType> {
        let obj = schema.as_object()?;
        let declared = match obj.get("type") {
            Some(Value::String(t)) => t.as_str(),
            // Untyped string enums and consts are still strings.
            None if is_string_enum(obj) => "string",
            _ => return None,
        };
        match declared {
            "string" => Some(CedarType::String),
            "integer" => Some(CedarType::Long),
            "boolean" => Some(CedarType::Bool),
            "array" => {
                let items = obj.get("items")?;
                Some(CedarType::Set(Box::new(CedarType::from_json_schema(
                    items,
                )?)))
            }
            "object" => Some(CedarType::Record(record_attrs(schema))),
            _ => None,
        }
    }
}

fn is_string_enum(obj: &serde_json::Map<String, Value>) -> bool {
    match (obj.get("enum"), obj.get("const")) {
        (Some(Value::Array(options)), _) => {
            !options.is_empty() && options.iter().all(Value::is_string)
        }
        (None, Some(Value::String(_))) => true,
        _ => false,
    }
}

/// The Cedar attributes of an object schema, sorted by name (deterministic schema output).
pub(crate) fn record_attrs(schema: &Value) -> Vec<RecordAttr> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut attrs: Vec<RecordAttr> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|props| {
            props
                .iter()
                // Names with control characters cannot be written in a Cedar schema.
                .filter(|(name, _)| !name.chars().any(char::is_control))
                .filter_map(|(name, sub)| {
                    Some(RecordAttr {
                        name: name.clone(),
                        ty: CedarType::from_json_schema(sub)?,
                        required: required.contains(&name.as_str()),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    attrs.sort_by(|a, b| a.name.cmp(&b.name));
    attrs
}

/// Converts an object value into a Cedar record of exactly `attrs` (other properties dropped).
pub(crate) fn record_to_expr(
    attrs: &[RecordAttr],
    value: &Value,
    path: &str,
) -> Result<RestrictedExpression, ArgError> {
    let obj = value
        .as_object()
        .ok_or_else(|| ArgError::WrongType(display_path(path)))?;
    let mut fields = Vec::with_capacity(attrs.len());
    for attr in attrs {
        let child = format!("{path}/{}", attr.name);
        match obj.get(&attr.name) {
            Some(v) => fields.push((attr.name.clone(), to_expr(&attr.ty, v, &child)?)),
            None if attr.required => return Err(ArgError::Missing(display_path(&child))),
            None => {}
        }
    }
    RestrictedExpression::new_record(fields).map_err(|_| ArgError::Cedar(display_path(path)))
}

fn to_expr(ty: &CedarType, value: &Value, path: &str) -> Result<RestrictedExpression, ArgError> {
    let wrong = || ArgError::WrongType(display_path(path));
    match ty {
        CedarType::String => Ok(RestrictedExpression::new_string(
            value.as_str().ok_or_else(wrong)?.to_owned(),
        )),
        CedarType::Bool => Ok(RestrictedExpression::new_bool(
            value.as_bool().ok_or_else(wrong)?,
        )),
        CedarType::Long => as_long(value)
            .map(RestrictedExpression::new_long)
            .ok_or_else(|| ArgError::NotALong(display_path(path))),
        CedarType::Set(item) => {
            let items = value.as_array().ok_or_else(wrong)?;
            let converted = items
                .iter()
                .enumerate()
                .map(|(i, v)| to_expr(item, v, &format!("{path}/{i}")))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(RestrictedExpression::new_set(converted))
        }
        CedarType::Record(attrs) => record_to_expr(attrs, value, path),
    }
}

/// JSON Schema's `integer` admits `3.0`; Cedar's Long is i64.
fn as_long(value: &Value) -> Option<i64> {
    if let Some(i) = value.as_i64() {
        return Some(i);
    }
    let f = value.as_f64()?;
    // i64::MAX is not representable as f64; the bound below is the largest f64 below 2^63.
    let in_range = (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_807.0).contains(&f);
    #[expect(
        clippy::cast_possible_truncation,
        reason = "integral and range-checked above"
    )]
    (f.fract() == 0.0 && in_range).then_some(f as i64)
}

fn display_path(path: &str) -> String {
    if path.is_empty() {
        "/".to_owned()
    } else {
        path.to_owned()
    }
}

/// Describes a JSON Schema violation by keyword and limit, never by the instance value.
pub(crate) fn describe_violation(err: &jsonschema::ValidationError<'_>) -> String {
    use jsonschema::error::ValidationErrorKind as K;
    match err.kind() {
        K::Required { property } => match property.as_str() {
            Some(p) => format!("missing required property `{p}`"),
            None => "missing a required property".to_owned(),
        },
        K::AdditionalProperties { unexpected } => {
            // Sorted: the message must not depend on the order the caller sent keys in.
            let mut names: Vec<String> = unexpected
                .iter()
                .map(|u| format!("`{}`", truncate(u, 64)))
                .collect();
            names.sort();
            format!(
                "unexpected propert{} {}",
                if names.len() == 1 { "y" } else { "ies" },
                names.join(", ")
            )
        }
        K::Type { kind } => format!("must be of type {}", type_kind(kind)),
        K::MaxLength { limit } => format!("must be at most {limit} characters long"),
        K::MinLength { limit } => format!("must be at least {limit} characters long"),
        K::Maximum { limit } => format!("must be at most {limit}"),
        K::Minimum { limit } => format!("must be at least {limit}"),
        K::ExclusiveMaximum { limit } => format!("must be less than {limit}"),
        K::ExclusiveMinimum { limit } => format!("must be greater than {limit}"),
        K::MaxItems { limit } => format!("must have at most {limit} items"),
        K::MinItems { limit } => format!("must have at least {limit} items"),
        K::Pattern { pattern } => format!("must match the pattern `{pattern}`"),
        K::Enum { options } => format!("must be one of {options}"),
        K::Format { format } => format!("must be a valid `{format}`"),
        K::UniqueItems => "must not contain duplicate items".to_owned(),
        _ => format!("fails the schema's `{}` rule", err.kind().keyword()),
    }
}

fn type_kind(kind: &jsonschema::error::TypeKind) -> String {
    use jsonschema::error::TypeKind;
    match kind {
        TypeKind::Single(t) => format!("`{t}`"),
        TypeKind::Multiple(set) => format!("one of {set:?}"),
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => s.get(..i).unwrap_or(s),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn maps_json_schema_to_cedar_types() {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "max_bytes": {"type": "integer"},
                "flags": {"type": "array", "items": {"type": "string"}},
                "mode": {"enum": ["a", "b"]},
                "ratio": {"type": "number"},
                "nested": {"type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"]}
            },
            "required": ["path"]
        });
        let attrs = record_attrs(&schema);
        let names: Vec<_> = attrs
            .iter()
            .map(|a| (a.name.as_str(), a.required))
            .collect();
        assert_eq!(
            names,
            [
                ("flags", false),
                ("max_bytes", false),
                ("mode", false),
                ("nested", false),
                ("path", true)
            ]
        );
        assert_eq!(attrs[0].ty, CedarType::Set(Box::new(CedarType::String)));
    }

    #[test]
    fn integral_floats_are_longs_and_huge_numbers_are_refused() {
        assert_eq!(as_long(&json!(3.0)), Some(3));
        assert_eq!(as_long(&json!(3.5)), None);
        assert_eq!(as_long(&json!(18_446_744_073_709_551_615_u64)), None);
        assert_eq!(as_long(&json!(1e300)), None);
    }
}
