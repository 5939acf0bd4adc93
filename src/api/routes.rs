//! Short route functions over the pipeline: each extracts the caller (any principal, or a
//! human), reads a typed body or query, calls one [`crate::gateway`] function and shapes its
//! answer. Bodies are read after the caller is known, as they always were.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;

use super::handlers::credential;
use crate::authz::Explanation;
use crate::gateway::{
    self, DecideBody, Error, ExecAnswer, GateBody, Gateway, GrantBody, KillSwitchBody, ListQuery,
    Progress, QuarantineBody, RawCall, ResultAnswer, ResultBody, RevokeBody, ShowQuery,
};
use crate::gateway::{ApproveBody, RawExplain};
use crate::grants::Listed;
use crate::telemetry::{Parent, spans, within};

/// A JSON body, or the error its rejection maps to.
fn read<T>(body: Result<Json<T>, JsonRejection>) -> Result<T, Error> {
    body.map(|Json(b)| b).map_err(Error::from)
}

/// `GET /v1/approvals?status=pending`.
pub async fn list_approvals(
    State(state): State<Gateway>,
    headers: HeaderMap,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, Error> {
    let who = gateway::authenticate(&state, credential(&headers))?;
    let Query(q) = query?;
    Ok(Json(gateway::list_approvals(&state, &who, q)?))
}

/// `GET /v1/approvals/{id}` (`?wait=30s` waits until it is no longer pending).
pub async fn show_approval(
    State(state): State<Gateway>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<ShowQuery>, QueryRejection>,
) -> Result<Json<Value>, Error> {
    let who = gateway::authenticate(&state, credential(&headers))?;
    let Query(q) = query?;
    Ok(Json(gateway::show_approval(&state, &who, &id, q).await?))
}

/// `POST /v1/approvals/{id}/approve`.
pub async fn approve(
    state: State<Gateway>,
    headers: HeaderMap,
    id: Path<String>,
    body: Result<Json<DecideBody>, JsonRejection>,
) -> Result<Json<Value>, Error> {
    settle(state, headers, id, body, true).await
}

/// `POST /v1/approvals/{id}/deny`.
pub async fn deny(
    state: State<Gateway>,
    headers: HeaderMap,
    id: Path<String>,
    body: Result<Json<DecideBody>, JsonRejection>,
) -> Result<Json<Value>, Error> {
    settle(state, headers, id, body, false).await
}

async fn settle(
    State(state): State<Gateway>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<Json<DecideBody>, JsonRejection>,
    approve: bool,
) -> Result<Json<Value>, Error> {
    let who = gateway::human(
        &state,
        credential(&headers),
        "only humans approve or deny; agents cannot decide approvals",
    )?;
    let body = read(body)?;
    Ok(Json(
        gateway::settle_approval(&state, who, &id, body, approve).await?,
    ))
}

/// `POST /v1/grants`.
pub async fn create_grant(
    State(state): State<Gateway>,
    headers: HeaderMap,
    body: Result<Json<GrantBody>, JsonRejection>,
) -> Result<(StatusCode, Json<Listed>), Error> {
    let who = gateway::human(&state, credential(&headers), "only humans grant access")?;
    let listed = gateway::create_grant(&state, who, read(body)).await?;
    Ok((StatusCode::CREATED, Json(listed)))
}

/// `GET /v1/grants`: the grants alive (humans only).
pub async fn list_grants(
    State(state): State<Gateway>,
    headers: HeaderMap,
) -> Result<Json<Value>, Error> {
    gateway::human(&state, credential(&headers), "only humans see grants")?;
    Ok(Json(gateway::list_grants(&state).await?))
}

/// `POST /v1/grants/{id}/revoke` (an empty body is a revocation without a reason).
pub async fn revoke_grant(
    State(state): State<Gateway>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<Json<RevokeBody>, JsonRejection>,
) -> Result<Json<Value>, Error> {
    let who = gateway::human(&state, credential(&headers), "only humans revoke grants")?;
    let body = match body {
        Ok(Json(b)) => Ok(Some(b)),
        Err(JsonRejection::MissingJsonContentType(_)) => Ok(None),
        Err(e) => Err(Error::from(e)),
    };
    Ok(Json(gateway::revoke_grant(&state, who, id, body).await?))
}

/// `GET /v1/admin/kill-switch`: any authenticated caller may see whether calls are stopped.
pub async fn show_kill_switch(
    State(state): State<Gateway>,
    headers: HeaderMap,
) -> Result<Json<Value>, Error> {
    gateway::authenticate(&state, credential(&headers))?;
    Ok(Json(gateway::kill_switch_view(&state)))
}

/// `POST /v1/admin/kill-switch`.
pub async fn set_kill_switch(
    State(state): State<Gateway>,
    headers: HeaderMap,
    body: Result<Json<KillSwitchBody>, JsonRejection>,
) -> Result<Json<Value>, Error> {
    let who = gateway::human(
        &state,
        credential(&headers),
        "only humans flip the kill switch",
    )?;
    let body = read(body)?;
    Ok(Json(gateway::set_kill_switch(&state, who, body).await?))
}

/// `GET /v1/admin/quarantine`: the quarantined agents (humans only).
pub async fn show_quarantine(
    State(state): State<Gateway>,
    headers: HeaderMap,
) -> Result<Json<Value>, Error> {
    gateway::human(
        &state,
        credential(&headers),
        "only humans see the quarantine list",
    )?;
    Ok(Json(gateway::quarantine_view(&state)))
}

/// `POST /v1/admin/quarantine`: quarantine an agent by hand or release it.
pub async fn set_quarantine(
    State(state): State<Gateway>,
    headers: HeaderMap,
    body: Result<Json<QuarantineBody>, JsonRejection>,
) -> Result<Json<Value>, Error> {
    let who = gateway::human(
        &state,
        credential(&headers),
        "only humans quarantine or release agents",
    )?;
    let body = read(body)?;
    Ok(Json(gateway::set_quarantine(&state, who, body).await?))
}

/// `POST /v1/gates/{gate}`.
pub async fn screen(
    State(state): State<Gateway>,
    Path(gate): Path<String>,
    headers: HeaderMap,
    body: Result<Json<GateBody>, JsonRejection>,
) -> Result<Json<Value>, Error> {
    let screened = within(
        spans::request("toolgate.gate"),
        Parent::from_headers(&headers),
        async {
            let who = gateway::authenticate(&state, credential(&headers))?;
            gateway::screen_content(&state, who, &gate, read(body)).await
        },
    )
    .await?;
    Ok(Json(screened))
}

/// `POST /v1/results`.
pub async fn report(
    State(state): State<Gateway>,
    headers: HeaderMap,
    body: Result<Json<ResultBody>, JsonRejection>,
) -> Result<Json<ResultAnswer>, Error> {
    let answer = within(
        spans::request("toolgate.results"),
        Parent::from_headers(&headers),
        async {
            let who = gateway::authenticate(&state, credential(&headers))?;
            gateway::report_result(&state, who, read(body)).await
        },
    )
    .await?;
    Ok(Json(answer))
}

/// `POST /v1/execute`: 200 with the run's result, 202 while the call waits for an approval.
pub async fn execute(
    State(state): State<Gateway>,
    headers: HeaderMap,
    body: Result<Json<RawCall>, JsonRejection>,
) -> Result<(StatusCode, Json<ExecAnswer>), Error> {
    let (progress, answer) = within(
        spans::request("toolgate.execute"),
        Parent::from_headers(&headers),
        gateway::execute(&state, credential(&headers), read(body)),
    )
    .await?;
    let status = match progress {
        Progress::Done => StatusCode::OK,
        Progress::Pending => StatusCode::ACCEPTED,
    };
    Ok((status, Json(answer)))
}

/// `POST /v1/policies/held/approve` (`{"revision": "sha256:…"}`): activates a policy change
/// held by `reload.widening = "hold"`.
pub async fn approve_held(
    State(state): State<Gateway>,
    headers: HeaderMap,
    body: Result<Json<ApproveBody>, JsonRejection>,
) -> Result<Json<Value>, Error> {
    let who = gateway::human(
        &state,
        credential(&headers),
        "only humans approve policy changes",
    )?;
    let body = read(body)?;
    Ok(Json(gateway::approve_held(&state, who, body).await?))
}

/// `POST /v1/explain`: how the live policy set decides one call, policy by policy.
pub async fn explain(
    State(state): State<Gateway>,
    headers: HeaderMap,
    body: Result<Json<RawExplain>, JsonRejection>,
) -> Result<Json<Explanation>, Error> {
    let who = gateway::human(
        &state,
        credential(&headers),
        "explanations are for humans (auditors), not agents",
    )?;
    Ok(Json(gateway::explain(&state, who, read(body)).await?))
}

/// `GET /v1/mcp/descriptors`: the MCP upstreams, changed descriptors and approvals (humans).
pub async fn show_descriptors(
    State(state): State<Gateway>,
    headers: HeaderMap,
) -> Result<Json<Value>, Error> {
    Ok(Json(gateway::descriptors_view(
        &state,
        credential(&headers),
    )?))
}

/// `POST /v1/mcp/descriptors/approve`: a human approves a changed descriptor.
pub async fn approve_descriptor(
    State(state): State<Gateway>,
    headers: HeaderMap,
    body: Result<Json<gateway::ApproveDescriptorBody>, JsonRejection>,
) -> Result<Json<Value>, Error> {
    let body = body.map(|Json(b)| b).map_err(Error::from);
    Ok(Json(
        gateway::approve_descriptor(&state, credential(&headers), body).await?,
    ))
}
