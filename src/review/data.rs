//! What changed in the deployment data between two policy sets: the entities (agents, humans,
//! roles, tools with their attributes and parents, from `entities.json` and the manifests).
//! Policies read this data (`principal.owner.payees`, `resource.risk`), so a change to it can
//! let calls through that were denied: reload review holds it like a policy change, and
//! `toolgate diff` reports it.
//!
//! Data has no direction toolgate can prove: a new payee widens an allow-list, a removed
//! domain widens a deny-list. Every change is listed, and the reload review counts every one
//! as possibly widening.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::policy::Snapshot;

/// Most changes listed; past it a last line counts the rest.
const MAX_LISTED: usize = 100;

/// Most characters of one value shown.
const MAX_VALUE_CHARS: usize = 120;

/// The data changes from `old` to `new`, one line each (`Human::"carol".payees + "DE89…"`),
/// in entity order, and the entities (or `entity.attribute`s) they touch, each once.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DataChanges {
    /// What changed, one line per change.
    pub lines: Vec<String>,
    /// `Type::"id"` or `Type::"id".attr` for each thing changed: what a review names as
    /// widened.
    pub touched: Vec<String>,
}

impl DataChanges {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

/// The entities of `snap` as JSON, by `Type::"id"`.
fn entities(snap: &Snapshot) -> BTreeMap<String, Value> {
    snap.entities
        .iter()
        .filter_map(|e| {
            let uid = e.uid().to_string();
            let json = e.to_json_value().ok()?;
            Some((uid, json))
        })
        .collect()
}

fn shown(v: &Value) -> String {
    // An entity reference reads as Cedar writes it: `Role::"developer"`.
    let entity = v.get("__entity").unwrap_or(v);
    if let (Some(t), Some(id), Some(2)) = (
        entity.get("type").and_then(Value::as_str),
        entity.get("id").and_then(Value::as_str),
        entity.as_object().map(serde_json::Map::len),
    ) {
        return format!("{t}::{}", Value::String(id.to_owned()));
    }
    let text = v.to_string();
    if text.chars().count() <= MAX_VALUE_CHARS {
        return text;
    }
    let cut: String = text.chars().take(MAX_VALUE_CHARS).collect();
    format!("{cut}…")
}

/// The set elements of a JSON array, as shown.
fn elements(v: &Value) -> Option<Vec<String>> {
    v.as_array().map(|a| a.iter().map(shown).collect())
}

/// Compares the deployment data of two sets.
pub fn data_changes(old: &Snapshot, new: &Snapshot) -> DataChanges {
    let (old, new) = (entities(old), entities(new));
    let mut out = DataChanges::default();
    let touch = |out: &mut DataChanges, what: String, line: String| {
        if !out.touched.contains(&what) {
            out.touched.push(what);
        }
        out.lines.push(line);
    };
    let empty = Value::Object(serde_json::Map::new());
    for uid in old
        .keys()
        .chain(new.keys().filter(|k| !old.contains_key(*k)))
    {
        match (old.get(uid), new.get(uid)) {
            (Some(_), None) => touch(&mut out, uid.clone(), format!("{uid} removed")),
            (None, Some(e)) => touch(
                &mut out,
                uid.clone(),
                format!(
                    "{uid} added, parents {}, attributes {}",
                    shown(e.get("parents").unwrap_or(&Value::Null)),
                    shown(e.get("attrs").unwrap_or(&empty))
                ),
            ),
            (Some(a), Some(b)) if a != b => {
                let parents = |e: &Value| elements(e.get("parents").unwrap_or(&Value::Null));
                let (pa, pb) = (
                    parents(a).unwrap_or_default(),
                    parents(b).unwrap_or_default(),
                );
                for p in pb.iter().filter(|p| !pa.contains(p)) {
                    touch(&mut out, uid.clone(), format!("{uid} parent + {p}"));
                }
                for p in pa.iter().filter(|p| !pb.contains(p)) {
                    touch(&mut out, uid.clone(), format!("{uid} parent - {p}"));
                }
                let attrs = |e: &Value| e.get("attrs").and_then(Value::as_object).cloned();
                let (aa, ab) = (attrs(a).unwrap_or_default(), attrs(b).unwrap_or_default());
                let names: std::collections::BTreeSet<&String> =
                    aa.keys().chain(ab.keys()).collect();
                for name in names {
                    let what = format!("{uid}.{name}");
                    match (aa.get(name), ab.get(name)) {
                        (Some(x), Some(y)) if x == y => {}
                        (Some(x), Some(y)) => match (elements(x), elements(y)) {
                            (Some(ex), Some(ey)) => {
                                for e in ey.iter().filter(|e| !ex.contains(e)) {
                                    touch(&mut out, what.clone(), format!("{what} + {e}"));
                                }
                                for e in ex.iter().filter(|e| !ey.contains(e)) {
                                    touch(&mut out, what.clone(), format!("{what} - {e}"));
                                }
                            }
                            _ => touch(
                                &mut out,
                                what.clone(),
                                format!("{what}: {} → {}", shown(x), shown(y)),
                            ),
                        },
                        (None, Some(y)) => {
                            touch(
                                &mut out,
                                what.clone(),
                                format!("{what} set to {}", shown(y)),
                            );
                        }
                        (Some(_), None) => {
                            touch(&mut out, what.clone(), format!("{what} removed"));
                        }
                        (None, None) => {}
                    }
                }
                // Tags, or anything else the JSON form carries.
                let rest = |e: &Value| {
                    e.as_object().map(|o| {
                        o.iter()
                            .filter(|(k, _)| !matches!(k.as_str(), "uid" | "parents" | "attrs"))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect::<BTreeMap<_, _>>()
                    })
                };
                if rest(a) != rest(b) {
                    touch(&mut out, uid.clone(), format!("{uid} tags changed"));
                }
            }
            _ => {}
        }
    }
    if out.lines.len() > MAX_LISTED {
        let more = out.lines.len() - MAX_LISTED;
        out.lines.truncate(MAX_LISTED);
        out.lines.push(format!("… and {more} more"));
    }
    out
}
