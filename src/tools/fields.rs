//! A tool's output field policy (`output_fields` in its manifest): which parts of a JSON
//! result reach the agent. Rules are dotted path globs (`customer.*`, `*.email`,
//! `items.**`): `*` is one key or array index, `**` any number of them (at most one `**` per
//! glob). A rule applies to the subtree it names, and the strictest rule that reaches a node
//! wins (redact, then mask, then allow), so `redact: ["customer.ssn"]` holds inside
//! `allow: ["customer"]`. A leaf no rule reaches is dropped (default deny), and so is a
//! container left empty by that.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::globs::DottedGlob;

/// The field policy as written in the manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldPolicy {
    /// Passed on (the output gate still screens them).
    #[serde(default)]
    pub allow: Vec<String>,
    /// Strings keep their last 4 characters (`****1234`); other values become `"****"`.
    #[serde(default)]
    pub mask: Vec<String>,
    /// Replaced by `"<redacted:field>"`.
    #[serde(default)]
    pub redact: Vec<String>,
}

/// What a rule does, least to most restrictive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rule {
    Allow,
    Mask,
    Redact,
}

/// What applying a policy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filtered {
    /// The output that remains (`None`: nothing did).
    pub value: Option<Value>,
    /// Dotted paths of the dropped leaves (at most 100).
    pub dropped: Vec<String>,
    /// How many leaves were dropped in all.
    pub dropped_count: usize,
}

const MAX_DROPPED_LISTED: usize = 100;

impl FieldPolicy {
    /// Checks every glob (see [`DottedGlob`]): non-empty dotted segments, at most one `**`.
    pub fn check(&self) -> Result<(), String> {
        self.compile().map(|_| ())
    }

    fn compile(&self) -> Result<Compiled, String> {
        let list = |globs: &[String]| {
            globs
                .iter()
                .map(|g| DottedGlob::new(g).map_err(|e| format!("`output_fields` glob {e}")))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Compiled {
            allow: list(&self.allow)?,
            mask: list(&self.mask)?,
            redact: list(&self.redact)?,
        })
    }

    /// Applies the policy to `output`.
    /// Manifests are checked at load; a glob that does not compile here drops everything.
    pub fn apply(&self, output: &Value) -> Filtered {
        let mut out = Filtered::default();
        let mut path = Vec::new();
        let compiled = self.compile().unwrap_or_default();
        out.value = compiled.walk(output, &mut path, None, &mut out);
        out
    }
}

/// A field policy's globs, compiled for one application.
#[derive(Debug, Default)]
struct Compiled {
    allow: Vec<DottedGlob>,
    mask: Vec<DottedGlob>,
    redact: Vec<DottedGlob>,
}

impl Compiled {
    fn rule(&self, path: &[String]) -> Option<Rule> {
        let hits = |list: &[DottedGlob]| list.iter().any(|g| g.matches(path));
        if hits(&self.redact) {
            Some(Rule::Redact)
        } else if hits(&self.mask) {
            Some(Rule::Mask)
        } else if hits(&self.allow) {
            Some(Rule::Allow)
        } else {
            None
        }
    }

    /// `inherited`: the strictest rule that reached an ancestor.
    fn walk(
        &self,
        value: &Value,
        path: &mut Vec<String>,
        inherited: Option<Rule>,
        out: &mut Filtered,
    ) -> Option<Value> {
        let here = if path.is_empty() {
            None
        } else {
            self.rule(path)
        };
        let rule = inherited.max(here);
        if rule == Some(Rule::Redact) {
            return Some(Value::String("<redacted:field>".to_owned()));
        }
        match value {
            Value::Object(map) => {
                let mut kept = serde_json::Map::new();
                for (k, v) in map {
                    path.push(k.clone());
                    if let Some(v) = self.walk(v, path, rule, out) {
                        kept.insert(k.clone(), v);
                    }
                    path.pop();
                }
                (!kept.is_empty() || rule.is_some()).then_some(Value::Object(kept))
            }
            Value::Array(items) => {
                let mut kept = Vec::new();
                for (i, v) in items.iter().enumerate() {
                    path.push(i.to_string());
                    if let Some(v) = self.walk(v, path, rule, out) {
                        kept.push(v);
                    }
                    path.pop();
                }
                (!kept.is_empty() || rule.is_some()).then_some(Value::Array(kept))
            }
            leaf => match rule {
                Some(Rule::Allow) => Some(leaf.clone()),
                Some(Rule::Mask) => Some(mask(leaf)),
                Some(Rule::Redact) => Some(Value::String("<redacted:field>".to_owned())),
                None => {
                    out.dropped_count += 1;
                    if out.dropped.len() < MAX_DROPPED_LISTED {
                        out.dropped.push(if path.is_empty() {
                            "(root)".to_owned()
                        } else {
                            path.join(".")
                        });
                    }
                    None
                }
            },
        }
    }
}

/// Masks a value: strings keep their last 4 characters when they are at least 8 long.
fn mask(value: &Value) -> Value {
    match value {
        Value::String(s) => {
            let n = s.chars().count();
            if n >= 8 {
                let tail: String = s.chars().skip(n - 4).collect();
                Value::String(format!("****{tail}"))
            } else {
                Value::String("****".to_owned())
            }
        }
        Value::Null => Value::Null,
        _ => Value::String("****".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unnamed_fields_are_dropped_and_the_strictest_rule_wins() {
        let p = FieldPolicy {
            allow: vec!["customer.*".into(), "items.*.sku".into()],
            mask: vec!["*.card".into()],
            redact: vec!["customer.ssn".into()],
        };
        p.check().unwrap();
        let out = p.apply(&json!({
            "customer": {"name": "Ann", "ssn": "078-05-1120", "card": "4111111111111111"},
            "items": [{"sku": "A1", "cost": 3}, {"cost": 4}],
            "internal": {"score": 0.3}
        }));
        assert_eq!(
            out.value,
            Some(json!({
                "customer": {"name": "Ann", "ssn": "<redacted:field>", "card": "****1111"},
                "items": [{"sku": "A1"}]
            }))
        );
        assert_eq!(
            out.dropped,
            ["items.0.cost", "items.1.cost", "internal.score"]
        );
        // A stricter rule inside an allowed subtree holds, also under `**`.
        let nested = FieldPolicy {
            allow: vec!["customer".into(), "items.**".into()],
            mask: vec!["customer.card".into()],
            redact: vec!["customer.notes".into(), "items.*.cost".into()],
        };
        assert_eq!(
            nested
                .apply(&json!({"customer": {"name": "Ann", "notes": "vip", "card": "4111111111111111"}, "items": [{"sku": "A", "cost": 3}]}))
                .value,
            Some(json!({"customer": {"name": "Ann", "notes": "<redacted:field>", "card": "****1111"}, "items": [{"sku": "A", "cost": "<redacted:field>"}]}))
        );
        assert!(
            FieldPolicy {
                allow: vec!["**.a.**".into()],
                ..FieldPolicy::default()
            }
            .check()
            .is_err()
        );
        let deep = FieldPolicy {
            allow: vec!["a.**".into()],
            ..FieldPolicy::default()
        };
        assert_eq!(
            deep.apply(&json!({"a": {"b": {"c": 1}}, "b": 2})).value,
            Some(json!({"a": {"b": {"c": 1}}}))
        );
        assert_eq!(deep.apply(&json!("text")).value, None);
        assert!(
            FieldPolicy {
                allow: vec!["a..b".into()],
                ..FieldPolicy::default()
            }
            .check()
            .is_err()
        );
    }
}
