//! The HTTP API: [`router`] builds the axum router from an [`AppState`], so tests drive it
//! without a socket. Handlers live in `handlers`; `error` is the only place that picks status
//! codes.

mod body;
mod error;
mod handlers;

pub use error::ApiError;

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

use crate::auth::Authenticator;
use crate::policy::{LoadError, Snapshot};

/// Every route, as documented in `docs/openapi.json` (a test keeps the two in step).
pub const ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/authorize"),
    ("GET", "/v1/tools"),
    ("GET", "/v1/policies"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
];

/// Shared state: cheap to clone, every field an `Arc`.
#[derive(Clone)]
pub struct AppState {
    /// The live policy snapshot; each request loads it once.
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    /// Credential verification.
    pub auth: Arc<Authenticator>,
    /// The most recent failed load, while the last good snapshot stays in force.
    pub last_error: Arc<Mutex<Option<LoadError>>>,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
}

impl AppState {
    /// State serving `snapshot`.
    pub fn new(snapshot: Snapshot, auth: Authenticator, max_body_bytes: usize) -> Self {
        AppState {
            snapshot: Arc::new(ArcSwap::from_pointee(snapshot)),
            auth: Arc::new(auth),
            last_error: Arc::new(Mutex::new(None)),
            max_body_bytes,
        }
    }
}

/// The router for `state`.
pub fn router(state: AppState) -> Router {
    let limit = state.max_body_bytes;
    Router::new()
        .route("/v1/authorize", post(handlers::authorize))
        .route("/v1/tools", get(handlers::tools))
        .route("/v1/policies", get(handlers::policies))
        .route("/healthz", get(handlers::healthz))
        .route("/readyz", get(handlers::readyz))
        .fallback(handlers::not_found)
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}
