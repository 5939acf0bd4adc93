//! What toolgate answers an MCP client: tool results built from the pipeline's answers
//! (allowed, denied, pending, run), the elicitation that tells a user a call waits for a
//! human, and results read from JSON, marked complete for revision 2026-07-28.

use rmcp::ErrorData as McpError;
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use crate::gateway::{Error, ExecAnswer, Progress};

/// What the elicitation that tells the user a call waits for approval `id` shows: a form
/// with nothing to fill in.
pub(super) fn waiting_form(id: &str) -> Value {
    json!({
        "mode": "form",
        "message": format!(
            "toolgate: this tool call waits for a human approval (approval {id}). An approver decides it with `toolgate approvals approve {id}` (or POST /v1/approvals/{id}/approve); the call runs as soon as it is approved."
        ),
        "requestedSchema": {"type": "object", "properties": {}}
    })
}

/// The answer when the user will not wait for approval `id`.
pub(super) fn declined(id: &str) -> String {
    format!(
        "the user declined to wait for approval {id}; the call did not run (the approval stays open: send the same call again once it is approved)"
    )
}

pub(super) fn error_result(text: &str, structured: Value) -> CallToolResult {
    let v = json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": {"toolgate": structured},
        "isError": true
    });
    serde_json::from_value(v).unwrap_or_else(|_| CallToolResult::error(Vec::new()))
}

/// A call waiting for approval `id`, as an error result that names it (and, in `not_held`,
/// why it was not held while a human decides).
pub(super) fn pending_result(
    id: &str,
    decision_id: Option<String>,
    reasons: Option<Vec<String>>,
    not_held: Option<&str>,
) -> CallToolResult {
    let not_held = not_held
        .map(|why| format!(" Not held while a human decides: {why}"))
        .unwrap_or_default();
    error_result(
        &format!(
            "pending approval {id}: a human must approve this call first. Send the same call (same arguments) again once it is approved; toolgate matches it to the approval (or pass `_meta: {{\"toolgate/approval_id\": \"{id}\"}}`).{not_held}"
        ),
        json!({"decision": "pending_approval", "approval_id": id,
               "decision_id": decision_id, "reasons": reasons}),
    )
}

/// The pipeline's answer as an MCP tool result.
pub(super) fn to_result(answer: Result<(Progress, ExecAnswer), Error>) -> CallToolResult {
    match answer {
        Ok((Progress::Pending, a)) => pending_result(
            &a.approval_id.clone().unwrap_or_default(),
            Some(a.metadata.decision_id.clone()),
            a.decision.as_ref().map(|d| d.reasons.clone()),
            None,
        ),
        Ok((Progress::Done, a)) => done(a),
        Err(Error::Execution(_, a)) => done(*a),
        Err(e) => {
            let (code, message, suggestion) = (e.code(), e.message(), e.suggestion());
            error_result(
                &format!("toolgate refused the call ({code}): {message}. {suggestion}"),
                json!({"decision": "deny", "code": code, "message": message,
                       "suggestion": suggestion}),
            )
        }
    }
}

/// A run's (or a refusal's) answer as a tool result.
pub(super) fn done(a: ExecAnswer) -> CallToolResult {
    if let Some(f) = &a.error
        && (a.data.is_null() || a.decision.is_some())
    {
        let decision = a.decision.as_ref();
        return error_result(
            &format!("{} ({}). {}", f.message, f.code, f.suggestion),
            json!({
                "decision": decision.map_or("allow", |d| d.decision.as_str()),
                "stage": decision.map(|d| d.stage.as_str()),
                "code": f.code,
                "message": f.message,
                "suggestion": f.suggestion,
                "decision_id": a.metadata.decision_id,
                "reasons": decision.map(|d| d.reasons.clone()),
            }),
        );
    }
    // An MCP upstream's result, screened: its own shape.
    if let Some(obj) = a.data.as_object()
        && obj.contains_key("content")
        && let Ok(mut r) = serde_json::from_value::<CallToolResult>(a.data.clone())
    {
        if a.error.is_some() {
            r.is_error = Some(true);
        }
        return r;
    }
    // A cut result, or a tool toolgate runs itself: its data as text (and structured).
    let text = match &a.data {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut v = serde_json::Map::new();
    v.insert(
        "content".to_owned(),
        json!([{"type": "text", "text": text}]),
    );
    v.insert("isError".to_owned(), json!(a.error.is_some()));
    if a.data.is_object() {
        v.insert("structuredContent".to_owned(), a.data.clone());
    }
    let v = Value::Object(v);
    serde_json::from_value(v).unwrap_or_else(|_| CallToolResult::error(Vec::new()))
}

/// A result read from the JSON toolgate built or an upstream sent. Every result toolgate
/// answers is then marked `resultType: "complete"`, which revision 2026-07-28 requires
/// (rmcp's constructors set it, but a result read from JSON has none; rmcp takes it off
/// again for peers on older revisions).
pub(super) fn built<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, McpError> {
    serde_json::from_value(v).map_err(|e| McpError::internal_error(e.to_string(), None))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An MCP agent reads the same sentence and suggestion an HTTP caller gets, not the bare
    /// code (`store_unavailable: store_unavailable` before).
    #[test]
    fn a_refusal_reads_as_the_sentence_http_answers() {
        for e in [
            Error::StoreUnavailable,
            Error::GatesUnavailable,
            Error::NotReady,
        ] {
            let (code, message, suggestion) = (
                e.code(),
                e.message().into_owned(),
                e.suggestion().into_owned(),
            );
            assert_ne!(message, code.as_str());
            let r = to_result(Err(e));
            assert_eq!(r.is_error, Some(true));
            let v = serde_json::to_value(&r).unwrap();
            let text = v["content"][0]["text"].as_str().unwrap();
            assert!(
                text.contains(&message) && text.contains(&suggestion),
                "{text}"
            );
            assert_eq!(
                v["structuredContent"]["toolgate"]["message"],
                message.as_str(),
                "{v}"
            );
            assert_eq!(
                v["structuredContent"]["toolgate"]["suggestion"],
                suggestion.as_str(),
                "{v}"
            );
        }
        let store = to_result(Err(Error::StoreUnavailable));
        let text = serde_json::to_value(&store).unwrap()["content"][0]["text"].clone();
        assert!(
            text.as_str()
                .unwrap()
                .contains("the data store failed; nothing was changed"),
            "{text}"
        );
    }
}
