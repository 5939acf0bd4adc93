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
        // The status of every plain error body is its code's, from the one table (`codes`);
        // its words are the error's own, the same an MCP client reads.
        let code = self.code();
        let message = self.message().into_owned();
        let suggestion = self.suggestion().into_owned();
        let body = |status: StatusCode| {
            (
                status,
                Json(ErrorBody {
                    error: code,
                    message: &message,
                    suggestion: &suggestion,
                }),
            )
                .into_response()
        };
        let plain = || {
            body(StatusCode::from_u16(code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        };
        match self {
            Error::BadRequest { .. } => body(StatusCode::BAD_REQUEST),
            // Always 409: the approval cannot make this change, whichever refusal it was
            // (some of those codes head a 200 deny when a call is re-sent with them).
            Error::ApprovalConflict { .. } => body(StatusCode::CONFLICT),
            Error::BodyTimeout => {
                let mut resp = plain();
                resp.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                resp
            }
            Error::TooManyConnections => {
                let mut resp = plain();
                let h = resp.headers_mut();
                h.insert(header::CONNECTION, HeaderValue::from_static("close"));
                h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                resp
            }
            Error::HeldFull(full) => {
                let mut resp = plain();
                if matches!(full, crate::limits::HeldFull::Agents { .. }) {
                    resp.headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                }
                resp
            }
            Error::Unauthenticated(body) => {
                let mut resp = (StatusCode::UNAUTHORIZED, Json(body)).into_response();
                resp.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                resp
            }
            Error::AuditUnavailable(body) => {
                (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
            }
            Error::Grant(crate::grants::GrantError::Store(err)) => {
                tracing::error!(error = %err, "grant store failed");
                plain()
            }
            Error::RateLimited { body, limited } => {
                let out = RateLimitedBody {
                    error: code,
                    retry_after: limited.retry_after_secs,
                    message,
                    suggestion: &suggestion,
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
                let out = PendingFullBody {
                    error: code,
                    retry_after: full.retry_after_secs,
                    message,
                    suggestion: &suggestion,
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
            _ => plain(),
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
