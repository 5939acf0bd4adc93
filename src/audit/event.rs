//! What happened, as the audit log records it: [`Event`] is the only way to build an
//! [`Entry`] (whose fields can be read anywhere but set only here). Each kind of event names
//! the facts that kind of record carries, so a record cannot come out half-said or with
//! another kind's fields.

use super::record::{Entry, EntryKind, Sealed};
use crate::clock::now_ms;

/// The facts of one tool call a decision record keeps: never the arguments themselves.
#[derive(Debug, Clone, Default)]
pub struct CallFacts {
    /// SHA-256 of the canonical JSON of the arguments.
    pub args_sha256: String,
    /// The redacted preview of the arguments.
    pub args_preview: String,
    /// Conversation id.
    pub conv_id: Option<String>,
    /// Trace id.
    pub trace_id: Option<String>,
    /// Agent loop iteration.
    pub iter: Option<i64>,
}

/// A decision on a tool call, at any stage.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    /// The decision id.
    pub id: String,
    /// The caller, when authenticated.
    pub principal: Option<String>,
    /// The human the caller acted for, when its token said so.
    pub on_behalf_of: Option<String>,
    /// The tool named in the call.
    pub tool: Option<String>,
    /// Its risk tier, when registered.
    pub risk: Option<String>,
    /// allow | deny | pending_approval.
    pub outcome: String,
    /// The stage that decided.
    pub stage: String,
    /// Determining policy ids, or error codes.
    pub reasons: Vec<String>,
    /// The policy revision decided under.
    pub revision: String,
    /// The call, when it was read.
    pub call: Option<CallFacts>,
    /// Time spent deciding.
    pub duration_us: Option<u64>,
    /// The approval used or opened, or what the tool_call gate found.
    pub detail: Option<String>,
    /// The request's W3C trace id, when it has one.
    pub otel_trace_id: Option<String>,
    /// What the policies read besides the arguments (provenance, facts, findings,
    /// conversation), values redacted.
    pub inputs: Option<Box<serde_json::Value>>,
}

/// An approval created, approved, denied, expired, used or removed.
#[derive(Debug, Clone, Default)]
pub struct Approval {
    /// The approval id.
    pub id: String,
    /// When (the expiry pass stamps one time on all it expires).
    pub at_ms: u64,
    /// What happened: approved, denied, expired, …
    pub event: String,
    /// The tool of the call it approves.
    pub tool: String,
    /// Its risk tier.
    pub risk: String,
    /// The digest of the call's arguments.
    pub args_sha256: String,
    /// Who acted (the approver), or whose call expired.
    pub principal: Option<String>,
    /// Determining policies, or why (`approval_timeout`).
    pub reasons: Vec<String>,
    /// The revision the approver was eligible under.
    pub revision: Option<String>,
    /// The redacted preview of the arguments.
    pub args_preview: Option<String>,
    /// The requester and the approver's reason.
    pub detail: Option<String>,
}

/// What a gate or a reported result was screened to (kinds found, never the content).
#[derive(Debug, Clone, Default)]
pub struct Screened {
    /// The record id (a result's id; a fresh id for a gate's verdict).
    pub id: Option<String>,
    /// Who sent the content.
    pub principal: String,
    /// The tool, for a result.
    pub tool: Option<String>,
    /// Its risk tier, for a result.
    pub risk: Option<String>,
    /// allow | warn | mask | block.
    pub action: String,
    /// Which gate (`input`, `tool_call`, `output`, `stream`, …).
    pub gate: String,
    /// Kinds found, or why the content was refused.
    pub reasons: Vec<String>,
    /// The revision, for a result.
    pub revision: Option<String>,
    /// Sizes and counts.
    pub detail: String,
    /// The request's W3C trace id, when it has one.
    pub otel_trace_id: Option<String>,
}

/// A tool run by `/v1/execute`: filled in as the run goes, recorded once it ends.
#[derive(Debug, Clone, Default)]
pub struct Execution {
    /// The run's id.
    pub id: String,
    /// When the run started.
    pub at_ms: u64,
    /// Who asked.
    pub principal: String,
    /// The tool.
    pub tool: String,
    /// Its risk tier.
    pub risk: String,
    /// The revision the call was allowed under.
    pub revision: String,
    /// success | error | refused | …
    pub outcome: String,
    /// Failure codes and kinds found in the output.
    pub reasons: Vec<String>,
    /// Resource usage and the decision id.
    pub detail: Option<String>,
    /// The request's W3C trace id, when it has one.
    pub otel_trace_id: Option<String>,
}

/// A human operator's action (or its refusal): kill switch, quarantine, grants, explain,
/// approving a held policy change.
#[derive(Debug, Clone, Default)]
pub struct Operator {
    /// `Admin`, or `Reload` for a policy change.
    pub kind: EntryKind,
    /// The stage (`grant`, `explain`, `reload`), when the kind has several.
    pub stage: Option<String>,
    /// Who acted (`Human::"alice"`).
    pub by: String,
    /// The revision acted under.
    pub revision: String,
    /// What was done, or refused.
    pub decision: String,
    /// Determining policies, or the refusal's code.
    pub reasons: Vec<String>,
    /// What it was about.
    pub detail: String,
    /// When, if not now (a grant's expiry is stamped at its end).
    pub at_ms: Option<u64>,
}

impl Operator {
    /// Who acts, as what (`kind`, `stage`), under which revision: what every record of one
    /// request shares.
    pub fn by(kind: EntryKind, stage: &str, by: &str, revision: &str) -> Operator {
        Operator {
            kind,
            stage: Some(stage.to_owned()),
            by: by.to_owned(),
            revision: revision.to_owned(),
            ..Operator::default()
        }
    }

    /// The record of this operator's `decision`, stamped now.
    pub fn entry(&self, decision: &str, reasons: Vec<String>, detail: String) -> Entry {
        Event::Operator(Operator {
            decision: decision.to_owned(),
            reasons,
            detail,
            ..self.clone()
        })
        .into()
    }
}

/// Something the sidecar itself did or saw: a reload by the watcher, an anomaly, a
/// quarantine it imposed, retention, an outage, approvals removed.
#[derive(Debug, Clone, Default)]
pub struct Sidecar {
    /// `Reload`, `Anomaly` or `Admin`.
    pub kind: EntryKind,
    /// The record id (fresh when `None`).
    pub id: Option<String>,
    /// When, if not now.
    pub at_ms: Option<u64>,
    /// The principal it concerns, when one.
    pub principal: Option<String>,
    /// The stage (`reload`, `anomaly`, `approval`).
    pub stage: Option<String>,
    /// What happened (`applied`, `quarantined`, `retention`, …).
    pub decision: String,
    /// Why.
    pub reasons: Vec<String>,
    /// The revision in force, when it matters.
    pub revision: Option<String>,
    /// What it was about.
    pub detail: Option<String>,
}

/// One thing that happened, of one of the kinds the audit log records.
#[derive(Debug, Clone)]
pub enum Event {
    /// A decision on a tool call.
    Decision(Decision),
    /// An approval's change.
    Approval(Approval),
    /// A gate's verdict (not recorded when it allows).
    Gate(Screened),
    /// A reported result's screening.
    Result(Screened),
    /// A tool run.
    Execution(Execution),
    /// A human operator's action.
    Operator(Operator),
    /// The sidecar's own doing.
    Sidecar(Sidecar),
}

fn fresh_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

impl From<Event> for Entry {
    fn from(event: Event) -> Entry {
        match event {
            Event::Decision(d) => {
                let call = d.call.unwrap_or_default();
                let read = !call.args_sha256.is_empty();
                Entry {
                    kind: EntryKind::Decision,
                    id: d.id,
                    at_ms: now_ms(),
                    principal: d.principal,
                    on_behalf_of: d.on_behalf_of,
                    tool: d.tool,
                    risk: d.risk,
                    decision: d.outcome,
                    stage: Some(d.stage),
                    reasons: d.reasons,
                    policy_revision: Some(d.revision),
                    args_sha256: read.then_some(call.args_sha256),
                    args_preview: read.then_some(call.args_preview),
                    conv_id: call.conv_id,
                    trace_id: call.trace_id,
                    iter: call.iter,
                    duration_us: d.duration_us,
                    effects: None,
                    detail: d.detail,
                    otel_trace_id: d.otel_trace_id,
                    inputs: d.inputs.map(|b| super::record::sorted(*b)),
                    sealed: Sealed,
                }
            }
            Event::Approval(a) => Entry {
                kind: EntryKind::Approval,
                id: a.id,
                at_ms: a.at_ms,
                principal: a.principal,
                tool: Some(a.tool),
                risk: Some(a.risk),
                decision: a.event,
                stage: Some("approval".to_owned()),
                reasons: a.reasons,
                policy_revision: a.revision,
                args_sha256: Some(a.args_sha256),
                args_preview: a.args_preview,
                detail: a.detail,
                ..Entry::blank()
            },
            Event::Gate(s) => Entry {
                kind: EntryKind::Gate,
                id: s.id.unwrap_or_else(fresh_id),
                at_ms: now_ms(),
                principal: Some(s.principal),
                decision: s.action,
                stage: Some(s.gate),
                reasons: s.reasons,
                detail: Some(s.detail),
                otel_trace_id: s.otel_trace_id,
                ..Entry::blank()
            },
            Event::Result(s) => Entry {
                kind: EntryKind::Result,
                id: s.id.unwrap_or_else(fresh_id),
                at_ms: now_ms(),
                principal: Some(s.principal),
                tool: s.tool,
                risk: s.risk,
                decision: s.action,
                stage: Some(s.gate),
                reasons: s.reasons,
                policy_revision: s.revision,
                detail: Some(s.detail),
                otel_trace_id: s.otel_trace_id,
                ..Entry::blank()
            },
            Event::Execution(x) => Entry {
                kind: EntryKind::Execution,
                id: x.id,
                at_ms: x.at_ms,
                principal: Some(x.principal),
                tool: Some(x.tool),
                risk: Some(x.risk),
                decision: x.outcome,
                stage: Some("execution".to_owned()),
                reasons: x.reasons,
                policy_revision: Some(x.revision),
                detail: x.detail,
                otel_trace_id: x.otel_trace_id,
                ..Entry::blank()
            },
            Event::Operator(o) => Entry {
                kind: o.kind,
                id: fresh_id(),
                at_ms: o.at_ms.unwrap_or_else(now_ms),
                principal: Some(o.by),
                stage: o.stage,
                decision: o.decision,
                reasons: o.reasons,
                policy_revision: Some(o.revision),
                detail: Some(o.detail),
                ..Entry::blank()
            },
            Event::Sidecar(s) => Entry {
                kind: s.kind,
                id: s.id.unwrap_or_else(fresh_id),
                at_ms: s.at_ms.unwrap_or_else(now_ms),
                principal: s.principal,
                stage: s.stage,
                decision: s.decision,
                reasons: s.reasons,
                policy_revision: s.revision,
                detail: s.detail,
                ..Entry::blank()
            },
        }
    }
}
