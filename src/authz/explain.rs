//! Why a call gets its answer: the verdict, every policy of the call's action evaluated alone
//! (as the call is, and as if a human had approved it), and for a pending call who could
//! approve it. What `toolgate explain` and `POST /v1/explain` show. Built from the decision's
//! own functions, so an explanation cannot disagree with the decision it explains.

use serde::Serialize;

use super::types::{Advice, Call, Outcome, PolicyCheck, Principal, PrincipalKind, Signals, Stage};
use super::{cedar, checked_args, decide_with, may_approve};
use crate::codes::Code;
use crate::policy::Snapshot;

/// Why a call waits for a human, and who may be that human.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApprovalNeed {
    /// The policies whose answer an approval changes.
    pub because: Vec<String>,
    /// Roles whose members may approve this call (by `Action::"approve"`).
    pub roles: Vec<String>,
    /// Humans of the entities file who may approve this call.
    pub humans: Vec<String>,
}

/// The explanation of one call.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// The policy revision explained.
    pub policy_revision: String,
    /// The calling agent.
    pub agent: String,
    /// The tool asked for.
    pub tool: String,
    /// What the sidecar decides (before runtime stops: kill switch, quarantine, rate limits).
    pub decision: Outcome,
    /// The stage that decided.
    pub stage: Stage,
    /// The determining policies.
    pub reasons: Vec<String>,
    /// The advice the agent gets.
    pub errors: Vec<Advice>,
    /// Every policy of the tool's action, by file and id. Empty when the call was decided
    /// before Cedar (unknown tool, invalid arguments, a path outside the root).
    pub policies: Vec<PolicyCheck>,
    /// For a pending call: why, and who may approve.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalNeed>,
    /// What the policies read besides the arguments and deployment data.
    pub inputs: Inputs,
}

/// What the policies of a call read besides its arguments and the deployment data: where each
/// text argument came from (`context.provenance`), the facts of each argument
/// (`context.facts`), what the detectors found (`context.findings`), the conversation's
/// findings (`context.conversation`), usage and anomaly signals.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Inputs {
    /// Argument → `user`, `tool`, `none` or `unknown`.
    pub provenance: std::collections::BTreeMap<String, &'static str>,
    /// Argument → fact → value, for the facts the manifest declares.
    pub facts: std::collections::BTreeMap<
        String,
        std::collections::BTreeMap<&'static str, crate::tools::FactValue>,
    >,
    /// Kinds and categories found, in all and per top-level argument.
    pub findings: super::types::Findings,
    /// What the gates found in the conversation's tool output.
    pub conversation: crate::provenance::Seen,
    /// Counters of earlier calls.
    pub usage: super::types::Usage,
    /// Anomaly signals raised.
    pub anomaly: Vec<&'static str>,
}

impl Inputs {
    /// The inputs `signals` and the facts of `call`'s arguments (for `tool`) give.
    pub fn of(tool: Option<&crate::tools::Tool>, call: &Call, signals: &Signals) -> Inputs {
        let provenance = tool
            .map(|t| {
                t.text_args()
                    .filter(|(name, _)| call.args.get(*name).is_some_and(|v| !v.is_null()))
                    .map(|(name, _)| (name.to_owned(), signals.origin(name).as_str()))
                    .collect()
            })
            .unwrap_or_default();
        let facts = tool
            .map(|t| {
                t.facts(&call.args)
                    .into_iter()
                    .map(|(arg, facts)| {
                        (
                            arg,
                            facts.into_iter().map(|(k, v)| (k.as_str(), v)).collect(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        Inputs {
            provenance,
            facts,
            findings: signals.findings.clone(),
            conversation: signals.conversation.clone(),
            usage: signals.usage,
            anomaly: signals.anomaly.iter().map(|k| k.as_str()).collect(),
        }
    }
}

/// Explains how `snap` decides `call` by `principal` with `signals`.
pub fn explain(
    snap: &Snapshot,
    principal: &Principal,
    call: &Call,
    signals: &Signals,
) -> Explanation {
    let verdict = decide_with(snap, principal, call, signals);
    let mut explanation = Explanation {
        policy_revision: snap.revision.clone(),
        agent: principal.id.clone(),
        tool: call.tool.clone(),
        decision: verdict.decision,
        stage: verdict.stage,
        reasons: verdict.reasons,
        errors: verdict.errors,
        policies: Vec::new(),
        approval: None,
        inputs: Inputs::of(snap.tools.get(&call.tool), call, signals),
    };
    let tool = snap.tools.get(&call.tool);
    let (Some(tool), PrincipalKind::Agent) = (tool, principal.kind) else {
        return explanation;
    };
    let Ok(args) = checked_args(tool, &call.args) else {
        return explanation;
    };
    match cedar::each_policy(snap, principal, tool, &args, &call.correlation, signals) {
        Ok(checks) => explanation.policies = checks,
        Err(e) => explanation.errors.push(Advice::new(
            Code::ExplainFailed,
            format!("the policies could not be evaluated one by one: {e}"),
            "the decision above failed closed for the same reason",
        )),
    }
    if explanation.decision == Outcome::PendingApproval {
        let because = explanation
            .policies
            .iter()
            .filter(|p| p.as_is != p.if_approved)
            .map(|p| p.id.clone())
            .collect();
        let (roles, humans) = approvers(snap, &call.tool, principal);
        explanation.approval = Some(ApprovalNeed {
            because,
            roles,
            humans,
        });
    }
    explanation
}

/// The roles (any member) and the humans of the entities file that may approve a call to
/// `tool` by `requester`.
fn approvers(snap: &Snapshot, tool: &str, requester: &Principal) -> (Vec<String>, Vec<String>) {
    let mut roles = Vec::new();
    let mut humans = Vec::new();
    for entity in snap.entities.iter() {
        let uid = entity.uid();
        let id = uid.id().unescaped().to_owned();
        let kind = uid.type_name().to_string();
        let approver = match kind.as_str() {
            // A member with no other role: the role alone decides.
            "Role" => Principal::new(PrincipalKind::Human, format!("(a member of {id})"))
                .with_token_roles(vec![id.clone()]),
            "Human" => Principal::new(PrincipalKind::Human, id.clone()),
            _ => continue,
        };
        if may_approve(snap, &approver, tool, requester).decision == Outcome::Allow {
            if kind == "Role" {
                roles.push(id);
            } else {
                humans.push(id);
            }
        }
    }
    roles.sort();
    humans.sort();
    (roles, humans)
}
