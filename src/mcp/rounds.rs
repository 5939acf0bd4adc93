//! Calls that wait for a human on protocol revision 2026-07-28, which has no requests from
//! server to client: multi round-trip requests (SEP-2322) instead of a held call.
//!
//! A call that needs an approval answers `resultType: "input_required"`: an elicitation that
//! tells the user the call waits for approval `id` (a form with nothing to fill in), and a
//! sealed `requestState` naming the approval. The state is signed with a key of this process
//! and bound to the caller, the tool and the argument digest, so it cannot be replayed by
//! another principal or for other arguments. The client's retry carries it back; toolgate
//! then holds that request while the approval is pending (at most [`ROUND`] each time, and
//! within `[mcp] max_held_calls_per_principal`), runs the call once it is approved (the
//! approval is single use, as for every call), and otherwise answers `input_required` again
//! with the state alone (the client retries without asking the user again).
//!
//! A client that cannot elicit gets the `isError` answer naming the approval, as before.
//!
//! Owns: the `input_required` answers and the request state. Does not own: the decision
//! (the pipeline) or the approvals (the store).

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, InputRequest, InputRequiredResult, RequestStateCodec,
    SealOptions,
};
use rmcp::service::{RequestContext, RoleServer};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::answers::{declined, error_result, pending_result, to_result, waiting_form};
use super::{Decided, ExecAnswer, Front, HoldSlot};

/// The key of toolgate's one input request (the elicitation) in `inputRequests`.
pub(super) const INPUT_KEY: &str = "toolgate/approval";

/// The longest one round holds a retry while its approval is pending. The official SDKs
/// retry 10 rounds by default, so a call waits up to ten of these before the client gives up
/// (the approval stays open: the same call sent later reuses it).
const ROUND: Duration = Duration::from_secs(60);

/// How long a request state stays valid: past it, a retry is refused and the call is sent
/// afresh (it finds its approval again by tool and arguments).
const STATE_TTL: Duration = Duration::from_secs(24 * 3600);

/// The process's request-state key: random, never written anywhere. After a restart a state
/// no longer opens, and the client's fresh call finds its open approval again.
static CODEC: LazyLock<Option<RequestStateCodec>> = LazyLock::new(|| {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).ok()?;
    RequestStateCodec::try_new(key.to_vec()).ok()
});

/// What a request state holds (signed, not secret: readable by the client).
#[derive(Serialize, Deserialize)]
struct State {
    /// The approval the call waits for.
    approval: String,
}

/// Whether this request's peer negotiated 2026-07-28 or later.
pub(super) fn modern(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.protocol_version()
        .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28)
}

/// Whether the client says it answers elicitations (on 2026-07-28, in the request's
/// `_meta`).
pub(super) fn can_elicit(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.client_capabilities()
        .or_else(|| ctx.peer.peer_info().map(|i| i.capabilities.clone()))
        .is_some_and(|c| c.elicitation.is_some())
}

/// What a state is bound to: the caller, the tool and the arguments.
fn bound_to(principal: &str, (tool, digest): &(String, String)) -> Vec<u8> {
    format!("{principal}\n{tool}\n{digest}").into_bytes()
}

impl Front {
    /// The answer to a call that waits for approval `id` on 2026-07-28: `input_required`
    /// when the client can be told; otherwise (or when no state can be sealed) the
    /// `isError` answer that names the approval. `first`: the pipeline's answer, when this
    /// call opened the approval.
    pub(super) fn waiting(
        &self,
        id: &str,
        first: Option<&ExecAnswer>,
        key: &(String, String),
        ctx: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let pending = || {
            CallToolResponse::Complete(pending_result(
                id,
                first.map(|a| a.metadata.decision_id.clone()),
                first.and_then(|a| a.decision.as_ref().map(|d| d.reasons.clone())),
                None,
            ))
        };
        if !can_elicit(ctx) {
            return pending();
        }
        let Ok(who) = crate::gateway::authenticate(&self.gw, self.credential(&ctx.extensions))
        else {
            return pending();
        };
        let Some(state) = seal(&who.id, key, id) else {
            return pending();
        };
        let form = json!({"method": "elicitation/create", "params": waiting_form(id)});
        let Ok(ask) = serde_json::from_value::<InputRequest>(form) else {
            return pending();
        };
        CallToolResponse::InputRequired(InputRequiredResult::new(
            Some(BTreeMap::from([(INPUT_KEY.to_owned(), ask)])),
            Some(state),
        ))
    }

    /// A retry carrying `state`: refused unless toolgate sealed it for this caller, tool and
    /// arguments; a user who declined ends the call; otherwise held while the approval is
    /// pending, then run once approved, or answered `input_required` again.
    pub(super) async fn resume(
        &self,
        state: &str,
        params: &CallToolRequestParams,
        args: &Value,
        key: &(String, String),
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let who = self.who(&ctx.extensions)?;
        let codec = CODEC
            .as_ref()
            .ok_or_else(|| McpError::internal_error("no request-state key", None))?;
        let opened: State = codec
            .open_json_with(state, &bound_to(&who.id, key))
            .map_err(|e| {
                McpError::invalid_params(
                    format!(
                        "requestState was not issued by toolgate for this caller, tool and arguments, or has expired ({e}); send the call again without it"
                    ),
                    None,
                )
            })?;
        let id = opened.approval;
        let answered = params
            .input_responses
            .as_ref()
            .and_then(|r| r.get(INPUT_KEY));
        if let Some(answer) = answered
            && answer.get("action").and_then(Value::as_str) != Some("accept")
        {
            return Ok(CallToolResponse::Complete(error_result(
                &declined(&id),
                json!({"approval_id": id}),
            )));
        }
        let slot = match HoldSlot::take(&self.gw, &who, &id) {
            Ok(slot) => slot,
            Err(why) => {
                return Ok(CallToolResponse::Complete(pending_result(
                    &id,
                    None,
                    None,
                    why.as_deref(),
                )));
            }
        };
        let deadline = tokio::time::Instant::now() + ROUND.min(self.gw.mcp.hold_max);
        let decided = self.decided(&id, deadline, ctx).await;
        drop(slot);
        Ok(match decided {
            Decided::Approved => {
                let answer = self.execute(&key.0, args, Some(id), ctx).await;
                CallToolResponse::Complete(to_result(answer))
            }
            Decided::Ended(why) => {
                CallToolResponse::Complete(error_result(&why, json!({"approval_id": id})))
            }
            Decided::Open => {
                CallToolResponse::InputRequired(InputRequiredResult::from_request_state(state))
            }
        })
    }
}

/// Seals approval `id` for `principal`'s call `key`; `None` without a key.
fn seal(principal: &str, key: &(String, String), id: &str) -> Option<String> {
    let codec = CODEC.as_ref()?;
    let bound = bound_to(principal, key);
    codec
        .seal_json_with(
            &State {
                approval: id.to_owned(),
            },
            &SealOptions::new().associated_data(&bound).ttl(STATE_TTL),
        )
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_opens_only_for_its_caller_tool_and_arguments() {
        let key = ("mutable.wipe".to_owned(), "d1".to_owned());
        let sealed = seal("Agent::\"a\"", &key, "approval-1").unwrap();
        let codec = CODEC.as_ref().unwrap();
        let opened: State = codec
            .open_json_with(&sealed, &bound_to("Agent::\"a\"", &key))
            .unwrap();
        assert_eq!(opened.approval, "approval-1");
        let other_args = ("mutable.wipe".to_owned(), "d2".to_owned());
        let other_tool = ("mutable.greet".to_owned(), "d1".to_owned());
        for (who, k) in [
            ("Agent::\"b\"", &key),
            ("Agent::\"a\"", &other_args),
            ("Agent::\"a\"", &other_tool),
        ] {
            assert!(
                codec
                    .open_json_with::<State>(&sealed, &bound_to(who, k))
                    .is_err(),
                "{who} {k:?}"
            );
        }
    }
}
