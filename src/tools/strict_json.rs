//! Tool arguments parsed strictly: a JSON object with the same key twice is refused at any
//! depth. serde_json keeps the last duplicate; another parser (the tool's) may keep the first,
//! so `{"path": ".env", "path": "README.md"}` could be judged as one file and run as another.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// A JSON value whose objects have no duplicate keys.
#[derive(Debug, Clone, PartialEq)]
pub struct UniqueKeys(pub Value);

impl<'de> Deserialize<'de> for UniqueKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(UniqueKeys)
    }
}

/// For `#[serde(deserialize_with = "…")]` on a `Value` field.
pub fn unique_keys<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    UniqueKeys::deserialize(d).map(|u| u.0)
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(UniqueKeys(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut obj = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if obj.contains_key(&key) {
                let shown: String = key.chars().filter(|c| !c.is_control()).take(64).collect();
                return Err(de::Error::custom(format!("duplicate key `{shown}`")));
            }
            let UniqueKeys(v) = map.next_value()?;
            obj.insert(key, v);
        }
        Ok(Value::Object(obj))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_duplicate_keys_at_any_depth() {
        let ok: UniqueKeys =
            serde_json::from_str(r#"{"a": {"b": [1, {"c": 2}]}, "d": null}"#).unwrap();
        assert_eq!(
            ok.0,
            serde_json::json!({"a": {"b": [1, {"c": 2}]}, "d": null})
        );
        for bad in [
            r#"{"path": ".env", "path": "x"}"#,
            r#"{"a": [{"k": 1, "k": 2}]}"#,
        ] {
            let err = serde_json::from_str::<UniqueKeys>(bad)
                .unwrap_err()
                .to_string();
            assert!(err.contains("duplicate key"), "{err}");
        }
    }
}
