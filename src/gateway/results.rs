//! `POST /v1/results`: an agent runtime reports what a tool returned and gets back what may
//! reach the model. In order: the tool's `outputSchema` (a mismatch blocks the result), its
//! output field policy (unnamed fields are dropped), the output gate (secrets and personal
//! data masked, injection signals reported), then the size cap (`limits.max_output_bytes`,
//! cut with a `[TRUNCATED] (N bytes)` marker). Every result is audited (kinds and sizes, never
//! the content nor a digest of it: a digest of a short output could be guessed) before it is
//! answered.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::Instrument as _;

use super::{Error, Gateway};
use crate::audit::{Event, Screened};
use crate::authz::{Advice, Principal, PrincipalKind};
use crate::codes::Code;
use crate::redact::{Action, Gate, Gates, Violation, labels};

/// Largest result body accepted (the size cap then applies per tool).
pub const RESULTS_MAX_BODY: usize = 16 * 1024 * 1024;

/// The request body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultBody {
    /// The tool that produced the output.
    tool: String,
    /// What it returned: a string or any JSON.
    output: Value,
    /// The decision that allowed the call, to join the records (and to find the call's
    /// conversation).
    #[serde(default)]
    decision_id: Option<String>,
    /// The conversation the call was made in, when the decision did not name one.
    #[serde(default)]
    conv_id: Option<String>,
}

/// The answer.
#[derive(Debug, Serialize)]
pub struct ResultAnswer {
    /// Id of this result's audit record (set once the screening is done).
    pub(super) result_id: String,
    /// allow, warn, mask or block.
    pub(super) decision: Action,
    /// What may reach the model (`null` when blocked or nothing remained).
    pub(super) output: Value,
    /// What the output gate found.
    pub(super) violations: Vec<Violation>,
    /// How many violations in all.
    pub(super) found: usize,
    /// Whether the size cap cut the output.
    pub(super) truncated: bool,
    /// Bytes of the output (JSON text) before the cap.
    pub(super) bytes: usize,
    /// Dotted paths the field policy dropped (at most 100).
    pub(super) dropped: Vec<String>,
    /// How many fields were dropped.
    pub(super) dropped_count: usize,
    /// Why a result was blocked.
    pub(super) errors: Vec<Advice>,
    /// Every kind and category the output gate found, whatever it did with them (what the
    /// conversation remembers).
    #[serde(skip)]
    pub(super) seen: Vec<(&'static str, &'static str)>,
}

/// Screens a result an agent reports (`POST /v1/results`) and records the verdict. `body` is
/// read after the caller is known to be an agent.
pub async fn report_result(
    state: &Gateway,
    who: Principal,
    body: Result<ResultBody, Error>,
) -> Result<ResultAnswer, Error> {
    if who.kind != PrincipalKind::Agent {
        return Err(Error::Forbidden(
            "results are reported with the agent's credential",
        ));
    }
    let body = body?;
    if let Some(id) = &body.decision_id
        && (id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_graphic()))
    {
        return Err(Error::bad_request(
            Code::InvalidDecisionId,
            "`decision_id` must be the id from the decision that allowed the call",
        ));
    }
    super::body::check_id("conv_id", body.conv_id.as_ref())?;
    let snap = state.policy.current();
    let Some(tool) = snap.tools.get(&body.tool) else {
        return Err(Error::bad_request(
            Code::UnknownTool,
            "no tool with this name is registered; report results of registered tools only",
        ));
    };
    let Some(gates) = state.gates.clone() else {
        return Err(Error::GatesUnavailable);
    };
    // The result joins its decision, or is refused (recorded): a wrong join would silently
    // leave the output out of its conversation's provenance.
    let joined = match &body.decision_id {
        None => None,
        Some(id) => match state.provenance.join(id, &who.uid.to_string(), &tool.name) {
            Ok(conv) => Some(conv),
            Err(e) => return Err(refuse_join(state, &who, tool, &snap.revision, id, e).await),
        },
    };
    let cap = usize::try_from(tool.limits.max_output_bytes).unwrap_or(usize::MAX);
    let schema_errors = tool.check_output(&body.output);
    let fields = tool.output_fields.clone();
    let output = body.output;
    // What the tool returned is tool output of the call's conversation (provenance): the
    // one its decision was made in, else the one named.
    let memory = state.provenance.clone();
    let principal = who.uid.to_string();
    // The decision's conversation; else (no decision named, or one made outside any) the
    // one named.
    let conv = joined.flatten().or_else(|| body.conv_id.clone());
    let span = crate::telemetry::spans::guardrail(Gate::Output.as_str());
    let screened = super::gates::off_workers(move || {
        if let Some(conv) = &conv {
            memory.record(&principal, conv, crate::provenance::Source::Tool, &output);
        }
        let screened = screen(&gates, schema_errors, fields.as_ref(), cap, output);
        if let Some(conv) = &conv {
            memory.observe(&principal, conv, &screened.seen);
        }
        screened
    })
    .instrument(span.clone())
    .await?;
    traced(&span, &screened);
    drop(span);
    let root = tracing::Span::current();
    crate::telemetry::spans::tool(&root, &tool.name);
    traced(&root, &screened);
    state
        .metrics
        .gate(Gate::Output.as_str(), screened.decision.as_str());
    let mut screened = screened;
    screened.result_id = uuid::Uuid::now_v7().to_string();
    // Kinds found, or why the output was refused (a schema mismatch has no findings).
    let mut reasons = labels(&screened.violations);
    reasons.extend(screened.errors.iter().map(|e| e.code.to_string()));
    reasons.dedup();
    let detail = format!(
        "{} bytes{}; {} fields dropped{}",
        screened.bytes,
        if screened.truncated {
            ", truncated"
        } else {
            ""
        },
        screened.dropped_count,
        body.decision_id
            .as_ref()
            .map(|d| format!("; decision {d}"))
            .unwrap_or_default()
    );
    let entry = Event::Result(Screened {
        id: Some(screened.result_id.clone()),
        principal: who.uid.to_string(),
        tool: Some(tool.name.clone()),
        risk: Some(tool.risk.as_str().to_owned()),
        action: screened.decision.as_str().to_owned(),
        gate: Gate::Output.as_str().to_owned(),
        reasons,
        revision: Some(snap.revision.clone()),
        detail,
        otel_trace_id: crate::telemetry::current().map(|t| t.trace_id),
    })
    .into();
    super::decide::record_or_refuse(state, entry, "result").await?;
    Ok(screened)
}

/// Records a result that does not fit the decision it names (refused, not screened) and
/// answers the error that says why.
async fn refuse_join(
    state: &Gateway,
    who: &Principal,
    tool: &crate::tools::Tool,
    revision: &str,
    decision_id: &str,
    why: crate::provenance::JoinError,
) -> Error {
    use crate::provenance::JoinError;
    let (code, message) = match why {
        JoinError::Unknown => (
            Code::UnknownDecision,
            format!(
                "no allowed decision of yours has the id `{decision_id}`; the output was not screened"
            ),
        ),
        JoinError::OtherTool(allowed) => (
            Code::DecisionMismatch,
            format!(
                "decision `{decision_id}` allowed `{allowed}`, not `{}`",
                tool.name
            ),
        ),
        JoinError::Reported => (
            Code::ResultReported,
            format!("the result of decision `{decision_id}` was reported already"),
        ),
    };
    let entry = Event::Result(Screened {
        id: Some(uuid::Uuid::now_v7().to_string()),
        principal: who.uid.to_string(),
        tool: Some(tool.name.clone()),
        risk: Some(tool.risk.as_str().to_owned()),
        action: "refused".to_owned(),
        gate: Gate::Output.as_str().to_owned(),
        reasons: vec![code.to_string()],
        revision: Some(revision.to_owned()),
        detail: format!(
            "decision {}",
            decision_id.chars().take(64).collect::<String>()
        ),
        otel_trace_id: crate::telemetry::current().map(|t| t.trace_id),
    })
    .into();
    match super::decide::record_or_refuse(state, entry, "result").await {
        Ok(()) => Error::Coded { code, message },
        Err(e) => e,
    }
}

/// Records the output gate's verdict on `span`: its action (a block, or a schema mismatch,
/// sets error status), how many findings and of which kinds.
pub(super) fn traced(span: &tracing::Span, screened: &ResultAnswer) {
    use crate::telemetry::spans;
    if span.is_disabled() {
        return;
    }
    let kinds = screened
        .violations
        .iter()
        .flat_map(|v| [v.kind, v.category.as_str()]);
    spans::findings(span, screened.found, kinds);
    spans::gate_action(span, screened.decision.as_str());
}

/// The screening of one result, in order: schema errors (block), field policy, output gate,
/// size cap. Also used by `/v1/execute` on what a run printed.
pub(super) fn screen(
    gates: &Gates,
    schema_errors: Vec<crate::tools::ArgViolation>,
    fields: Option<&crate::tools::FieldPolicy>,
    cap: usize,
    output: Value,
) -> ResultAnswer {
    if !schema_errors.is_empty() {
        // Messages may name unexpected members of the output: redacted like the rest.
        let mut blocked = ResultAnswer::schema_mismatch(schema_errors);
        for e in &mut blocked.errors {
            e.message = gates.redactor().redact(&e.message);
        }
        return blocked;
    }
    let filtered = match fields {
        Some(policy) => policy.apply(&output),
        None => crate::tools::Filtered {
            value: Some(output),
            ..crate::tools::Filtered::default()
        },
    };
    let value = filtered.value.unwrap_or(Value::Null);
    let gated = gates.screen(Gate::Output, &value);
    let (output, truncated, bytes) = if gated.decision == Action::Block {
        (Value::Null, false, 0)
    } else {
        cap_output(gated.content, cap)
    };
    ResultAnswer {
        result_id: String::new(),
        decision: gated.decision,
        output,
        violations: gated.violations,
        found: gated.found,
        truncated,
        bytes,
        dropped: filtered.dropped,
        dropped_count: filtered.dropped_count,
        errors: Vec::new(),
        seen: gated.seen,
    }
}

impl ResultAnswer {
    fn schema_mismatch(errors: Vec<crate::tools::ArgViolation>) -> ResultAnswer {
        ResultAnswer {
            result_id: String::new(),
            decision: Action::Block,
            output: Value::Null,
            violations: Vec::new(),
            found: 0,
            truncated: false,
            bytes: 0,
            dropped: Vec::new(),
            dropped_count: 0,
            seen: Vec::new(),
            errors: errors
                .into_iter()
                .map(|v| {
                    Advice::new(
                        Code::OutputSchemaMismatch,
                        format!("output `{}` {}", v.at(), v.message),
                        "the tool returned something its outputSchema does not allow; do not pass it on",
                    )
                })
                .collect(),
        }
    }
}

/// Applies the size cap: output whose JSON text is over `cap` bytes becomes a string of its
/// first `cap` bytes (a string output: of the string itself) and `[TRUNCATED] (N bytes)`,
/// where N is how many bytes were cut. Returns the output, whether it was cut, and its size.
fn cap_output(output: Value, cap: usize) -> (Value, bool, usize) {
    let (text, bytes) = match &output {
        Value::String(s) => (s.clone(), s.len()),
        other => {
            let t = other.to_string();
            let n = t.len();
            (t, n)
        }
    };
    if bytes <= cap {
        return (output, false, bytes);
    }
    let cut = text.floor_char_boundary(cap);
    let head = text.get(..cut).unwrap_or("");
    let marker = format!("{head}\n[TRUNCATED] ({} bytes)", bytes - cut);
    (Value::String(marker), true, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_cap_cuts_at_a_char_boundary_and_says_how_much() {
        assert_eq!(cap_output(json!("abc"), 3), (json!("abc"), false, 3));
        assert_eq!(
            cap_output(json!("aé"), 2),
            (json!("a\n[TRUNCATED] (2 bytes)"), true, 3)
        );
        let (v, cut, n) = cap_output(json!({"k": "vvvv"}), 5);
        assert_eq!(
            (v, cut, n),
            (json!("{\"k\":\n[TRUNCATED] (7 bytes)"), true, 12)
        );
    }
}
