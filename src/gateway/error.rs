//! [`Error`]: every way a call through the pipeline can fail, each with its stable code
//! ([`Error::code`]). Front ends map it to their protocol (the HTTP status table is in
//! `api::error`). Internal details are logged where they happen, never sent.

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
        let code = self.code();
        match self {
            Error::BadRequest { message, .. } => write!(f, "{code}: {message}"),
            Error::Forbidden(m) => write!(f, "{code}: {m}"),
            Error::NotEligible(m) => write!(f, "{code}: {m}"),
            Error::Refused(a) => write!(f, "{code}: {}", a.message),
            Error::HeldFull(full) => write!(f, "{code}: {full}"),
            _ => f.write_str(code.as_str()),
        }
    }
}

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

    /// A 400 with a code and message.
    pub fn bad_request(code: Code, message: impl Into<String>) -> Self {
        Error::BadRequest {
            code,
            message: message.into(),
            suggestion: "fix the request body; see docs/openapi.json",
        }
    }
}
