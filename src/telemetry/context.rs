//! W3C trace context: an incoming `traceparent` (HTTP header, MCP `_meta`) read once into a
//! [`Parent`], the request run inside its span ([`within`]), and the context to send on to
//! programs and upstreams and to write in the audit record ([`current`]).
//!
//! With traces on, the context is the current span's, so what goes out names the span that
//! sent it. With traces off, an incoming context is still passed on unchanged and its trace
//! id still recorded (a task-local keeps it for the request), so a caller's trace joins the
//! audit log either way.

use std::collections::HashMap;
use std::future::Future;

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Longest `traceparent` or `tracestate` value read (a valid `traceparent` is 55 bytes;
/// W3C bounds `tracestate` to 32 members).
const MAX_HEADER_BYTES: usize = 512;

tokio::task_local! {
    /// The request's incoming context, for when no span carries it (traces off).
    static INCOMING: Option<Parent>;
}

/// A valid incoming trace context. A malformed `traceparent` gives none: the request then
/// starts a trace of its own, as W3C Trace Context says.
#[derive(Debug, Clone)]
pub struct Parent(opentelemetry::Context);

impl Parent {
    /// Reads a `traceparent` value and its optional `tracestate`.
    pub fn parse(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Parent> {
        let traceparent = traceparent
            .map(str::trim)
            .filter(|v| v.len() <= MAX_HEADER_BYTES && well_formed(v))?;
        let mut carrier = HashMap::with_capacity(2);
        carrier.insert("traceparent".to_owned(), traceparent.to_owned());
        // Printable ASCII only (W3C's own alphabet is narrower): a value from MCP `_meta` is
        // any JSON string, and it goes on to programs' environment and upstreams.
        let printable = |v: &&str| v.bytes().all(|b| (0x20..=0x7e).contains(&b));
        if let Some(state) = tracestate
            .filter(|v| v.len() <= MAX_HEADER_BYTES)
            .filter(printable)
        {
            carrier.insert("tracestate".to_owned(), state.trim().to_owned());
        }
        let cx = TraceContextPropagator::new().extract(&carrier);
        cx.span().span_context().is_valid().then_some(Parent(cx))
    }

    /// Reads the context of HTTP request headers (`traceparent`, `tracestate`).
    pub fn from_headers(headers: &axum::http::HeaderMap) -> Option<Parent> {
        let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        Parent::parse(get("traceparent"), get("tracestate"))
    }

    /// Its trace id: 32 lowercase hex digits.
    pub fn trace_id(&self) -> String {
        format!("{:032x}", self.0.span().span_context().trace_id())
    }
}

/// Whether `v` has the W3C `traceparent` shape: version, trace id, parent id and flags of
/// exactly 2, 32, 16 and 2 lowercase hex digits (the propagator alone takes shorter ids);
/// version `00` has nothing after the flags.
fn well_formed(v: &str) -> bool {
    let parts: Vec<&str> = v.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    match parts.as_slice() {
        [version, trace, parent, flags, rest @ ..] => {
            hex(version, 2)
                && hex(trace, 32)
                && hex(parent, 16)
                && hex(flags, 2)
                && (rest.is_empty() || *version != "00")
        }
        _ => false,
    }
}

/// The trace context of the request being served, as it is sent on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// 32 lowercase hex digits: what the audit record keeps (`otel_trace_id`).
    pub trace_id: String,
    /// The W3C `traceparent` value naming the current span (or the incoming one).
    pub traceparent: String,
    /// The W3C `tracestate` value, when there is one.
    pub tracestate: Option<String>,
}

impl TraceContext {
    fn of(cx: &opentelemetry::Context) -> Option<TraceContext> {
        let span = cx.span();
        let sc = span.span_context();
        if !sc.is_valid() {
            return None;
        }
        let mut carrier: HashMap<String, String> = HashMap::with_capacity(2);
        TraceContextPropagator::new().inject_context(cx, &mut carrier);
        Some(TraceContext {
            trace_id: format!("{:032x}", sc.trace_id()),
            traceparent: carrier.remove("traceparent")?,
            tracestate: carrier.remove("tracestate").filter(|s| !s.is_empty()),
        })
    }
}

/// The context of the request being served: the current span's when traces are on, else the
/// incoming one, else none.
pub fn current() -> Option<TraceContext> {
    let span = tracing::Span::current();
    if !span.is_disabled()
        && let Some(found) = TraceContext::of(&span.context())
    {
        return Some(found);
    }
    INCOMING
        .try_with(|p| p.as_ref().and_then(|p| TraceContext::of(&p.0)))
        .ok()
        .flatten()
}

/// Runs `fut` inside `span` (a request's span from [`super::spans::request`]), as a child of
/// `parent` when a context came in.
pub async fn within<F: Future>(span: tracing::Span, parent: Option<Parent>, fut: F) -> F::Output {
    if let Some(p) = &parent {
        // Fails only when the span is disabled (traces off): nothing to attach it to.
        let _ = span.set_parent(p.0.clone());
    }
    INCOMING.scope(parent, fut.instrument(span)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_read_and_a_malformed_one_is_not() {
        let p = Parent::parse(Some(TP), None).unwrap();
        assert_eq!(p.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        for bad in [
            "",
            "garbage",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert!(Parent::parse(Some(bad), None).is_none(), "{bad}");
        }
        assert!(Parent::parse(None, Some("a=b")).is_none());
    }

    #[tokio::test]
    async fn with_traces_off_the_incoming_context_is_passed_on_unchanged() {
        assert_eq!(current(), None);
        let p = Parent::parse(Some(TP), Some("vendor=x")).unwrap();
        let seen = within(tracing::Span::none(), Some(p), async { current() }).await;
        let seen = seen.unwrap();
        assert_eq!(seen.traceparent, TP);
        assert_eq!(seen.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(seen.tracestate.as_deref(), Some("vendor=x"));
        let none = within(tracing::Span::none(), None, async { current() }).await;
        assert_eq!(none, None);
    }

    #[tokio::test]
    async fn a_tracestate_with_control_characters_is_dropped_and_the_parent_kept() {
        for bad in ["vendor=x\nX-Injected: 1", "vendor=x\0", "vendor=\u{1b}[31m"] {
            let p = Parent::parse(Some(TP), Some(bad)).unwrap();
            let seen = within(tracing::Span::none(), Some(p), async { current() })
                .await
                .unwrap();
            assert_eq!(seen.traceparent, TP, "{bad:?}");
            assert_eq!(seen.tracestate, None, "{bad:?}");
        }
    }
}
