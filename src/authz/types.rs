//! The decision's vocabulary: who calls ([`Principal`]), what is asked ([`Call`]) and what is
//! answered ([`Verdict`]). Validated types only; HTTP and file formats convert into these.

use crate::codes::Code;
use cedar_policy::{EntityId, EntityTypeName, EntityUid};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tools::{Limits, Risk, Tool};

/// Which Cedar entity type a principal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PrincipalKind {
    /// An LLM agent that calls tools.
    Agent,
    /// An approver or operator.
    Human,
}

impl PrincipalKind {
    /// The Cedar entity type name.
    pub fn type_name(self) -> &'static str {
        match self {
            PrincipalKind::Agent => "Agent",
            PrincipalKind::Human => "Human",
        }
    }
}

/// An authenticated caller. Built only from a verified credential, never from a request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Agent or human.
    pub kind: PrincipalKind,
    /// The entity id (e.g. `dev-agent`).
    pub id: String,
    /// `Agent::"dev-agent"`, built once.
    pub uid: EntityUid,
    /// Roles asserted by a verified token (JWT claims). `None` means: use the roles the
    /// entities file gives this principal.
    pub token_roles: Option<Vec<String>>,
    /// The human this agent acts for, as a verified token says (RFC 8693 `act`, or the
    /// configured on-behalf-of claim): `context.on_behalf_of` in Cedar.
    pub on_behalf_of: Option<String>,
}

impl Principal {
    /// A principal whose roles come from the entities file.
    pub fn new(kind: PrincipalKind, id: impl Into<String>) -> Self {
        let id = id.into();
        Principal {
            uid: entity_uid(kind.type_name(), &id),
            kind,
            id,
            token_roles: None,
            on_behalf_of: None,
        }
    }

    /// A principal whose roles come from a verified token.
    pub fn with_token_roles(mut self, roles: Vec<String>) -> Self {
        self.token_roles = Some(roles);
        self
    }

    /// `Human::"id"` of the human this agent acts for, if any.
    pub fn on_behalf_of_uid(&self) -> Option<EntityUid> {
        self.on_behalf_of
            .as_deref()
            .map(|h| entity_uid(PrincipalKind::Human.type_name(), h))
    }

    /// An agent acting for the human `id`, as a verified token says.
    pub fn on_behalf_of(mut self, id: impl Into<String>) -> Self {
        self.on_behalf_of = Some(id.into());
        self
    }
}

/// `Type::"id"` for a type name known to be valid.
#[expect(
    clippy::expect_used,
    reason = "only the fixed base-schema type names are passed"
)]
pub(crate) fn entity_uid(type_name: &'static str, id: &str) -> EntityUid {
    let ty: EntityTypeName = type_name
        .parse()
        .expect("base-schema entity type names parse");
    EntityUid::from_type_name_and_id(ty, EntityId::new(id))
}

/// Caller-supplied ids that join toolgate's records to the agent's own logs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Correlation {
    /// Conversation id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conv_id: Option<String>,
    /// Trace id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Iteration of the agent loop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iter: Option<i64>,
}

/// One request to run a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// Tool name.
    pub tool: String,
    /// Arguments (a JSON object when well-formed; anything else fails schema validation).
    pub args: Value,
    /// Correlation ids.
    pub correlation: Correlation,
}

/// What the sidecar has observed of the caller, shown to Cedar as `context.usage` and
/// `context.anomaly`. Computed by the server (the `anomaly` monitor); all zero and quiet where no
/// server observes (`toolgate authorize`, tests).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Signals {
    /// Counters of earlier calls.
    pub usage: Usage,
    /// Anomaly signals currently raised for this principal.
    pub anomaly: AnomalyKinds,
    /// `context.provenance`: where each argument's value came from. An argument not listed
    /// is `unknown`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub provenance: Vec<(String, crate::provenance::Origin)>,
    /// `context.findings`: what the detectors found in the arguments.
    #[serde(skip_serializing_if = "Findings::is_empty")]
    pub findings: Findings,
    /// `context.conversation`: what the gates found in the tool output of the call's
    /// conversation.
    #[serde(skip_serializing_if = "crate::provenance::Seen::is_unknown")]
    pub conversation: crate::provenance::Seen,
    /// Where each path argument leads, resolved on the file system by the pipeline through
    /// the jail execution opens with (`context.paths`). `None`: nothing was resolved (no
    /// service root, or an evaluation without a server): policies see the path as asked,
    /// judged by the deny list alone.
    #[serde(skip)]
    pub paths: Option<Vec<crate::tools::Resolution>>,
}

impl Signals {
    /// Where argument `name`'s value came from (`unknown` when not traced).
    pub fn origin(&self, name: &str) -> crate::provenance::Origin {
        self.provenance
            .iter()
            .find(|(n, _)| n == name)
            .map_or(crate::provenance::Origin::Unknown, |(_, o)| *o)
    }
}

/// `context.findings`: the detector kinds and categories found in a call's arguments, in all
/// (`kinds`) and per top-level argument (`args`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Findings {
    /// Every kind and category found anywhere in the arguments.
    pub kinds: std::collections::BTreeSet<String>,
    /// Per top-level argument.
    pub args: std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
}

impl Findings {
    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// Adds a finding of `kind` (`category`) at JSON pointer `path`.
    pub fn add(&mut self, path: &str, kind: &str, category: &str) {
        self.kinds.insert(kind.to_owned());
        self.kinds.insert(category.to_owned());
        if let Some(arg) = crate::tools::top_level(path) {
            let set = self.args.entry(arg).or_default();
            set.insert(kind.to_owned());
            set.insert(category.to_owned());
        }
    }
}

/// `context.usage`: counts of this principal's earlier calls (the current one not included).
/// Fixtures and explanations spell it as JSON; a missing counter is 0, an unknown one an error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Usage {
    /// Calls of this tool in the last 60 seconds.
    pub tool_last_minute: u32,
    /// Calls of this tool in the last hour.
    pub tool_last_hour: u32,
    /// Calls of any tool in the last 60 seconds.
    pub calls_last_minute: u32,
    /// Denied calls (any tool, any stage) in the last 60 seconds.
    pub denials_last_minute: u32,
}

/// The kinds of anomaly signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AnomalyKind {
    /// Calls in the last minute far above the principal's own baseline.
    Spike,
    /// Most of the principal's recent calls failed.
    RepeatedFailures,
    /// A configured suspicious sequence of tools (e.g. read secrets, then network).
    Sequence,
    /// Too many policy denials in a minute.
    ViolationRate,
}

impl AnomalyKind {
    /// Every kind, in a fixed order.
    pub const ALL: [AnomalyKind; 4] = [
        AnomalyKind::Spike,
        AnomalyKind::RepeatedFailures,
        AnomalyKind::Sequence,
        AnomalyKind::ViolationRate,
    ];

    /// The name policies and metrics use.
    pub fn as_str(self) -> &'static str {
        match self {
            AnomalyKind::Spike => "spike",
            AnomalyKind::RepeatedFailures => "repeated_failures",
            AnomalyKind::Sequence => "sequence",
            AnomalyKind::ViolationRate => "violation_rate",
        }
    }

    /// The kind named `name` (as [`AnomalyKind::as_str`] spells it).
    pub fn parse(name: &str) -> Option<AnomalyKind> {
        AnomalyKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of anomaly kinds (a bit set).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct AnomalyKinds(u8);

impl AnomalyKinds {
    /// No kind.
    pub const NONE: AnomalyKinds = AnomalyKinds(0);

    /// Adds `kind`.
    pub fn insert(&mut self, kind: AnomalyKind) {
        self.0 |= kind.bit();
    }

    /// Whether `kind` is in the set.
    pub fn contains(self, kind: AnomalyKind) -> bool {
        self.0 & kind.bit() != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The set named by `names` (as [`AnomalyKind::as_str`] spells them); an unknown name is an
    /// error that lists the known ones.
    pub fn from_names(names: &[String]) -> Result<AnomalyKinds, String> {
        let mut set = AnomalyKinds::NONE;
        for name in names {
            let kind = AnomalyKind::parse(name).ok_or_else(|| {
                format!(
                    "unknown anomaly kind `{name}`; use one of {}",
                    AnomalyKind::ALL.map(AnomalyKind::as_str).join(", ")
                )
            })?;
            set.insert(kind);
        }
        Ok(set)
    }

    /// The kinds in the set, in [`AnomalyKind::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = AnomalyKind> {
        AnomalyKind::ALL
            .into_iter()
            .filter(move |k| self.contains(*k))
    }
}

impl Serialize for AnomalyKinds {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// The three outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The call may run.
    Allow,
    /// The call may not run.
    Deny,
    /// Denied as it stands; allowed once an eligible human approves this exact call.
    PendingApproval,
}

impl Outcome {
    /// The name used in answers, the audit log and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allow => "allow",
            Outcome::Deny => "deny",
            Outcome::PendingApproval => "pending_approval",
        }
    }
}

/// The stage of the request path that decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Credential and principal checks.
    Auth,
    /// Tool lookup.
    Registry,
    /// JSON Schema and path checks.
    Validation,
    /// Cedar.
    Policy,
    /// Cedar would allow the call once approved (or: an approval was used or refused).
    Approval,
    /// The call needs an approval, but a bound on pending approvals (the agent's or the
    /// total) is reached, so none was opened: a deny, answered 429.
    ApprovalLimit,
    /// A rate limit (checked before Cedar).
    RateLimit,
    /// The fleet's shared state (Redis, `[fleet]`) could not be read: every call is denied.
    SharedState,
    /// The kill switch is on: every call is denied.
    KillSwitch,
    /// The principal is quarantined: its calls are denied until a human releases it.
    Quarantine,
    /// The tool_call gate found something it blocks (a secret) in the arguments.
    Gate,
    /// An MCP upstream changed the tool's descriptor since it was reviewed: calls are denied
    /// until a human approves the new descriptor.
    Descriptor,
    /// The decision could not be recorded in the audit log, so it is a deny (fail closed).
    Audit,
}

impl Stage {
    /// Every stage, in request-path order.
    pub const ALL: [Stage; 13] = [
        Stage::Auth,
        Stage::Registry,
        Stage::Validation,
        Stage::SharedState,
        Stage::KillSwitch,
        Stage::Quarantine,
        Stage::Descriptor,
        Stage::RateLimit,
        Stage::Gate,
        Stage::Policy,
        Stage::Approval,
        Stage::ApprovalLimit,
        Stage::Audit,
    ];

    /// The name used in answers, the audit log and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Auth => "auth",
            Stage::Registry => "registry",
            Stage::Validation => "validation",
            Stage::SharedState => "shared_state",
            Stage::KillSwitch => "kill_switch",
            Stage::Quarantine => "quarantine",
            Stage::RateLimit => "rate_limit",
            Stage::Gate => "gate",
            Stage::Descriptor => "descriptor",
            Stage::Policy => "policy",
            Stage::Approval => "approval",
            Stage::ApprovalLimit => "approval_limit",
            Stage::Audit => "audit",
        }
    }
}

/// An error an agent can act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Advice {
    /// Stable machine-readable code.
    pub code: Code,
    /// What happened (never quoting argument values).
    pub message: String,
    /// What to do about it.
    pub suggestion: String,
}

impl Advice {
    /// Builds advice.
    pub fn new(code: Code, message: impl Into<String>, suggestion: impl Into<String>) -> Self {
        Advice {
            code,
            message: message.into(),
            suggestion: suggestion.into(),
        }
    }
}

/// The decision for one call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// allow, deny or pending_approval.
    pub decision: Outcome,
    /// Which stage decided.
    pub stage: Stage,
    /// The tool, when it is registered.
    pub tool: Option<String>,
    /// Its risk tier, when it is registered.
    pub risk: Option<Risk>,
    /// Ids of the policies that determined the outcome.
    pub reasons: Vec<String>,
    /// Errors an agent can act on (empty when allowed).
    pub errors: Vec<Advice>,
    /// The tool's limits, when it is registered.
    pub limits: Option<Limits>,
}

impl Verdict {
    /// A deny with one piece of advice.
    pub fn deny(stage: Stage, tool: Option<&Tool>, advice: Advice) -> Self {
        Verdict::deny_many(stage, tool, vec![advice])
    }

    /// A deny with several pieces of advice.
    pub fn deny_many(stage: Stage, tool: Option<&Tool>, errors: Vec<Advice>) -> Self {
        Verdict::new(Outcome::Deny, stage, tool, Vec::new(), errors)
    }

    /// Any verdict about `tool`.
    pub fn new(
        decision: Outcome,
        stage: Stage,
        tool: Option<&Tool>,
        reasons: Vec<String>,
        errors: Vec<Advice>,
    ) -> Self {
        Verdict {
            decision,
            stage,
            tool: tool.map(|t| t.name.clone()),
            risk: tool.map(|t| t.risk),
            reasons,
            errors,
            limits: tool.map(|t| t.limits),
        }
    }
}

/// How one policy came out for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// Its scope matched and its conditions held: a permit allows, a forbid denies.
    Satisfied,
    /// Its scope or a condition did not match: it has no say in this call.
    NotSatisfied,
    /// Evaluating it failed; the decision denies (fail closed).
    Errored,
}

/// One policy of the call's action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyCheck {
    /// Its id (`@id` annotation, or `file#N`).
    pub id: String,
    /// Permit (true) or forbid.
    pub permit: bool,
    /// The file it came from.
    pub file: Option<String>,
    /// Evaluated for the call as sent.
    pub as_is: Check,
    /// Evaluated as if a human had approved the call (`context.approval.granted`).
    pub if_approved: Check,
    /// Cedar's evaluation errors, when it errored.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}
