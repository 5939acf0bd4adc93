//! `GET /v1/approvals/events`: the pending queue as Server-Sent Events, for the console and
//! for any approver's tool. Each `queue` event carries the same body as
//! `GET /v1/approvals?status=pending` for this caller (so only what Cedar lets them decide),
//! sent at once, then whenever the queue changes. The credential is checked again before each
//! event: a revoked token or an ended console session ends the stream, and a stream ends
//! after [`LIFETIME`] in any case (clients reconnect), so none outlives what it was opened
//! with for long. Each stream holds one of its principal's `[server] max_streams_per_principal`
//! places while it is open; one more is answered 429 `too_many_held`.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde_json::Value;

use crate::gateway::{self, Credential, Error, Gateway, ListQuery};

/// A queue is looked at again this often even without a change (policies may have changed
/// who sees what).
const RECHECK: Duration = Duration::from_secs(5);
/// Longest a stream stays open.
pub const LIFETIME: Duration = Duration::from_secs(600);

struct Feed {
    state: Gateway,
    session: Option<crate::console::ConsoleSession>,
    until: tokio::time::Instant,
    credential: Option<Vec<u8>>,
    changes: tokio::sync::watch::Receiver<u64>,
    last: Option<Value>,
    first: bool,
    /// This stream's place among its principal's held requests, given back when it ends.
    _held: crate::limits::HeldPermit,
}

/// The queue `credential` may see now; `None` when it no longer authenticates as a human.
fn queue(feed: &Feed) -> Option<Result<Value, Error>> {
    if feed.session.as_ref().is_some_and(|s| !s.alive())
        || tokio::time::Instant::now() >= feed.until
    {
        return None;
    }
    let who = gateway::human(
        &feed.state,
        Credential(feed.credential.as_deref()),
        "only humans see the approval queue",
    )
    .ok()?;
    Some(gateway::list_approvals(
        &feed.state,
        &who,
        ListQuery::pending(),
    ))
}

/// `GET /v1/approvals/events`.
pub async fn approval_events(
    State(state): State<Gateway>,
    session: Option<axum::Extension<crate::console::ConsoleSession>>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Error> {
    let credential = headers
        .get(header::AUTHORIZATION)
        .map(|h| h.as_bytes().to_vec());
    let who = gateway::human(
        &state,
        Credential(credential.as_deref()),
        "only humans see the approval queue",
    )?;
    let held = gateway::hold(&state, &who, crate::limits::HeldKind::Stream)?;
    tracing::debug!(principal = %who.uid, "approval events stream opened");
    let changes = state.approvals.subscribe();
    let feed = Feed {
        state,
        session: session.map(|axum::Extension(s)| s),
        until: tokio::time::Instant::now() + LIFETIME,
        credential,
        changes,
        last: None,
        first: true,
        _held: held,
    };
    let stream = futures_util::stream::unfold(feed, |mut feed| async move {
        loop {
            if !feed.first {
                // A change, or the periodic look; a closed channel means shutting down.
                if let Ok(Err(_)) = tokio::time::timeout(RECHECK, feed.changes.changed()).await {
                    return None;
                }
            }
            feed.first = false;
            feed.changes.borrow_and_update();
            let event = match queue(&feed)? {
                Ok(body) if feed.last.as_ref() == Some(&body) => continue,
                Ok(body) => {
                    let event = Event::default().event("queue").data(body.to_string());
                    feed.last = Some(body);
                    event
                }
                Err(e) => Event::default().event("queue-error").data(e.to_string()),
            };
            return Some((Ok(event), feed));
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
