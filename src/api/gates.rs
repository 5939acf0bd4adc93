//! `POST /v1/gates/{gate}`: screens content (a string or any JSON) with one gate's rules and
//! answers `{decision, content, violations}`. The stream gate takes a stream's chunks in order
//! (`{stream_id, content, final}`) and answers with the text that is safe to pass on now. Any
//! authenticated principal may call them. A gate that finds something writes an audit record
//! (the kinds found, never the content) before it answers.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::handlers::authenticate;
use super::{ApiError, AppState};
use crate::audit::{Entry, EntryKind};
use crate::authz::Principal;
use crate::clock::now_ms;
use crate::redact::{Action, ChunkScreened, Gate, MAX_CHUNK, Violation, labels};

/// The request body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateBody {
    /// What to screen: a string, or JSON whose strings are screened and whose sensitive keys'
    /// values are masked. For the stream gate: the next chunk (a string).
    content: Value,
    /// The stream gate only: which stream the chunk belongs to (per principal).
    #[serde(default)]
    stream_id: Option<String>,
    /// The stream gate only: this is the stream's last chunk; everything held is flushed.
    #[serde(default, rename = "final")]
    last: bool,
}

/// The stream gate's answer: the chunk verdict and the stream it belongs to.
#[derive(Debug, Serialize)]
pub struct StreamAnswer {
    stream_id: String,
    #[serde(flatten)]
    screened: ChunkScreened,
}

/// `POST /v1/gates/{gate}`.
pub async fn screen(
    State(state): State<AppState>,
    Path(gate): Path<String>,
    headers: HeaderMap,
    body: Result<Json<GateBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let who = authenticate(&state, &headers)?;
    let gate = Gate::parse(&gate).ok_or(ApiError::UnknownGate)?;
    let Json(body) = body?;
    // Fail closed: without detectors nothing is screened, so nothing passes.
    let Some(gates) = state.gates.clone() else {
        return Err(ApiError::GatesUnavailable);
    };
    if gate == Gate::Stream {
        let answer = stream(&state, &who, gates, body).await?;
        return Ok(Json(serde_json::to_value(answer).unwrap_or(Value::Null)));
    }
    if body.stream_id.is_some() || body.last {
        return Err(ApiError::bad_request(
            "invalid_body",
            "`stream_id` and `final` belong to the stream gate only",
        ));
    }
    let screened = off_workers(move || gates.screen(gate, &body.content)).await?;
    record(
        &state,
        &who,
        gate,
        (
            screened.decision,
            screened.violations.as_slice(),
            screened.found,
        ),
        None,
    )
    .await?;
    Ok(Json(serde_json::to_value(screened).unwrap_or(Value::Null)))
}

/// One chunk through the stream gate.
async fn stream(
    state: &AppState,
    who: &Principal,
    gates: std::sync::Arc<crate::redact::Gates>,
    body: GateBody,
) -> Result<StreamAnswer, ApiError> {
    let Some(id) = body
        .stream_id
        .filter(|id| (1..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic()))
    else {
        return Err(ApiError::bad_request(
            "invalid_stream_id",
            "the stream gate needs `stream_id`: 1 to 128 printable ASCII characters, the same for every chunk of one stream",
        ));
    };
    let Value::String(chunk) = body.content else {
        return Err(ApiError::bad_request(
            "invalid_chunk",
            "a stream chunk's `content` must be a string",
        ));
    };
    if chunk.len() > MAX_CHUNK {
        return Err(ApiError::PayloadTooLarge);
    }
    let principal = who.uid.to_string();
    let now = now_ms();
    let slot = state
        .streams
        .get(&principal, &id, now)
        .map_err(ApiError::Stream)?;
    let last = body.last;
    let screened = off_workers(move || {
        let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
        s.touch(now);
        gates.screen_chunk(&mut s, &chunk, last)
    })
    .await?
    .map_err(ApiError::Stream)?;
    // A blocked stream stays in the table (later chunks are refused) until it expires.
    if last && screened.decision != Action::Block {
        state.streams.finish(&principal, &id);
    }
    let verdict = (
        screened.decision,
        screened.violations.as_slice(),
        screened.found,
    );
    record(state, who, Gate::Stream, verdict, Some(&id)).await?;
    Ok(StreamAnswer {
        stream_id: id,
        screened,
    })
}

/// Runs a scan on the blocking pool: a large body takes milliseconds, which must not hold up
/// the async workers that answer `/v1/authorize`. A scan that panics is refused (fail closed).
pub(super) async fn off_workers<T: Send + 'static>(
    scan: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(scan).await.map_err(|e| {
        tracing::error!(error = %e, "content scan failed; refusing to answer");
        ApiError::GatesUnavailable
    })
}

/// Counts the verdict, and records it in the audit log unless it is an allow.
async fn record(
    state: &AppState,
    who: &Principal,
    gate: Gate,
    (decision, violations, found): (Action, &[Violation], usize),
    stream_id: Option<&str>,
) -> Result<(), ApiError> {
    state.metrics.gate(gate.as_str(), decision.as_str());
    if decision == Action::Allow {
        return Ok(());
    }
    let detail = match stream_id {
        Some(id) => format!("{found} violations in stream {id}"),
        None => format!("{found} violations"),
    };
    let entry = Entry {
        kind: EntryKind::Gate,
        id: uuid::Uuid::now_v7().to_string(),
        at_ms: now_ms(),
        principal: Some(who.uid.to_string()),
        decision: decision.as_str().to_owned(),
        stage: Some(gate.as_str().to_owned()),
        reasons: labels(violations),
        detail: Some(detail),
        ..Entry::default()
    };
    super::handlers::record_or_refuse(state, entry, "gate verdict").await
}
