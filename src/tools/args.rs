//! The bridge from a tool's argument JSON Schema to Cedar: which parts of the schema become the
//! typed `context.args` record, and how validated argument values become Cedar values.
//!
//! Mapping: string → String, integer → Long, number → decimal (four decimal places, ±922 337
//! 203 685 477.5807: a value beyond either is refused, fail closed), boolean → Bool, array →
//! Set of its item type, object with `properties` → Record (attributes in `required` are
//! mandatory, the rest optional). A nullable schema (`anyOf`/`oneOf` of a type and `null`, or
//! `type: [T, "null"]`, as Pydantic writes optional fields) is its type, optional, with `null`
//! meaning absent. Local `$ref`s (`#/$defs/…`, `#/definitions/…`) are resolved. Anything else
//! (other unions, external `$ref`s, untyped schemas) is left out of the Cedar type, and
//! [`untyped_reason`] says why: JSON Schema still validates it, policies cannot read it.

use cedar_policy::RestrictedExpression;
use serde_json::Value;

/// A Cedar type that a JSON Schema fragment maps onto.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CedarType {
    /// Cedar `String`.
    String,
    /// Cedar `Long` (i64).
    Long,
    /// Cedar `decimal` (four decimal places).
    Decimal,
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
    /// More than four decimal places, or beyond ±922337203685477.5807.
    #[error(
        "argument `{0}` is not a number Cedar's decimal can hold (at most four decimal places, at most 922337203685477.5807 in size)"
    )]
    NotADecimal(String),
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
    /// Whether values of this type can hold strings (what provenance traces).
    pub fn holds_text(&self) -> bool {
        match self {
            CedarType::String => true,
            CedarType::Long | CedarType::Decimal | CedarType::Bool => false,
            CedarType::Set(inner) => inner.holds_text(),
            CedarType::Record(attrs) => attrs.iter().any(|a| a.ty.holds_text()),
        }
    }

    /// Maps a JSON Schema fragment (its own root for `$ref`s), or `None` when Cedar cannot
    /// express it.
    pub fn from_json_schema(schema: &Value) -> Option<CedarType> {
        typed(schema, schema, 0).ok().map(|(t, _)| t)
    }
}

/// Whether an argument's JSON Schema (one Cedar cannot type) lets its value hold a string:
/// anything but a schema whose `type` names only numbers, booleans and null.
pub fn may_hold_text(schema: &Value) -> bool {
    let scalar = |t: &Value| matches!(t.as_str(), Some("number" | "integer" | "boolean" | "null"));
    match schema.get("type") {
        Some(Value::String(_)) => !schema.get("type").is_some_and(scalar),
        Some(Value::Array(types)) => !types.iter().all(scalar),
        _ => true,
    }
}

/// How deep `$ref`s and nesting are followed before a schema counts as untyped.
const MAX_DEPTH: usize = 32;

/// Why the property schema `sub` (of the tool schema `root`) has no Cedar type, or `None`
/// when it has one.
pub fn untyped_reason(sub: &Value, root: &Value) -> Option<String> {
    typed(sub, root, 0).err()
}

/// The Cedar type of `schema` and whether it is nullable, or why it has none.
fn typed(schema: &Value, root: &Value, depth: usize) -> Result<(CedarType, bool), String> {
    if depth > MAX_DEPTH {
        return Err("it nests or refers deeper than 32 levels".to_owned());
    }
    let Some(obj) = schema.as_object() else {
        return Err("its schema is not an object".to_owned());
    };
    if let Some(r) = obj.get("$ref") {
        let target = r
            .as_str()
            .and_then(|r| r.strip_prefix('#'))
            .and_then(|ptr| root.pointer(ptr))
            .ok_or_else(|| {
                format!(
                    "its `$ref` {} is not a local reference (`#/$defs/…`) that resolves",
                    r
                )
            })?;
        return typed(target, root, depth + 1);
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = obj.get(key).and_then(Value::as_array) {
            let (nulls, others): (Vec<&Value>, Vec<&Value>) =
                branches.iter().partition(|b| is_null_schema(b));
            return match (nulls.len(), others.as_slice()) {
                (1, [one]) => typed(one, root, depth + 1).map(|(t, _)| (t, true)),
                _ => Err(format!(
                    "it is a union (`{key}`) of several types; only a type or null can be typed"
                )),
            };
        }
    }
    let (declared, nullable) = match obj.get("type") {
        Some(Value::String(t)) => (t.as_str(), false),
        Some(Value::Array(ts)) => {
            let names: Vec<&str> = ts.iter().filter_map(Value::as_str).collect();
            match names.as_slice() {
                [t, "null"] | ["null", t] => (*t, true),
                [t] => (*t, false),
                _ => return Err("its `type` lists several types".to_owned()),
            }
        }
        // Untyped string enums and consts are still strings.
        None if is_string_enum(obj) => ("string", false),
        _ => return Err("it declares no `type`".to_owned()),
    };
    let ty = match declared {
        "string" => CedarType::String,
        "integer" => CedarType::Long,
        "number" => CedarType::Decimal,
        "boolean" => CedarType::Bool,
        "array" => {
            let items = obj
                .get("items")
                .ok_or_else(|| "it is an array without `items`".to_owned())?;
            let (item, item_nullable) = typed(items, root, depth + 1)
                .map_err(|why| format!("its items are untyped: {why}"))?;
            if item_nullable {
                return Err("its items may be null, which a Cedar set cannot hold".to_owned());
            }
            CedarType::Set(Box::new(item))
        }
        "object" => CedarType::Record(attrs_of(schema, root, depth + 1)),
        "null" => return Err("it is always null".to_owned()),
        other => return Err(format!("its type `{other}` has no Cedar counterpart")),
    };
    Ok((ty, nullable))
}

fn is_null_schema(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("null")
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
    attrs_of(schema, schema, 0)
}

/// [`record_attrs`] of `schema`, a part of `root`. A nullable property is optional.
fn attrs_of(schema: &Value, root: &Value, depth: usize) -> Vec<RecordAttr> {
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
                    let (ty, nullable) = typed(sub, root, depth).ok()?;
                    Some(RecordAttr {
                        name: name.clone(),
                        ty,
                        required: required.contains(&name.as_str()) && !nullable,
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
            // `null` means absent (nullable properties are optional attributes).
            Some(Value::Null) | None if attr.required => {
                return Err(ArgError::Missing(display_path(&child)));
            }
            Some(Value::Null) | None => {}
            Some(v) => fields.push((attr.name.clone(), to_expr(&attr.ty, v, &child)?)),
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
        CedarType::Decimal => decimal_text(value)
            .map(RestrictedExpression::new_decimal)
            .ok_or_else(|| ArgError::NotADecimal(display_path(path))),
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

/// Cedar's decimal bound: 922337203685477.5807 (i64 in ten-thousandths).
const DECIMAL_MAX: f64 = 922_337_203_685_477.0;

/// A JSON number as Cedar decimal text (`-12.3400`), or `None` when it has more than four
/// decimal places or lies beyond Cedar's range.
fn decimal_text(value: &Value) -> Option<String> {
    let n = value.as_number()?;
    if let Some(i) = n.as_i64() {
        return (i.unsigned_abs() <= 922_337_203_685_477).then(|| format!("{i}.0000"));
    }
    let f = n.as_f64()?;
    if !f.is_finite() || f.abs() > DECIMAL_MAX {
        return None;
    }
    // Four places, and only if that is the number exactly (no rounding: 1.23456 is refused).
    let text = format!("{f:.4}");
    (text.parse::<f64>().ok() == Some(f)).then_some(text)
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
                ("path", true),
                ("ratio", false)
            ]
        );
        assert_eq!(attrs[5].ty, CedarType::Decimal);
        assert_eq!(attrs[0].ty, CedarType::Set(Box::new(CedarType::String)));
    }

    #[test]
    fn nullable_refs_and_numbers_are_typed() {
        let schema = json!({
            "type": "object",
            "$defs": {"Payee": {"type": "object", "properties": {"iban": {"type": "string"}}, "required": ["iban"]}},
            "properties": {
                "cc": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}], "default": null},
                "note": {"type": ["string", "null"]},
                "amount": {"type": "number"},
                "payee": {"$ref": "#/$defs/Payee"},
                "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "remote": {"$ref": "https://example.com/x.json"}
            },
            "required": ["amount", "note", "payee"]
        });
        let attrs = record_attrs(&schema);
        let got: Vec<_> = attrs
            .iter()
            .map(|a| (a.name.as_str(), a.required))
            .collect();
        assert_eq!(
            got,
            [
                ("amount", true),
                ("cc", false),
                ("note", false),
                ("payee", true)
            ]
        );
        assert_eq!(attrs[0].ty, CedarType::Decimal);
        assert_eq!(attrs[1].ty, CedarType::Set(Box::new(CedarType::String)));
        let props = &schema["properties"];
        assert!(
            untyped_reason(&props["either"], &schema)
                .unwrap()
                .contains("union")
        );
        assert!(
            untyped_reason(&props["remote"], &schema)
                .unwrap()
                .contains("`$ref`")
        );
        assert_eq!(untyped_reason(&props["payee"], &schema), None);
        // `null` is absent; a required nullable argument is optional.
        let v = json!({"amount": 12.5, "note": null, "payee": {"iban": "DE89"}, "cc": null});
        assert!(record_to_expr(&attrs, &v, "").is_ok());
    }

    #[test]
    fn decimals_keep_four_places_and_refuse_more() {
        assert_eq!(decimal_text(&json!(12.5)).as_deref(), Some("12.5000"));
        assert_eq!(decimal_text(&json!(-0.1)).as_deref(), Some("-0.1000"));
        assert_eq!(decimal_text(&json!(7)).as_deref(), Some("7.0000"));
        assert_eq!(decimal_text(&json!(1.23456)), None);
        assert_eq!(decimal_text(&json!(1e300)), None);
        assert_eq!(
            decimal_text(&json!(922_337_203_685_477_i64)).as_deref(),
            Some("922337203685477.0000")
        );
        assert_eq!(decimal_text(&json!(922_337_203_685_478_i64)), None);
    }

    #[test]
    fn integral_floats_are_longs_and_huge_numbers_are_refused() {
        assert_eq!(as_long(&json!(3.0)), Some(3));
        assert_eq!(as_long(&json!(3.5)), None);
        assert_eq!(as_long(&json!(18_446_744_073_709_551_615_u64)), None);
        assert_eq!(as_long(&json!(1e300)), None);
    }
}
