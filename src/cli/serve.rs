//! `toolgate serve`: load, check credentials against the entities, bind, serve until a
//! shutdown signal. Refuses to start (exit 1) on any policy problem, before binding a port.

use std::process::ExitCode;

use anyhow::Context as _;

use super::{Common, render, report_load_error};
use crate::api::{AppState, router};
use crate::auth::Authenticator;
use crate::policy::load;

/// Runs the subcommand.
pub fn run(common: &Common) -> anyhow::Result<ExitCode> {
    let cfg = common.config()?;
    let loaded = match load(&cfg.sources) {
        Ok(l) => l,
        Err(e) => {
            report_load_error(&e);
            return Ok(ExitCode::from(1));
        }
    };
    for w in &loaded.warnings {
        tracing::warn!(problem = %w, "policy warning");
    }
    let auth = Authenticator::from_config(&cfg.auth).map_err(|e| anyhow::anyhow!(render(&e)))?;
    let snap = loaded.snapshot;
    for p in auth.token_principals() {
        if snap.entities.get(&p.uid).is_none() {
            anyhow::bail!(
                "the tokens file names {}, which is not in {}/entities.json; add the entity or remove the token",
                p.uid,
                cfg.sources.policies_dir.display()
            );
        }
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
    let state = AppState::new(snap, auth, cfg.max_body_bytes);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .with_context(|| format!("cannot listen on {}", cfg.listen))?;
        tracing::info!(addr = %cfg.listen, "toolgate listening");
        axum::serve(listener, router(state))
            .with_graceful_shutdown(shutdown())
            .await?;
        tracing::info!("toolgate stopped");
        Ok(ExitCode::SUCCESS)
    })
}

async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { () = ctrl_c => {}, () = term => {} }
}
