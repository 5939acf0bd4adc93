//! `toolgate connect <client>`: writes (or, with `--dry-run`, shows as a diff) the entry that
//! makes an MCP client reach toolgate, merged into the client's own config file.
//!
//! Over stdio the entry launches `toolgate mcp` with this config, a `--listen` and a
//! `--data-dir` of its own (a `serve` beside it keeps its port and its data directory, which
//! only one process may hold), the agent's token in `env` unless `[mcp] token_file` names one,
//! and this shell's `PATH` when the config has upstreams to find. Over HTTP it points at the sidecar's `/mcp` with the bearer header. Every other entry
//! of the file is kept as it was; a file that is not JSON is refused and left unchanged.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};
use serde_json::{Map, Value, json};

use super::Common;

/// The MCP clients `connect` knows how to configure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Client {
    /// Claude Desktop (`claude_desktop_config.json`, stdio only).
    ClaudeDesktop,
    /// Claude Code (the project's `.mcp.json`).
    ClaudeCode,
    /// Cursor (`~/.cursor/mcp.json`).
    Cursor,
    /// VS Code (the workspace's `.vscode/mcp.json`).
    Vscode,
}

/// How the client reaches toolgate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Transport {
    /// The client launches `toolgate mcp` (a sidecar of its own).
    Stdio,
    /// The client calls a running `toolgate serve` at `/mcp`.
    Http,
}

/// Arguments of `toolgate connect`.
#[derive(Debug, Args)]
pub struct ConnectArgs {
    /// The client to configure.
    #[arg(value_enum)]
    client: Client,
    #[command(flatten)]
    common: Common,
    /// `stdio` (default): the client launches `toolgate mcp`; `http`: it calls `/mcp` of a
    /// running `toolgate serve`.
    #[arg(long, value_enum, default_value_t = Transport::Stdio)]
    transport: Transport,
    /// The client's config file (default: where the client reads it).
    #[arg(long)]
    file: Option<PathBuf>,
    /// The entry's name in the client's list of servers.
    #[arg(long, default_value = "toolgate")]
    name: String,
    /// stdio: the address `toolgate mcp` listens on for approvers (default: the config's
    /// port plus one, so a `serve` on the config's port keeps it).
    #[arg(long = "mcp-listen")]
    mcp_listen: Option<String>,
    /// stdio: the data directory of `toolgate mcp` (default: `data-mcp` beside the config).
    #[arg(long = "mcp-data-dir")]
    mcp_data_dir: Option<PathBuf>,
    /// Show the change as a diff; write nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Runs `toolgate connect`.
pub fn run(args: &ConnectArgs) -> anyhow::Result<ExitCode> {
    let file = match &args.file {
        Some(f) => f.clone(),
        None => default_file(args.client)?,
    };
    if args.name.trim().is_empty() {
        bail!("`--name` is empty: give the entry a name, e.g. `--name toolgate`");
    }
    let entry = entry(args)?;
    let old = match std::fs::read_to_string(&file) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => bail!("cannot read {}: {e}", file.display()),
    };
    let new = merged(args.client, old.as_deref(), &args.name, entry)
        .with_context(|| format!("{} is left unchanged", file.display()))?;
    let before = old.clone().unwrap_or_default();
    if args.dry_run {
        print!("{}", diff(&file, &before, &new));
        if before == new {
            eprintln!(
                "{} already has this entry; nothing to change",
                file.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    if before == new {
        eprintln!("{} already has this entry; nothing changed", file.display());
        return Ok(ExitCode::SUCCESS);
    }
    write(&file, &new)?;
    eprintln!(
        "wrote `{}` to {}{}",
        args.name,
        file.display(),
        match args.client {
            Client::ClaudeDesktop => "; restart Claude Desktop to load it",
            _ => "",
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// Where `client` reads its MCP servers from.
fn default_file(client: Client) -> anyhow::Result<PathBuf> {
    let home = || {
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .context("HOME is not set: name the client's config file with `--file`")
    };
    Ok(match client {
        Client::ClaudeDesktop if cfg!(target_os = "macos") => {
            home()?.join("Library/Application Support/Claude/claude_desktop_config.json")
        }
        Client::ClaudeDesktop => std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .map_or_else(|| home().map(|h| h.join(".config")), Ok)?
            .join("Claude/claude_desktop_config.json"),
        Client::ClaudeCode => PathBuf::from(".mcp.json"),
        Client::Cursor => home()?.join(".cursor/mcp.json"),
        Client::Vscode => PathBuf::from(".vscode/mcp.json"),
    })
}

/// The server entry for `args`, in the shape every supported client reads (VS Code and
/// Claude Code also take `type`, added by [`merged`]).
fn entry(args: &ConnectArgs) -> anyhow::Result<Map<String, Value>> {
    let cfg = args.common.config()?;
    let config = match &args.common.config {
        Some(c) => Some(std::path::absolute(c).context("the config file's path")?),
        None => None,
    };
    let mut e = Map::new();
    match args.transport {
        Transport::Http => {
            if args.client == Client::ClaudeDesktop {
                bail!(
                    "Claude Desktop's config file launches servers over stdio only; use `--transport stdio` (the default), or add the URL as a custom connector in Claude Desktop"
                );
            }
            let token = agent_token(&cfg.mcp.token_env)?;
            let mut at = cfg.listen;
            if at.ip().is_unspecified() {
                // Listening on every address: the client, on this machine, uses loopback.
                at.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            e.insert("url".to_owned(), json!(format!("http://{at}/mcp")));
            e.insert(
                "headers".to_owned(),
                json!({"Authorization": format!("Bearer {token}")}),
            );
        }
        Transport::Stdio => {
            let exe = std::env::current_exe().context("the path of this toolgate binary")?;
            let listen = match &args.mcp_listen {
                Some(l) => l.clone(),
                None => {
                    let mut next = cfg.listen;
                    next.set_port(cfg.listen.port().checked_add(1).context(
                        "the config's port is 65535: choose the stdio sidecar's with `--mcp-listen`",
                    )?);
                    next.to_string()
                }
            };
            let data = match &args.mcp_data_dir {
                Some(d) => std::path::absolute(d).context("`--mcp-data-dir`")?,
                None => {
                    let base = config
                        .as_deref()
                        .and_then(Path::parent)
                        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
                    std::path::absolute(base.join("data-mcp")).context("the data directory")?
                }
            };
            let mut argv = vec![json!("mcp")];
            if let Some(c) = &config {
                argv.extend([json!("--config"), json!(c.display().to_string())]);
            }
            argv.extend([
                json!("--listen"),
                json!(listen),
                json!("--data-dir"),
                json!(data.display().to_string()),
            ]);
            e.insert("command".to_owned(), json!(exe.display().to_string()));
            e.insert("args".to_owned(), Value::Array(argv));
            let mut env = Map::new();
            if cfg.mcp.token_file.is_none() {
                env.insert(
                    cfg.mcp.token_env.clone(),
                    json!(agent_token(&cfg.mcp.token_env)?),
                );
            }
            // The sidecar finds the stdio upstreams' programs on PATH, and desktop clients
            // start servers with a bare one: this shell's, where they were found.
            if !cfg.mcp.upstreams.is_empty()
                && let Ok(path) = std::env::var("PATH")
            {
                env.insert("PATH".to_owned(), json!(path));
            }
            if !env.is_empty() {
                e.insert("env".to_owned(), Value::Object(env));
            }
        }
    }
    Ok(e)
}

/// The agent's token, from the variable `[mcp] token_env` names.
fn agent_token(var: &str) -> anyhow::Result<String> {
    match std::env::var(var) {
        Ok(t) if !t.trim().is_empty() => Ok(t.trim().to_owned()),
        _ => bail!(
            "set {var} to the agent's token (it is written into the client's config), or set `[mcp] token_file` in the config (stdio: nothing secret is written then)"
        ),
    }
}

/// `old` (the client's file, if any) with `entry` set as server `name`, every other entry
/// kept; pretty-printed JSON with a final newline.
fn merged(
    client: Client,
    old: Option<&str>,
    name: &str,
    mut entry: Map<String, Value>,
) -> anyhow::Result<String> {
    let mut doc: Value = match old {
        None => json!({}),
        Some(text) if text.trim().is_empty() => json!({}),
        Some(text) => serde_json::from_str(text).map_err(|e| {
            anyhow::anyhow!(
                "it is not JSON (line {}, column {}: {e}); fix it, or name another file with `--file`",
                e.line(),
                e.column()
            )
        })?,
    };
    let key = match client {
        Client::Vscode => "servers",
        _ => "mcpServers",
    };
    if matches!(client, Client::Vscode | Client::ClaudeCode) {
        let kind = if entry.contains_key("url") {
            "http"
        } else {
            "stdio"
        };
        entry.insert("type".to_owned(), json!(kind));
    }
    let Some(top) = doc.as_object_mut() else {
        bail!("its top level is not a JSON object");
    };
    let servers = top.entry(key).or_insert_with(|| json!({}));
    let Some(servers) = servers.as_object_mut() else {
        bail!("its `{key}` is not a JSON object");
    };
    servers.insert(name.to_owned(), Value::Object(entry));
    let mut text = serde_json::to_string_pretty(&doc).context("the merged config")?;
    text.push('\n');
    Ok(text)
}

/// A unified diff of `file` from `before` to `after`.
fn diff(file: &Path, before: &str, after: &str) -> String {
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(
            &format!("{} (now)", file.display()),
            &format!("{} (with toolgate)", file.display()),
        )
        .to_string()
}

/// Writes `text` to `file` through a temporary file and a rename, so the client never reads
/// half a file; a new file (it may hold the agent's token) is readable by its owner only.
fn write(file: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mode = std::fs::metadata(file).map_or(0o600, |m| m.permissions().mode() & 0o777);
    let tmp = dir.join(format!(
        ".{}.toolgate-{}",
        file.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("config"),
        std::process::id()
    ));
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    let written = out
        .write_all(text.as_bytes())
        .and_then(|()| out.sync_all())
        .and_then(|()| std::fs::rename(&tmp, file));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        bail!("cannot write {}: {e}", file.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_entries_and_keys_are_kept() {
        let old = r#"{"theme": "dark", "mcpServers": {"other": {"command": "x"}}}"#;
        let mut e = Map::new();
        e.insert("command".to_owned(), json!("/bin/toolgate"));
        let new = merged(Client::Cursor, Some(old), "toolgate", e.clone()).unwrap();
        let v: Value = serde_json::from_str(&new).unwrap();
        assert_eq!(v["theme"], "dark");
        assert_eq!(v["mcpServers"]["other"]["command"], "x");
        assert_eq!(v["mcpServers"]["toolgate"]["command"], "/bin/toolgate");
        let vs = merged(Client::Vscode, None, "toolgate", e).unwrap();
        let v: Value = serde_json::from_str(&vs).unwrap();
        assert_eq!(v["servers"]["toolgate"]["type"], "stdio");
    }

    #[test]
    fn a_file_that_is_not_json_is_refused() {
        let e = Map::new();
        let err = merged(Client::Vscode, Some("{ // comment\n}"), "t", e).unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
    }
}
