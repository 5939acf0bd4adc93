//! Route functions: each extracts the caller and a typed body, calls the pipeline
//! ([`crate::gateway`]) and shapes its answer. Views (`/v1/tools`, `/v1/policies`, `/readyz`)
//! load the policy snapshot once and use it to the end.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::error::quota_headers;
use crate::authz;
use crate::clock::unix_ms;
use crate::gateway::{self, Credential, DecisionBody, Error, Gateway, RawCall};
use crate::policy::Problem;
use crate::telemetry::{Parent, spans, within};
use crate::tools::Risk;

/// The credential a request carries (its `Authorization` header), unchecked.
pub(super) fn credential(headers: &HeaderMap) -> Credential<'_> {
    Credential(headers.get(header::AUTHORIZATION).map(|h| h.as_bytes()))
}

/// `POST /v1/authorize`: decide, settle any approval, record, answer. Nothing is answered
/// without its audit record (a failed write turns the answer into a 503 deny).
pub async fn authorize(
    State(state): State<Gateway>,
    headers: HeaderMap,
    body: Result<Json<RawCall>, JsonRejection>,
) -> Result<(HeaderMap, Json<DecisionBody>), Error> {
    let body = body.map(|Json(b)| b).map_err(Error::from);
    let d = within(
        spans::request("toolgate.authorize"),
        Parent::from_headers(&headers),
        gateway::decide(&state, credential(&headers), body),
    )
    .await?;
    let headers = d.quota.as_ref().map(quota_headers).unwrap_or_default();
    Ok((headers, Json(d.body)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsQuery {
    #[serde(default)]
    summary: bool,
}

/// `GET /v1/tools`: the caller's tools as OpenAI function definitions.
pub async fn tools(
    State(state): State<Gateway>,
    headers: HeaderMap,
    query: Result<Query<ToolsQuery>, QueryRejection>,
) -> Result<Json<Value>, Error> {
    let snap = state.policy.current();
    let who = gateway::authenticate(&state, credential(&headers))?;
    let Query(query) = query?;
    // A tool whose MCP upstream changed its descriptor since review is not offered.
    let visible: Vec<_> = authz::visible_tools(&snap, &who)
        .into_iter()
        .filter(|t| {
            t.mcp.as_ref().is_none_or(|b| {
                !matches!(
                    gateway::exposure(&state, t, b),
                    gateway::Exposure::Changed { .. }
                )
            })
        })
        .collect();
    let functions: Vec<Value> = visible
        .iter()
        .map(|t| {
            json!({"type": "function", "function": {
            "name": t.name, "description": t.description, "parameters": t.input_schema}})
        })
        .collect();
    let governance: serde_json::Map<String, Value> = visible
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                json!({"risk": t.risk, "classification": t.classification, "limits": t.limits,
                       // Programs get a network namespace of their own unless they declare it.
                       "network": t.executor.as_ref().is_some_and(|e| e.access.network),
                       "writes": t.executor.as_ref().map(|e| &e.access.writes)}),
            )
        })
        .collect();
    let mut out =
        json!({"policy_revision": snap.revision, "tools": functions, "governance": governance});
    if let (true, Some(obj)) = (query.summary, out.as_object_mut()) {
        obj.insert(
            "guardrail_summary".to_owned(),
            Value::String(summary(&visible)),
        );
    }
    Ok(Json(out))
}

fn summary(tools: &[&crate::tools::Tool]) -> String {
    let names = |pred: &dyn Fn(Risk) -> bool| {
        tools
            .iter()
            .filter(|t| pred(t.risk))
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut s = String::from("Every tool call is checked by toolgate before it runs. ");
    let unattended = names(&|r| matches!(r, Risk::Low | Risk::Medium));
    let approval = names(&|r| matches!(r, Risk::High | Risk::Critical));
    if !unattended.is_empty() {
        s.push_str(&format!(
            "These run without approval when their arguments are within policy: {unattended}. "
        ));
    }
    if !approval.is_empty() {
        s.push_str(&format!("These need a human approval first: {approval}. "));
    }
    s.push_str(
        "A denied call comes back with a reason and a suggestion; do not retry it unchanged.",
    );
    s
}

#[derive(Serialize)]
struct PoliciesBody {
    revision: String,
    loaded_at_unix_ms: u64,
    policies: usize,
    tools: usize,
    policy_ids: Vec<String>,
    last_reload_error: Option<ReloadError>,
    /// Where the live set came from: files, remembered (the files do not load) or nothing.
    origin: crate::reload::Origin,
    /// The live set is not what the files say (remembered, nothing, or a change held).
    stale: bool,
    held: Option<HeldBody>,
    /// Whether reloads can be proved (cvc5), and what that means under `reload.widening`.
    solver: SolverBody,
}

/// The solver behind the reload review, and what its absence means.
#[derive(Serialize)]
struct SolverBody {
    /// cvc5 found (`CVC5`, else `PATH`).
    present: bool,
    /// Where (operators' route only: `/readyz` needs no credential).
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    /// `reload.widening`.
    widening: crate::reload::Widening,
    /// What happens to a policy change, in words.
    effect: &'static str,
}

impl SolverBody {
    /// Looked up on every call (a few `stat`s), so installing cvc5 shows without a restart.
    fn now(state: &Gateway, with_path: bool) -> Self {
        use crate::reload::Widening;
        let found = crate::review::diff::find_solver().ok();
        let widening = state.policy.widening();
        let effect = match (found.is_some(), widening) {
            (true, Widening::Hold) => {
                "changes are proved: narrowing ones apply, widening ones wait for approval"
            }
            (true, Widening::Apply) => {
                "changes are proved and all apply, widening ones too (widening = \"apply\")"
            }
            (false, Widening::Hold) => {
                "no solver: no change can be proved narrowing, so every policy change waits for approval"
            }
            (false, Widening::Apply) => {
                "no solver: every policy change applies unproved (widening = \"apply\")"
            }
        };
        SolverBody {
            present: found.is_some(),
            path: found.filter(|_| with_path).map(|p| p.display().to_string()),
            widening,
            effect,
        }
    }
}

#[derive(Serialize)]
struct HeldBody {
    revision: String,
    from: String,
    held_at_unix_ms: u64,
    review: crate::reload::Review,
}

#[derive(Serialize)]
struct ReloadError {
    message: String,
    problems: Vec<Problem>,
}

/// `GET /v1/policies`.
pub async fn policies(
    State(state): State<Gateway>,
    headers: HeaderMap,
) -> Result<Json<Value>, Error> {
    gateway::human(
        &state,
        credential(&headers),
        "policy status is for operators, not agents",
    )?;
    let snap = state.policy.current();
    let last_reload_error = state.policy.last_error().map(|e| ReloadError {
        message: e.to_string(),
        problems: e.problems.clone(),
    });
    let body = PoliciesBody {
        revision: snap.revision.clone(),
        loaded_at_unix_ms: unix_ms(snap.loaded_at),
        policies: snap.policy_count(),
        tools: snap.tools.len(),
        policy_ids: snap.policy_files.keys().cloned().collect(),
        last_reload_error,
        origin: state.policy.origin(),
        stale: state.policy.stale(),
        held: state.policy.held().map(|h| HeldBody {
            revision: h.revision,
            from: h.from,
            held_at_unix_ms: h.at_ms,
            review: h.review,
        }),
        solver: SolverBody::now(&state, true),
    };
    Ok(Json(serde_json::to_value(body).unwrap_or(Value::Null)))
}

/// `GET /.well-known/oauth-protected-resource[/<resource path>]`: the OAuth protected
/// resource metadata (RFC 9728), when `auth.jwt.audience` is a URL; otherwise, and at any
/// other path below it, 404. No credential: a client reads it to find where to sign in.
pub async fn protected_resource(
    State(state): State<Gateway>,
    uri: axum::http::Uri,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let found = state.auth.protected_resource().filter(|r| {
        let path = uri.path().trim_end_matches('/');
        path == r.path || path == "/.well-known/oauth-protected-resource"
    });
    match found {
        Some(r) => (
            [
                (axum::http::header::CACHE_CONTROL, "max-age=300"),
                (axum::http::header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
            ],
            Json(r.metadata.clone()),
        )
            .into_response(),
        None => Error::Coded {
            code: crate::codes::Code::NotAProtectedResource,
            message: match state.auth.protected_resource() {
                Some(r) => format!(
                    "no such protected resource here; this sidecar's metadata is at {}",
                    r.path
                ),
                None => "this sidecar is not an OAuth protected resource: `auth.jwt.audience` is not an http(s) URL".to_owned(),
            },
        }
        .into_response(),
    }
}

/// `GET /healthz`: the process is up.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: a valid policy set is in force. A refused reload leaves the last good set
/// serving, so the sidecar stays ready and says it is `degraded`, with the failing file and
/// line (no policy text: this route needs no credential).
pub async fn readyz(State(state): State<Gateway>) -> (StatusCode, Json<Value>) {
    let snap = state.policy.current();
    let failing = state
        .policy
        .last_error()
        .and_then(|e| e.first().map(Problem::location));
    // Decisions cannot be recorded, so every one would be denied: not ready.
    let audit_failure = state.audit.failure();
    // No policy set ever loaded: every call is denied.
    let origin = state.policy.origin();
    // The fleet's state unread for too long: every call is denied.
    let fleet = state.fleet.as_ref().map(|f| f.status());
    // MCP upstreams that are down: their tools answer unavailable, everything else serves.
    let down: Vec<Value> = state
        .upstreams
        .as_ref()
        .map(|h| {
            h.status()
                .into_iter()
                .filter(|u| u.state == "down")
                .map(|u| json!({"name": u.name, "error": u.error}))
                .collect()
        })
        .unwrap_or_default();
    let ready = audit_failure.is_none()
        && origin != crate::reload::Origin::Nothing
        && fleet.is_none_or(|f| f.fresh);
    (
        if ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        Json(json!({
            "ready": ready,
            "revision": snap.revision,
            "policy_origin": origin,
            "stale": state.policy.stale(),
            "held_revision": state.policy.held().map(|h| h.revision),
            "degraded": failing.is_some() || !down.is_empty(),
            "upstreams_down": down,
            "last_reload_error_at": failing,
            "audit_error": audit_failure,
            "audit_mode": state.audit.mode(),
            "kill_switch": state.admin.kill_switch_on(),
            "quarantined": state.admin.quarantine().len(),
            "execution": state.exec.as_ref().map(|r| r.protections()),
            "solver": SolverBody::now(&state, false),
            "shared_state": fleet,
        })),
    )
}

/// Unknown route.
pub async fn not_found() -> Error {
    Error::NotFound
}

/// Known route, wrong method.
pub async fn method_not_allowed() -> Error {
    Error::MethodNotAllowed
}
