//! The approver console at `/ui`: a page and a script embedded in the binary (no CDN), a
//! sign-in that trades a human's token for an HttpOnly, SameSite=Strict session cookie plus a
//! per-session token, and a layer that lets the two together stand for the human's token on
//! `/v1/` routes. The console holds no logic of its own: every view and action is the HTTP
//! API's, so Cedar checks each one as it checks a `curl` with the same token.
//!
//! The cookie alone is worth nothing: cookies are shared by every port of a host, so a
//! server on another local port that the approver's browser visits (a dev server an agent
//! started) receives it. Every request it stands for must also carry the session's token in
//! `X-Toolgate-CSRF`, which the sign-in answer hands to the page once and the page keeps in
//! `sessionStorage` (per origin, port included). Browser requests must also come from the
//! console's own origin (`Origin`, `Sec-Fetch-Site`). Pages are served with a strict CSP:
//! scripts and styles from `/ui` only, nothing inline, no framing.

mod sessions;

pub use sessions::{Session, Sessions};

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::json;

use crate::clock::now_ms;
use crate::codes::Code;
use crate::gateway::{self, Credential, Error, Gateway};

/// The session cookie.
pub const COOKIE: &str = "toolgate_session";
/// The header a state change carries its CSRF token in.
pub const CSRF_HEADER: &str = "x-toolgate-csrf";
/// How long a session lasts from sign-in: a working day.
const SESSION_TTL_MS: u64 = 12 * 3600 * 1000;

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/app.css");

/// The console's routes (`/ui`, its assets, `/ui/session`), over the gateway's state.
pub fn routes(sessions: Arc<Sessions>) -> Router<Gateway> {
    Router::new()
        .route("/ui", get(page))
        .route("/ui/", get(page))
        .route("/ui/app.js", get(script))
        .route("/ui/app.css", get(style))
        .route(
            "/ui/session",
            get(show_session).post(sign_in).delete(sign_out),
        )
        .layer(Extension(sessions))
}

/// New sessions, for one router.
pub fn sessions() -> Arc<Sessions> {
    Arc::new(Sessions::new(SESSION_TTL_MS))
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    hardened(h);
    resp
}

/// Headers every console answer carries.
fn hardened(h: &mut HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

async fn page() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// The session id in the request's cookies.
fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim())
}

/// Whether a browser sent this request from the sidecar's own origin. Requests without the
/// headers browsers add (other clients) pass; the CSRF token still guards them.
fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site")
        && !matches!(site.as_bytes(), b"same-origin" | b"none")
    {
        return false;
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let origin = origin.as_bytes();
    origin == format!("http://{host}").as_bytes() || origin == format!("https://{host}").as_bytes()
}

fn csrf_refused(message: &str) -> Error {
    Error::Coded {
        code: Code::CsrfRejected,
        message: message.to_owned(),
    }
}

/// Checks a request the session cookie came with: from the console's own origin, and with
/// the session's token (every method: a cookie reaches other ports of the host too).
fn guard(session: &Session, headers: &HeaderMap) -> Result<(), Error> {
    if !same_origin(headers) {
        return Err(csrf_refused(
            "a request from another origin is refused; nothing was changed",
        ));
    }
    match headers.get(CSRF_HEADER) {
        Some(sent) if session.csrf_matches(sent.as_bytes()) => Ok(()),
        Some(_) => Err(csrf_refused(
            "the CSRF token does not match this session; nothing was changed",
        )),
        None => Err(csrf_refused(
            "a request made with the console's session cookie needs the session's token in `X-Toolgate-CSRF`; nothing was changed",
        )),
    }
}

/// The console session a `/v1/` request was let through with (the event stream ends with
/// it).
#[derive(Debug, Clone)]
pub struct ConsoleSession {
    /// The session id (the cookie's value).
    pub id: String,
    /// The sessions it belongs to.
    pub sessions: Arc<Sessions>,
}

impl ConsoleSession {
    /// Whether the session is still open.
    pub fn alive(&self) -> bool {
        self.sessions.get(&self.id, now_ms()).is_some()
    }
}

/// Lets a console session stand for its human's token on `/v1/` routes (a request with its
/// own `Authorization` header is left alone), after the origin and token checks.
pub async fn session_layer(
    Extension(sessions): Extension<Arc<Sessions>>,
    mut req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path();
    if !path.starts_with("/v1/") || req.headers().contains_key(header::AUTHORIZATION) {
        return next.run(req).await;
    }
    let Some((id, session)) =
        session_id(req.headers()).and_then(|id| Some((id.to_owned(), sessions.get(id, now_ms())?)))
    else {
        return next.run(req).await;
    };
    if let Err(e) = guard(&session, req.headers()) {
        tracing::warn!(principal = %session.principal, path, "console request refused: {e}");
        return e.into_response();
    }
    match HeaderValue::from_str(&session.credential) {
        Ok(mut v) => {
            v.set_sensitive(true);
            req.headers_mut().insert(header::AUTHORIZATION, v);
        }
        Err(_) => return Error::StoreUnavailable.into_response(),
    }
    req.extensions_mut().insert(ConsoleSession { id, sessions });
    next.run(req).await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignIn {
    token: String,
}

fn session_body(session: &Session) -> serde_json::Value {
    json!({
        "principal": session.principal,
        "expires_at_unix_ms": session.expires_ms,
    })
}

fn cookie(value: &str, max_age: u64) -> Result<HeaderValue, Error> {
    HeaderValue::from_str(&format!(
        "{COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}"
    ))
    .map_err(|_| Error::StoreUnavailable)
}

/// `POST /ui/session` `{"token": "…"}`: a human signs in. Agents' tokens are refused.
async fn sign_in(
    State(state): State<Gateway>,
    Extension(sessions): Extension<Arc<Sessions>>,
    headers: HeaderMap,
    body: Result<Json<SignIn>, JsonRejection>,
) -> Result<Response, Error> {
    if !same_origin(&headers) {
        return Err(csrf_refused(
            "sign-in from another origin is refused; open the console at this sidecar's own address",
        ));
    }
    let Json(SignIn { token }) = body?;
    let credential = format!("Bearer {}", token.trim());
    let who = gateway::human(
        &state,
        Credential(Some(credential.as_bytes())),
        "only humans sign in to the console; agents call tools with their token",
    )?;
    // A sign-in replaces the session this browser had.
    if let Some(old) = session_id(&headers) {
        sessions.close(old);
    }
    let (id, session) = sessions
        .open(credential, who.uid.to_string(), now_ms())
        .ok_or(Error::StoreUnavailable)?;
    tracing::info!(principal = %who.uid, "console sign-in");
    // The session's token is handed out here only: the page keeps it in sessionStorage.
    let mut body = session_body(&session);
    if let Some(obj) = body.as_object_mut() {
        obj.insert("csrf".to_owned(), json!(session.csrf));
    }
    let mut resp = Json(body).into_response();
    resp.headers_mut()
        .insert(header::SET_COOKIE, cookie(&id, sessions.ttl_secs())?);
    hardened(resp.headers_mut());
    Ok(resp)
}

fn signed_out() -> Error {
    Error::Coded {
        code: Code::Unauthenticated,
        message: "not signed in to the console (or the session ended); sign in with your token"
            .to_owned(),
    }
}

/// The request's open session, once its origin and token are checked.
fn checked_session<'h>(
    sessions: &Sessions,
    headers: &'h HeaderMap,
) -> Result<(&'h str, Session), Error> {
    let id = session_id(headers).ok_or_else(signed_out)?;
    let session = sessions.get(id, now_ms()).ok_or_else(signed_out)?;
    guard(&session, headers)?;
    Ok((id, session))
}

/// `GET /ui/session` (with the session's token): who is signed in. The human's token is
/// checked again: one that no longer authenticates ends the session.
async fn show_session(
    State(state): State<Gateway>,
    Extension(sessions): Extension<Arc<Sessions>>,
    headers: HeaderMap,
) -> Result<Response, Error> {
    let (id, session) = checked_session(&sessions, &headers)?;
    if gateway::human(
        &state,
        Credential(Some(session.credential.as_bytes())),
        "only humans sign in to the console",
    )
    .is_err()
    {
        sessions.close(id);
        return Err(signed_out());
    }
    let mut resp = Json(session_body(&session)).into_response();
    hardened(resp.headers_mut());
    Ok(resp)
}

/// `DELETE /ui/session` (with the session's token): signs out.
async fn sign_out(
    Extension(sessions): Extension<Arc<Sessions>>,
    headers: HeaderMap,
) -> Result<Response, Error> {
    let (id, session) = checked_session(&sessions, &headers)?;
    sessions.close(id);
    tracing::info!(principal = %session.principal, "console sign-out");
    let mut resp = Json(json!({"signed_out": true})).into_response();
    resp.headers_mut()
        .insert(header::SET_COOKIE, cookie("", 0)?);
    hardened(resp.headers_mut());
    Ok(resp)
}
