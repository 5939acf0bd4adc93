//! Policy test fixtures: JSON files of calls, each with the outcome the policies must give it,
//! run through the server's own decision functions (`toolgate test`).
//!
//! Owns: the fixture format (raw serde → validated [`Case`]), running a case against a
//! snapshot, and coverage (which policies determined no case).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use super::case::{Answer, Case, CaseResult, Expect, Label, Question};
pub use super::sessions::Rates;
use super::sessions::{RawSession, session_cases};
use crate::authz::{
    self, AnomalyKinds, Call, Correlation, Outcome, Principal, PrincipalKind, Signals, Stage,
    Usage, Verdict,
};
use crate::policy::Snapshot;
use crate::provenance::{Memory, Settings as ProvenanceSettings};
use crate::redact::Gates;

/// A fixture file that cannot be used, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    /// The directory or a file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// An entry named `*.json` is not a readable regular file (a dangling symlink, a
    /// directory, a FIFO): a fixture file silently skipped would drop its cases.
    #[error("{path}: {source}")]
    Source {
        /// The entry.
        path: PathBuf,
        /// Why it cannot be read.
        source: crate::policy::SourceError,
    },
    /// The file is not valid fixture JSON.
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// A case is well-formed JSON but contradicts itself.
    #[error("{path}: case {index} ({name}): {message}")]
    Case {
        /// The file.
        path: PathBuf,
        /// 1-based position in the file.
        index: usize,
        /// The case's name.
        name: String,
        /// What is wrong, and what to write instead.
        message: String,
    },
    /// The directory holds no fixture files.
    #[error("{0}: no `*.json` fixture files")]
    Empty(PathBuf),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    #[allow(dead_code, reason = "documentation for readers of the file")]
    description: Option<String>,
    #[serde(default)]
    cases: Vec<RawCase>,
    #[serde(default)]
    sessions: Vec<RawSession>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    name: String,
    expect: Expect,
    #[serde(default)]
    label: Option<Label>,
    #[serde(default)]
    policies: Option<Vec<String>>,
    // A tool call.
    agent: Option<String>,
    roles: Option<Vec<String>>,
    tool: Option<String>,
    args: Option<Value>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    anomaly: Option<Vec<String>>,
    #[serde(default)]
    approved: bool,
    // An approval: may `approver` approve `tool` for `requester`?
    approver: Option<String>,
    requester: Option<String>,
    // An operator action by a human.
    human: Option<String>,
    action: Option<String>,
    on: Option<bool>,
    target: Option<String>,
    widened: Option<Vec<String>>,
    proved: Option<bool>,
    // A grant: `human` links `template` for `grantee` on `tool`, for `ttl_s` (or `revoke`s).
    template: Option<String>,
    grantee: Option<String>,
    ttl_s: Option<i64>,
    revoke: Option<bool>,
}

/// Every case's result and the coverage of the policy set.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The policy revision tested.
    pub revision: String,
    /// Per case, in file order.
    pub results: Vec<CaseResult>,
    /// Policies that determined no case.
    pub uncovered: Vec<String>,
    /// How many policies the set has.
    pub policy_count: usize,
    /// The scenario rates over labelled calls, when any case is labelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rates: Option<Rates>,
}

impl Report {
    /// Number of failed cases.
    pub fn failures(&self) -> usize {
        self.results.iter().filter(|r| !r.passed).count()
    }
}

/// Reads every `*.json` file in `dir` (sorted), or the one file `dir` names.
pub fn read_dir(dir: &Path) -> Result<Vec<Case>, FixtureError> {
    let files = if dir.is_file() {
        vec![dir.to_path_buf()]
    } else {
        let read = |source| FixtureError::Read {
            path: dir.to_path_buf(),
            source,
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(read)? {
            let path = entry.map_err(read)?.path();
            if path.extension().is_some_and(|e| e == "json") {
                files.push(path);
            }
        }
        files.sort();
        files
    };
    if files.is_empty() {
        return Err(FixtureError::Empty(dir.to_path_buf()));
    }
    let mut cases = Vec::new();
    for path in files {
        let text = crate::policy::read_source(&path).map_err(|source| FixtureError::Source {
            path: path.clone(),
            source,
        })?;
        cases.extend(parse_file(&path, &text)?);
    }
    Ok(cases)
}

/// Parses one fixture file's text.
pub fn parse_file(path: &Path, text: &str) -> Result<Vec<Case>, FixtureError> {
    let raw: RawFile = serde_json::from_str(text).map_err(|e| FixtureError::Parse {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    if raw.cases.is_empty() && raw.sessions.is_empty() {
        return Err(FixtureError::Case {
            path: path.to_path_buf(),
            index: 0,
            name: String::new(),
            message: "the file has no `cases` and no `sessions`".into(),
        });
    }
    let mut names = BTreeSet::new();
    let mut cases = Vec::with_capacity(raw.cases.len());
    let sessions = raw.sessions;
    for (i, raw) in raw.cases.into_iter().enumerate() {
        let fail = |name: &str, message: String| FixtureError::Case {
            path: path.to_path_buf(),
            index: i + 1,
            name: name.to_owned(),
            message,
        };
        if !names.insert(raw.name.clone()) {
            return Err(fail(
                &raw.name,
                "another case in this file has this name".into(),
            ));
        }
        let name = raw.name.clone();
        let expect = raw.expect;
        let label = raw.label;
        let policies = raw.policies.clone().map(|p| p.into_iter().collect());
        if label.is_some() && raw.agent.is_none() {
            return Err(fail(&name, "only tool calls carry a `label`".into()));
        }
        let question = question(raw).map_err(|m| fail(&name, m))?;
        if expect == Expect::PendingApproval && !matches!(question, Question::Call { .. }) {
            return Err(fail(
                &name,
                "only tool calls can be pending; expect allow or deny".into(),
            ));
        }
        cases.push(Case {
            file: path.to_path_buf(),
            name,
            question,
            expect,
            policies,
            label,
        });
    }
    for (i, session) in sessions.into_iter().enumerate() {
        let index = cases.len() + i + 1;
        let session_name = session.name.clone();
        let fail = |message: String| FixtureError::Case {
            path: path.to_path_buf(),
            index,
            name: session_name.clone(),
            message,
        };
        if !names.insert(session.name.clone()) {
            return Err(fail(
                "another case or session in this file has this name".into(),
            ));
        }
        cases.extend(session_cases(path, session).map_err(fail)?);
    }
    Ok(cases)
}

/// The one question a raw case asks; every field that does not belong to it is an error.
fn question(raw: RawCase) -> Result<Question, String> {
    let kinds = [
        raw.agent.is_some(),
        raw.approver.is_some(),
        raw.human.is_some(),
    ];
    match kinds {
        [true, false, false] => call_question(raw),
        [false, true, false] => {
            refuse_fields(
                &[
                    ("args", raw.args.is_some()),
                    ("roles", raw.roles.is_some()),
                    ("usage", raw.usage.is_some()),
                    ("anomaly", raw.anomaly.is_some()),
                    ("approved", raw.approved),
                    ("action", raw.action.is_some()),
                    ("on", raw.on.is_some()),
                    ("target", raw.target.is_some()),
                    ("widened", raw.widened.is_some()),
                    ("proved", raw.proved.is_some()),
            ("template", raw.template.is_some()),
            ("grantee", raw.grantee.is_some()),
            ("ttl_s", raw.ttl_s.is_some()),
            ("revoke", raw.revoke.is_some()),
                    ("template", raw.template.is_some()),
                    ("grantee", raw.grantee.is_some()),
                    ("ttl_s", raw.ttl_s.is_some()),
                    ("revoke", raw.revoke.is_some()),
                ],
                "an approval case",
            )?;
            let (Some(approver), Some(requester), Some(tool)) =
                (raw.approver, raw.requester, raw.tool)
            else {
                return Err("an approval case needs `approver`, `requester` and `tool`".into());
            };
            Ok(Question::Approve {
                approver: Principal::new(PrincipalKind::Human, approver),
                requester: Principal::new(PrincipalKind::Agent, requester),
                tool,
            })
        }
        [false, false, true] => admin_question(raw),
        _ => Err(
            "name exactly one of `agent` (a tool call), `approver` (an approval) or `human` (an operator action)"
                .into(),
        ),
    }
}

fn call_question(raw: RawCase) -> Result<Question, String> {
    refuse_fields(
        &[
            ("requester", raw.requester.is_some()),
            ("action", raw.action.is_some()),
            ("on", raw.on.is_some()),
            ("target", raw.target.is_some()),
            ("widened", raw.widened.is_some()),
            ("proved", raw.proved.is_some()),
        ],
        "a tool call",
    )?;
    let (Some(agent), Some(tool)) = (raw.agent, raw.tool) else {
        return Err("a tool call needs `agent` and `tool`".into());
    };
    let mut principal = Principal::new(PrincipalKind::Agent, agent);
    if let Some(roles) = raw.roles {
        principal = principal.with_token_roles(roles);
    }
    let anomaly = AnomalyKinds::from_names(&raw.anomaly.unwrap_or_default())?;
    Ok(Question::Call {
        principal,
        call: Call {
            tool,
            args: raw
                .args
                .unwrap_or_else(|| Value::Object(serde_json::Map::new())),
            correlation: Correlation::default(),
        },
        signals: Signals {
            usage: raw.usage.unwrap_or_default(),
            anomaly,
            ..Signals::default()
        },
        approved: raw.approved,
        said: None,
    })
}

fn admin_question(raw: RawCase) -> Result<Question, String> {
    let granting = raw.action.as_deref() == Some("grant");
    refuse_fields(
        &[
            ("tool", raw.tool.is_some() && !granting),
            ("template", raw.template.is_some() && !granting),
            ("grantee", raw.grantee.is_some() && !granting),
            ("ttl_s", raw.ttl_s.is_some() && !granting),
            ("revoke", raw.revoke.is_some() && !granting),
            ("args", raw.args.is_some()),
            ("roles", raw.roles.is_some()),
            ("usage", raw.usage.is_some()),
            ("anomaly", raw.anomaly.is_some()),
            ("approved", raw.approved),
            ("requester", raw.requester.is_some()),
        ],
        "an operator action",
    )?;
    let human = Principal::new(PrincipalKind::Human, raw.human.unwrap_or_default());
    let action = raw.action.as_deref().unwrap_or_default();
    let on_only = matches!(action, "kill_switch" | "quarantine");
    refuse_fields(
        &[
            ("on", raw.on.is_some() && !on_only),
            ("target", raw.target.is_some() && action != "quarantine"),
            (
                "widened",
                raw.widened.is_some() && action != "approve_policy_change",
            ),
            (
                "proved",
                raw.proved.is_some() && action != "approve_policy_change",
            ),
        ],
        &format!("`{action}`"),
    )?;
    let on = || {
        raw.on
            .ok_or_else(|| format!("`{action}` needs `on` (true or false)"))
    };
    match action {
        "kill_switch" => Ok(Question::KillSwitch { human, on: on()? }),
        "quarantine" => Ok(Question::Quarantine {
            human,
            on: on()?,
            target: Principal::new(
                PrincipalKind::Agent,
                raw.target
                    .clone()
                    .ok_or("`quarantine` needs `target` (an agent id)")?,
            ),
        }),
        "approve_policy_change" => Ok(Question::PolicyChange {
            human,
            widened: raw.widened.clone().unwrap_or_default(),
            proved: raw.proved.unwrap_or(true),
        }),
        "explain" => Ok(Question::Explain { human }),
        "grant" => Ok(Question::Grant {
            human,
            tool: raw.tool.clone().ok_or("`grant` needs `tool`")?,
            template: raw
                .template
                .clone()
                .unwrap_or_else(|| "grant-tool-access".to_owned()),
            grantee: raw
                .grantee
                .as_deref()
                .ok_or("`grant` needs `grantee` (e.g. `Agent::\\\"dev-agent\\\"`)")?
                .parse()
                .map_err(|e| format!("`grantee` is not an entity: {e}"))?,
            ttl_s: raw.ttl_s.unwrap_or(0),
            revoke: raw.revoke.unwrap_or(false),
        }),
        _ => Err(
            "`action` must be `kill_switch`, `quarantine`, `approve_policy_change`, `explain` or `grant`"
                .into(),
        ),
    }
}

fn refuse_fields(fields: &[(&str, bool)], what: &str) -> Result<(), String> {
    match fields.iter().find(|(_, present)| *present) {
        Some((name, _)) => Err(format!("`{name}` does not belong in {what}")),
        None => Ok(()),
    }
}

/// Asks the policies of `snap` one case's question, with the server's decision functions.
/// With `gates`, a call's arguments are scanned as the server scans them: policies see the
/// findings, and what the tool_call gate blocks is denied at stage `gate`.
pub fn answer(snap: &Snapshot, question: &Question, gates: Option<&Gates>) -> Answer {
    match question {
        Question::Call {
            principal,
            call,
            signals,
            approved,
            said,
        } => {
            let mut signals = signals.clone();
            let tool = snap.tools.get(&call.tool);
            let mut blocked = None;
            if let (Some(g), Some(t)) = (gates, tool) {
                let (screened, _, found) = crate::tools::scan_args(g, Some(t), &call.args);
                for f in &found {
                    signals.findings.add(&f.path, f.kind, f.category.as_str());
                }
                if screened.decision == crate::redact::Action::Block {
                    let kinds: BTreeSet<&str> = screened
                        .violations
                        .iter()
                        .filter(|v| v.action == crate::redact::Action::Block)
                        .map(|v| v.kind)
                        .collect();
                    blocked = Some(kinds.into_iter().collect::<Vec<_>>().join(", "));
                }
            }
            if let (Some(said), Some(t)) = (said, tool) {
                let memory = Memory::new(ProvenanceSettings::default());
                for (source, content) in said.iter() {
                    memory.record(FIXTURE_AGENT, FIXTURE_CONV, *source, content);
                    // Tool output passes the output gate, as on the server: the conversation
                    // keeps what it found (`context.conversation`).
                    if let (crate::provenance::Source::Tool, Some(g)) = (source, gates) {
                        let screened = g.screen(crate::redact::Gate::Output, content);
                        memory.observe(FIXTURE_AGENT, FIXTURE_CONV, &screened.seen);
                    }
                }
                let traced = t.traced_values(&call.args);
                signals.provenance = memory.classify(
                    FIXTURE_AGENT,
                    Some(FIXTURE_CONV),
                    traced.iter().map(|(n, v)| (*n, v.as_ref())),
                );
                signals.conversation = memory.seen(FIXTURE_AGENT, Some(FIXTURE_CONV));
            }
            let verdict = authz::decide_with(snap, principal, call, &signals);
            let refused_early = verdict.decision == Outcome::Deny
                && matches!(
                    verdict.stage,
                    Stage::Auth | Stage::Registry | Stage::Validation
                );
            if let Some(kinds) = blocked.filter(|_| !refused_early) {
                return Answer {
                    outcome: Expect::Deny,
                    stage: Stage::Gate,
                    policies: Vec::new(),
                    errors: vec![format!(
                        "the arguments contain what the tool_call gate blocks: {kinds}"
                    )],
                };
            }
            let mut answer = from_verdict(verdict);
            if *approved && answer.outcome == Expect::PendingApproval {
                // As the server settles a call that comes back with its approval.
                answer.outcome = Expect::Allow;
                answer.stage = Stage::Approval;
                answer.errors.clear();
            }
            answer
        }
        Question::Approve {
            approver,
            requester,
            tool,
        } => from_verdict(authz::may_approve(snap, approver, tool, requester)),
        Question::KillSwitch { human, on } => {
            from_admin(authz::may_flip_kill_switch(snap, human, *on))
        }
        Question::Quarantine { human, on, target } => {
            from_admin(authz::may_quarantine(snap, human, *on, &target.uid))
        }
        Question::PolicyChange {
            human,
            widened,
            proved,
        } => from_admin(authz::may_approve_policy_change(
            snap, human, widened, *proved,
        )),
        Question::Explain { human } => from_admin(authz::may_explain(snap, human)),
        Question::Grant {
            human,
            tool,
            template,
            grantee,
            ttl_s,
            revoke,
        } => from_admin(authz::may_grant(
            snap,
            human,
            authz::GrantAsk {
                tool,
                template,
                grantee,
                ttl_s: *ttl_s,
                revoke: *revoke,
            },
        )),
    }
}

fn from_verdict(v: Verdict) -> Answer {
    Answer {
        outcome: v.decision.into(),
        stage: v.stage,
        policies: v.reasons,
        errors: v.errors.into_iter().map(|a| a.message).collect(),
    }
}

fn from_admin(r: Result<Vec<String>, authz::Advice>) -> Answer {
    match r {
        Ok(policies) => Answer {
            outcome: Expect::Allow,
            stage: Stage::Policy,
            policies,
            errors: Vec::new(),
        },
        Err(advice) => Answer {
            outcome: Expect::Deny,
            stage: Stage::Policy,
            policies: Vec::new(),
            errors: vec![advice.message],
        },
    }
}

/// Runs every case against `snap` (arguments scanned with `gates`, when given) and works out
/// coverage and, over labelled calls, the scenario rates.
pub fn run(snap: &Snapshot, cases: &[Case], gates: Option<&Gates>) -> Report {
    let mut determined = BTreeSet::new();
    let results: Vec<CaseResult> = cases
        .iter()
        .map(|case| {
            let got = answer(snap, &case.question, gates);
            let changes_state = match &case.question {
                Question::Call { call, .. } => snap
                    .tools
                    .get(&call.tool)
                    .is_some_and(|t| t.classification != crate::tools::Classification::Read),
                _ => false,
            };
            determined.extend(got.policies.iter().cloned());
            let policies_match = case.policies.as_ref().is_none_or(|want| {
                want.len() == got.policies.len() && got.policies.iter().all(|p| want.contains(p))
            });
            CaseResult {
                file: case.file.display().to_string(),
                name: case.name.clone(),
                expect: case.expect,
                expect_policies: case.policies.clone(),
                passed: got.outcome == case.expect && policies_match,
                got,
                label: case.label,
                changes_state,
            }
        })
        .collect();
    let rates = Rates::of(&results);
    let uncovered = snap
        .policies
        .policies()
        .map(|p| p.id().to_string())
        .filter(|id| !determined.contains(id))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    Report {
        revision: snap.revision.clone(),
        results,
        uncovered,
        policy_count: snap.policy_count(),
        rates,
    }
}

/// The principal and conversation a session's memory is kept under.
const FIXTURE_AGENT: &str = "fixture";
const FIXTURE_CONV: &str = "session";

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Case>, FixtureError> {
        parse_file(Path::new("t.json"), text)
    }

    #[test]
    fn a_case_asks_one_question() {
        let err = parse(
            r#"{"cases":[{"name":"x","expect":"allow","agent":"a","approver":"b","tool":"t"}]}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("exactly one of"), "{err}");
        let err = parse(
            r#"{"cases":[{"name":"x","expect":"allow","approver":"b","requester":"a","tool":"t","args":{}}]}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("`args` does not belong"), "{err}");
        let err = parse(r#"{"cases":[{"name":"x","expect":"pending_approval","human":"h","action":"kill_switch","on":true}]}"#)
            .unwrap_err();
        assert!(err.to_string().contains("only tool calls"), "{err}");
    }

    #[test]
    fn unknown_fields_and_bad_json_name_the_line() {
        let err = parse("{\"cases\":[\n{\"name\":\"x\",\"expect\":\"allow\",\"agnt\":\"a\"}]}")
            .unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("t.json:2:"), "{text}");
        assert!(text.contains("agnt"), "{text}");
        let err = parse(r#"{"cases":[{"name":"x","expect":"maybe","agent":"a","tool":"t"}]}"#)
            .unwrap_err();
        assert!(err.to_string().contains("maybe"), "{err}");
    }

    #[test]
    fn names_are_unique_and_anomalies_known() {
        let dup = r#"{"cases":[
            {"name":"x","expect":"allow","agent":"a","tool":"t"},
            {"name":"x","expect":"deny","agent":"a","tool":"t"}]}"#;
        assert!(parse(dup).unwrap_err().to_string().contains("case 2 (x)"));
        let bad = r#"{"cases":[{"name":"x","expect":"allow","agent":"a","tool":"t","anomaly":["spooky"]}]}"#;
        assert!(parse(bad).unwrap_err().to_string().contains("spike"));
    }
}
