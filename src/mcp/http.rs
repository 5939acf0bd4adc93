//! `/mcp`: the streamable-HTTP transport of the official SDK (sessions for protocol revisions
//! that have them, SSE responses, the `MCP-Protocol-Version` header, `Host` checks against DNS
//! rebinding) behind toolgate's bearer authentication: a request without a known credential
//! is answered 401 before the SDK sees it, and each MCP request is authorized on its own
//! `Authorization` header.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tower_service::Service as _;

use super::Front;
use crate::gateway::{Credential, Gateway};

/// The request parts the SDK hands each MCP request.
pub type Parts = axum::http::request::Parts;

/// The `/mcp` service.
#[derive(Clone)]
pub struct McpHttp {
    inner: StreamableHttpService<Front, LocalSessionManager>,
    gw: Gateway,
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
    let inner = StreamableHttpService::new(
        move || Ok(Front::http(factory_gw.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    McpHttp { inner, gw }
}

impl McpHttp {
    /// Answers one HTTP request to `/mcp`.
    pub async fn handle(mut self, req: Request<Body>) -> Response<Body> {
        let credential = req
            .headers()
            .get(header::AUTHORIZATION)
            .map(|v| v.as_bytes().to_vec());
        if let Err(e) = crate::gateway::authenticate(&self.gw, Credential(credential.as_deref())) {
            let body = serde_json::json!({
                "error": "unauthenticated",
                "message": e.to_string(),
                "suggestion": "send the agent's token as `Authorization: Bearer <token>`",
            });
            let mut resp = Response::new(Body::from(body.to_string()));
            *resp.status_mut() = StatusCode::UNAUTHORIZED;
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            return resp;
        }
        match self.inner.call(req).await {
            Ok(resp) => resp.map(Body::new),
            Err(never) => match never {},
        }
    }
}
