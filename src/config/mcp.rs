//! `[mcp]` and `[[mcp.upstreams]]` → [`McpSettings`]: the MCP gateway's upstreams (a stdio
//! program run in the exec sandbox, or a streamable-HTTP URL), the namespace separator, where
//! `toolgate mcp` (stdio) finds the agent's token, and the bounds on what one principal holds
//! (sessions, their idle lifetime, held calls).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::tools::{Access, LimitOverrides};
use crate::upstream::{
    DEFAULT_MAX_HELD_CALLS_PER_PRINCIPAL, DEFAULT_MAX_SESSIONS_PER_PRINCIPAL, DEFAULT_SEPARATOR,
    DEFAULT_SESSION_IDLE_SECS, HttpSpec, McpSettings, RelaySet, StdioSpec, Transport, UpstreamSpec,
};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMcp {
    separator: Option<String>,
    token_env: Option<String>,
    token_file: Option<PathBuf>,
    #[serde(default)]
    allowed_hosts: Vec<String>,
    hold_max_secs: Option<u64>,
    max_sessions_per_principal: Option<usize>,
    session_idle_secs: Option<u64>,
    max_held_calls_per_principal: Option<usize>,
    #[serde(default)]
    upstreams: Vec<RawUpstream>,
}

impl RawMcp {
    /// The token file, resolved (it joins the protected set).
    pub(super) fn token_file(&self, base: &Path) -> Option<PathBuf> {
        self.token_file.as_ref().map(|p| base.join(p))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    name: String,
    prefix: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    #[serde(default)]
    writes: Vec<String>,
    #[serde(default)]
    reads: Vec<String>,
    #[serde(default)]
    network: bool,
    #[serde(default)]
    limits: LimitOverrides,
    url: Option<String>,
    bearer_env: Option<String>,
    call_timeout_ms: Option<u64>,
    #[serde(default)]
    relay: Vec<String>,
}

/// Names of upstreams and prefixes: what a file name and a tool-name part may hold.
fn plain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 48
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Validates `[mcp]`; `exec_root` says whether stdio upstreams have a sandbox to run in.
pub(super) fn settings(
    raw: RawMcp,
    base: &Path,
    exec_root: bool,
) -> Result<McpSettings, Vec<(String, String)>> {
    let mut problems: Vec<(String, String)> = Vec::new();
    let separator = raw
        .separator
        .unwrap_or_else(|| DEFAULT_SEPARATOR.to_owned());
    if !matches!(separator.as_str(), "." | "_" | "__" | "-") {
        problems.push((
            format!("`mcp.separator = \"{separator}\"` is not one of \".\", \"_\", \"__\", \"-\""),
            "use \".\" (MCP names) or \"__\" for clients that allow only [A-Za-z0-9_-] in tool names".to_owned(),
        ));
    }
    let mut names = BTreeSet::new();
    let mut prefixes = BTreeSet::new();
    let mut upstreams = Vec::new();
    for (i, u) in raw.upstreams.into_iter().enumerate() {
        let at = format!("mcp.upstreams[{i}]");
        if !plain(&u.name) {
            problems.push((
                format!("`{at}.name = \"{}\"` is not a plain name", u.name),
                "use 1 to 48 characters from a-z, A-Z, 0-9, `_` and `-`".to_owned(),
            ));
            continue;
        }
        if !names.insert(u.name.clone()) {
            problems.push((
                format!("`{at}.name`: the upstream `{}` is configured twice", u.name),
                "give each upstream a name of its own".to_owned(),
            ));
        }
        let prefix = u.prefix.clone().unwrap_or_else(|| u.name.clone());
        // `prefix = ""` mounts the upstream's tools under their own names (opt-in; `toolgate
        // mcp sync` refuses a name another tool has).
        if !prefix.is_empty() && !plain(&prefix) {
            problems.push((
                format!("`{at}.prefix = \"{prefix}\"` is not a plain name"),
                "use 1 to 48 characters from a-z, A-Z, 0-9, `_` and `-`".to_owned(),
            ));
        }
        if !prefixes.insert(prefix.clone()) {
            problems.push((
                if prefix.is_empty() {
                    format!(
                        "`{at}.prefix = \"\"`: another upstream is mounted without a prefix already"
                    )
                } else {
                    format!("`{at}.prefix`: two upstreams share the prefix `{prefix}`")
                },
                "their tools would collide; give one a `prefix` of its own".to_owned(),
            ));
        }
        let transport = match (u.command, u.url) {
            (Some(command), None) => {
                if !exec_root {
                    problems.push((
                        format!("`{at}` (`{}`) is a stdio upstream, but `[exec] root` is not set", u.name),
                        "stdio upstreams run inside the exec sandbox: set `[exec] root` (their working directory is below it)".to_owned(),
                    ));
                }
                if command.trim().is_empty() {
                    problems.push((
                        format!("`{at}.command` is empty"),
                        "name the program (an absolute path, or a name on the sidecar's PATH)"
                            .to_owned(),
                    ));
                }
                if u.bearer_env.is_some() {
                    problems.push((
                        format!("`{at}.bearer_env` is for `url` upstreams"),
                        "pass a stdio upstream its credentials in `env`".to_owned(),
                    ));
                }
                Transport::Stdio(Box::new(StdioSpec {
                    command,
                    args: u.args,
                    env: u.env.into_iter().collect(),
                    cwd: u.cwd.unwrap_or_else(|| ".".to_owned()),
                    access: Access {
                        writes: u.writes,
                        reads: u.reads,
                        network: u.network,
                    },
                    limits: u.limits,
                }))
            }
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    problems.push((
                        format!("`{at}.url = \"{url}\"` is not an http:// or https:// URL"),
                        "give the upstream's streamable-HTTP MCP endpoint, e.g. `http://127.0.0.1:3001/mcp`".to_owned(),
                    ));
                }
                if !u.args.is_empty() || !u.env.is_empty() || u.cwd.is_some() {
                    problems.push((
                        format!("`{at}`: `args`, `env` and `cwd` are for `command` upstreams"),
                        "remove them, or run the upstream as a stdio `command`".to_owned(),
                    ));
                }
                Transport::Http(HttpSpec {
                    url,
                    bearer_env: u.bearer_env,
                })
            }
            (Some(_), Some(_)) => {
                problems.push((
                    format!("`{at}` has both `command` and `url`"),
                    "an upstream is either a stdio program (`command`) or a streamable-HTTP endpoint (`url`)".to_owned(),
                ));
                continue;
            }
            (None, None) => {
                problems.push((
                    format!("`{at}` has neither `command` nor `url`"),
                    "give a stdio program (`command`, `args`) or a streamable-HTTP endpoint (`url`)".to_owned(),
                ));
                continue;
            }
        };
        let call_timeout_ms = u.call_timeout_ms.unwrap_or(120_000);
        if call_timeout_ms == 0 {
            problems.push((
                format!("`{at}.call_timeout_ms` must be greater than zero"),
                "omit it for the default (120000)".to_owned(),
            ));
        }
        let mut relay = RelaySet::default();
        for what in &u.relay {
            match what.as_str() {
                "logging" => relay.logging = true,
                "sampling" => relay.sampling = true,
                "elicitation" => relay.elicitation = true,
                other => problems.push((
                    format!("`{at}.relay` lists `{other}`, which is not something toolgate relays"),
                    format!(
                        "list any of {}: what the upstream may send to the client of the call it runs",
                        RelaySet::NAMES.map(|n| format!("\"{n}\"")).join(", ")
                    ),
                )),
            }
        }
        upstreams.push(UpstreamSpec {
            name: u.name,
            prefix,
            transport,
            call_timeout: Duration::from_millis(call_timeout_ms.max(1)),
            relay,
        });
    }
    let token_env = raw.token_env.unwrap_or_else(|| "TOOLGATE_TOKEN".to_owned());
    if token_env.is_empty() {
        problems.push((
            "`mcp.token_env` is empty".to_owned(),
            "name the environment variable `toolgate mcp` reads the agent's token from".to_owned(),
        ));
    }
    let max_sessions_per_principal = raw
        .max_sessions_per_principal
        .unwrap_or(DEFAULT_MAX_SESSIONS_PER_PRINCIPAL);
    if !(1..=100_000).contains(&max_sessions_per_principal) {
        problems.push((
            format!("`mcp.max_sessions_per_principal` = {max_sessions_per_principal} is out of range"),
            format!("use a value from 1 to 100000 (default {DEFAULT_MAX_SESSIONS_PER_PRINCIPAL}): past it, a principal's next `initialize` is answered 429"),
        ));
    }
    let session_idle_secs = raw.session_idle_secs.unwrap_or(DEFAULT_SESSION_IDLE_SECS);
    if !(1..=86_400).contains(&session_idle_secs) {
        problems.push((
            format!("`mcp.session_idle_secs` = {session_idle_secs} is out of range"),
            format!("use a value from 1 to 86400 seconds (default {DEFAULT_SESSION_IDLE_SECS}): an MCP session with no request in progress ends after it"),
        ));
    }
    let max_held_calls_per_principal = raw
        .max_held_calls_per_principal
        .unwrap_or(DEFAULT_MAX_HELD_CALLS_PER_PRINCIPAL);
    if max_held_calls_per_principal > 1024 {
        problems.push((
            format!("`mcp.max_held_calls_per_principal` = {max_held_calls_per_principal} is out of range"),
            format!("use a value from 0 (never hold: answer pending at once) to 1024 (default {DEFAULT_MAX_HELD_CALLS_PER_PRINCIPAL})"),
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(McpSettings {
        separator,
        upstreams,
        token_env,
        token_file: raw.token_file.map(|p| base.join(p)),
        allowed_hosts: raw.allowed_hosts,
        hold_max: Duration::from_secs(raw.hold_max_secs.unwrap_or(3600)),
        max_sessions_per_principal,
        session_idle: Duration::from_secs(session_idle_secs),
        max_held_calls_per_principal,
    })
}
