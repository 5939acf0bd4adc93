//! MCP sessions over HTTP, as toolgate bounds them: which principal opened each session, how
//! many each principal has open (`[mcp] max_sessions_per_principal`), and when an idle one
//! ends (`[mcp] session_idle_secs`). [`Tracked`] wraps the SDK's `LocalSessionManager`: a
//! session is recorded with its owner when the SDK creates it and forgotten when the SDK closes
//! it, whichever way it ends (`DELETE /mcp`, idle expiry here, the SDK's own keep-alive, a
//! failed handshake), so the book and the SDK's map hold the same sessions. It does not own
//! the HTTP answers (`http`) or what a session does (`Front`).
//!
//! A session is busy while any request of it is being answered (an open `GET` stream, a call,
//! a held call); it is idle from when the last one ended. A held call is busy for as long as
//! it is held, so idle expiry is measured in minutes and never ends a session under a call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use futures_util::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};
use tokio::time::Instant;

/// Freed memory is given back to the OS once the sessions open fell to under half their
/// peak, and by at least this many.
const RELEASE_AFTER: usize = 64;

/// How long after giving memory back it is given back again: ended sessions' tasks wind down
/// after their session is closed.
const RELEASE_AGAIN: Duration = Duration::from_secs(1);

tokio::task_local! {
    /// The place reserved for the session a request without a session id may open: set
    /// around the SDK's handling of that request, taken by [`Tracked::create_session`].
    static OPENING: Opening;
}

/// A principal has its most sessions open.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error(
    "you have {limit} MCP sessions open already, the most one principal may have (`mcp.max_sessions_per_principal`); reuse a session or end one with DELETE /mcp (idle sessions end after `mcp.session_idle_secs`)"
)]
pub struct SessionsFull {
    /// The bound.
    pub limit: usize,
}

/// Why a request naming a session is not let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotYours {
    /// No session with this id is open (ended, expired, never was, or another's).
    Unknown,
}

/// The sessions open, with their owners.
pub struct Registry {
    limit: usize,
    idle: Duration,
    book: Mutex<Book>,
    /// Where `toolgate_mcp_sessions` (sessions open) is kept up to date.
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

#[derive(Default)]
struct Book {
    sessions: HashMap<SessionId, Entry>,
    /// Sessions open and being opened, by principal; an entry at zero is removed.
    open: HashMap<Arc<str>, usize>,
}

struct Entry {
    owner: Arc<str>,
    /// Requests of this session being answered now.
    busy: usize,
    /// When the last request began or ended.
    last: Instant,
}

impl Registry {
    /// At most `limit` sessions per principal; a session with nothing in progress ends after
    /// `idle`. The number open is reported to `metrics`.
    pub fn new(
        limit: usize,
        idle: Duration,
        metrics: Option<Arc<crate::metrics::Metrics>>,
    ) -> Registry {
        Registry {
            limit,
            idle,
            book: Mutex::default(),
            metrics,
        }
    }

    fn report(&self, open: usize) {
        if let Some(m) = &self.metrics {
            m.set_gauge("toolgate_mcp_sessions", &[], open as f64);
        }
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for one more session of `owner`, held until the request that may open it ends.
    pub fn reserve(self: &Arc<Self>, owner: &str) -> Result<Opening, SessionsFull> {
        let owner: Arc<str> = Arc::from(owner);
        let mut book = self.book();
        let n = book.open.entry(owner.clone()).or_insert(0);
        if *n >= self.limit {
            if *n == 0 {
                book.open.remove(&owner);
            }
            return Err(SessionsFull { limit: self.limit });
        }
        *n += 1;
        Ok(Opening {
            registry: self.clone(),
            owner,
            taken: AtomicBool::new(false),
        })
    }

    /// Gives back a place reserved for a session that was not opened.
    fn release(&self, owner: &Arc<str>) {
        let mut book = self.book();
        Book::less(&mut book.open, owner);
    }

    /// Records session `id` as `owner`'s (its place was reserved).
    fn record(&self, id: SessionId, owner: Arc<str>) {
        let open = {
            let mut book = self.book();
            book.sessions.insert(
                id,
                Entry {
                    owner,
                    busy: 0,
                    last: Instant::now(),
                },
            );
            book.sessions.len()
        };
        self.report(open);
    }

    /// Forgets session `id` and gives its owner's place back.
    fn forget(&self, id: &SessionId) {
        let open = {
            let mut book = self.book();
            if let Some(entry) = book.sessions.remove(id) {
                Book::less(&mut book.open, &entry.owner);
            }
            book.trim();
            book.sessions.len()
        };
        self.report(open);
    }

    /// A request of session `id` by `who` begins; the session is busy until the guard drops.
    /// Only its owner may use a session: to anyone else it does not exist.
    pub fn enter(self: &Arc<Self>, id: &str, who: &str) -> Result<Busy, NotYours> {
        let mut book = self.book();
        let entry = book.sessions.get_mut(id).ok_or(NotYours::Unknown)?;
        if &*entry.owner != who {
            return Err(NotYours::Unknown);
        }
        entry.busy += 1;
        entry.last = Instant::now();
        Ok(Busy {
            registry: Arc::downgrade(self),
            id: SessionId::from(id),
        })
    }

    /// The sessions idle for `idle` or longer at `now`.
    fn idle_at(&self, now: Instant) -> Vec<SessionId> {
        self.book()
            .sessions
            .iter()
            .filter(|(_, e)| e.busy == 0 && now.saturating_duration_since(e.last) >= self.idle)
            .map(|(id, _)| id.clone())
            .collect()
    }
}

impl Book {
    fn less(open: &mut HashMap<Arc<str>, usize>, owner: &Arc<str>) {
        match open.get_mut(owner) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                open.remove(owner);
            }
            None => {}
        }
    }

    /// Gives memory back once a flood of sessions has ended (a map keeps its largest size).
    fn trim(&mut self) {
        if self.sessions.capacity() > 256 && self.sessions.len() < self.sessions.capacity() / 8 {
            self.sessions.shrink_to_fit();
        }
        if self.open.capacity() > 256 && self.open.len() < self.open.capacity() / 8 {
            self.open.shrink_to_fit();
        }
    }
}

/// The place reserved for a session that one request may open.
pub struct Opening {
    registry: Arc<Registry>,
    owner: Arc<str>,
    /// The session was created on it: its place is the session's now.
    taken: AtomicBool,
}

impl Opening {
    /// Runs `answering` (the SDK's handling of the request) with this place available to
    /// [`Tracked::create_session`]; the place is given back afterwards unless a session took it.
    pub async fn around<F: Future>(self, answering: F) -> F::Output {
        OPENING.scope(self, answering).await
    }

    fn take(&self) -> Option<Arc<str>> {
        (!self.taken.swap(true, Ordering::AcqRel)).then(|| self.owner.clone())
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        if !*self.taken.get_mut() {
            self.registry.release(&self.owner);
        }
    }
}

/// A request of a session in progress: the session is not idle while it lives.
pub struct Busy {
    registry: Weak<Registry>,
    id: SessionId,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let Some(registry) = self.registry.upgrade() else {
            return;
        };
        let mut book = registry.book();
        if let Some(entry) = book.sessions.get_mut(&self.id) {
            entry.busy = entry.busy.saturating_sub(1);
            entry.last = Instant::now();
        }
    }
}

/// Why [`Tracked`] did not create or reach a session.
#[derive(Debug, thiserror::Error)]
pub enum TrackedError {
    /// The SDK's own error.
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
    /// A session was to be created outside a request that reserved its place.
    #[error("no place was reserved for this session")]
    Unreserved,
}

/// The SDK's session manager, with every session recorded in a [`Registry`].
pub struct Tracked {
    local: LocalSessionManager,
    registry: Arc<Registry>,
    /// The most sessions open at a sweep since memory was last given back.
    peak: Mutex<usize>,
}

impl Tracked {
    /// `local`'s sessions, recorded in `registry`.
    pub fn new(local: LocalSessionManager, registry: Arc<Registry>) -> Tracked {
        Tracked {
            local,
            registry,
            peak: Mutex::new(0),
        }
    }

    /// Ends the sessions idle too long (each is forgotten as the SDK closes it), and gives
    /// back what the SDK's map kept of a flood.
    async fn sweep(&self) {
        let idle = self.registry.idle_at(Instant::now());
        for id in &idle {
            tracing::debug!(session = %id, "MCP session idle too long; ended");
            if let Err(e) = self.close_session(id).await {
                tracing::warn!(session = %id, error = %e, "cannot end an idle MCP session");
            }
        }
        let open = {
            let mut sessions = self.local.sessions.write().await;
            if sessions.capacity() > 256 && sessions.len() < sessions.capacity() / 8 {
                sessions.shrink_to_fit();
            }
            sessions.len()
        };
        // Many sessions ended since memory was last given back, or the last one did: their
        // memory goes back to the OS, not only to the allocator. Not while a flood goes on (as
        // many open as end): it costs time. Again a moment later, for what the sessions'
        // tasks freed as they wound down.
        let release = {
            let mut peak = self.peak.lock().unwrap_or_else(PoisonError::into_inner);
            *peak = (*peak).max(open);
            let release = *peak >= open.saturating_mul(2).saturating_add(RELEASE_AFTER)
                || (open == 0 && *peak > 0);
            if release {
                *peak = open;
            }
            release
        };
        if release {
            crate::memory::release();
            tokio::spawn(async {
                tokio::time::sleep(RELEASE_AGAIN).await;
                crate::memory::release();
            });
        }
    }
}

/// Ends idle sessions every so often, while `tracked` lives.
pub async fn sweep_while(tracked: Weak<Tracked>, idle: Duration) {
    let every = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
    loop {
        tokio::time::sleep(every).await;
        let Some(tracked) = tracked.upgrade() else {
            return;
        };
        tracked.sweep().await;
    }
}

impl SessionManager for Tracked {
    type Error = TrackedError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), TrackedError> {
        // Fail closed: a session without an owner would be anyone's.
        let owner = OPENING
            .try_with(Opening::take)
            .ok()
            .flatten()
            .ok_or(TrackedError::Unreserved)?;
        match self.local.create_session().await {
            Ok((id, transport)) => {
                self.registry.record(id.clone(), owner);
                Ok((id, transport))
            }
            Err(e) => {
                self.registry.release(&owner);
                Err(e.into())
            }
        }
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, TrackedError> {
        Ok(self.local.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, TrackedError> {
        Ok(self.local.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), TrackedError> {
        let closed = self.local.close_session(id).await;
        self.registry.forget(id);
        Ok(closed?)
    }

    fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, TrackedError>,
    > + Send {
        let local = &self.local;
        async move { Ok(local.create_stream(id, message).await?) }
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), TrackedError> {
        Ok(self.local.accept_message(id, message).await?)
    }

    fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, TrackedError>,
    > + Send {
        let local = &self.local;
        async move { Ok(local.create_standalone_stream(id).await?) }
    }

    fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, TrackedError>,
    > + Send {
        let local = &self.local;
        async move { Ok(local.resume(id, last_event_id).await?) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_gets_its_bound_and_places_not_taken_come_back() {
        let r = Arc::new(Registry::new(2, Duration::from_secs(60), None));
        let a = r.reserve("a").unwrap();
        let b = r.reserve("a").unwrap();
        let e = r.reserve("a").err().unwrap();
        assert!(
            e.to_string().contains("`mcp.max_sessions_per_principal`"),
            "{e}"
        );
        assert!(r.reserve("b").is_ok(), "another principal is unaffected");
        // A session created on `a`'s place keeps it; `b`'s place comes back.
        let owner = a.take().unwrap();
        r.record(Arc::from("s1"), owner);
        drop(a);
        drop(b);
        assert_eq!(r.book().open.get("a"), Some(&1));
        r.forget(&Arc::from("s1"));
        assert!(r.book().open.is_empty());
        assert!(r.book().sessions.is_empty());
    }

    #[test]
    fn only_the_owner_enters_and_a_busy_session_is_never_idle() {
        let r = Arc::new(Registry::new(4, Duration::ZERO, None));
        let opening = r.reserve("a").unwrap();
        r.record(Arc::from("s1"), opening.take().unwrap());
        assert!(r.enter("s1", "b").is_err());
        assert!(r.enter("nope", "a").is_err());
        let busy = r.enter("s1", "a").unwrap();
        assert!(r.idle_at(Instant::now()).is_empty());
        drop(busy);
        assert_eq!(r.idle_at(Instant::now()), vec![Arc::<str>::from("s1")]);
    }
}
