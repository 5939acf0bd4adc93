//! `/mcp`: the streamable-HTTP transport of the official SDK (sessions for protocol revisions
//! that have them, SSE responses, the `MCP-Protocol-Version` header, `Host` checks against DNS
//! rebinding) behind toolgate's bearer authentication: a request without a known credential
//! is answered 401 before the SDK sees it, and each MCP request is authorized on its own
//! `Authorization` header.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, PoisonError};

use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tower_service::Service as _;

use super::Front;
use crate::gateway::{Credential, Gateway};

/// The request parts the SDK hands each MCP request.
pub type Parts = axum::http::request::Parts;

/// The session header of the streamable-HTTP transport.
const SESSION_HEADER: &str = "mcp-session-id";

/// Sessions remembered with their owner, at most this many (the oldest are forgotten; the
/// SDK ends idle sessions itself).
const MAX_SESSIONS: usize = 65_536;

/// Which principal opened each session.
#[derive(Default)]
struct Owners {
    map: std::sync::Mutex<(HashMap<String, String>, VecDeque<String>)>,
}

impl Owners {
    fn owner(&self, id: &str) -> Option<String> {
        let m = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        m.0.get(id).cloned()
    }

    fn open(&self, id: &str, who: String) {
        let mut m = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if m.0.insert(id.to_owned(), who).is_none() {
            m.1.push_back(id.to_owned());
        }
        while m.1.len() > MAX_SESSIONS {
            if let Some(old) = m.1.pop_front() {
                m.0.remove(&old);
            }
        }
    }

    fn close(&self, id: &str) {
        let mut m = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        m.0.remove(id);
        m.1.retain(|k| k != id);
    }
}

/// The `/mcp` service.
#[derive(Clone)]
pub struct McpHttp {
    inner: StreamableHttpService<Front, LocalSessionManager>,
    gw: Gateway,
    owners: Arc<Owners>,
}

/// Builds `/mcp` for `gw`; `listen` adds the sidecar's own address to the accepted `Host`s.
pub fn service(gw: Gateway, listen: Option<std::net::SocketAddr>) -> McpHttp {
    let mut config = StreamableHttpServerConfig::default();
    config.legacy_session_mode = true;
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
    // A session outlives the longest held call (the SDK's default ends it after 5 idle
    // minutes, and a held call produces no traffic).
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(
        gw.mcp
            .hold_max
            .saturating_add(std::time::Duration::from_secs(300)),
    );
    let inner = StreamableHttpService::new(
        move || Ok(Front::http(factory_gw.clone())),
        Arc::new(sessions),
        config,
    );
    McpHttp {
        inner,
        gw,
        owners: Arc::default(),
    }
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
    pub async fn handle(mut self, req: Request<Body>) -> Response<Body> {
        let credential = req
            .headers()
            .get(header::AUTHORIZATION)
            .map(|v| v.as_bytes().to_vec());
        // An unknown caller is a recorded deny at the `auth` stage, as on every /v1 route.
        let who = match crate::gateway::caller(&self.gw, Credential(credential.as_deref())).await {
            Ok(c) => c.principal().uid.to_string(),
            Err(crate::gateway::Error::Unauthenticated(body)) => {
                let body = serde_json::to_vec(&body).unwrap_or_default();
                return answer(StatusCode::UNAUTHORIZED, "application/json", body, true);
            }
            Err(e) => {
                let body = serde_json::json!({"error": e.code(), "message": e.to_string()});
                return answer(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "application/json",
                    body.to_string().into_bytes(),
                    false,
                );
            }
        };
        // A session belongs to the principal that opened it: another credential holding its
        // id is told there is no such session.
        let session = req
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if let Some(id) = &session
            && self.owners.owner(id).is_some_and(|owner| owner != who)
        {
            return answer(
                StatusCode::NOT_FOUND,
                "text/plain",
                b"Not Found: no such session".to_vec(),
                false,
            );
        }
        let closing = req.method() == axum::http::Method::DELETE;
        let mut resp = match self.inner.call(req).await {
            Ok(resp) => resp.map(Body::new),
            Err(never) => match never {},
        };
        // The SDK's refusals (406, 400, …) are plain text without a media type: say so.
        if !resp.headers().contains_key(header::CONTENT_TYPE) && resp.status().as_u16() >= 400 {
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
        }
        match (&session, resp.headers().get(SESSION_HEADER)) {
            (None, Some(id)) => {
                if let Ok(id) = id.to_str() {
                    self.owners.open(id, who);
                }
            }
            (Some(id), _) if closing => self.owners.close(id),
            _ => {}
        }
        resp
    }
}
