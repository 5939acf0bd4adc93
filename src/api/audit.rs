//! Audit routes for humans: `GET /v1/audit` (filtered, newest first, with a cursor),
//! `GET /v1/audit/head` (the chain head, for anchoring outside the sidecar),
//! `GET /v1/audit/verify` (the whole chain walked, online) and `GET /v1/audit/export` (the
//! records a filter selects, oldest first, as JSON Lines).

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::handlers::credential;
use crate::audit::{Audit, Query as AuditQuery};
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
    let query = to_query(q, limit);
    let records = run(&state, move |audit| audit.store().query(&query)).await?;
    let next = (records.len() == limit)
        .then(|| records.last().map(|r| r.seq))
        .flatten();
    Ok(Json(json!({ "records": records, "next_cursor": next })))
}

fn to_query(q: RawAuditQuery, limit: usize) -> AuditQuery {
    AuditQuery {
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
    }
}

/// Runs `f` on the audit log on a blocking thread; a failure is a 503 (logged).
async fn run<T: Send + 'static>(
    state: &Gateway,
    f: impl FnOnce(&Audit) -> Result<T, crate::audit::StoreError> + Send + 'static,
) -> Result<T, Error> {
    let audit = state.audit.clone();
    tokio::task::spawn_blocking(move || f(&audit))
        .await
        .map_err(|_| Error::StoreUnavailable)?
        .map_err(|e| {
            tracing::error!(error = %e, "audit read failed");
            Error::StoreUnavailable
        })
}

/// Most records one export answers with (narrow the filter, or page `/v1/audit`, for more).
const EXPORT_MAX: usize = 100_000;

/// Whole-log walks and exports at once; more wait their turn (each holds up to a whole log
/// walk or 100,000 records).
static HEAVY: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// `GET /v1/audit/verify`: `{"result": "intact", …}` or `{"result": "broken", "seq", "why"}`.
pub async fn verify(
    State(state): State<Gateway>,
    headers: HeaderMap,
) -> Result<Json<Value>, Error> {
    human(&state, credential(&headers), HUMANS_ONLY)?;
    let _turn = HEAVY.acquire().await.map_err(|_| Error::StoreUnavailable)?;
    let verdict = run(&state, |audit| audit.verify()).await?;
    Ok(Json(json!(verdict)))
}

/// `GET /v1/audit/export`: the filter of `GET /v1/audit`, every matching record (up to
/// 100,000), oldest first, one JSON object per line.
pub async fn export(
    State(state): State<Gateway>,
    headers: HeaderMap,
    query: Result<Query<RawAuditQuery>, QueryRejection>,
) -> Result<Response, Error> {
    human(&state, credential(&headers), HUMANS_ONLY)?;
    let Query(q) = query?;
    let max = q.limit.unwrap_or(EXPORT_MAX).clamp(1, EXPORT_MAX);
    let _turn = HEAVY.acquire().await.map_err(|_| Error::StoreUnavailable)?;
    let mut query = to_query(q, 1000);
    let records = run(&state, move |audit| {
        let mut out = Vec::new();
        loop {
            query.limit = (max - out.len()).min(1000);
            let page = audit.store().query(&query)?;
            let done = page.len() < query.limit;
            query.before_seq = page.last().map(|r| r.seq);
            out.extend(page);
            if done || out.len() >= max || query.before_seq.is_none() {
                return Ok(out);
            }
        }
    })
    .await?;
    let mut body = String::new();
    for r in records.iter().rev() {
        body.push_str(&serde_json::to_string(r).map_err(|_| Error::StoreUnavailable)?);
        body.push('\n');
    }
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    h.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static("attachment; filename=\"toolgate-audit.jsonl\""),
    );
    Ok(resp)
}

/// `GET /v1/audit/head`.
pub async fn head(State(state): State<Gateway>, headers: HeaderMap) -> Result<Json<Value>, Error> {
    human(&state, credential(&headers), HUMANS_ONLY)?;
    Ok(Json(json!(state.audit.head())))
}
