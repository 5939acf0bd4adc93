//! The HTTP face of [`Error`]: the one table from errors to status codes and bodies, and the
//! conversion of axum's body and query rejections into errors. Internal details are logged
//! where they happen, never sent.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::codes::Code;
use crate::gateway::{DecisionBody, Error, Refusal};
use crate::limits::{Per, Quota, Scope};

/// Fields a caller might use to claim an identity in the body; refused with a pointed message.
const IDENTITY_FIELDS: [&str; 5] = ["principal", "agent", "user", "identity", "subject"];

/// The 429 body for a full approval queue: what the client needs first, then the decision.
#[derive(Serialize)]
struct PendingFullBody<'a> {
    error: Code,
    retry_after: u64,
    message: String,
    suggestion: &'a str,
    scope: crate::approvals::Scope,
    limit: usize,
    pending: usize,
    #[serde(flatten)]
    decision: &'a DecisionBody,
}

/// The 429 body: what a rate-limited client needs first, then the decision itself.
#[derive(Serialize)]
struct RateLimitedBody<'a> {
    error: Code,
    retry_after: u64,
    message: String,
    suggestion: &'a str,
    scope: Scope,
    per: Per,
    #[serde(flatten)]
    decision: &'a DecisionBody,
}

/// `X-RateLimit-*` headers for `quota` (on allowed and limited calls alike).
pub(super) fn quota_headers(quota: &Quota) -> HeaderMap {
    let mut h = HeaderMap::with_capacity(3);
    h.insert("x-ratelimit-limit", HeaderValue::from(quota.limit));
    h.insert("x-ratelimit-remaining", HeaderValue::from(quota.remaining));
    h.insert("x-ratelimit-reset", HeaderValue::from(quota.reset_secs));
    h
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: Code,
    message: &'a str,
    suggestion: &'a str,
}

/// serde quotes offending values (`invalid type: string "sk-live…"`); requests may carry
/// secrets, so every double-quoted run is replaced before the message is sent back.
fn unquote(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut inside = false;
    let mut escaped = false;
    for c in message.chars() {
        match (inside, escaped, c) {
            (true, false, '\\') => escaped = true,
            (true, true, _) => escaped = false,
            (true, false, '"') => {
                inside = false;
                out.push_str("\"…\"");
            }
            (true, false, _) => {}
            (false, _, '"') => inside = true,
            (false, _, c) => out.push(c),
        }
    }
    if inside {
        out.push_str("\"…");
    }
    out
}

impl From<JsonRejection> for Error {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::MissingJsonContentType(_) => Error::UnsupportedMediaType,
            r if super::serve::timed_out(&r) => Error::BodyTimeout,
            r if r.status() == StatusCode::PAYLOAD_TOO_LARGE => Error::PayloadTooLarge,
            JsonRejection::JsonSyntaxError(e) => Error::BadRequest {
                code: Code::InvalidJson,
                message: unquote(&e.body_text()),
                suggestion: "send a well-formed JSON object",
            },
            JsonRejection::JsonDataError(e) => {
                let text = unquote(&e.body_text());
                let claims_identity = IDENTITY_FIELDS
                    .iter()
                    .any(|f| text.contains(&format!("unknown field `{f}`")));
                if claims_identity {
                    Error::BadRequest {
                        code: Code::IdentityInBody,
                        message: "the body may not name a principal: identity comes only from the \
                                  `Authorization` credential"
                            .to_owned(),
                        suggestion: "remove the field; authenticate as the principal instead",
                    }
                } else {
                    Error::BadRequest {
                        code: Code::InvalidBody,
                        message: text,
                        // Shared by every route: the message names the field and the ones expected.
                        suggestion: "send only the fields the message lists (docs/openapi.json has each route's body)",
                    }
                }
            }
            other => Error::BadRequest {
                code: Code::InvalidBody,
                message: unquote(&other.body_text()),
                suggestion: "send a JSON body",
            },
        }
    }
}

impl From<QueryRejection> for Error {
    fn from(rejection: QueryRejection) -> Self {
        Error::BadRequest {
            code: Code::InvalidQuery,
            message: unquote(&rejection.body_text()),
            suggestion: "see docs/openapi.json for this route's query parameters",
        }
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        // The status of every plain error body is its code's, from the one table (`codes`).
        let plain = |error: Code, message: &str, suggestion: &str| {
            let status =
                StatusCode::from_u16(error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (
                status,
                Json(ErrorBody {
                    error,
                    message,
                    suggestion,
                }),
            )
                .into_response()
        };
        let code = self.code();
        match self {
            Error::BadRequest {
                message,
                suggestion,
                ..
            } => (
                StatusCode::BAD_REQUEST,
                Json(ErrorBody {
                    error: code,
                    message: &message,
                    suggestion,
                }),
            )
                .into_response(),
            Error::PayloadTooLarge => plain(
                code,
                "the request body is larger than the configured limit",
                "send smaller arguments; the limit is `max_body_bytes` in the config",
            ),
            Error::BodyTimeout => {
                let mut resp = plain(
                    code,
                    "the request body did not arrive in time",
                    "send the whole body at once; the limit is `server.body_timeout_ms` in the config",
                );
                resp.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                resp
            }
            Error::TooManyConnections => {
                let mut resp = plain(
                    code,
                    "every connection slot holds a request in progress",
                    "retry shortly; operators: the limit is `server.max_connections` in the config",
                );
                let h = resp.headers_mut();
                h.insert(header::CONNECTION, HeaderValue::from_static("close"));
                h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                resp
            }
            Error::HeldFull(full) => {
                let mut resp = plain(
                    code,
                    &full.to_string(),
                    match full {
                        crate::limits::HeldFull::Principal { .. } => {
                            "end a request you hold open (close a stream, let a long poll return) before opening another; do not retry in a loop"
                        }
                        crate::limits::HeldFull::Agents { .. } => {
                            "retry shortly; operators: see `server.max_connections` and `server.reserved_connections`"
                        }
                    },
                );
                if matches!(full, crate::limits::HeldFull::Agents { .. }) {
                    resp.headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                }
                resp
            }
            Error::UnsupportedMediaType => plain(
                code,
                "the body must be JSON",
                "send `Content-Type: application/json`",
            ),
            Error::Unauthenticated(body) => {
                let mut resp = (StatusCode::UNAUTHORIZED, Json(body)).into_response();
                resp.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                resp
            }
            Error::NotFound => plain(
                code,
                "no such route",
                "see docs/openapi.json for the routes",
            ),
            Error::MethodNotAllowed => plain(
                code,
                "this route does not accept that method",
                "see docs/openapi.json for the routes",
            ),
            Error::Forbidden(message) => plain(code, message, code.hint()),
            Error::AuditUnavailable(body) => {
                (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
            }
            Error::StoreUnavailable => plain(
                code,
                "the data store failed; nothing was changed",
                "retry later; operators: see /readyz and the logs",
            ),
            Error::ApprovalNotFound => plain(
                code,
                "no approval with this id is visible to you",
                "use the `approval_id` from a pending_approval decision",
            ),
            // Always 409: the approval cannot make this change, whichever refusal it was
            // (some of those codes head a 200 deny when a call is re-sent with them).
            Error::ApprovalConflict { message, .. } => (
                StatusCode::CONFLICT,
                Json(ErrorBody {
                    error: code,
                    message: &message,
                    suggestion: "ask the agent to send the call again for a new approval",
                }),
            )
                .into_response(),
            Error::Refused(advice) => plain(code, &advice.message, &advice.suggestion),
            Error::NotEligible(message) => plain(
                code,
                &message,
                "ask an approver that the policies make eligible for this tool's risk tier",
            ),
            Error::KillSwitchForced(by) => plain(
                code,
                &format!("the kill switch is forced on by {by}"),
                "remove `kill_switch = true` from the config or TOOLGATE_KILL_SWITCH from the environment, then restart",
            ),
            Error::NotQuarantined(agent) => plain(
                code,
                &format!("{agent} is not quarantined"),
                "see GET /v1/admin/quarantine for the quarantined agents",
            ),
            Error::Held(e) => plain(
                code,
                &e.to_string(),
                "GET /v1/policies shows the held change (`held.revision`) and its diff",
            ),
            Error::Grant(e) => {
                let message = match &e {
                    crate::grants::GrantError::Store(err) => {
                        tracing::error!(error = %err, "grant store failed");
                        "the data store failed; nothing was changed".to_owned()
                    }
                    other => other.to_string(),
                };
                plain(code, &message, code.hint())
            }
            Error::Coded { message, .. } => plain(code, &message, code.hint()),
            Error::UnknownGate => plain(
                code,
                "no such gate; the gates are input, context, tool_call, output and stream",
                "POST /v1/gates/{input|context|tool_call|output|stream}",
            ),
            Error::GatesUnavailable => plain(
                code,
                "the redaction detectors are not available, so content cannot be screened (fail closed)",
                "operators: see the logs at startup for why the detectors failed to build",
            ),
            Error::Stream(e) => plain(
                code,
                &e.to_string(),
                "send each stream's chunks in order and end it with `\"final\": true`",
            ),
            Error::RateLimited { body, limited } => {
                let per = match limited.quota.per {
                    Per::Bucket => "burst".to_owned(),
                    window => format!("per {}", window.as_str()),
                };
                let message = format!(
                    "rate limit reached ({} calls {per}, scope {}); retry in {} s",
                    limited.quota.limit,
                    match limited.quota.scope {
                        Scope::PrincipalTool => "principal and tool",
                        Scope::Principal => "principal",
                        Scope::Global => "all callers",
                    },
                    limited.retry_after_secs
                );
                let out = RateLimitedBody {
                    error: code,
                    retry_after: limited.retry_after_secs,
                    message,
                    suggestion: "wait `retry_after` seconds before calling again; do not retry in a loop",
                    scope: limited.quota.scope,
                    per: limited.quota.per,
                    decision: &body,
                };
                let mut resp = (StatusCode::TOO_MANY_REQUESTS, Json(out)).into_response();
                let headers = resp.headers_mut();
                headers.extend(quota_headers(&limited.quota));
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(limited.retry_after_secs),
                );
                resp
            }
            Error::TooManyPendingApprovals { body, full } => {
                let (message, suggestion) = body
                    .errors
                    .first()
                    .map(|e| (e.message.clone(), e.suggestion.as_str()))
                    .unwrap_or_else(|| (full.to_string(), "wait before calling again"));
                let out = PendingFullBody {
                    error: code,
                    retry_after: full.retry_after_secs,
                    message,
                    suggestion,
                    scope: full.scope,
                    limit: full.limit,
                    pending: full.pending,
                    decision: &body,
                };
                let mut resp = (StatusCode::TOO_MANY_REQUESTS, Json(out)).into_response();
                resp.headers_mut().insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(full.retry_after_secs),
                );
                resp
            }
            Error::NotReady => plain(
                code,
                "no valid policy set is loaded",
                "fix the policies (run `toolgate validate`)",
            ),
            Error::Execution(refusal, body) => {
                let status = match refusal {
                    Refusal::Denied => StatusCode::FORBIDDEN,
                    Refusal::Arguments => StatusCode::UNPROCESSABLE_ENTITY,
                    Refusal::NotExecutable => StatusCode::CONFLICT,
                    Refusal::Busy => StatusCode::TOO_MANY_REQUESTS,
                    Refusal::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                };
                (status, Json(body)).into_response()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::unquote;

    #[test]
    fn quoted_values_are_removed_from_messages() {
        assert_eq!(
            unquote(r#"context.iter: invalid type: string "sk-live-\"x", expected i64 at line 1"#),
            r#"context.iter: invalid type: string "…", expected i64 at line 1"#
        );
        assert_eq!(
            unquote("unknown field `principal`"),
            "unknown field `principal`"
        );
    }
}
