//! Redaction inside JSON: every string is scanned, and the value of a sensitive key is masked
//! whole. Structure is kept: objects keep their keys, arrays their length.

use serde_json::Value;

use super::{Category, Finding, Redactor};

/// Keys whose values are secrets, after lowercasing and dropping `_`, `-`, `.` and spaces.
const EXACT: [&str; 15] = [
    "bearer",
    "password",
    "passwd",
    "pwd",
    "passphrase",
    "secret",
    "authorization",
    "proxyauthorization",
    "cookie",
    "setcookie",
    "credentials",
    "connectionstring",
    "sessionid",
    "xapikey",
    "otp",
];
/// Endings that make a key sensitive (`db_password`, `github_token`, `aws_secret_access_key`).
const ENDINGS: [&str; 12] = [
    "password",
    "passwords",
    "secrets",
    "cookies",
    "secret",
    "token",
    "apikey",
    "privatekey",
    "accesskey",
    "secretkey",
    "clientsecret",
    "signingkey",
];

/// Whether a JSON key names a secret (case- and separator-insensitive).
pub fn sensitive_key(key: &str) -> bool {
    let norm = super::normalize_key(key);
    EXACT.contains(&norm.as_str()) || ENDINGS.iter().any(|e| norm.ends_with(e))
}

/// A finding inside a JSON document: where (a JSON pointer) and what. A sensitive key's
/// finding covers the whole value (`finding` is `None`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct JsonFinding {
    /// JSON pointer to the string or value (`/user/password`).
    pub path: String,
    /// The finding inside that string; `None` when the whole value is masked for its key.
    pub finding: Option<Finding>,
    /// The kind (`sensitive-key` for a masked key's value).
    pub kind: &'static str,
    /// Its category.
    pub category: Category,
    /// The finding is in the member's name (the key `path` ends with), not its value.
    pub in_key: bool,
}

/// Whether the value under a sensitive key is masked whole: anything but `null` and booleans
/// (`"secret": true` is a flag, not a secret).
fn maskable(v: &Value) -> bool {
    !matches!(v, Value::Null | Value::Bool(_))
}

/// Keys of short numeric secrets (`cvv`, `cvc`, `pin`), sensitive when their value is 3 to 8
/// digits (a string or a number). A `pin` that is `true`, or a two-digit GPIO number, is left
/// alone.
fn code_key(key: &str) -> bool {
    let norm = super::normalize_key(key);
    matches!(
        norm.as_str(),
        "cvv" | "cvv2" | "cvc" | "cvc2" | "pin" | "pincode" | "cardpin" | "securitycode"
    )
}

fn code_value(v: &Value) -> bool {
    let digits = match v {
        Value::String(s) => s.trim().to_owned(),
        Value::Number(n) => n.to_string(),
        _ => return false,
    };
    (3..=8).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit())
}

/// A `{"name": "DB_PASSWORD", "value": "…"}` pair (Kubernetes env, HAR headers): its
/// `value` is as sensitive as a key of that name.
fn named_secret(
    map: &serde_json::Map<String, Value>,
    key: &str,
    sensitive: impl Fn(&str) -> bool,
) -> bool {
    key == "value"
        && ["name", "key"]
            .iter()
            .any(|k| map.get(*k).and_then(Value::as_str).is_some_and(&sensitive))
}

fn pointer_push(path: &str, token: &str) -> String {
    format!("{path}/{}", token.replace('~', "~0").replace('/', "~1"))
}

impl Redactor {
    /// Whether a JSON key names a secret: the built-in list, or the configured
    /// `sensitive_keys` and `sensitive_key_suffixes`.
    pub fn is_sensitive_key(&self, key: &str) -> bool {
        if sensitive_key(key) {
            return true;
        }
        if self.extra_keys.is_empty() && self.extra_suffixes.is_empty() {
            return false;
        }
        let norm = super::normalize_key(key);
        self.extra_keys.contains(&norm)
            || self
                .extra_suffixes
                .iter()
                .any(|s| norm.ends_with(s.as_str()))
    }

    /// Every finding in `value` (depth-first, keys in document order).
    pub fn scan_json(&self, value: &Value) -> Vec<JsonFinding> {
        let mut out = Vec::new();
        self.walk(value, String::new(), &mut out);
        out
    }

    fn walk(&self, value: &Value, path: String, out: &mut Vec<JsonFinding>) {
        match value {
            Value::String(s) => out.extend(self.scan(s).into_iter().map(|f| JsonFinding {
                path: path.clone(),
                kind: f.kind,
                category: f.category,
                finding: Some(f),
                in_key: false,
            })),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.walk(item, pointer_push(&path, &i.to_string()), out);
                }
            }
            Value::Object(map) => {
                for (k, v) in map {
                    let here = pointer_push(&path, k);
                    // A secret used as a member name is a finding too.
                    out.extend(self.scan(k).into_iter().map(|f| JsonFinding {
                        path: here.clone(),
                        kind: f.kind,
                        category: f.category,
                        finding: Some(f),
                        in_key: true,
                    }));
                    if (self.is_sensitive_key(k)
                        || named_secret(map, k, |n| self.is_sensitive_key(n))
                        || (code_key(k) && code_value(v)))
                        && maskable(v)
                    {
                        out.push(JsonFinding {
                            path: here.clone(),
                            finding: None,
                            kind: "sensitive-key",
                            category: Category::Secret,
                            in_key: false,
                        });
                    }
                    // The value is scanned as well: its findings keep their own actions when
                    // a gate does not mask `sensitive-key`.
                    self.walk(v, here, out);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// `value` with the findings in `found` (from [`Redactor::scan_json`] of this `value`)
    /// that `keep` selects masked, without scanning again.
    pub fn mask_found(
        value: &Value,
        found: &[JsonFinding],
        keep: &dyn Fn(&str, &str, Category) -> bool,
    ) -> Value {
        let mut next = 0;
        mask_walk(value, "", found, &mut next, keep)
    }

    /// `value` with the findings `keep` selects masked: strings in place, a sensitive key's
    /// value replaced by `"<redacted:sensitive-key>"`, member names holding a secret masked.
    pub fn mask_json(&self, value: &Value, keep: &dyn Fn(&str, &str, Category) -> bool) -> Value {
        Redactor::mask_found(value, &self.scan_json(value), keep)
    }
}

/// The walk behind [`Redactor::mask_found`]: `found` is in walk order, so the findings of
/// each member name, sensitive value and string are the next ones in the list with its path.
fn mask_walk(
    value: &Value,
    path: &str,
    found: &[JsonFinding],
    next: &mut usize,
    keep: &dyn Fn(&str, &str, Category) -> bool,
) -> Value {
    match value {
        Value::String(s) => {
            let mut mine = Vec::new();
            while let Some(f) = found.get(*next).filter(|f| f.path == path && !f.in_key) {
                if let Some(x) = &f.finding {
                    mine.push(x.clone());
                }
                *next += 1;
            }
            Value::String(Redactor::mask(s, &mine, |f| keep(path, f.kind, f.category)))
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| mask_walk(v, &pointer_push(path, &i.to_string()), found, next, keep))
                .collect(),
        ),
        Value::Object(map) => {
            let mut out = serde_json::Map::new();
            for (k, v) in map {
                let here = pointer_push(path, k);
                let mut in_name = Vec::new();
                while let Some(f) = found.get(*next).filter(|f| f.path == here && f.in_key) {
                    if let Some(x) = &f.finding {
                        in_name.push(x.clone());
                    }
                    *next += 1;
                }
                let mut name = Redactor::mask(k, &in_name, |f| keep(&here, f.kind, f.category));
                // Two names masked alike stay two members.
                let mut n = 1;
                while out.contains_key(&name) {
                    n += 1;
                    name = format!(
                        "{}#{n}",
                        Redactor::mask(k, &in_name, |f| keep(&here, f.kind, f.category))
                    );
                }
                let whole = found
                    .get(*next)
                    .is_some_and(|f| f.path == here && !f.in_key && f.finding.is_none());
                let masked = if whole {
                    *next += 1;
                    if keep(&here, "sensitive-key", Category::Secret) {
                        // Skip what was found inside the value: it is masked whole.
                        let inner = format!("{here}/");
                        while found
                            .get(*next)
                            .is_some_and(|f| f.path == here || f.path.starts_with(&inner))
                        {
                            *next += 1;
                        }
                        Value::String("<redacted:sensitive-key>".to_owned())
                    } else {
                        mask_walk(v, &here, found, next, keep)
                    }
                } else {
                    mask_walk(v, &here, found, next, keep)
                };
                out.insert(name, masked);
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redact::RedactConfig;
    use serde_json::json;

    #[test]
    fn keys_are_matched_loosely_and_values_masked_whole() {
        for k in [
            "password",
            "DB_Password",
            "api-key",
            "X-Api-Key",
            "githubToken",
            "private_key",
        ] {
            assert!(sensitive_key(k), "{k}");
        }
        for k in [
            "max_tokens",
            "token_count",
            "username",
            "keyboard",
            "secretary_name",
        ] {
            assert!(!sensitive_key(k), "{k}");
        }
        let r = Redactor::new(&RedactConfig::default()).unwrap();
        let doc = json!({"user": {"name": "a", "Password": 1234, "notes": ["mail me: a@b.io"]}});
        let masked = r.mask_json(&doc, &|_, _, _| true);
        assert_eq!(
            masked,
            json!({"user": {"name": "a", "Password": "<redacted:sensitive-key>", "notes": ["mail me: <redacted:email>"]}})
        );
        let env = json!([{"name": "DB_PASSWORD", "value": "p4ss"}, {"name": "MODE", "value": "x"}]);
        assert_eq!(
            r.mask_json(&env, &|_, _, _| true),
            json!([{"name": "DB_PASSWORD", "value": "<redacted:sensitive-key>"}, {"name": "MODE", "value": "x"}])
        );
        let found = r.scan_json(&doc);
        assert_eq!(Redactor::mask_found(&doc, &found, &|_, _, _| true), masked);
        let env_found = r.scan_json(&env);
        assert_eq!(
            Redactor::mask_found(&env, &env_found, &|_, k, _| k != "email"),
            r.mask_json(&env, &|_, k, _| k != "email")
        );
        let paths: Vec<_> = found.iter().map(|f| (f.path.as_str(), f.kind)).collect();
        assert_eq!(
            paths,
            [
                ("/user/Password", "sensitive-key"),
                ("/user/notes/0", "email")
            ]
        );
    }
}
