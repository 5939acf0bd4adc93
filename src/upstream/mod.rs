//! MCP upstreams: the real MCP servers behind toolgate's MCP gateway (`[[mcp.upstreams]]`).
//!
//! Each upstream is kept connected by a supervisor of its own (`link`): a stdio upstream is
//! started inside the exec sandbox (jailed working directory, rlimits, pids cgroup, no network
//! unless declared) as a long-lived launcher session; a streamable-HTTP upstream is reached
//! at its URL. The supervisor lists the upstream's tools (again on
//! `notifications/tools/list_changed`), pins each descriptor's hash, and restarts a crashed
//! upstream with exponential backoff; its tools answer "unavailable" meanwhile, and its
//! stderr is screened by the output gate before it is logged.
//!
//! Owns: connections, the live descriptors and their hashes ([`pin`]), and forwarding a call
//! that the pipeline allowed. Does not own: any decision (see `gateway`), the manifests
//! compiled from descriptors (see `tools`, written by `toolgate mcp sync` through
//! [`sync`]), or the MCP front end (see `mcp`).

mod link;
pub mod pin;
pub mod sync;
mod template;

pub use sync::mounted;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolResult, JsonObject};
use serde::Serialize;

pub use link::{ProgressSink, Screen};
pub use pin::{Descriptor, descriptor_pin};
pub use template::template_matches;

use crate::tools::{Access, LimitOverrides};

/// How toolgate names an upstream's tools by default: `<upstream>.<tool>`.
pub const DEFAULT_SEPARATOR: &str = ".";

/// The validated `[mcp]` table.
#[derive(Debug, Clone)]
pub struct McpSettings {
    /// Between an upstream's prefix and its tool's name (`.` by default; `__` for clients
    /// that allow only `[A-Za-z0-9_-]` in tool names).
    pub separator: String,
    /// The upstreams, in the order written.
    pub upstreams: Vec<UpstreamSpec>,
    /// `toolgate mcp` (stdio): the environment variable holding the agent's token.
    pub token_env: String,
    /// `toolgate mcp` (stdio): a file holding the agent's token (read when the variable is
    /// not set).
    pub token_file: Option<std::path::PathBuf>,
    /// `Host` values `/mcp` accepts besides loopback (DNS-rebinding defence).
    pub allowed_hosts: Vec<String>,
    /// Longest a held pending call waits for its human (capped by the approval's TTL).
    pub hold_max: Duration,
    /// MCP sessions one principal may have open at once over HTTP.
    pub max_sessions_per_principal: usize,
    /// How long an MCP session over HTTP with no request in progress lives.
    pub session_idle: Duration,
    /// Calls one principal may have held at once while humans decide (more are answered
    /// pending at once).
    pub max_held_calls_per_principal: usize,
}

/// Default `[mcp] max_sessions_per_principal`.
pub const DEFAULT_MAX_SESSIONS_PER_PRINCIPAL: usize = 64;
/// Default `[mcp] session_idle_secs`.
pub const DEFAULT_SESSION_IDLE_SECS: u64 = 600;
/// Default `[mcp] max_held_calls_per_principal`.
pub const DEFAULT_MAX_HELD_CALLS_PER_PRINCIPAL: usize = 4;

impl Default for McpSettings {
    fn default() -> Self {
        McpSettings {
            separator: DEFAULT_SEPARATOR.to_owned(),
            upstreams: Vec::new(),
            token_env: "TOOLGATE_TOKEN".to_owned(),
            token_file: None,
            allowed_hosts: Vec::new(),
            hold_max: Duration::from_secs(3600),
            max_sessions_per_principal: DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
            session_idle: Duration::from_secs(DEFAULT_SESSION_IDLE_SECS),
            max_held_calls_per_principal: DEFAULT_MAX_HELD_CALLS_PER_PRINCIPAL,
        }
    }
}

/// One `[[mcp.upstreams]]` entry.
#[derive(Debug, Clone)]
pub struct UpstreamSpec {
    /// Its name: the overlay file `schemas/mcp/<name>.json`, logs, metrics.
    pub name: String,
    /// What its tools are named under: `<prefix><separator><tool>` (default: `name`).
    pub prefix: String,
    /// How it is reached.
    pub transport: Transport,
    /// Longest a call to it may take, unless the tool's manifest says less.
    pub call_timeout: Duration,
    /// What of the upstream's own messages during a call reach the calling client.
    pub relay: RelaySet,
}

/// What an upstream may send on to the client whose call it is running
/// (`[[mcp.upstreams]] relay`). Nothing by default: an upstream is not trusted to talk to the
/// agent's client or its human outside its tool results.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelaySet {
    /// `notifications/message` (its log), screened by the output gate.
    pub logging: bool,
    /// `sampling/createMessage`: asking the client's model for a completion.
    pub sampling: bool,
    /// `elicitation/create`: asking the client's human for input.
    pub elicitation: bool,
}

impl RelaySet {
    /// The names `relay` accepts.
    pub const NAMES: [&str; 3] = ["logging", "sampling", "elicitation"];

    /// Whether anything is relayed (calls to the upstream then go one at a time, so what it
    /// sends during a call is known to belong to that call).
    pub fn any(self) -> bool {
        self.logging || self.sampling || self.elicitation
    }
}

/// A boxed future, for the relay's object-safe methods.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// The client a forwarded call came from, as the upstream may reach it during the call (what
/// the upstream's `relay` allows): the MCP front end implements it over the client's session.
/// (Logging and sampling are deprecated by SEP-2577, but clients on 2025-11-25 still use them.)
#[allow(
    deprecated,
    reason = "logging and sampling still serve clients on 2025-11-25"
)]
pub trait Relay: Send + Sync {
    /// Passes on one log message (the relay filters by the client's level and screens it).
    fn log(&self, message: rmcp::model::LoggingMessageNotificationParam) -> BoxFuture<'_, ()>;
    /// Asks the client's model for a completion.
    fn sample(
        &self,
        request: rmcp::model::CreateMessageRequestParams,
    ) -> BoxFuture<'_, Result<rmcp::model::CreateMessageResult, rmcp::ErrorData>>;
    /// Asks the client's human for input.
    fn elicit(
        &self,
        request: rmcp::model::ElicitRequestParams,
    ) -> BoxFuture<'_, Result<rmcp::model::ElicitResult, rmcp::ErrorData>>;
}

/// A client session subscribed to an upstream resource (`resources/subscribe`); held weakly by
/// the hub, so a session that ends stops being told and its subscription lapses.
pub trait Subscriber: Send + Sync {
    /// The resource at `uri` changed (`notifications/resources/updated`).
    fn updated(&self, uri: &str) -> BoxFuture<'_, ()>;
}

/// How an upstream is reached.
#[derive(Debug, Clone)]
pub enum Transport {
    /// A program spoken to over stdin and stdout, inside the exec sandbox.
    Stdio(Box<StdioSpec>),
    /// A streamable-HTTP MCP endpoint.
    Http(HttpSpec),
}

/// A stdio upstream's program and sandbox.
#[derive(Debug, Clone)]
pub struct StdioSpec {
    /// The program: an absolute path, or a name looked up on the sidecar's `PATH` at start.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables set for it (nothing else of the sidecar's is passed on).
    pub env: Vec<(String, String)>,
    /// Its working directory below the service root.
    pub cwd: String,
    /// What it may reach beyond reading the service root.
    pub access: Access,
    /// Resource limits over `[exec.limits]`.
    pub limits: LimitOverrides,
}

/// A streamable-HTTP upstream.
#[derive(Debug, Clone)]
pub struct HttpSpec {
    /// `http://` or `https://` URL of its MCP endpoint.
    pub url: String,
    /// An environment variable holding a bearer token to send it.
    pub bearer_env: Option<String>,
}

/// What toolgate knows of one upstream tool now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Live {
    /// The upstream is up and lists the tool; `pin` is its descriptor's hash.
    Listed {
        /// `sha256:<hex>` of the descriptor.
        pin: String,
    },
    /// The upstream is up but does not list the tool.
    Missing,
    /// The upstream is not connected (starting, crashed, restarting): why.
    Unavailable(String),
    /// No upstream of that name is configured.
    Unknown,
}

/// Why a forwarded call failed (the call was allowed; the upstream did not answer it).
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The upstream is not connected.
    #[error("the upstream `{0}` is unavailable: {1}")]
    Unavailable(String, String),
    /// It did not answer in time.
    #[error("the upstream `{0}` did not answer within {1} ms")]
    Timeout(String, u64),
    /// It answered with a protocol error, or the connection broke.
    #[error("the upstream `{0}` failed the call: {1}")]
    Failed(String, String),
    /// The caller cancelled the call; the upstream was told.
    #[error("the call to the upstream `{0}` was cancelled by the caller")]
    Cancelled(String),
}

/// What a forwarded call reports back besides its result: progress, and the caller's
/// cancellation.
#[derive(Default)]
pub struct CallHooks {
    /// Where the upstream's progress goes.
    pub progress: Option<ProgressSink>,
    /// Completes when the caller cancels the call.
    pub cancelled: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
    /// The calling client, for what the upstream's `relay` lets it send there during the call.
    pub relay: Option<Arc<dyn Relay>>,
}

/// One upstream's state, for `/readyz` and `GET /v1/mcp/upstreams`.
#[derive(Debug, Clone, Serialize)]
pub struct UpstreamStatus {
    /// Its name.
    pub name: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// `up`, `starting` or `down`.
    pub state: &'static str,
    /// Why it is down, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Tools it lists now.
    pub tools: usize,
    /// Times it was (re)started.
    pub starts: u64,
    /// The server's name and version, as it said at initialization.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

/// How forwarded calls ended, in [`CALL_OUTCOMES`] order.
#[derive(Debug, Default)]
pub struct CallCounts([std::sync::atomic::AtomicU64; 6]);

/// The outcomes counted per upstream (`toolgate_mcp_upstream_calls_total{outcome}`): a
/// result, a result marked `isError`, and each [`CallError`].
pub const CALL_OUTCOMES: [&str; 6] = [
    "ok",
    "tool_error",
    "unavailable",
    "timeout",
    "failed",
    "cancelled",
];

impl CallCounts {
    fn add(&self, outcome: &Result<CallToolResult, CallError>) {
        let i = match outcome {
            Ok(r) if r.is_error == Some(true) => 1,
            Ok(_) => 0,
            Err(CallError::Unavailable(..)) => 2,
            Err(CallError::Timeout(..)) => 3,
            Err(CallError::Failed(..)) => 4,
            Err(CallError::Cancelled(..)) => 5,
        };
        if let Some(c) = self.0.get(i) {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Each outcome with its count.
    pub fn get(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        CALL_OUTCOMES
            .iter()
            .zip(&self.0)
            .map(|(o, c)| (*o, c.load(std::sync::atomic::Ordering::Relaxed)))
    }
}

/// The connected upstreams.
pub struct Hub {
    links: BTreeMap<String, Arc<link::Link>>,
    /// Forwarded calls' outcomes, per upstream.
    calls: BTreeMap<String, CallCounts>,
    changed: tokio::sync::broadcast::Sender<String>,
    separator: String,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("upstreams", &self.links.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Hub {
    /// Starts a supervisor per upstream (stdio ones need `runner`: the exec sandbox). Must be
    /// called inside a Tokio runtime.
    pub fn start(
        settings: &McpSettings,
        runner: Option<Arc<crate::exec::Runner>>,
        screen: Screen,
    ) -> Arc<Hub> {
        // HTTPS upstreams: rustls with ring, the provider the rest of the sidecar uses.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (changed, _) = tokio::sync::broadcast::channel(64);
        let mut links = BTreeMap::new();
        let mut calls = BTreeMap::new();
        for spec in &settings.upstreams {
            calls.insert(spec.name.clone(), CallCounts::default());
            let link = link::Link::new(spec.clone());
            link::supervise(
                Arc::clone(&link),
                runner.clone(),
                screen.clone(),
                changed.clone(),
            );
            links.insert(spec.name.clone(), link);
        }
        Arc::new(Hub {
            links,
            calls,
            changed,
            separator: settings.separator.clone(),
        })
    }

    /// The separator between prefix and tool name.
    pub fn separator(&self) -> &str {
        &self.separator
    }

    /// Whether any upstream is configured.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// Notified with an upstream's name when its tool list changed (or it came up or went
    /// down).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.changed.subscribe()
    }

    /// Tells subscribers that `upstream`'s tools may show differently (a descriptor approved).
    pub fn touch(&self, upstream: &str) {
        let _ = self.changed.send(upstream.to_owned());
    }

    /// Every upstream's state.
    pub fn status(&self) -> Vec<UpstreamStatus> {
        self.links.values().map(|l| l.status()).collect()
    }

    /// Waits until every upstream has been tried once (up or down), at most `wait`.
    pub async fn settled(&self, wait: Duration) {
        let end = tokio::time::Instant::now() + wait;
        for link in self.links.values() {
            let _ = tokio::time::timeout_at(end, link.tried()).await;
        }
    }

    /// What `upstream` lists as `tool` now.
    pub fn live(&self, upstream: &str, tool: &str) -> Live {
        match self.links.get(upstream) {
            None => Live::Unknown,
            Some(link) => link.live(tool),
        }
    }

    /// `upstream`'s live descriptors (empty when it is down).
    pub fn descriptors(&self, upstream: &str) -> Vec<Descriptor> {
        self.links
            .get(upstream)
            .map(|l| l.descriptors())
            .unwrap_or_default()
    }

    /// Forwards an allowed call to `upstream`'s `tool`, within `timeout`. Dropping the
    /// future cancels the call upstream (`notifications/cancelled`).
    pub async fn call(
        &self,
        upstream: &str,
        tool: &str,
        arguments: JsonObject,
        timeout: Duration,
        progress: Option<ProgressSink>,
        relay: Option<Arc<dyn Relay>>,
    ) -> Result<CallToolResult, CallError> {
        let link = self.link(upstream)?;
        // The upstream's own bound applies too (`call_timeout_ms`).
        let outcome = link
            .call(
                tool,
                arguments,
                timeout.min(link.call_timeout()),
                progress,
                relay,
            )
            .await;
        if let Some(c) = self.calls.get(upstream) {
            c.add(&outcome);
        }
        outcome
    }

    /// Forwarded calls' outcomes, per upstream.
    pub fn call_counts(&self) -> impl Iterator<Item = (&str, &CallCounts)> {
        self.calls.iter().map(|(n, c)| (n.as_str(), c))
    }

    /// Every upstream's resources, as `(upstream, resource)` JSON objects.
    pub async fn list_resources(&self) -> Vec<(String, serde_json::Value)> {
        let mut out = Vec::new();
        for (name, link) in &self.links {
            for r in link.list_resources().await {
                out.push((name.clone(), r));
            }
        }
        out
    }

    /// Reads `uri` from `upstream`.
    pub async fn read_resource(
        &self,
        upstream: &str,
        uri: &str,
        timeout: Duration,
    ) -> Result<serde_json::Value, CallError> {
        self.link(upstream)?.read_resource(uri, timeout).await
    }

    /// Every upstream's prompts, as `(upstream, prefix, prompt)`.
    pub async fn list_prompts(&self) -> Vec<(String, String, serde_json::Value)> {
        let mut out = Vec::new();
        for (name, link) in &self.links {
            for p in link.list_prompts().await {
                out.push((name.clone(), link.prefix().to_owned(), p));
            }
        }
        out
    }

    /// Gets `prompt` from `upstream`.
    pub async fn get_prompt(
        &self,
        upstream: &str,
        prompt: &str,
        arguments: Option<JsonObject>,
        timeout: Duration,
    ) -> Result<serde_json::Value, CallError> {
        self.link(upstream)?
            .get_prompt(prompt, arguments, timeout)
            .await
    }

    fn link(&self, upstream: &str) -> Result<&Arc<link::Link>, CallError> {
        self.links
            .get(upstream)
            .ok_or_else(|| CallError::Unavailable(upstream.to_owned(), "not configured".to_owned()))
    }

    /// Every upstream's resource templates, as `(upstream, template)` JSON objects.
    pub async fn list_resource_templates(&self) -> Vec<(String, serde_json::Value)> {
        let mut out = Vec::new();
        for (name, link) in &self.links {
            for t in link.list_resource_templates().await {
                out.push((name.clone(), t));
            }
        }
        out
    }

    /// Asks `upstream` for completions (`completion/complete`; a prompt reference names the
    /// upstream's own prompt).
    pub async fn complete(
        &self,
        upstream: &str,
        request: rmcp::model::CompleteRequestParams,
        timeout: Duration,
    ) -> Result<serde_json::Value, CallError> {
        self.link(upstream)?.complete(request, timeout).await
    }

    /// Subscribes `subscriber` to `upstream`'s resource `uri`: the upstream is asked once per
    /// URI, however many sessions subscribe, and its updates go to each live subscriber.
    pub async fn subscribe_resource(
        &self,
        upstream: &str,
        uri: &str,
        subscriber: &Arc<dyn Subscriber>,
        timeout: Duration,
    ) -> Result<(), CallError> {
        self.link(upstream)?
            .subscribe(uri, subscriber, timeout)
            .await
    }

    /// Ends `subscriber`'s subscription to `upstream`'s `uri` (the upstream is told when no
    /// session is left subscribed).
    pub async fn unsubscribe_resource(
        &self,
        upstream: &str,
        uri: &str,
        subscriber: &Arc<dyn Subscriber>,
        timeout: Duration,
    ) -> Result<(), CallError> {
        self.link(upstream)?
            .unsubscribe(uri, subscriber, timeout)
            .await
    }

    /// The upstream whose prefix starts `name` (`<prefix><separator><rest>`), and the rest;
    /// else the upstream mounted without a prefix, if there is one, and the whole name.
    pub fn split<'a>(&self, name: &'a str) -> Option<(String, &'a str)> {
        self.links
            .iter()
            .filter(|(_, link)| !link.prefix().is_empty())
            .find_map(|(upstream, link)| {
                name.strip_prefix(link.prefix())
                    .and_then(|r| r.strip_prefix(self.separator.as_str()))
                    .map(|rest| (upstream.clone(), rest))
            })
            .or_else(|| {
                self.links
                    .iter()
                    .find(|(_, link)| link.prefix().is_empty())
                    .map(|(upstream, _)| (upstream.clone(), name))
            })
    }

    /// Stops every upstream (their sessions end; stdio programs are stopped and cleaned
    /// up), waiting at most `wait`.
    pub async fn shutdown(&self, wait: Duration) {
        for link in self.links.values() {
            link.stop();
        }
        let end = tokio::time::Instant::now() + wait;
        for link in self.links.values() {
            let _ = tokio::time::timeout_at(end, link.stopped()).await;
        }
    }
}
