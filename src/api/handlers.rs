//! Route handlers. Each loads the policy snapshot once and uses it to the end, so the decision
//! and its response name the same revision.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::body::{DecisionBody, RawCall};
use super::{ApiError, AppState, approvals, callgate};
use crate::audit::{Entry, EntryKind, args_digest};
use crate::authz::{self, Advice, Principal, Stage, Verdict};
use crate::clock::now_ms;
use crate::clock::unix_ms;
use crate::policy::{Problem, Snapshot};
use crate::tools::Risk;

fn new_decision_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Authenticates, or produces the auth-stage deny.
fn principal(
    state: &AppState,
    headers: &HeaderMap,
    snap: &Snapshot,
) -> Result<Principal, ApiError> {
    let header = headers.get(header::AUTHORIZATION).map(|h| h.as_bytes());
    state.auth.authenticate(header).map_err(|e| {
        let decision_id = new_decision_id();
        tracing::info!(decision_id, stage = "auth", reason = %e, "credential refused");
        let verdict = Verdict::deny(
            Stage::Auth,
            None,
            Advice::new(
                "unauthenticated",
                e.to_string(),
                "send the agent's token as `Authorization: Bearer <token>`",
            ),
        );
        ApiError::Unauthenticated(Box::new(DecisionBody::new(
            verdict,
            decision_id,
            snap.revision.clone(),
        )))
    })
}

/// Authenticates against the live snapshot (routes that decide nothing themselves).
pub(super) fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<Principal, ApiError> {
    let snap = state.policy.current();
    principal(state, headers, &snap)
}

/// Authenticates a human; agents get a 403 saying `why` the route is not theirs.
pub(super) fn human(
    state: &AppState,
    headers: &HeaderMap,
    why: &'static str,
) -> Result<Principal, ApiError> {
    let who = authenticate(state, headers)?;
    if who.kind != crate::authz::PrincipalKind::Human {
        return Err(ApiError::Forbidden(why));
    }
    Ok(who)
}

/// `POST /v1/authorize`: decide, settle any approval, record, answer. Nothing is answered
/// without its audit record (a failed write turns the answer into a 503 deny).
pub async fn authorize(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<RawCall>, JsonRejection>,
) -> Result<(HeaderMap, Json<DecisionBody>), ApiError> {
    let d = decide(&state, &headers, body).await?;
    Ok((d.headers, Json(d.body)))
}

/// A recorded decision, with what it was made on: the snapshot, the caller, and the call
/// (`None` when an operator's stop denied it before the call was looked at).
pub(super) struct Decided {
    /// Quota headers.
    pub headers: HeaderMap,
    /// The answer.
    pub body: DecisionBody,
    /// The policy snapshot the decision was made under (the request keeps using it).
    pub snap: Arc<Snapshot>,
    /// The authenticated caller (`Agent::"x"`).
    pub principal: String,
    /// The call.
    pub call: Option<crate::authz::Call>,
}

/// The decision path of `/v1/authorize` and `/v1/execute`.
pub(super) async fn decide(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<Json<RawCall>, JsonRejection>,
) -> Result<Decided, ApiError> {
    let started = std::time::Instant::now();
    let snap: Arc<Snapshot> = state.policy.current();
    let who = match principal(state, headers, &snap) {
        Ok(who) => who,
        Err(ApiError::Unauthenticated(body)) => {
            let entry = audit_entry(&body, None, None, started);
            let body = commit(state, *body, entry, started).await?;
            return Err(ApiError::Unauthenticated(Box::new(body)));
        }
        Err(other) => return Err(other),
    };
    let (call, approval_id) = body?.0.into_call()?;
    // `Agent::"dev-agent"`: the key of the principal's limits, usage and signals.
    let principal_id = who.uid.to_string();
    let tool = snap.tools.get(&call.tool);
    // Operators' stops come first: the kill switch, then this agent's quarantine.
    if let Some((stage, advice)) = stopped(state, &principal_id) {
        let verdict = Verdict::deny(stage, tool, advice);
        let caller = (&who, principal_id.as_str());
        let body = record_early(state, &snap, caller, &call, verdict, started).await?;
        return Ok(Decided {
            headers: HeaderMap::new(),
            body,
            snap,
            principal: principal_id,
            call: None,
        });
    }
    // Limits come before Cedar: a flood costs a map lookup per call, not an evaluation.
    let quota = match state.limiter.check(
        &principal_id,
        &call.tool,
        tool.is_some(),
        tool.and_then(|t| t.limits.rate),
    ) {
        Ok(quota) => quota,
        Err(limited) => {
            let caller = (&who, principal_id.as_str());
            return Err(rate_limited(state, &snap, caller, &call, limited, started).await);
        }
    };
    let signals = state
        .monitor
        .signals(&principal_id, &call.tool, tool.is_some());
    let verdict = authz::decide_with(&snap, &who, &call, &signals);
    // The tool_call gate may deny, or (apply_mask) decide again on masked arguments.
    let gated = callgate::screen(state, &snap, &who, &call, verdict, &signals);
    // Approvals and the audit record are bound to this one digest of the arguments.
    let digest = args_digest(&call.args);
    let decision_id = new_decision_id();
    let approvals::Settled {
        verdict,
        approval_id: approval,
        planned,
        full,
    } = approvals::settle(
        state,
        &snap,
        &who,
        (&call, &digest, &gated.preview),
        approval_id,
        gated.verdict,
        &decision_id,
    )
    .await?;
    state
        .monitor
        .observe(&principal_id, &call.tool, verdict.decision, verdict.stage);
    tracing::info!(
        decision_id,
        principal = %who.uid,
        tool = call.tool.chars().take(64).collect::<String>(),
        decision = ?verdict.decision,
        stage = ?verdict.stage,
        revision = snap.revision,
        "decision"
    );
    let mut body = DecisionBody::new(verdict, decision_id, snap.revision.clone());
    body.approval_id = approval;
    body.gate = gated.report;
    body.arguments = gated.arguments;
    let call_record = CallRecord {
        call: &call,
        digest: &digest,
        preview: gated.preview,
    };
    let entry = audit_entry(&body, Some(&who), Some(call_record), started);
    let headers = quota
        .as_ref()
        .map(super::error::quota_headers)
        .unwrap_or_default();
    let body = match planned {
        None => commit(state, body, entry, started).await?,
        Some(planned) => commit_with(state, body, entry, started, planned).await?,
    };
    if let Some(full) = full {
        // Recorded like every deny; answered 429, as a rate limit is.
        return Err(ApiError::TooManyPendingApprovals {
            body: Box::new(body),
            full,
        });
    }
    Ok(Decided {
        headers,
        body,
        snap,
        principal: principal_id,
        call: Some(call),
    })
}

/// Records `entry`, or refuses the answer with a 503: nothing is claimed without its record.
/// `what` names the record in the log (e.g. "gate verdict").
pub(super) async fn record_or_refuse(
    state: &AppState,
    entry: Entry,
    what: &str,
) -> Result<(), ApiError> {
    state.audit.record(entry).await.map_err(|e| {
        tracing::error!(error = %e, "{what} not recorded; refusing to answer");
        ApiError::StoreUnavailable
    })
}

/// Records `entry` (the audit record of `body`), then counts the answer in the metrics. A
/// record that cannot be written turns the answer into a 503 deny at stage `audit`.
async fn commit(
    state: &AppState,
    body: DecisionBody,
    entry: Entry,
    started: std::time::Instant,
) -> Result<DecisionBody, ApiError> {
    let writing = std::time::Instant::now();
    let recorded = state.audit.record(entry).await;
    state.metrics.audit_write(writing.elapsed());
    counted(state, body, recorded, started)
}

/// [`commit`] for a decision that changes an approval (opens one, or uses one): the change is
/// stored with the record, in a task of its own so that a client hanging up cannot leave it
/// stored but not in force. If the record fails, the approval is as it was: an approved call
/// denied this way can be sent again.
async fn commit_with(
    state: &AppState,
    body: DecisionBody,
    entry: Entry,
    started: std::time::Instant,
    planned: crate::approvals::Planned,
) -> Result<DecisionBody, ApiError> {
    let task_state = state.clone();
    let effect = planned.effect.clone();
    let writing = std::time::Instant::now();
    let recorded = tokio::spawn(async move {
        let recorded = task_state.audit.commit(vec![entry], vec![effect]).await;
        match &recorded {
            Ok(_) => task_state.approvals.done(planned),
            Err(_) => task_state.approvals.abandon(planned),
        }
        recorded.map(|_| ())
    })
    .await
    .unwrap_or_else(|e| {
        Err(crate::audit::StoreError(format!(
            "the commit task failed: {e}"
        )))
    });
    state.metrics.audit_write(writing.elapsed());
    counted(state, body, recorded, started)
}

/// Counts the answer in the metrics, by what the record's write did.
fn counted(
    state: &AppState,
    body: DecisionBody,
    recorded: Result<(), crate::audit::StoreError>,
    started: std::time::Instant,
) -> Result<DecisionBody, ApiError> {
    let (outcome, stage) = match &recorded {
        Ok(()) => (body.decision, body.stage),
        Err(_) => (crate::authz::Outcome::Deny, Stage::Audit),
    };
    state
        .metrics
        .decision(body.tool.as_deref(), outcome, stage, started.elapsed());
    match recorded {
        Ok(()) => Ok(body),
        Err(e) => Err(audit_failed(body, &e)),
    }
}

/// Whether an operator has stopped this principal's calls: the kill switch (everyone), or a
/// quarantine (this agent). The stage and advice of the deny.
fn stopped(state: &AppState, principal_id: &str) -> Option<(Stage, Advice)> {
    if state.admin.kill_switch_on() {
        return Some((
            Stage::KillSwitch,
            Advice::new(
                "kill_switch",
                "an operator has stopped every tool call (kill switch on)",
                "do not retry; wait until an operator turns the kill switch off",
            ),
        ));
    }
    let q = state.admin.quarantine().get(principal_id)?;
    Some((
        Stage::Quarantine,
        Advice::new(
            "quarantined",
            format!(
                "this agent is quarantined (cause: {}, since unix ms {}); its calls are denied until a human releases it",
                q.cause, q.at_ms
            ),
            "do not retry; an operator reviews the audit log and releases it (POST /v1/admin/quarantine)",
        ),
    ))
}

/// The answer to a call a rate limit refused: recorded like any deny, then a 429.
async fn rate_limited(
    state: &AppState,
    snap: &Snapshot,
    caller: (&Principal, &str),
    call: &crate::authz::Call,
    limited: crate::limits::Limited,
    started: std::time::Instant,
) -> ApiError {
    let verdict = Verdict::deny(
        Stage::RateLimit,
        snap.tools.get(&call.tool),
        Advice::new(
            "rate_limited",
            format!(
                "rate limit reached; retry in {} s",
                limited.retry_after_secs
            ),
            "wait before calling again",
        ),
    );
    match record_early(state, snap, caller, call, verdict, started).await {
        Ok(body) => ApiError::RateLimited {
            body: Box::new(body),
            limited,
        },
        Err(e) => e,
    }
}

/// A deny decided before Cedar, counted and recorded like any other. `caller` is the
/// principal and its id string.
async fn record_early(
    state: &AppState,
    snap: &Snapshot,
    (who, principal_id): (&Principal, &str),
    call: &crate::authz::Call,
    verdict: Verdict,
    started: std::time::Instant,
) -> Result<DecisionBody, ApiError> {
    state
        .monitor
        .observe(principal_id, &call.tool, verdict.decision, verdict.stage);
    let body = DecisionBody::new(verdict, new_decision_id(), snap.revision.clone());
    let digest = args_digest(&call.args);
    let call_record = CallRecord {
        call,
        digest: &digest,
        preview: callgate::preview(state, &call.args),
    };
    let entry = audit_entry(&body, Some(who), Some(call_record), started);
    commit(state, body, entry, started).await
}

/// A call as its audit record keeps it: the digest and the redacted preview.
struct CallRecord<'a> {
    call: &'a crate::authz::Call,
    digest: &'a str,
    preview: String,
}

/// The audit entry for an answered decision.
fn audit_entry(
    body: &DecisionBody,
    who: Option<&Principal>,
    record: Option<CallRecord<'_>>,
    started: std::time::Instant,
) -> Entry {
    let call = record.as_ref().map(|r| r.call);
    let digest = record.as_ref().map(|r| r.digest);
    Entry {
        kind: EntryKind::Decision,
        id: body.decision_id.clone(),
        at_ms: now_ms(),
        principal: who.map(|w| w.uid.to_string()),
        tool: call.map(|c| c.tool.chars().take(128).collect()),
        risk: body.risk.map(|r| r.as_str().to_owned()),
        decision: word(&body.decision),
        stage: Some(word(&body.stage)),
        reasons: if body.reasons.is_empty() {
            body.errors.iter().map(|e| e.code.to_owned()).collect()
        } else {
            body.reasons.clone()
        },
        policy_revision: Some(body.policy_revision.clone()),
        args_sha256: digest.map(str::to_owned),
        args_preview: record.map(|r| r.preview),
        conv_id: call.and_then(|c| c.correlation.conv_id.clone()),
        trace_id: call.and_then(|c| c.correlation.trace_id.clone()),
        iter: call.and_then(|c| c.correlation.iter),
        duration_us: Some(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX)),
        detail: match (&body.approval_id, &body.gate) {
            (Some(id), _) => Some(format!("approval {id}")),
            (None, Some(g)) => Some(gate_detail(g)),
            (None, None) => None,
        },
    }
}

/// What the tool_call gate found, for the audit record: actions and kinds, no values.
fn gate_detail(report: &callgate::GateReport) -> String {
    format!(
        "tool_call gate {}: {}",
        report.decision.as_str(),
        crate::redact::labels(&report.violations).join(",")
    )
}

/// The answer when a decision could not be recorded: a deny, whatever was decided.
fn audit_failed(mut body: DecisionBody, error: &crate::audit::StoreError) -> ApiError {
    tracing::error!(error = %error, decision_id = body.decision_id, "decision not recorded; denying");
    body.decision = crate::authz::Outcome::Deny;
    body.stage = Stage::Audit;
    body.approval_id = None;
    body.errors = vec![Advice::new(
        "audit_unavailable",
        "the decision could not be recorded in the audit log; denied (fail closed)",
        "retry later; operators: see /readyz and the logs",
    )];
    ApiError::AuditUnavailable(Box::new(body))
}

/// The snake_case word a unit enum serializes to.
pub(super) fn word<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        _ => String::new(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsQuery {
    #[serde(default)]
    summary: bool,
}

/// `GET /v1/tools`: the caller's tools as OpenAI function definitions.
pub async fn tools(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<ToolsQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let snap = state.policy.current();
    let who = principal(&state, &headers, &snap)?;
    let Query(query) = query?;
    let visible = authz::visible_tools(&snap, &who);
    let functions: Vec<Value> = visible
        .iter()
        .map(|t| {
            json!({"type": "function", "function": {
            "name": t.name, "description": t.description, "parameters": t.input_schema}})
        })
        .collect();
    let governance: serde_json::Map<String, Value> = visible
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                json!({"risk": t.risk, "classification": t.classification, "limits": t.limits,
                       // Programs get a network namespace of their own unless they declare it.
                       "network": t.executor.as_ref().is_some_and(|e| e.access.network),
                       "writes": t.executor.as_ref().map(|e| &e.access.writes)}),
            )
        })
        .collect();
    let mut out =
        json!({"policy_revision": snap.revision, "tools": functions, "governance": governance});
    if let (true, Some(obj)) = (query.summary, out.as_object_mut()) {
        obj.insert(
            "guardrail_summary".to_owned(),
            Value::String(summary(&visible)),
        );
    }
    Ok(Json(out))
}

fn summary(tools: &[&crate::tools::Tool]) -> String {
    let names = |pred: &dyn Fn(Risk) -> bool| {
        tools
            .iter()
            .filter(|t| pred(t.risk))
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut s = String::from("Every tool call is checked by toolgate before it runs. ");
    let unattended = names(&|r| matches!(r, Risk::Low | Risk::Medium));
    let approval = names(&|r| matches!(r, Risk::High | Risk::Critical));
    if !unattended.is_empty() {
        s.push_str(&format!(
            "These run without approval when their arguments are within policy: {unattended}. "
        ));
    }
    if !approval.is_empty() {
        s.push_str(&format!("These need a human approval first: {approval}. "));
    }
    s.push_str(
        "A denied call comes back with a reason and a suggestion; do not retry it unchanged.",
    );
    s
}

#[derive(Serialize)]
struct PoliciesBody {
    revision: String,
    loaded_at_unix_ms: u64,
    policies: usize,
    tools: usize,
    policy_ids: Vec<String>,
    last_reload_error: Option<ReloadError>,
    /// Where the live set came from: files, remembered (the files do not load) or nothing.
    origin: crate::reload::Origin,
    /// The live set is not what the files say (remembered, nothing, or a change held).
    stale: bool,
    held: Option<HeldBody>,
    /// Whether reloads can be proved (cvc5), and what that means under `reload.widening`.
    solver: SolverBody,
}

/// The solver behind the reload review, and what its absence means.
#[derive(Serialize)]
struct SolverBody {
    /// cvc5 found (`CVC5`, else `PATH`).
    present: bool,
    /// Where (operators' route only: `/readyz` needs no credential).
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    /// `reload.widening`.
    widening: crate::reload::Widening,
    /// What happens to a policy change, in words.
    effect: &'static str,
}

impl SolverBody {
    /// Looked up on every call (a few `stat`s), so installing cvc5 shows without a restart.
    fn now(state: &AppState, with_path: bool) -> Self {
        use crate::reload::Widening;
        let found = crate::review::diff::find_solver().ok();
        let widening = state.policy.widening();
        let effect = match (found.is_some(), widening) {
            (true, Widening::Hold) => {
                "changes are proved: narrowing ones apply, widening ones wait for approval"
            }
            (true, Widening::Apply) => {
                "changes are proved and all apply, widening ones too (widening = \"apply\")"
            }
            (false, Widening::Hold) => {
                "no solver: no change can be proved narrowing, so every policy change waits for approval"
            }
            (false, Widening::Apply) => {
                "no solver: every policy change applies unproved (widening = \"apply\")"
            }
        };
        SolverBody {
            present: found.is_some(),
            path: found.filter(|_| with_path).map(|p| p.display().to_string()),
            widening,
            effect,
        }
    }
}

#[derive(Serialize)]
struct HeldBody {
    revision: String,
    from: String,
    held_at_unix_ms: u64,
    review: crate::reload::Review,
}

#[derive(Serialize)]
struct ReloadError {
    message: String,
    problems: Vec<Problem>,
}

/// `GET /v1/policies`.
pub async fn policies(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    human(
        &state,
        &headers,
        "policy status is for operators, not agents",
    )?;
    let snap = state.policy.current();
    let last_reload_error = state.policy.last_error().map(|e| ReloadError {
        message: e.to_string(),
        problems: e.problems.clone(),
    });
    let body = PoliciesBody {
        revision: snap.revision.clone(),
        loaded_at_unix_ms: unix_ms(snap.loaded_at),
        policies: snap.policy_count(),
        tools: snap.tools.len(),
        policy_ids: snap.policy_files.keys().cloned().collect(),
        last_reload_error,
        origin: state.policy.origin(),
        stale: state.policy.stale(),
        held: state.policy.held().map(|h| HeldBody {
            revision: h.revision,
            from: h.from,
            held_at_unix_ms: h.at_ms,
            review: h.review,
        }),
        solver: SolverBody::now(&state, true),
    };
    Ok(Json(serde_json::to_value(body).unwrap_or(Value::Null)))
}

/// `GET /healthz`: the process is up.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: a valid policy set is in force. A refused reload leaves the last good set
/// serving, so the sidecar stays ready and says it is `degraded`, with the failing file and
/// line (no policy text: this route needs no credential).
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let snap = state.policy.current();
    let failing = state
        .policy
        .last_error()
        .and_then(|e| e.first().map(Problem::location));
    // Decisions cannot be recorded, so every one would be denied: not ready.
    let audit_failure = state.audit.failure();
    // No policy set ever loaded: every call is denied.
    let origin = state.policy.origin();
    let ready = audit_failure.is_none() && origin != crate::reload::Origin::Nothing;
    (
        if ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        Json(json!({
            "ready": ready,
            "revision": snap.revision,
            "policy_origin": origin,
            "stale": state.policy.stale(),
            "held_revision": state.policy.held().map(|h| h.revision),
            "degraded": failing.is_some(),
            "last_reload_error_at": failing,
            "audit_error": audit_failure,
            "audit_mode": state.audit.mode(),
            "kill_switch": state.admin.kill_switch_on(),
            "quarantined": state.admin.quarantine().len(),
            "execution": state.exec.as_ref().map(|r| r.protections()),
            "solver": SolverBody::now(&state, false),
        })),
    )
}

/// Unknown route.
pub async fn not_found() -> ApiError {
    ApiError::NotFound
}

/// Known route, wrong method.
pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
