//! The HTTP API: [`router`] builds the axum router from an [`AppState`], so tests drive it
//! without a socket. Handlers live in `handlers`; `error` is the only place that picks status
//! codes; `serve` owns the connections (cap, timeouts, bounded shutdown).

mod admin;
mod approvals;
mod audit;
mod body;
mod callgate;
mod error;
mod execute;
mod explain;
mod gates;
mod grants;
mod handlers;
mod metrics;
mod policies;
mod results;
mod serve;

pub use body::{RawCall, RawExplain};
pub use error::ApiError;
pub use serve::{BodyTimedOut, RESERVED_FDS, fit_to_fd_limit, raise_fd_limit, serve};

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

pub use approvals::expire_due;
pub use grants::{expire_grants, expiry_timer, forget_ended, grant_expired_entry};

use crate::admin::Admin;
use crate::anomaly::Monitor;
use crate::approvals::{Approvals, Bounds, Ttl};
use crate::audit::{Audit, Chain, Durability, StoreError};
use crate::auth::Authenticator;
use crate::limits::{LimitConfig, Limiter, MonotonicClock};
use crate::metrics::Metrics;
use crate::policy::Snapshot;
use crate::redact::{Gates, Streams};
use crate::reload::PolicyStore;

/// Open streams the stream gate keeps at most (each holds at most 64 KiB), and per principal.
const MAX_STREAMS: usize = 1024;
const MAX_STREAMS_PER_PRINCIPAL: usize = 64;
/// A stream with no chunk for this long is dropped (when the table is full).
const STREAM_IDLE_MS: u64 = 10 * 60 * 1000;
use crate::storage::Stores;

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
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/v1/approvals"),
    ("GET", "/v1/approvals/{id}"),
    ("POST", "/v1/approvals/{id}/approve"),
    ("POST", "/v1/approvals/{id}/deny"),
    ("GET", "/v1/audit"),
    ("GET", "/v1/audit/head"),
    ("GET", "/v1/admin/kill-switch"),
    ("POST", "/v1/admin/kill-switch"),
    ("GET", "/v1/admin/quarantine"),
    ("POST", "/v1/admin/quarantine"),
    ("POST", "/v1/gates/{gate}"),
    ("POST", "/v1/results"),
    ("POST", "/v1/execute"),
];

/// Shared state: cheap to clone, every field an `Arc`.
#[derive(Clone)]
pub struct AppState {
    /// The live policy set; each request loads one snapshot from it, once.
    pub policy: Arc<PolicyStore>,
    /// Credential verification.
    pub auth: Arc<Authenticator>,
    /// The Prometheus recorder behind `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// The audit trail; every decision is recorded before it is answered.
    pub audit: Arc<Audit>,
    /// The approval queue.
    pub approvals: Arc<Approvals>,
    /// Rate limits, checked before Cedar.
    pub limiter: Arc<Limiter>,
    /// The kill switch.
    pub admin: Arc<Admin>,
    /// Usage counters and anomaly signals.
    pub monitor: Arc<Monitor>,
    /// The redaction detectors and the gates' rules (`None` only if the shipped detectors
    /// failed to compile; the gates then refuse to answer).
    pub gates: Option<Arc<Gates>>,
    /// The stream gate's open streams.
    pub streams: Arc<Streams>,
    /// Runs tools for `/v1/execute` (`None`: execution is off).
    pub exec: Option<Arc<crate::exec::Runner>>,
    /// Grants (`None` only for a state built without a data store: the routes answer 503).
    pub grants: Option<Arc<crate::grants::Grants>>,
}

impl AppState {
    /// State serving a fixed `snapshot` (no reloading), with temporary stores.
    pub fn new(
        snapshot: Snapshot,
        auth: Authenticator,
        max_body_bytes: usize,
    ) -> Result<Self, StoreError> {
        AppState::with_store(
            Arc::new(PolicyStore::new(snapshot, None)),
            auth,
            max_body_bytes,
        )
    }

    /// State serving a reloadable store, with temporary stores (tests).
    pub fn with_store(
        policy: Arc<PolicyStore>,
        auth: Authenticator,
        max_body_bytes: usize,
    ) -> Result<Self, StoreError> {
        let stores = Stores::temporary()?;
        let audit = Arc::new(Audit::start(
            stores.audit,
            Chain::plain(),
            Durability::Group,
        )?);
        let (grants, _) = crate::grants::Grants::start(
            stores.grants,
            audit.clone(),
            policy.clone(),
            crate::clock::now_ms(),
        )?;
        Ok(AppState::with_services(
            policy,
            auth,
            max_body_bytes,
            audit,
            Arc::new(Approvals::new(
                stores.approvals,
                Ttl::default(),
                Bounds::default(),
            )?),
        )
        .with_grants(Arc::new(grants)))
    }

    /// State over the given services.
    pub fn with_services(
        policy: Arc<PolicyStore>,
        auth: Authenticator,
        max_body_bytes: usize,
        audit: Arc<Audit>,
        approvals: Arc<Approvals>,
    ) -> Self {
        AppState {
            policy,
            auth: Arc::new(auth),
            metrics: Arc::new(Metrics::new()),
            max_body_bytes,
            audit,
            approvals,
            limiter: Arc::new(Limiter::new(
                LimitConfig::default(),
                Arc::new(MonotonicClock::default()),
            )),
            admin: Arc::new(Admin::unstored()),
            monitor: Arc::new(Monitor::counting_only(Arc::new(MonotonicClock::default()))),
            streams: Arc::new(Streams::new(
                MAX_STREAMS,
                MAX_STREAMS_PER_PRINCIPAL,
                STREAM_IDLE_MS,
            )),
            exec: None,
            grants: None,
            gates: match Gates::builtin() {
                Ok(g) => Some(Arc::new(g)),
                Err(e) => {
                    tracing::error!(error = %e, "gates unavailable");
                    None
                }
            },
        }
    }

    /// The same state with `gates` (configured detectors and rules).
    #[must_use]
    pub fn with_gates(mut self, gates: Gates) -> Self {
        self.gates = Some(Arc::new(gates));
        self
    }

    /// The same state with `grants`.
    #[must_use]
    pub fn with_grants(mut self, grants: Arc<crate::grants::Grants>) -> Self {
        self.grants = Some(grants);
        self
    }

    /// The same state with a tool runner (`/v1/execute`).
    #[must_use]
    pub fn with_exec(mut self, runner: crate::exec::Runner) -> Self {
        self.exec = Some(Arc::new(runner));
        self
    }

    /// The same state with `monitor` (usage counters and anomaly detectors).
    pub fn with_monitor(mut self, monitor: Monitor) -> Self {
        self.monitor = Arc::new(monitor);
        self
    }

    /// The same state with `admin` (a stored, possibly forced, kill switch).
    #[must_use]
    pub fn with_admin(mut self, admin: Arc<Admin>) -> Self {
        self.admin = admin;
        self
    }

    /// The same state with `limiter` instead of manifest-only limits.
    #[must_use]
    pub fn with_limiter(mut self, limiter: Limiter) -> Self {
        self.limiter = Arc::new(limiter);
        self
    }
}

/// The router for `state`.
pub fn router(state: AppState) -> Router {
    let limit = state.max_body_bytes;
    Router::new()
        .route("/v1/authorize", post(handlers::authorize))
        .route("/v1/tools", get(handlers::tools))
        .route("/v1/policies", get(handlers::policies))
        .route("/v1/policies/held/approve", post(policies::approve_held))
        .route("/v1/explain", post(explain::explain))
        .route("/v1/grants", get(grants::list).post(grants::create))
        .route("/v1/grants/{id}/revoke", post(grants::revoke))
        .route("/healthz", get(handlers::healthz))
        .route("/readyz", get(handlers::readyz))
        .route("/metrics", get(metrics::render))
        .route("/v1/approvals", get(approvals::list))
        .route("/v1/approvals/{id}", get(approvals::show))
        .route("/v1/approvals/{id}/approve", post(approvals::approve))
        .route("/v1/approvals/{id}/deny", post(approvals::deny))
        .route("/v1/audit", get(audit::query))
        .route("/v1/audit/head", get(audit::head))
        .route(
            "/v1/admin/kill-switch",
            get(admin::show_kill_switch).post(admin::set_kill_switch),
        )
        .route(
            "/v1/admin/quarantine",
            get(admin::show_quarantine).post(admin::set_quarantine),
        )
        .route("/v1/gates/{gate}", post(gates::screen))
        .route(
            "/v1/results",
            post(results::report)
                .layer(DefaultBodyLimit::max(limit.max(results::RESULTS_MAX_BODY))),
        )
        .route("/v1/execute", post(execute::execute))
        .fallback(handlers::not_found)
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}
