//! The five guardrail gates (input, context, tool_call, output, stream) and what each does
//! with a finding: block, mask or warn, chosen per gate by category (`secret`, `pii`,
//! `entropy`) or by kind (`email`, `jwt`, …). A kind named in a list wins over its category.

use serde_json::Value;

use super::{Category, JsonFinding, Redactor};

/// A gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Gate {
    /// The user's message.
    Input,
    /// System prompts and retrieved content.
    Context,
    /// A tool call's arguments.
    ToolCall,
    /// Tool results and model replies.
    Output,
    /// Streamed chunks.
    Stream,
}

impl Gate {
    /// Every gate.
    pub const ALL: [Gate; 5] = [
        Gate::Input,
        Gate::Context,
        Gate::ToolCall,
        Gate::Output,
        Gate::Stream,
    ];

    /// The name in routes and config.
    pub fn as_str(self) -> &'static str {
        match self {
            Gate::Input => "input",
            Gate::Context => "context",
            Gate::ToolCall => "tool_call",
            Gate::Output => "output",
            Gate::Stream => "stream",
        }
    }

    /// The gate named `name`.
    pub fn parse(name: &str) -> Option<Gate> {
        Gate::ALL.into_iter().find(|g| g.as_str() == name)
    }
}

/// What a gate does with a finding, from least to most severe.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Nothing found, or nothing that matters here.
    Allow,
    /// Let it through; report the finding.
    Warn,
    /// Let it through with the finding replaced by `<redacted:KIND>`.
    Mask,
    /// Refuse the content.
    Block,
}

impl Action {
    /// The name in answers and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Warn => "warn",
            Action::Mask => "mask",
            Action::Block => "block",
        }
    }
}

/// One gate's rules: the categories and kinds each action applies to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GateRules {
    /// Refused.
    pub block: Vec<String>,
    /// Masked.
    pub mask: Vec<String>,
    /// Reported.
    pub warn: Vec<String>,
    /// The tool_call gate only: a masked call is decided and run with the masked arguments
    /// (otherwise masking changes only what is stored and shown).
    pub apply_mask: bool,
}

impl GateRules {
    fn of(block: &[&str], mask: &[&str], warn: &[&str]) -> GateRules {
        let own = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect();
        GateRules {
            block: own(block),
            mask: own(mask),
            warn: own(warn),
            apply_mask: false,
        }
    }

    /// The shipped rules for `gate`.
    pub fn default_for(gate: Gate) -> GateRules {
        match gate {
            // High-entropy tokens are masked wherever content leaves toward a tool, a model or
            // a store: they are the backstop for credentials in formats no detector knows.
            // Content headed for the model (retrieved text, tool output) is where injected
            // instructions hide: those gates report them, and mask invisible text. What the
            // user says is reported, not masked: a password the user gives on purpose is what
            // the task needs (a deployment that wants it hidden from the model masks it).
            Gate::Input => GateRules::of(&[], &[], &["secret", "pii", "entropy"]),
            Gate::Context | Gate::Output | Gate::Stream => GateRules::of(
                &[],
                &["secret", "pii", "entropy", "hidden-unicode"],
                &["injection"],
            ),
            Gate::ToolCall => GateRules::of(&["secret"], &["pii", "entropy"], &[]),
        }
    }

    /// The action for a finding: a list naming its kind decides; else a list naming its
    /// category; the most severe wins within each step.
    pub fn action(&self, kind: &str, category: Category) -> Action {
        let lists = [
            (Action::Block, &self.block),
            (Action::Mask, &self.mask),
            (Action::Warn, &self.warn),
        ];
        for (action, list) in lists {
            if list.iter().any(|k| k == kind) {
                return action;
            }
        }
        for (action, list) in lists {
            if list.iter().any(|c| c == category.as_str()) {
                return action;
            }
        }
        Action::Allow
    }

    /// Every name the lists use that is neither a category nor a kind the detectors know.
    pub fn unknown_names<'a>(&'a self, redactor: &'a Redactor) -> impl Iterator<Item = &'a str> {
        self.block
            .iter()
            .chain(&self.mask)
            .chain(&self.warn)
            .map(String::as_str)
            .filter(move |n| {
                !Category::ALL.iter().any(|c| c.as_str() == *n)
                    && !redactor.kinds().any(|(k, _)| k == *n)
                    && !matches!(*n, "sensitive-key" | "high-entropy")
            })
    }
}

/// One violation in a gate's answer.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Violation {
    /// The detector's kind.
    pub kind: &'static str,
    /// Its category.
    pub category: Category,
    /// What this gate does with it.
    pub action: Action,
    /// JSON pointer to the string, for JSON content.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Byte range in the (original) string; absent for a masked JSON key's value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span: Option<[usize; 2]>,
    /// The finding is in the member name at `path`, not in its value.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub in_key: bool,
}

/// A gate's verdict on some content.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Screened {
    /// The most severe action among the violations.
    pub decision: Action,
    /// The content with every finding this gate masks or blocks replaced.
    pub content: Value,
    /// What was found (at most [`MAX_VIOLATIONS`], in order).
    pub violations: Vec<Violation>,
    /// How many violations there were in all.
    pub found: usize,
    /// Every finding's kind and category name, each pair once, whatever this gate does with
    /// it (what a conversation remembers: `context.conversation`).
    #[serde(skip)]
    pub seen: Vec<(&'static str, &'static str)>,
}

/// The most violations an answer lists.
pub const MAX_VIOLATIONS: usize = 1000;

/// The `action:kind` pairs of `violations`, sorted and without repeats: what audit records
/// keep of a verdict (never the content).
pub fn labels(violations: &[Violation]) -> Vec<String> {
    let mut out: Vec<String> = violations
        .iter()
        .map(|v| format!("{}:{}", v.action.as_str(), v.kind))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The verdict over a gate's findings: the worst action, the violations that matter (at most
/// [`MAX_VIOLATIONS`]; masking covers them all) and how many there were.
pub(super) fn verdict(mut violations: Vec<Violation>) -> (Action, Vec<Violation>, usize) {
    violations.retain(|v| v.action != Action::Allow);
    let found = violations.len();
    violations.truncate(MAX_VIOLATIONS);
    let decision = violations
        .iter()
        .map(|v| v.action)
        .max()
        .unwrap_or(Action::Allow);
    (decision, violations, found)
}

impl Redactor {
    /// Screens `content` (a string or any JSON) with `rules`.
    pub fn screen(&self, rules: &GateRules, content: &Value) -> Screened {
        self.screen_and_redact(rules, content, false).0
    }

    /// Screens `content` with `rules`; with `redacted`, also returns the content with every
    /// sensitive finding masked whatever the rules say (for what is stored or shown), from the
    /// same scan.
    pub fn screen_and_redact(
        &self,
        rules: &GateRules,
        content: &Value,
        redacted: bool,
    ) -> (Screened, Option<Value>) {
        let (screened, stored, _) = self.screen_by(
            &|_, kind, category| rules.action(kind, category),
            content,
            redacted,
        );
        (screened, stored)
    }

    /// [`Redactor::screen_and_redact`] where `action` decides each finding by where it is (a
    /// JSON pointer), its kind and its category; also returns every finding, whatever its
    /// action (what `context.findings` shows policies).
    pub fn screen_by(
        &self,
        action: &dyn Fn(&str, &str, Category) -> Action,
        content: &Value,
        redacted: bool,
    ) -> (Screened, Option<Value>, Vec<JsonFinding>) {
        let hide = |path: &str, kind: &str, category: Category| {
            action(path, kind, category) >= Action::Mask
        };
        let found = self.scan_json(content);
        let masked = Redactor::mask_found(content, &found, &hide);
        let stored =
            redacted.then(|| Redactor::mask_found(content, &found, &|_, _, c| c.sensitive()));
        let top_level_string = content.is_string();
        let violations: Vec<Violation> = found
            .iter()
            .map(|f| Violation {
                kind: f.kind,
                category: f.category,
                action: action(&f.path, f.kind, f.category),
                path: (!top_level_string).then(|| f.path.clone()),
                span: f.finding.as_ref().map(|f| [f.start, f.end]),
                in_key: f.in_key,
            })
            .collect();
        let (decision, violations, count) = verdict(violations);
        let mut seen: Vec<(&'static str, &'static str)> = found
            .iter()
            .map(|f| (f.kind, f.category.as_str()))
            .collect();
        seen.sort_unstable();
        seen.dedup();
        let screened = Screened {
            decision,
            content: masked,
            violations,
            found: count,
            seen,
        };
        (screened, stored, found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redact::RedactConfig;
    use serde_json::json;

    #[test]
    fn kinds_override_categories_and_the_worst_action_decides() {
        let r = Redactor::new(&RedactConfig::default()).unwrap();
        let rules = GateRules {
            warn: vec!["email".to_owned()],
            ..GateRules::default_for(Gate::ToolCall)
        };
        let s = r.screen(&rules, &json!("mail a@b.io"));
        assert_eq!(s.decision, Action::Warn);
        assert_eq!(s.content, json!("mail a@b.io"));
        let s = r.screen(&rules, &json!({"q": "call 415-555-0142", "token": "abc"}));
        assert_eq!(s.decision, Action::Block);
        assert_eq!(
            s.content,
            json!({"q": "call <redacted:phone>", "token": "<redacted:sensitive-key>"})
        );
        assert!(rules.unknown_names(&r).next().is_none());
        let bad = GateRules::of(&["secrets"], &[], &[]);
        assert_eq!(bad.unknown_names(&r).collect::<Vec<_>>(), ["secrets"]);
    }
}
