//! What a manifest declares about its arguments beyond their types: derived facts
//! (`"facts"`, seen by policies as `context.facts.<arg>`) and the tool_call gate's rules for
//! this tool and each argument (`"gate"`).
//!
//! Facts are computed from every string inside the argument (a string, a list of them, or an
//! object) through [`crate::canon`], so `["Bob@Corp.example", "eve@evil.io"]` has the
//! `domains` `{"corp.example", "evil.io"}` and a policy can check every element at once
//! (`allowed.containsAll(context.facts.to.domains)`).

use std::collections::BTreeMap;

use cedar_policy::RestrictedExpression;
use serde::Deserialize;
use serde_json::Value;

use crate::canon::{Found, strings};
use crate::redact::{Action, Category, Gate, Gates, JsonFinding, Screened};

/// A fact a manifest can ask for about an argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FactKind {
    /// `Set<String>`: e-mail addresses, lowercased.
    Emails,
    /// `Set<String>`: the domains of those addresses.
    Domains,
    /// `Set<String>`: URLs, canonical.
    Urls,
    /// `Set<String>`: the URLs' hosts.
    Hosts,
    /// `Bool`: a URL is in the text.
    HasLink,
    /// `Set<String>`: IBANs (mod-97 checked), uppercase without spaces.
    Ibans,
    /// `Set<String>`: the IBANs' country codes.
    IbanCountries,
    /// `Set<String>`: the programs a shell command line runs ([`crate::shell`]).
    Programs,
    /// `Bool`: a shell command line reaches the network (a network client, `/dev/tcp`).
    Network,
    /// `Bool`: a shell command line redirects output into a file.
    Redirects,
}

impl FactKind {
    /// The attribute name in `context.facts.<arg>`.
    pub fn as_str(self) -> &'static str {
        match self {
            FactKind::Emails => "emails",
            FactKind::Domains => "domains",
            FactKind::Urls => "urls",
            FactKind::Hosts => "hosts",
            FactKind::HasLink => "has_link",
            FactKind::Ibans => "ibans",
            FactKind::IbanCountries => "iban_countries",
            FactKind::Programs => "programs",
            FactKind::Network => "network",
            FactKind::Redirects => "redirects",
        }
    }

    /// The Cedar type, as the schema writes it.
    pub fn cedar_type(self) -> &'static str {
        match self {
            FactKind::HasLink | FactKind::Network | FactKind::Redirects => "Bool",
            _ => "Set<String>",
        }
    }

    /// Whether the fact reads the text as a shell command line.
    fn shell(self) -> bool {
        matches!(
            self,
            FactKind::Programs | FactKind::Network | FactKind::Redirects
        )
    }

    fn value(self, found: &Found, shell: &crate::shell::Command) -> FactValue {
        match self {
            FactKind::Emails => FactValue::Set(found.emails.clone()),
            FactKind::Domains => FactValue::Set(found.email_domains()),
            FactKind::Urls => FactValue::Set(found.urls.clone()),
            FactKind::Hosts => FactValue::Set(found.hosts.clone()),
            FactKind::HasLink => FactValue::Bool(!found.urls.is_empty()),
            FactKind::Ibans => FactValue::Set(found.ibans.clone()),
            FactKind::IbanCountries => {
                let mut c: Vec<String> = found
                    .ibans
                    .iter()
                    .filter_map(|i| i.get(..2).map(str::to_owned))
                    .collect();
                c.sort();
                c.dedup();
                FactValue::Set(c)
            }
            FactKind::Programs => FactValue::Set(shell.programs.clone()),
            FactKind::Network => FactValue::Bool(shell.network),
            FactKind::Redirects => FactValue::Bool(shell.redirects),
        }
    }
}

/// One fact's value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum FactValue {
    /// A set of strings (sorted, without repeats where the reader dedups).
    Set(Vec<String>),
    /// A yes or no.
    Bool(bool),
}

impl FactValue {
    fn to_cedar(&self) -> RestrictedExpression {
        match self {
            FactValue::Set(items) => RestrictedExpression::new_set(
                items
                    .iter()
                    .map(|s| RestrictedExpression::new_string(s.clone())),
            ),
            FactValue::Bool(b) => RestrictedExpression::new_bool(*b),
        }
    }
}

/// Every declared fact of `args`, per argument set in the call (absent and `null` ones have
/// none), in declaration order.
pub type Facts = Vec<(String, Vec<(FactKind, FactValue)>)>;

/// The facts declared for one top-level argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgFacts {
    /// The argument.
    pub arg: String,
    /// Whether the argument is required (else its facts record is optional).
    pub required: bool,
    /// The facts, sorted, without repeats.
    pub kinds: Vec<FactKind>,
}

/// Checks a manifest's `facts` against its argument names.
pub(super) fn compile_facts(
    raw: BTreeMap<String, Vec<FactKind>>,
    input_schema: &Value,
) -> Result<Vec<ArgFacts>, (String, String)> {
    let props = input_schema.get("properties").and_then(Value::as_object);
    let required: Vec<&str> = input_schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = Vec::with_capacity(raw.len());
    for (arg, mut kinds) in raw {
        if !props.is_some_and(|p| p.contains_key(&arg)) {
            return Err((
                format!("`facts` names `{arg}`, which is not a property of `inputSchema`"),
                "declare facts only for top-level arguments".to_owned(),
            ));
        }
        if kinds.is_empty() {
            return Err((
                format!("`facts.{arg}` lists no facts"),
                "list some of emails, domains, urls, hosts, has_link, ibans, iban_countries, programs, network, redirects, or remove it".to_owned(),
            ));
        }
        kinds.sort();
        kinds.dedup();
        out.push(ArgFacts {
            required: required.contains(&arg.as_str()),
            arg,
            kinds,
        });
    }
    Ok(out)
}

/// The facts of `args`.
pub(super) fn facts_of(declared: &[ArgFacts], args: &Value) -> Facts {
    let mut out = Vec::with_capacity(declared.len());
    for d in declared {
        let Some(value) = args.get(&d.arg).filter(|v| !v.is_null()) else {
            continue;
        };
        let mut texts = Vec::new();
        strings(value, &mut texts);
        let mut found = Found::default();
        for t in &texts {
            found.scan(t);
        }
        // Each string as a command line, when a fact asks.
        let mut shell = crate::shell::Command::default();
        if d.kinds.iter().any(|k| k.shell()) {
            for t in &texts {
                let c = crate::shell::parse(t);
                shell.programs.extend(c.programs);
                shell.network |= c.network;
                shell.redirects |= c.redirects;
            }
            shell.programs.sort();
            shell.programs.dedup();
        }
        out.push((
            d.arg.clone(),
            d.kinds
                .iter()
                .map(|k| (*k, k.value(&found, &shell)))
                .collect(),
        ));
    }
    out
}

/// The `context.facts` record for `args`, or `None` when the manifest declares no facts.
pub(super) fn facts_to_cedar(
    declared: &[ArgFacts],
    args: &Value,
) -> Result<Option<RestrictedExpression>, String> {
    if declared.is_empty() {
        return Ok(None);
    }
    let mut fields = Vec::with_capacity(declared.len());
    for (arg, facts) in facts_of(declared, args) {
        let record = RestrictedExpression::new_record(
            facts
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), v.to_cedar())),
        )
        .map_err(|e| e.to_string())?;
        fields.push((arg, record));
    }
    RestrictedExpression::new_record(fields)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// A manifest's `gate`: the tool_call gate's action per finding kind or category, for the
/// whole tool (`kinds`) and per top-level argument (`args`), over the configured
/// `[gates.tool_call]` rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateOverrides {
    /// Kind or category → action, for any argument.
    #[serde(default)]
    pub kinds: BTreeMap<String, Action>,
    /// Argument → (kind or category → action).
    #[serde(default)]
    pub args: BTreeMap<String, BTreeMap<String, Action>>,
}

impl GateOverrides {
    /// The action this manifest sets for a finding of `kind` (`category`) in argument `arg`
    /// (the first segment of its JSON pointer), if it sets one: the argument's rule for the
    /// kind, then for the category, then the tool's for the kind, then for the category.
    pub fn action(&self, arg: Option<&str>, kind: &str, category: Category) -> Option<Action> {
        let per_arg = arg.and_then(|a| self.args.get(a));
        [per_arg, Some(&self.kinds)]
            .into_iter()
            .flatten()
            .find_map(|m| m.get(kind).or_else(|| m.get(category.as_str())).copied())
    }

    /// Whether this manifest changes nothing.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty() && self.args.is_empty()
    }

    /// Checks argument names against the schema and the names against the known kinds and
    /// categories.
    pub(super) fn check(&self, input_schema: &Value) -> Result<(), (String, String)> {
        let props = input_schema.get("properties").and_then(Value::as_object);
        for arg in self.args.keys() {
            if !props.is_some_and(|p| p.contains_key(arg)) {
                return Err((
                    format!("`gate.args` names `{arg}`, which is not a property of `inputSchema`"),
                    "give rules only for top-level arguments".to_owned(),
                ));
            }
        }
        let known = crate::redact::known_names();
        for name in self
            .kinds
            .keys()
            .chain(self.args.values().flat_map(|m| m.keys()))
        {
            if !known.iter().any(|k| k == name) {
                return Err((
                    format!(
                        "`gate` names `{name}`, which is neither a detector kind nor a category"
                    ),
                    format!(
                        "use a category ({}) or a kind such as `email`, `iban`, `sensitive-key`",
                        Category::ALL.map(Category::as_str).join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The top-level member a JSON pointer starts in (`/to/0` → `to`), unescaped.
pub fn top_level(path: &str) -> Option<String> {
    let first = path.strip_prefix('/')?.split('/').next()?;
    Some(first.replace("~1", "/").replace("~0", "~"))
}

/// Scans a call's arguments once with the tool_call gate's `rules`, as `tool`'s manifest
/// adjusts them per tool and argument: the gate's verdict, the arguments with every
/// sensitive finding masked (for what is stored), and every finding whatever its action.
pub fn scan_args(
    gates: &Gates,
    tool: Option<&super::Tool>,
    args: &Value,
) -> (Screened, Option<Value>, Vec<JsonFinding>) {
    let rules = gates.rules_for(Gate::ToolCall);
    let action = |path: &str, kind: &str, category: Category| {
        tool.and_then(|t| t.gate.action(top_level(path).as_deref(), kind, category))
            .unwrap_or_else(|| rules.action(kind, category))
    };
    gates.redactor().screen_by(&action, args, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn facts_cover_every_string_of_the_argument() {
        let schema = json!({"properties": {"to": {}, "body": {}}, "required": ["to"]});
        let declared = compile_facts(
            BTreeMap::from([
                ("to".to_owned(), vec![FactKind::Domains, FactKind::Emails]),
                ("body".to_owned(), vec![FactKind::HasLink]),
            ]),
            &schema,
        )
        .unwrap();
        assert_eq!(declared[1].arg, "to");
        assert!(declared[1].required && !declared[0].required);
        let expr = facts_to_cedar(&declared, &json!({"to": ["A@X.io", "b@y.io"]}))
            .unwrap()
            .unwrap();
        let text = format!("{expr:?}");
        assert!(
            text.contains("\"x.io\"") && text.contains("\"a@x.io\""),
            "{text}"
        );
        assert!(!text.contains("body"), "{text}");
        let bad = BTreeMap::from([("nope".to_owned(), vec![FactKind::Urls])]);
        assert!(compile_facts(bad, &schema).is_err());
    }

    #[test]
    fn argument_rules_come_before_tool_rules() {
        let g: GateOverrides = serde_json::from_value(json!({
            "kinds": {"secret": "warn"},
            "args": {"new_password": {"secret": "allow"}}
        }))
        .unwrap();
        assert_eq!(
            g.action(Some("new_password"), "sensitive-key", Category::Secret),
            Some(Action::Allow)
        );
        assert_eq!(
            g.action(Some("note"), "sensitive-key", Category::Secret),
            Some(Action::Warn)
        );
        assert_eq!(g.action(None, "email", Category::Pii), None);
        assert!(
            g.check(&json!({"properties": {"new_password": {}}}))
                .is_ok()
        );
        let typo: GateOverrides =
            serde_json::from_value(json!({"kinds": {"secrets": "allow"}})).unwrap();
        assert!(typo.check(&json!({})).is_err());
    }
}
