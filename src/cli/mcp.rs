//! `toolgate mcp`: the sidecar with an MCP session on stdio (the command a desktop client
//! launches as its MCP server), and `toolgate mcp sync`, which connects to the configured
//! upstreams and writes their tools' manifests and the Cedar schema.

use std::path::Path;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::Value;

use super::Common;
use crate::app::StdioFront;
use crate::upstream::sync::{Overlay, Placed, place};

/// Arguments of `toolgate mcp`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct McpArgs {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    action: Option<McpAction>,
}

impl McpArgs {
    /// The options of the sidecar this command runs (an MCP session on stdio); `None` for
    /// `mcp sync`, which runs none.
    pub(super) fn serving(&self) -> Option<&Common> {
        self.action.is_none().then_some(&self.common)
    }
}

/// `toolgate mcp` subcommands.
#[derive(Debug, Subcommand)]
enum McpAction {
    /// Connect to every `[[mcp.upstreams]]`, then write each exposed tool's manifest
    /// (`schemas/tools/<prefix>.<tool>.json`, pinned to its descriptor), create missing overlays
    /// (`schemas/mcp/<upstream>.json`) and regenerate the Cedar schema.
    Sync(Common),
}

/// Runs the subcommand.
pub fn run(args: &McpArgs) -> anyhow::Result<ExitCode> {
    match &args.action {
        Some(McpAction::Sync(c)) => sync(c),
        None => {
            let cfg = args.common.config()?;
            let token = token(&cfg.mcp)?;
            super::serve::run_with(&args.common, Some(StdioFront { token }))
        }
    }
}

/// The agent's token: `[mcp] token_env` (default `TOOLGATE_TOKEN`), else `[mcp] token_file`.
fn token(mcp: &crate::upstream::McpSettings) -> anyhow::Result<String> {
    if let Ok(t) = std::env::var(&mcp.token_env)
        && !t.trim().is_empty()
    {
        return Ok(t.trim().to_owned());
    }
    if let Some(file) = &mcp.token_file {
        let t = std::fs::read_to_string(file).map_err(|e| {
            anyhow::anyhow!("cannot read `[mcp] token_file` {}: {e}", file.display())
        })?;
        if !t.trim().is_empty() {
            return Ok(t.trim().to_owned());
        }
    }
    anyhow::bail!(
        "no agent token: set {} in the MCP client's `env` for this server, or `[mcp] token_file` in the config",
        mcp.token_env
    )
}

fn sync(common: &Common) -> anyhow::Result<ExitCode> {
    let cfg = common.config()?;
    if cfg.mcp.upstreams.is_empty() {
        anyhow::bail!("the config has no `[[mcp.upstreams]]`: nothing to sync");
    }
    let schemas = cfg.sources.schemas_dir.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .on_thread_park(crate::memory::on_park)
        .enable_all()
        .build()?;
    let exec = cfg.exec.clone();
    let mcp = cfg.mcp.clone();
    // Upstream stderr is printed screened, as `serve` logs it: a server that echoes its
    // environment or a key it was given must not put it on the operator's terminal.
    let gates = crate::redact::Gates::new(&cfg.redaction, cfg.gate_rules.clone())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let listed = runtime.block_on(async move {
        let runner = match &exec.root {
            Some(_) => {
                let launcher = std::env::current_exe()?;
                Some(std::sync::Arc::new(
                    crate::exec::Runner::start(exec, launcher)
                        .await
                        .map_err(|e| anyhow::anyhow!("{e}"))?,
                ))
            }
            None => None,
        };
        let screen: crate::upstream::Screen =
            std::sync::Arc::new(move |l: &str| gates.redactor().redact(l));
        let hub = crate::upstream::Hub::start(&mcp, runner, screen);
        hub.settled(std::time::Duration::from_secs(60)).await;
        let out: Vec<_> = mcp
            .upstreams
            .iter()
            .map(|u| {
                let status = hub
                    .status()
                    .into_iter()
                    .find(|s| s.name == u.name)
                    .map(|s| (s.state, s.error));
                (u.clone(), status, hub.descriptors(&u.name))
            })
            .collect();
        hub.shutdown(std::time::Duration::from_secs(10)).await;
        Ok::<_, anyhow::Error>(out)
    })?;
    let tools_dir = schemas.join("tools");
    let overlays = schemas.join("mcp");
    std::fs::create_dir_all(&overlays)?;
    let mut failed = false;
    for (u, status, descriptors) in listed {
        let Some(("up", _)) = status.as_ref().map(|(s, e)| (*s, e)) else {
            let why = status.and_then(|(_, e)| e).unwrap_or_default();
            eprintln!(
                "error: upstream `{}` is not up: {why}; its manifests are left as they are",
                u.name
            );
            failed = true;
            continue;
        };
        let overlay_path = overlays.join(format!("{}.json", u.name));
        let overlay = match std::fs::read_to_string(&overlay_path) {
            Ok(text) => Overlay::parse(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", overlay_path.display()))?,
            Err(_) => {
                std::fs::write(&overlay_path, "{\n  \"tools\": {}\n}\n")?;
                println!("created {}", overlay_path.display());
                Overlay::default()
            }
        };
        let placed = place(
            &u.name,
            &u.prefix,
            &cfg.mcp.separator,
            &descriptors,
            &overlay,
        );
        let mut keep = std::collections::BTreeSet::new();
        for p in &placed {
            match p {
                Placed::Exposed {
                    name,
                    manifest,
                    from,
                    open_world,
                } => {
                    let path = tools_dir.join(format!("{name}.json"));
                    if let Some(owner) = owned_by_another(&path, &u.name) {
                        eprintln!(
                            "error: `{}`'s tool `{name}` would replace {} ({owner}); it is not exposed. Give the upstream a `prefix`, or hide the tool in {} (`\"expose\": false`)",
                            u.name,
                            path.display(),
                            overlay_path.display()
                        );
                        failed = true;
                        continue;
                    }
                    let mut text = serde_json::to_string_pretty(manifest)?;
                    text.push('\n');
                    if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                        std::fs::write(&path, &text)?;
                    }
                    keep.insert(path);
                    println!(
                        "exposed {name} ({} {}, from {from}{})",
                        manifest["classification"].as_str().unwrap_or_default(),
                        manifest["risk"].as_str().unwrap_or_default(),
                        if *open_world { "; open world" } else { "" }
                    );
                }
                Placed::Hidden { tool, why } => println!("hidden  {}.{tool}: {why}", u.name),
            }
        }
        remove_stale(&tools_dir, &u.name, &keep)?;
    }
    let (text, tools) = match crate::policy::schema_text(&schemas) {
        Ok(t) => t,
        Err(e) => {
            super::report_load_error(&e);
            return Ok(ExitCode::from(1));
        }
    };
    let path = schemas.join(crate::policy::schema_gen::SCHEMA_FILE);
    std::fs::write(&path, &text)?;
    println!("wrote {} ({} tools)", path.display(), tools.len());
    Ok(ExitCode::from(u8::from(failed)))
}

/// Whose manifest `path` is when it is not `upstream`'s: a tool of another upstream, or one
/// of the sidecar's own (an upstream mounted without a prefix may name its tools anything).
fn owned_by_another(path: &Path, upstream: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let owner = serde_json::from_str::<Value>(&text).ok().and_then(|v| {
        v.pointer("/mcp/upstream")
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    match owner {
        Some(o) if o == upstream => None,
        Some(o) => Some(format!("a tool of the upstream `{o}`")),
        None => Some("a tool that is not an MCP upstream's".to_owned()),
    }
}

/// Removes `upstream`'s generated manifests that are no longer exposed.
fn remove_stale(
    dir: &Path,
    upstream: &str,
    keep: &std::collections::BTreeSet<std::path::PathBuf>,
) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)?.flatten() {
        let path = entry.path();
        if keep.contains(&path) || path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let ours = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| {
                v.pointer("/mcp/upstream")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .is_some_and(|u| u == upstream);
        if ours {
            std::fs::remove_file(&path)?;
            println!("removed {}", path.display());
        }
    }
    Ok(())
}
