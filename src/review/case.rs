//! One fixture case of `toolgate test`: what it asks the policies, what it expects, and how it
//! fared. Both the fixture files and the session steps become these cases.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::authz::{Call, Outcome, Principal, Signals, Stage};
use crate::provenance::Source;

/// The outcome a case expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    /// Allowed.
    Allow,
    /// Denied.
    Deny,
    /// Pending a human approval (tool calls only).
    PendingApproval,
}

impl From<Outcome> for Expect {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Allow => Expect::Allow,
            Outcome::Deny => Expect::Deny,
            Outcome::PendingApproval => Expect::PendingApproval,
        }
    }
}

impl Expect {
    /// The name fixtures use.
    pub fn as_str(self) -> &'static str {
        match self {
            Expect::Allow => "allow",
            Expect::Deny => "deny",
            Expect::PendingApproval => "pending_approval",
        }
    }
}

/// What a case asks the policies.
#[derive(Debug, Clone)]
pub enum Question {
    /// An agent's tool call, decided as `POST /v1/authorize` decides it.
    Call {
        /// The agent (its roles from `roles`, else from the entities file).
        principal: Principal,
        /// The call.
        call: Call,
        /// `context.usage` and `context.anomaly`.
        signals: Signals,
        /// The call comes back with a valid approval: a pending call is then allowed.
        approved: bool,
        /// The conversation before the call (a session's steps), or `None` outside one
        /// (provenance `unknown`).
        said: Option<Arc<Vec<(Source, Value)>>>,
    },
    /// May `approver` approve a pending call to `tool` by `requester`?
    Approve {
        /// The human approving.
        approver: Principal,
        /// The agent whose call is pending.
        requester: Principal,
        /// The tool called.
        tool: String,
    },
    /// May `human` turn the kill switch on or off?
    KillSwitch {
        /// The operator.
        human: Principal,
        /// On or off.
        on: bool,
    },
    /// May `human` activate a held policy change widening `widened`?
    PolicyChange {
        /// The operator.
        human: Principal,
        /// Actions the change widens.
        widened: Vec<String>,
        /// Whether the diff was proved.
        proved: bool,
    },
    /// May `human` grant `grantee` access to `tool` through `template` for `ttl_s` (or revoke
    /// such a grant)?
    Grant {
        /// The operator.
        human: Principal,
        /// The tool.
        tool: String,
        /// The template's id.
        template: String,
        /// `?principal`, as Cedar writes it.
        grantee: cedar_policy::EntityUid,
        /// Seconds.
        ttl_s: i64,
        /// A revocation.
        revoke: bool,
    },
    /// May `human` see explanations of decisions?
    Explain {
        /// The auditor.
        human: Principal,
    },
    /// May `human` quarantine (`on`) or release `target`?
    Quarantine {
        /// The operator.
        human: Principal,
        /// Quarantine or release.
        on: bool,
        /// The agent.
        target: Principal,
    },
}

/// One validated test case.
#[derive(Debug, Clone)]
pub struct Case {
    /// The file it came from.
    pub file: PathBuf,
    /// Its name (unique within the file).
    pub name: String,
    /// What it asks.
    pub question: Question,
    /// The outcome it expects.
    pub expect: Expect,
    /// The determining policies it expects, when it names them (compared as sets).
    pub policies: Option<BTreeSet<String>>,
    /// Attack or legitimate, when labelled.
    pub label: Option<Label>,
}

/// The answer the policies gave one case.
#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    /// Allow, deny or pending.
    pub outcome: Expect,
    /// The stage that decided (`policy`, `validation`, …).
    pub stage: Stage,
    /// The policies that determined it.
    pub policies: Vec<String>,
    /// Why, for a deny that no policy determined (validation, unknown tool, …).
    pub errors: Vec<String>,
}

/// A case and how it fared.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    /// The fixture file.
    pub file: String,
    /// The case's name.
    pub name: String,
    /// The expected outcome.
    pub expect: Expect,
    /// The expected determining policies, when named.
    pub expect_policies: Option<BTreeSet<String>>,
    /// What the policies said.
    pub got: Answer,
    /// Whether outcome (and policies, when named) match.
    pub passed: bool,
    /// Attack or legitimate, when labelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<Label>,
    /// The call changes state (a `write` or `destructive` tool).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub changes_state: bool,
}

/// What a labelled call is, for the scenario rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Label {
    /// A call an attacker tries to make the agent perform.
    Attack,
    /// A call the user wants.
    Legit,
}
