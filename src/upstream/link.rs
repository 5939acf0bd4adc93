//! One upstream's supervisor: connect (a sandboxed stdio session, or streamable HTTP),
//! initialize, list and pin its tools, follow `notifications/tools/list_changed`, and when
//! the connection ends, mark its tools unavailable and start it again after a backoff
//! (0.5 s doubling to 30 s; back to 0.5 s after a minute up).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

#[allow(
    deprecated,
    reason = "logging and sampling still serve clients on 2025-11-25"
)]
use rmcp::model::{
    CallToolRequestParams, CallToolResult, CancelledNotificationParam, ClientRequest,
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    GetPromptRequestParams, JsonObject, LoggingMessageNotificationParam, ProgressNotificationParam,
    ProgressToken, ReadResourceRequestParams, Request, ResourceUpdatedNotificationParam,
    ServerResult,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RequestContext, RoleClient, ServiceExt,
};
use serde_json::Value;
use tokio::io::AsyncBufReadExt;

use super::{
    CallError, Descriptor, Live, Relay, RelaySet, Subscriber, Transport, UpstreamSpec,
    UpstreamStatus,
};

/// The client of the call an upstream runs now, when its `relay` allows anything.
type Current = Arc<Mutex<Option<Arc<dyn Relay>>>>;

/// The sessions subscribed to each of an upstream's resource URIs.
type Subscriptions = Arc<Mutex<HashMap<String, Vec<Weak<dyn Subscriber>>>>>;

/// Resource URIs one upstream keeps subscriptions for (across every session).
const MAX_SUBSCRIBED_URIS: usize = 4096;

/// Masks secrets in an upstream's stderr line before it is logged (the output gate).
pub type Screen = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// Where progress of a forwarded call goes: `(progress, total, message)`.
pub type ProgressSink = tokio::sync::mpsc::UnboundedSender<(f64, Option<f64>, Option<String>)>;

const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Up this long, a crash starts the backoff over.
const STABLE: Duration = Duration::from_secs(60);
/// Initialization and listing must finish within this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a connected upstream's tools are listed again, notification or not.
const RELIST: Duration = Duration::from_secs(60);
/// Longest stderr line logged.
const STDERR_LINE_MAX: usize = 1024;

#[derive(Default)]
struct State {
    peer: Option<Peer<RoleClient>>,
    tools: BTreeMap<String, Descriptor>,
    up: bool,
    error: Option<String>,
    starts: u64,
    server: Option<String>,
}

/// One upstream and its live state.
pub(super) struct Link {
    spec: UpstreamSpec,
    state: Mutex<State>,
    tried: AtomicBool,
    tried_notify: tokio::sync::Notify,
    stop: tokio::sync::watch::Sender<bool>,
    stopped: tokio::sync::watch::Sender<bool>,
    progress: Arc<Mutex<HashMap<ProgressToken, ProgressSink>>>,
    /// With `relay`: one request at a time, so what the upstream sends meanwhile is known to
    /// belong to it.
    turn: tokio::sync::Mutex<()>,
    current: Current,
    subscriptions: Subscriptions,
    /// Subscribing and unsubscribing one at a time (the upstream is asked once per URI).
    subscribing: tokio::sync::Mutex<()>,
}

/// An upstream's turn: its request is the only one in flight, and `current` names its client.
struct Turn<'a> {
    _turn: tokio::sync::MutexGuard<'a, ()>,
    _current: CurrentGuard,
}

/// How long a call to an upstream that relays its log keeps its turn after the answer, for
/// log notifications sent before it that are still being handled.
const LOG_GRACE: Duration = Duration::from_millis(50);

/// Clears the call's client from its upstream when the call ends.
struct CurrentGuard(Current);

impl Drop for CurrentGuard {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

impl Link {
    pub(super) fn new(spec: UpstreamSpec) -> Arc<Link> {
        Arc::new(Link {
            spec,
            state: Mutex::default(),
            tried: AtomicBool::new(false),
            tried_notify: tokio::sync::Notify::new(),
            stop: tokio::sync::watch::channel(false).0,
            stopped: tokio::sync::watch::channel(false).0,
            progress: Arc::default(),
            turn: tokio::sync::Mutex::new(()),
            current: Arc::default(),
            subscriptions: Arc::default(),
            subscribing: tokio::sync::Mutex::new(()),
        })
    }

    /// With `relay`: waits for the upstream's turn (within `timeout`, which the wait uses up
    /// part of: what is left is returned), and makes `client` the one the upstream's messages
    /// go to until the turn is dropped. Without `relay`: no wait.
    async fn take_turn(
        &self,
        timeout: Duration,
        client: Option<Arc<dyn Relay>>,
    ) -> Result<(Option<Turn<'_>>, Duration), CallError> {
        if !self.spec.relay.any() {
            return Ok((None, timeout));
        }
        let started = tokio::time::Instant::now();
        let guard = tokio::time::timeout(timeout, self.turn.lock())
            .await
            .map_err(|_| {
                CallError::Timeout(
                    self.spec.name.clone(),
                    u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                )
            })?;
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = client;
        let left = timeout.saturating_sub(started.elapsed());
        Ok((
            Some(Turn {
                _turn: guard,
                _current: CurrentGuard(Arc::clone(&self.current)),
            }),
            left,
        ))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn prefix(&self) -> &str {
        &self.spec.prefix
    }

    pub(super) fn call_timeout(&self) -> Duration {
        self.spec.call_timeout
    }

    pub(super) fn status(&self) -> UpstreamStatus {
        let s = self.state();
        UpstreamStatus {
            name: self.spec.name.clone(),
            transport: match self.spec.transport {
                Transport::Stdio(_) => "stdio",
                Transport::Http(_) => "http",
            },
            state: if s.up {
                "up"
            } else if s.error.is_some() {
                "down"
            } else {
                "starting"
            },
            error: s.error.clone(),
            tools: s.tools.len(),
            starts: s.starts,
            server: s.server.clone(),
        }
    }

    pub(super) async fn tried(&self) {
        loop {
            let woken = self.tried_notify.notified();
            if self.tried.load(Ordering::Acquire) {
                return;
            }
            woken.await;
        }
    }

    fn mark_tried(&self) {
        self.tried.store(true, Ordering::Release);
        self.tried_notify.notify_waiters();
    }

    pub(super) fn live(&self, tool: &str) -> Live {
        let s = self.state();
        if !s.up {
            return Live::Unavailable(s.error.clone().unwrap_or_else(|| "starting".to_owned()));
        }
        match s.tools.get(tool) {
            Some(d) => Live::Listed { pin: d.pin.clone() },
            None => Live::Missing,
        }
    }

    pub(super) fn descriptors(&self) -> Vec<Descriptor> {
        self.state().tools.values().cloned().collect()
    }

    fn peer(&self) -> Result<Peer<RoleClient>, CallError> {
        let s = self.state();
        match (&s.peer, s.up) {
            (Some(p), true) => Ok(p.clone()),
            _ => Err(CallError::Unavailable(
                self.spec.name.clone(),
                s.error.clone().unwrap_or_else(|| "starting".to_owned()),
            )),
        }
    }

    pub(super) fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// Resolves once the supervisor has ended (its program stopped and cleaned up).
    pub(super) async fn stopped(&self) {
        let mut rx = self.stopped.subscribe();
        let _ = rx.wait_for(|done| *done).await;
    }

    pub(super) async fn call(
        &self,
        tool: &str,
        arguments: JsonObject,
        timeout: Duration,
        progress: Option<ProgressSink>,
        relay: Option<Arc<dyn Relay>>,
    ) -> Result<CallToolResult, CallError> {
        let (_turn, timeout) = self.take_turn(timeout, relay).await?;
        let peer = self.peer()?;
        let name = self.spec.name.clone();
        let failed =
            |e: rmcp::service::ServiceError| CallError::Failed(name.clone(), e.to_string());
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(arguments);
        // The caller's trace context goes on in `_meta` (MCP SEP-414), naming the span that
        // forwards the call when traces are on.
        if let Some(trace) = crate::telemetry::current() {
            use rmcp::model::RequestParamsMeta as _;
            params.set_traceparent(&trace.traceparent);
            if let Some(state) = &trace.tracestate {
                params.set_tracestate(state);
            }
        }
        let handle = peer
            .send_cancellable_request(ClientRequest::CallToolRequest(Request::new(params)), {
                let mut o = PeerRequestOptions::no_options();
                o.timeout = Some(timeout);
                o
            })
            .await
            .map_err(failed)?;
        let token = handle.progress_token.clone();
        if let Some(sink) = progress {
            self.progress
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(token.clone(), sink);
        }
        // Dropped before the answer (the caller cancelled): tell the upstream.
        let mut guard = CancelGuard {
            peer: Some(peer.clone()),
            id: Some(handle.id.clone()),
            progress: Arc::clone(&self.progress),
            token,
        };
        let answer = handle.await_response().await;
        guard.peer = None;
        // rmcp hands each notification to a task of its own but an answer straight to its
        // caller, so a log line the upstream sent before answering may still be on its way.
        // The turn (and with it the caller the log goes to) is held a moment longer, so the
        // call's log reaches its own client and no later call's.
        if self.spec.relay.logging {
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
            tokio::time::sleep(LOG_GRACE).await;
        }
        match answer {
            Ok(ServerResult::CallToolResult(r)) => Ok(r),
            Ok(other) => Err(CallError::Failed(
                self.spec.name.clone(),
                format!(
                    "unexpected answer to tools/call: {}",
                    serde_json::to_string(&other)
                        .unwrap_or_default()
                        .chars()
                        .take(200)
                        .collect::<String>()
                ),
            )),
            Err(rmcp::service::ServiceError::Timeout { .. }) => Err(CallError::Timeout(
                self.spec.name.clone(),
                u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            )),
            Err(e) => Err(failed(e)),
        }
    }

    pub(super) async fn list_resources(&self) -> Vec<Value> {
        let Ok(peer) = self.peer() else {
            return Vec::new();
        };
        self.listed(peer.list_all_resources()).await
    }

    /// A listing's items as JSON, within the upstream's call timeout; nothing when it fails.
    async fn listed<T: serde::Serialize>(
        &self,
        asked: impl std::future::Future<Output = Result<Vec<T>, rmcp::service::ServiceError>>,
    ) -> Vec<Value> {
        match tokio::time::timeout(self.spec.call_timeout, asked).await {
            Ok(Ok(list)) => list
                .into_iter()
                .filter_map(|item| serde_json::to_value(item).ok())
                .collect(),
            _ => Vec::new(),
        }
    }

    pub(super) async fn read_resource(
        &self,
        uri: &str,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        let (_turn, timeout) = self.take_turn(timeout, None).await?;
        let peer = self.peer()?;
        let params = ReadResourceRequestParams::new(uri.to_owned());
        self.bounded(timeout, peer.read_resource(params)).await
    }

    pub(super) async fn list_resource_templates(&self) -> Vec<Value> {
        let Ok(peer) = self.peer() else {
            return Vec::new();
        };
        let offered = peer
            .peer_info()
            .is_some_and(|i| i.capabilities.resources.is_some());
        if !offered {
            return Vec::new();
        }
        self.listed(peer.list_all_resource_templates()).await
    }

    /// `completion/complete`, when the upstream offers completions; otherwise no values.
    pub(super) async fn complete(
        &self,
        request: rmcp::model::CompleteRequestParams,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        let (_turn, timeout) = self.take_turn(timeout, None).await?;
        let peer = self.peer()?;
        let offered = peer
            .peer_info()
            .is_some_and(|i| i.capabilities.completions.is_some());
        if !offered {
            return Ok(serde_json::json!({"completion": {"values": []}}));
        }
        self.bounded(timeout, peer.complete(request)).await
    }

    pub(super) async fn subscribe(
        &self,
        uri: &str,
        subscriber: &Arc<dyn Subscriber>,
        timeout: Duration,
    ) -> Result<(), CallError> {
        let _one = self.subscribing.lock().await;
        let first = {
            let mut subs = self
                .subscriptions
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !subs.contains_key(uri) && subs.len() >= MAX_SUBSCRIBED_URIS {
                return Err(CallError::Failed(
                    self.spec.name.clone(),
                    format!(
                        "toolgate holds subscriptions to {MAX_SUBSCRIBED_URIS} of its resources already"
                    ),
                ));
            }
            let list = subs.entry(uri.to_owned()).or_default();
            list.retain(|w| w.strong_count() > 0);
            if list.iter().any(|w| same(w, subscriber)) {
                return Ok(());
            }
            let first = list.is_empty();
            list.push(Arc::downgrade(subscriber));
            first
        };
        if !first {
            return Ok(());
        }
        let asked = match self.peer() {
            Ok(peer) => {
                #[allow(deprecated, reason = "clients on 2025-11-25 subscribe this way")]
                let asked = peer.subscribe(rmcp::model::SubscribeRequestParams::new(uri));
                self.bounded(timeout, asked).await.map(|_| ())
            }
            Err(e) => Err(e),
        };
        if asked.is_err() {
            self.subscriptions
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(uri);
        }
        asked
    }

    pub(super) async fn unsubscribe(
        &self,
        uri: &str,
        subscriber: &Arc<dyn Subscriber>,
        timeout: Duration,
    ) -> Result<(), CallError> {
        let _one = self.subscribing.lock().await;
        let last = {
            let mut subs = self
                .subscriptions
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let Some(list) = subs.get_mut(uri) else {
                return Ok(());
            };
            list.retain(|w| w.strong_count() > 0 && !same(w, subscriber));
            let last = list.is_empty();
            if last {
                subs.remove(uri);
            }
            last
        };
        if !last {
            return Ok(());
        }
        let peer = self.peer()?;
        #[allow(deprecated, reason = "clients on 2025-11-25 unsubscribe this way")]
        let asked = peer.unsubscribe(rmcp::model::UnsubscribeRequestParams::new(uri));
        self.bounded(timeout, asked).await.map(|_| ())
    }

    /// A request's answer as JSON, within `timeout`.
    async fn bounded<T: serde::Serialize>(
        &self,
        timeout: Duration,
        asked: impl std::future::Future<Output = Result<T, rmcp::service::ServiceError>>,
    ) -> Result<Value, CallError> {
        let name = || self.spec.name.clone();
        let answer = tokio::time::timeout(timeout, asked)
            .await
            .map_err(|_| {
                CallError::Timeout(
                    name(),
                    u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                )
            })?
            .map_err(|e| CallError::Failed(name(), e.to_string()))?;
        serde_json::to_value(answer).map_err(|e| CallError::Failed(name(), e.to_string()))
    }

    pub(super) async fn list_prompts(&self) -> Vec<Value> {
        let Ok(peer) = self.peer() else {
            return Vec::new();
        };
        self.listed(peer.list_all_prompts()).await
    }

    pub(super) async fn get_prompt(
        &self,
        prompt: &str,
        arguments: Option<JsonObject>,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        let (_turn, timeout) = self.take_turn(timeout, None).await?;
        let peer = self.peer()?;
        let mut params = GetPromptRequestParams::new(prompt.to_owned());
        params.arguments = arguments;
        self.bounded(timeout, peer.get_prompt(params)).await
    }
}

/// Whether `held` is `subscriber`.
fn same(held: &Weak<dyn Subscriber>, subscriber: &Arc<dyn Subscriber>) -> bool {
    std::ptr::addr_eq(held.as_ptr(), Arc::as_ptr(subscriber))
}

/// Sends `notifications/cancelled` upstream when a forwarded call is dropped unanswered.
struct CancelGuard {
    peer: Option<Peer<RoleClient>>,
    id: Option<rmcp::model::RequestId>,
    progress: Arc<Mutex<HashMap<ProgressToken, ProgressSink>>>,
    token: ProgressToken,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        self.progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.token);
        if let (Some(peer), Some(id)) = (self.peer.take(), self.id.take())
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(async move {
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(id),
                        Some("the caller cancelled the call".to_owned()),
                    ))
                    .await;
            });
        }
    }
}

/// The client side toolgate runs against an upstream: relists on `list_changed`, passes
/// progress on, passes resource updates to the sessions subscribed, and relays what the
/// upstream's `relay` allows (log, sampling, elicitation) to the client of the call it is
/// running; declines the rest.
#[derive(Clone)]
struct Watcher {
    name: String,
    relist: tokio::sync::mpsc::UnboundedSender<()>,
    progress: Arc<Mutex<HashMap<ProgressToken, ProgressSink>>>,
    allow: RelaySet,
    current: Current,
    subscriptions: Subscriptions,
}

impl Watcher {
    /// The client of the call running now, if `allowed`.
    fn client(&self, allowed: bool) -> Option<Arc<dyn Relay>> {
        if !allowed {
            return None;
        }
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn refused(&self, what: &str, allowed: bool) -> rmcp::ErrorData {
        let why = if allowed {
            format!(
                "toolgate passes {what} from the upstream `{}` only to the client of the tool call it is running, and none is",
                self.name
            )
        } else {
            format!(
                "toolgate does not pass {what} from the upstream `{}` to clients (its `relay` does not list it)",
                self.name
            )
        };
        tracing::info!(upstream = self.name, what, "MCP upstream request declined");
        rmcp::ErrorData::invalid_request(why, None)
    }
}

#[allow(
    deprecated,
    reason = "logging and sampling still serve clients on 2025-11-25"
)]
impl rmcp::ClientHandler for Watcher {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.relist.send(());
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let sink = self
            .progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&params.progress_token)
            .cloned();
        if let Some(sink) = sink {
            let _ = sink.send((params.progress, params.total, params.message));
        }
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(client) = self.client(self.allow.logging) {
            client.log(params).await;
        }
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, rmcp::ErrorData> {
        match self.client(self.allow.sampling) {
            Some(client) => {
                tracing::info!(
                    upstream = self.name,
                    "relaying a sampling request to the caller"
                );
                client.sample(params).await
            }
            None => Err(self.refused("sampling requests", self.allow.sampling)),
        }
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        match self.client(self.allow.elicitation) {
            Some(client) => {
                tracing::info!(
                    upstream = self.name,
                    "relaying an elicitation request to the caller"
                );
                client.elicit(params).await
            }
            None => Err(self.refused("elicitation requests", self.allow.elicitation)),
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        let live: Vec<Arc<dyn Subscriber>> = {
            let mut subs = self
                .subscriptions
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let Some(list) = subs.get_mut(&params.uri) else {
                return;
            };
            let live: Vec<_> = list.iter().filter_map(Weak::upgrade).collect();
            list.retain(|w| w.strong_count() > 0);
            if list.is_empty() {
                subs.remove(&params.uri);
            }
            live
        };
        if live.is_empty() {
            // Every subscribed session has ended: the upstream need not say more.
            let peer = context.peer.clone();
            let uri = params.uri.clone();
            tokio::spawn(async move {
                #[allow(deprecated, reason = "the subscription was made on 2025-11-25")]
                let asked = peer.unsubscribe(rmcp::model::UnsubscribeRequestParams::new(uri));
                let _ = tokio::time::timeout(Duration::from_secs(10), asked).await;
            });
            return;
        }
        for subscriber in live {
            subscriber.updated(&params.uri).await;
        }
    }

    fn get_info(&self) -> rmcp::model::ClientConfig {
        // What toolgate relays, it offers the upstream (it asks the real client per call).
        let mut caps = rmcp::model::ClientCapabilities::default();
        if self.allow.sampling {
            caps.sampling = serde_json::from_value(serde_json::json!({})).ok();
        }
        if self.allow.elicitation {
            caps.elicitation = serde_json::from_value(serde_json::json!({"form": {}})).ok();
        }
        rmcp::model::ClientConfig::new(
            caps,
            rmcp::model::Implementation::new("toolgate", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// Keeps `link` connected until it is stopped.
pub(super) fn supervise(
    link: Arc<Link>,
    runner: Option<Arc<crate::exec::Runner>>,
    screen: Screen,
    changed: tokio::sync::broadcast::Sender<String>,
) {
    tokio::spawn(async move {
        let mut backoff = BACKOFF_MIN;
        let mut stop = link.stop.subscribe();
        loop {
            if *stop.borrow() {
                break;
            }
            link.state().starts += 1;
            let started = tokio::time::Instant::now();
            let ran = run_once(&link, runner.as_ref(), &screen, &changed, &mut stop).await;
            {
                let mut s = link.state();
                s.up = false;
                s.peer = None;
                s.tools.clear();
                s.error = Some(match &ran {
                    Ok(()) => "the upstream closed the connection".to_owned(),
                    Err(e) => e.clone(),
                });
            }
            link.mark_tried();
            let _ = changed.send(link.spec.name.clone());
            if *stop.borrow() {
                break;
            }
            if started.elapsed() >= STABLE {
                backoff = BACKOFF_MIN;
            }
            tracing::warn!(
                upstream = link.spec.name,
                error = ran.err().unwrap_or_default(),
                retry_in_ms = u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX),
                "MCP upstream down; restarting"
            );
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                _ = stop.changed() => break,
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
        let _ = link.stopped.send(true);
    });
}

/// One connection's life: returns when it ends.
async fn run_once(
    link: &Arc<Link>,
    runner: Option<&Arc<crate::exec::Runner>>,
    screen: &Screen,
    changed: &tokio::sync::broadcast::Sender<String>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    let (relist_tx, mut relist) = tokio::sync::mpsc::unbounded_channel();
    let watcher = Watcher {
        name: link.spec.name.clone(),
        relist: relist_tx,
        progress: Arc::clone(&link.progress),
        allow: link.spec.relay,
        current: Arc::clone(&link.current),
        subscriptions: Arc::clone(&link.subscriptions),
    };
    let name = link.spec.name.clone();
    let mut session_child = None;
    let connecting = async {
        match &link.spec.transport {
            Transport::Stdio(spec) => {
                let runner = runner.ok_or_else(|| {
                    "stdio upstreams run in the exec sandbox: set `[exec] root`".to_owned()
                })?;
                let program = resolve(&spec.command)?;
                let session = runner
                    .session(crate::exec::SessionSpec {
                        program,
                        argv: spec.args.clone(),
                        cwd: spec.cwd.clone(),
                        env: spec.env.clone(),
                        access: spec.access.clone(),
                        limits: spec.limits,
                    })
                    .await
                    .map_err(|e| format!("cannot start it: {e}"))?;
                let crate::exec::Session {
                    child,
                    stdin,
                    stdout,
                    stderr,
                    nonce,
                    cleanup,
                } = session;
                log_stderr(name.clone(), stderr, nonce, Arc::clone(screen));
                session_child = Some((child, cleanup));
                watcher
                    .clone()
                    .serve((stdout, stdin))
                    .await
                    .map_err(|e| format!("initialization failed: {e}"))
            }
            Transport::Http(spec) => {
                use rmcp::transport::StreamableHttpClientTransport;
                use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                let mut config = StreamableHttpClientTransportConfig::with_uri(spec.url.clone());
                if let Some(var) = &spec.bearer_env {
                    let token = std::env::var(var)
                        .map_err(|_| format!("the environment variable `{var}` is not set"))?;
                    config = config.auth_header(token);
                }
                let transport = StreamableHttpClientTransport::with_client(http_client()?, config);
                watcher
                    .clone()
                    .serve(transport)
                    .await
                    .map_err(|e| format!("initialization failed: {e}"))
            }
        }
    };
    let running = tokio::select! {
        r = tokio::time::timeout(CONNECT_TIMEOUT, connecting) => match r {
            Ok(r) => r?,
            Err(_) => return Err(format!("no initialization within {} s", CONNECT_TIMEOUT.as_secs())),
        },
        _ = stop.changed() => return Ok(()),
    };
    let peer = running.peer().clone();
    let server = running.peer_info().map(|i| match &i.server_info {
        Some(s) => format!("{} {} (protocol {})", s.name, s.version, i.protocol_version),
        None => format!("protocol {}", i.protocol_version),
    });
    let tools = list(&peer).await?;
    resubscribe(link, &peer).await;
    {
        let mut s = link.state();
        s.peer = Some(peer.clone());
        s.tools = tools;
        s.up = true;
        s.error = None;
        s.server = server;
    }
    link.mark_tried();
    let _ = changed.send(name.clone());
    tracing::info!(
        upstream = name,
        tools = link.state().tools.len(),
        "MCP upstream up"
    );
    let closing = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    // Listed again on `list_changed` and every RELIST as well: an upstream that changes a
    // descriptor without saying so is caught too.
    let mut every = tokio::time::interval(RELIST);
    every.tick().await;
    let ended = loop {
        tokio::select! {
            r = &mut waiting => break r.map(|_| ()).map_err(|e| e.to_string()),
            _ = every.tick() => relist_into(link, &peer, changed, false).await,
            Some(()) = relist.recv() => relist_into(link, &peer, changed, true).await,
            _ = stop.changed() => {
                // Close the session first: its transport holds the program's stdin.
                closing.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(5), &mut waiting).await;
                break Ok(());
            }
        }
    };
    // The connection is over: the stdio program is stopped by its launcher (stdin closed).
    if let Some((mut child, cleanup)) = session_child {
        let exited = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
        if matches!(exited, Ok(Ok(_))) {
            cleanup.now().await;
        } else {
            drop(cleanup);
        }
    }
    ended
}

/// A restarted upstream is asked again for the subscriptions sessions still hold.
async fn resubscribe(link: &Link, peer: &Peer<RoleClient>) {
    let uris: Vec<String> = {
        let mut subs = link
            .subscriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        subs.retain(|_, list| {
            list.retain(|w| w.strong_count() > 0);
            !list.is_empty()
        });
        subs.keys().cloned().collect()
    };
    for uri in uris {
        #[allow(deprecated, reason = "the subscription was made on 2025-11-25")]
        let asked = peer.subscribe(rmcp::model::SubscribeRequestParams::new(uri.clone()));
        if !matches!(
            tokio::time::timeout(CONNECT_TIMEOUT, asked).await,
            Ok(Ok(()))
        ) {
            tracing::warn!(
                upstream = link.spec.name,
                uri,
                "MCP upstream refused a resubscription"
            );
        }
    }
}

/// Lists `link`'s tools again and tells subscribers when they changed (`announced`: the
/// upstream said so; otherwise a periodic check that found a silent change).
async fn relist_into(
    link: &Link,
    peer: &Peer<RoleClient>,
    changed: &tokio::sync::broadcast::Sender<String>,
    announced: bool,
) {
    let name = &link.spec.name;
    match list(peer).await {
        Ok(tools) => {
            let differs = {
                let mut s = link.state();
                let differs = s.tools != tools;
                s.tools = tools;
                differs
            };
            if announced || differs {
                if announced {
                    tracing::info!(upstream = name, "MCP upstream's tool list changed");
                } else {
                    tracing::warn!(
                        upstream = name,
                        "MCP upstream's tools changed without a list_changed notification"
                    );
                }
                let _ = changed.send(name.clone());
            }
        }
        Err(e) => tracing::warn!(upstream = name, error = e, "relisting tools failed"),
    }
}

async fn list(peer: &Peer<RoleClient>) -> Result<BTreeMap<String, Descriptor>, String> {
    let tools = tokio::time::timeout(CONNECT_TIMEOUT, peer.list_all_tools())
        .await
        .map_err(|_| "tools/list did not answer".to_owned())?
        .map_err(|e| format!("tools/list failed: {e}"))?;
    Ok(tools
        .into_iter()
        .filter_map(|t| serde_json::to_value(t).ok())
        .map(Descriptor::new)
        .map(|d| (d.name.clone(), d))
        .collect())
}

/// The program's absolute path: as written, or found on the sidecar's `PATH`.
fn resolve(command: &str) -> Result<std::path::PathBuf, String> {
    let p = std::path::Path::new(command);
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(command))
        .find(|c| c.is_file())
        .ok_or_else(|| format!("`{command}` is not on the sidecar's PATH"))
}

/// Logs the program's stderr, line by line, screened; the launcher's outcome line is
/// logged as what it is.
fn log_stderr(name: String, stderr: tokio::process::ChildStderr, nonce: String, screen: Screen) {
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        let marker = format!("{nonce} ");
        while let Ok(Some(line)) = lines.next_line().await {
            if line.is_empty() {
                continue;
            }
            if let Some(outcome) = line.strip_prefix(&marker) {
                let o: crate::exec::Outcome = serde_json::from_str(outcome).unwrap_or_default();
                tracing::warn!(
                    upstream = name,
                    exit_code = o.exit_code,
                    signal = o.signal,
                    error = o.error,
                    memory_exceeded = o.memory_exceeded,
                    memory_peak_bytes = o.memory_peak_bytes,
                    "MCP upstream program ended"
                );
                continue;
            }
            let cut: String = line.chars().take(STDERR_LINE_MAX).collect();
            tracing::info!(
                upstream = name,
                stderr = screen(&cut),
                "MCP upstream stderr"
            );
        }
    });
}

/// How long an idle connection to an HTTP upstream is kept for the next call: below the
/// 5 s keep-alive of Node's and uvicorn's servers, so the upstream does not close it under us.
const UPSTREAM_IDLE: Duration = Duration::from_secs(4);

/// The HTTP client of one upstream's streamable-HTTP session. Unlike rmcp's default client it
/// keeps idle connections: a new TCP connection per call cost ~0.1 ms and a socket in
/// TIME-WAIT per call. A response stream that is dropped before its end closes its own
/// connection (hyper never reuses one with a body left unread). Redirects are not followed:
/// the configured URL is the upstream, and a redirect answers as the error it is.
fn http_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .pool_idle_timeout(UPSTREAM_IDLE)
        .tcp_nodelay(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("cannot build its HTTP client: {e}"))
}
