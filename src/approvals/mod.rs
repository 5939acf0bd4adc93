//! Human approvals: the state machine (pending → approved → used, or denied, or expired), the
//! [`ApprovalStore`] trait with its sled implementation, and [`Approvals`], which plans every
//! change under a per-approval lock so an approval is used at most once.
//!
//! Nothing here writes the store. A change is [`Planned`]: the new approval and the store
//! effect; the caller commits the effect with the audit record that attests it
//! ([`crate::audit::Audit::commit`]), then reports it [`Approvals::done`] (or
//! [`Approvals::abandon`]). So no approval is opened, decided, used or expired without its
//! record, and the lock held by the plan keeps a second change out until the first is stored.
//!
//! Ended approvals (denied, expired, used) are removed from the store after
//! `[approvals] retain_secs` ([`Approvals::sweep`]); the audit log keeps their history.
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
pub(crate) use store::SledApprovals;
pub use store::{ApprovalStore, ApprovalStoreError};
pub use webhook::{Format, Webhook, WebhookConfig, WebhookStats, sign, webhook_origin};

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::audit::Effect;
use crate::codes::Code;
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
    /// The human the agent asked for, when its token said so (`Human::"alice"`): only a
    /// call for the same human can use the approval.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub on_behalf_of: Option<String>,
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
    /// The policies that made the call wait (the forbids an approval lifts).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub waiting_on: Vec<String>,
    /// Where each text argument's value came from (`context.provenance`).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty", default)]
    pub provenance: std::collections::BTreeMap<String, String>,
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
    pub fn code(&self) -> Code {
        match self {
            Refusal::NotFound => Code::ApprovalNotFound,
            Refusal::Expired => Code::ApprovalExpired,
            Refusal::AlreadyDecided(_) => Code::ApprovalAlreadyDecided,
            Refusal::NotApproved(_) => Code::ApprovalNotApproved,
            Refusal::Used => Code::ApprovalReplayed,
            Refusal::Mismatch(_) => Code::ApprovalMismatch,
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
    /// When it ended (decided against, used or expired), if it has: the time retention
    /// counts from.
    pub fn ended_ms(&self) -> Option<u64> {
        match self.status {
            Status::Denied => Some(self.decided_ms.unwrap_or(self.created_ms)),
            Status::Used => Some(self.used_ms.unwrap_or(self.expires_ms)),
            Status::Expired => Some(self.expires_ms),
            Status::Pending | Status::Approved => None,
        }
    }

    /// The store effect that saves it.
    pub fn effect(&self) -> Result<Effect, ApprovalStoreError> {
        Ok(Effect::put_json(store::TREE, self.id.as_bytes(), self)?)
    }

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
        (principal, on_behalf_of): (&str, Option<&str>),
        tool: &str,
        args_sha256: &str,
        now_ms: u64,
    ) -> Result<Approval, Refusal> {
        if self.principal != principal {
            return Err(Refusal::Mismatch("principal"));
        }
        if self.on_behalf_of.as_deref() != on_behalf_of {
            return Err(Refusal::Mismatch("human the agent acts for"));
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
    Store(#[from] ApprovalStoreError),
}

impl From<crate::audit::StoreError> for ApprovalError {
    fn from(e: crate::audit::StoreError) -> Self {
        ApprovalError::Store(e.into())
    }
}

/// Why no approval was opened for a call.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A bound on pending approvals is reached; nothing was stored.
    #[error(transparent)]
    Full(#[from] Full),
    /// The store failed; nothing was stored.
    #[error(transparent)]
    Store(#[from] ApprovalStoreError),
}

impl From<crate::audit::StoreError> for OpenError {
    fn from(e: crate::audit::StoreError) -> Self {
        OpenError::Store(e.into())
    }
}

/// Lock shards: a change to one approval holds one shard from its plan until it is stored.
const SHARDS: usize = 64;

/// Default `[approvals] retain_secs`: ended approvals are kept a day, then removed.
pub const RETAIN_SECS: u64 = 86_400;

/// Most approvals one expiry or retention pass commits at once (one audit batch).
const PASS: usize = 512;

/// A planned change: the approval as it will be, the store effect that saves it, and the lock
/// that keeps other changes to it out until the plan is [`Approvals::done`] or
/// [`Approvals::abandon`]ed.
pub struct Planned {
    /// The approval after the change.
    pub approval: Approval,
    /// What to commit with the record.
    pub effect: Effect,
    /// A new approval (a place in the pending bounds is held for it).
    opened: bool,
    _lock: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl std::fmt::Debug for Planned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planned")
            .field("approval", &self.approval.id)
            .finish_non_exhaustive()
    }
}

/// What [`Approvals::open`] found: an approval already open for the call, or a new one to
/// commit.
#[derive(Debug)]
pub enum Open {
    /// Pending already, for exactly this call.
    Reused(Approval),
    /// New: commit its effect with the decision record.
    New(Planned),
}

/// A pass of the expiry or retention sweep: the approvals it changes or removes, the
/// effects, and the locks it holds.
pub struct Pass {
    /// Expired (by the expiry pass) or removed (by retention).
    pub approvals: Vec<Approval>,
    /// What to commit with the records.
    pub effects: Vec<Effect>,
    removed: bool,
    _locks: Vec<tokio::sync::OwnedMutexGuard<()>>,
}

impl std::fmt::Debug for Pass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pass")
            .field("approvals", &self.approvals.len())
            .finish_non_exhaustive()
    }
}

/// The approvals not yet ended, by expiry, and the ended ones, by end: what the expiry and
/// retention passes read instead of the whole store.
#[derive(Debug, Default)]
struct Timeline {
    live: BTreeSet<(u64, String)>,
    ended: BTreeSet<(u64, String)>,
}

impl Timeline {
    fn of(all: &[Approval]) -> Timeline {
        let mut t = Timeline::default();
        for a in all {
            t.put(None, a);
        }
        t
    }

    fn put(&mut self, before: Option<&Approval>, a: &Approval) {
        if let Some(b) = before {
            self.forget(b);
        }
        match a.ended_ms() {
            Some(end) => self.ended.insert((end, a.id.clone())),
            None => self.live.insert((a.expires_ms, a.id.clone())),
        };
    }

    fn forget(&mut self, a: &Approval) {
        self.live.remove(&(a.expires_ms, a.id.clone()));
        if let Some(end) = a.ended_ms() {
            self.ended.remove(&(end, a.id.clone()));
        }
    }
}

/// The approval queue: store plus change notifications for long-polls.
pub struct Approvals {
    store: Arc<dyn ApprovalStore>,
    changed: tokio::sync::watch::Sender<u64>,
    /// Lifetimes.
    pub ttl: Ttl,
    /// How long ended approvals stay stored, in ms.
    retain_ms: u64,
    /// How many may wait at once.
    bounds: Bounds,
    /// The pending ones, mirrored from the store (never held across a store write).
    waiting: Mutex<Waiting>,
    /// Expiry and end times.
    timeline: Mutex<Timeline>,
    /// Per-approval locks, by shard.
    locks: Vec<Arc<tokio::sync::Mutex<()>>>,
    /// Where new pending approvals are announced, if anywhere.
    webhook: Option<Webhook>,
    /// The arguments of recent approvals as eligible approvers see them (secrets masked),
    /// in memory only: the stored record keeps the redacted preview.
    arguments: Mutex<Arguments>,
    /// Pending approvals already reminded of (half their time to live passed).
    reminded: Mutex<std::collections::HashSet<String>>,
    /// Woken when a new approval is stored or its place given back: identical calls made
    /// while it was being stored wait on it ([`Approvals::settled`]).
    settled: tokio::sync::Notify,
}

/// Most approvals whose arguments are kept for approvers (oldest forgotten first).
const MAX_KEPT_ARGUMENTS: usize = 10_000;
/// Most bytes of arguments (as JSON text) kept for approvers (oldest forgotten first).
const MAX_KEPT_BYTES: usize = 32 << 20;

#[derive(Debug, Default)]
struct Arguments {
    by_id: std::collections::HashMap<String, (serde_json::Value, usize)>,
    order: std::collections::VecDeque<String>,
    bytes: usize,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals").finish_non_exhaustive()
    }
}

/// The lock shard of approval `id` (FNV-1a: stable, and ids are server-made UUIDs).
fn shard(id: &str) -> usize {
    let mut x: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        x ^= u64::from(b);
        x = x.wrapping_mul(0x0100_0000_01b3);
    }
    (x % SHARDS as u64) as usize
}

impl Approvals {
    /// A queue over `store`, counting the approvals it holds that are still pending.
    pub fn new(
        store: Arc<dyn ApprovalStore>,
        ttl: Ttl,
        bounds: Bounds,
    ) -> Result<Self, ApprovalStoreError> {
        let all = store.all()?;
        let timeline = Timeline::of(&all);
        let waiting = Waiting::of(all, crate::clock::now_ms());
        Ok(Approvals {
            store,
            changed: tokio::sync::watch::channel(0).0,
            ttl,
            retain_ms: RETAIN_SECS * 1000,
            bounds,
            waiting: Mutex::new(waiting),
            timeline: Mutex::new(timeline),
            locks: (0..SHARDS)
                .map(|_| Arc::new(tokio::sync::Mutex::new(())))
                .collect(),
            webhook: None,
            arguments: Mutex::default(),
            reminded: Mutex::default(),
            settled: tokio::sync::Notify::new(),
        })
    }

    /// Whether approval `id`, which [`Approvals::open`] gave an identical call while it was
    /// still being stored, is stored now: waits (up to `limit`) until it is, or until its
    /// place was given back because storing it failed (`false`, as is running out of time).
    /// An approval is named to a caller only once it exists.
    pub async fn settled(&self, id: &str, limit: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let woken = self.settled.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if self.waiting().reserved(id).is_none() {
                // Stored (pending, or decided since), or given back.
                return self.store.get(id).ok().flatten().is_some();
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return false;
            }
        }
    }

    /// Keeps the arguments of approval `id` as approvers see them (secrets already masked).
    pub fn keep_arguments(&self, id: &str, args: serde_json::Value) {
        let size = args.to_string().len();
        let mut a = self
            .arguments
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if a.by_id.contains_key(id) || size > MAX_KEPT_BYTES {
            return;
        }
        while a.order.len() >= MAX_KEPT_ARGUMENTS || a.bytes + size > MAX_KEPT_BYTES {
            let Some(old) = a.order.pop_front() else {
                break;
            };
            if let Some((_, n)) = a.by_id.remove(&old) {
                a.bytes -= n;
            }
        }
        a.by_id.insert(id.to_owned(), (args, size));
        a.order.push_back(id.to_owned());
        a.bytes += size;
    }

    /// The arguments kept for approval `id` (none after a restart, or when forgotten).
    pub fn arguments(&self, id: &str) -> Option<serde_json::Value> {
        self.arguments
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_id
            .get(id)
            .map(|(v, _)| v.clone())
    }

    /// Keeps ended approvals `secs` seconds before removing them.
    #[must_use]
    pub fn with_retention(mut self, secs: u64) -> Self {
        self.retain_ms = secs.saturating_mul(1000);
        self
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

    fn timeline(&self) -> std::sync::MutexGuard<'_, Timeline> {
        self.timeline.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn lock(&self, id: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let l = self
            .locks
            .get(shard(id))
            .cloned()
            .unwrap_or_else(|| Arc::new(tokio::sync::Mutex::new(())));
        l.lock_owned().await
    }

    /// Announces approval events (and the gateway's other notices) to `webhook`.
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
    /// open; otherwise a plan to store `new` (pending), holding its place in the bounds.
    /// Refused, storing nothing, when the requester or everyone together has as many pending
    /// as the bounds allow. Expired, decided and used approvals do not count.
    pub fn open(&self, new: Approval) -> Result<Open, OpenError> {
        if let Some(open) = self
            .waiting()
            .reuse_or_reserve(&new, self.bounds, new.created_ms)?
        {
            return Ok(Open::Reused(open));
        }
        // The place is taken before the (slow, flushed) commit, so concurrent calls cannot
        // overshoot a bound; [`Approvals::abandon`] gives it back.
        match new.effect() {
            Ok(effect) => Ok(Open::New(Planned {
                approval: new,
                effect,
                opened: true,
                _lock: None,
            })),
            Err(e) => {
                self.waiting().remove(&new.id);
                Err(e.into())
            }
        }
    }

    /// The approval with `id`.
    pub fn get(&self, id: &str) -> Result<Option<Approval>, ApprovalStoreError> {
        self.store.get(id)
    }

    /// The approval with `id`, or, while a new one is being stored, its pending form: an
    /// identical call made meanwhile was given its id ([`Approvals::open`] reuses it), and
    /// its requester may look at it (and wait on it) at once. Nothing can decide it before it
    /// is stored. A place given back ([`Approvals::abandon`]) is not found.
    pub fn get_or_opening(&self, id: &str) -> Result<Option<Approval>, ApprovalStoreError> {
        match self.store.get(id)? {
            Some(a) => Ok(Some(a)),
            None => Ok(self.waiting().reserved(id)),
        }
    }

    /// Up to `limit` approvals whose effective status at `now_ms` is `status` (any when
    /// `None`) and that `keep` admits, newest first. The store is never read whole: pending
    /// ones come from the in-memory index, approved ones from the live approvals' timeline,
    /// and the rest from a newest-first walk of the store that stops once `limit` are found
    /// (at worst the approvals retained, which `[approvals] retain_secs` bounds).
    pub fn list(
        &self,
        status: Option<Status>,
        now_ms: u64,
        limit: usize,
        keep: impl Fn(&Approval) -> bool,
    ) -> Result<Vec<Approval>, ApprovalStoreError> {
        match status {
            Some(Status::Pending) => Ok(self.waiting().newest(now_ms, limit, keep)),
            Some(Status::Approved) => {
                // Live (not ended) and not waiting: approved, or pending ones that just
                // expired (filtered below).
                let mut ids: Vec<String> = {
                    // In the order [`Approvals::passed`] takes them.
                    let w = self.waiting();
                    let t = self.timeline();
                    t.live
                        .iter()
                        .filter(|(expires, id)| *expires > now_ms && !w.contains(id))
                        .map(|(_, id)| id.clone())
                        .collect()
                };
                ids.sort_unstable_by(|a, b| b.cmp(a));
                let mut found = Vec::new();
                for id in ids {
                    if found.len() >= limit {
                        break;
                    }
                    if let Some(a) = self.store.get(&id)?
                        && a.status_at(now_ms) == Status::Approved
                        && keep(&a)
                    {
                        found.push(a);
                    }
                }
                Ok(found)
            }
            _ => {
                let mut found = Vec::new();
                if limit > 0 {
                    self.store.newest(&mut |a| {
                        if status.is_none_or(|s| a.status_at(now_ms) == s) && keep(&a) {
                            found.push(a);
                        }
                        found.len() < limit
                    })?;
                }
                Ok(found)
            }
        }
    }

    /// Plans `change` to the approval `id`, holding its lock until the plan is done or
    /// abandoned: nothing else changes it meanwhile.
    pub async fn transition(
        &self,
        id: &str,
        change: impl Fn(&Approval) -> Result<Approval, Refusal>,
    ) -> Result<Planned, ApprovalError> {
        let lock = self.lock(id).await;
        let current = self.store.get(id)?.ok_or(Refusal::NotFound)?;
        let next = change(&current)?;
        Ok(Planned {
            effect: next.effect()?,
            approval: next,
            opened: false,
            _lock: Some(lock),
        })
    }

    /// The plan's effect is stored (with its record): the change is in force. Announces a
    /// new approval.
    pub fn done(&self, planned: Planned) {
        let a = &planned.approval;
        if a.status != Status::Pending {
            self.waiting().remove(&a.id);
        } else if planned.opened {
            self.waiting().stored(&a.id);
        }
        if planned.opened {
            self.settled.notify_waiters();
        }
        let before = if planned.opened {
            None
        } else {
            // The approval as it was, for the timeline: same id, only status times differ.
            Some(Approval {
                status: Status::Pending,
                decided_ms: None,
                used_ms: None,
                ..a.clone()
            })
        };
        {
            let mut t = self.timeline();
            if let Some(b) = &before {
                t.live.remove(&(b.expires_ms, b.id.clone()));
            }
            t.put(None, a);
        }
        self.notify();
        if planned.opened {
            self.announce(serde_json::json!({
                "event": "approval.pending",
                "approval": a,
                "approve": format!("/v1/approvals/{}/approve", a.id),
                "deny": format!("/v1/approvals/{}/deny", a.id),
            }));
        } else if matches!(a.status, Status::Approved | Status::Denied) {
            self.announce(serde_json::json!({"event": "approval.decided", "approval": a}));
        }
    }

    /// Sends `event` to the approver webhook, when one is configured (never blocks).
    pub fn announce(&self, event: serde_json::Value) {
        if let Some(hook) = &self.webhook {
            hook.send(event);
        }
    }

    /// Whether an approver webhook is configured.
    pub fn announces(&self) -> bool {
        self.webhook.is_some()
    }

    /// Pending approvals past half their time to live that have not been reminded of yet:
    /// each is marked reminded and returned once.
    pub fn due_reminders(&self, now_ms: u64) -> Result<Vec<Approval>, ApprovalStoreError> {
        let live: std::collections::HashSet<String> = self
            .timeline()
            .live
            .iter()
            .map(|(_, id)| id.clone())
            .collect();
        let mut reminded = self
            .reminded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        reminded.retain(|id| live.contains(id));
        let mut due = Vec::new();
        for id in live {
            if reminded.contains(&id) {
                continue;
            }
            let Some(a) = self.store.get(&id)? else {
                continue;
            };
            let half = a.created_ms + a.expires_ms.saturating_sub(a.created_ms) / 2;
            if a.status_at(now_ms) == Status::Pending && now_ms >= half {
                reminded.insert(id);
                due.push(a);
            }
        }
        Ok(due)
    }

    /// The plan's commit failed: nothing changed. A new approval's place is given back.
    pub fn abandon(&self, planned: Planned) {
        if planned.opened {
            self.waiting().remove(&planned.approval.id);
            self.settled.notify_waiters();
        }
    }

    /// Plans the expiry of approvals past their expiry at `now_ms` (at most a pass's worth):
    /// each as it will be stored, with its effect. `None` when none is due.
    pub async fn expiry(&self, now_ms: u64) -> Result<Option<Pass>, ApprovalStoreError> {
        let due: Vec<String> = {
            let t = self.timeline();
            t.live
                .iter()
                .take_while(|(expires, _)| *expires <= now_ms)
                .take(PASS)
                .map(|(_, id)| id.clone())
                .collect()
        };
        self.pass(due, false, |a| {
            (matches!(a.status, Status::Pending | Status::Approved)
                && a.status_at(now_ms) == Status::Expired)
                .then(|| Approval {
                    status: Status::Expired,
                    ..a.clone()
                })
        })
        .await
    }

    /// Plans the removal of approvals that ended more than the retention ago (at most a
    /// pass's worth). `None` when none is due.
    pub async fn sweep(&self, now_ms: u64) -> Result<Option<Pass>, ApprovalStoreError> {
        let cutoff = now_ms.saturating_sub(self.retain_ms);
        let due: Vec<String> = {
            let t = self.timeline();
            t.ended
                .iter()
                .take_while(|(end, _)| *end < cutoff)
                .take(PASS)
                .map(|(_, id)| id.clone())
                .collect()
        };
        self.pass(due, true, |a| {
            a.ended_ms().is_some_and(|e| e < cutoff).then(|| a.clone())
        })
        .await
    }

    async fn pass(
        &self,
        mut due: Vec<String>,
        removed: bool,
        change: impl Fn(&Approval) -> Option<Approval>,
    ) -> Result<Option<Pass>, ApprovalStoreError> {
        if due.is_empty() {
            return Ok(None);
        }
        // Shards locked in order: a pass is the only holder of more than one.
        let mut shards: Vec<usize> = due.iter().map(|id| shard(id)).collect();
        shards.sort_unstable();
        shards.dedup();
        let mut locks = Vec::with_capacity(shards.len());
        for s in shards {
            if let Some(l) = self.locks.get(s) {
                locks.push(l.clone().lock_owned().await);
            }
        }
        due.sort_unstable();
        let mut approvals = Vec::new();
        let mut effects = Vec::new();
        // (id, as stored) of those changed meanwhile: the timeline is brought up to date.
        let mut stale: Vec<(String, Option<Approval>)> = Vec::new();
        for id in due {
            let current = self.store.get(&id)?;
            match current.as_ref().and_then(&change) {
                Some(next) => {
                    effects.push(if removed {
                        Effect::remove(store::TREE, next.id.as_bytes())
                    } else {
                        next.effect()?
                    });
                    approvals.push(next);
                }
                None => stale.push((id, current)),
            }
        }
        if !stale.is_empty() {
            let mut t = self.timeline();
            for (id, current) in &stale {
                t.live.retain(|(_, i)| i != id);
                t.ended.retain(|(_, i)| i != id);
                if let Some(a) = current {
                    t.put(None, a);
                }
            }
        }
        if approvals.is_empty() {
            return Ok(None);
        }
        Ok(Some(Pass {
            approvals,
            effects,
            removed,
            _locks: locks,
        }))
    }

    /// The pass's effects are stored (with their records).
    pub fn passed(&self, pass: Pass) {
        {
            let mut w = self.waiting();
            let mut t = self.timeline();
            for a in &pass.approvals {
                w.remove(&a.id);
                if pass.removed {
                    t.forget(a);
                } else {
                    if a.status == Status::Expired {
                        self.announce(
                            serde_json::json!({"event": "approval.expired", "approval": a}),
                        );
                    }
                    t.live.remove(&(a.expires_ms, a.id.clone()));
                    t.put(None, a);
                }
            }
        }
        self.notify();
    }

    /// A receiver that sees every later change (subscribe before reading, then wait).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn notify(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }
}
