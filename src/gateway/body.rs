//! Request and response bodies as they cross the wire. Raw request types reject unknown
//! fields and are converted once into the validated [`Call`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Error;
use crate::authz::{Advice, Call, Correlation, Outcome, Stage, Verdict};
use crate::codes::Code;
use crate::tools::{Limits, Risk};

/// Longest accepted correlation id.
const MAX_ID_LEN: usize = 256;

/// `POST /v1/authorize` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCall {
    tool: String,
    #[serde(
        default = "empty_object",
        deserialize_with = "crate::tools::strict_json::unique_keys"
    )]
    args: Value,
    #[serde(default)]
    context: RawCorrelation,
    /// Set when re-sending a call a human approved.
    #[serde(default)]
    approval_id: Option<String>,
}

impl RawCall {
    /// The tool named in the call, as sent.
    pub fn tool_name(&self) -> &str {
        &self.tool
    }
}

/// Refuses an id (`conv_id`, `trace_id`) longer than [`MAX_ID_LEN`] bytes or holding control
/// characters; `name` is how the body spells it.
pub(super) fn check_id(name: &str, v: Option<&String>) -> Result<(), Error> {
    if v.is_some_and(|s| s.len() > MAX_ID_LEN || s.chars().any(char::is_control)) {
        return Err(Error::bad_request(
            Code::InvalidContext,
            format!("`{name}` must be at most {MAX_ID_LEN} bytes without control characters"),
        ));
    }
    Ok(())
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCorrelation {
    conv_id: Option<String>,
    trace_id: Option<String>,
    iter: Option<i64>,
}

impl RawCall {
    /// Validates the envelope (not the arguments: those are the tool schema's job). Returns
    /// the call and the approval id it claims, if any.
    pub fn into_call(self) -> Result<(Call, Option<String>), Error> {
        if let Some(id) = &self.approval_id
            && (id.is_empty() || id.len() > 64 || id.chars().any(|c| !c.is_ascii_graphic()))
        {
            return Err(Error::bad_request(
                Code::InvalidApprovalId,
                "`approval_id` must be the id from a pending_approval decision",
            ));
        }
        let approval_id = self.approval_id.clone();
        self.into_plain_call().map(|c| (c, approval_id))
    }

    fn into_plain_call(self) -> Result<Call, Error> {
        let RawCorrelation {
            conv_id,
            trace_id,
            iter,
        } = self.context;
        for (name, v) in [
            ("context.conv_id", &conv_id),
            ("context.trace_id", &trace_id),
        ] {
            check_id(name, v.as_ref())?;
        }
        if iter.is_some_and(|i| i < 0) {
            return Err(Error::bad_request(
                Code::InvalidContext,
                "`context.iter` must not be negative",
            ));
        }
        if self.tool.is_empty()
            || self.tool.len() > MAX_ID_LEN
            || self.tool.chars().any(char::is_control)
        {
            return Err(Error::bad_request(
                Code::InvalidTool,
                format!(
                    "`tool` must be a name of 1 to {MAX_ID_LEN} bytes without control characters"
                ),
            ));
        }
        Ok(Call {
            tool: self.tool,
            args: self.args,
            correlation: Correlation {
                conv_id,
                trace_id,
                iter,
            },
        })
    }
}

/// A decision as sent to the caller.
#[derive(Debug, Serialize)]
pub struct DecisionBody {
    /// allow | deny | pending_approval.
    pub decision: Outcome,
    /// Unique id (UUIDv7, time-ordered) that joins this answer to logs and the audit trail.
    pub decision_id: String,
    /// The policy revision the decision was made under.
    pub policy_revision: String,
    /// The tool, when registered.
    pub tool: Option<String>,
    /// Its risk tier, when registered.
    pub risk: Option<Risk>,
    /// The stage that decided.
    pub stage: Stage,
    /// Determining policy ids.
    pub reasons: Vec<String>,
    /// Errors an agent can act on.
    pub errors: Vec<Advice>,
    /// The tool's limits, when registered.
    pub limits: Option<Limits>,
    /// For pending_approval: the approval to wait for, then to send back with the call.
    /// For an allow through an approval: the approval used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// What the tool_call gate found in the arguments (absent when nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<super::callgate::GateReport>,
    /// The arguments the tool must run with, when the tool_call gate masked them and
    /// `[gates.tool_call] apply_mask` is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
}

impl DecisionBody {
    /// Wraps a verdict with its id and revision.
    pub fn new(v: Verdict, decision_id: String, policy_revision: String) -> Self {
        DecisionBody {
            decision: v.decision,
            decision_id,
            policy_revision,
            tool: v.tool,
            risk: v.risk,
            stage: v.stage,
            reasons: v.reasons,
            errors: v.errors,
            limits: v.limits,
            approval_id: None,
            gate: None,
            arguments: None,
        }
    }
}

/// `POST /v1/explain` body: a call as `POST /v1/authorize` takes it, plus who makes it (the
/// agent, with token roles if its tokens carry them) and what the sidecar would have observed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExplain {
    agent: String,
    #[serde(default)]
    roles: Option<Vec<String>>,
    tool: String,
    #[serde(
        default = "empty_object",
        deserialize_with = "crate::tools::strict_json::unique_keys"
    )]
    args: Value,
    #[serde(default)]
    context: RawCorrelation,
    #[serde(default)]
    usage: crate::authz::Usage,
    #[serde(default)]
    anomaly: Vec<String>,
}

impl RawExplain {
    /// The agent, its call and its signals, validated as `POST /v1/authorize` validates a call.
    pub fn into_parts(
        self,
    ) -> Result<(crate::authz::Principal, Call, crate::authz::Signals), Error> {
        use crate::authz::{AnomalyKinds, Principal, PrincipalKind, Signals};
        let printable =
            |s: &str| !s.is_empty() && s.len() <= MAX_ID_LEN && !s.chars().any(char::is_control);
        if !printable(&self.agent) {
            return Err(Error::bad_request(
                Code::InvalidAgent,
                format!(
                    "`agent` must be an agent id of 1 to {MAX_ID_LEN} bytes without control characters"
                ),
            ));
        }
        if let Some(bad) = self.roles.iter().flatten().find(|r| !printable(r)) {
            return Err(Error::bad_request(
                Code::InvalidRoles,
                format!(
                    "role `{}` must be 1 to {MAX_ID_LEN} bytes without control characters",
                    bad.chars()
                        .filter(|c| !c.is_control())
                        .take(64)
                        .collect::<String>()
                ),
            ));
        }
        let anomaly = AnomalyKinds::from_names(&self.anomaly)
            .map_err(|m| Error::bad_request(Code::InvalidAnomaly, m))?;
        let mut agent = Principal::new(PrincipalKind::Agent, self.agent);
        if let Some(roles) = self.roles {
            agent = agent.with_token_roles(roles);
        }
        let call = RawCall {
            tool: self.tool,
            args: self.args,
            context: self.context,
            approval_id: None,
        }
        .into_plain_call()?;
        Ok((
            agent,
            call,
            Signals {
                usage: self.usage,
                anomaly,
                ..Signals::default()
            },
        ))
    }
}

/// `error` of a standard result.
#[derive(Debug, Serialize)]
pub struct ExecFailure {
    /// Stable code.
    pub code: Code,
    /// What happened.
    pub message: String,
    /// What to do.
    pub suggestion: String,
}

/// `metadata` of a standard result.
#[derive(Debug, Default, Serialize)]
pub struct Metadata {
    /// The decision that allowed (or refused) the call.
    pub decision_id: String,
    /// The run's audit record id (absent when nothing ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
    /// Wall-clock time of the last attempt, ms.
    pub duration_ms: Option<u64>,
    /// The program's exit code.
    pub exit_code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
    /// Stopped at `limits.timeout_ms`.
    pub timed_out: bool,
    /// Output was cut (bytes or lines).
    pub truncated: bool,
    /// Bytes the program wrote to stdout.
    pub bytes: u64,
    /// CPU time of all its processes, ms.
    pub cpu_ms: Option<u64>,
    /// Largest resident set among them, bytes (an upper bound: it includes the launcher's
    /// own pages copied at start).
    pub max_rss_bytes: Option<u64>,
    /// Stopped because its processes together passed the run's memory limit.
    pub memory_exceeded: bool,
    /// The most memory its processes used together, bytes (where runs have a memory cgroup).
    pub memory_peak_bytes: Option<u64>,
    /// Attempts made (retries of marked exit codes).
    pub attempts: u32,
    /// How much of the Landlock sandbox the kernel enforced.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub landlock: String,
}

/// The output gate's verdict on a run's output (the output itself is `data`).
#[derive(Debug, Serialize)]
pub struct OutputReport {
    /// allow, warn, mask or block.
    pub decision: crate::redact::Action,
    /// What was found.
    pub violations: Vec<crate::redact::Violation>,
    /// How many in all.
    pub found: usize,
    /// Fields the output policy dropped.
    pub dropped: Vec<String>,
    /// How many.
    pub dropped_count: usize,
}

/// The standard result of `/v1/execute`.
#[derive(Debug, Serialize)]
pub struct ExecAnswer {
    /// `success`, `error` or `pending`.
    pub status: &'static str,
    /// The tool's output after parsing, field policy, output gate and cap (also on a non-zero
    /// exit: test runners explain failures there).
    pub data: Value,
    /// Why the status is not `success`.
    pub error: Option<ExecFailure>,
    /// About the run.
    pub metadata: Metadata,
    /// For `pending`: the approval to wait for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// The decision, when it did not allow the call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<DecisionBody>,
    /// What the output gate found and what the field policy dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputReport>,
    /// The end of the tool's stderr, screened by the output gate (at most 4 KiB).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub stderr: String,
}

/// The snake_case word a unit enum serializes to.
pub fn word<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        _ => String::new(),
    }
}

/// How far a call got: it ran (or failed while running), or it waits for an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// The tool ran; the answer holds its result.
    Done,
    /// The call waits for a human; re-send it with the approval id once approved.
    Pending,
}

impl ExecAnswer {
    /// A refused run's answer: `code`'s failure, no output.
    pub(super) fn refused(
        decision_id: String,
        code: Code,
        message: String,
        suggestion: &str,
    ) -> Self {
        ExecAnswer {
            status: "error",
            data: Value::Null,
            error: Some(ExecFailure {
                code,
                message,
                suggestion: suggestion.to_owned(),
            }),
            metadata: Metadata {
                decision_id,
                ..Metadata::default()
            },
            approval_id: None,
            decision: None,
            output: None,
            stderr: String::new(),
        }
    }
}
