//! What reaches the client from an upstream outside its tool results: during a call, what the
//! upstream's `relay` allows (its log, its sampling and elicitation requests), screened both
//! ways; and `notifications/resources/updated` for the resources a session subscribed to.
//!
//! Going to the client, the upstream's text passes the output gate (a block withholds it);
//! coming back, the model's completion and the human's answers pass the tool_call gate, as a
//! call's arguments do, since they go to a tool. A client on 2026-07-28 cannot be asked from
//! within a call (the revision has no server-to-client requests): the upstream is told so.

#![allow(
    deprecated,
    reason = "logging and sampling are deprecated by SEP-2577 but still serve clients on 2025-11-25"
)]

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{
    ClientCapabilities, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, LoggingLevel, LoggingMessageNotificationParam,
};
use rmcp::service::{Peer, RoleServer};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::redact::{Action, Gate, Gates};
use crate::upstream::{BoxFuture, Relay, Subscriber};

/// Longest the client may take to answer a relayed request (the upstream's call timeout
/// bounds the call itself).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(600);

/// The session's `logging/setLevel`, shared with the calls it makes.
pub(super) type Level = Arc<Mutex<Option<LoggingLevel>>>;

/// The client of one forwarded call.
pub(super) struct ClientRelay {
    pub(super) peer: Peer<RoleServer>,
    pub(super) level: Level,
    pub(super) gates: Option<Arc<Gates>>,
    pub(super) capabilities: Option<ClientCapabilities>,
    /// On 2026-07-28: no server-to-client requests or notifications within a call.
    pub(super) stateless: bool,
}

/// `level` as a rank: a message is passed on at or above the session's level.
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

impl ClientRelay {
    /// `value` through `gate`: masked, or `None` when the gate blocks it (or cannot screen).
    fn screened<T: Serialize + DeserializeOwned>(&self, gate: Gate, value: &T) -> Option<T> {
        let gates = self.gates.as_ref()?;
        let raw = serde_json::to_value(value).ok()?;
        let out = gates.screen(gate, &raw);
        if out.decision == Action::Block {
            return None;
        }
        serde_json::from_value(out.content).ok()
    }

    fn stateless_refusal(what: &str) -> McpError {
        McpError::invalid_request(
            format!(
                "the client speaks MCP 2026-07-28, which has no {what} from within a call; toolgate cannot pass this on"
            ),
            None,
        )
    }

    fn blocked(what: &str, gate: &str) -> McpError {
        McpError::invalid_request(format!("toolgate's {gate} gate withheld the {what}"), None)
    }
}

impl Relay for ClientRelay {
    fn log(&self, message: LoggingMessageNotificationParam) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if self.stateless {
                return;
            }
            let wanted = *self.level.lock().unwrap_or_else(PoisonError::into_inner);
            if wanted.is_some_and(|w| rank(message.level) < rank(w)) {
                return;
            }
            let Some(message) = self.screened(Gate::Output, &message) else {
                tracing::info!("an upstream's log message was withheld by the output gate");
                return;
            };
            let _ = self.peer.notify_logging_message(message).await;
        })
    }

    fn sample(
        &self,
        request: CreateMessageRequestParams,
    ) -> BoxFuture<'_, Result<CreateMessageResult, McpError>> {
        let offered = self
            .capabilities
            .as_ref()
            .is_some_and(|c| c.sampling.is_some());
        Box::pin(self.ask("sampling", offered, request, |r| {
            self.peer.create_message(r)
        }))
    }

    fn elicit(
        &self,
        request: ElicitRequestParams,
    ) -> BoxFuture<'_, Result<ElicitResult, McpError>> {
        let offered = self
            .capabilities
            .as_ref()
            .is_some_and(|c| c.elicitation.is_some());
        Box::pin(self.ask("elicitation", offered, request, |r| {
            self.peer.create_elicitation(r)
        }))
    }
}

impl ClientRelay {
    /// Asks the client (`what`: its capability's name, which it must have `offered`): the
    /// request out through the output gate, the answer back through the tool_call gate.
    async fn ask<Req, Res, F>(
        &self,
        what: &str,
        offered: bool,
        request: Req,
        send: impl FnOnce(Req) -> F,
    ) -> Result<Res, McpError>
    where
        Req: Serialize + DeserializeOwned,
        Res: Serialize + DeserializeOwned,
        F: std::future::Future<Output = Result<Res, rmcp::service::ServiceError>>,
    {
        if self.stateless {
            return Err(Self::stateless_refusal(&format!("{what} requests")));
        }
        if !offered {
            return Err(McpError::invalid_request(
                format!("the client does not offer {what} (no `{what}` capability)"),
                None,
            ));
        }
        let request = self
            .screened(Gate::Output, &request)
            .ok_or_else(|| Self::blocked(&format!("{what} request"), "output"))?;
        let answer = tokio::time::timeout(ANSWER_TIMEOUT, send(request))
            .await
            .map_err(|_| McpError::internal_error("the client did not answer in time", None))?
            .map_err(|e| McpError::internal_error(format!("the client refused: {e}"), None))?;
        self.screened(Gate::ToolCall, &answer)
            .ok_or_else(|| Self::blocked(&format!("answer to the {what} request"), "tool_call"))
    }
}

/// A session's side of its resource subscriptions.
pub(super) struct SessionSubscriber(pub(super) Peer<RoleServer>);

impl Subscriber for SessionSubscriber {
    fn updated(&self, uri: &str) -> BoxFuture<'_, ()> {
        let param = rmcp::model::ResourceUpdatedNotificationParam::new(uri);
        Box::pin(async move {
            let _ = self.0.notify_resource_updated(param).await;
        })
    }
}
