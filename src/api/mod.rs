//! The HTTP front end: [`router`] builds the axum router over a [`Gateway`], so tests drive
//! it without a socket. `routes` and `handlers` hold short route functions over the pipeline
//! ([`crate::gateway`]); `error` is the only place that picks status codes; `serve` owns the
//! connections (cap, timeouts, bounded shutdown).

mod audit;
mod error;
mod events;
mod handlers;
mod metrics;
mod routes;
mod serve;

pub use serve::{BodyTimedOut, RESERVED_FDS, fit_to_fd_limit, raise_fd_limit, serve};

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{any, get, post};

use crate::gateway::{Gateway, RESULTS_MAX_BODY};

/// Every route, as documented in `docs/openapi.json` (a test keeps the two in step).
pub const ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/authorize"),
    ("GET", "/v1/tools"),
    ("GET", "/v1/policies"),
    ("POST", "/v1/policies/held/approve"),
    ("POST", "/v1/explain"),
    ("GET", "/v1/grants"),
    ("POST", "/v1/grants"),
    ("POST", "/v1/grants/{id}/revoke"),
    ("GET", "/.well-known/oauth-protected-resource"),
    ("GET", "/.well-known/oauth-protected-resource/{resource}"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/v1/approvals"),
    ("GET", "/v1/approvals/events"),
    ("GET", "/v1/approvals/{id}"),
    ("POST", "/v1/approvals/{id}/approve"),
    ("POST", "/v1/approvals/{id}/deny"),
    ("GET", "/v1/audit"),
    ("GET", "/v1/audit/head"),
    ("GET", "/v1/audit/verify"),
    ("GET", "/v1/audit/export"),
    ("GET", "/v1/admin/kill-switch"),
    ("POST", "/v1/admin/kill-switch"),
    ("GET", "/v1/admin/quarantine"),
    ("POST", "/v1/admin/quarantine"),
    ("POST", "/v1/gates/{gate}"),
    ("POST", "/v1/results"),
    ("POST", "/v1/execute"),
    ("POST", "/mcp"),
    ("GET", "/mcp"),
    ("DELETE", "/mcp"),
    ("GET", "/v1/mcp/descriptors"),
    ("POST", "/v1/mcp/descriptors/approve"),
];

/// The router over `state`.
pub fn router(state: Gateway) -> Router {
    router_at(state, None)
}

/// [`router`] for a sidecar listening on `listen`: `/mcp` also accepts it as `Host`.
pub fn router_at(state: Gateway, listen: Option<std::net::SocketAddr>) -> Router {
    let limit = state.max_body_bytes;
    let dev = state.auth.dev_principal().is_some();
    let hosts = Arc::new(own_hosts(&state, listen));
    let mcp = crate::mcp::service(state.clone(), listen);
    let challenge_value = state.auth.challenge();
    let sessions = crate::console::sessions();
    Router::new()
        .route(
            "/mcp",
            any(move |req: axum::extract::Request| mcp.clone().handle(req)),
        )
        .route("/v1/mcp/descriptors", get(routes::show_descriptors))
        .route(
            "/v1/mcp/descriptors/approve",
            post(routes::approve_descriptor),
        )
        .route("/v1/authorize", post(handlers::authorize))
        .route("/v1/tools", get(handlers::tools))
        .route("/v1/policies", get(handlers::policies))
        .route("/v1/policies/held/approve", post(routes::approve_held))
        .route("/v1/explain", post(routes::explain))
        .route(
            "/v1/grants",
            get(routes::list_grants).post(routes::create_grant),
        )
        .route("/v1/grants/{id}/revoke", post(routes::revoke_grant))
        .route(
            "/.well-known/oauth-protected-resource",
            get(handlers::protected_resource),
        )
        .route(
            "/.well-known/oauth-protected-resource/{*resource}",
            get(handlers::protected_resource),
        )
        .route("/healthz", get(handlers::healthz))
        .route("/readyz", get(handlers::readyz))
        .route("/metrics", get(metrics::render))
        .route("/v1/approvals", get(routes::list_approvals))
        .route("/v1/approvals/events", get(events::approval_events))
        .route("/v1/approvals/{id}", get(routes::show_approval))
        .route("/v1/approvals/{id}/approve", post(routes::approve))
        .route("/v1/approvals/{id}/deny", post(routes::deny))
        .route("/v1/audit", get(audit::query))
        .route("/v1/audit/head", get(audit::head))
        .route("/v1/audit/verify", get(audit::verify))
        .route("/v1/audit/export", get(audit::export))
        .route(
            "/v1/admin/kill-switch",
            get(routes::show_kill_switch).post(routes::set_kill_switch),
        )
        .route(
            "/v1/admin/quarantine",
            get(routes::show_quarantine).post(routes::set_quarantine),
        )
        .route("/v1/gates/{gate}", post(routes::screen))
        .route(
            "/v1/results",
            post(routes::report).layer(DefaultBodyLimit::max(limit.max(RESULTS_MAX_BODY))),
        )
        .route("/v1/execute", post(routes::execute))
        .merge(crate::console::routes(sessions.clone()))
        .fallback(handlers::not_found)
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn(crate::console::session_layer))
        .layer(axum::Extension(sessions))
        .layer(axum::middleware::from_fn(move |req, next| {
            host_guard(dev.then(|| Arc::clone(&hosts)), req, next)
        }))
        .layer(axum::middleware::map_response(move |resp| {
            challenge(challenge_value.clone(), resp)
        }))
        .with_state(state)
}

/// Every 401 names how to get a credential: the bare `Bearer` the routes send becomes the
/// configured challenge (with the protected resource metadata's address, when there is one).
async fn challenge(
    value: axum::http::HeaderValue,
    mut resp: axum::response::Response,
) -> axum::response::Response {
    if resp.status() == axum::http::StatusCode::UNAUTHORIZED {
        resp.headers_mut()
            .insert(axum::http::header::WWW_AUTHENTICATE, value);
    }
    resp
}

/// The names the sidecar answers to: loopback, its `listen` address, `[mcp] allowed_hosts`.
fn own_hosts(state: &Gateway, listen: Option<std::net::SocketAddr>) -> Vec<String> {
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    if let Some(addr) = listen {
        hosts.push(addr.ip().to_string());
    }
    hosts.extend(
        state
            .mcp
            .allowed_hosts
            .iter()
            .map(|h| h.to_ascii_lowercase()),
    );
    hosts
}

/// In dev mode (every caller is one agent, no credential), a request must name the sidecar
/// itself as `Host`: a web page whose DNS name was rebound to 127.0.0.1 names its own, and
/// is refused before any route runs. Without dev mode a page has no credential to send.
async fn host_guard(
    hosts: Option<Arc<Vec<String>>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let Some(hosts) = hosts else {
        return next.run(req).await;
    };
    let named = req
        .headers()
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(host_part);
    if named.as_ref().is_some_and(|h| hosts.iter().any(|o| o == h)) {
        return next.run(req).await;
    }
    crate::gateway::Error::Coded {
        code: crate::codes::Code::HostRejected,
        message: format!(
            "dev mode answers only requests that name the sidecar itself as `Host`, not `{}`; nothing was done",
            named.unwrap_or_default()
        ),
    }
    .into_response()
}

/// The host of a `Host` header, without its port or IPv6 brackets, lowercase.
fn host_part(value: &str) -> String {
    let v = value.trim();
    let host = match v.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None => match v.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => v,
        },
    };
    host.to_ascii_lowercase()
}
