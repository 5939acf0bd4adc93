//! Audit routes for humans: `GET /v1/audit` (filtered, newest first, with a cursor) and
//! `GET /v1/audit/head` (the chain head, for anchoring outside the sidecar).

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Value, json};

use super::handlers::credential;
use crate::audit::Query as AuditQuery;
use crate::gateway::{Error, Gateway, human};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuditQuery {
    principal: Option<String>,
    tool: Option<String>,
    decision: Option<String>,
    stage: Option<String>,
    conv_id: Option<String>,
    trace_id: Option<String>,
    /// Unix milliseconds.
    since: Option<u64>,
    /// Unix milliseconds.
    until: Option<u64>,
    limit: Option<usize>,
    /// The `next_cursor` of the previous page.
    cursor: Option<u64>,
}

const HUMANS_ONLY: &str = "the audit log is for humans; agents cannot read it";

/// `GET /v1/audit`.
pub async fn query(
    State(state): State<Gateway>,
    headers: HeaderMap,
    query: Result<Query<RawAuditQuery>, QueryRejection>,
) -> Result<Json<Value>, Error> {
    human(&state, credential(&headers), HUMANS_ONLY)?;
    let Query(q) = query?;
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let query = AuditQuery {
        principal: q.principal,
        tool: q.tool,
        decision: q.decision,
        stage: q.stage,
        conv_id: q.conv_id,
        trace_id: q.trace_id,
        since_ms: q.since,
        until_ms: q.until,
        before_seq: q.cursor,
        limit,
    };
    let audit = state.audit.clone();
    let records = tokio::task::spawn_blocking(move || audit.store().query(&query))
        .await
        .map_err(|_| Error::StoreUnavailable)?
        .map_err(|e| {
            tracing::error!(error = %e, "audit query failed");
            Error::StoreUnavailable
        })?;
    let next = (records.len() == limit)
        .then(|| records.last().map(|r| r.seq))
        .flatten();
    Ok(Json(json!({ "records": records, "next_cursor": next })))
}

/// `GET /v1/audit/head`.
pub async fn head(State(state): State<Gateway>, headers: HeaderMap) -> Result<Json<Value>, Error> {
    human(&state, credential(&headers), HUMANS_ONLY)?;
    Ok(Json(json!(state.audit.head())))
}
