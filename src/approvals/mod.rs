//! Human approvals: the state machine (pending → approved → used, or denied, or expired), the
//! [`ApprovalStore`] trait with its sled implementation, and [`Approvals`], which applies every
//! transition with compare-and-swap so an approval is used at most once.
//!
//! An approval is bound to (principal, tool, SHA-256 of the canonical arguments). Whether a
//! human may approve is not decided here: the API asks Cedar (`Action::"approve"`).
//!
//! How many may wait at once is bounded, per agent and in total ([`Bounds`]); past a bound no
//! approval is opened ([`OpenError::Full`]).

mod pending;
mod store;
mod webhook;

pub use pending::{Bounds, Full, Scope};
pub use store::ApprovalStore;
pub(crate) use store::SledApprovals;
pub use webhook::{Webhook, WebhookConfig, WebhookStats, sign, webhook_origin};

use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::audit::StoreError;
use pending::Waiting;

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Waiting for a human.
    Pending,
    /// Approved; the agent may send the call once.
    Approved,
    /// Refused by a human.
    Denied,
    /// Nobody decided (or the approved call was not sent) in time.
    Expired,
    /// The approved call was sent and allowed.
    Used,
}

impl Status {
    /// Parses `pending`, `approved`, …
    pub fn parse(s: &str) -> Option<Status> {
        serde_json::from_value(serde_json::Value::String(s.to_owned())).ok()
    }
}

/// One approval request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    /// Id (UUIDv7).
    pub id: String,
    /// The requesting agent, e.g. `Agent::"dev-agent"`.
    pub principal: String,
    /// The tool.
    pub tool: String,
    /// Its risk tier.
    pub risk: String,
    /// SHA-256 of the canonical arguments: only this exact call can use the approval.
    pub args_sha256: String,
    /// The arguments' shape (strings as lengths).
    pub args_preview: String,
    /// The revision that asked for approval.
    pub policy_revision: String,
    /// The decision that asked for it.
    pub decision_id: String,
    /// Created, unix ms.
    pub created_ms: u64,
    /// Expires, unix ms (pending or approved-but-unused past this is expired).
    pub expires_ms: u64,
    /// As stored; see [`Approval::status_at`] for the effective status.
    pub status: Status,
    /// Who approved or denied.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub decided_by: Option<String>,
    /// Their reason.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
    /// When they decided, unix ms.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub decided_ms: Option<u64>,
    /// When the approved call was allowed, unix ms.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub used_ms: Option<u64>,
}

/// Why a transition was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No approval with this id.
    #[error("no approval with this id")]
    NotFound,
    /// Past its expiry.
    #[error("the approval expired")]
    Expired,
    /// A human already decided it.
    #[error("the approval was already {0}")]
    AlreadyDecided(&'static str),
    /// Not (yet) approved.
    #[error("the approval is {0}, not approved")]
    NotApproved(&'static str),
    /// Already used: approvals are single use.
    #[error("the approval was already used; approvals are single use")]
    Used,
    /// Another principal, tool or argument set.
    #[error("the approval is for a different {0}")]
    Mismatch(&'static str),
}

impl Refusal {
    /// A stable code for API errors.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::NotFound => "approval_not_found",
            Refusal::Expired => "approval_expired",
            Refusal::AlreadyDecided(_) => "approval_already_decided",
            Refusal::NotApproved(_) => "approval_not_approved",
            Refusal::Used => "approval_replayed",
            Refusal::Mismatch(_) => "approval_mismatch",
        }
    }
}

fn word(s: Status) -> &'static str {
    match s {
        Status::Pending => "pending",
        Status::Approved => "approved",
        Status::Denied => "denied",
        Status::Expired => "expired",
        Status::Used => "used",
    }
}

impl Approval {
    /// The status at `now_ms`: pending or approved past expiry is expired.
    pub fn status_at(&self, now_ms: u64) -> Status {
        match self.status {
            Status::Pending | Status::Approved if now_ms >= self.expires_ms => Status::Expired,
            s => s,
        }
    }

    /// This approval decided by `approver`.
    pub fn decided(
        &self,
        approver: &str,
        approve: bool,
        reason: Option<String>,
        now_ms: u64,
    ) -> Result<Approval, Refusal> {
        match self.status_at(now_ms) {
            Status::Pending => {}
            Status::Expired => return Err(Refusal::Expired),
            s => return Err(Refusal::AlreadyDecided(word(s))),
        }
        Ok(Approval {
            status: if approve {
                Status::Approved
            } else {
                Status::Denied
            },
            decided_by: Some(approver.to_owned()),
            reason,
            decided_ms: Some(now_ms),
            ..self.clone()
        })
    }

    /// This approval used by the exact call it was granted for.
    pub fn redeemed(
        &self,
        principal: &str,
        tool: &str,
        args_sha256: &str,
        now_ms: u64,
    ) -> Result<Approval, Refusal> {
        if self.principal != principal {
            return Err(Refusal::Mismatch("principal"));
        }
        if self.tool != tool {
            return Err(Refusal::Mismatch("tool"));
        }
        if self.args_sha256 != args_sha256 {
            return Err(Refusal::Mismatch("set of arguments"));
        }
        match self.status_at(now_ms) {
            Status::Approved => Ok(Approval {
                status: Status::Used,
                used_ms: Some(now_ms),
                ..self.clone()
            }),
            Status::Used => Err(Refusal::Used),
            Status::Expired => Err(Refusal::Expired),
            s => Err(Refusal::NotApproved(word(s))),
        }
    }
}

/// How long approvals stay open, per risk tier.
#[derive(Debug, Clone)]
pub struct Ttl {
    /// Default, in seconds (300).
    pub default_secs: u64,
    /// Overrides by risk tier name.
    pub by_risk: std::collections::BTreeMap<String, u64>,
}

impl Default for Ttl {
    fn default() -> Self {
        Ttl {
            default_secs: 300,
            by_risk: std::collections::BTreeMap::new(),
        }
    }
}

impl Ttl {
    /// Lifetime for `risk`, in milliseconds.
    pub fn for_risk_ms(&self, risk: &str) -> u64 {
        self.by_risk
            .get(risk)
            .copied()
            .unwrap_or(self.default_secs)
            .saturating_mul(1000)
    }
}

/// Error from [`Approvals`] operations.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    /// The transition is not allowed.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why no approval was opened for a call.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A bound on pending approvals is reached; nothing was stored.
    #[error(transparent)]
    Full(#[from] Full),
    /// The store failed; nothing was stored.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The approval queue: store plus change notifications for long-polls.
pub struct Approvals {
    store: Arc<dyn ApprovalStore>,
    changed: tokio::sync::watch::Sender<u64>,
    /// Lifetimes.
    pub ttl: Ttl,
    /// How many may wait at once.
    bounds: Bounds,
    /// The pending ones, mirrored from the store (never held across a store write).
    waiting: Mutex<Waiting>,
    /// Where new pending approvals are announced, if anywhere.
    webhook: Option<Webhook>,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals").finish_non_exhaustive()
    }
}

impl Approvals {
    /// A queue over `store`, counting the approvals it holds that are still pending.
    pub fn new(
        store: Arc<dyn ApprovalStore>,
        ttl: Ttl,
        bounds: Bounds,
    ) -> Result<Self, StoreError> {
        let waiting = Waiting::of(store.all()?, crate::audit::now_ms());
        Ok(Approvals {
            store,
            changed: tokio::sync::watch::channel(0).0,
            ttl,
            bounds,
            waiting: Mutex::new(waiting),
            webhook: None,
        })
    }

    /// The bounds on pending approvals.
    pub fn bounds(&self) -> Bounds {
        self.bounds
    }

    /// How many approvals are pending at `now_ms`: in total, and requested by `principal`.
    pub fn pending_counts(&self, principal: &str, now_ms: u64) -> (usize, usize) {
        self.waiting().counts(principal, now_ms)
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Announces every new pending approval to `webhook`.
    #[must_use]
    pub fn with_webhook(mut self, webhook: Webhook) -> Self {
        self.webhook = Some(webhook);
        self
    }

    /// The webhook's delivery counters, when one is configured.
    pub fn webhook_stats(&self) -> Option<&WebhookStats> {
        self.webhook.as_ref().map(|w| w.stats.as_ref())
    }

    /// The pending approval for exactly `new`'s call (principal, tool, arguments) if one is
    /// open; otherwise stores `new` (pending) and announces it, without waiting. Refused,
    /// storing nothing, when the requester or everyone together has as many pending as the
    /// bounds allow. Expired, decided and used approvals do not count.
    pub fn open(&self, new: Approval) -> Result<Approval, OpenError> {
        if let Some(open) = self
            .waiting()
            .reuse_or_reserve(&new, self.bounds, new.created_ms)?
        {
            return Ok(open);
        }
        // The place is taken before the (slow, flushed) write, so concurrent calls cannot
        // overshoot a bound, and given back if the write fails.
        if let Err(e) = self.store.insert(&new) {
            self.waiting().remove(&new.id);
            return Err(e.into());
        }
        self.notify();
        if let Some(hook) = &self.webhook {
            hook.send(serde_json::json!({
                "event": "approval.pending",
                "approval": &new,
                "approve": format!("/v1/approvals/{}/approve", new.id),
                "deny": format!("/v1/approvals/{}/deny", new.id),
            }));
        }
        Ok(new)
    }

    /// The approval with `id`.
    pub fn get(&self, id: &str) -> Result<Option<Approval>, StoreError> {
        self.store.get(id)
    }

    /// Approvals whose effective status is `status` (all when `None`), newest first.
    pub fn list(&self, status: Option<Status>, now_ms: u64) -> Result<Vec<Approval>, StoreError> {
        let mut all = self.store.all()?;
        all.retain(|a| status.is_none_or(|s| a.status_at(now_ms) == s));
        all.sort_by(|a, b| b.id.cmp(&a.id));
        Ok(all)
    }

    /// Applies `change` to the approval `id` atomically: retried if it changed meanwhile.
    pub fn transition(
        &self,
        id: &str,
        change: impl Fn(&Approval) -> Result<Approval, Refusal>,
    ) -> Result<Approval, ApprovalError> {
        for _ in 0..16 {
            let current = self.store.get(id)?.ok_or(Refusal::NotFound)?;
            let next = change(&current)?;
            if self.store.swap(&current, &next)? {
                if next.status != Status::Pending {
                    self.waiting().remove(id);
                }
                self.notify();
                return Ok(next);
            }
        }
        Err(StoreError("approval changed too often to update".to_owned()).into())
    }

    /// Marks approvals past their expiry as expired; returns them (to record).
    pub fn expire_due(&self, now_ms: u64) -> Result<Vec<Approval>, StoreError> {
        let mut expired = Vec::new();
        for a in self.store.all()? {
            if matches!(a.status, Status::Pending | Status::Approved)
                && a.status_at(now_ms) == Status::Expired
            {
                let next = Approval {
                    status: Status::Expired,
                    ..a.clone()
                };
                if self.store.swap(&a, &next)? {
                    self.waiting().remove(&next.id);
                    expired.push(next);
                }
            }
        }
        if !expired.is_empty() {
            self.notify();
        }
        Ok(expired)
    }

    /// A receiver that sees every later change (subscribe before reading, then wait).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn notify(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }
}
