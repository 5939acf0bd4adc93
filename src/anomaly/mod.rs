//! Usage counters and anomaly signals, both visible to Cedar.
//!
//! - [`UsageCounters`]: `context.usage`, counted on the decision path (exact, one lookup per
//!   counter).
//! - [`Detector`]: spike, repeated failures, suspicious sequences and policy-violation rate,
//!   computed on the monitor's own thread from decisions queued after they are answered. The
//!   decision path only appends to an inbox (never waits, never wakes the thread; a full inbox
//!   drops the observation and counts it), which the thread takes whole every 10 ms, and reads
//!   the signals currently raised for its principal into `context.anomaly`.
//!
//! A raised signal is an alert: an audit record (`kind: anomaly`), a metric
//! (`toolgate_anomalies_total{kind}`) and, when configured, a signed webhook. It stays visible
//! to policies for `hold_secs` after it last fired, so policies can route or deny the next calls.
//! A signal of a kind listed in `quarantine_on` also quarantines the principal (see
//! [`crate::admin::Quarantine`]); releasing it makes the monitor forget the principal's history.
//!
//! Calls denied by the kill switch or a quarantine are counted but not shown to the detectors:
//! they say nothing about the agent and would raise `repeated_failures` for everyone.

mod detect;
mod usage;
mod window;

pub use detect::{Detector, DetectorConfig, Observation, Raised, SequenceRule};
pub use usage::UsageCounters;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};

use crate::admin::{Admin, Quarantined};
use crate::approvals::{Webhook, WebhookStats};
use crate::audit::{Audit, EntryKind, Event, Sidecar};
use crate::authz::{AnomalyKind, AnomalyKinds, Outcome, Signals, Stage};
use crate::clock::now_ms;
use crate::limits::Clock;

/// Observations that may wait for the detectors.
const QUEUE: usize = 8192;
/// How often the detectors' thread takes what has queued up. The decision path never wakes
/// it: a wake-up per call cost about 10 µs of HTTP p50 on 2 cores (a futex and a context
/// switch onto the core the next request needs); a signal is raised at most this much later.
const TICK: std::time::Duration = std::time::Duration::from_millis(10);

/// What the decision path hands the detectors' thread: swapped out whole on each tick.
#[derive(Default)]
struct Inbox {
    queue: Mutex<Vec<Msg>>,
}
const SECOND_NS: u64 = 1_000_000_000;

/// Raised signals, by principal: until when each kind stays visible (monitor clock, ns).
type Active = HashMap<String, [u64; AnomalyKind::ALL.len()]>;

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct AnomalyStats {
    raised: [AtomicU64; AnomalyKind::ALL.len()],
    /// Observations dropped because the queue was full.
    pub dropped: AtomicU64,
}

impl AnomalyStats {
    /// Signals raised so far, by kind.
    pub fn raised(&self) -> impl Iterator<Item = (AnomalyKind, u64)> + '_ {
        AnomalyKind::ALL
            .into_iter()
            .zip(&self.raised)
            .map(|(k, n)| (k, n.load(Ordering::Relaxed)))
    }
}

/// Where alerts go besides the raised set.
#[derive(Default)]
pub struct Alerts {
    /// The audit log (`kind: anomaly` records).
    pub audit: Option<Arc<Audit>>,
    /// Signed notifications.
    pub webhook: Option<Webhook>,
    /// Where principals are quarantined, and for which kinds.
    pub quarantine: Option<(Arc<Admin>, AnomalyKinds)>,
}

/// What the decision path and the admin routes send the detectors' thread.
enum Msg {
    Observe(Observation),
    Forget(String),
}

/// The monitor: usage counters, the queue to the detectors, and the signals raised.
pub struct Monitor {
    usage: UsageCounters,
    clock: Arc<dyn Clock>,
    active: Arc<RwLock<Active>>,
    inbox: Option<Arc<Inbox>>,
    /// Counters for `/metrics`.
    pub stats: Arc<AnomalyStats>,
    /// The alert webhook's delivery counters, when one is configured.
    pub webhook_stats: Option<Arc<WebhookStats>>,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor").finish_non_exhaustive()
    }
}

impl Monitor {
    /// Counts usage but detects nothing (tests, and `AppState` defaults).
    pub fn counting_only(clock: Arc<dyn Clock>) -> Monitor {
        Monitor {
            usage: UsageCounters::new(clock.clone()),
            clock,
            active: Arc::default(),
            inbox: None,
            stats: Arc::default(),
            webhook_stats: None,
        }
    }

    /// Starts the detectors' thread.
    pub fn start(
        config: DetectorConfig,
        clock: Arc<dyn Clock>,
        alerts: Alerts,
    ) -> std::io::Result<Monitor> {
        let inbox = Arc::new(Inbox::default());
        let taken = Arc::downgrade(&inbox);
        let mut monitor = Monitor::counting_only(clock);
        monitor.inbox = Some(inbox);
        monitor.webhook_stats = alerts.webhook.as_ref().map(|w| w.stats.clone());
        let active = monitor.active.clone();
        let stats = monitor.stats.clone();
        std::thread::Builder::new()
            .name("toolgate-anomaly".to_owned())
            .spawn(move || detect_all(Detector::new(config), &taken, &active, &stats, &alerts))?;
        Ok(monitor)
    }

    /// What policies see of `principal` for a call to `tool`; counts the call.
    pub fn signals(&self, principal: &str, tool: &str, registered: bool) -> Signals {
        let usage = self.usage.call(principal, tool, registered);
        Signals {
            usage,
            anomaly: self.raised_for(principal),
            ..Signals::default()
        }
    }

    /// The signals currently raised for `principal`.
    pub fn raised_for(&self, principal: &str) -> AnomalyKinds {
        let now = self.clock.now_ns();
        let active = self.active.read().unwrap_or_else(PoisonError::into_inner);
        let mut kinds = AnomalyKinds::NONE;
        if let Some(until) = active.get(principal) {
            for (kind, until) in AnomalyKind::ALL.into_iter().zip(until) {
                if *until > now {
                    kinds.insert(kind);
                }
            }
        }
        kinds
    }

    /// Records an answered decision: denials count at once; the detectors get it queued.
    pub fn observe(&self, principal: &str, tool: &str, outcome: Outcome, stage: Stage) {
        if outcome == Outcome::Deny {
            self.usage.denied(principal);
        }
        if matches!(stage, Stage::KillSwitch | Stage::Quarantine) {
            return;
        }
        let Some(inbox) = &self.inbox else { return };
        let o = Observation {
            principal: principal.to_owned(),
            tool: tool.chars().take(128).collect(),
            outcome,
            stage,
            at_ns: self.clock.now_ns(),
        };
        let mut queue = inbox.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if queue.len() < QUEUE {
            queue.push(Msg::Observe(o));
        } else {
            drop(queue);
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Forgets `principal`'s raised signals now and its detector history next (after a human
    /// released it from quarantine).
    pub fn forget(&self, principal: &str) {
        self.active
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(principal);
        if let Some(inbox) = &self.inbox {
            // Never dropped (the history must not survive), and queued in order: the
            // principal's later calls are observed after it is forgotten.
            inbox
                .queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Msg::Forget(principal.to_owned()));
        }
    }
}

/// The detectors' thread: observe, raise, alert; forget idle principals now and then.
fn detect_all(
    mut detector: Detector,
    inbox: &Weak<Inbox>,
    active: &RwLock<Active>,
    stats: &AnomalyStats,
    alerts: &Alerts,
) {
    let hold_ns = detector.config().hold_secs.saturating_mul(SECOND_NS);
    let mut last_sweep = 0u64;
    // Ends when the monitor is dropped.
    while let Some(inbox) = inbox.upgrade() {
        let batch =
            std::mem::take(&mut *inbox.queue.lock().unwrap_or_else(PoisonError::into_inner));
        drop(inbox);
        for msg in batch {
            observe_one(
                &mut detector,
                msg,
                (hold_ns, &mut last_sweep),
                active,
                stats,
                alerts,
            );
        }
        // Always sleep: under a trickle of calls, taking each one at once would spin.
        std::thread::sleep(TICK);
    }
}

/// One queued message: an observation (raise, alert, sweep now and then) or a forget.
fn observe_one(
    detector: &mut Detector,
    msg: Msg,
    (hold_ns, last_sweep): (u64, &mut u64),
    active: &RwLock<Active>,
    stats: &AnomalyStats,
    alerts: &Alerts,
) {
    let o = match msg {
        Msg::Observe(o) => o,
        Msg::Forget(principal) => {
            detector.forget(&principal);
            active
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&principal);
            return;
        }
    };
    let now = o.at_ns;
    for raised in detector.observe(&o) {
        let fresh = {
            let mut active = active.write().unwrap_or_else(PoisonError::into_inner);
            let until = active.entry(raised.principal.clone()).or_default();
            let slot = until.get_mut(raised.kind as usize);
            let fresh = slot.as_ref().is_none_or(|u| **u <= now);
            if let Some(slot) = slot {
                *slot = now.saturating_add(hold_ns);
            }
            fresh
        };
        // Each episode alerts once; firing again while raised only extends the hold.
        if fresh {
            alert(&raised, stats, alerts);
        }
    }
    if now.saturating_sub(*last_sweep) > 60 * SECOND_NS {
        *last_sweep = now;
        detector.sweep(now);
        active
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, until| until.iter().any(|u| *u > now));
    }
}

fn alert(raised: &Raised, stats: &AnomalyStats, alerts: &Alerts) {
    if let Some(n) = stats.raised.get(raised.kind as usize) {
        n.fetch_add(1, Ordering::Relaxed);
    }
    tracing::warn!(
        principal = raised.principal,
        kind = raised.kind.as_str(),
        detail = raised.detail,
        "anomaly"
    );
    let id = uuid::Uuid::now_v7().to_string();
    let quarantined = quarantine(raised, alerts);
    if let Some(audit) = &alerts.audit {
        audit.record_detached(
            Event::Sidecar(Sidecar {
                kind: EntryKind::Anomaly,
                id: Some(id.clone()),
                principal: Some(raised.principal.clone()),
                decision: raised.kind.as_str().to_owned(),
                stage: Some("anomaly".to_owned()),
                detail: Some(raised.detail.clone()),
                ..Sidecar::default()
            })
            .into(),
        );
    }
    if let Some(hook) = &alerts.webhook {
        hook.send(serde_json::json!({
            "event": "anomaly",
            "id": id,
            "principal": raised.principal,
            "kind": raised.kind.as_str(),
            "detail": raised.detail,
            "quarantined": quarantined,
            "at_ms": now_ms(),
        }));
    }
}

/// Quarantines the principal if `raised` is of a configured kind; recorded in the audit log.
/// Whether it is quarantined now because of this signal.
fn quarantine(raised: &Raised, alerts: &Alerts) -> bool {
    let Some((admin, kinds)) = &alerts.quarantine else {
        return false;
    };
    // Only agents call tools; a human's denied calls (stage `auth`) must not leave an entry
    // that no route can release.
    if !kinds.contains(raised.kind) || !raised.principal.starts_with("Agent::") {
        return false;
    }
    let entry = Quarantined {
        principal: raised.principal.clone(),
        cause: raised.kind.as_str().to_owned(),
        by: "anomaly".to_owned(),
        reason: raised.detail.clone(),
        at_ms: now_ms(),
    };
    // In force at once (it only denies more), then stored with its record.
    let effect = crate::admin::quarantine_effect(&entry.principal, Some(&entry));
    if !admin.quarantine().enter(entry) {
        return false;
    }
    tracing::warn!(
        principal = raised.principal,
        kind = raised.kind.as_str(),
        "principal quarantined"
    );
    if let Some(audit) = &alerts.audit {
        let record = Event::Sidecar(Sidecar {
            kind: EntryKind::Admin,
            principal: Some(raised.principal.clone()),
            decision: "quarantined".to_owned(),
            stage: Some("anomaly".to_owned()),
            reasons: vec![raised.kind.as_str().to_owned()],
            detail: Some(raised.detail.clone()),
            ..Sidecar::default()
        })
        .into();
        let stored =
            effect.and_then(|effect| Ok(audit.commit_blocking(vec![record], vec![effect])?));
        if let Err(e) = stored {
            tracing::error!(error = %e, principal = raised.principal, "quarantine not stored; in force until restart");
        }
    }
    true
}
