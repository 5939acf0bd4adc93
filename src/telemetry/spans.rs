//! The spans toolgate opens, their names and their attributes: one per request
//! ([`request`]), children per stage ([`stage`]) and per gate ([`guardrail`]), and what is
//! recorded on them. docs/operations.md ("Traces") lists the same names; a span carries
//! decisions, stages, registered tool names, counts and kinds of findings, exit codes and
//! error codes, never an argument, a result or a secret.
//!
//! Every span here is of target [`TARGET`] at level INFO; with traces off each is disabled at
//! its call site and the recording functions do nothing.

use tracing::Span;
use tracing::field::Empty;

use super::TARGET;

/// The root span of one request (`name`: `toolgate.authorize`, `toolgate.execute`,
/// `toolgate.results`, `toolgate.gate`, `toolgate.mcp.tools_call`).
pub fn request(name: &'static str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "request",
        otel.name = name,
        otel.kind = "server",
        toolgate.tool = Empty,
        toolgate.decision = Empty,
        toolgate.stage = Empty,
        toolgate.decision_id = Empty,
        toolgate.findings.count = Empty,
        toolgate.findings.kinds = Empty,
        toolgate.gate.action = Empty,
        toolgate.error_code = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
    )
}

/// A stage of the request (`auth`, `stops`, `rate_limit`, `policy`, `approval`, `audit`,
/// `execution`), a child of the current span.
pub fn stage(name: &'static str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "stage",
        otel.name = name,
        toolgate.decision = Empty,
        toolgate.exit_code = Empty,
        toolgate.error_code = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
    )
}

/// A gate's span, `guardrail.<gate>`, a child of the current span.
pub fn guardrail(gate: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "guardrail",
        otel.name = guardrail_name(gate),
        toolgate.gate = gate,
        toolgate.gate.action = Empty,
        toolgate.findings.count = Empty,
        toolgate.findings.kinds = Empty,
        toolgate.error_code = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
    )
}

/// `guardrail.<gate>` for the five gates (a static name, so nothing is formatted per call).
fn guardrail_name(gate: &str) -> &'static str {
    match gate {
        "input" => "guardrail.input",
        "context" => "guardrail.context",
        "tool_call" => "guardrail.tool_call",
        "output" => "guardrail.output",
        "stream" => "guardrail.stream",
        _ => "guardrail",
    }
}

/// Records what a decision came to on `span` (a request's or the `policy` stage's): the
/// registered tool (`None`: not registered, recorded as `unregistered`), the decision, the
/// stage that decided, the decision id. A deny also sets the span's status to error, with
/// the first error code (`code`) as its description.
pub fn decided(
    span: &Span,
    tool: Option<&str>,
    (decision, stage): (&str, &str),
    decision_id: &str,
    code: Option<&str>,
) {
    if span.is_disabled() {
        return;
    }
    span.record("toolgate.tool", tool.unwrap_or("unregistered"));
    span.record("toolgate.decision", decision);
    span.record("toolgate.stage", stage);
    span.record("toolgate.decision_id", decision_id);
    if decision == "deny" {
        failed(span, code.unwrap_or(stage));
    }
}

/// Records the (registered) tool a request is about.
pub fn tool(span: &Span, name: &str) {
    span.record("toolgate.tool", name);
}

/// Records a decision (`allow`, `deny`, `pending_approval`) on a stage's span.
pub fn decision(span: &Span, decision: &str) {
    span.record("toolgate.decision", decision);
}

/// Records the number of findings and their kinds and categories (`secret`, `pii`,
/// `aws-access-key`, …, comma-separated, sorted) on `span`.
pub fn findings<'a>(span: &Span, count: usize, kinds: impl IntoIterator<Item = &'a str>) {
    if span.is_disabled() {
        return;
    }
    let mut kinds: Vec<&str> = kinds.into_iter().collect();
    kinds.sort_unstable();
    kinds.dedup();
    // As i64: the OTel layer exports u64 fields as strings.
    span.record(
        "toolgate.findings.count",
        i64::try_from(count).unwrap_or(i64::MAX),
    );
    span.record("toolgate.findings.kinds", kinds.join(","));
}

/// Records a gate's verdict (`allow`, `warn`, `mask`, `block`) on its span; a block sets the
/// span's status to error.
pub fn gate_action(span: &Span, action: &str) {
    if span.is_disabled() {
        return;
    }
    span.record("toolgate.gate.action", action);
    if action == "block" {
        failed(span, "blocked");
    }
}

/// Sets `span`'s status to error, described by `code` (an error code, never a message that
/// could quote input).
pub fn failed(span: &Span, code: &str) {
    if span.is_disabled() {
        return;
    }
    span.record("toolgate.error_code", code);
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_description", code);
}

/// Records a program's exit code on the `execution` span.
pub fn exit_code(span: &Span, code: Option<i32>) {
    if let Some(code) = code {
        span.record("toolgate.exit_code", i64::from(code));
    }
}
