//! [`Error`]: every way a call through the pipeline can fail, each with its stable code
//! ([`Error::code`]). Front ends map it to their protocol (the HTTP status table is in
//! `api::error`). Internal details are logged where they happen, never sent.

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
    pub fn code(self) -> &'static str {
        match self {
            Refusal::Denied => "denied",
            Refusal::Arguments => "arguments_refused",
            Refusal::NotExecutable => "not_executable",
            Refusal::Busy => "executions_busy",
            Refusal::Unavailable => "execution_unavailable",
        }
    }
}

/// An HTTP-visible failure.
#[derive(Debug)]
pub enum Error {
    /// Malformed or invalid request.
    BadRequest {
        /// Stable code.
        code: &'static str,
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
        code: &'static str,
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
    Execution(Refusal, Box<super::execute::ExecAnswer>),
    /// A grant could not be made or found; nothing changed.
    Grant(crate::grants::GrantError),
    /// No such gate.
    UnknownGate,
    /// The redaction detectors are not available, so nothing is screened (fail closed).
    GatesUnavailable,
    /// A stream chunk was refused before it was screened.
    Stream(crate::redact::StreamError),
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
            _ => f.write_str(code),
        }
    }
}

impl Error {
    /// The stable code callers see in `error` (and in logs).
    pub fn code(&self) -> &'static str {
        match self {
            Error::BadRequest { code, .. } | Error::ApprovalConflict { code, .. } => code,
            Error::PayloadTooLarge => "body_too_large",
            Error::BodyTimeout => "body_timeout",
            Error::TooManyConnections => "too_many_connections",
            Error::UnsupportedMediaType => "unsupported_media_type",
            Error::Unauthenticated(_) => "unauthenticated",
            Error::NotFound => "not_found",
            Error::MethodNotAllowed => "method_not_allowed",
            Error::NotReady => "not_ready",
            Error::Forbidden(_) => "forbidden",
            Error::AuditUnavailable(_) => "audit_unavailable",
            Error::StoreUnavailable => "store_unavailable",
            Error::ApprovalNotFound => "approval_not_found",
            Error::NotEligible(_) | Error::Refused(_) => "not_eligible",
            Error::RateLimited { .. } => "rate_limited",
            Error::TooManyPendingApprovals { .. } => "too_many_pending_approvals",
            Error::KillSwitchForced(_) => "kill_switch_forced",
            Error::NotQuarantined(_) => "not_quarantined",
            Error::Held(crate::reload::HoldError::NothingHeld) => "nothing_held",
            Error::Held(crate::reload::HoldError::OtherRevision { .. }) => "held_revision_mismatch",
            Error::Held(crate::reload::HoldError::NotRecorded(_)) => "store_unavailable",
            Error::Grant(e) => match e {
                crate::grants::GrantError::BadEntity { .. } => "invalid_entity",
                crate::grants::GrantError::Link(_) => "grant_not_linkable",
                crate::grants::GrantError::TooMany => "too_many_grants",
                crate::grants::GrantError::NotFound(_) => "grant_not_found",
                crate::grants::GrantError::Store(_) => "store_unavailable",
            },
            Error::UnknownGate => "unknown_gate",
            Error::GatesUnavailable => "gates_unavailable",
            Error::Stream(crate::redact::StreamError::TooMany(_)) => "too_many_streams",
            Error::Stream(crate::redact::StreamError::Blocked) => "stream_blocked",
            Error::Execution(r, _) => r.code(),
        }
    }

    /// A 400 with a code and message.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Error::BadRequest {
            code,
            message: message.into(),
            suggestion: "fix the request body; see docs/openapi.json",
        }
    }
}
