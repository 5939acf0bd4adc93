//! `POST /v1/gates/{gate}`: screens content (a string or any JSON) with one gate's rules and
//! answers `{decision, content, violations}`. The stream gate takes a stream's chunks in order
//! (`{stream_id, content, final}`) and answers with the text that is safe to pass on now. Any
//! authenticated principal may call them. A gate that finds something writes an audit record
//! (the kinds found, never the content) before it answers.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Error, Gateway};
use crate::audit::{Event, Screened};
use crate::authz::Principal;
use crate::clock::now_ms;
use crate::codes::Code;
use crate::redact::{Action, ChunkScreened, Gate, MAX_CHUNK, Violation, labels};

/// The request body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateBody {
    /// What to screen: a string, or JSON whose strings are screened and whose sensitive keys'
    /// values are masked. For the stream gate: the next chunk (a string).
    content: Value,
    /// The stream gate only: which stream the chunk belongs to (per principal).
    #[serde(default)]
    stream_id: Option<String>,
    /// The stream gate only: this is the stream's last chunk; everything held is flushed.
    #[serde(default, rename = "final")]
    last: bool,
    /// The conversation the content belongs to: for the `input` gate what the user said, for
    /// `context` and `output` what tools returned (`context.provenance` of later calls).
    #[serde(default)]
    conv_id: Option<String>,
}

/// The stream gate's answer: the chunk verdict and the stream it belongs to.
#[derive(Debug, Serialize)]
pub struct StreamAnswer {
    stream_id: String,
    #[serde(flatten)]
    screened: ChunkScreened,
}

/// Screens content with one gate (`POST /v1/gates/{gate}`) and records what it found. The
/// gate's name is checked before the body is read.
pub async fn screen_content(
    state: &Gateway,
    who: Principal,
    gate: &str,
    body: Result<GateBody, Error>,
) -> Result<Value, Error> {
    let gate = Gate::parse(gate).ok_or(Error::UnknownGate)?;
    let body = body?;
    // Fail closed: without detectors nothing is screened, so nothing passes.
    let Some(gates) = state.gates.clone() else {
        return Err(Error::GatesUnavailable);
    };
    if gate == Gate::Stream {
        let span = crate::telemetry::spans::guardrail(gate.as_str());
        let answer =
            tracing::Instrument::instrument(stream(state, &who, gates, body), span).await?;
        return Ok(serde_json::to_value(answer).unwrap_or(Value::Null));
    }
    if body.stream_id.is_some() || body.last {
        return Err(Error::bad_request(
            Code::InvalidBody,
            "`stream_id` and `final` belong to the stream gate only",
        ));
    }
    let source = match (gate, &body.conv_id) {
        (_, None) => None,
        (Gate::Input, Some(_)) => Some(crate::provenance::Source::User),
        (Gate::Context | Gate::Output, Some(_)) => Some(crate::provenance::Source::Tool),
        (Gate::ToolCall | Gate::Stream, Some(_)) => {
            return Err(Error::bad_request(
                Code::InvalidContext,
                "`conv_id` belongs to the input gate (what the user said) and the context and output gates (what tools returned)",
            ));
        }
    };
    super::body::check_id("conv_id", body.conv_id.as_ref())?;
    let memory = state.provenance.clone();
    let principal = who.uid.to_string();
    let small = text_within(&body.content, INLINE_SCAN_BYTES);
    let as_screened = gate == Gate::Input
        && memory.settings().input == crate::provenance::InputLearning::AsScreened;
    let work = move || {
        if let (Some(source), Some(conv)) = (source, &body.conv_id)
            && !as_screened
        {
            memory.record(&principal, conv, source, &body.content);
        }
        let screened = gates.screen(gate, &body.content);
        // As the gate answered: what it masked or blocked is not learnt as the user's.
        if let (true, Some(source), Some(conv)) = (as_screened, source, &body.conv_id)
            && screened.decision != crate::redact::Action::Block
        {
            memory.record(&principal, conv, source, &screened.content);
        }
        // What the context and output gates find in tool output, the conversation keeps.
        if let (Some(crate::provenance::Source::Tool), Some(conv)) = (source, &body.conv_id) {
            memory.observe(&principal, conv, &screened.seen);
        }
        screened
    };
    // A small body is scanned on the worker (tens of microseconds, less than the two thread
    // hand-offs a blocking task costs); a large one off the workers.
    let span = crate::telemetry::spans::guardrail(gate.as_str());
    let screened = scan_in(small, &span, work).await?;
    if !span.is_disabled() {
        let kinds = screened
            .violations
            .iter()
            .flat_map(|v| [v.kind, v.category.as_str()]);
        for s in [&span, &tracing::Span::current()] {
            crate::telemetry::spans::findings(s, screened.found, kinds.clone());
            crate::telemetry::spans::gate_action(s, screened.decision.as_str());
        }
    }
    drop(span);
    record(
        state,
        &who,
        gate,
        (
            screened.decision,
            screened.violations.as_slice(),
            screened.found,
        ),
        None,
    )
    .await?;
    Ok(serde_json::to_value(screened).unwrap_or(Value::Null))
}

/// One chunk through the stream gate.
async fn stream(
    state: &Gateway,
    who: &Principal,
    gates: std::sync::Arc<crate::redact::Gates>,
    body: GateBody,
) -> Result<StreamAnswer, Error> {
    let Some(id) = body
        .stream_id
        .filter(|id| (1..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic()))
    else {
        return Err(Error::bad_request(
            Code::InvalidStreamId,
            "the stream gate needs `stream_id`: 1 to 128 printable ASCII characters, the same for every chunk of one stream",
        ));
    };
    let Value::String(chunk) = body.content else {
        return Err(Error::bad_request(
            Code::InvalidChunk,
            "a stream chunk's `content` must be a string",
        ));
    };
    if chunk.len() > MAX_CHUNK {
        return Err(Error::PayloadTooLarge);
    }
    let principal = who.uid.to_string();
    let now = now_ms();
    let slot = state
        .streams
        .get(&principal, &id, now)
        .map_err(Error::Stream)?;
    let last = body.last;
    let screened = off_workers(move || {
        let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
        s.touch(now);
        gates.screen_chunk(&mut s, &chunk, last)
    })
    .await?
    .map_err(Error::Stream)?;
    // A blocked stream stays in the table (later chunks are refused) until it expires.
    if last && screened.decision != Action::Block {
        state.streams.finish(&principal, &id);
    }
    let verdict = (
        screened.decision,
        screened.violations.as_slice(),
        screened.found,
    );
    record(state, who, Gate::Stream, verdict, Some(&id)).await?;
    Ok(StreamAnswer {
        stream_id: id,
        screened,
    })
}

/// Content up to this many bytes of text is scanned on the async worker that received it:
/// tens of microseconds, less than the two thread hand-offs a blocking task costs.
pub(super) const INLINE_SCAN_BYTES: usize = 8 * 1024;

/// Whether `value` holds at most `limit` bytes of text (strings and keys; 8 for any other
/// scalar), counted without serializing it and only as far as the limit.
pub(super) fn text_within(value: &Value, limit: usize) -> bool {
    fn walk(v: &Value, total: &mut usize, limit: usize) {
        if *total > limit {
            return;
        }
        match v {
            Value::String(s) => *total += s.len(),
            Value::Array(items) => items.iter().for_each(|i| walk(i, total, limit)),
            Value::Object(map) => {
                for (k, v) in map {
                    *total += k.len() + 8;
                    walk(v, total, limit);
                }
            }
            _ => *total += 8,
        }
    }
    let mut total = 0;
    walk(value, &mut total, limit);
    total <= limit
}

/// A human's free-text note (an approval's, a kill switch's, a quarantine's or a grant's
/// `reason`), cut to 500 characters and screened like any other text before it is stored,
/// logged, shipped or sent to a webhook: a key pasted into a note is masked. Without the
/// detectors the note is withheld, not kept in clear.
pub fn screen_note(state: &Gateway, note: Option<String>) -> Option<String> {
    note.map(|r| {
        let r: String = r.chars().take(500).collect();
        match &state.gates {
            Some(g) => g.redactor().redact(&r),
            None => "<note withheld: redaction unavailable>".to_owned(),
        }
    })
}

/// Runs `scan` in `span`: in place when `small`, else on the blocking pool ([`off_workers`]).
/// Either way a scan that panics is refused (fail closed).
pub(super) async fn scan_in<T: Send + 'static>(
    small: bool,
    span: &tracing::Span,
    scan: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Error> {
    if !small {
        return tracing::Instrument::instrument(off_workers(scan), span.clone()).await;
    }
    span.in_scope(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(scan)))
        .map_err(|_| {
            tracing::error!("content scan failed; refusing to answer");
            Error::GatesUnavailable
        })
}

/// Runs a scan on the blocking pool: a large body takes milliseconds, which must not hold up
/// the async workers that answer `/v1/authorize`. A scan that panics is refused (fail closed).
pub async fn off_workers<T: Send + 'static>(
    scan: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(scan).await.map_err(|e| {
        tracing::error!(error = %e, "content scan failed; refusing to answer");
        Error::GatesUnavailable
    })
}

/// Counts the verdict, and records it in the audit log unless it is an allow.
async fn record(
    state: &Gateway,
    who: &Principal,
    gate: Gate,
    (decision, violations, found): (Action, &[Violation], usize),
    stream_id: Option<&str>,
) -> Result<(), Error> {
    state.metrics.gate(gate.as_str(), decision.as_str());
    if decision == Action::Allow {
        return Ok(());
    }
    let detail = match stream_id {
        Some(id) => format!("{found} violations in stream {id}"),
        None => format!("{found} violations"),
    };
    let entry = Event::Gate(Screened {
        principal: who.uid.to_string(),
        action: decision.as_str().to_owned(),
        gate: gate.as_str().to_owned(),
        reasons: labels(violations),
        detail,
        otel_trace_id: crate::telemetry::current().map(|t| t.trace_id),
        ..Screened::default()
    })
    .into();
    // A mask or block attests content already masked or refused: nothing is let through on
    // its strength, so the answer does not wait for the flush. The record is queued in order
    // and stored (durably, under group commit) with the writer's next batch; while the store
    // fails or the queue is long, this waits for it and refuses on failure. A warn lets the
    // content through as it is, so its record is flushed before the answer.
    let recorded = if decision == Action::Warn {
        state.audit.record(entry).await
    } else {
        state.audit.record_after(entry).await
    };
    recorded.map_err(|e| {
        tracing::error!(error = %e, "gate verdict not recorded; refusing to answer");
        Error::StoreUnavailable
    })
}
