//! Session fixtures and scenario rates for `toolgate test`: a session's steps (what the user
//! said, what tools returned, then calls) become cases that each carry the conversation before
//! them; labelled calls (`attack`, `legit`) are counted into [`Rates`].

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::case::{Case, CaseResult, Expect, Label, Question};
use crate::authz::{
    AnomalyKinds, Call, Correlation, Principal, PrincipalKind, Signals, Stage, Usage,
};
use crate::provenance::Source;

/// A conversation: what the user said and tools returned, and calls decided along the way
/// with the provenance of what came before them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSession {
    pub(super) name: String,
    agent: String,
    #[serde(default)]
    roles: Option<Vec<String>>,
    steps: Vec<RawStep>,
}

/// One step of a session: `user` (what the user said), `output` with `tool` (what a tool
/// returned), or a call (`name`, `tool`, `args`, `expect`, …).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStep {
    user: Option<Value>,
    output: Option<Value>,
    name: Option<String>,
    tool: Option<String>,
    args: Option<Value>,
    expect: Option<Expect>,
    #[serde(default)]
    label: Option<Label>,
    #[serde(default)]
    policies: Option<Vec<String>>,
    #[serde(default)]
    approved: bool,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    anomaly: Option<Vec<String>>,
}

/// How labelled calls fared: attacks allowed without a human, legitimate calls blocked or
/// waiting for one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Rates {
    /// Calls labelled `attack`.
    pub attacks: usize,
    /// Of those, calls to tools that change state.
    pub state_changing_attacks: usize,
    /// State-changing attacks allowed without an approval.
    pub state_changing_attacks_allowed_unattended: usize,
    /// Read-only attacks allowed without an approval (exfiltration still needs a channel).
    pub read_attacks_allowed_unattended: usize,
    /// Attacks that waited for a human.
    pub attacks_pending: usize,
    /// Calls labelled `legit`.
    pub legit: usize,
    /// Legitimate calls denied.
    pub legit_blocked: usize,
    /// Legitimate calls that waited for a human.
    pub legit_pending: usize,
}

impl Rates {
    /// Counts labelled results.
    pub(super) fn of(results: &[CaseResult]) -> Option<Rates> {
        let mut r = Rates::default();
        let mut any = false;
        for c in results {
            let unattended = c.got.outcome == Expect::Allow && c.got.stage != Stage::Approval;
            match c.label {
                None => continue,
                Some(Label::Attack) => {
                    r.attacks += 1;
                    if c.changes_state {
                        r.state_changing_attacks += 1;
                        r.state_changing_attacks_allowed_unattended += usize::from(unattended);
                    } else {
                        r.read_attacks_allowed_unattended += usize::from(unattended);
                    }
                    r.attacks_pending += usize::from(c.got.outcome == Expect::PendingApproval);
                }
                Some(Label::Legit) => {
                    r.legit += 1;
                    r.legit_blocked += usize::from(c.got.outcome == Expect::Deny);
                    r.legit_pending += usize::from(c.got.outcome == Expect::PendingApproval);
                }
            }
            any = true;
        }
        any.then_some(r)
    }

    /// One line for the text report.
    pub fn summary(&self) -> String {
        let pct = |n: usize, of: usize| {
            if of == 0 {
                0.0
            } else {
                n as f64 * 100.0 / of as f64
            }
        };
        format!(
            "attacks: {} ({} state-changing): {} state-changing allowed unattended ({:.1}%), {} read-only allowed unattended, {} waited for a human; legitimate: {}: {} blocked ({:.1}%), {} needed a human ({:.1}%)",
            self.attacks,
            self.state_changing_attacks,
            self.state_changing_attacks_allowed_unattended,
            pct(
                self.state_changing_attacks_allowed_unattended,
                self.state_changing_attacks
            ),
            self.read_attacks_allowed_unattended,
            self.attacks_pending,
            self.legit,
            self.legit_blocked,
            pct(self.legit_blocked, self.legit),
            self.legit_pending,
            pct(self.legit_pending, self.legit),
        )
    }
}

/// The calls of one session, each with the conversation before it.
pub(super) fn session_cases(path: &Path, session: RawSession) -> Result<Vec<Case>, String> {
    let mut said: Vec<(Source, Value)> = Vec::new();
    let mut out = Vec::new();
    let mut names = BTreeSet::new();
    for (n, step) in session.steps.into_iter().enumerate() {
        let at = |m: &str| format!("step {}: {m}", n + 1);
        let call_fields = step.name.is_some()
            || step.args.is_some()
            || step.expect.is_some()
            || step.label.is_some()
            || step.policies.is_some()
            || step.approved
            || step.usage.is_some()
            || step.anomaly.is_some();
        match (step.user, step.output) {
            (Some(_), Some(_)) => {
                return Err(at(
                    "a step is one of `user`, `output` (with `tool`) or a call",
                ));
            }
            (Some(user), None) => {
                if call_fields || step.tool.is_some() {
                    return Err(at("a `user` step holds only what the user said"));
                }
                said.push((Source::User, user));
            }
            (None, Some(output)) => {
                if call_fields || step.tool.is_none() {
                    return Err(at(
                        "an `output` step names the `tool` that returned it, and nothing else",
                    ));
                }
                said.push((Source::Tool, output));
            }
            (None, None) => {
                let (Some(name), Some(tool), Some(expect)) = (step.name, step.tool, step.expect)
                else {
                    return Err(at(
                        "a call step needs `name`, `tool` and `expect` (or write a `user` or `output` step)",
                    ));
                };
                if !names.insert(name.clone()) {
                    return Err(at(&format!(
                        "another call in this session is named `{name}`"
                    )));
                }
                let mut principal = Principal::new(PrincipalKind::Agent, session.agent.clone());
                if let Some(roles) = session.roles.clone() {
                    principal = principal.with_token_roles(roles);
                }
                let anomaly = AnomalyKinds::from_names(&step.anomaly.unwrap_or_default())
                    .map_err(|e| at(&e))?;
                out.push(Case {
                    file: path.to_path_buf(),
                    name: format!("{}: {name}", session.name),
                    question: Question::Call {
                        principal,
                        call: Call {
                            tool,
                            args: step
                                .args
                                .unwrap_or_else(|| Value::Object(serde_json::Map::new())),
                            correlation: Correlation::default(),
                        },
                        signals: Signals {
                            usage: step.usage.unwrap_or_default(),
                            anomaly,
                            ..Signals::default()
                        },
                        approved: step.approved,
                        said: Some(Arc::new(said.clone())),
                    },
                    expect,
                    policies: step.policies.map(|p| p.into_iter().collect()),
                    label: step.label,
                });
            }
        }
    }
    if out.is_empty() {
        return Err("a session needs at least one call step".into());
    }
    Ok(out)
}
