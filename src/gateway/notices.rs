//! Notices for humans that no single request makes: an approval past half its time to live
//! (`approval.reminder`), and changes of state seen by looking (`quarantine`, `kill_switch`,
//! `policy.held`, `descriptor.changed`). A background job calls [`look`] every second; each
//! change is announced once, on the approver webhook. What is true at start is the baseline
//! and is not announced.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use super::Gateway;
use super::exposure::{Exposure, exposure};

/// What was seen last time.
#[derive(Debug, Default)]
pub struct Seen {
    started: bool,
    quarantined: BTreeMap<String, String>,
    kill_switch: bool,
    held: Option<String>,
    changed: BTreeSet<(String, String)>,
}

/// Looks once and announces what changed since the last look.
pub fn look(state: &Gateway, seen: &mut Seen, now_ms: u64) {
    if !state.approvals.announces() {
        return;
    }
    let announce = |v| state.approvals.announce(v);
    match state.approvals.due_reminders(now_ms) {
        Ok(due) => {
            for a in due {
                announce(json!({
                    "event": "approval.reminder",
                    "approval": a,
                    "approve": format!("/v1/approvals/{}/approve", a.id),
                    "deny": format!("/v1/approvals/{}/deny", a.id),
                }));
            }
        }
        Err(e) => tracing::warn!(error = %e, "approval reminders not checked"),
    }
    let quarantined: BTreeMap<String, String> = state
        .admin
        .quarantine()
        .list()
        .into_iter()
        .map(|q| (q.principal.clone(), q.reason.clone()))
        .collect();
    let (switch, _) = state.admin.kill_switch();
    let kill_switch = state.admin.kill_switch_on();
    let held = state.policy.held();
    let snap = state.policy.current();
    let changed: BTreeSet<(String, String)> = snap
        .tools
        .values()
        .filter_map(|t| {
            let b = t.mcp.as_ref()?;
            match exposure(state, t, b) {
                Exposure::Changed { offered } => Some((t.name.clone(), offered)),
                _ => None,
            }
        })
        .collect();
    if seen.started {
        for (agent, reason) in &quarantined {
            if !seen.quarantined.contains_key(agent) {
                announce(
                    json!({"event": "quarantine", "agent": agent, "on": true, "reason": reason}),
                );
            }
        }
        for agent in seen.quarantined.keys() {
            if !quarantined.contains_key(agent) {
                announce(json!({"event": "quarantine", "agent": agent, "on": false}));
            }
        }
        if kill_switch != seen.kill_switch {
            announce(
                json!({"event": "kill_switch", "on": kill_switch, "by": switch.by, "reason": switch.reason}),
            );
        }
        if let Some(h) = &held
            && seen.held.as_ref() != Some(&h.revision)
        {
            announce(json!({
                "event": "policy.held",
                "revision": h.revision,
                "from": h.from,
                "review": h.review,
                "approve": "/v1/policies/held/approve",
            }));
        }
        for (tool, offered) in changed.difference(&seen.changed) {
            announce(json!({
                "event": "descriptor.changed",
                "tool": tool,
                "offered": offered,
                "approve": "/v1/mcp/descriptors/approve",
            }));
        }
    }
    *seen = Seen {
        started: true,
        quarantined,
        kill_switch,
        held: held.map(|h| h.revision),
        changed,
    };
}
