//! `toolgate serve`: load, check credentials against the entities, bind, serve until a
//! shutdown signal ([`crate::app::App`] does the work). Policy files that do not load are
//! reported (file and line) and the remembered last good set serves, stale; with none ever
//! remembered, every call is denied and `/readyz` says not ready until the files are fixed
//! (the watcher picks the fix up).

use std::process::ExitCode;

use anyhow::Context as _;

use super::{Common, render, report_load_error};
use crate::app::{App, StartError};

/// Runs the subcommand.
pub fn run(common: &Common) -> anyhow::Result<ExitCode> {
    run_with(common, None)
}

/// Runs the sidecar; with `stdio`, also an MCP session on stdio, which ends it.
pub(super) fn run_with(
    common: &Common,
    stdio: Option<crate::app::StdioFront>,
) -> anyhow::Result<ExitCode> {
    // First, so that every thread started below inherits the short slice.
    crate::sched::serving();
    failpoints()?;
    let cfg = common.config()?;
    let listen = cfg.listen;
    let app = match App::build(cfg) {
        Ok(app) => app,
        Err(StartError::Auth(e)) => anyhow::bail!(render(&e)),
        Err(StartError::Policies(e)) => {
            report_load_error(&e);
            return Ok(ExitCode::from(1));
        }
        Err(StartError::Setup(e)) => return Err(e),
    };
    // Cedar denies (fail closed) when under 100 KiB of stack remain; long `||` chains in a
    // policy recurse deeply, so runtime threads get 8 MiB instead of the default 2 MiB.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .on_thread_park(crate::memory::on_park)
        .thread_stack_size(8 * 1024 * 1024)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        app.serve_with(listener, shutdown(), stdio).await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// `TOOLGATE_FAILPOINTS` (`name=action;…`, fail-rs actions): failures injected between the
/// steps of a state change, for crash tests. Only debug builds (what `cargo test` runs) read
/// it: a release binary refuses to start with it set, so a stray variable can neither crash
/// nor quietly weaken a production sidecar. A malformed value is an error, not ignored.
fn failpoints() -> anyhow::Result<()> {
    let Ok(spec) = std::env::var("TOOLGATE_FAILPOINTS") else {
        return Ok(());
    };
    if !cfg!(debug_assertions) {
        anyhow::bail!(
            "TOOLGATE_FAILPOINTS is set, but failure injection is for test builds only; unset it"
        );
    }
    for point in spec.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, action) = point.split_once('=').ok_or_else(|| {
            anyhow::anyhow!("TOOLGATE_FAILPOINTS: `{point}` is not `name=action`")
        })?;
        fail::cfg(name.trim(), action.trim())
            .map_err(|e| anyhow::anyhow!("TOOLGATE_FAILPOINTS: `{point}`: {e}"))?;
        tracing::warn!(
            failpoint = name,
            action,
            "failure injection on (tests only)"
        );
    }
    Ok(())
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
