//! `POST /v1/policies/held/approve` (`{"revision": "sha256:…"}`): activates a policy change
//! held by `reload.widening = "hold"`. Cedar decides who may (`Action::"approve_policy_change"`,
//! with the widened actions in the context); every attempt is in the audit log before the
//! answer, and an approved change is recorded before it goes live.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Error, Gateway};
use crate::audit::{Entry, EntryKind, Operator};
use crate::authz::{self, Principal};

/// `POST /v1/policies/held/approve` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproveBody {
    /// The held revision the approver reviewed.
    revision: String,
}

fn entry(by: &str, live: &str, decision: &str, reasons: Vec<String>, detail: String) -> Entry {
    Operator::by(EntryKind::Reload, "reload", by, live).entry(decision, reasons, detail)
}

/// A human approves the held policy change `body.revision` names (`POST
/// /v1/policies/held/approve`): a Cedar decision under the live set, recorded with the
/// remembered set before the change goes live.
pub async fn approve_held(
    state: &Gateway,
    who: Principal,
    body: ApproveBody,
) -> Result<Value, Error> {
    let snap = state.policy.current();
    let by = who.uid.to_string();
    let not_recorded = |e: String| {
        tracing::error!(error = %e, "policy approval not recorded; nothing changed");
        Error::StoreUnavailable
    };
    let held = state.policy.held_as(&body.revision).map_err(Error::Held)?;
    // Decided by the live set: the change may not approve itself.
    let summary = held.review.summary();
    match authz::may_approve_policy_change(&snap, &who, &held.review.widened, held.review.proved) {
        Err(advice) => {
            let detail = format!("{} not activated; diff: {summary}", held.revision);
            state
                .audit
                .record(entry(
                    &by,
                    &snap.revision,
                    "held_approval_refused",
                    vec![advice.code.to_string()],
                    detail,
                ))
                .await
                .map_err(|e| not_recorded(e.to_string()))?;
            Err(Error::Refused(advice))
        }
        Ok(policies) => {
            let detail = format!(
                "{} approved by {by}, replacing {}; diff: {summary}",
                held.revision, snap.revision
            );
            let record = entry(&by, &held.revision, "applied", policies.clone(), detail);
            // Let go of the live snapshot before the swap, which waits for requests still
            // holding it (up to 5 s) before freeing it.
            drop(snap);
            // Recorded with the remembered set, then live, under the reload lock (no edit
            // comes in between), off the async threads.
            let store = state.policy.clone();
            let audit = state.audit.clone();
            let revision = held.revision.clone();
            let swapped = tokio::task::spawn_blocking(move || {
                store.approve_held_with(&revision, |effects| {
                    audit.commit_blocking(vec![record], effects).map(|_| ())
                })
            })
            .await
            .map_err(|_| Error::StoreUnavailable)?;
            let (from, to, review) = match swapped {
                Ok(done) => done,
                Err(crate::reload::HoldError::NotRecorded(e)) => {
                    return Err(not_recorded(e.to_string()));
                }
                // A newer edit replaced the held change after the check: nothing was recorded
                // as applied.
                Err(e) => return Err(Error::Held(e)),
            };
            tracing::info!(from, to, by, "held policy change approved and live");
            Ok(json!({
                "applied": to,
                "replaced": from,
                "review": review,
                "approved_by": by,
                "policies": policies,
            }))
        }
    }
}
