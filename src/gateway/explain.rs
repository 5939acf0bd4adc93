//! `POST /v1/explain`: how the live policy set decides one call, policy by policy, and who may
//! approve it if it waits for a human. For humans the policies allow (`Action::"explain"`; the
//! shipped set: auditors). Every request, answered or refused, is in the audit log first.

use super::{Error, Gateway, RawExplain};
use crate::audit::{EntryKind, Operator};
use crate::authz::{self, Explanation, Principal};

/// Explains a call to a human the policies allow (`POST /v1/explain`). Who may ask is
/// settled, and recorded, before `body` is looked at.
pub async fn explain(
    state: &Gateway,
    who: Principal,
    body: Result<RawExplain, Error>,
) -> Result<Explanation, Error> {
    let snap = state.policy.current();
    let by = who.uid.to_string();
    let asked = Operator::by(EntryKind::Admin, "explain", &by, &snap.revision);
    let not_recorded = |e: crate::audit::StoreError| {
        tracing::error!(error = %e, "explain request not recorded; not answered");
        Error::StoreUnavailable
    };
    // Who may ask is settled before the body is looked at.
    if let Err(advice) = authz::may_explain(&snap, &who) {
        let entry = asked.entry(
            "explain_refused",
            vec![advice.code.to_string()],
            String::new(),
        );
        state.audit.record(entry).await.map_err(not_recorded)?;
        return Err(Error::Refused(advice));
    }
    let body = body?;
    let (agent, call, mut signals) = body.into_parts()?;
    // What the decision would see besides the body: the gate's findings, where the path
    // arguments lead, and provenance in the agent's conversation, if the call names one.
    let tool = snap.tools.get(&call.tool);
    signals.findings = super::callgate::scan(state, tool, &call.args).findings;
    if let Some(tool) = tool {
        signals.paths = super::resolve::resolve(state, tool, &call.args);
        let traced = tool.traced_values(&call.args);
        signals.provenance = state.provenance.peek(
            &agent.uid.to_string(),
            call.correlation.conv_id.as_deref(),
            traced.iter().map(|(n, v)| (*n, v.as_ref())),
        );
        signals.conversation = state
            .provenance
            .seen(&agent.uid.to_string(), call.correlation.conv_id.as_deref());
    }
    let explanation = authz::explain(&snap, &agent, &call, &signals);
    let detail = format!(
        "{} calling `{}`: {}",
        agent.uid,
        call.tool,
        explanation.decision.as_str()
    );
    let entry = asked.entry("explained", explanation.reasons.clone(), detail);
    state.audit.record(entry).await.map_err(not_recorded)?;
    Ok(explanation)
}
