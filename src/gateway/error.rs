//! [`Error`]: every way a call through the pipeline can fail, each with its stable code
//! ([`Error::code`]). Front ends map it to their protocol (the HTTP status table is in
//! `api::error`). Internal details are logged where they happen, never sent.

use std::borrow::Cow;

use crate::codes::Code;

/// Why `/v1/execute` did not run a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The decision was deny (403).
    Denied,
    /// The arguments cannot be run: a jailed path or an option-like value (422).
    Arguments,
    /// The tool has no executor (409).
    NotExecutable,
    /// Too many runs at once (429).
    Busy,
    /// Execution is off, the program is missing or the sandbox failed (503).
    Unavailable,
}

impl Refusal {
    /// The stable code callers see.
    pub fn code(self) -> Code {
        match self {
            Refusal::Denied => Code::Denied,
            Refusal::Arguments => Code::InvalidArgument,
            Refusal::NotExecutable => Code::NotExecutable,
            Refusal::Busy => Code::ExecutionsBusy,
            Refusal::Unavailable => Code::ExecutionFailed,
        }
    }
}

/// An HTTP-visible failure.
#[derive(Debug)]
pub enum Error {
    /// Malformed or invalid request.
    BadRequest {
        /// Stable code.
        code: Code,
        /// What is wrong.
        message: String,
        /// How to fix it.
        suggestion: &'static str,
    },
    /// Body over the configured limit.
    PayloadTooLarge,
    /// The body did not arrive within `[server] body_timeout_ms` of the request head.
    BodyTimeout,
    /// Every connection slot (`[server] max_connections`) holds a request in progress.
    TooManyConnections,
    /// A bound on requests held open is reached: the caller's own (429), or the agents'
    /// share of the connections (503).
    HeldFull(crate::limits::HeldFull),
    /// Body is not `application/json`.
    UnsupportedMediaType,
    /// Missing or invalid credential: a deny decided at the auth stage.
    Unauthenticated(Box<super::DecisionBody>),
    /// No such route.
    NotFound,
    /// Route exists, method does not.
    MethodNotAllowed,
    /// No valid policy set is loaded.
    NotReady,
    /// Authenticated, but this route is for another kind of principal.
    Forbidden(&'static str),
    /// The decision could not be recorded, so it is a deny and nothing else is claimed.
    AuditUnavailable(Box<super::DecisionBody>),
    /// The data store failed outside the decision path.
    StoreUnavailable,
    /// No approval with this id (or not visible to this caller).
    ApprovalNotFound,
    /// The approval cannot make this transition.
    ApprovalConflict {
        /// Stable code.
        code: Code,
        /// Why.
        message: String,
    },
    /// Cedar says this human may not approve (or deny) this call.
    NotEligible(String),
    /// Cedar refused an operator action (explain, grant, kill switch, …): its advice says why
    /// and what to do.
    Refused(crate::authz::Advice),
    /// The kill switch is forced on by the config or the environment.
    KillSwitchForced(String),
    /// A release named an agent that is not quarantined.
    NotQuarantined(String),
    /// No held policy change, or another revision than the one approved.
    Held(crate::reload::HoldError),
    /// `/v1/execute` did not run the tool: denied, refused arguments, not runnable here.
    Execution(Refusal, Box<super::body::ExecAnswer>),
    /// A grant could not be made or found; nothing changed.
    Grant(crate::grants::GrantError),
    /// No such gate.
    UnknownGate,
    /// The redaction detectors are not available, so nothing is screened (fail closed).
    GatesUnavailable,
    /// A stream chunk was refused before it was screened.
    Stream(crate::redact::StreamError),
    /// A refusal that is its code: answered with the code's status and hint from the one
    /// table (e.g. `not_an_mcp_tool` 404, `descriptor_moved` 409).
    Coded {
        /// Stable code; its status is the answer's.
        code: Code,
        /// What is wrong.
        message: String,
    },
    /// A rate limit refused the call: a deny decided before Cedar, answered 429.
    RateLimited {
        /// The decision (recorded in the audit log).
        body: Box<super::DecisionBody>,
        /// Which bucket refused, and when to retry.
        limited: crate::limits::Limited,
    },
    /// The call needs an approval, but a bound on pending approvals is reached: a deny at
    /// stage `approval_limit` (recorded in the audit log), answered 429.
    TooManyPendingApprovals {
        /// The decision (recorded in the audit log).
        body: Box<super::DecisionBody>,
        /// Which bound refused.
        full: crate::approvals::Full,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code(), self.message())
    }
}

/// What a failed data store says: nothing about the failure itself (that is logged).
const STORE_FAILED: &str = "the data store failed; nothing was changed";

impl Error {
    /// The stable code callers see in `error` (and in logs).
    pub fn code(&self) -> Code {
        match self {
            Error::BadRequest { code, .. } | Error::ApprovalConflict { code, .. } => *code,
            Error::PayloadTooLarge => Code::BodyTooLarge,
            Error::BodyTimeout => Code::BodyTimeout,
            Error::TooManyConnections => Code::TooManyConnections,
            Error::HeldFull(crate::limits::HeldFull::Principal { .. }) => Code::TooManyHeld,
            Error::HeldFull(crate::limits::HeldFull::Agents { .. }) => Code::TooManyConnections,
            Error::UnsupportedMediaType => Code::UnsupportedMediaType,
            Error::Unauthenticated(_) => Code::Unauthenticated,
            Error::NotFound => Code::NotFound,
            Error::MethodNotAllowed => Code::MethodNotAllowed,
            Error::NotReady => Code::NotReady,
            Error::Forbidden(_) => Code::WrongPrincipalKind,
            Error::AuditUnavailable(_) => Code::AuditUnavailable,
            Error::StoreUnavailable => Code::StoreUnavailable,
            Error::ApprovalNotFound => Code::ApprovalNotFound,
            Error::NotEligible(_) | Error::Refused(_) => Code::NotEligible,
            Error::RateLimited { .. } => Code::RateLimited,
            Error::TooManyPendingApprovals { .. } => Code::TooManyPendingApprovals,
            Error::KillSwitchForced(_) => Code::KillSwitchForced,
            Error::NotQuarantined(_) => Code::NotQuarantined,
            Error::Held(crate::reload::HoldError::NothingHeld) => Code::NothingHeld,
            Error::Held(crate::reload::HoldError::OtherRevision { .. }) => {
                Code::HeldRevisionMismatch
            }
            Error::Held(crate::reload::HoldError::NotRecorded(_)) => Code::StoreUnavailable,
            Error::Grant(e) => match e {
                crate::grants::GrantError::BadEntity { .. } => Code::InvalidEntity,
                crate::grants::GrantError::Link(_) => Code::GrantNotLinkable,
                crate::grants::GrantError::TooMany => Code::TooManyGrants,
                crate::grants::GrantError::NotFound(_) => Code::GrantNotFound,
                crate::grants::GrantError::Store(_) => Code::StoreUnavailable,
                crate::grants::GrantError::NotShared(_) => Code::NotShared,
            },
            Error::UnknownGate => Code::UnknownGate,
            Error::Coded { code, .. } => *code,
            Error::GatesUnavailable => Code::GatesUnavailable,
            Error::Stream(crate::redact::StreamError::TooMany(_)) => Code::TooManyStreams,
            Error::Stream(crate::redact::StreamError::Blocked) => Code::StreamBlocked,
            // The run's own code when it has one (`path_denied`, `execution_off`, …).
            Error::Execution(r, answer) => answer.error.as_ref().map_or(r.code(), |e| e.code),
        }
    }

    /// What went wrong, as the sentence every front end answers (HTTP's `message`, an MCP
    /// tool result's text): the same words whichever door the caller came through.
    pub fn message(&self) -> Cow<'_, str> {
        use crate::grants::GrantError;
        let first = |errors: &[crate::authz::Advice]| errors.first().map(|a| a.message.clone());
        match self {
            Error::BadRequest { message, .. }
            | Error::ApprovalConflict { message, .. }
            | Error::Coded { message, .. } => Cow::Borrowed(message),
            Error::Forbidden(message) => Cow::Borrowed(message),
            Error::NotEligible(message) => Cow::Borrowed(message),
            Error::Refused(advice) => Cow::Borrowed(&advice.message),
            Error::PayloadTooLarge => "the request body is larger than the configured limit".into(),
            Error::BodyTimeout => "the request body did not arrive in time".into(),
            Error::TooManyConnections => "every connection slot holds a request in progress".into(),
            Error::HeldFull(full) => full.to_string().into(),
            Error::UnsupportedMediaType => "the body must be JSON".into(),
            Error::NotFound => "no such route".into(),
            Error::MethodNotAllowed => "this route does not accept that method".into(),
            Error::NotReady => "no valid policy set is loaded".into(),
            Error::StoreUnavailable | Error::Grant(GrantError::Store(_)) => STORE_FAILED.into(),
            Error::ApprovalNotFound => "no approval with this id is visible to you".into(),
            Error::KillSwitchForced(by) => format!("the kill switch is forced on by {by}").into(),
            Error::NotQuarantined(agent) => format!("{agent} is not quarantined").into(),
            Error::Held(e) => e.to_string().into(),
            Error::Grant(e) => e.to_string().into(),
            Error::UnknownGate => {
                "no such gate; the gates are input, context, tool_call, output and stream".into()
            }
            Error::GatesUnavailable => "the redaction detectors are not available, so content cannot be screened (fail closed)".into(),
            Error::Stream(e) => e.to_string().into(),
            Error::RateLimited { limited, .. } => {
                let per = match limited.quota.per {
                    crate::limits::Per::Bucket => "burst".to_owned(),
                    window => format!("per {}", window.as_str()),
                };
                let scope = match limited.quota.scope {
                    crate::limits::Scope::PrincipalTool => "principal and tool",
                    crate::limits::Scope::Principal => "principal",
                    crate::limits::Scope::Global => "all callers",
                };
                format!(
                    "rate limit reached ({} calls {per}, scope {scope}); retry in {} s",
                    limited.quota.limit, limited.retry_after_secs
                )
                .into()
            }
            Error::TooManyPendingApprovals { body, full } => {
                first(&body.errors).unwrap_or_else(|| full.to_string()).into()
            }
            Error::Unauthenticated(body) | Error::AuditUnavailable(body) => first(&body.errors)
                .map_or_else(|| self.code().meaning().into(), Cow::Owned),
            Error::Execution(_, answer) => answer
                .error
                .as_ref()
                .map_or_else(|| self.code().meaning().into(), |e| Cow::Borrowed(e.message.as_str())),
        }
    }

    /// What the caller can do about it, beside [`Error::message`].
    pub fn suggestion(&self) -> Cow<'_, str> {
        use crate::limits::HeldFull;
        let first = |errors: &[crate::authz::Advice]| errors.first().map(|a| a.suggestion.clone());
        let code = self.code();
        match self {
            Error::BadRequest { suggestion, .. } => (*suggestion).into(),
            Error::Refused(advice) => Cow::Borrowed(&advice.suggestion),
            Error::PayloadTooLarge => {
                "send smaller arguments; the limit is `max_body_bytes` in the config".into()
            }
            Error::BodyTimeout => "send the whole body at once; the limit is `server.body_timeout_ms` in the config".into(),
            Error::TooManyConnections => "retry shortly; operators: the limit is `server.max_connections` in the config".into(),
            Error::HeldFull(HeldFull::Principal { .. }) => "end a request you hold open (close a stream, let a long poll return) before opening another; do not retry in a loop".into(),
            Error::HeldFull(HeldFull::Agents { .. }) => "retry shortly; operators: see `server.max_connections` and `server.reserved_connections`".into(),
            Error::UnsupportedMediaType => "send `Content-Type: application/json`".into(),
            Error::NotFound | Error::MethodNotAllowed => "see docs/openapi.json for the routes".into(),
            Error::NotReady => "fix the policies (run `toolgate validate`)".into(),
            Error::StoreUnavailable => "retry later; operators: see /readyz and the logs".into(),
            Error::ApprovalNotFound => {
                "use the `approval_id` from a pending_approval decision".into()
            }
            Error::ApprovalConflict { .. } => {
                "ask the agent to send the call again for a new approval".into()
            }
            Error::NotEligible(_) => {
                "ask an approver that the policies make eligible for this tool's risk tier".into()
            }
            Error::KillSwitchForced(_) => "remove `kill_switch = true` from the config or TOOLGATE_KILL_SWITCH from the environment, then restart".into(),
            Error::NotQuarantined(_) => {
                "see GET /v1/admin/quarantine for the quarantined agents".into()
            }
            Error::Held(_) => {
                "GET /v1/policies shows the held change (`held.revision`) and its diff".into()
            }
            Error::UnknownGate => "POST /v1/gates/{input|context|tool_call|output|stream}".into(),
            Error::GatesUnavailable => {
                "operators: see the logs at startup for why the detectors failed to build".into()
            }
            Error::Stream(_) => {
                "send each stream's chunks in order and end it with `\"final\": true`".into()
            }
            Error::RateLimited { .. } => {
                "wait `retry_after` seconds before calling again; do not retry in a loop".into()
            }
            Error::TooManyPendingApprovals { body, .. } => first(&body.errors)
                .map_or_else(|| "wait before calling again".into(), Cow::Owned),
            Error::Unauthenticated(body) | Error::AuditUnavailable(body) => {
                first(&body.errors).map_or_else(|| code.hint().into(), Cow::Owned)
            }
            Error::Execution(_, answer) => answer
                .error
                .as_ref()
                .map_or_else(|| code.hint().into(), |e| Cow::Borrowed(e.suggestion.as_str())),
            Error::Forbidden(_) | Error::Grant(_) | Error::Coded { .. } => code.hint().into(),
        }
    }

    /// A 400 with a code and message.
    pub fn bad_request(code: Code, message: impl Into<String>) -> Self {
        Error::BadRequest {
            code,
            message: message.into(),
            suggestion: "fix the request body; see docs/openapi.json",
        }
    }
}
