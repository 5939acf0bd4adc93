//! `/mcp`: the streamable-HTTP transport of the official SDK (sessions for protocol revisions
//! that have them, SSE responses, the `MCP-Protocol-Version` header, `Host` checks against DNS
//! rebinding) behind toolgate's bearer authentication: a request without a known credential
//! is answered 401 before the SDK sees it, and each MCP request is authorized on its own
//! `Authorization` header. Each principal's sessions and `GET` streams are bounded (`[mcp]
//! max_sessions_per_principal`, `[server] max_streams_per_principal`; one more is answered
//! 429 with the code's error body) and only the principal that opened a session may use it.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use http_body::{Frame, SizeHint};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tower_service::Service as _;

use super::Front;
use super::sessions::{Registry, Tracked};
use crate::codes::Code;
use crate::gateway::{Credential, Gateway};

/// The request parts the SDK hands each MCP request.
pub type Parts = axum::http::request::Parts;

/// The session header of the streamable-HTTP transport.
const SESSION_HEADER: &str = "mcp-session-id";

/// Messages a session queues per stream.
const SESSION_QUEUE: usize = 16;

/// The `/mcp` service.
#[derive(Clone)]
pub struct McpHttp {
    inner: StreamableHttpService<Front, Tracked>,
    gw: Gateway,
    sessions: Arc<Registry>,
    tracked: Arc<Tracked>,
    /// Set once the idle sweeper runs (started by the first request: a runtime is needed).
    sweeping: Arc<OnceLock<()>>,
}

/// Builds `/mcp` for `gw`; `listen` adds the sidecar's own address to the accepted `Host`s.
pub fn service(gw: Gateway, listen: Option<std::net::SocketAddr>) -> McpHttp {
    let mut config = StreamableHttpServerConfig::default();
    config.legacy_session_mode = true;
    // A stateless (2026-07-28) request whose first message is its answer gets it as
    // `application/json`, not an SSE stream; one that notifies first still streams.
    config.json_response = true;
    config.sse_keep_alive = Some(std::time::Duration::from_secs(15));
    config.max_request_body_bytes = gw.max_body_bytes.max(1024 * 1024);
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1", "[::1]"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    if let Some(addr) = listen {
        hosts.push(addr.ip().to_string());
        hosts.push(addr.to_string());
    }
    hosts.extend(gw.mcp.allowed_hosts.iter().cloned());
    config.allowed_hosts = hosts;
    let factory_gw = gw.clone();
    // Idle sessions are ended by the sweeper (`sessions`), which counts a held call as busy.
    // The SDK's own keep-alive, which does not, only backs it up: past the longest hold.
    let mut local = LocalSessionManager::default();
    // What one session may have queued per stream before its sender waits (the SDK's default,
    // made explicit: it is part of a session's bound on memory, docs/mcp.md).
    local.session_config.channel_capacity = SESSION_QUEUE;
    local.session_config.keep_alive = Some(gw.mcp.hold_max.saturating_add(gw.mcp.session_idle));
    let sessions = Arc::new(Registry::new(
        gw.mcp.max_sessions_per_principal,
        gw.mcp.session_idle,
        Some(gw.metrics.clone()),
    ));
    let tracked = Arc::new(Tracked::new(local, sessions.clone()));
    let inner = StreamableHttpService::new(
        move || Ok(Front::http(factory_gw.clone())),
        tracked.clone(),
        config,
    );
    McpHttp {
        inner,
        gw,
        sessions,
        tracked,
        sweeping: Arc::default(),
    }
}

/// An answer's body, with what the request holds (its session busy, its place among the
/// principal's streams) given back when the body ends or is dropped.
struct Holding<B> {
    body: B,
    _busy: Option<super::sessions::Busy>,
    _held: Option<crate::limits::HeldPermit>,
}

impl<B> http_body::Body for Holding<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A refusal as the HTTP API answers it: `{error, message, suggestion}`, the code's status.
fn refused(code: Code, message: &str) -> Response<Body> {
    let status = StatusCode::from_u16(code.status()).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let body = serde_json::json!({"error": code, "message": message, "suggestion": code.hint()});
    let mut resp = answer(
        status,
        "application/json",
        body.to_string().into_bytes(),
        false,
    );
    if status == StatusCode::SERVICE_UNAVAILABLE {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

fn answer(status: StatusCode, media: &'static str, body: Vec<u8>, bearer: bool) -> Response<Body> {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    if bearer {
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
    resp
}

impl McpHttp {
    /// Answers one HTTP request to `/mcp`.
    pub async fn handle(self, req: Request<Body>) -> Response<Body> {
        if self.sweeping.set(()).is_ok() {
            tokio::spawn(super::sessions::sweep_while(
                Arc::downgrade(&self.tracked),
                self.gw.mcp.session_idle,
            ));
        }
        let credential = req
            .headers()
            .get(header::AUTHORIZATION)
            .map(|v| v.as_bytes().to_vec());
        // An unknown caller is a recorded deny at the `auth` stage, as on every /v1 route.
        let caller = match crate::gateway::caller(&self.gw, Credential(credential.as_deref())).await
        {
            Ok(c) => c,
            Err(crate::gateway::Error::Unauthenticated(body)) => {
                let body = serde_json::to_vec(&body).unwrap_or_default();
                return answer(StatusCode::UNAUTHORIZED, "application/json", body, true);
            }
            Err(e) => {
                let body = serde_json::json!({"error": e.code(), "message": e.message(),
                    "suggestion": e.suggestion()});
                return answer(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "application/json",
                    body.to_string().into_bytes(),
                    false,
                );
            }
        };
        let who = caller.principal().uid.to_string();
        let session = req
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // A session belongs to the principal that opened it: to another credential holding
        // its id (and for an id never opened here, or ended) there is no such session.
        let busy = match &session {
            Some(id) => match self.sessions.enter(id, &who) {
                Ok(busy) => Some(busy),
                Err(super::sessions::NotYours::Unknown) => {
                    return answer(
                        StatusCode::NOT_FOUND,
                        "text/plain",
                        b"Not Found: no such session".to_vec(),
                        false,
                    );
                }
            },
            None => None,
        };
        // A `GET` is an event stream: one of the principal's `max_streams_per_principal`.
        let held = if req.method() == axum::http::Method::GET {
            match crate::gateway::hold(
                &self.gw,
                caller.principal(),
                crate::limits::HeldKind::Stream,
            ) {
                Ok(permit) => Some(permit),
                Err(e) => return refused(e.code(), &e.message()),
            }
        } else {
            None
        };
        let deleting = req.method() == axum::http::Method::DELETE;
        let mut inner = self.inner.clone();
        let answered = if session.is_none() && req.method() == axum::http::Method::POST {
            // It may open a session: its place is reserved first, so a principal's sessions
            // never outnumber its bound, however many requests arrive at once.
            match self.sessions.reserve(&who) {
                Ok(opening) => opening.around(inner.call(req)).await,
                Err(full) => return refused(Code::TooManySessions, &full.to_string()),
            }
        } else {
            inner.call(req).await
        };
        let mut resp = match answered {
            Ok(resp) => resp.map(|body| {
                Body::new(Holding {
                    body,
                    _busy: busy,
                    _held: held,
                })
            }),
            Err(never) => match never {},
        };
        // A session ended by `DELETE`: 204, which clients take as done (the SDK answers 202,
        // which the spec gives no meaning there, and the Python SDK warns about it).
        if deleting && resp.status() == StatusCode::ACCEPTED {
            *resp.status_mut() = StatusCode::NO_CONTENT;
        }
        // The SDK's refusals (406, 400, …) are plain text without a media type: say so.
        if !resp.headers().contains_key(header::CONTENT_TYPE) && resp.status().as_u16() >= 400 {
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
        }
        resp
    }
}
