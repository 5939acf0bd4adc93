//! The tool_call gate on the decision path of `/v1/authorize`: the call's arguments are
//! screened once, after validation and before the answer. A finding the gate blocks (by
//! default any secret) turns the decision into a deny at stage `gate`; with
//! `[gates.tool_call] apply_mask = true` a masked call is decided again on the masked
//! arguments, which the answer carries as `arguments` (what the tool must run with); the
//! stricter of the two decisions stands, so masking never turns a deny into an allow, and an
//! approval stays bound to the arguments as sent. The same scan gives the redacted preview the
//! audit record and approval keep.

use serde::Serialize;
use serde_json::Value;

use super::Gateway;
use crate::audit::{args_preview, redacted_preview};
use crate::authz::{self, Advice, Call, Findings, Outcome, Principal, Signals, Stage, Verdict};
use crate::codes::Code;
use crate::policy::Snapshot;
use crate::redact::{Action, Gate, Violation};
use crate::tools::Tool;

/// Most violations an answer lists (the audit record keeps the kinds).
const REPORTED: usize = 20;

/// What the gate found, as the decision answer shows it.
#[derive(Debug, Clone, Serialize)]
pub struct GateReport {
    /// The gate's verdict: warn, mask or block.
    pub decision: Action,
    /// The findings (kind, category, action, JSON pointer, span), at most 20.
    pub violations: Vec<Violation>,
}

/// The gate's outcome for one call.
pub(super) struct Screened {
    /// The decision after the gate.
    pub verdict: Verdict,
    /// What the gate found, unless nothing.
    pub report: Option<GateReport>,
    /// The masked arguments the tool must run with (`apply_mask` only).
    pub arguments: Option<Value>,
    /// The redacted preview for the audit record and approval.
    pub preview: String,
}

/// The redacted preview of `args` (shape only if the detectors are unavailable).
pub(super) fn preview(state: &Gateway, args: &Value) -> String {
    match &state.gates {
        Some(g) => {
            let limits = g.redactor().preview_limits();
            redacted_preview(
                &g.redactor().redact_json(args),
                limits.bytes,
                limits.string_chars,
            )
        }
        None => args_preview(args),
    }
}

/// One scan of a call's arguments, made before Cedar decides: what the gate does with them,
/// the redacted preview, and the findings policies see (`context.findings`).
pub(super) struct Scan {
    /// The gate's verdict and the redacted preview; `None` without detectors.
    screened: Option<(crate::redact::Screened, Option<Value>)>,
    /// Every kind and category found, whatever the gate does with it.
    pub findings: Findings,
    /// How many findings in all.
    pub found: usize,
}

/// Scans `args` with the tool_call gate's rules, as the tool's manifest adjusts them per tool
/// and per argument (`"gate"`).
pub(super) fn scan(state: &Gateway, tool: Option<&Tool>, args: &Value) -> Scan {
    let Some(gates) = &state.gates else {
        return Scan {
            screened: None,
            findings: Findings::default(),
            found: 0,
        };
    };
    let (screened, stored, found) = crate::tools::scan_args(gates, tool, args);
    let mut findings = Findings::default();
    for f in &found {
        findings.add(&f.path, f.kind, f.category.as_str());
    }
    Scan {
        screened: Some((screened, stored)),
        findings,
        found: found.len(),
    }
}

/// Applies the tool_call gate's `scan` of `call` after `verdict` was decided. A call already
/// refused at registry or validation keeps its deny.
pub(super) fn screen(
    state: &Gateway,
    snap: &Snapshot,
    who: &Principal,
    call: &Call,
    verdict: Verdict,
    signals: &Signals,
    scan: Scan,
) -> Screened {
    let tool = snap.tools.get(&call.tool);
    let refused_early = verdict.decision == Outcome::Deny
        && matches!(
            verdict.stage,
            Stage::Auth | Stage::Registry | Stage::Validation
        );
    let (Some(gates), Some((screened, stored))) = (&state.gates, scan.screened) else {
        // Fail closed: arguments that cannot be screened are not passed.
        let verdict = if refused_early {
            verdict
        } else {
            Verdict::deny(
                Stage::Gate,
                tool,
                Advice::new(
                    Code::GatesUnavailable,
                    "the redaction detectors are not available, so the arguments cannot be screened; denied (fail closed)",
                    "retry later; operators: see the logs at startup",
                ),
            )
        };
        return Screened {
            verdict,
            report: None,
            arguments: None,
            preview: args_preview(&call.args),
        };
    };
    let rules = gates.rules_for(Gate::ToolCall);
    let limits = gates.redactor().preview_limits();
    let preview = stored.map_or_else(
        || args_preview(&call.args),
        |v| redacted_preview(&v, limits.bytes, limits.string_chars),
    );
    if refused_early || screened.decision == Action::Allow {
        return Screened {
            verdict,
            report: None,
            arguments: None,
            preview,
        };
    }
    let mut violations = screened.violations;
    violations.truncate(REPORTED);
    let report = GateReport {
        decision: screened.decision,
        violations,
    };
    let mut arguments = None;
    let verdict = match screened.decision {
        Action::Block => Verdict::deny(Stage::Gate, tool, blocked(&report)),
        Action::Mask if rules.apply_mask => {
            let masked = Call {
                tool: call.tool.clone(),
                args: screened.content,
                correlation: call.correlation.clone(),
            };
            let again = authz::decide_with(snap, who, &masked, signals);
            arguments = Some(masked.args);
            stricter(verdict, again)
        }
        Action::Mask | Action::Warn | Action::Allow => verdict,
    };
    Screened {
        verdict,
        report: Some(report),
        arguments,
        preview,
    }
}

/// The stricter of two decisions on one call (deny, then pending, then allow); the first on
/// a tie.
fn stricter(first: Verdict, second: Verdict) -> Verdict {
    let rank = |o: Outcome| match o {
        Outcome::Deny => 2,
        Outcome::PendingApproval => 1,
        Outcome::Allow => 0,
    };
    if rank(second.decision) > rank(first.decision) {
        second
    } else {
        first
    }
}

/// The deny advice for blocked arguments: kinds and where, never the values.
fn blocked(report: &GateReport) -> Advice {
    let mut found: Vec<String> = report
        .violations
        .iter()
        .filter(|v| v.action == Action::Block)
        .map(|v| match &v.path {
            Some(p) if !p.is_empty() => format!("{} at `{p}`", v.kind),
            _ => v.kind.to_owned(),
        })
        .collect();
    found.dedup();
    Advice::new(
        Code::SecretInArguments,
        format!(
            "the arguments contain what the tool_call gate blocks: {}",
            found.join(", ")
        ),
        "do not pass credentials to tools; refer to them by name and let the tool read them from its own configuration",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masking_never_loosens_a_decision() {
        let with = |decision: Outcome, id: &str| {
            let mut v = Verdict::deny(
                Stage::Policy,
                None,
                Advice::new(crate::codes::Code::Forbidden, "", ""),
            );
            v.decision = decision;
            v.reasons = vec![id.to_owned()];
            v
        };
        let cases = [
            (Outcome::Deny, Outcome::Allow, "raw"),
            (Outcome::PendingApproval, Outcome::Allow, "raw"),
            (Outcome::Allow, Outcome::PendingApproval, "masked"),
            (Outcome::Allow, Outcome::Deny, "masked"),
            (Outcome::Deny, Outcome::Deny, "raw"),
        ];
        for (raw, masked, wins) in cases {
            let v = stricter(with(raw, "raw"), with(masked, "masked"));
            assert_eq!(v.reasons, [wins], "{raw:?} vs {masked:?}");
        }
    }
}
