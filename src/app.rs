//! Startup as a library: [`App::build`] turns a validated [`Config`] into a wired pipeline
//! (stores opened, policies loaded or the last good set remembered, credentials checked), and
//! [`App::serve`] runs it on a listener until shutdown. `toolgate serve` and the integration
//! tests both start the sidecar this way.

use std::sync::Arc;

use anyhow::Context as _;

use crate::admin::Admin;
use crate::anomaly::{Alerts, Monitor};
use crate::api::{fit_to_fd_limit, raise_fd_limit, router_at};
use crate::approvals::{Approvals, Webhook, WebhookConfig, webhook_origin};
use crate::audit::{Audit, EntryKind, Operator, Retention};
use crate::auth::{AuthSetupError, Authenticator};
use crate::clock::now_ms;
use crate::config::{Config, ServerSettings, WebhookSettings};
use crate::gateway::{Gateway, expire_due, expiry_timer};
use crate::grants::{Grant, Grants};
use crate::limits::{Limiter, MonotonicClock};
use crate::policy::LoadError;
use crate::redact::Gates;
use crate::reload::{Origin, PolicyStore, PolicyWatcher, StoreOptions, WatchOptions};
use crate::storage::Stores;

/// Why the sidecar could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The credentials config cannot be used.
    #[error(transparent)]
    Auth(AuthSetupError),
    /// The policy files do not load and no good set was ever remembered.
    #[error(transparent)]
    Policies(LoadError),
    /// Anything else: the data directory, the audit keys, a webhook's secret, …
    #[error("{0:#}")]
    Setup(#[from] anyhow::Error),
}

/// A sidecar ready to serve: the pipeline and what runs beside it.
pub struct App {
    gateway: Gateway,
    store: Arc<PolicyStore>,
    audit: Arc<Audit>,
    /// Grants that expired while the sidecar was down, recorded once serving starts.
    expired: Vec<Grant>,
    /// An audit key that seals nothing yet: its start is recorded first.
    key_started: Option<crate::audit::keys::Started>,
    /// The stored state found to match the log, to record as a `state_checked` record once
    /// serving starts (`None`: unchanged since the last one, or the log is off).
    state_to_record: Option<Vec<crate::audit::Attest>>,
    revision: String,
    server: ServerSettings,
    exec: crate::exec::ExecSettings,
    mcp: crate::upstream::McpSettings,
    reload: WatchOptions,
    audit_retention: Option<Retention>,
    fleet: Option<crate::fleet::FleetSettings>,
}

/// Checks the owners and modes of the sidecar's own files (the protected set) and of the
/// directories above them, repairing what toolgate's user owns and may fix (logged), and
/// refusing to start on the rest, each with its fix.
fn own_files_safe(cfg: &Config) -> Result<(), StartError> {
    use crate::owners::{Kind, Users, check};
    let private = [
        cfg.data_dir.clone(),
        crate::audit::keys::keyring_path(&cfg.data_dir),
    ];
    let mut paths: Vec<(std::path::PathBuf, Kind)> = Vec::new();
    for p in crate::exec::sandbox::canonical_set(&cfg.exec.protected) {
        let kind = if crate::exec::sandbox::canonical_set(&private).contains(&p) {
            Kind::Private
        } else {
            Kind::Read
        };
        paths.push((p, kind));
    }
    let programs = rustix::process::geteuid()
        .is_root()
        .then(|| cfg.exec.run_as.unwrap_or(crate::exec::NOBODY).uid);
    let sources = crate::exec::sandbox::canonical_set(&[
        cfg.sources.policies_dir.clone(),
        cfg.sources.schemas_dir.clone(),
    ]);
    let mut standing = Vec::new();
    for f in check(&paths, Users::current(programs), true) {
        if f.repaired {
            tracing::warn!(path = %f.path.display(), "{}", f.message);
        } else if sources.iter().any(|d| f.path.starts_with(d)) {
            // The policy loader reports these as problems (the last good set is served).
            tracing::error!(path = %f.path.display(), help = f.help, "{}", f.message);
        } else {
            standing.push(format!("{}; fix: {}", f.message, f.help));
        }
    }
    if standing.is_empty() {
        return Ok(());
    }
    Err(StartError::Setup(anyhow::anyhow!(
        "toolgate's own files could be changed by another user:\n  - {}",
        standing.join("\n  - ")
    )))
}

/// What an MCP client speaks to besides HTTP: the process's stdio (`toolgate mcp`), as the
/// holder of `token`.
pub struct StdioFront {
    /// The agent's token.
    pub token: String,
}

impl App {
    /// Opens the data directory, loads the policies (or the remembered last good set), checks
    /// the credentials against the entities and wires the pipeline. Nothing listens yet.
    pub fn build(cfg: Config) -> Result<App, StartError> {
        // Before anything is opened: every connection is a descriptor, and the cap must fit.
        let server = fit_to_fd_limit(cfg.server, raise_fd_limit());
        // Credentials first: a config without authentication stops before anything is opened.
        let auth = Authenticator::from_config(&cfg.auth).map_err(StartError::Auth)?;
        // Before the data directory is opened: what another user, or a program that ran as
        // toolgate's user before the runs were confined, changed is repaired or refused.
        own_files_safe(&cfg)?;
        let configured_key = cfg
            .audit_hmac_key_file
            .as_deref()
            .map(crate::audit::keys::read_key_file)
            .transpose()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let stores = Stores::open_keyed(
            &cfg.data_dir,
            cfg.store_cache_bytes,
            cfg.store_reserve_bytes,
            configured_key.as_slice(),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        let cache_mb = stores.cache_bytes() / (1024 * 1024);
        let grants_store = stores.grants.clone();
        let provenance = memory(cfg.provenance, stores.conversations.clone())?;
        let options = StoreOptions {
            remember: Some(stores.policies.clone()),
            widening: cfg.widening,
        };
        let (store, warnings, error) =
            PolicyStore::start(cfg.sources.clone(), options).map_err(StartError::Policies)?;
        if let Some(e) = &error {
            // Each problem with its fix, as `toolgate validate` prints them, then the summary.
            for p in &e.problems {
                let help = p.help.as_deref().unwrap_or("");
                match p.level {
                    crate::policy::Level::Error => {
                        tracing::error!(problem = %p, help, "policy problem")
                    }
                    _ => tracing::warn!(problem = %p, help, "policy warning"),
                }
            }
            tracing::error!("{e}");
            match store.origin() {
                Origin::Remembered => tracing::warn!(
                    revision = store.current().revision,
                    "STALE: the policy files do not load; serving the last good set remembered in the data directory until they do"
                ),
                _ => tracing::error!(
                    "NO POLICY SET: the files do not load and none was ever remembered; every call is denied and /readyz says not ready until they are fixed"
                ),
            }
        }
        for w in &warnings {
            tracing::warn!(problem = %w, "policy warning");
        }
        if let Err(e) = crate::review::diff::find_solver() {
            match store.widening() {
                crate::reload::Widening::Hold => tracing::warn!(
                    error = %e,
                    "NO SOLVER: no policy change can be proved narrowing, so every change waits for a human's approval (/readyz `solver`)"
                ),
                crate::reload::Widening::Apply => tracing::warn!(
                    error = %e,
                    "NO SOLVER: policy changes apply unproved (reload.widening = \"apply\")"
                ),
            }
        }
        let snap = store.current();
        for p in auth.token_principals() {
            // With no policy set there are no entities to check against.
            if store.origin() != Origin::Nothing && snap.entities.get(&p.uid).is_none() {
                return Err(anyhow::anyhow!(
                "the tokens file names {}, which is not in {}/entities.json; add the entity or remove the token",
                p.uid,
                cfg.sources.policies_dir.display()
            )
            .into());
            }
        }
        let demo = auth.demo_principals();
        if !demo.is_empty() {
            let exposed = !cfg.listen.ip().is_loopback();
            tracing::warn!(
                principals = demo.join(", "),
                listen = %cfg.listen,
                "DEMO TOKENS: the tokens file accepts the tokens published in the docs; {}replace them before real use (docs/policies.md#demo-principals)",
                if exposed {
                    "anyone who can reach this address can act as these principals, approvers and directors included; "
                } else {
                    ""
                }
            );
        }
        if let Some(dev) = auth.dev_principal() {
            tracing::warn!(principal = %dev.uid, "DEV MODE: every request is treated as this agent; never use in production");
        }
        tracing::info!(
            revision = snap.revision,
            policies = snap.policy_count(),
            tools = snap.tools.len(),
            "policy set loaded"
        );
        drop(snap);
        let store = Arc::new(store);
        // HMAC links are on by default: the keyring in the data directory holds a key generated
        // at first start (or names `audit.hmac_key_file`); a key that seals nothing yet is
        // recorded below, as the first record under it.
        let revision = store.current().revision.clone();
        let head_record = stores.audit.last().map_err(|e| anyhow::anyhow!("{e}"))?;
        let (chain, key_started) = crate::audit::keys::open_for_serve(
            &cfg.data_dir,
            cfg.audit_hmac_key_file.as_deref(),
            head_record.as_ref(),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        // With the audit log off (benchmarks only) no record backs any state: nothing to check.
        let state_to_record = if cfg.audit_durability == crate::audit::Durability::Off {
            None
        } else {
            let (verifying, _) =
                crate::audit::keys::chain_for_verify(&cfg.data_dir, configured_key.as_slice())
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
            state_matches_log(&stores, &verifying)?
        };
        let audit = Arc::new(
            Audit::start(stores.audit, chain, cfg.audit_durability)
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        );
        if let Some(ship) = &cfg.audit_ship {
            audit.ship(ship.clone()).with_context(|| {
                format!(
                    "cannot ship the audit log to {} (`[audit] ship_file`)",
                    ship.path.display()
                )
            })?;
        }
        if let Some(otlp) = &cfg.audit_otlp {
            audit
                .ship_otlp(
                    otlp.clone(),
                    crate::audit::otlp_position_file(&cfg.data_dir),
                )
                .context("cannot ship the audit log over OTLP (`[audit] ship_otlp_url`)")?;
        }
        let mut approvals = Approvals::new(
            stores.approvals,
            cfg.approval_ttl.clone(),
            cfg.approval_bounds,
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .with_retention(cfg.approval_retain_secs);
        if let Some(hook) = &cfg.approval_webhook {
            approvals = approvals.with_webhook(start_webhook(hook, "approvals")?);
            tracing::info!(to = %webhook_origin(&hook.url), "approver webhook on");
        }
        let approvals = Arc::new(approvals);
        let forced = match (cfg.kill_switch, kill_switch_env()?) {
            (true, _) => Some("the config (kill_switch = true)".to_owned()),
            (false, true) => Some("the environment (TOOLGATE_KILL_SWITCH)".to_owned()),
            (false, false) => None,
        };
        let admin =
            Arc::new(Admin::open(Some(stores.admin), forced).map_err(|e| anyhow::anyhow!("{e}"))?);
        if admin.kill_switch_on() {
            tracing::warn!("KILL SWITCH ON: every tool call will be denied");
        }
        tracing::info!(data_dir = %cfg.data_dir.display(), head = audit.head().seq, cache_mb, "audit log open");
        // Grants stored before the restart are linked again; those that expired meanwhile end now.
        let (grants, expired) = Grants::start(grants_store, audit.clone(), store.clone(), now_ms())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let linked = store.current().links().count();
        if linked > 0 {
            tracing::info!(grants = linked, "grants linked");
        }
        let grants = Arc::new(grants);
        let state = Gateway::with_services(
            store.clone(),
            auth,
            cfg.max_body_bytes,
            audit.clone(),
            approvals,
        )
        .with_limiter(Limiter::new(
            cfg.rate_limits,
            Arc::new(MonotonicClock::default()),
        ))
        .with_gates(
            Gates::new(&cfg.redaction, cfg.gate_rules.clone())
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        )
        .with_provenance_memory(provenance)
        .with_monitor(monitor(&cfg, &audit, &admin)?)
        .with_admin(admin)
        .with_grants(grants);
        Ok(App {
            gateway: state,
            store,
            audit,
            expired,
            key_started,
            state_to_record,
            revision,
            server,
            exec: cfg.exec,
            mcp: cfg.mcp,
            reload: cfg.reload,
            audit_retention: cfg.audit_retention,
            fleet: cfg.fleet,
        })
    }

    /// The pipeline this app serves (for front ends other than HTTP, and tests).
    pub fn gateway(&self) -> &Gateway {
        &self.gateway
    }

    /// Serves HTTP on `listener` until `shutdown` completes, with the policy watcher and the
    /// background jobs running; then stores everything queued for the audit log.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        self.serve_with(listener, shutdown, None).await
    }

    /// [`App::serve`], and an MCP session on stdio when `stdio` is given: serving stops when
    /// either `shutdown` completes or the stdio session ends.
    pub async fn serve_with(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
        stdio: Option<StdioFront>,
    ) -> anyhow::Result<()> {
        let App {
            gateway: state,
            store,
            audit,
            expired,
            key_started,
            state_to_record,
            revision,
            server,
            exec,
            mcp,
            reload,
            audit_retention,
            fleet,
        } = self;
        if let Some(started) = key_started {
            let entry = Operator::by(EntryKind::Admin, "audit_key", "toolgate", &revision).entry(
                "key_started",
                vec![started.id.clone()],
                started.detail(),
            );
            audit
                .record(entry)
                .await
                .map_err(|e| anyhow::anyhow!("cannot record the audit key's start: {e}"))?;
            tracing::info!(key = %started.id, from = started.from_seq, "audit key in use");
        }
        if let Some(state) = state_to_record {
            // Before anything else can change state: the next start walks from here. Not
            // recording it is safe (the next start walks from the one before), so a full disk
            // does not keep the sidecar from starting and denying with 503.
            let keys = state.len();
            let entry = crate::audit::state_checked(&revision, state);
            match audit.commit(vec![entry], Vec::new()).await {
                Ok(_) => tracing::info!(keys, "stored state matches the audit log; recorded"),
                Err(e) => tracing::warn!(
                    error = %e,
                    "the state check was not recorded; the next start checks from the one before"
                ),
            }
        }
        let state = match &exec.root {
            None => state,
            Some(root) => {
                let launcher = std::env::current_exe()
                    .context("cannot find this binary to use as the tool launcher")?;
                let runner = toolgate_exec_runner(exec.clone(), launcher)
                    .await
                    .with_context(|| format!("cannot run tools in `{}`", root.display()))?;
                let p = runner.protections();
                match &p.error {
                    Some(e) => {
                        tracing::error!(error = %e, "tool execution unavailable: every /v1/execute is refused")
                    }
                    None => tracing::info!(
                        root = %p.root,
                        landlock = %p.landlock,
                        process_limit = p.process_limit,
                        "tool execution on"
                    ),
                }
                state.with_exec(runner)
            }
        };
        let hub = (!mcp.upstreams.is_empty()).then(|| {
            let gates = state.gates.clone();
            let screen: crate::upstream::Screen = Arc::new(move |line: &str| match &gates {
                Some(g) => g.redactor().redact(line),
                None => "<stderr withheld: redaction unavailable>".to_owned(),
            });
            crate::upstream::Hub::start(&mcp, state.exec.clone(), screen)
        });
        for (name, found) in upstream_reach(&exec, &mcp) {
            tracing::warn!(
                upstream = name,
                "MCP upstream: {found} (programs run as `[exec] run_as` when toolgate is root; its writes will fail until then)"
            );
        }
        if let Some(hub) = &hub {
            // Serving starts once every upstream was tried (up or down), at most 30 s.
            hub.settled(std::time::Duration::from_secs(30)).await;
            for u in hub.status() {
                tracing::info!(
                    upstream = u.name,
                    state = u.state,
                    tools = u.tools,
                    error = u.error,
                    "MCP upstream"
                );
            }
        }
        let held = crate::limits::HeldBounds {
            waits: server.max_waits_per_principal,
            streams: server.max_streams_per_principal,
            calls: mcp.max_held_calls_per_principal,
            agents: server.agents_may_hold(),
        };
        let state = state.with_upstreams(hub.clone(), mcp).with_held(held);
        let (state, fleet_job) = match fleet {
            None => (state, None),
            Some(settings) => {
                let fleet = Arc::new(
                    crate::fleet::Fleet::connect(settings)
                        .map_err(|e| anyhow::anyhow!("cannot use `[fleet]`: {e}"))?,
                );
                let state = state.with_fleet(fleet.clone());
                // One read before serving, so a reachable Redis decides the first call.
                match fleet.poll(&state.admin, state.grants.as_deref()).await {
                    Ok(_) => tracing::info!(
                        prefix = fleet.settings().prefix,
                        "fleet state shared through Redis"
                    ),
                    Err(e) => {
                        tracing::error!(error = %e, "shared state unreachable at start; every call is denied until it is read")
                    }
                }
                // An agent released elsewhere: its history here must not raise the same
                // signal again at its next call, as on the sidecar that released it.
                let monitor = state.monitor.clone();
                let job = tokio::spawn(crate::fleet::run(
                    fleet,
                    state.admin.clone(),
                    state.grants.clone(),
                    move |agent| monitor.forget(agent),
                ));
                (state, Some(job))
            }
        };
        let addr = listener.local_addr()?;
        tracing::info!(
            addr = %addr,
            max_connections = server.max_connections,
            "toolgate listening"
        );
        let watcher = Arc::new(PolicyWatcher::spawn_audited(
            store,
            reload,
            Some(audit.clone()),
        ));
        let sighup = reload_on_sighup(watcher.clone());
        let expiry = {
            let state = state.clone();
            tokio::spawn(async move {
                let mut every = tokio::time::interval(std::time::Duration::from_secs(1));
                loop {
                    every.tick().await;
                    expire_due(&state).await;
                }
            })
        };
        // Its own job: the looks read the store (blocking), and nothing there may hold up
        // expiry.
        let notices = {
            let state = state.clone();
            tokio::spawn(async move {
                let mut every = tokio::time::interval(std::time::Duration::from_secs(1));
                let mut seen = crate::gateway::Seen::default();
                loop {
                    every.tick().await;
                    let job_state = state.clone();
                    match tokio::task::spawn_blocking(move || {
                        crate::gateway::look_for_notices(&job_state, &mut seen, now_ms());
                        seen
                    })
                    .await
                    {
                        Ok(s) => seen = s,
                        Err(e) => {
                            tracing::error!(error = %e, "notices look failed; starting afresh");
                            seen = crate::gateway::Seen::default();
                        }
                    }
                }
            })
        };
        if let Some(grants) = &state.grants {
            crate::gateway::forget_ended(&state, grants, &expired, now_ms()).await;
        }
        let grant_expiry = tokio::spawn(expiry_timer(state.clone()));
        let upkeep = {
            let metrics = state.metrics.clone();
            tokio::spawn(async move {
                // Folds recorded latencies into their histograms even when nobody scrapes.
                let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
                loop {
                    every.tick().await;
                    metrics.upkeep();
                }
            })
        };
        let retention = audit_retention.map(|rule| tokio::spawn(retain(audit.clone(), rule)));
        let provenance = state.provenance.clone();
        let saver = provenance
            .is_kept()
            .then(|| tokio::spawn(save_provenance(provenance.clone())));
        let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<()>();
        let stdio_task = stdio.map(|front| {
            let state = state.clone();
            tokio::spawn(async move {
                use rmcp::ServiceExt as _;
                let front = crate::mcp::Front::stdio(state, &front.token);
                match front.serve(rmcp::transport::stdio()).await {
                    Ok(running) => {
                        tracing::info!("MCP client connected on stdio");
                        let _ = running.waiting().await;
                        tracing::info!("MCP client on stdio went away; stopping");
                    }
                    Err(e) => tracing::error!(error = %e, "MCP session on stdio failed"),
                }
                let _ = ended_tx.send(());
            })
        });
        let stop = async move {
            tokio::select! {
                () = shutdown => {}
                _ = ended_rx, if stdio_task.is_some() => {}
            }
        };
        crate::api::serve(listener, router_at(state, Some(addr)), server, stop).await;
        if let Some(hub) = &hub {
            hub.shutdown(std::time::Duration::from_secs(10)).await;
        }
        drop(watcher);
        // Stopped and awaited, so nothing of this app outlives `serve` but what the caller
        // still holds.
        let jobs = [
            Some(sighup),
            Some(expiry),
            Some(notices),
            Some(grant_expiry),
            Some(upkeep),
            retention,
            fleet_job,
            saver,
        ];
        for job in jobs.iter().flatten() {
            job.abort();
        }
        for job in jobs.into_iter().flatten() {
            let _ = job.await;
        }
        // Provenance's conversations, complete, marked as from a clean stop.
        if provenance.is_kept() {
            let memory = provenance.clone();
            match tokio::task::spawn_blocking(move || memory.close()).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "provenance conversations not saved at stop; they read as after a crash at the next start")
                }
                Err(e) => tracing::error!(error = %e, "provenance save task failed"),
            }
        }
        // Everything queued is stored before the process exits.
        audit.close();
        tracing::info!("toolgate stopped");
        Ok(())
    }
}

/// `TOOLGATE_KILL_SWITCH`: 1/true/on forces the kill switch on; unset, empty, 0/false/off
/// leave it to the stored state. Anything else is an error (a typo must not leave it off).
fn kill_switch_env() -> anyhow::Result<bool> {
    match std::env::var("TOOLGATE_KILL_SWITCH") {
        Err(std::env::VarError::NotPresent) => Ok(false),
        Err(std::env::VarError::NotUnicode(_)) => {
            anyhow::bail!("TOOLGATE_KILL_SWITCH must be 1, true, on, 0, false or off")
        }
        Ok(v) => match v.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "on" | "yes" => Ok(true),
            "" | "0" | "false" | "off" | "no" => Ok(false),
            other => anyhow::bail!(
                "TOOLGATE_KILL_SWITCH = `{other}`: use 1, true or on (or 0, false, off)"
            ),
        },
    }
}

/// Refuses to start when the stored state (approvals, grants, quarantines, the kill switch,
/// approved descriptors) is not what the audit log produces under `chain`: serving it would
/// honour an approval nobody gave, or drop a kill switch an operator set. Returns the state
/// to record as checked, when it changed since the last check.
fn state_matches_log(
    stores: &Stores,
    chain: &crate::audit::Chain,
) -> Result<Option<Vec<crate::audit::Attest>>, StartError> {
    let check = stores
        .check_state(now_ms(), chain)
        .map_err(|e| anyhow::anyhow!("cannot check the stored state against the audit log: {e}"))?;
    if check.unverifiable > 0 {
        tracing::warn!(
            keys = check.unverifiable,
            "stored state that no record since the retention cut names (written before records named their changes, or retention removed the last state check); approvals and the kill switch among it were held to their own records"
        );
    }
    if check.unsealed > 0 {
        tracing::warn!(
            records = check.unsealed,
            "records sealed by an audit key not available here (a retired audit.hmac_key_file): their state changes were taken as linked, their seals not checked"
        );
    }
    tracing::info!(
        keys = check.checked,
        walked = check.walked,
        from = check.baseline,
        "stored state checked against the audit log"
    );
    if check.contradictions.is_empty() {
        return Ok(check.to_record);
    }
    let list: Vec<String> = check
        .contradictions
        .iter()
        .take(10)
        .map(|c| format!("  - {c}"))
        .collect();
    Err(anyhow::anyhow!(
        "the data directory's state contradicts its audit log ({} found), so toolgate does not start on it: state written without its records is forged or damaged\n{}\nKeep the directory for investigation (`toolgate audit verify --state` lists every one), and start from a backup or a new data directory",
        check.contradictions.len(),
        list.join("\n")
    )
    .into())
}

/// How often provenance saves what changed in its conversations to the data directory.
const PROVENANCE_SAVE_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Provenance's memory: read back from the data directory (`[provenance] persist`, the
/// default), else a fresh one lost at exit.
fn memory(
    settings: crate::provenance::Settings,
    shelf: Arc<dyn crate::provenance::Shelf>,
) -> Result<Arc<crate::provenance::Memory>, StartError> {
    use crate::provenance::Memory;
    if !settings.persist {
        return Ok(Arc::new(Memory::new(settings)));
    }
    let (memory, r) = Memory::open(settings, shelf).map_err(|e| {
        anyhow::anyhow!(
            "{e}; the data directory's conversations cannot be read (set `[provenance] persist = false` to start without them)"
        )
    })?;
    if r.clean || r.conversations == 0 {
        tracing::info!(
            conversations = r.conversations,
            decisions = r.decisions,
            dropped = r.dropped,
            "provenance conversations read back"
        );
    } else {
        tracing::warn!(
            conversations = r.conversations,
            decisions = r.decisions,
            dropped = r.dropped,
            "provenance conversations read back after an unclean stop: their latest outputs may be missing, so every value not from the user reads `tool` in them and context.conversation.known is false"
        );
    }
    Ok(Arc::new(memory))
}

/// Saves provenance's changes every [`PROVENANCE_SAVE_EVERY`], off the request threads; a
/// failure is logged once until a save succeeds again (the changes stay pending).
async fn save_provenance(memory: Arc<crate::provenance::Memory>) {
    let mut every = tokio::time::interval(PROVENANCE_SAVE_EVERY);
    let mut failing = false;
    loop {
        every.tick().await;
        let m = memory.clone();
        match tokio::task::spawn_blocking(move || m.save()).await {
            Ok(Ok(_)) => {
                if failing {
                    tracing::info!("provenance conversations saved again");
                }
                failing = false;
            }
            Ok(Err(e)) => {
                if !failing {
                    tracing::error!(error = %e, "provenance conversations not saved; retrying every 2 s");
                }
                failing = true;
            }
            Err(e) => tracing::error!(error = %e, "provenance save task failed"),
        }
    }
}

/// How often retention runs (also once at startup).
const RETENTION_EVERY: std::time::Duration = std::time::Duration::from_secs(600);

/// Applies the retention rule now and every [`RETENTION_EVERY`], off the request threads.
async fn retain(audit: Arc<Audit>, rule: Retention) {
    let mut every = tokio::time::interval(RETENTION_EVERY);
    loop {
        every.tick().await;
        let (audit, rule) = (audit.clone(), rule.clone());
        match tokio::task::spawn_blocking(move || audit.prune(&rule)).await {
            Ok(Ok(Some(p))) => tracing::info!(
                removed = p.removed,
                checkpoint = p.checkpoint.seq,
                "audit retention: old records removed; the chain verifies from the checkpoint"
            ),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "audit retention failed; nothing removed"),
            Err(e) => tracing::error!(error = %e, "audit retention task failed"),
        }
    }
}

/// SIGHUP forces a reload, even of unchanged content.
fn reload_on_sighup(watcher: Arc<PolicyWatcher>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP; reload by editing the files instead");
            return;
        };
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading policies");
            watcher.force_reload();
        }
    })
}

async fn toolgate_exec_runner(
    settings: crate::exec::ExecSettings,
    launcher: std::path::PathBuf,
) -> anyhow::Result<crate::exec::Runner> {
    crate::exec::Runner::start(settings, launcher)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// The usage counters, and the anomaly detectors unless `[anomaly] enabled = false`.
fn monitor(cfg: &Config, audit: &Arc<Audit>, admin: &Arc<Admin>) -> anyhow::Result<Monitor> {
    let clock = Arc::new(MonotonicClock::default());
    let Some(detectors) = cfg.anomaly.clone() else {
        tracing::info!("anomaly detectors off; usage counters on");
        return Ok(Monitor::counting_only(clock));
    };
    let webhook = match &cfg.anomaly_webhook {
        Some(hook) => {
            tracing::info!(to = %webhook_origin(&hook.url), "anomaly webhook on");
            Some(start_webhook(hook, "anomaly")?)
        }
        None => None,
    };
    let alerts = Alerts {
        audit: Some(audit.clone()),
        webhook,
        quarantine: (!cfg.quarantine_on.is_empty()).then(|| (admin.clone(), cfg.quarantine_on)),
    };
    Ok(Monitor::start(detectors, clock, alerts)?)
}

/// Starts a webhook's delivery thread; reads its secret file (`[section] webhook_secret_file`).
fn start_webhook(hook: &WebhookSettings, section: &str) -> anyhow::Result<Webhook> {
    let secret = match &hook.secret_file {
        // A trailing newline (as editors and `echo` leave) is not part of the secret.
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| {
                    format!(
                        "cannot read {section}.webhook_secret_file {}",
                        path.display()
                    )
                })?
                .trim_end()
                .as_bytes()
                .to_vec(),
        ),
        None => None,
    };
    Ok(Webhook::start(WebhookConfig {
        url: hook.url.clone(),
        secret,
        timeout: hook.timeout,
        attempts: hook.attempts,
        backoff: std::time::Duration::from_millis(250),
        format: hook.format,
        console_url: hook.console_url.clone(),
    })?)
}

/// What the programs' user cannot use of each stdio upstream's working directory and
/// declared `writes` ([`crate::exec::reach`]), by upstream name.
pub fn upstream_reach(
    exec: &crate::exec::ExecSettings,
    mcp: &crate::upstream::McpSettings,
) -> Vec<(String, crate::exec::reach::Unusable)> {
    let Some(root) = &exec.root else {
        return Vec::new();
    };
    let who = crate::exec::reach::program_user(exec);
    let mut out = Vec::new();
    for u in &mcp.upstreams {
        if let crate::upstream::Transport::Stdio(s) = &u.transport {
            for found in crate::exec::reach::unusable(root, who, &s.cwd, &s.access.writes) {
                out.push((u.name.clone(), found));
            }
        }
    }
    out
}
