//! Grants through the API: `POST /v1/grants` links a template of the policy files for an agent
//! or role and a tool until it expires, `GET /v1/grants` lists them, `POST
//! /v1/grants/{id}/revoke` ends one early. Granting and revoking are Cedar decisions
//! (`Action::"grant"` on the tool, with the template, grantee and duration in the context);
//! every attempt is in the audit log (stage `grant`) before the answer, and a grant is recorded
//! before it takes effect.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use super::handlers::human;
use super::{ApiError, AppState};
use crate::audit::{Entry, EntryKind, now_ms};
use crate::authz::{self, GrantAsk, Principal};
use crate::grants::{EntityRef, Grant, GrantError, Grants, Listed, MAX_TTL_S};

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

fn entry(
    who: &Principal,
    revision: &str,
    decision: &str,
    reasons: Vec<String>,
    detail: String,
) -> Entry {
    Entry {
        kind: EntryKind::Admin,
        id: uuid::Uuid::now_v7().to_string(),
        at_ms: now_ms(),
        principal: Some(who.uid.to_string()),
        stage: Some("grant".to_owned()),
        decision: decision.to_owned(),
        reasons,
        policy_revision: Some(revision.to_owned()),
        detail: Some(detail),
        ..Entry::default()
    }
}

/// One line for the audit log: what links to what, until when, and why.
pub(crate) fn describe(g: &Grant) -> String {
    format!(
        "{} links `{}` for {}::\"{}\" on {}::\"{}\" until {} ms{}",
        g.id,
        g.template,
        g.principal.kind,
        g.principal.id,
        g.resource.kind,
        g.resource.id,
        g.expires_ms,
        g.reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    )
}

fn not_recorded(e: crate::audit::StoreError) -> ApiError {
    tracing::error!(error = %e, "grant request not recorded; nothing changed");
    ApiError::StoreUnavailable
}

fn service(state: &AppState) -> Result<&std::sync::Arc<Grants>, ApiError> {
    state.grants.as_ref().ok_or(ApiError::StoreUnavailable)
}

fn checked_reason(reason: Option<String>) -> Result<Option<String>, ApiError> {
    match reason {
        Some(r) if r.len() > MAX_REASON || r.chars().any(char::is_control) => {
            Err(ApiError::bad_request(
                "invalid_reason",
                format!("`reason` must be at most {MAX_REASON} bytes without control characters"),
            ))
        }
        other => Ok(other),
    }
}

/// `POST /v1/grants`.
pub async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<GrantBody>, JsonRejection>,
) -> Result<(StatusCode, Json<Listed>), ApiError> {
    let who = human(&state, &headers, "only humans grant access")?;
    let grants = service(&state)?;
    let Json(body) = body?;
    let snap = state.policy.current();
    if body.ttl_s == 0 || body.ttl_s > MAX_TTL_S {
        return Err(ApiError::bad_request(
            "invalid_ttl",
            format!("`ttl_s` must be 1 to {MAX_TTL_S} seconds (30 days)"),
        ));
    }
    let reason = checked_reason(body.reason)?;
    if !matches!(body.principal.kind.as_str(), "Agent" | "Role") {
        return Err(ApiError::Grant(GrantError::BadEntity {
            field: "principal",
            message: "a grant is for an `Agent` or a `Role` (all its members)".to_owned(),
        }));
    }
    if body.resource.kind != "Tool" {
        return Err(ApiError::Grant(GrantError::BadEntity {
            field: "resource",
            message: "a grant is for a `Tool`".to_owned(),
        }));
    }
    if !snap.tools.contains_key(&body.resource.id) {
        return Err(ApiError::Grant(GrantError::BadEntity {
            field: "resource",
            message: format!(
                "no tool named `{}` is registered (GET /v1/tools)",
                body.resource
                    .id
                    .chars()
                    .filter(|c| !c.is_control())
                    .take(64)
                    .collect::<String>()
            ),
        }));
    }
    let grantee = body.principal.uid("principal").map_err(ApiError::Grant)?;
    if body.principal.kind == "Role" && snap.entities.get(&grantee).is_none() {
        return Err(ApiError::Grant(GrantError::BadEntity {
            field: "principal",
            message: format!("there is no role `{}` in entities.json", body.principal.id),
        }));
    }
    let ttl_s = i64::try_from(body.ttl_s).unwrap_or(i64::MAX);
    let ask = GrantAsk {
        tool: &body.resource.id,
        template: &body.template,
        grantee: &grantee,
        ttl_s,
        revoke: false,
    };
    let now = now_ms();
    let grant = Grant {
        id: format!("grant-{}", uuid::Uuid::now_v7()),
        template: body.template.clone(),
        principal: body.principal.clone(),
        resource: body.resource.clone(),
        granted_by: who.uid.to_string(),
        reason,
        created_ms: now,
        expires_ms: now.saturating_add(body.ttl_s.saturating_mul(1000)),
    };
    let policies = match authz::may_grant(&snap, &who, ask) {
        Ok(policies) => policies,
        Err(advice) => {
            let e = entry(
                &who,
                &snap.revision,
                "grant_refused",
                vec![advice.code.to_owned()],
                describe(&grant),
            );
            state.audit.record(e).await.map_err(not_recorded)?;
            return Err(ApiError::Refused(advice));
        }
    };
    // The snapshot is let go before the grant relinks the live set: the swap waits for
    // requests still holding the old one.
    let revision = snap.revision.clone();
    drop(snap);
    let e = entry(&who, &revision, "granted", policies, describe(&grant));
    state.audit.record(e).await.map_err(not_recorded)?;
    match grants.create(grant.clone()).await {
        Ok(grant) => {
            tracing::info!(grant = grant.id, by = %who.uid, "grant created");
            let listed = grants
                .list()
                .await
                .into_iter()
                .find(|l| l.grant.id == grant.id)
                .unwrap_or(Listed {
                    grant,
                    active: false,
                    problem: None,
                });
            Ok((StatusCode::CREATED, Json(listed)))
        }
        Err(err) => {
            let e = entry(
                &who,
                &revision,
                "grant_failed",
                Vec::new(),
                format!("{} not created: {err}", grant.id),
            );
            state.audit.record(e).await.map_err(not_recorded)?;
            Err(ApiError::Grant(err))
        }
    }
}

/// `GET /v1/grants`: the grants alive (humans only).
pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    human(&state, &headers, "only humans see grants")?;
    let grants = service(&state)?;
    Ok(Json(json!({ "grants": grants.list().await })))
}

/// `POST /v1/grants/{id}/revoke`.
pub async fn revoke(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<Json<RevokeBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let who = human(&state, &headers, "only humans revoke grants")?;
    let grants = service(&state)?;
    // An empty body is a revocation without a reason.
    let reason = match body {
        Ok(Json(b)) => checked_reason(b.reason)?,
        Err(JsonRejection::MissingJsonContentType(_)) => None,
        Err(e) => return Err(e.into()),
    };
    let grant = grants.get(&id).await.ok_or_else(|| {
        ApiError::Grant(GrantError::NotFound(
            id.chars().filter(|c| !c.is_control()).take(64).collect(),
        ))
    })?;
    let snap = state.policy.current();
    let grantee = grant.principal.uid("principal").map_err(ApiError::Grant)?;
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
    let policies = match authz::may_grant(&snap, &who, ask) {
        Ok(p) => p,
        Err(advice) => {
            let e = entry(
                &who,
                &snap.revision,
                "revoke_refused",
                vec![advice.code.to_owned()],
                detail,
            );
            state.audit.record(e).await.map_err(not_recorded)?;
            return Err(ApiError::Refused(advice));
        }
    };
    let revision = snap.revision.clone();
    drop(snap);
    let e = entry(&who, &revision, "revoked", policies, detail);
    state.audit.record(e).await.map_err(not_recorded)?;
    let gone = grants.revoke(&id).await.map_err(ApiError::Grant)?;
    tracing::info!(grant = gone.id, by = %who.uid, "grant revoked");
    Ok(Json(json!({ "revoked": gone.id, "grant": gone })))
}

/// Ends the grants expired now: unlinks them, records each, then removes them from the store
/// (the expiry timer of `serve`).
pub async fn expire_grants(state: &AppState) {
    let Some(grants) = &state.grants else {
        return;
    };
    let now = now_ms();
    let gone = grants.expire_due(now).await;
    forget_ended(state, grants, &gone, now).await;
}

/// Records each of `ended` as expired, then removes them from the store. A grant whose record
/// failed stays stored, so the next start records it again.
pub async fn forget_ended(state: &AppState, grants: &Grants, ended: &[Grant], now: u64) {
    if ended.is_empty() {
        return;
    }
    let revision = state.policy.current().revision.clone();
    let mut recorded = Vec::with_capacity(ended.len());
    for g in ended {
        match state
            .audit
            .record(grant_expired_entry(g, now, &revision))
            .await
        {
            Ok(()) => {
                tracing::info!(grant = g.id, "grant expired");
                recorded.push(g.clone());
            }
            Err(e) => {
                tracing::error!(grant = g.id, error = %e, "grant expiry not recorded; it stays stored (and unlinked)")
            }
        }
    }
    if let Err(e) = grants.forget(&recorded).await {
        tracing::error!(error = %e, "expired grants not removed from the store; they are removed at the next start");
    }
}

/// The audit record of `g` expiring at `now`.
pub fn grant_expired_entry(g: &Grant, now: u64, revision: &str) -> Entry {
    Entry {
        kind: EntryKind::Admin,
        id: uuid::Uuid::now_v7().to_string(),
        at_ms: now,
        principal: Some(g.granted_by.clone()),
        stage: Some("grant".to_owned()),
        decision: "expired".to_owned(),
        reasons: vec!["grant_expired".to_owned()],
        policy_revision: Some(revision.to_owned()),
        detail: Some(describe(g)),
        ..Entry::default()
    }
}

/// Runs forever: expires each grant at its expiry (woken early when grants change).
pub async fn expiry_timer(state: AppState) {
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
