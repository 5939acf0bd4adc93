//! The MCP front end: toolgate as the one MCP server an agent sees, over stdio
//! (`toolgate mcp`) and streamable HTTP (`/mcp` on the sidecar), built on the official Rust
//! SDK (`rmcp`).
//!
//! `tools/list` shows the tools Cedar does not deny outright for the caller (partial
//! evaluation, as `GET /v1/tools`), that toolgate can run here: MCP upstream tools whose live
//! descriptor matches its review, and the sidecar's own tools when execution is on. Each
//! description carries the guardrail note. `tools/call` goes through the same pipeline as
//! `POST /v1/execute` (limits, signals, Cedar, the tool_call gate, approvals, the audit
//! record, then the run and the output screen); a deny is a tool result with `isError` and
//! the structured reason, never a protocol error. A pending call is held while a human
//! decides, when the client can be told through elicitation; otherwise its result names the
//! approval and the same call, sent again once approved, runs (the approval stays bound to
//! the argument digest). `resources/read` and `prompts/get` pass the context gate.

mod answers;
mod http;
mod relay;
mod rounds;
mod sessions;

pub use http::{McpHttp, service};

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResponse, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ResultType, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{Value, json};

use answers::{built, declined, error_result, pending_result, to_result, waiting_form};

use crate::authz::PrincipalKind;
use crate::gateway::{Credential, Error, ExecAnswer, Exposure, Gateway, Progress};
use crate::tools::{Classification, Risk, Tool};

/// Where a front end's caller's credential comes from.
#[derive(Clone)]
enum Who {
    /// stdio: one token for the whole session (`Bearer <token>`).
    Fixed(Arc<Vec<u8>>),
    /// HTTP: each request's `Authorization` header.
    PerRequest,
}

/// Largest resource or prompt passed on (after the context gate).
const MAX_CONTEXT_BYTES: usize = 1024 * 1024;

/// Resource URIs one session remembers (which upstream listed each).
const MAX_RESOURCES_PER_SESSION: usize = 4096;

/// Resources one session may be subscribed to at once.
const MAX_SUBSCRIPTIONS_PER_SESSION: usize = 256;

/// How long toolgate waits for an upstream's answer to a resource or prompt request.
const UPSTREAM_ASK_TIMEOUT: Duration = Duration::from_secs(60);

/// Approvals one session remembers waiting on.
const MAX_PENDING_PER_SESSION: usize = 256;

/// The approvals calls are held on now (across sessions and transports): one hold each.
static HOLDS: std::sync::LazyLock<Mutex<std::collections::HashSet<String>>> =
    std::sync::LazyLock::new(Mutex::default);

/// A hold's place: its approval in [`HOLDS`], and one of its principal's
/// `[mcp] max_held_calls_per_principal` (so held calls cannot take every connection). Both
/// are given back when the hold ends.
struct HoldSlot {
    id: String,
    _held: crate::limits::HeldPermit,
}

impl HoldSlot {
    /// A place for a hold of approval `id` by `who`: `Err(None)` when `id` is held already,
    /// `Err(Some(why))` when a bound refuses (the call is answered pending at once).
    fn take(
        gw: &Gateway,
        who: &crate::authz::Principal,
        id: &str,
    ) -> Result<HoldSlot, Option<String>> {
        let mut holds = HOLDS.lock().unwrap_or_else(PoisonError::into_inner);
        if holds.contains(id) {
            return Err(None);
        }
        let held = match crate::gateway::hold(gw, who, crate::limits::HeldKind::Call) {
            Ok(permit) => permit,
            Err(e) => return Err(Some(e.message().into_owned())),
        };
        holds.insert(id.to_owned());
        Ok(HoldSlot {
            id: id.to_owned(),
            _held: held,
        })
    }
}

impl Drop for HoldSlot {
    fn drop(&mut self) {
        HOLDS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

/// The `_meta` key a client names its conversation with (`context.conv_id`).
pub const CONV_META: &str = "toolgate/conv_id";

/// The conversation of a caller's calls on 2026-07-28 over HTTP that name none.
pub const UNNAMED_CONV: &str = "mcp-unnamed";

/// One MCP session's state: the approvals it is waiting on, by (tool, argument digest), the
/// resources it listed, and its conversation.
struct Session {
    pending: Mutex<HashMap<(String, String), String>>,
    resources: Mutex<HashMap<String, String>>,
    /// The conversation this session's calls and outputs belong to (`context.conv_id`,
    /// provenance), unless a call's `_meta` names one.
    conv: String,
    /// The least severe upstream log message passed on (`logging/setLevel`; all until set).
    level: relay::Level,
    /// The resources this session subscribed to, and the upstream of each.
    subscribed: Mutex<HashMap<String, String>>,
    /// This session as a subscriber (made at its first `resources/subscribe`); the hub holds
    /// it weakly, so the session's end ends its subscriptions.
    subscriber: Mutex<Option<Arc<dyn crate::upstream::Subscriber>>>,
}

impl Default for Session {
    fn default() -> Self {
        Session {
            pending: Mutex::default(),
            resources: Mutex::default(),
            conv: format!("mcp-{}", uuid::Uuid::now_v7()),
            level: Arc::default(),
            subscribed: Mutex::default(),
            subscriber: Mutex::default(),
        }
    }
}

/// toolgate's MCP server side, one per MCP session.
#[derive(Clone)]
pub struct Front {
    gw: Gateway,
    who: Who,
    session: Arc<Session>,
}

impl Front {
    /// A stdio session whose caller is the holder of `token`.
    pub fn stdio(gw: Gateway, token: &str) -> Front {
        Front {
            gw,
            who: Who::Fixed(Arc::new(format!("Bearer {token}").into_bytes())),
            session: Arc::default(),
        }
    }

    fn http(gw: Gateway) -> Front {
        Front {
            gw,
            who: Who::PerRequest,
            session: Arc::default(),
        }
    }

    /// The caller's credential for this request.
    fn credential<'a>(&'a self, ext: &'a rmcp::model::Extensions) -> Credential<'a> {
        match &self.who {
            Who::Fixed(t) => Credential(Some(t.as_slice())),
            Who::PerRequest => Credential(
                ext.get::<http::Parts>()
                    .and_then(|p| p.headers.get(axum::http::header::AUTHORIZATION))
                    .map(|v| v.as_bytes()),
            ),
        }
    }

    /// Who calls, or the MCP error that says the credential was refused.
    fn who(&self, ext: &rmcp::model::Extensions) -> Result<crate::authz::Principal, McpError> {
        crate::gateway::authenticate(&self.gw, self.credential(ext))
            .map_err(|e| McpError::invalid_request(e.to_string(), None))
    }

    /// The tools this caller sees: not denied outright by Cedar, and runnable here now.
    fn visible(&self, ext: &rmcp::model::Extensions) -> Result<Vec<Value>, McpError> {
        let who = self.who(ext)?;
        if who.kind != PrincipalKind::Agent {
            return Ok(Vec::new());
        }
        let snap = self.gw.policy.current();
        let mut out = Vec::new();
        for tool in crate::authz::visible_tools(&snap, &who) {
            let runnable = match &tool.mcp {
                Some(b) => crate::gateway::exposure(&self.gw, tool, b) == Exposure::Ready,
                None => {
                    self.gw.exec.is_some() && (tool.builtin.is_some() || tool.executor.is_some())
                }
            };
            if runnable {
                out.push(describe(tool));
            }
        }
        Ok(out)
    }

    async fn call(
        &self,
        params: CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = params.name.to_string();
        let args = Value::Object(params.arguments.clone().unwrap_or_default());
        let digest = crate::audit::args_digest(&args);
        let key = (name.clone(), digest);
        let modern = rounds::modern(ctx);
        // 2026-07-28: a retry of a call that waits for a human carries its sealed state.
        if modern && let Some(state) = params.request_state.as_deref() {
            return self.resume(state, &params, &args, &key, ctx).await;
        }
        // The approval this session is waiting on for this exact call (bound to the tool and
        // the argument digest by construction), else one the client names (the pipeline
        // checks that it is this caller's, for this tool and these arguments).
        let remembered = self.session_pending(&key);
        let named = remembered.clone().or_else(|| {
            params
                .meta
                .as_ref()
                .and_then(|m| m.get("toolgate/approval_id"))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| {
                    (modern && matches!(self.who, Who::PerRequest))
                        .then(|| self.approved_for(&key, ctx))
                        .flatten()
                })
        });
        // The same call again while its approval is still open: still pending (held, when the
        // client can be told), not a second approval and not a deny.
        if let Some(id) = &remembered
            && self.status(id) == Some(crate::approvals::Status::Pending)
        {
            if modern {
                return Ok(self.waiting(id, None, &key, ctx));
            }
            return Ok(CallToolResponse::Complete(match self.hold(id, ctx).await {
                Held::Approved => {
                    let answer = self.execute(&name, &args, Some(id.clone()), ctx).await;
                    self.forget(&key);
                    to_result(answer)
                }
                Held::Ended(why) => error_result(&why, json!({"approval_id": id})),
                Held::Pending(note) => pending_result(id, None, None, note.as_deref()),
            }));
        }
        let mut answer = self.execute(&name, &args, named.clone(), ctx).await;
        if let Ok((Progress::Pending, a)) = &answer
            && let Some(id) = a.approval_id.clone()
        {
            self.remember_pending(key.clone(), id.clone());
            if modern {
                return Ok(self.waiting(&id, Some(a), &key, ctx));
            }
            match self.hold(&id, ctx).await {
                Held::Approved => answer = self.execute(&name, &args, Some(id), ctx).await,
                Held::Ended(why) => {
                    return Ok(CallToolResponse::Complete(error_result(
                        &why,
                        json!({"approval_id": id}),
                    )));
                }
                Held::Pending(Some(note)) => {
                    return Ok(CallToolResponse::Complete(pending_result(
                        &id,
                        Some(a.metadata.decision_id.clone()),
                        a.decision.as_ref().map(|d| d.reasons.clone()),
                        Some(&note),
                    )));
                }
                Held::Pending(None) => {}
            }
        }
        if !matches!(answer, Ok((Progress::Pending, _))) {
            self.forget(&key);
        }
        Ok(CallToolResponse::Complete(to_result(answer)))
    }

    /// Remembers the approval a call of this session waits on (at most
    /// [`MAX_PENDING_PER_SESSION`]; the oldest is forgotten: its call can still name it).
    fn remember_pending(&self, key: (String, String), id: String) {
        let mut p = self
            .session
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if p.len() >= MAX_PENDING_PER_SESSION
            && let Some(k) = p.keys().next().cloned()
        {
            p.remove(&k);
        }
        p.insert(key, id);
    }

    fn status(&self, id: &str) -> Option<crate::approvals::Status> {
        self.gw
            .approvals
            .get(id)
            .ok()
            .flatten()
            .map(|a| a.status_at(crate::clock::now_ms()))
    }

    fn forget(&self, key: &(String, String)) {
        self.session
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    fn session_pending(&self, key: &(String, String)) -> Option<String> {
        self.session
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()
    }

    async fn execute(
        &self,
        name: &str,
        args: &Value,
        approval_id: Option<String>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(Progress, ExecAnswer), Error> {
        // One span per `tools/call`, a child of the client's `_meta.traceparent` if it sent
        // one, else (MCP over HTTP) of the request's `traceparent` header.
        let meta = |key: &str| ctx.meta.get(key).and_then(Value::as_str);
        let parent = crate::telemetry::Parent::parse(meta("traceparent"), meta("tracestate"))
            .or_else(|| {
                ctx.extensions
                    .get::<http::Parts>()
                    .and_then(|p| crate::telemetry::Parent::from_headers(&p.headers))
            });
        let span = crate::telemetry::spans::request("toolgate.mcp.tools_call");
        crate::telemetry::within(
            span,
            parent,
            self.execute_traced(name, args, approval_id, ctx),
        )
        .await
    }

    async fn execute_traced(
        &self,
        name: &str,
        args: &Value,
        approval_id: Option<String>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(Progress, ExecAnswer), Error> {
        let known = crate::gateway::caller(&self.gw, self.credential(&ctx.extensions)).await?;
        let mut body = serde_json::Map::new();
        body.insert("tool".to_owned(), json!(name));
        body.insert("args".to_owned(), args.clone());
        if let Some(id) = approval_id {
            body.insert("approval_id".to_owned(), json!(id));
        }
        // The conversation: the one `_meta` names (a runtime that also posts the user's
        // words to the input gate), else this session.
        let conv = self.conv(ctx);
        let mut context = json!({"conv_id": conv});
        if let Some(trace) = ctx.meta.get("traceparent").and_then(Value::as_str)
            && let Some(c) = context.as_object_mut()
        {
            c.insert(
                "trace_id".to_owned(),
                json!(trace.chars().take(128).collect::<String>()),
            );
        }
        body.insert("context".to_owned(), context);
        let body = Value::Object(body);
        let raw = serde_json::from_value(body).map_err(|e| Error::BadRequest {
            code: crate::codes::Code::InvalidBody,
            message: format!("the call cannot be read: {e}"),
            suggestion: "send `name` and an `arguments` object",
        });
        let ct = ctx.ct.clone();
        let relay: Arc<dyn crate::upstream::Relay> = Arc::new(relay::ClientRelay {
            peer: ctx.peer.clone(),
            level: Arc::clone(&self.session.level),
            gates: self.gw.gates.clone(),
            capabilities: ctx
                .client_capabilities()
                .or_else(|| ctx.peer.peer_info().map(|i| i.capabilities.clone())),
            stateless: rounds::modern(ctx),
        });
        let hooks = crate::upstream::CallHooks {
            progress: progress_sink(ctx, self.gw.gates.clone()),
            cancelled: Some(Box::pin(async move { ct.cancelled().await })),
            relay: Some(relay),
        };
        crate::gateway::execute_for(&self.gw, known, raw, hooks).await
    }

    /// Tells the user through elicitation that the call waits for a human, then waits for
    /// the decision (at most the approval's TTL and `[mcp] hold_max_secs`).
    /// [`Held::Pending`]: the client cannot be told (no elicitation), or a bound refuses the
    /// hold, so the call is answered pending at once.
    async fn hold(&self, approval_id: &str, ctx: &RequestContext<RoleServer>) -> Held {
        let can_elicit = ctx
            .client_capabilities()
            .or_else(|| ctx.peer.peer_info().map(|i| i.capabilities.clone()))
            .is_some_and(|c| c.elicitation.is_some());
        let legacy = ctx
            .protocol_version()
            .is_none_or(|v| v < rmcp::model::ProtocolVersion::V_2026_07_28);
        if !can_elicit || !legacy {
            return Held::Pending(None);
        }
        let Ok(who) = crate::gateway::authenticate(&self.gw, self.credential(&ctx.extensions))
        else {
            return Held::Pending(None);
        };
        let _slot = match HoldSlot::take(&self.gw, &who, approval_id) {
            Ok(slot) => slot,
            Err(why) => return Held::Pending(why),
        };
        let params: Result<rmcp::model::ElicitRequestParams, _> =
            serde_json::from_value(waiting_form(approval_id));
        let Ok(params) = params else {
            return Held::Pending(None);
        };
        let told =
            tokio::time::timeout(Duration::from_secs(30), ctx.peer.create_elicitation(params))
                .await;
        if let Ok(Ok(r)) = &told
            && r.action != rmcp::model::ElicitationAction::Accept
        {
            return Held::Ended(declined(approval_id));
        }
        let deadline = tokio::time::Instant::now() + self.gw.mcp.hold_max;
        match self.decided(approval_id, deadline, ctx).await {
            Decided::Approved => Held::Approved,
            Decided::Ended(why) => Held::Ended(why),
            Decided::Open => Held::Ended(format!(
                "approval {approval_id} was not decided while the call was held; send the same call again once it is approved"
            )),
        }
    }

    /// Waits until approval `id` is decided, `deadline` passes or the request is cancelled.
    async fn decided(
        &self,
        id: &str,
        deadline: tokio::time::Instant,
        ctx: &RequestContext<RoleServer>,
    ) -> Decided {
        loop {
            match self.status(id) {
                Some(crate::approvals::Status::Approved) => return Decided::Approved,
                Some(crate::approvals::Status::Pending) => {}
                Some(other) => {
                    return Decided::Ended(format!(
                        "approval {id} ended {}: the call did not run",
                        crate::gateway::word(&other)
                    ));
                }
                None => {
                    return Decided::Ended(format!("approval {id} is gone: the call did not run"));
                }
            }
            if tokio::time::Instant::now() >= deadline || ctx.ct.is_cancelled() {
                return Decided::Open;
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
                () = ctx.ct.cancelled() => {}
            }
        }
    }

    /// The upstreams whose resources and prompts this caller may reach: agents only, and only
    /// upstreams with a tool Cedar does not deny the caller outright.
    fn reachable(&self, ext: &rmcp::model::Extensions) -> Result<Vec<String>, McpError> {
        let who = self.who(ext)?;
        if who.kind != PrincipalKind::Agent {
            return Err(McpError::invalid_request(
                "resources and prompts are for agents",
                None,
            ));
        }
        let snap = self.gw.policy.current();
        let mut ups: Vec<String> = crate::authz::visible_tools(&snap, &who)
            .iter()
            .filter_map(|t| t.mcp.as_ref().map(|b| b.upstream.clone()))
            .collect();
        ups.sort();
        ups.dedup();
        Ok(ups)
    }

    /// The upstream `uri` belongs to: the one that listed it to this session, else the first
    /// reachable upstream that lists it now (a client may read a URI it knows without
    /// listing first, and on 2026-07-28 over HTTP no session remembers listings), else the
    /// first reachable upstream with a resource template it matches. Any other URI is refused.
    async fn owner(&self, uri: &str, reachable: &[String]) -> Result<String, McpError> {
        let Some(hub) = self.gw.upstreams.clone() else {
            return Err(McpError::resource_not_found("no MCP upstreams", None));
        };
        let remembered = self
            .session
            .resources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(uri)
            .cloned();
        let listed = match remembered {
            Some(u) => Some(u),
            None => hub.list_resources().await.into_iter().find_map(|(u, r)| {
                (r.get("uri").and_then(Value::as_str) == Some(uri) && reachable.contains(&u))
                    .then_some(u)
            }),
        };
        let found = match listed {
            Some(u) => Some(u),
            None => hub
                .list_resource_templates()
                .await
                .into_iter()
                .find_map(|(u, t)| {
                    let template = t.get("uriTemplate").and_then(Value::as_str)?;
                    (reachable.contains(&u) && crate::upstream::template_matches(template, uri))
                        .then_some(u)
                }),
        };
        found.filter(|u| reachable.contains(u)).ok_or_else(|| {
            McpError::resource_not_found(
                "no such resource: no upstream you may reach lists this URI or a template it matches (resources/list, resources/templates/list)",
                None,
            )
        })
    }

    /// Reads `uri` from the upstream it belongs to ([`Front::owner`]).
    async fn read(&self, uri: &str, reachable: &[String]) -> Result<Value, McpError> {
        let upstream = self.owner(uri, reachable).await?;
        let hub = self.hub()?;
        hub.read_resource(&upstream, uri, UPSTREAM_ASK_TIMEOUT)
            .await
            .map_err(|e| McpError::internal_error(self.screened(&e.to_string()), None))
    }

    fn hub(&self) -> Result<Arc<crate::upstream::Hub>, McpError> {
        self.gw
            .upstreams
            .clone()
            .ok_or_else(|| McpError::resource_not_found("no MCP upstreams", None))
    }

    /// This session as a resource subscriber (made once, from the session's peer).
    fn subscriber(&self, ctx: &RequestContext<RoleServer>) -> Arc<dyn crate::upstream::Subscriber> {
        let mut held = self
            .session
            .subscriber
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Arc::clone(held.get_or_insert_with(|| {
            Arc::new(relay::SessionSubscriber(ctx.peer.clone()))
                as Arc<dyn crate::upstream::Subscriber>
        }))
    }

    /// Upstream text shown to the client outside a tool result, screened (masked).
    fn screened(&self, text: &str) -> String {
        match &self.gw.gates {
            Some(g) => g.redactor().redact(text),
            None => "<withheld: redaction unavailable>".to_owned(),
        }
    }

    /// Upstream metadata (listings), screened by the output gate; a block withholds it.
    fn screened_value(&self, v: Value) -> Option<Value> {
        let g = self.gw.gates.as_ref()?;
        let out = g.screen(crate::redact::Gate::Output, &v);
        (out.decision != crate::redact::Action::Block).then_some(out.content)
    }

    /// The conversation a request belongs to (`context.conv_id`, provenance): the one its
    /// `_meta` names; else, on 2026-07-28 over HTTP (no sessions), the caller's one unnamed
    /// conversation ([`UNNAMED_CONV`]: provenance then spans all of the caller's unnamed
    /// calls, which errs toward asking a human, never toward trusting); else this session's.
    fn conv(&self, ctx: &RequestContext<RoleServer>) -> String {
        if let Some(named) = ctx.meta.get(CONV_META).and_then(Value::as_str) {
            return named.to_owned();
        }
        if matches!(self.who, Who::PerRequest) && rounds::modern(ctx) {
            return UNNAMED_CONV.to_owned();
        }
        self.session.conv.clone()
    }

    /// An approved, unused approval of this caller for exactly this call (tool and argument
    /// digest): on 2026-07-28 over HTTP there is no session to remember which approval a call
    /// waits on, so the same call sent again after the approval finds it here.
    fn approved_for(
        &self,
        (tool, digest): &(String, String),
        ctx: &RequestContext<RoleServer>,
    ) -> Option<String> {
        let who = crate::gateway::authenticate(&self.gw, self.credential(&ctx.extensions)).ok()?;
        let principal = who.uid.to_string();
        let human = who.on_behalf_of_uid().map(|u| u.to_string());
        self.gw
            .approvals
            .list(
                Some(crate::approvals::Status::Approved),
                crate::clock::now_ms(),
                1,
                |a| {
                    a.principal == principal
                        && a.on_behalf_of == human
                        && &a.tool == tool
                        && &a.args_sha256 == digest
                },
            )
            .ok()?
            .into_iter()
            .next()
            .map(|a| a.id)
    }

    /// Screens `value` with the context gate (recorded); a block is an error.
    async fn context_gate(
        &self,
        ctx: &RequestContext<RoleServer>,
        value: Value,
    ) -> Result<Value, McpError> {
        let ext = &ctx.extensions;
        if value.to_string().len() > MAX_CONTEXT_BYTES {
            return Err(McpError::invalid_request(
                format!(
                    "the content is larger than {MAX_CONTEXT_BYTES} bytes; toolgate does not pass it on"
                ),
                None,
            ));
        }
        let who = self.who(ext)?;
        // Images, audio and binary blobs are not text for the gate: set aside, put back.
        let mut value = value;
        let blobs = crate::gateway::take_blobs(&mut value);
        let body = serde_json::from_value(json!({"content": value, "conv_id": self.conv(ctx)}))
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        let screened = crate::gateway::screen_content(&self.gw, who, "context", Ok(body))
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        if screened.get("decision").and_then(Value::as_str) == Some("block") {
            return Err(McpError::invalid_request(
                "toolgate's context gate blocked this content (injection signals)",
                Some(json!({"violations": screened.get("violations")})),
            ));
        }
        let mut content = screened.get("content").cloned().unwrap_or(Value::Null);
        crate::gateway::put_blobs(&mut content, blobs);
        Ok(content)
    }
}

/// Where waiting for an approval got to.
enum Decided {
    Approved,
    /// Denied, expired, used or gone: why.
    Ended(String),
    /// Still pending at the deadline (or the request was cancelled).
    Open,
}

/// How a held call ended.
enum Held {
    Approved,
    Ended(String),
    /// Not held: answered pending at once (with why, when a bound refused the hold).
    Pending(Option<String>),
}

/// The tool as MCP lists it: the manifest's schema, toolgate's classification as hints, and
/// the guardrail note in the description.
fn describe(tool: &Tool) -> Value {
    let note = match tool.risk {
        Risk::Low | Risk::Medium => {
            "[toolgate: checked by policy before it runs; a denied call returns its reason]"
        }
        Risk::High | Risk::Critical => {
            "[toolgate: may wait for a human approval before it runs; a denied call returns its reason]"
        }
    };
    json!({
        "name": tool.name,
        "description": format!("{} {note}", tool.description),
        "inputSchema": tool.input_schema,
        "annotations": {
            "readOnlyHint": tool.classification == Classification::Read,
            "destructiveHint": tool.classification == Classification::Destructive,
        }
    })
}

/// Passes an upstream's progress to the client's progress token; its message is screened.
fn progress_sink(
    ctx: &RequestContext<RoleServer>,
    gates: Option<Arc<crate::redact::Gates>>,
) -> Option<crate::upstream::ProgressSink> {
    let token = ctx.meta.get_progress_token()?;
    let peer = ctx.peer.clone();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(f64, Option<f64>, Option<String>)>();
    tokio::spawn(async move {
        while let Some((progress, total, message)) = rx.recv().await {
            // Progress that arrives faster than it can be sent is merged: the newest counts.
            let (mut progress, mut total, mut message) = (progress, total, message);
            while let Ok((p, t, m)) = rx.try_recv() {
                (progress, total, message) = (p, t, m);
            }
            let message = match (&gates, message) {
                (Some(g), Some(m)) => Some(g.redactor().redact(&m)),
                _ => None,
            };
            let p: Result<rmcp::model::ProgressNotificationParam, _> = serde_json::from_value(
                json!({"progressToken": token, "progress": progress, "total": total, "message": message}),
            );
            if let Ok(p) = p {
                let _ = peer.notify_progress(p).await;
            }
        }
    });
    Some(tx)
}

impl ServerHandler for Front {
    fn get_info(&self) -> ServerConfig {
        #[allow(deprecated, reason = "logging still serves clients on 2025-11-25")]
        let caps = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        let mut info = ServerConfig::new(caps);
        info.server_info = rmcp::model::Implementation::new("toolgate", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(
            "Every tool call is checked by toolgate before it runs. A denied call comes back with a reason and a suggestion; do not retry it unchanged. A call that needs a human approval waits, or comes back pending with its approval id."
                .to_owned(),
        );
        info
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let Some(hub) = self.gw.upstreams.clone() else {
            return;
        };
        let mut changes = hub.subscribe();
        let peer = context.peer.clone();
        tokio::spawn(async move {
            let mut check = tokio::time::interval(Duration::from_secs(30));
            loop {
                tokio::select! {
                    changed = changes.recv() => match changed {
                        Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                            if peer.notify_tool_list_changed().await.is_err() {
                                return;
                            }
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    },
                    // The session is over: stop listening for it.
                    _ = check.tick() => if peer.is_transport_closed() {
                        return;
                    },
                }
            }
        });
    }

    /// On 2026-07-28 a client opts in to change notifications with `subscriptions/listen`:
    /// toolgate sends `tools/list_changed` there (as it does to a session on older revisions).
    fn accepted_subscription_filter(
        &self,
        _requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(
            rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .build(),
        )
    }

    /// One `subscriptions/listen` stream: a place among the principal's held streams
    /// (`[server] max_streams_per_principal`), then a `tools/list_changed` whenever an
    /// upstream's tools may show differently, until the client cancels it.
    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), McpError> {
        let who = self.who(&context.request_context().extensions)?;
        let _held = crate::gateway::hold(&self.gw, &who, crate::limits::HeldKind::Stream)
            .map_err(|e| McpError::invalid_request(e.to_string(), None))?;
        let Some(hub) = self.gw.upstreams.clone() else {
            context.cancelled().await;
            return Ok(());
        };
        let mut changes = hub.subscribe();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                changed = changes.recv() => match changed {
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        if context.sink().notify_tool_list_changed().await.is_err() {
                            return Ok(());
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        context.cancelled().await;
                        return Ok(());
                    }
                },
            }
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = self.visible(&context.extensions)?;
        let mut r: ListToolsResult = built(json!({"tools": tools}))?;
        r.result_type = Some(ResultType::COMPLETE);
        Ok(r)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        Ok(match self.call(request, &context).await? {
            CallToolResponse::Complete(mut r) => {
                r.result_type = Some(ResultType::COMPLETE);
                CallToolResponse::Complete(r)
            }
            other => other,
        })
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let reachable = self.reachable(&context.extensions)?;
        let Some(hub) = self.gw.upstreams.clone() else {
            let mut r: ListResourcesResult = built(json!({"resources": []}))?;
            r.result_type = Some(ResultType::COMPLETE);
            return Ok(r);
        };
        let listed = hub.list_resources().await;
        let mut resources = Vec::new();
        let mut found = Vec::new();
        for (upstream, r) in listed {
            if !reachable.contains(&upstream) {
                continue;
            }
            let Some(r) = self.screened_value(r) else {
                continue;
            };
            if let Some(uri) = r.get("uri").and_then(Value::as_str) {
                found.push((uri.to_owned(), upstream));
            }
            resources.push(r);
        }
        {
            let mut map = self
                .session
                .resources
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for (uri, upstream) in found {
                // The first upstream to list a URI keeps it: no upstream shadows another's.
                if map.len() < MAX_RESOURCES_PER_SESSION || map.contains_key(&uri) {
                    map.entry(uri).or_insert(upstream);
                }
            }
        }
        let mut r: ListResourcesResult = built(json!({"resources": resources}))?;
        r.result_type = Some(ResultType::COMPLETE);
        Ok(r)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let reachable = self.reachable(&context.extensions)?;
        let value = self.read(&request.uri, &reachable).await?;
        let screened = self.context_gate(&context, value).await?;
        let mut r: rmcp::model::ReadResourceResult = built(screened)?;
        r.result_type = Some(ResultType::COMPLETE);
        Ok(ReadResourceResponse::Complete(r))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let reachable = self.reachable(&context.extensions)?;
        let templates: Vec<Value> = match self.gw.upstreams.clone() {
            None => Vec::new(),
            Some(hub) => hub
                .list_resource_templates()
                .await
                .into_iter()
                .filter(|(upstream, _)| reachable.contains(upstream))
                .filter_map(|(_, t)| self.screened_value(t))
                .collect(),
        };
        let mut r: ListResourceTemplatesResult = built(json!({"resourceTemplates": templates}))?;
        r.result_type = Some(ResultType::COMPLETE);
        Ok(r)
    }

    /// `resources/subscribe` (2025-11-25): passed to the upstream the URI belongs to (once per
    /// URI for all sessions); its `notifications/resources/updated` come back to this session
    /// until it unsubscribes or ends.
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let reachable = self.reachable(&context.extensions)?;
        if rounds::modern(&context) {
            return Err(McpError::invalid_request(
                "resources/subscribe needs a session (MCP 2025-11-25); on 2026-07-28 toolgate offers tools/list_changed through subscriptions/listen",
                None,
            ));
        }
        let uri = request.uri;
        let upstream = self.owner(&uri, &reachable).await?;
        {
            let held = self
                .session
                .subscribed
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if held.len() >= MAX_SUBSCRIPTIONS_PER_SESSION && !held.contains_key(&uri) {
                return Err(McpError::invalid_request(
                    format!(
                        "this session has {MAX_SUBSCRIPTIONS_PER_SESSION} subscriptions already; unsubscribe from one first"
                    ),
                    None,
                ));
            }
        }
        let subscriber = self.subscriber(&context);
        self.hub()?
            .subscribe_resource(&upstream, &uri, &subscriber, UPSTREAM_ASK_TIMEOUT)
            .await
            .map_err(|e| McpError::internal_error(self.screened(&e.to_string()), None))?;
        self.session
            .subscribed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(uri, upstream);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.reachable(&context.extensions)?;
        let upstream = self
            .session
            .subscribed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&request.uri);
        let Some(upstream) = upstream else {
            return Ok(());
        };
        let subscriber = self.subscriber(&context);
        self.hub()?
            .unsubscribe_resource(&upstream, &request.uri, &subscriber, UPSTREAM_ASK_TIMEOUT)
            .await
            .map_err(|e| McpError::internal_error(self.screened(&e.to_string()), None))
    }

    /// `logging/setLevel`: the least severe upstream log message this session is sent.
    #[allow(deprecated, reason = "logging still serves clients on 2025-11-25")]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.who(&context.extensions)?;
        *self
            .session
            .level
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(request.level);
        Ok(())
    }

    /// `completion/complete`: a prompt's arguments from the upstream of the prompt, a
    /// template's variables from the upstream that lists the template; values screened.
    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let reachable = self.reachable(&context.extensions)?;
        let hub = self.hub()?;
        let mut request = request;
        let upstream = match &mut request.r#ref {
            rmcp::model::Reference::Prompt(p) => {
                let (upstream, name) = hub
                    .split(&p.name)
                    .filter(|(u, _)| reachable.contains(u))
                    .ok_or_else(|| McpError::invalid_params("no such prompt", None))?;
                p.name = name.to_owned();
                upstream
            }
            rmcp::model::Reference::Resource(r) => hub
                .list_resource_templates()
                .await
                .into_iter()
                .find_map(|(u, t)| {
                    (reachable.contains(&u)
                        && t.get("uriTemplate").and_then(Value::as_str) == Some(r.uri.as_str()))
                    .then_some(u)
                })
                .ok_or_else(|| McpError::invalid_params("no such resource template", None))?,
            _ => {
                return Err(McpError::invalid_params(
                    "unknown completion reference",
                    None,
                ));
            }
        };
        let answer = hub
            .complete(&upstream, request, UPSTREAM_ASK_TIMEOUT)
            .await
            .map_err(|e| McpError::internal_error(self.screened(&e.to_string()), None))?;
        let answer = self
            .screened_value(answer)
            .unwrap_or_else(|| json!({"completion": {"values": []}}));
        let mut r: CompleteResult = built(answer)?;
        r.result_type = Some(ResultType::COMPLETE);
        Ok(r)
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let reachable = self.reachable(&context.extensions)?;
        let Some(hub) = self.gw.upstreams.clone() else {
            let mut r: ListPromptsResult = built(json!({"prompts": []}))?;
            r.result_type = Some(ResultType::COMPLETE);
            return Ok(r);
        };
        let prompts: Vec<Value> = hub
            .list_prompts()
            .await
            .into_iter()
            .filter(|(upstream, _, _)| reachable.contains(upstream))
            .filter_map(|(upstream, prefix, mut p)| {
                let named = p
                    .get("name")
                    .and_then(Value::as_str)
                    .map(|n| crate::upstream::mounted(&prefix, hub.separator(), n))?;
                // Listed only under a name `prompts/get` brings back to this upstream: an
                // unprefixed prompt named like another upstream's prefix is left out.
                if hub.split(&named).map(|(u, _)| u) != Some(upstream) {
                    return None;
                }
                if let Some(obj) = p.as_object_mut() {
                    obj.insert("name".to_owned(), json!(named));
                }
                self.screened_value(p)
            })
            .collect();
        let mut r: ListPromptsResult = built(json!({"prompts": prompts}))?;
        r.result_type = Some(ResultType::COMPLETE);
        Ok(r)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let reachable = self.reachable(&context.extensions)?;
        let Some(hub) = self.gw.upstreams.clone() else {
            return Err(McpError::invalid_params("no such prompt", None));
        };
        let Some((upstream, name)) = hub
            .split(&request.name)
            .filter(|(u, _)| reachable.contains(u))
        else {
            return Err(McpError::invalid_params("no such prompt", None));
        };
        let value = hub
            .get_prompt(&upstream, name, request.arguments, UPSTREAM_ASK_TIMEOUT)
            .await
            .map_err(|e| McpError::internal_error(self.screened(&e.to_string()), None))?;
        let screened = self.context_gate(&context, value).await?;
        let mut r: rmcp::model::GetPromptResult = built(screened)?;
        r.result_type = Some(ResultType::COMPLETE);
        Ok(GetPromptResponse::Complete(r))
    }
}
