//! Approvals in the pipeline: the approval half of deciding a call (a pending decision opens
//! or reuses an approval; a call re-sent with an approved `approval_id` uses it once),
//! listing and long-polling them, a human's approve or deny, and expiry.

use std::sync::Arc;
use std::time::Duration;

use cedar_policy::EntityUid;
use serde::Deserialize;
use serde_json::{Value, json};

use super::body::word;
use super::{Error, Gateway};
use crate::approvals::{Approval, ApprovalError, Full, Open, OpenError, Planned, Scope, Status};
use crate::audit::{ApprovalEvent, Entry, EntryKind, Event, Sidecar};
use crate::authz::{self, Advice, Call, Outcome, Principal, PrincipalKind, Stage, Verdict};
use crate::clock::now_ms;
use crate::codes::Code;
use crate::policy::Snapshot;

/// Longest long-poll.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// How long a call waits for the approval an identical call is storing, and how often it
/// opens again when that store failed.
const REUSE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
const REUSE_TRIES: usize = 3;

fn store_failed(e: &impl std::fmt::Display) -> Error {
    tracing::error!(error = %e, "approval store failed");
    Error::StoreUnavailable
}

fn refused(e: ApprovalError) -> Error {
    match e {
        ApprovalError::Refused(crate::approvals::Refusal::NotFound) => Error::ApprovalNotFound,
        ApprovalError::Refused(r) => Error::ApprovalConflict {
            code: r.code(),
            message: r.to_string(),
        },
        ApprovalError::Store(e) => store_failed(&e),
    }
}

/// A verdict after the approval rules: the final verdict, the approval id to report, the
/// approval change to commit with the decision's record (a new pending approval, or one
/// used), and, when a bound on pending approvals refused to open one, which bound (the verdict
/// is then a deny at stage `approval_limit`, answered 429 once recorded).
pub(super) struct Settled {
    pub verdict: Verdict,
    pub approval_id: Option<String>,
    pub planned: Option<Planned>,
    pub full: Option<Full>,
}

/// Applies the approval rules to a fresh verdict.
pub(super) async fn settle(
    state: &Gateway,
    snap: &Snapshot,
    who: &Principal,
    (call, digest, preview): (&Call, &str, &str),
    approval_id: Option<String>,
    (verdict, provenance): (Verdict, &[(String, crate::provenance::Origin)]),
    decision_id: &str,
) -> Result<Settled, Error> {
    let settled = |verdict, approval_id| Settled {
        verdict,
        approval_id,
        planned: None,
        full: None,
    };
    if verdict.decision != Outcome::PendingApproval {
        // Allowed without it or denied anyway: an approval is neither needed nor used.
        return Ok(settled(verdict, None));
    }
    let now = now_ms();
    let principal = who.uid.to_string();
    let on_behalf_of = who.on_behalf_of_uid().map(|u| u.to_string());
    let tool = snap.tools.get(&call.tool);
    if let Some(id) = approval_id {
        return match state
            .approvals
            .transition(&id, |a| {
                a.redeemed(
                    (&principal, on_behalf_of.as_deref()),
                    &call.tool,
                    digest,
                    now,
                )
            })
            .await
        {
            // Used only once the allow is recorded, with the change: until then, the lock
            // keeps a second redemption waiting.
            Ok(used) => {
                let mut v = verdict;
                v.decision = Outcome::Allow;
                v.stage = Stage::Approval;
                v.errors.clear();
                Ok(Settled {
                    approval_id: Some(used.approval.id.clone()),
                    planned: Some(used),
                    ..settled(v, None)
                })
            }
            Err(ApprovalError::Refused(r)) => Ok(settled(
                Verdict::deny(
                    Stage::Approval,
                    tool,
                    Advice::new(
                        r.code(),
                        r.to_string(),
                        "send the call without `approval_id` to ask for a new approval",
                    ),
                ),
                None,
            )),
            Err(ApprovalError::Store(e)) => Err(store_failed(&e)),
        };
    }
    let risk = verdict
        .risk
        .map(|r| r.as_str().to_owned())
        .unwrap_or_default();
    let new = Approval {
        id: uuid::Uuid::now_v7().to_string(),
        principal,
        on_behalf_of,
        tool: call.tool.clone(),
        expires_ms: now + state.approvals.ttl.for_risk_ms(&risk),
        risk,
        args_sha256: digest.to_owned(),
        args_preview: preview.to_owned(),
        policy_revision: snap.revision.clone(),
        decision_id: decision_id.to_owned(),
        created_ms: now,
        status: Status::Pending,
        decided_by: None,
        reason: None,
        decided_ms: None,
        used_ms: None,
        waiting_on: verdict.reasons.clone(),
        provenance: provenance
            .iter()
            .map(|(arg, origin)| (arg.clone(), origin.as_str().to_owned()))
            .collect(),
    };
    // An approval already open for this exact call is reused (and needs no new place), once
    // it is stored: one that an identical call is still storing is waited for, and if that
    // store fails this call opens its own.
    let mut opened = state.approvals.open(new.clone());
    for _ in 0..REUSE_TRIES {
        let Ok(Open::Reused(approval)) = &opened else {
            break;
        };
        if state.approvals.settled(&approval.id, REUSE_WAIT).await {
            break;
        }
        opened = state.approvals.open(new.clone());
    }
    match opened {
        Ok(Open::Reused(approval)) => {
            if state.approvals.settled(&approval.id, REUSE_WAIT).await {
                Ok(settled(verdict, Some(approval.id)))
            } else {
                Err(store_failed(
                    &"an identical call's approval was never stored",
                ))
            }
        }
        // Stored with the pending decision's record: no approval without its decision.
        Ok(Open::New(planned)) => {
            keep_for_approvers(state, &planned.approval.id, &call.args);
            Ok(Settled {
                approval_id: Some(planned.approval.id.clone()),
                planned: Some(planned),
                ..settled(verdict, None)
            })
        }
        Err(OpenError::Full(full)) => Ok(Settled {
            verdict: Verdict::deny(
                Stage::ApprovalLimit,
                tool,
                Advice::new(
                    Code::TooManyPendingApprovals,
                    format!("this call needs a human approval, and {full}; none was opened"),
                    match full.scope {
                        Scope::Agent => {
                            "wait for a human to decide your pending approvals (GET /v1/approvals?status=pending) or for them to expire; do not retry in a loop"
                        }
                        Scope::Total => {
                            "wait for humans to work through the pending approvals or for them to expire; do not retry in a loop"
                        }
                    },
                ),
            ),
            approval_id: None,
            planned: None,
            full: Some(full),
        }),
        Err(OpenError::Store(e)) => Err(store_failed(&e)),
    }
}

/// Keeps what an eligible approver is shown of a new approval's call: the arguments in full
/// but for secrets, high-entropy tokens, card and social-security numbers; addresses and IBANs
/// stay readable. In memory only; without detectors nothing is kept (approvers then see the
/// redacted preview).
fn keep_for_approvers(state: &Gateway, id: &str, args: &Value) {
    let Some(g) = &state.gates else {
        return;
    };
    let shown = g.redactor().mask_json(args, &|_, kind, category| {
        matches!(
            category,
            crate::redact::Category::Secret | crate::redact::Category::Entropy
        ) || matches!(kind, "credit-card" | "us-ssn")
    });
    state.approvals.keep_arguments(id, shown);
}

/// An approval as shown over HTTP: stored fields plus the effective status, and for a human
/// who may decide it, the arguments in full but for secrets (while this sidecar holds them).
fn view(state: &Gateway, who: &Principal, a: &Approval, now: u64) -> Value {
    let mut v = serde_json::to_value(a).unwrap_or(Value::Null);
    if let Some(obj) = v.as_object_mut() {
        obj.insert("status".to_owned(), json!(a.status_at(now)));
        if who.kind == PrincipalKind::Human
            && let Some(args) = state.approvals.arguments(&a.id)
        {
            obj.insert("arguments".to_owned(), args);
        }
    }
    v
}

/// Agents see only their own approvals; humans see those the policies let them decide (the
/// `approve` action on the tool, for this requester).
fn visible(snap: &Snapshot, who: &Principal, a: &Approval) -> bool {
    match who.kind {
        PrincipalKind::Agent => a.principal == who.uid.to_string(),
        PrincipalKind::Human => may_decide(snap, who, a),
    }
}

/// Whether `who` may approve or deny `a` under `snap`.
fn may_decide(snap: &Snapshot, who: &Principal, a: &Approval) -> bool {
    requester_of(a).is_some_and(|requester| {
        authz::may_approve(snap, who, &a.tool, &requester).decision == Outcome::Allow
    })
}

/// `GET /v1/approvals` query: a status filter and a limit.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    status: Option<String>,
    limit: Option<usize>,
}

impl ListQuery {
    /// The pending ones, up to the default limit.
    pub fn pending() -> ListQuery {
        ListQuery {
            status: Some("pending".to_owned()),
            limit: None,
        }
    }
}

/// The approvals `who` may see (`GET /v1/approvals?status=pending`).
pub fn list_approvals(state: &Gateway, who: &Principal, q: ListQuery) -> Result<Value, Error> {
    let status = match q.status.as_deref() {
        None | Some("all") => None,
        Some(s) => Some(Status::parse(s).ok_or_else(|| {
            Error::bad_request(
                Code::InvalidQuery,
                "`status` must be pending, approved, denied, expired, used or all",
            )
        })?),
    };
    let now = now_ms();
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let snap = state.policy.current();
    let found = state
        .approvals
        .list(status, now, limit, |a| visible(&snap, who, a))
        .map_err(|e| store_failed(&e))?;
    let approvals: Vec<Value> = found.iter().map(|a| view(state, who, a, now)).collect();
    Ok(json!({ "approvals": approvals }))
}

/// `GET /v1/approvals/{id}` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShowQuery {
    /// Long-poll: `30s`, `500ms` or seconds.
    wait: Option<String>,
}

fn parse_wait(text: &str) -> Option<Duration> {
    let (num, unit) = match text.strip_suffix("ms") {
        Some(n) => (n, 1),
        None => (text.strip_suffix('s').unwrap_or(text), 1000),
    };
    let n: u64 = num.parse().ok()?;
    Some(Duration::from_millis(n.saturating_mul(unit)).min(MAX_WAIT))
}

/// One approval (`GET /v1/approvals/{id}`); `?wait=30s` waits until it is no longer pending.
pub async fn show_approval(
    state: &Gateway,
    who: &Principal,
    id: &str,
    q: ShowQuery,
) -> Result<Value, Error> {
    let wait = match q.wait.as_deref() {
        None => Duration::ZERO,
        Some(w) => parse_wait(w).ok_or_else(|| {
            Error::bad_request(Code::InvalidQuery, "`wait` must look like `30s` or `500ms`")
        })?,
    };
    // A long poll holds a connection: one of the caller's `max_waits_per_principal` places.
    let _held = if wait.is_zero() {
        None
    } else {
        Some(super::hold(state, who, crate::limits::HeldKind::Wait)?)
    };
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let mut changes = state.approvals.subscribe();
        let now = now_ms();
        let snap = state.policy.current();
        let a = state
            .approvals
            .get_or_opening(id)
            .map_err(|e| store_failed(&e))?
            .filter(|a| visible(&snap, who, a))
            .ok_or(Error::ApprovalNotFound)?;
        if a.status_at(now) != Status::Pending || tokio::time::Instant::now() >= deadline {
            return Ok(view(state, who, &a, now));
        }
        // Wake at the next change, at expiry, or at the deadline.
        let until_expiry = Duration::from_millis(a.expires_ms.saturating_sub(now));
        let _ = tokio::time::timeout(
            until_expiry.min(deadline - tokio::time::Instant::now()),
            changes.changed(),
        )
        .await;
    }
}

/// `POST /v1/approvals/{id}/approve` (or `/deny`) body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideBody {
    #[serde(default)]
    reason: Option<String>,
}

/// A human approves (or denies) approval `id`: eligibility is a Cedar decision under the live
/// policies; the change takes effect with its audit record.
pub async fn settle_approval(
    state: &Gateway,
    who: Principal,
    id: &str,
    body: DecideBody,
    approve: bool,
) -> Result<Value, Error> {
    let reason = super::gates::screen_note(state, body.reason);
    let snap: Arc<Snapshot> = state.policy.current();
    let current = state
        .approvals
        .get(id)
        .map_err(|e| store_failed(&e))?
        .ok_or(Error::ApprovalNotFound)?;
    // Eligibility is a Cedar decision under the live policies.
    let requester = requester_of(&current)
        .ok_or_else(|| Error::NotEligible("the requester is not an agent".to_owned()))?;
    let eligible = authz::may_approve(&snap, &who, &current.tool, &requester);
    if eligible.decision != Outcome::Allow {
        let why = eligible
            .errors
            .first()
            .map_or_else(|| "not eligible".to_owned(), |e| e.message.clone());
        return Err(Error::NotEligible(why));
    }
    let approver = who.uid.to_string();
    let now = now_ms();
    let planned = state
        .approvals
        .transition(id, |a| a.decided(&approver, approve, reason.clone(), now))
        .await
        .map_err(refused)?;
    let decided = planned.approval.clone();
    let entry: Entry = Event::Approval(ApprovalEvent {
        principal: Some(approver),
        reasons: eligible.reasons,
        revision: Some(snap.revision.clone()),
        args_preview: Some(decided.args_preview.clone()),
        detail: Some(format!(
            "requester {}; reason: {}",
            decided.principal,
            decided.reason.as_deref().unwrap_or("-")
        )),
        ..approval_event(&decided, now, word(&decided.status))
    })
    .into();
    // The decision takes effect with its record, in a task of its own: a client that hangs
    // up cannot leave it stored but not in force.
    let task_state = state.clone();
    tokio::spawn(async move {
        let effect = planned.effect.clone();
        match task_state.audit.commit(vec![entry], vec![effect]).await {
            Ok(_) => {
                task_state.approvals.done(planned);
                Ok(())
            }
            Err(e) => {
                task_state.approvals.abandon(planned);
                tracing::error!(error = %e, "approval decision not recorded; nothing changed");
                Err(Error::StoreUnavailable)
            }
        }
    })
    .await
    .map_err(|_| Error::StoreUnavailable)??;
    Ok(view(state, &who, &decided, now))
}

/// The requesting agent as a principal, from its stored uid (`Agent::"name"`, Cedar escapes
/// included).
fn requester_of(a: &Approval) -> Option<Principal> {
    let uid: EntityUid = a.principal.parse().ok()?;
    (uid.type_name().to_string() == PrincipalKind::Agent.type_name())
        .then(|| Principal::new(PrincipalKind::Agent, uid.id().unescaped()))
}

/// What every audit record about approval `a` says: which approval, call and event.
fn approval_event(a: &Approval, at_ms: u64, event: String) -> ApprovalEvent {
    ApprovalEvent {
        id: a.id.clone(),
        at_ms,
        tool: a.tool.clone(),
        risk: a.risk.clone(),
        event,
        args_sha256: a.args_sha256.clone(),
        ..ApprovalEvent::default()
    }
}

/// Marks overdue approvals expired (each recorded as denied by timeout, with the change), and
/// removes approvals ended longer ago than the retention (recorded as one `approvals_removed`
/// entry). Run periodically; a pass that cannot be recorded changes nothing and is tried again.
pub async fn expire_due(state: &Gateway) {
    let now = now_ms();
    loop {
        match state.approvals.expiry(now).await {
            Ok(None) => break,
            Ok(Some(pass)) => {
                let entries = pass
                    .approvals
                    .iter()
                    .map(|a| {
                        Event::Approval(ApprovalEvent {
                            principal: Some(a.principal.clone()),
                            reasons: vec!["approval_timeout".to_owned()],
                            ..approval_event(a, now, "expired".to_owned())
                        })
                        .into()
                    })
                    .collect();
                match state.audit.commit(entries, pass.effects.clone()).await {
                    Ok(_) => state.approvals.passed(pass),
                    Err(e) => {
                        tracing::error!(error = %e, "approvals not expired: the change could not be recorded");
                        return;
                    }
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "could not expire approvals");
                return;
            }
        }
    }
    loop {
        match state.approvals.sweep(now).await {
            Ok(None) => break,
            Ok(Some(pass)) => {
                let ids: Vec<&str> = pass.approvals.iter().map(|a| a.id.as_str()).collect();
                let entry = Event::Sidecar(Sidecar {
                    kind: EntryKind::Admin,
                    at_ms: Some(now),
                    stage: Some("approval".to_owned()),
                    decision: "approvals_removed".to_owned(),
                    reasons: vec!["retention".to_owned()],
                    detail: Some(format!(
                        "{} ended approvals removed: {}",
                        ids.len(),
                        ids.join(" ")
                    )),
                    ..Sidecar::default()
                })
                .into();
                match state.audit.commit(vec![entry], pass.effects.clone()).await {
                    Ok(_) => state.approvals.passed(pass),
                    Err(e) => {
                        tracing::error!(error = %e, "ended approvals not removed: the change could not be recorded");
                        return;
                    }
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "could not remove ended approvals");
                return;
            }
        }
    }
}
