//! The decision function: a call plus a policy snapshot gives a [`Verdict`]. Pure: no I/O, no
//! clock, no randomness, so it is table- and property-tested directly and `toolgate authorize`
//! runs exactly what the server runs.
//!
//! Order: principal kind · registry lookup · JSON Schema · path normalization · Cedar (with the
//! approval re-check). Fail closed: any Cedar evaluation error in any policy denies, even in a
//! `forbid` that Cedar itself would skip.

mod cedar;
mod explain;
mod types;

pub use explain::{ApprovalNeed, Explanation, Inputs, explain};
pub use types::{
    Advice, AnomalyKind, AnomalyKinds, Call, Check, Correlation, Findings, Outcome, PolicyCheck,
    Principal, PrincipalKind, Signals, Stage, Usage, Verdict,
};

use std::borrow::Cow;

use serde_json::Value;

use crate::codes::Code;
use crate::paths::normalize_path;
use crate::policy::Snapshot;
use crate::tools::Tool;

/// Decides one tool call with nothing observed of the caller (no usage, no anomaly): what
/// `toolgate authorize` and the tests evaluate.
pub fn decide(snap: &Snapshot, principal: &Principal, call: &Call) -> Verdict {
    decide_with(snap, principal, call, &Signals::default())
}

/// Decides one tool call; `signals` become `context.usage` and `context.anomaly`.
pub fn decide_with(
    snap: &Snapshot,
    principal: &Principal,
    call: &Call,
    signals: &Signals,
) -> Verdict {
    if principal.kind != PrincipalKind::Agent {
        return Verdict::deny(
            Stage::Auth,
            None,
            Advice::new(
                Code::NotAnAgent,
                "only agents call tools; this credential belongs to a human",
                "use the agent's own credential for tool calls",
            ),
        );
    }
    let Some(tool) = snap.tools.get(&call.tool) else {
        return Verdict::deny(
            Stage::Registry,
            None,
            unregistered(
                snap,
                &call.tool,
                "call GET /v1/tools for the tools you may use",
            ),
        );
    };
    let args = match checked_args(tool, &call.args) {
        Ok(args) => args,
        Err(errors) => return Verdict::deny_many(Stage::Validation, Some(tool), errors),
    };
    cedar::evaluate(snap, principal, tool, &args, &call.correlation, signals)
}

/// Normalizes path arguments, then validates the result against the JSON Schema, so a
/// schema `pattern` judges the same path Cedar and the tool see (`docs/../x` is `x`). Returns
/// the arguments Cedar sees, or every problem found.
/// Arguments are copied only when normalizing changes a path.
fn checked_args<'a>(tool: &Tool, args: &'a Value) -> Result<Cow<'a, Value>, Vec<Advice>> {
    let mut normalized = Cow::Borrowed(args);
    let mut errors = Vec::new();
    for name in &tool.path_args {
        // A non-string is left for the schema to refuse.
        let Some(raw) = args.get(name.as_str()).and_then(Value::as_str) else {
            continue;
        };
        match normalize_path(raw) {
            Ok(clean) if clean == raw => {}
            Ok(clean) => {
                if let Some(slot) = normalized.to_mut().get_mut(name.as_str()) {
                    *slot = Value::String(clean);
                }
            }
            Err(e) => errors.push(Advice::new(
                Code::PathOutsideRoot,
                format!("argument `/{name}`: {e}"),
                "use a path relative to the service root, without `..` segments that leave it",
            )),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let violations = tool.check_args(&normalized);
    if violations.is_empty() {
        return Ok(normalized);
    }
    Err(violations
        .into_iter()
        .map(|v| {
            Advice::new(
                Code::InvalidArgument,
                format!("argument `{}` {}", v.at(), v.message),
                "fix the argument to match the tool's inputSchema (GET /v1/tools)",
            )
        })
        .collect())
}

/// Why `tool` is not in `snap`. With no policy set loaded at all, no tool is registered, and
/// the caller is told that (and how an operator finds the cause), not that one name is wrong.
fn unregistered(snap: &Snapshot, tool: &str, suggestion: &str) -> Advice {
    if snap.is_nothing() {
        return Advice::new(
            Code::NoPolicySet,
            "no policy set is loaded, so no tool is registered and every call is denied: the policy files did not load when toolgate started, and its data directory holds no last good set",
            "not a problem with this call; an operator must fix the policy files: `toolgate validate` lists every problem, and GET /readyz names the first (`last_reload_error_at`); a fix is picked up without a restart",
        );
    }
    Advice::new(
        Code::UnknownTool,
        format!("no tool named `{}` is registered", printable(tool)),
        suggestion,
    )
}

/// Tool names echoed back are cut short and stripped of control characters.
fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(64).collect()
}

/// The tools `principal` could possibly be allowed to call (now or after approval), decided by
/// Cedar partial evaluation with the call's context unknown.
pub fn visible_tools<'a>(snap: &'a Snapshot, principal: &Principal) -> Vec<&'a Tool> {
    if principal.kind != PrincipalKind::Agent {
        return Vec::new();
    }
    snap.tools
        .values()
        .filter(|tool| cedar::may_ever_allow(snap, principal, tool))
        .collect()
}

/// Operator actions are for humans: anyone else gets `wrong_principal_kind` with `why` and
/// `fix`, before any policy is asked.
fn human_only(who: &Principal, why: &str, fix: &str) -> Result<(), Advice> {
    if who.kind == PrincipalKind::Human {
        Ok(())
    } else {
        Err(Advice::new(Code::WrongPrincipalKind, why, fix))
    }
}

/// Whether the policies let `who` (a human) turn the kill switch `on` or off. `Ok` carries the
/// determining policies; `Err` says why not.
pub fn may_flip_kill_switch(
    snap: &Snapshot,
    who: &Principal,
    on: bool,
) -> Result<Vec<String>, Advice> {
    human_only(
        who,
        "only humans flip the kill switch",
        "use an operator's (human) credential",
    )?;
    cedar::evaluate_admin(
        snap,
        who,
        "kill_switch",
        vec![(
            "on".to_owned(),
            cedar_policy::RestrictedExpression::new_bool(on),
        )],
    )
}

/// Whether the policies let `who` (a human) quarantine `target` (`on`) or release it. `Ok`
/// carries the determining policies; `Err` says why not.
pub fn may_quarantine(
    snap: &Snapshot,
    who: &Principal,
    on: bool,
    target: &cedar_policy::EntityUid,
) -> Result<Vec<String>, Advice> {
    human_only(
        who,
        "only humans quarantine or release agents",
        "use an operator's (human) credential",
    )?;
    cedar::evaluate_admin(
        snap,
        who,
        "quarantine",
        vec![
            (
                "on".to_owned(),
                cedar_policy::RestrictedExpression::new_bool(on),
            ),
            (
                "target".to_owned(),
                cedar_policy::RestrictedExpression::new_entity_uid(target.clone()),
            ),
        ],
    )
}

/// Whether the policies let `who` (a human) activate a held policy change that widens
/// `widened` (`proved`: the diff was proved by the solver). `Ok` carries the determining
/// policies; `Err` says why not.
pub fn may_approve_policy_change(
    snap: &Snapshot,
    who: &Principal,
    widened: &[String],
    proved: bool,
) -> Result<Vec<String>, Advice> {
    human_only(
        who,
        "only humans approve policy changes",
        "use an operator's (human) credential",
    )?;
    let widened = widened
        .iter()
        .map(|a| cedar_policy::RestrictedExpression::new_string(a.clone()));
    cedar::evaluate_admin(
        snap,
        who,
        "approve_policy_change",
        vec![
            (
                "widened".to_owned(),
                cedar_policy::RestrictedExpression::new_set(widened),
            ),
            (
                "proved".to_owned(),
                cedar_policy::RestrictedExpression::new_bool(proved),
            ),
        ],
    )
}

/// Whether the policies let `who` (a human) see explanations of decisions. `Ok` carries the
/// determining policies; `Err` says why not.
pub fn may_explain(snap: &Snapshot, who: &Principal) -> Result<Vec<String>, Advice> {
    human_only(
        who,
        "explanations are for humans (auditors), not agents",
        "use an auditor's (human) credential",
    )?;
    cedar::evaluate_admin(snap, who, "explain", Vec::new())
}

/// What a grant (or its revocation) asks Cedar: `template` linked for `grantee` on `tool`,
/// lasting `ttl_s` seconds (0 for a revocation).
#[derive(Debug, Clone, Copy)]
pub struct GrantAsk<'a> {
    /// The tool granted (the action's resource).
    pub tool: &'a str,
    /// The template's id.
    pub template: &'a str,
    /// `?principal`: the agent or role granted.
    pub grantee: &'a cedar_policy::EntityUid,
    /// How long the grant lasts, in seconds.
    pub ttl_s: i64,
    /// A revocation rather than a grant.
    pub revoke: bool,
}

/// Whether the policies let `who` (a human) grant (or revoke) `ask`. `Ok` carries the
/// determining policies; `Err` says why not.
pub fn may_grant(
    snap: &Snapshot,
    who: &Principal,
    ask: GrantAsk<'_>,
) -> Result<Vec<String>, Advice> {
    human_only(
        who,
        "only humans grant or revoke access",
        "use an operator's (human) credential",
    )?;
    // A tool no longer registered is still asked about by name (revoking a grant for it must
    // stay possible); policies that read its attributes then fail closed.
    let resource = snap.tools.get(ask.tool).map_or_else(
        || types::entity_uid("Tool", ask.tool),
        |tool| tool.resource_uid.clone(),
    );
    use cedar_policy::RestrictedExpression as R;
    cedar::evaluate_admin_on(
        snap,
        who,
        "grant",
        resource,
        vec![
            (
                "template".to_owned(),
                R::new_string(ask.template.to_owned()),
            ),
            ("grantee".to_owned(), R::new_string(ask.grantee.to_string())),
            ("ttl_s".to_owned(), R::new_long(ask.ttl_s)),
            ("revoke".to_owned(), R::new_bool(ask.revoke)),
        ],
    )
}

/// Whether the policies let `who` (a human) approve `tool`'s changed MCP descriptor
/// (`offered` in place of the reviewed `pinned`). `Ok` carries the determining policies.
pub fn may_approve_descriptor(
    snap: &Snapshot,
    who: &Principal,
    tool: &Tool,
    upstream: &str,
    pinned: &str,
    offered: &str,
) -> Result<Vec<String>, Advice> {
    human_only(
        who,
        "only humans approve changed MCP descriptors",
        "use an operator's (human) credential",
    )?;
    use cedar_policy::RestrictedExpression as R;
    cedar::evaluate_admin_on(
        snap,
        who,
        "approve_descriptor",
        tool.resource_uid.clone(),
        vec![
            ("upstream".to_owned(), R::new_string(upstream.to_owned())),
            ("pinned".to_owned(), R::new_string(pinned.to_owned())),
            ("offered".to_owned(), R::new_string(offered.to_owned())),
        ],
    )
}

/// May `approver` approve a pending call to `tool` made by `requester`? Decided by the Cedar
/// `approve` action; evaluation errors deny.
pub fn may_approve(
    snap: &Snapshot,
    approver: &Principal,
    tool_name: &str,
    requester: &Principal,
) -> Verdict {
    if approver.kind != PrincipalKind::Human || requester.kind != PrincipalKind::Agent {
        return Verdict::deny(
            Stage::Auth,
            None,
            Advice::new(
                Code::WrongPrincipalKind,
                "approvers are humans and requesters are agents",
                "check the approver's and requester's entity types",
            ),
        );
    }
    let Some(tool) = snap.tools.get(tool_name) else {
        return Verdict::deny(
            Stage::Registry,
            None,
            unregistered(snap, tool_name, "check the tool name of the pending call"),
        );
    };
    cedar::evaluate_approve(snap, approver, tool, requester)
}
