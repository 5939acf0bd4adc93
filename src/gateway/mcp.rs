//! MCP tools in the pipeline: the run of an allowed call through its upstream, with the
//! result screened like any tool's (`output`), and the human's approval of a changed
//! descriptor (Cedar `approve_descriptor`, audited). Whether a tool may be shown and called
//! now is `exposure`'s.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::body::Progress;
use super::body::{ExecAnswer, Metadata};
use super::decide::{Credential, human, record_or_refuse};
use super::error::Refusal;
use super::exposure::{Exposure, exposure};
use super::output::{MARKER_ROOM, outcome_on_record, screen_output};
use super::{Error, Gateway};
use crate::admin::{ApprovedDescriptor, descriptor_effect};
use crate::audit::{EntryKind, Event, ExecutionEvent, Operator};
use crate::codes::Code;
use crate::tools::{McpBinding, Tool};
use crate::upstream::{CallError, CallHooks};

/// Runs an allowed call through its upstream; the result is screened (output field policy,
/// `outputSchema` on `structuredContent`, the output gate on every text, embedded resource
/// and link, the size cap) and the run recorded with digests only.
pub(super) async fn run_mcp(
    state: &Gateway,
    tool: &Tool,
    b: &McpBinding,
    args: Value,
    ids: (String, String),
    mut entry: ExecutionEvent,
    hooks: CallHooks,
) -> Result<(Progress, ExecAnswer), Error> {
    let (decision_id, execution_id) = ids;
    let Some(hub) = state.upstreams.clone() else {
        return Err(unavailable_answer(
            decision_id,
            format!(
                "this sidecar does not connect to the upstream `{}`",
                b.upstream
            ),
        ));
    };
    // The upstream opens its paths itself: they pass the jail again first, as an executed
    // program's do, and go out in the form the decision judged.
    let args = match super::resolve::for_upstream(state, tool, args) {
        Ok(args) => args,
        Err((arg, why)) => {
            entry.outcome = "refused".to_owned();
            entry.reasons = vec![Code::PathDenied.to_string()];
            entry.detail = Some(format!("decision_id={decision_id}"));
            record_or_refuse(state, Event::Execution(entry).into(), "execution").await?;
            let mut answer = ExecAnswer::refused(
                decision_id,
                Code::PathDenied,
                format!("argument `{arg}`: {why}"),
                Code::PathDenied.hint(),
            );
            answer.metadata.execution_id = Some(execution_id);
            return Err(Error::Execution(Refusal::Arguments, Box::new(answer)));
        }
    };
    let arguments = match args {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    let started = Instant::now();
    let timeout = Duration::from_millis(tool.limits.timeout_ms);
    let forwarded = tracing::Instrument::instrument(
        hub.call(
            &b.upstream,
            &b.tool,
            arguments,
            timeout,
            hooks.progress,
            hooks.relay,
        ),
        crate::telemetry::spans::stage("execution"),
    );
    // A cancelled call is dropped (the upstream is told) and recorded as cancelled.
    let called = match hooks.cancelled {
        Some(cancelled) => tokio::select! {
            r = forwarded => r,
            () = cancelled => Err(CallError::Cancelled(b.upstream.clone())),
        },
        None => forwarded.await,
    };
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let metadata = Metadata {
        decision_id: decision_id.clone(),
        execution_id: Some(execution_id),
        duration_ms: Some(duration_ms),
        attempts: 1,
        ..Metadata::default()
    };
    let detail = format!(
        "decision_id={decision_id} upstream={} tool={} duration_ms={duration_ms}",
        b.upstream, b.tool
    );
    let result = match called {
        Ok(r) => r,
        Err(e) => {
            let (code, refusal) = match &e {
                CallError::Unavailable(..) => {
                    (Code::UpstreamUnavailable, Some(Refusal::Unavailable))
                }
                CallError::Timeout(..) => (Code::Timeout, None),
                CallError::Failed(..) | CallError::Cancelled(..) => (Code::UpstreamFailed, None),
            };
            entry.outcome = if matches!(e, CallError::Cancelled(_)) {
                "cancelled"
            } else {
                "error"
            }
            .to_owned();
            entry.reasons = vec![code.to_string()];
            entry.detail = Some(detail);
            record_or_refuse(state, Event::Execution(entry).into(), "execution").await?;
            // The upstream's words (an error's text) are screened like its results.
            let message = match &state.gates {
                Some(g) => g.redactor().redact(&e.to_string()),
                None => code.meaning().to_owned(),
            };
            let mut answer = ExecAnswer::refused(decision_id, code, message, code.hint());
            answer.metadata = metadata;
            return match refusal {
                Some(r) => Err(Error::Execution(r, Box::new(answer))),
                None => Ok((Progress::Done, answer)),
            };
        }
    };
    let upstream_error = result.is_error == Some(true);
    let mut value = serde_json::to_value(&result).unwrap_or(Value::Null);
    // Binary payloads (images, audio, blobs) are not text for the gate: set aside, counted,
    // and put back into the screened result.
    let blobs = take_blobs(&mut value);
    // What the upstream returned is tool output of the call's conversation (provenance).
    super::remember_output(state, &decision_id, &entry.principal, &value).await;
    let blob_bytes: usize = blobs.iter().map(|(_, b)| b.len()).sum();
    let schema_errors = match (value.get("structuredContent"), upstream_error) {
        (Some(sc), false) => tool.check_output(sc),
        _ => Vec::new(),
    };
    let cap = usize::try_from(tool.limits.max_output_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(MARKER_ROOM);
    let (mut verdict, _) = screen_output(
        state,
        (&decision_id, &entry.principal),
        value,
        schema_errors,
        tool.output_fields.clone(),
        cap.saturating_sub(blob_bytes.min(cap)),
        None,
    )
    .await?;
    if verdict.failure.is_none() {
        put_blobs(&mut verdict.data, blobs);
        if tool.output_fields.is_some() {
            text_from_structured(&mut verdict.data);
        }
    }
    let status = outcome_on_record(&mut entry, verdict.failure.as_ref(), &verdict.report);
    if upstream_error {
        entry.reasons.push("upstream_is_error".to_owned());
    }
    entry.detail = Some(format!(
        "{detail} truncated={} blob_bytes={blob_bytes}",
        verdict.truncated
    ));
    // The result's record is queued behind the decision's (already durable: the call ran
    // only after it) and stored with the next batch; the answer does not wait for its flush.
    state
        .audit
        .record_after(Event::Execution(entry).into())
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "result not recorded; refusing to answer");
            Error::StoreUnavailable
        })?;
    Ok((
        Progress::Done,
        ExecAnswer::screened(status, verdict, metadata),
    ))
}

/// A refusal answered with `code`'s status from the one table (404, 409).
fn refused(code: Code, message: String) -> Error {
    Error::Coded { code, message }
}

fn unavailable_answer(decision_id: String, message: String) -> Error {
    Error::Execution(
        Refusal::Unavailable,
        Box::new(ExecAnswer::refused(
            decision_id,
            Code::UpstreamUnavailable,
            message,
            Code::UpstreamUnavailable.hint(),
        )),
    )
}

/// With a field policy, the text blocks become the filtered `structuredContent` (servers
/// repeat the structured value as text, which would carry the fields the policy dropped).
fn text_from_structured(v: &mut Value) {
    let Some(sc) = v.get("structuredContent").cloned() else {
        return;
    };
    if let Some(obj) = v.as_object_mut() {
        obj.insert(
            "content".to_owned(),
            serde_json::json!([{"type": "text", "text": sc.to_string()}]),
        );
    }
}

/// Media types whose blobs are text to a model: decoded and screened as text.
fn text_like(mime: &str) -> bool {
    let m = mime.split(';').next().unwrap_or_default().trim();
    m.starts_with("text/")
        || m.ends_with("+json")
        || m.ends_with("+xml")
        || matches!(
            m,
            "application/json"
                | "application/xml"
                | "application/yaml"
                | "application/x-yaml"
                | "application/javascript"
                | "application/x-sh"
                | "application/toml"
                | ""
        )
}

/// JSON pointers and values of the base64 payloads in an MCP result, a resource read or a
/// prompt (`data` of image and audio content, `blob` of resource contents, in `content`,
/// `contents`, `messages` and `resource`),
/// replaced by a placeholder. A blob of a text-like (or no) media type that decodes to UTF-8
/// becomes `text` instead, so the gate screens it.
pub fn take_blobs(v: &mut Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    walk_blobs(v, &mut String::new(), &mut out, 0);
    out
}

fn walk_blobs(v: &mut Value, at: &mut String, out: &mut Vec<(String, String)>, depth: usize) {
    use base64::Engine as _;
    // Deeper than any MCP shape: the rest is screened as it is.
    if depth > 16 {
        return;
    }
    match v {
        Value::Object(obj) => {
            if matches!(
                obj.get("type").and_then(Value::as_str),
                Some("image" | "audio")
            ) && let Some(Value::String(s)) = obj.get_mut("data")
            {
                out.push((format!("{at}/data"), std::mem::take(s)));
            }
            let mime = obj
                .get("mimeType")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let text = obj
                .get("blob")
                .and_then(Value::as_str)
                .filter(|_| text_like(&mime))
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                .and_then(|bytes| String::from_utf8(bytes).ok());
            if let Some(text) = text {
                obj.remove("blob");
                obj.insert("text".to_owned(), Value::String(text));
            } else if let Some(Value::String(s)) = obj.get_mut("blob") {
                out.push((format!("{at}/blob"), std::mem::take(s)));
            }
            // Only where MCP puts content (never `structuredContent` or other fields, which
            // the gate must see whole).
            for (key, child) in obj.iter_mut() {
                if !matches!(
                    key.as_str(),
                    "content" | "contents" | "messages" | "resource"
                ) {
                    continue;
                }
                let len = at.len();
                at.push('/');
                at.push_str(&key.replace('~', "~0").replace('/', "~1"));
                walk_blobs(child, at, out, depth + 1);
                at.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter_mut().enumerate() {
                let len = at.len();
                at.push('/');
                at.push_str(&i.to_string());
                walk_blobs(child, at, out, depth + 1);
                at.truncate(len);
            }
        }
        _ => {}
    }
}

/// Puts back what [`take_blobs`] set aside.
pub fn put_blobs(v: &mut Value, blobs: Vec<(String, String)>) {
    for (ptr, data) in blobs {
        if let Some(slot) = v.pointer_mut(&ptr) {
            *slot = Value::String(data);
        }
    }
}

/// A changed descriptor, for `GET /v1/mcp/descriptors`.
#[derive(Debug, Serialize)]
pub struct ChangedDescriptor {
    /// The namespaced tool.
    pub tool: String,
    /// Its upstream.
    pub upstream: String,
    /// The reviewed hash (the manifest's `mcp.pin`).
    pub pinned: String,
    /// The live hash.
    pub offered: String,
    /// The live descriptor, as the upstream sends it (for review).
    pub descriptor: Value,
}

/// `GET /v1/mcp/descriptors`: upstreams, changed descriptors and approvals in force (humans).
pub fn descriptors_view(state: &Gateway, credential: Credential<'_>) -> Result<Value, Error> {
    human(state, credential, "descriptor reviews are for humans")?;
    let snap = state.policy.current();
    let mut changed = Vec::new();
    for tool in snap.tools.values() {
        let Some(b) = &tool.mcp else { continue };
        if let Exposure::Changed { offered } = exposure(state, tool, b) {
            let descriptor = state
                .upstreams
                .as_ref()
                .and_then(|h| {
                    h.descriptors(&b.upstream)
                        .into_iter()
                        .find(|d| d.name == b.tool)
                })
                .map(|d| d.raw)
                .unwrap_or(Value::Null);
            changed.push(ChangedDescriptor {
                tool: tool.name.clone(),
                upstream: b.upstream.clone(),
                pinned: b.pin.clone(),
                offered,
                descriptor,
            });
        }
    }
    Ok(serde_json::json!({
        "upstreams": state.upstreams.as_ref().map(|h| h.status()).unwrap_or_default(),
        "changed": changed,
        "approved": state.admin.descriptors().list(),
    }))
}

/// `POST /v1/mcp/descriptors/approve` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproveDescriptorBody {
    /// The namespaced tool.
    pub tool: String,
    /// The live hash being approved (so a second change in between is not approved blind).
    pub pin: String,
    /// Why.
    pub reason: String,
}

/// `POST /v1/mcp/descriptors/approve`: a human the policies allow approves a tool's changed
/// descriptor; the approval is recorded, then in force.
pub async fn approve_descriptor(
    state: &Gateway,
    credential: Credential<'_>,
    body: Result<ApproveDescriptorBody, Error>,
) -> Result<Value, Error> {
    let who = human(state, credential, "descriptor approvals are for humans")?;
    let body = body?;
    if body.reason.trim().is_empty() {
        return Err(Error::BadRequest {
            code: Code::InvalidBody,
            message: "`reason` is empty".to_owned(),
            suggestion: "say why the new descriptor is safe",
        });
    }
    let snap = state.policy.current();
    let Some((tool, b)) = snap
        .tools
        .get(&body.tool)
        .and_then(|t| t.mcp.as_ref().map(|b| (t, b)))
    else {
        return Err(refused(
            Code::NotAnMcpTool,
            format!(
                "no MCP upstream tool named `{}` is registered",
                body.tool.chars().take(64).collect::<String>()
            ),
        ));
    };
    let offered = match exposure(state, tool, b) {
        Exposure::Changed { offered } => offered,
        Exposure::Ready => {
            return Err(refused(
                Code::DescriptorUnchanged,
                format!(
                    "`{}`'s descriptor has not changed (or is approved already)",
                    tool.name
                ),
            ));
        }
        Exposure::Unavailable(why) => {
            return Err(refused(
                Code::DescriptorUnchanged,
                format!("`{}`'s upstream cannot be asked now: {why}", tool.name),
            ));
        }
    };
    if offered != body.pin {
        return Err(refused(
            Code::DescriptorMoved,
            format!(
                "the live descriptor of `{}` is {offered}, not the one approved",
                tool.name
            ),
        ));
    }
    let policies =
        crate::authz::may_approve_descriptor(&snap, &who, tool, &b.upstream, &b.pin, &offered)
            .map_err(Error::Refused)?;
    let by = who.uid.to_string();
    let entry = ApprovedDescriptor {
        tool: tool.name.clone(),
        was: b.pin.clone(),
        pin: offered.clone(),
        by: by.clone(),
        reason: body.reason.clone(),
        at_ms: crate::clock::now_ms(),
    };
    let effect = descriptor_effect(&tool.name, Some(&entry)).map_err(|e| {
        tracing::error!(error = %e, "descriptor approval not stored");
        Error::StoreUnavailable
    })?;
    let record = Operator::by(EntryKind::Admin, "descriptor", &by, &snap.revision).entry(
        "approved",
        policies,
        format!(
            "tool={} upstream={} was={} now={} reason_len={}",
            tool.name,
            b.upstream,
            b.pin,
            offered,
            body.reason.chars().count()
        ),
    );
    state
        .audit
        .commit(vec![record], vec![effect])
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "descriptor approval not recorded; refusing");
            Error::StoreUnavailable
        })?;
    state.admin.descriptors().put(entry.clone());
    if let Some(hub) = &state.upstreams {
        hub.touch(&b.upstream);
    }
    tracing::info!(
        tool = tool.name,
        by,
        pin = offered,
        "MCP descriptor approved"
    );
    Ok(serde_json::to_value(entry).unwrap_or(Value::Null))
}
