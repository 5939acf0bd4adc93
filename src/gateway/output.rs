//! A run's output on its way back, whatever ran it (a built-in tool, a program, an MCP
//! upstream): the output screen (`outputSchema`, field policy, the output gate, the size cap)
//! and what it means for the answer and the run's record.

use serde_json::Value;

use super::body::{ExecAnswer, ExecFailure, Metadata, OutputReport};
use super::{Error, Gateway};
use crate::audit::ExecutionEvent;
use crate::codes::Code;
use crate::redact::labels;
use crate::telemetry::spans;

/// Bytes of `[TRUNCATED] (N bytes)` markers a cut output may carry beyond its cap.
pub(super) const MARKER_ROOM: usize = 64;

/// What the output screen means for an answer.
pub(super) struct Screening {
    /// The failure it makes: the `outputSchema` mismatch, or the gate's block.
    pub(super) failure: Option<ExecFailure>,
    pub(super) report: OutputReport,
    pub(super) data: Value,
    /// The size cap cut the output.
    pub(super) truncated: bool,
}

/// Screens a tool's output like a reported result (`outputSchema` errors found by the
/// caller, field policy, output gate, cap) and, when given, its stderr through the output
/// gate, off the async workers; counts the gate's verdict.
pub(super) async fn screen_output(
    state: &Gateway,
    joined: (&str, &str),
    value: Value,
    schema_errors: Vec<crate::tools::ArgViolation>,
    fields: Option<crate::tools::FieldPolicy>,
    cap: usize,
    stderr: Option<String>,
) -> Result<(Screening, String), Error> {
    let Some(gates) = state.gates.clone() else {
        return Err(Error::GatesUnavailable);
    };
    let small = stderr.as_ref().map_or(0, String::len) <= INLINE_OUTPUT_BYTES
        && super::gates::text_within(
            &value,
            INLINE_OUTPUT_BYTES - stderr.as_ref().map_or(0, String::len),
        );
    let memory = state.provenance.clone();
    let (decision_id, principal) = (joined.0.to_owned(), joined.1.to_owned());
    let scan = move || {
        let out = super::results::screen(&gates, schema_errors, fields.as_ref(), cap, value);
        let err = stderr.map(|s| gates.screen(crate::redact::Gate::Output, &Value::String(s)));
        // What the gate found, the call's conversation keeps (`context.conversation`).
        let mut seen = out.seen.clone();
        seen.extend(err.iter().flat_map(|e| e.seen.iter().copied()));
        memory.observe_for_decision(&decision_id, &principal, &seen);
        (out, err)
    };
    // A small output is screened in place (microseconds); a large one on the blocking pool.
    // Either way a scan that panics is refused (fail closed).
    let span = spans::guardrail(crate::redact::Gate::Output.as_str());
    let (screened, stderr) = super::gates::scan_in(small, &span, scan).await?;
    super::results::traced(&span, &screened);
    state.metrics.gate(
        crate::redact::Gate::Output.as_str(),
        screened.decision.as_str(),
    );
    let stderr = match stderr.map(|e| e.content) {
        Some(Value::String(s)) => s,
        _ => String::new(),
    };
    Ok((verdict(screened), stderr))
}

/// Outputs up to this many bytes of text are screened on the calling task.
const INLINE_OUTPUT_BYTES: usize = 16 * 1024;

/// Sets a run's record to its status and reasons (the failure's code, then what the output
/// gate found), and answers the status.
pub(super) fn outcome_on_record(
    entry: &mut ExecutionEvent,
    failure: Option<&ExecFailure>,
    report: &OutputReport,
) -> &'static str {
    let status = if failure.is_some() {
        "error"
    } else {
        "success"
    };
    entry.outcome = status.to_owned();
    entry.reasons = failure.iter().map(|f| f.code.to_string()).collect();
    entry.reasons.extend(labels(&report.violations));
    status
}

fn verdict(screened: super::results::ResultAnswer) -> Screening {
    let failure = if let Some(e) = screened.errors.first() {
        Some(ExecFailure {
            code: e.code,
            message: e.message.clone(),
            suggestion: e.suggestion.clone(),
        })
    } else if screened.decision == crate::redact::Action::Block {
        Some(ExecFailure {
            code: Code::OutputBlocked,
            message: format!(
                "the output gate blocked the output ({})",
                labels(&screened.violations).join(", ")
            ),
            suggestion: "the output held something that may not reach the model".to_owned(),
        })
    } else {
        None
    };
    Screening {
        failure,
        truncated: screened.truncated,
        data: screened.output,
        report: OutputReport {
            decision: screened.decision,
            violations: screened.violations,
            found: screened.found,
            dropped: screened.dropped,
            dropped_count: screened.dropped_count,
        },
    }
}

impl ExecAnswer {
    /// A finished run's answer: its screened output, and `metadata` with the cap's cut.
    pub(super) fn screened(status: &'static str, verdict: Screening, metadata: Metadata) -> Self {
        ExecAnswer {
            status,
            data: verdict.data,
            error: verdict.failure,
            metadata: Metadata {
                truncated: metadata.truncated || verdict.truncated,
                ..metadata
            },
            approval_id: None,
            decision: None,
            output: Some(verdict.report),
            stderr: String::new(),
        }
    }
}
