//! `POST /v1/gates/{gate}`: screens content (a string or any JSON) with one gate's rules and
//! answers `{decision, content, violations}`. Any authenticated principal may call it. A gate
//! that finds something writes an audit record (the kinds found, never the content) before it
//! answers; the stream gate is not served yet.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

use super::handlers::authenticate;
use super::{ApiError, AppState};
use crate::audit::{Entry, EntryKind, now_ms};
use crate::redact::{Action, Gate, Screened};

/// The request body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateBody {
    /// What to screen: a string, or JSON whose strings are screened and whose sensitive keys'
    /// values are masked.
    content: Value,
}

/// `POST /v1/gates/{gate}`.
pub async fn screen(
    State(state): State<AppState>,
    Path(gate): Path<String>,
    headers: HeaderMap,
    body: Result<Json<GateBody>, JsonRejection>,
) -> Result<Json<Screened>, ApiError> {
    let who = authenticate(&state, &headers)?;
    let gate = match Gate::parse(&gate) {
        Some(g) if g != Gate::Stream => g,
        _ => return Err(ApiError::UnknownGate),
    };
    let Json(body) = body?;
    // Fail closed: without detectors nothing is screened, so nothing passes.
    let Some(gates) = state.gates.clone() else {
        return Err(ApiError::StoreUnavailable);
    };
    // A large body takes milliseconds to scan: off the async workers that answer /authorize.
    let screened = tokio::task::spawn_blocking(move || gates.screen(gate, &body.content))
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "gate scan failed; refusing to answer");
            ApiError::StoreUnavailable
        })?;
    state
        .metrics
        .gate(gate.as_str(), screened.decision.as_str());
    if screened.decision != Action::Allow {
        let mut kinds: Vec<String> = screened
            .violations
            .iter()
            .map(|v| format!("{}:{}", v.action.as_str(), v.kind))
            .collect();
        kinds.sort();
        kinds.dedup();
        let entry = Entry {
            kind: EntryKind::Gate,
            id: uuid::Uuid::now_v7().to_string(),
            at_ms: now_ms(),
            principal: Some(who.uid.to_string()),
            decision: screened.decision.as_str().to_owned(),
            stage: Some(gate.as_str().to_owned()),
            reasons: kinds,
            detail: Some(format!("{} violations", screened.found)),
            ..Entry::default()
        };
        state.audit.record(entry).await.map_err(|e| {
            tracing::error!(error = %e, "gate verdict not recorded; refusing to answer");
            ApiError::StoreUnavailable
        })?;
    }
    Ok(Json(screened))
}
