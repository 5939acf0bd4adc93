//! The decision pipeline under the front ends: deciding a call (stops, limits, Cedar, the
//! tool_call gate, approvals, the audit record), settling approvals, screening content and
//! results, running tools, and the background jobs (approval and grant expiry). Plain async
//! functions over typed inputs; nothing here knows about HTTP: the `api` front end maps
//! [`Error`] to status codes, and an MCP front end calls the same functions.

mod admin;
mod approvals;
mod body;
mod callgate;
mod decide;
mod error;
mod execute;
mod explain;
mod exposure;
mod gates;
mod grants;
mod mcp;
mod notices;
mod output;
mod policies;
mod resolve;
mod results;

pub use admin::{
    KillSwitchBody, QuarantineBody, change_in_order, kill_switch_view, quarantine_view,
    set_kill_switch, set_quarantine,
};
pub use approvals::{
    DecideBody, ListQuery, ShowQuery, expire_due, list_approvals, settle_approval, show_approval,
};
pub use body::{
    DecisionBody, ExecAnswer, ExecFailure, Metadata, OutputReport, Progress, RawCall, RawExplain,
    word,
};
pub use callgate::GateReport;
pub use decide::{
    Caller, Credential, Decided, authenticate, caller, decide, decide_for, hold, human,
    record_or_refuse,
};
pub use error::{Error, Refusal};
pub use execute::{execute, execute_for};
pub use explain::explain;
pub use exposure::{Exposure, exposure};
pub use gates::{GateBody, StreamAnswer, off_workers, screen_content};
pub use grants::{
    GrantBody, RevokeBody, create_grant, describe, expire_grants, expiry_timer, forget_ended,
    grant_expired_entry, list_grants, revoke_grant,
};
pub use mcp::{ApproveDescriptorBody, approve_descriptor, descriptors_view, put_blobs, take_blobs};
pub use notices::{Seen, look as look_for_notices};
pub use policies::{ApproveBody, approve_held};
pub use results::{RESULTS_MAX_BODY, ResultAnswer, ResultBody, report_result};

use std::sync::Arc;

use crate::admin::Admin;
use crate::anomaly::Monitor;
use crate::approvals::{Approvals, Bounds, Ttl};
use crate::audit::{Audit, Chain, Durability};
use crate::auth::Authenticator;
use crate::limits::{Held, HeldBounds, LimitConfig, Limiter, MonotonicClock};
use crate::metrics::Metrics;
use crate::policy::Snapshot;
use crate::redact::{Gates, Streams};
use crate::reload::PolicyStore;
use crate::storage::Stores;

/// Open streams the stream gate keeps at most (each holds at most 64 KiB), and per principal.
const MAX_STREAMS: usize = 1024;
const MAX_STREAMS_PER_PRINCIPAL: usize = 64;
/// A stream with no chunk for this long is dropped (when the table is full).
const STREAM_IDLE_MS: u64 = 10 * 60 * 1000;

/// The services every call goes through: cheap to clone, every field an `Arc`. Front ends
/// (HTTP today) hold one and call the pipeline's functions with it.
#[derive(Clone)]
pub struct Gateway {
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
    /// The requests each principal holds open (long polls, event streams, held MCP calls).
    pub held: Arc<Held>,
    /// Runs tools for `/v1/execute` (`None`: execution is off).
    pub exec: Option<Arc<crate::exec::Runner>>,
    /// Grants (`None` only for a state built without a data store: the routes answer 503).
    pub grants: Option<Arc<crate::grants::Grants>>,
    /// The MCP upstreams (`None`: none configured, or not started yet).
    pub upstreams: Option<Arc<crate::upstream::Hub>>,
    /// `[mcp]`: the MCP front end's settings.
    pub mcp: Arc<crate::upstream::McpSettings>,
    /// What each conversation's user said and tools returned (`context.provenance`).
    pub provenance: Arc<crate::provenance::Memory>,
    /// The fleet's shared state (`[fleet]`; `None`: this sidecar keeps its own).
    pub fleet: Option<Arc<crate::fleet::Fleet>>,
}

impl Gateway {
    /// State serving a fixed `snapshot` (no reloading), with temporary stores.
    pub fn new(
        snapshot: Snapshot,
        auth: Authenticator,
        max_body_bytes: usize,
    ) -> Result<Self, crate::storage::StorageError> {
        Gateway::with_store(
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
    ) -> Result<Self, crate::storage::StorageError> {
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
        Ok(Gateway::with_services(
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
        Gateway {
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
            held: Arc::new(Held::new(HeldBounds::default())),
            exec: None,
            grants: None,
            fleet: None,
            upstreams: None,
            mcp: Arc::default(),
            provenance: Arc::new(crate::provenance::Memory::new(
                crate::provenance::Settings::default(),
            )),
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

    /// The same state with a provenance memory of these bounds.
    #[must_use]
    pub fn with_provenance(mut self, settings: crate::provenance::Settings) -> Self {
        self.provenance = Arc::new(crate::provenance::Memory::new(settings));
        self
    }

    /// The same state with `memory` as its provenance memory (one read back from the data
    /// directory).
    #[must_use]
    pub fn with_provenance_memory(mut self, memory: Arc<crate::provenance::Memory>) -> Self {
        self.provenance = memory;
        self
    }

    /// The same state with `grants`.
    #[must_use]
    pub fn with_grants(mut self, grants: Arc<crate::grants::Grants>) -> Self {
        self.grants = Some(grants);
        self
    }

    /// The same state sharing limits, the kill switch, quarantines and grants through
    /// `fleet`.
    #[must_use]
    pub fn with_fleet(mut self, fleet: Arc<crate::fleet::Fleet>) -> Self {
        self.admin.quarantine().share();
        self.fleet = Some(fleet);
        self
    }

    /// The same state with MCP upstreams and the `[mcp]` settings.
    #[must_use]
    pub fn with_upstreams(
        mut self,
        hub: Option<Arc<crate::upstream::Hub>>,
        settings: crate::upstream::McpSettings,
    ) -> Self {
        self.upstreams = hub;
        self.mcp = Arc::new(settings);
        self
    }

    /// The same state with the bounds on held requests (`[server]`, `[mcp]`).
    #[must_use]
    pub fn with_held(mut self, bounds: HeldBounds) -> Self {
        self.held = Arc::new(Held::new(bounds));
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

/// Remembers a tool's output as tool output of the conversation its decision was made in
/// (provenance): in place when small (tokenizing costs about 12 µs per KiB, less than the two
/// thread hand-offs of a blocking task), otherwise off the async workers. It never fails the
/// run it follows (the run happened and is recorded either way).
pub(crate) async fn remember_output(
    state: &Gateway,
    decision_id: &str,
    principal: &str,
    output: &serde_json::Value,
) {
    let memory = state.provenance.clone();
    if gates::text_within(output, gates::INLINE_SCAN_BYTES) {
        let remembered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            memory.record_for_decision(decision_id, principal, output);
        }));
        if remembered.is_err() {
            tracing::error!("a tool output could not be remembered for provenance");
        }
        return;
    }
    let (decision_id, principal, output) =
        (decision_id.to_owned(), principal.to_owned(), output.clone());
    if gates::off_workers(move || {
        memory.record_for_decision(&decision_id, &principal, &output);
    })
    .await
    .is_err()
    {
        tracing::error!("a tool output could not be remembered for provenance");
    }
}
