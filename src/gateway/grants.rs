//! Grants in the pipeline: `POST /v1/grants` links a template of the policy files for an agent
//! or role and a tool until it expires, `GET /v1/grants` lists them, `POST
//! /v1/grants/{id}/revoke` ends one early. Granting and revoking are Cedar decisions
//! (`Action::"grant"` on the tool, with the template, grantee and duration in the context);
//! every attempt is in the audit log (stage `grant`) before the answer, and a grant is recorded
//! before it takes effect.

use std::future::Future;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Error, Gateway};
use crate::audit::{Entry, EntryKind, Event, Operator};
use crate::authz::{self, Advice, GrantAsk, Principal};
use crate::clock::now_ms;
use crate::codes::Code;
use crate::grants::{EntityRef, Grant, GrantError, Grants, Listed, MAX_TTL_S};
use crate::policy::Snapshot;

/// `POST /v1/grants` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantBody {
    template: String,
    principal: EntityRef,
    resource: EntityRef,
    ttl_s: u64,
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /v1/grants/{id}/revoke` body (optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevokeBody {
    #[serde(default)]
    reason: Option<String>,
}

const MAX_REASON: usize = 1024;
/// Longest template name or entity id in a grant.
const MAX_NAME: usize = 256;

fn entry(
    who: &Principal,
    revision: &str,
    decision: &str,
    reasons: Vec<String>,
    detail: String,
) -> Entry {
    Event::Operator(grant_record(
        &who.uid.to_string(),
        revision,
        decision,
        reasons,
        detail,
    ))
    .into()
}

/// A grant's record: stage `grant`, by whom, under which revision.
fn grant_record(
    by: &str,
    revision: &str,
    decision: &str,
    reasons: Vec<String>,
    detail: String,
) -> Operator {
    Operator {
        kind: EntryKind::Admin,
        stage: Some("grant".to_owned()),
        by: by.to_owned(),
        revision: revision.to_owned(),
        decision: decision.to_owned(),
        reasons,
        detail,
        at_ms: None,
    }
}

/// One line for the audit log: what links to what, until when, and why. Entities are written
/// as Cedar writes them (quotes escaped), so no id can forge the line's shape.
pub fn describe(g: &Grant) -> String {
    let uid = |e: &EntityRef| {
        e.uid("entity")
            .map_or_else(|_| format!("{:?}", e.id), |u| u.to_string())
    };
    format!(
        "{} links `{}` for {} on {} until {} ms{}",
        g.id,
        g.template.escape_debug(),
        uid(&g.principal),
        uid(&g.resource),
        g.expires_ms,
        g.reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    )
}

fn not_recorded(e: impl std::fmt::Display) -> Error {
    tracing::error!(error = %e, "grant request not recorded; nothing changed");
    Error::StoreUnavailable
}

fn service(state: &Gateway) -> Result<&Arc<Grants>, Error> {
    state.grants.as_ref().ok_or(Error::StoreUnavailable)
}

fn checked_reason(reason: Option<String>) -> Result<Option<String>, Error> {
    match reason {
        Some(r) if r.len() > MAX_REASON || r.chars().any(char::is_control) => {
            Err(Error::bad_request(
                Code::InvalidReason,
                format!("`reason` must be at most {MAX_REASON} bytes without control characters"),
            ))
        }
        other => Ok(other),
    }
}

/// Names and ids in a grant: 1 to 256 bytes without control characters.
fn checked_name(field: &'static str, value: &str) -> Result<(), Error> {
    if value.is_empty() || value.len() > MAX_NAME || value.chars().any(char::is_control) {
        return Err(Error::Grant(GrantError::BadEntity {
            field,
            message: format!("must be 1 to {MAX_NAME} bytes without control characters"),
        }));
    }
    Ok(())
}

fn bad(field: &'static str, message: impl Into<String>) -> Error {
    Error::Grant(GrantError::BadEntity {
        field,
        message: message.into(),
    })
}

/// The body, checked against the live set: a grant ready to ask Cedar about.
fn checked_grant(snap: &Snapshot, who: &Principal, body: GrantBody) -> Result<Grant, Error> {
    if body.ttl_s == 0 || body.ttl_s > MAX_TTL_S {
        return Err(Error::bad_request(
            Code::InvalidTtl,
            format!("`ttl_s` must be 1 to {MAX_TTL_S} seconds (30 days)"),
        ));
    }
    let reason = checked_reason(body.reason)?;
    checked_name("template", &body.template)?;
    checked_name("principal", &body.principal.id)?;
    checked_name("resource", &body.resource.id)?;
    if !matches!(body.principal.kind.as_str(), "Agent" | "Role") {
        return Err(bad(
            "principal",
            "a grant is for an `Agent` or a `Role` (all its members)",
        ));
    }
    if body.resource.kind != "Tool" {
        return Err(bad("resource", "a grant is for a `Tool`"));
    }
    if !snap.tools.contains_key(&body.resource.id) {
        return Err(bad(
            "resource",
            "no tool with this id is registered (GET /v1/tools)",
        ));
    }
    let grantee = body.principal.uid("principal").map_err(Error::Grant)?;
    if body.principal.kind == "Role" && snap.entities.get(&grantee).is_none() {
        return Err(bad(
            "principal",
            "there is no role with this id in entities.json",
        ));
    }
    let now = now_ms();
    Ok(Grant {
        id: format!("grant-{}", uuid::Uuid::now_v7()),
        template: body.template,
        principal: body.principal,
        resource: body.resource,
        granted_by: who.uid.to_string(),
        reason,
        created_ms: now,
        expires_ms: now.saturating_add(body.ttl_s.saturating_mul(1000)),
    })
}

/// A human grants access (`POST /v1/grants`): a Cedar decision, recorded before it takes
/// effect. `body` is read once the grant service is known to be there.
pub async fn create_grant(
    state: &Gateway,
    who: Principal,
    body: Result<GrantBody, Error>,
) -> Result<Listed, Error> {
    let grants = service(state)?.clone();
    let fleet = state.fleet.clone();
    let body = body?;
    let snap = state.policy.current();
    let ttl_s = i64::try_from(body.ttl_s).unwrap_or(i64::MAX);
    let mut grant = checked_grant(&snap, &who, body)?;
    grant.reason = super::gates::screen_note(state, grant.reason.take());
    let grantee = grant.principal.uid("principal").map_err(Error::Grant)?;
    let ask = GrantAsk {
        tool: &grant.resource.id,
        template: &grant.template,
        grantee: &grantee,
        ttl_s,
        revoke: false,
    };
    let revision = snap.revision.clone();
    let decided = authz::may_grant(&snap, &who, ask);
    // Let go of the snapshot before the grant relinks the live set.
    drop(snap);
    let detail = describe(&grant);
    let id = grant.id.clone();
    decided_change(
        state,
        Verbs {
            who,
            revision,
            detail,
            id,
            refused: "grant_refused",
            done: "granted",
            failed: "grant_failed",
            not: "not created",
        },
        decided,
        // A grant that cannot link is refused before anything is recorded as granted.
        grants.check(&grant).map_err(Error::Grant),
        move |record| async move {
            let _sharing = grants.sharing();
            let listed = grants.create(grant, record).await?;
            share(fleet.as_deref(), &listed.grant.id, Some(&listed.grant)).await?;
            Ok(listed)
        },
    )
    .await
}

/// Tells the fleet (if any) of grant `id` (`Some`) or of its end.
async fn share(
    fleet: Option<&crate::fleet::Fleet>,
    id: &str,
    grant: Option<&Grant>,
) -> Result<(), GrantError> {
    let Some(fleet) = fleet else { return Ok(()) };
    let change = crate::fleet::Change::Grant(id.to_owned(), grant.cloned());
    fleet.publish(change).await.map_err(|e| {
        tracing::error!(error = %e, grant = id, "grant change in force here but not shared");
        GrantError::NotShared(e.to_string())
    })
}

/// One grant change: who asks, under which revision, about which grant (`id`, `detail`), and
/// the audit decisions of its kind.
struct Verbs {
    who: Principal,
    revision: String,
    detail: String,
    id: String,
    refused: &'static str,
    done: &'static str,
    failed: &'static str,
    /// How a failure reads after the id (`not created`).
    not: &'static str,
}

/// Every grant change has one shape: Cedar's refusal is recorded and answered 403; `ready`
/// may refuse the change before anything is recorded as done; an allowed change is run to its
/// end in a spawned task (a client hanging up cannot stop it halfway), storing its record
/// together with the change; a failure for another reason is recorded too.
async fn decided_change<T: Send + 'static, F>(
    state: &Gateway,
    verbs: Verbs,
    decided: Result<Vec<String>, Advice>,
    ready: Result<(), Error>,
    change: impl FnOnce(Entry) -> F + Send + 'static,
) -> Result<T, Error>
where
    F: Future<Output = Result<T, GrantError>> + Send + 'static,
{
    let Verbs {
        who,
        revision,
        detail,
        id,
        refused,
        done,
        failed,
        not,
    } = verbs;
    let policies = match decided {
        Ok(policies) => policies,
        Err(advice) => {
            let e = entry(
                &who,
                &revision,
                refused,
                vec![advice.code.to_string()],
                detail,
            );
            state.audit.record(e).await.map_err(not_recorded)?;
            return Err(Error::Refused(advice));
        }
    };
    ready?;
    let audit = state.audit.clone();
    let task = tokio::spawn(async move {
        let e = entry(&who, &revision, done, policies, detail);
        match change(e).await {
            Ok(changed) => {
                tracing::info!(grant = id, by = %who.uid, "{done}");
                Ok(changed)
            }
            // The record and the change go together: neither is stored.
            Err(GrantError::Store(e)) => Err(not_recorded(e)),
            // Recorded and in force here; only the fleet lacks it.
            Err(e @ GrantError::NotShared(_)) => Err(Error::Grant(e)),
            Err(err) => {
                let detail = format!("{id} {not}: {err}");
                let e = entry(&who, &revision, failed, Vec::new(), detail);
                audit.record(e).await.map_err(not_recorded)?;
                Err(Error::Grant(err))
            }
        }
    });
    task.await.map_err(|_| Error::StoreUnavailable)?
}

/// The grants alive (`GET /v1/grants`, humans only).
pub async fn list_grants(state: &Gateway) -> Result<Value, Error> {
    let grants = service(state)?;
    Ok(json!({ "grants": grants.list().await }))
}

/// A human ends grant `id` early (`POST /v1/grants/{id}/revoke`); `body` is `None` for a
/// revocation without a body (and so without a reason).
pub async fn revoke_grant(
    state: &Gateway,
    who: Principal,
    id: String,
    body: Result<Option<RevokeBody>, Error>,
) -> Result<Value, Error> {
    let grants = service(state)?.clone();
    let fleet = state.fleet.clone();
    let reason = match body? {
        Some(b) => super::gates::screen_note(state, checked_reason(b.reason)?),
        None => None,
    };
    let grant = grants.get(&id).await.ok_or_else(|| {
        Error::Grant(GrantError::NotFound(
            id.chars().filter(|c| !c.is_control()).take(64).collect(),
        ))
    })?;
    let snap = state.policy.current();
    let grantee = grant.principal.uid("principal").map_err(Error::Grant)?;
    let ask = GrantAsk {
        tool: &grant.resource.id,
        template: &grant.template,
        grantee: &grantee,
        ttl_s: 0,
        revoke: true,
    };
    let detail = format!(
        "{}{}",
        describe(&grant),
        reason
            .as_deref()
            .map(|r| format!("; revoked: {r}"))
            .unwrap_or_default()
    );
    let revision = snap.revision.clone();
    let decided = authz::may_grant(&snap, &who, ask);
    drop(snap);
    let gone = decided_change(
        state,
        Verbs {
            who,
            revision,
            detail,
            id: id.clone(),
            refused: "revoke_refused",
            done: "revoked",
            failed: "revoke_failed",
            not: "not revoked",
        },
        decided,
        Ok(()),
        move |record| async move {
            let _sharing = grants.sharing();
            let gone = grants.revoke(&id, record).await?;
            share(fleet.as_deref(), &gone.id, None).await?;
            Ok(gone)
        },
    )
    .await?;
    Ok(json!({ "revoked": gone.id, "grant": gone }))
}

/// Ends the grants expired now: unlinks them, records each, then removes them from the store
/// (the expiry timer of `serve`).
pub async fn expire_grants(state: &Gateway) {
    let Some(grants) = &state.grants else {
        return;
    };
    let now = now_ms();
    // No `sharing` guard: a fleet read never brings back a grant past its end.
    let gone = grants.expire_due(now).await;
    forget_ended(state, grants, &gone, now).await;
    // Every sidecar ends a grant when it expires; the fleet forgets it too (a read meanwhile
    // leaves expired grants out).
    for g in &gone {
        let _ = share(state.fleet.as_deref(), &g.id, None).await;
    }
}

/// Records each of `ended` as expired, then removes them from the store. A grant whose record
/// failed stays stored, so the next start records it again.
pub async fn forget_ended(state: &Gateway, grants: &Grants, ended: &[Grant], now: u64) {
    if ended.is_empty() {
        return;
    }
    let revision = state.policy.current().revision.clone();
    for chunk in ended.chunks(crate::audit::MAX_COMMIT) {
        let records = chunk
            .iter()
            .map(|g| grant_expired_entry(g, now, &revision))
            .collect();
        match grants.forget(chunk, records).await {
            Ok(()) => {
                for g in chunk {
                    tracing::info!(grant = g.id, "grant expired");
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "grant expiry not recorded; the grants stay stored (and unlinked) and end again at the next start")
            }
        }
    }
}

/// The audit record of `g` expiring at `now`.
pub fn grant_expired_entry(g: &Grant, now: u64, revision: &str) -> Entry {
    Event::Operator(Operator {
        at_ms: Some(now),
        ..grant_record(
            &g.granted_by,
            revision,
            "expired",
            vec!["grant_expired".to_owned()],
            describe(g),
        )
    })
    .into()
}

/// Runs forever: expires each grant at its expiry (woken early when grants change).
pub async fn expiry_timer(state: Gateway) {
    let Some(grants) = state.grants.clone() else {
        return;
    };
    loop {
        expire_grants(&state).await;
        let wait = match grants.next_expiry().await {
            Some(at) => at.saturating_sub(now_ms()),
            None => 60_000,
        };
        tokio::select! {
            () = tokio::time::sleep(std::time::Duration::from_millis(wait.min(60_000))) => {}
            () = grants.changed() => {}
        }
    }
}
