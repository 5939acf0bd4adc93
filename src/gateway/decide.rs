//! Deciding one call: authenticate, the operators' stops, rate limits, Cedar, the tool_call
//! gate, approvals, then the audit record before the answer. The snapshot is loaded once and
//! used to the end, so the decision and its answer name the same revision.

use std::sync::Arc;

use tracing::Instrument as _;

use super::body::{DecisionBody, RawCall};
use super::{Error, Gateway, approvals, callgate};
use crate::audit::{CallFacts, DecisionEvent, Entry, Event, args_digest};
use crate::authz::{self, Advice, Principal, Stage, Verdict};
use crate::codes::Code;
use crate::limits::Quota;
use crate::policy::Snapshot;
use crate::telemetry::spans;

fn new_decision_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Authenticates, or produces the auth-stage deny.
fn principal(
    state: &Gateway,
    credential: Credential<'_>,
    snap: &Snapshot,
) -> Result<Principal, Error> {
    state.auth.authenticate(credential.0).map_err(|e| {
        let decision_id = new_decision_id();
        tracing::info!(decision_id, stage = "auth", reason = %e, "credential refused");
        let verdict = Verdict::deny(
            Stage::Auth,
            None,
            Advice::new(
                Code::Unauthenticated,
                e.to_string(),
                "send the agent's token as `Authorization: Bearer <token>`",
            ),
        );
        Error::Unauthenticated(Box::new(DecisionBody::new(
            verdict,
            decision_id,
            snap.revision.clone(),
        )))
    })
}

/// The credential a front end received (the `Authorization` header's value), not yet checked.
#[derive(Debug, Clone, Copy, Default)]
pub struct Credential<'a>(pub Option<&'a [u8]>);

/// Authenticates against the live snapshot (routes that decide nothing themselves).
pub fn authenticate(state: &Gateway, credential: Credential<'_>) -> Result<Principal, Error> {
    let snap = state.policy.current();
    principal(state, credential, &snap)
}

/// Authenticates a human; agents get a 403 saying `why` the route is not theirs.
pub fn human(
    state: &Gateway,
    credential: Credential<'_>,
    why: &'static str,
) -> Result<Principal, Error> {
    let who = authenticate(state, credential)?;
    if who.kind != crate::authz::PrincipalKind::Human {
        return Err(Error::Forbidden(why));
    }
    Ok(who)
}

/// A place for one more request of `kind` that `who` holds open (a long poll, an event
/// stream, a held MCP call), given back when the permit is dropped; over a bound, the
/// refusal that names it.
pub fn hold(
    state: &Gateway,
    who: &Principal,
    kind: crate::limits::HeldKind,
) -> Result<crate::limits::HeldPermit, Error> {
    let holder = match who.kind {
        crate::authz::PrincipalKind::Agent => crate::limits::Holder::Agent,
        crate::authz::PrincipalKind::Human => crate::limits::Holder::Human,
    };
    state
        .held
        .take(&who.uid.to_string(), holder, kind)
        .map_err(Error::HeldFull)
}

/// A recorded decision, with what it was made on: the snapshot, the caller, and the call
/// (`None` when an operator's stop denied it before the call was looked at).
pub struct Decided {
    /// The caller's quota after this call (rate-limit headers), when a limit applies.
    pub quota: Option<Quota>,
    /// The answer.
    pub body: DecisionBody,
    /// The policy snapshot the decision was made under (the request keeps using it).
    pub snap: Arc<Snapshot>,
    /// The authenticated caller (`Agent::"x"`).
    pub principal: String,
    /// The call.
    pub call: Option<crate::authz::Call>,
}

/// A caller known to the decision path: who, and the snapshot it is decided under.
pub struct Caller {
    who: Principal,
    snap: Arc<Snapshot>,
    started: std::time::Instant,
}

impl Caller {
    /// Who calls.
    pub fn principal(&self) -> &Principal {
        &self.who
    }
}

/// The first step of the decision path: who calls. An unknown caller's deny (stage `auth`)
/// is recorded and answered 401, whatever its body says.
pub async fn caller(state: &Gateway, credential: Credential<'_>) -> Result<Caller, Error> {
    let started = std::time::Instant::now();
    let snap: Arc<Snapshot> = state.policy.current();
    let span = spans::stage("auth");
    let who = span.in_scope(|| principal(state, credential, &snap));
    if who.is_err() {
        spans::failed(&span, Code::Unauthenticated.as_str());
    }
    drop(span);
    match who {
        Ok(who) => Ok(Caller { who, snap, started }),
        Err(Error::Unauthenticated(body)) => {
            let entry = audit_entry(&body, None, None, started, None);
            let body = commit(state, *body, entry, started).await?;
            Err(Error::Unauthenticated(Box::new(body)))
        }
        Err(other) => Err(other),
    }
}

/// The decision path of `/v1/authorize` and `/v1/execute`.
/// A body that could not be read is refused after authentication, so an unauthenticated
/// caller is told so (and recorded) whatever it sent.
pub async fn decide(
    state: &Gateway,
    credential: Credential<'_>,
    body: Result<RawCall, Error>,
) -> Result<Decided, Error> {
    let known = caller(state, credential).await?;
    decide_for(state, known, body).await
}

/// The rest of the decision path, for a caller [`caller`] knows.
pub async fn decide_for(
    state: &Gateway,
    caller: Caller,
    body: Result<RawCall, Error>,
) -> Result<Decided, Error> {
    let Caller { who, snap, started } = caller;
    let (call, approval_id) = body?.into_call()?;
    // `Agent::"dev-agent"`: the key of the principal's limits, usage and signals.
    let principal_id = who.uid.to_string();
    let tool = snap.tools.get(&call.tool);
    // Operators' stops come first: the kill switch, then this agent's quarantine; then an
    // MCP tool whose upstream changed its descriptor since review.
    let mut stop = spans::stage("stops").in_scope(|| {
        stopped(state, &principal_id).or_else(|| super::exposure::descriptor_stop(state, tool))
    });
    let caller = (&who, principal_id.as_str());
    let mut quota = None;
    if stop.is_none() {
        // Limits come before Cedar: a flood costs a map lookup per call, not an evaluation.
        let (registered, tool_rate) = (tool.is_some(), tool.and_then(|t| t.limits.rate));
        let rate_span = spans::stage("rate_limit");
        let slots = state
            .limiter
            .slots(&principal_id, &call.tool, registered, tool_rate);
        let checked = rate_span.in_scope(|| state.limiter.take_all(&slots));
        quota = match checked {
            Ok(quota) => quota,
            Err(limited) => {
                return Err(rate_limited(state, &snap, caller, &call, limited, started).await);
            }
        };
        // Then the fleet's shared limits, when there is a fleet: the local ones stopped a
        // flood before it reached Redis. A refusal there returns the local units.
        if let Some(fleet) = &state.fleet {
            match fleet.take(&slots).instrument(rate_span).await {
                Ok(None) => {}
                Ok(Some(crate::fleet::Taken::Passed(shared))) => quota = Some(shared),
                Ok(Some(crate::fleet::Taken::Refused(limited))) => {
                    state.limiter.refund(&slots, true);
                    return Err(rate_limited(state, &snap, caller, &call, limited, started).await);
                }
                Err(e) => {
                    state.limiter.refund(&slots, false);
                    tracing::error!(error = %e, "shared limits unavailable; call denied");
                    stop = Some((Stage::SharedState, shared_state_advice(&e.0)));
                }
            }
        }
    }
    if let Some((stage, advice)) = stop {
        let verdict = Verdict::deny(stage, tool, advice);
        let body = record_early(state, &snap, caller, &call, verdict, started).await?;
        return Ok(Decided {
            quota: None,
            body,
            snap,
            principal: principal_id,
            call: None,
        });
    }
    let mut signals = state
        .monitor
        .signals(&principal_id, &call.tool, tool.is_some());
    // The arguments are scanned once, before Cedar, so policies see what was found; the
    // tool_call gate then acts on the same scan.
    let gate_span = spans::guardrail("tool_call");
    let scan = gate_span.in_scope(|| callgate::scan(state, tool, &call.args));
    for span in [&gate_span, &tracing::Span::current()] {
        spans::findings(
            span,
            scan.found,
            scan.findings.kinds.iter().map(String::as_str),
        );
    }
    signals.findings = scan.findings.clone();
    if let Some(tool) = tool {
        // Path arguments are resolved once, as execution would open them: the decision
        // judges where a path leads, not how it is spelled.
        signals.paths = super::resolve::resolve(state, tool, &call.args);
        let traced = tool.traced_values(&call.args);
        signals.provenance = state.provenance.classify(
            &principal_id,
            call.correlation.conv_id.as_deref(),
            traced.iter().map(|(n, v)| (*n, v.as_ref())),
        );
        signals.conversation = state
            .provenance
            .seen(&principal_id, call.correlation.conv_id.as_deref());
    }
    let policy_span = spans::stage("policy");
    let verdict = policy_span.in_scope(|| authz::decide_with(&snap, &who, &call, &signals));
    spans::decision(&policy_span, verdict.decision.as_str());
    drop(policy_span);
    // The tool_call gate may deny, or (apply_mask) decide again on masked arguments.
    let gated =
        gate_span.in_scope(|| callgate::screen(state, &snap, &who, &call, verdict, &signals, scan));
    spans::gate_action(
        &gate_span,
        gated
            .report
            .as_ref()
            .map_or("allow", |r| r.decision.as_str()),
    );
    drop(gate_span);
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
        (gated.verdict, &signals.provenance),
        &decision_id,
    )
    .instrument(spans::stage("approval"))
    .await?;
    state
        .monitor
        .observe(&principal_id, &call.tool, verdict.decision, verdict.stage);
    tracing::info!(
        decision_id,
        principal = %who.uid,
        tool = call.tool.chars().take(64).collect::<String>(),
        decision = verdict.decision.as_str(),
        stage = verdict.stage.as_str(),
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
    let inputs = recorded_inputs(state, tool, &call, &signals);
    let entry = audit_entry(&body, Some(&who), Some(call_record), started, inputs);
    let body = match planned {
        None => commit(state, body, entry, started).await?,
        Some(planned) => commit_with(state, body, entry, started, planned).await?,
    };
    if body.decision == crate::authz::Outcome::Allow {
        // The one result of this decision comes back under its id (`/v1/results`, or the run
        // toolgate makes), into this conversation.
        state.provenance.bind(
            &body.decision_id,
            &principal_id,
            &call.tool,
            call.correlation.conv_id.as_deref(),
        );
    }
    if let Some(full) = full {
        // Recorded like every deny; answered 429, as a rate limit is.
        return Err(Error::TooManyPendingApprovals {
            body: Box::new(body),
            full,
        });
    }
    Ok(Decided {
        quota,
        body,
        snap,
        principal: principal_id,
        call: Some(call),
    })
}

/// Records `entry`, or refuses the answer with a 503: nothing is claimed without its record.
/// `what` names the record in the log (e.g. "gate verdict").
pub async fn record_or_refuse(state: &Gateway, entry: Entry, what: &str) -> Result<(), Error> {
    state.audit.record(entry).await.map_err(|e| {
        tracing::error!(error = %e, "{what} not recorded; refusing to answer");
        Error::StoreUnavailable
    })
}

/// Records `entry` (the audit record of `body`), then counts the answer in the metrics. A
/// record that cannot be written turns the answer into a 503 deny at stage `audit`.
async fn commit(
    state: &Gateway,
    body: DecisionBody,
    entry: Entry,
    started: std::time::Instant,
) -> Result<DecisionBody, Error> {
    let writing = std::time::Instant::now();
    let recorded = state
        .audit
        .record(entry)
        .instrument(spans::stage("audit"))
        .await;
    state.metrics.audit_write(writing.elapsed());
    counted(state, body, recorded, started)
}

/// [`commit`] for a decision that changes an approval (opens one, or uses one): the change is
/// stored with the record, in a task of its own so that a client hanging up cannot leave it
/// stored but not in force. If the record fails, the approval is as it was: an approved call
/// denied this way can be sent again.
async fn commit_with(
    state: &Gateway,
    body: DecisionBody,
    entry: Entry,
    started: std::time::Instant,
    planned: crate::approvals::Planned,
) -> Result<DecisionBody, Error> {
    let task_state = state.clone();
    let effect = planned.effect.clone();
    let writing = std::time::Instant::now();
    let recorded = tokio::spawn(async move {
        // Tests hold an approval change here, before its store (a new one is reserved).
        fail::fail_point!("approval-storing");
        let recorded = task_state.audit.commit(vec![entry], vec![effect]).await;
        match &recorded {
            Ok(_) => task_state.approvals.done(planned),
            Err(_) => task_state.approvals.abandon(planned),
        }
        recorded.map(|_| ())
    })
    .instrument(spans::stage("audit"))
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
    state: &Gateway,
    body: DecisionBody,
    recorded: Result<(), crate::audit::StoreError>,
    started: std::time::Instant,
) -> Result<DecisionBody, Error> {
    let (outcome, stage) = match &recorded {
        Ok(()) => (body.decision, body.stage),
        Err(_) => (crate::authz::Outcome::Deny, Stage::Audit),
    };
    state
        .metrics
        .decision(body.tool.as_deref(), outcome, stage, started.elapsed());
    // The request's span: the answer as sent (a failed record is a deny at stage `audit`).
    let code = match &recorded {
        Ok(()) => body.errors.first().map(|e| e.code.as_str()),
        Err(_) => Some(Code::AuditUnavailable.as_str()),
    };
    spans::decided(
        &tracing::Span::current(),
        body.tool.as_deref(),
        (outcome.as_str(), stage.as_str()),
        &body.decision_id,
        code,
    );
    match recorded {
        Ok(()) => Ok(body),
        Err(e) => Err(audit_failed(body, &e)),
    }
}

/// Whether an operator has stopped this principal's calls: the kill switch (everyone), or a
/// quarantine (this agent). The stage and advice of the deny.
fn stopped(state: &Gateway, principal_id: &str) -> Option<(Stage, Advice)> {
    // Without a fresh read of the fleet's state, this sidecar cannot know the switch.
    if let Some(Err(age)) = state.fleet.as_ref().map(|f| f.fresh()) {
        let why = match age {
            None => "not read since this sidecar started".to_owned(),
            Some(ms) => format!("last read {ms} ms ago"),
        };
        return Some((Stage::SharedState, shared_state_advice(&why)));
    }
    if state.admin.kill_switch_on() {
        return Some((
            Stage::KillSwitch,
            Advice::new(
                Code::KillSwitch,
                "an operator has stopped every tool call (kill switch on)",
                "do not retry; wait until an operator turns the kill switch off",
            ),
        ));
    }
    let q = state.admin.quarantine().get(principal_id)?;
    Some((
        Stage::Quarantine,
        Advice::new(
            Code::Quarantined,
            format!(
                "this agent is quarantined (cause: {}, since unix ms {}); its calls are denied until a human releases it",
                q.cause, q.at_ms
            ),
            "do not retry; an operator reviews the audit log and releases it (POST /v1/admin/quarantine)",
        ),
    ))
}

/// The advice of a deny at stage `shared_state`: the fleet's Redis is out of reach (`why`).
fn shared_state_advice(why: &str) -> Advice {
    Advice::new(
        Code::SharedStateUnavailable,
        format!("the fleet's shared state (Redis) could not be read ({why}): denied (fail closed)"),
        "retry later; operators: check that Redis (`[fleet] redis_url`) is up and reachable (see /readyz `shared_state`)",
    )
}

/// The answer to a call a rate limit refused: recorded like any deny, then a 429.
async fn rate_limited(
    state: &Gateway,
    snap: &Snapshot,
    caller: (&Principal, &str),
    call: &crate::authz::Call,
    limited: crate::limits::Limited,
    started: std::time::Instant,
) -> Error {
    let verdict = Verdict::deny(
        Stage::RateLimit,
        snap.tools.get(&call.tool),
        Advice::new(
            Code::RateLimited,
            format!(
                "rate limit reached; retry in {} s",
                limited.retry_after_secs
            ),
            "wait before calling again",
        ),
    );
    match record_early(state, snap, caller, call, verdict, started).await {
        Ok(body) => Error::RateLimited {
            body: Box::new(body),
            limited,
        },
        Err(e) => e,
    }
}

/// A deny decided before Cedar, counted and recorded like any other. `caller` is the
/// principal and its id string.
async fn record_early(
    state: &Gateway,
    snap: &Snapshot,
    (who, principal_id): (&Principal, &str),
    call: &crate::authz::Call,
    verdict: Verdict,
    started: std::time::Instant,
) -> Result<DecisionBody, Error> {
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
    let entry = audit_entry(&body, Some(who), Some(call_record), started, None);
    commit(state, body, entry, started).await
}

/// A call as its audit record keeps it: the digest and the redacted preview.
struct CallRecord<'a> {
    call: &'a crate::authz::Call,
    digest: &'a str,
    preview: String,
}

/// Most strings of one fact kept in a decision's record (then `+N more`).
const RECORDED_FACT_ITEMS: usize = 16;

/// What the policies of a decision read besides its arguments and the deployment data, for
/// its audit record: provenance, facts, findings and the conversation's signals, each only
/// when it says something (`None` when none does). Fact strings (addresses, hosts, programs)
/// pass through the redactor, as the argument preview does; without detectors only their
/// length is kept.
fn recorded_inputs(
    state: &Gateway,
    tool: Option<&crate::tools::Tool>,
    call: &crate::authz::Call,
    signals: &crate::authz::Signals,
) -> Option<serde_json::Value> {
    use serde_json::{Map, Value};
    let inputs = crate::authz::Inputs::of(tool, call, signals);
    let redactor = state.gates.as_ref().map(|g| g.redactor());
    let redact = |s: &str| match redactor {
        Some(r) => r.redact(s),
        None => format!("<str:{}>", s.chars().count()),
    };
    let mut out = Map::new();
    if !inputs.provenance.is_empty() {
        out.insert("provenance".into(), serde_json::json!(inputs.provenance));
    }
    if !inputs.facts.is_empty() {
        let facts: Map<String, Value> = inputs
            .facts
            .iter()
            .map(|(arg, facts)| {
                let facts: Map<String, Value> = facts
                    .iter()
                    .map(|(name, v)| {
                        let v = match v {
                            crate::tools::FactValue::Bool(b) => Value::Bool(*b),
                            crate::tools::FactValue::Set(items) => {
                                let mut kept: Vec<Value> = items
                                    .iter()
                                    .take(RECORDED_FACT_ITEMS)
                                    .map(|s| Value::String(redact(s)))
                                    .collect();
                                if items.len() > RECORDED_FACT_ITEMS {
                                    kept.push(Value::String(format!(
                                        "+{} more",
                                        items.len() - RECORDED_FACT_ITEMS
                                    )));
                                }
                                Value::Array(kept)
                            }
                        };
                        ((*name).to_owned(), v)
                    })
                    .collect();
                (arg.clone(), Value::Object(facts))
            })
            .collect();
        out.insert("facts".into(), Value::Object(facts));
    }
    if !inputs.findings.is_empty() {
        out.insert("findings".into(), serde_json::json!(inputs.findings));
    }
    if !inputs.conversation.is_unknown() {
        out.insert(
            "conversation".into(),
            serde_json::json!(inputs.conversation),
        );
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

/// The audit entry for an answered decision.
fn audit_entry(
    body: &DecisionBody,
    who: Option<&Principal>,
    record: Option<CallRecord<'_>>,
    started: std::time::Instant,
    inputs: Option<serde_json::Value>,
) -> Entry {
    let call = record.as_ref().map(|r| r.call);
    Event::Decision(DecisionEvent {
        id: body.decision_id.clone(),
        principal: who.map(|w| w.uid.to_string()),
        on_behalf_of: who.and_then(|w| w.on_behalf_of_uid().map(|u| u.to_string())),
        tool: call.map(|c| c.tool.chars().take(128).collect()),
        risk: body.risk.map(|r| r.as_str().to_owned()),
        outcome: body.decision.as_str().to_owned(),
        stage: body.stage.as_str().to_owned(),
        reasons: if body.reasons.is_empty() {
            body.errors.iter().map(|e| e.code.to_string()).collect()
        } else {
            body.reasons.clone()
        },
        revision: body.policy_revision.clone(),
        call: record.map(|r| CallFacts {
            args_sha256: r.digest.to_owned(),
            args_preview: r.preview,
            conv_id: r.call.correlation.conv_id.clone(),
            trace_id: r.call.correlation.trace_id.clone(),
            iter: r.call.correlation.iter,
        }),
        duration_us: Some(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX)),
        detail: match (&body.approval_id, &body.gate) {
            (Some(id), _) => Some(format!("approval {id}")),
            (None, Some(g)) => Some(gate_detail(g)),
            (None, None) => None,
        },
        otel_trace_id: crate::telemetry::current().map(|t| t.trace_id),
        inputs: inputs.map(Box::new),
    })
    .into()
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
fn audit_failed(mut body: DecisionBody, error: &crate::audit::StoreError) -> Error {
    tracing::error!(error = %error, decision_id = body.decision_id, "decision not recorded; denying");
    body.decision = crate::authz::Outcome::Deny;
    body.stage = Stage::Audit;
    body.approval_id = None;
    body.errors = vec![Advice::new(
        Code::AuditUnavailable,
        "the decision could not be recorded in the audit log; denied (fail closed), and its decision_id names no audit record",
        "retry later; operators: see /readyz and the logs",
    )];
    Error::AuditUnavailable(Box::new(body))
}
