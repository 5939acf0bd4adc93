//! The Cedar half of a decision: builds the request from typed values (no JSON re-parsing),
//! evaluates it, and turns Cedar's response into a [`Verdict`] with fail-closed error handling.

use std::collections::HashSet;

use cedar_policy::{
    Context, Decision, Entities, Entity, EntityUid, Request, Response, RestrictedExpression,
};
use serde_json::Value;

use super::types::{Advice, Correlation, Outcome, Principal, Signals, Stage, Verdict, entity_uid};
use super::types::{Check, PolicyCheck};
use crate::codes::Code;
use crate::policy::Snapshot;
use crate::tools::Tool;

/// Evaluates a tool call whose arguments passed validation.
pub(super) fn evaluate(
    snap: &Snapshot,
    principal: &Principal,
    tool: &Tool,
    args: &Value,
    ids: &Correlation,
    signals: &Signals,
) -> Verdict {
    let args_expr = match CallArgs::of(tool, args, &snap.deny, signals) {
        Ok(call) => call,
        Err(e) => {
            return Verdict::deny(
                Stage::Validation,
                Some(tool),
                Advice::new(
                    Code::InvalidArgument,
                    e.to_string(),
                    "send values within the declared types' ranges",
                ),
            );
        }
    };
    let entities = match request_entities(snap, principal, &tool.resource_uid, &tool.action_uid) {
        Ok(e) => e,
        Err(advice) => return Verdict::deny(Stage::Auth, Some(tool), advice),
    };
    let entities = entities.as_ref().unwrap_or(&snap.entities);

    let as_is = match authorize(
        snap,
        principal,
        &tool.action_uid,
        tool,
        entities,
        call_context(&args_expr, false, principal, ids, signals),
    ) {
        Ok(r) => r,
        Err(v) => return *v,
    };
    let blocking = reasons(&as_is);
    if as_is.decision() == Decision::Allow {
        return Verdict::new(
            Outcome::Allow,
            Stage::Policy,
            Some(tool),
            blocking,
            Vec::new(),
        );
    }
    let approved = match authorize(
        snap,
        principal,
        &tool.action_uid,
        tool,
        entities,
        call_context(&args_expr, true, principal, ids, signals),
    ) {
        Ok(r) => r,
        Err(v) => return *v,
    };
    if approved.decision() == Decision::Allow {
        return Verdict::new(
            Outcome::PendingApproval,
            Stage::Approval,
            Some(tool),
            blocking,
            vec![Advice::new(
                Code::ApprovalRequired,
                format!(
                    "calling `{}` with these arguments needs a human approval",
                    tool.name
                ),
                "wait for an eligible approver to approve this exact call, then send it again",
            )],
        );
    }
    // Denied even if approved: the forbids that still hold are the reasons (those an approval
    // would lift are not).
    let refusing = reasons(&approved);
    Verdict::new(
        Outcome::Deny,
        Stage::Policy,
        Some(tool),
        refusing.clone(),
        vec![denial_advice(tool, &refusing)],
    )
}

fn denial_advice(tool: &Tool, forbids: &[String]) -> Advice {
    if forbids.is_empty() {
        Advice::new(
            Code::NotPermitted,
            format!("no policy permits this principal to call `{}`", tool.name),
            "call GET /v1/tools for the tools you may use, or ask the policy owners for access",
        )
    } else {
        Advice::new(
            Code::Forbidden,
            if forbids.len() == 1 {
                format!("policy {} forbids this call", quoted_list(forbids))
            } else {
                format!("policies {} forbid this call", quoted_list(forbids))
            },
            "do not retry the same call; change the arguments or ask the policy owners",
        )
    }
}

/// Evaluates the `approve` action for an approver.
pub(super) fn evaluate_approve(
    snap: &Snapshot,
    approver: &Principal,
    tool: &Tool,
    requester: &Principal,
) -> Verdict {
    let owner = snap
        .entities
        .get(&requester.uid)
        .and_then(|e| e.attr("owner"))
        .and_then(|v| v.ok())
        .and_then(|v| match v {
            cedar_policy::EvalResult::EntityUid(uid) => Some(uid),
            _ => None,
        });
    let mut pairs = vec![
        (
            "tool".to_owned(),
            RestrictedExpression::new_string(tool.name.clone()),
        ),
        (
            "risk".to_owned(),
            RestrictedExpression::new_string(tool.risk.as_str().to_owned()),
        ),
        (
            "requester".to_owned(),
            RestrictedExpression::new_entity_uid(requester.uid.clone()),
        ),
    ];
    if let Some(owner) = owner {
        pairs.push((
            "agent_owner".to_owned(),
            RestrictedExpression::new_entity_uid(owner),
        ));
    }
    let action = entity_uid("Action", "approve");
    let entities = match request_entities(snap, approver, &tool.resource_uid, &action) {
        Ok(e) => e,
        Err(advice) => return Verdict::deny(Stage::Auth, Some(tool), advice),
    };
    let entities = entities.as_ref().unwrap_or(&snap.entities);
    let context = Context::from_pairs(pairs).map_err(|e| e.to_string());
    let r = match authorize(snap, approver, &action, tool, entities, context) {
        Ok(r) => r,
        Err(deny) => return *deny,
    };
    let determining = reasons(&r);
    if r.decision() == Decision::Allow {
        return Verdict::new(
            Outcome::Allow,
            Stage::Policy,
            Some(tool),
            determining,
            Vec::new(),
        );
    }
    let advice = Advice::new(
        if determining.is_empty() {
            Code::NotPermitted
        } else {
            Code::Forbidden
        },
        format!("this human may not approve calls to `{}`", tool.name),
        "ask an approver that the policies make eligible for this tool's risk tier",
    );
    Verdict::new(
        Outcome::Deny,
        Stage::Policy,
        Some(tool),
        determining,
        vec![advice],
    )
}

/// Evaluates an administrative action (`Action::"<action>"` on `Sidecar::"toolgate"`) for a
/// human, with `context`. Allowed only on a clean permit: no permit, a forbid or any policy
/// error is a refusal, with its reason.
pub(super) fn evaluate_admin(
    snap: &Snapshot,
    who: &Principal,
    action: &str,
    context: Vec<(String, RestrictedExpression)>,
) -> Result<Vec<String>, Advice> {
    evaluate_admin_on(
        snap,
        who,
        action,
        entity_uid("Sidecar", "toolgate"),
        context,
    )
}

/// [`evaluate_admin`] on another resource (a `Tool`, for grants).
pub(super) fn evaluate_admin_on(
    snap: &Snapshot,
    who: &Principal,
    action: &str,
    resource: EntityUid,
    context: Vec<(String, RestrictedExpression)>,
) -> Result<Vec<String>, Advice> {
    let action = entity_uid("Action", action);
    let entities = request_entities(snap, who, &resource, &action)?;
    let entities = entities.as_ref().unwrap_or(&snap.entities);
    let refused = |e: String| {
        tracing::error!(error = %e, "could not build the admin request; refusing");
        Advice::new(
            Code::PolicyError,
            "the request could not be evaluated; refused (fail closed)",
            "check that the schema declares this action (run `toolgate schema`)",
        )
    };
    let context = Context::from_pairs(context).map_err(|e| refused(e.to_string()))?;
    let request = Request::new(who.uid.clone(), action.clone(), resource, context, None)
        .map_err(|e| refused(e.to_string()))?;
    let response = snap
        .authorizer
        .is_authorized(&request, snap.policies_for(&action), entities);
    if let Some(PolicyErrorDeny(failed)) = policy_errors(&response) {
        return Err(Advice::new(
            Code::PolicyError,
            format!(
                "policy {} failed to evaluate; refused (fail closed)",
                quoted_list(&failed)
            ),
            "report this to the policy owners",
        ));
    }
    let determining = reasons(&response);
    if response.decision() == Decision::Allow {
        return Ok(determining);
    }
    Err(Advice::new(
        if determining.is_empty() {
            Code::NotPermitted
        } else {
            Code::Forbidden
        },
        format!("the policies do not let this human use `{action}`"),
        "ask someone the admin policies allow (see policies/admin.cedar)",
    ))
}

/// Could any context make this call allowed? Context is left unknown; only a definite deny
/// (e.g. a role-based forbid or no permit for the principal at all) hides the tool.
pub(super) fn may_ever_allow(snap: &Snapshot, principal: &Principal, tool: &Tool) -> bool {
    let Ok(entities) = request_entities(snap, principal, &tool.resource_uid, &tool.action_uid)
    else {
        return false;
    };
    let entities = entities.as_ref().unwrap_or(&snap.entities);
    let request = Request::builder()
        .principal(principal.uid.clone())
        .action(tool.action_uid.clone())
        .resource(tool.resource_uid.clone())
        .build();
    let partial = snap.authorizer.is_authorized_partial(
        &request,
        snap.policies_for(&tool.action_uid),
        entities,
    );
    partial.decision() != Some(Decision::Deny)
}

/// One Cedar evaluation of `action` on `tool` over the action's slice; fails closed on any
/// policy error and on a request that cannot be built.
fn authorize(
    snap: &Snapshot,
    principal: &Principal,
    action: &EntityUid,
    tool: &Tool,
    entities: &Entities,
    context: Result<Context, String>,
) -> Result<Response, Box<Verdict>> {
    let request = context
        .and_then(|ctx| {
            Request::new(
                principal.uid.clone(),
                action.clone(),
                tool.resource_uid.clone(),
                ctx,
                None,
            )
            .map_err(|e| e.to_string())
        })
        .map_err(|e| Box::new(internal_deny(tool, &e)))?;
    let response = snap
        .authorizer
        .is_authorized(&request, snap.policies_for(action), entities);
    match policy_errors(&response) {
        Some(deny) => Err(Box::new(deny.verdict(tool))),
        None => Ok(response),
    }
}

/// Fail closed: Cedar skips a policy whose evaluation errors (even a `forbid`); we deny.
/// Returns the deny when any policy errored.
fn policy_errors(response: &Response) -> Option<PolicyErrorDeny> {
    let failed: Vec<String> = response
        .diagnostics()
        .errors()
        .map(|e| {
            let cedar_policy::AuthorizationError::PolicyEvaluationError(e) = e;
            let id = e.policy_id().to_string();
            // The error text can quote argument values, so only the policy id is logged.
            tracing::warn!(policy = %id, "policy evaluation error; denying (fail closed)");
            id
        })
        .collect();
    if failed.is_empty() {
        return None;
    }
    Some(PolicyErrorDeny(failed))
}

/// The ids of policies that failed to evaluate.
struct PolicyErrorDeny(Vec<String>);

impl PolicyErrorDeny {
    fn verdict(self, tool: &Tool) -> Verdict {
        let advice = Advice::new(
            Code::PolicyError,
            format!(
                "policy {} failed to evaluate for this call; denied (fail closed)",
                quoted_list(&self.0)
            ),
            "report this to the policy owners; the policy must be fixed before this call can pass",
        );
        Verdict::new(
            Outcome::Deny,
            Stage::Policy,
            Some(tool),
            self.0,
            vec![advice],
        )
    }
}

fn internal_deny(tool: &Tool, error: &str) -> Verdict {
    tracing::error!(tool = %tool.name, error, "could not build the Cedar request; denying");
    Verdict::deny(
        Stage::Policy,
        Some(tool),
        Advice::new(
            Code::InternalError,
            "the request could not be evaluated; denied (fail closed)",
            "retry later; if it persists, report it to the operators",
        ),
    )
}

fn reasons(response: &Response) -> Vec<String> {
    let mut ids: Vec<String> = response
        .diagnostics()
        .reason()
        .map(ToString::to_string)
        .collect();
    ids.sort();
    ids
}

fn quoted_list(ids: &[String]) -> String {
    ids.iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The call's arguments, path facts, declared facts, findings and provenance, converted once
/// and shared by both evaluations.
struct CallArgs {
    args: RestrictedExpression,
    paths: Option<RestrictedExpression>,
    facts: Option<RestrictedExpression>,
    findings: RestrictedExpression,
    provenance: RestrictedExpression,
}

impl CallArgs {
    /// Converts validated `args` of `tool` for Cedar.
    fn of(
        tool: &Tool,
        args: &Value,
        deny: &crate::globs::PathGuard,
        signals: &Signals,
    ) -> Result<CallArgs, crate::tools::ArgError> {
        let failed = |what: &str| crate::tools::ArgError::Cedar(format!("context.{what}"));
        let strings = |set: Option<&std::collections::BTreeSet<String>>| {
            RestrictedExpression::new_set(
                set.into_iter()
                    .flatten()
                    .map(|s| RestrictedExpression::new_string(s.clone())),
            )
        };
        let found = &signals.findings;
        let per_arg = RestrictedExpression::new_record(
            tool.typed_args()
                .map(|(name, _, _)| (name.to_owned(), strings(found.args.get(name)))),
        )
        .map_err(|_| failed("findings"))?;
        let findings = RestrictedExpression::new_record([
            ("kinds".to_owned(), strings(Some(&found.kinds))),
            ("args".to_owned(), per_arg),
        ])
        .map_err(|_| failed("findings"))?;
        let provenance = RestrictedExpression::new_record(
            tool.text_args()
                .filter(|(name, _)| args.get(*name).is_some_and(|v| !v.is_null()))
                .map(|(name, _)| {
                    (
                        name.to_owned(),
                        RestrictedExpression::new_string(signals.origin(name).as_str().to_owned()),
                    )
                }),
        )
        .map_err(|_| failed("provenance"))?;
        Ok(CallArgs {
            args: tool.args_to_cedar(args)?,
            paths: tool.paths_to_cedar(args, deny, signals.paths.as_deref())?,
            facts: tool.facts_to_cedar(args)?,
            findings,
            provenance,
        })
    }
}

fn call_context(
    call: &CallArgs,
    granted: bool,
    principal: &Principal,
    ids: &Correlation,
    signals: &Signals,
) -> Result<Context, String> {
    let approval = RestrictedExpression::new_record([(
        "granted".to_owned(),
        RestrictedExpression::new_bool(granted),
    )])
    .map_err(|e| e.to_string())?;
    let mut pairs = Vec::with_capacity(12);
    pairs.push(("args".to_owned(), call.args.clone()));
    if let Some(paths) = &call.paths {
        pairs.push(("paths".to_owned(), paths.clone()));
    }
    if let Some(facts) = &call.facts {
        pairs.push(("facts".to_owned(), facts.clone()));
    }
    pairs.push(("findings".to_owned(), call.findings.clone()));
    pairs.push(("provenance".to_owned(), call.provenance.clone()));
    pairs.push(("approval".to_owned(), approval));
    let u = &signals.usage;
    let usage = RestrictedExpression::new_record([
        ("tool_last_minute".to_owned(), long(u.tool_last_minute)),
        ("tool_last_hour".to_owned(), long(u.tool_last_hour)),
        ("calls_last_minute".to_owned(), long(u.calls_last_minute)),
        (
            "denials_last_minute".to_owned(),
            long(u.denials_last_minute),
        ),
    ])
    .map_err(|e| e.to_string())?;
    pairs.push(("usage".to_owned(), usage));
    let kinds = &signals.anomaly;
    let anomaly = RestrictedExpression::new_record([
        (
            "active".to_owned(),
            RestrictedExpression::new_bool(!kinds.is_empty()),
        ),
        (
            "kinds".to_owned(),
            RestrictedExpression::new_set(
                kinds
                    .iter()
                    .map(|k| RestrictedExpression::new_string(k.as_str().to_owned())),
            ),
        ),
    ])
    .map_err(|e| e.to_string())?;
    pairs.push(("anomaly".to_owned(), anomaly));
    pairs.push((
        "conversation".to_owned(),
        conversation(&signals.conversation)?,
    ));
    if let Some(human) = principal.on_behalf_of_uid() {
        pairs.push((
            "on_behalf_of".to_owned(),
            RestrictedExpression::new_entity_uid(human),
        ));
    }
    if let Some(c) = &ids.conv_id {
        pairs.push((
            "conv_id".to_owned(),
            RestrictedExpression::new_string(c.clone()),
        ));
    }
    if let Some(t) = &ids.trace_id {
        pairs.push((
            "trace_id".to_owned(),
            RestrictedExpression::new_string(t.clone()),
        ));
    }
    if let Some(i) = ids.iter {
        pairs.push(("iter".to_owned(), RestrictedExpression::new_long(i)));
    }
    Context::from_pairs(pairs).map_err(|e| e.to_string())
}

/// `context.conversation`: counts saturate at `i64::MAX`.
fn conversation(seen: &crate::provenance::Seen) -> Result<RestrictedExpression, String> {
    let count = |n: u64| RestrictedExpression::new_long(i64::try_from(n).unwrap_or(i64::MAX));
    let set = |s: &std::collections::BTreeSet<String>| {
        RestrictedExpression::new_set(
            s.iter()
                .map(|k| RestrictedExpression::new_string(k.clone())),
        )
    };
    let mut pairs = vec![
        (
            "known".to_owned(),
            RestrictedExpression::new_bool(seen.known),
        ),
        ("outputs".to_owned(), count(seen.outputs)),
        ("kinds".to_owned(), set(&seen.kinds)),
        ("injections".to_owned(), count(seen.injections)),
        ("injection_kinds".to_owned(), set(&seen.injection_kinds)),
    ];
    if let Some(s) = seen.seconds_since_injection {
        pairs.push(("seconds_since_injection".to_owned(), count(s)));
    }
    RestrictedExpression::new_record(pairs).map_err(|e| e.to_string())
}

fn long(n: u32) -> RestrictedExpression {
    RestrictedExpression::new_long(i64::from(n))
}

/// For principals whose roles come from a verified token, a small store: the principal (with
/// the token's roles and their ancestors as parents), the resource and the action. `None`
/// means the snapshot's own entities apply.
fn request_entities(
    snap: &Snapshot,
    principal: &Principal,
    resource: &EntityUid,
    action: &EntityUid,
) -> Result<Option<Entities>, Advice> {
    let Some(roles) = &principal.token_roles else {
        return Ok(None);
    };
    // Roles come from one source: the verified token. The entities file's parents for the same
    // id are not added, so revoking a role at the identity provider takes effect.
    let mut parents: HashSet<EntityUid> = HashSet::new();
    for role in roles {
        let uid = entity_uid("Role", role);
        if let Some(up) = snap.entities.ancestors(&uid) {
            parents.extend(up.cloned());
        }
        parents.insert(uid);
    }
    // The deployment's attributes of the same id (e.g. `owner`) stay: policies compare them
    // with what the token says (`context.on_behalf_of == principal.owner`).
    let attrs = snap
        .entities
        .get(&principal.uid)
        .map(|e| e.clone().into_inner().1)
        .unwrap_or_default();
    let me = Entity::new(principal.uid.clone(), attrs, parents).map_err(|e| {
        tracing::error!(error = %e, "could not build the principal's entity; denying");
        Advice::new(
            Code::InvalidPrincipal,
            "the credential's principal could not be evaluated",
            "check the token's claims and the entities file",
        )
    })?;
    let mut list = vec![me];
    // The tool, and the action with its groups (from the schema): `action in Action::"read"`
    // needs the action entity in the store.
    for uid in [resource, action] {
        if let Some(e) = snap.entities.get(uid) {
            list.push(e.clone());
        }
    }
    Entities::from_entities(list, None).map(Some).map_err(|e| {
        tracing::error!(error = %e, "could not build the principal's entities; denying");
        Advice::new(
            Code::InvalidPrincipal,
            "the credential's principal could not be evaluated",
            "check the token's claims",
        )
    })
}

/// Every policy of the call's action slice evaluated alone, as the call is and as if approved
/// (the same requests and entities as [`evaluate`]). Errs when the call cannot be put to
/// Cedar at all; the decision then failed closed for the same reason.
pub(super) fn each_policy(
    snap: &Snapshot,
    principal: &Principal,
    tool: &Tool,
    args: &Value,
    ids: &Correlation,
    signals: &Signals,
) -> Result<Vec<PolicyCheck>, String> {
    let call = CallArgs::of(tool, args, &snap.deny, signals).map_err(|e| e.to_string())?;
    let entities = request_entities(snap, principal, &tool.resource_uid, &tool.action_uid)
        .map_err(|a| a.message)?;
    let entities = entities.as_ref().unwrap_or(&snap.entities);
    let request = |granted: bool| {
        call_context(&call, granted, principal, ids, signals).and_then(|ctx| {
            Request::new(
                principal.uid.clone(),
                tool.action_uid.clone(),
                tool.resource_uid.clone(),
                ctx,
                None,
            )
            .map_err(|e| e.to_string())
        })
    };
    let (as_is, approved) = (request(false)?, request(true)?);
    let mut checks = Vec::new();
    for policy in snap.policies_for(&tool.action_uid).policies() {
        let alone =
            cedar_policy::PolicySet::from_policies([policy.clone()]).map_err(|e| e.to_string())?;
        let check = |request: &Request, errors: &mut Vec<String>| {
            let response = snap.authorizer.is_authorized(request, &alone, entities);
            let before = errors.len();
            errors.extend(response.diagnostics().errors().map(ToString::to_string));
            if errors.len() > before {
                Check::Errored
            } else if response.diagnostics().reason().any(|id| id == policy.id()) {
                Check::Satisfied
            } else {
                Check::NotSatisfied
            }
        };
        let mut errors = Vec::new();
        let id = policy.id().to_string();
        let (now, then) = (check(&as_is, &mut errors), check(&approved, &mut errors));
        errors.dedup();
        checks.push(PolicyCheck {
            as_is: now,
            if_approved: then,
            permit: policy.effect() == cedar_policy::Effect::Permit,
            file: snap.policy_files.get(&id).cloned(),
            id,
            errors,
        });
    }
    checks.sort_by(|a, b| (&a.file, &a.id).cmp(&(&b.file, &b.id)));
    Ok(checks)
}
