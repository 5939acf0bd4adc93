//! Operators' stops in the pipeline: the kill switch (`{"on": true, "reason": "..."}`) and
//! quarantine. Only humans the policies allow may flip it
//! (`Action::"kill_switch"`); every attempt, allowed or refused, is in the audit log before
//! the answer, and an allowed change is recorded before it takes effect.
//!
//! Quarantine the same way: `GET /v1/admin/quarantine` lists quarantined agents (humans only),
//! `POST /v1/admin/quarantine` (`{"agent": "dev-agent", "on": false, "reason": "..."}`)
//! releases one or quarantines one by hand, as `Action::"quarantine"` allows.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Error, Gateway};
use crate::admin::{KillSwitch, Quarantined, SwitchError};
use crate::audit::{Entry, EntryKind, Event, Operator};
use crate::authz::{self, Principal};
use crate::clock::now_ms;
use crate::codes::Code;
use crate::fleet::Change;
use crate::policy::Snapshot;

/// What an admin request's audit records share: who asked, under which revision, and why.
struct AdminRecord {
    by: String,
    revision: String,
    detail: String,
}

impl AdminRecord {
    fn entry(&self, decision: &str, reasons: Vec<String>) -> Entry {
        Event::Operator(Operator {
            kind: EntryKind::Admin,
            by: self.by.clone(),
            revision: self.revision.clone(),
            decision: decision.to_owned(),
            reasons,
            detail: self.detail.clone(),
            ..Operator::default()
        })
        .into()
    }
}

/// The answer when an admin request cannot be recorded: nothing changes (fail closed).
fn not_recorded(what: &'static str) -> impl Fn(crate::audit::StoreError) -> Error {
    move |e| {
        tracing::error!(error = %e, "{what} request not recorded; nothing changed");
        Error::StoreUnavailable
    }
}

/// `POST /v1/admin/kill-switch` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KillSwitchBody {
    on: bool,
    #[serde(default)]
    reason: Option<String>,
}

/// The kill switch as shown to callers.
pub fn kill_switch_view(state: &Gateway) -> Value {
    let (set, forced_by) = state.admin.kill_switch();
    json!({
        "on": state.admin.kill_switch_on(),
        "forced_by": forced_by,
        "set": set,
    })
}

/// A human flips the kill switch (`POST /v1/admin/kill-switch`), as the policies allow;
/// recorded before it takes effect.
pub async fn set_kill_switch(
    state: &Gateway,
    who: Principal,
    body: KillSwitchBody,
) -> Result<Value, Error> {
    let reason = super::gates::screen_note(state, body.reason);
    let snap: Arc<Snapshot> = state.policy.current();
    let by = who.uid.to_string();
    let word = if body.on {
        "kill_switch_on"
    } else {
        "kill_switch_off"
    };
    let record = AdminRecord {
        by: by.clone(),
        revision: snap.revision.clone(),
        detail: format!("reason: {}", reason.as_deref().unwrap_or("-")),
    };
    let entry = |decision: &str, reasons: Vec<String>| record.entry(decision, reasons);
    let record_failed = not_recorded("kill switch");
    let allowed = match authz::may_flip_kill_switch(&snap, &who, body.on) {
        Ok(policies) => policies,
        Err(advice) => {
            state
                .audit
                .record(entry("kill_switch_refused", vec![advice.code.to_string()]))
                .await
                .map_err(record_failed)?;
            return Err(Error::Refused(advice));
        }
    };
    if let (false, Some(forced_by)) = (body.on, state.admin.forced_by()) {
        state
            .audit
            .record(entry(
                "kill_switch_refused",
                vec!["kill_switch_forced".to_owned()],
            ))
            .await
            .map_err(record_failed)?;
        return Err(Error::KillSwitchForced(forced_by.to_owned()));
    }
    let next = KillSwitch {
        on: body.on,
        by: Some(by.clone()),
        reason: reason.clone(),
        at_ms: now_ms(),
    };
    let effect = crate::admin::kill_switch_effect(&next);
    let share = Change::KillSwitch(next.clone());
    change_in_order(
        state,
        "kill switch",
        (entry(word, allowed), effect),
        Some(share),
        move |state| {
            state.admin.set_kill_switch(next).map_err(|e| match e {
                SwitchError::Forced(by) => Error::KillSwitchForced(by),
                SwitchError::Store(e) => {
                    tracing::error!(error = %e, "kill switch not stored");
                    Error::StoreUnavailable
                }
            })
        },
    )
    .await?;
    tracing::warn!(on = body.on, by, "kill switch flipped");
    Ok(kill_switch_view(state))
}

/// `POST /v1/admin/quarantine` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuarantineBody {
    /// `dev-agent` or `Agent::"dev-agent"`.
    agent: String,
    on: bool,
    #[serde(default)]
    reason: Option<String>,
}

/// Stores `effect` with `record`, then puts the change in force (`in_force`), then tells the
/// fleet (`share`, when there is one); in a task of its own (a client hanging up cannot leave
/// it stored but not in force) and in turn with other human admin changes and the fleet's
/// reads, so they take force in the order recorded. If the record cannot be written, nothing
/// changes (503); if the fleet's Redis does not take it, it is in force here only (503
/// `not_shared`; the fleet's next rounds send it again until Redis takes it).
pub async fn change_in_order(
    state: &Gateway,
    what: &'static str,
    (record, effect): (
        crate::audit::Entry,
        Result<crate::audit::Effect, crate::admin::AdminStoreError>,
    ),
    share: Option<Change>,
    in_force: impl FnOnce(&Gateway) -> Result<(), Error> + Send + 'static,
) -> Result<(), Error> {
    let effect = effect.map_err(|e| {
        tracing::error!(error = %e, "{what} change not encoded");
        Error::StoreUnavailable
    })?;
    let state = state.clone();
    tokio::spawn(async move {
        let _serial = state.admin.changing().await;
        state
            .audit
            .commit(vec![record], vec![effect])
            .await
            .map_err(not_recorded(what))?;
        in_force(&state)?;
        let (Some(fleet), Some(share)) = (&state.fleet, share) else {
            return Ok(());
        };
        let agent = match &share {
            Change::Quarantine(agent, _) => Some(agent.clone()),
            _ => None,
        };
        let shared = fleet.publish(share).await;
        if let (Ok(()), Some(agent)) = (&shared, agent) {
            state.admin.quarantine().shared_now(&agent);
        }
        shared.map_err(|e| {
            tracing::error!(error = %e, "{what} change in force here but not shared");
            Error::Coded {
                code: Code::NotShared,
                message: format!(
                    "the {what} change is recorded and in force on this sidecar; the fleet's Redis did not take it ({e}), so it is sent again until Redis does"
                ),
            }
        })
    })
    .await
    .map_err(|_| Error::StoreUnavailable)?
}

/// `dev-agent` or `Agent::"dev-agent"` → the agent's uid; anything else is a 400.
fn agent_uid(raw: &str) -> Result<cedar_policy::EntityUid, Error> {
    let bad = || {
        Error::bad_request(
            Code::InvalidAgent,
            "`agent` must be an agent id (`dev-agent`) or uid (`Agent::\"dev-agent\"`)",
        )
    };
    if raw.is_empty() || raw.len() > 256 || raw.chars().any(char::is_control) {
        return Err(bad());
    }
    let uid = if raw.contains("::") {
        raw.parse::<cedar_policy::EntityUid>().map_err(|_| bad())?
    } else {
        cedar_policy::EntityUid::from_type_name_and_id(
            "Agent".parse().map_err(|_| bad())?,
            cedar_policy::EntityId::new(raw),
        )
    };
    if uid.type_name().to_string() != "Agent" {
        return Err(bad());
    }
    Ok(uid)
}

/// The quarantined agents as shown to humans.
pub fn quarantine_view(state: &Gateway) -> Value {
    json!({ "quarantined": state.admin.quarantine().list() })
}

/// A human quarantines an agent by hand or releases it (`POST /v1/admin/quarantine`).
pub async fn set_quarantine(
    state: &Gateway,
    who: Principal,
    body: QuarantineBody,
) -> Result<Value, Error> {
    let target = agent_uid(&body.agent)?;
    let target_id = target.to_string();
    let reason = super::gates::screen_note(state, body.reason);
    let snap: Arc<Snapshot> = state.policy.current();
    let by = who.uid.to_string();
    let record = AdminRecord {
        by: by.clone(),
        revision: snap.revision.clone(),
        detail: format!(
            "agent: {target_id}; reason: {}",
            reason.as_deref().unwrap_or("-")
        ),
    };
    let entry = |decision: &str, reasons: Vec<String>| record.entry(decision, reasons);
    let record_failed = not_recorded("quarantine");
    let allowed = match authz::may_quarantine(&snap, &who, body.on, &target) {
        Ok(policies) => policies,
        Err(advice) => {
            state
                .audit
                .record(entry("quarantine_refused", vec![advice.code.to_string()]))
                .await
                .map_err(record_failed)?;
            return Err(Error::Refused(advice));
        }
    };
    let quarantine = state.admin.quarantine();
    let already = quarantine.get(&target_id).is_some();
    if body.on == already {
        // Nothing to change; recorded all the same, since it was asked for.
        state
            .audit
            .record(entry("quarantine_unchanged", allowed))
            .await
            .map_err(record_failed)?;
        if body.on {
            return Ok(quarantine_view(state));
        }
        return Err(Error::NotQuarantined(target_id));
    }
    let word = if body.on {
        "quarantine_on"
    } else {
        "quarantine_released"
    };
    let entered = body.on.then(|| Quarantined {
        principal: target_id.clone(),
        cause: "manual".to_owned(),
        by: by.clone(),
        reason: reason.clone().unwrap_or_default(),
        at_ms: now_ms(),
    });
    let effect = crate::admin::quarantine_effect(&target_id, entered.as_ref());
    let target = target_id.clone();
    let share = Change::Quarantine(target_id.clone(), entered.clone().ok_or_else(now_ms));
    change_in_order(
        state,
        "quarantine",
        (entry(word, allowed), effect),
        Some(share),
        move |state| {
            let quarantine = state.admin.quarantine();
            match entered {
                Some(q) => {
                    quarantine.enter(q);
                }
                // Released: its history must not raise the same signal again at its next call.
                None if quarantine.release(&target).is_some() => state.monitor.forget(&target),
                None => {}
            }
            Ok(())
        },
    )
    .await?;
    tracing::warn!(on = body.on, by, agent = target_id, "quarantine changed");
    Ok(quarantine_view(state))
}
