//! Serving the router on a TCP listener: the accept loop, the connection cap, the deadlines on
//! request heads, request bodies and idle keep-alive connections, and a shutdown that ends in
//! bounded time. Routes, handlers and status codes are the rest of [`crate::api`]; this module
//! owns connections, not requests. (`axum::serve` has none of this: 20,000 idle connections
//! used up the descriptors, and two half-sent requests held SIGTERM for 96 s.)
//!
//! Each connection is in one phase:
//! - `Head`: from accept, or from the first byte after an idle spell, until the request head
//!   is read. Closed at `header_timeout`.
//! - `Body`: the head is in, the body is not. The body reports an error at `body_timeout`, which
//!   the handler answers 408 (and the connection closes).
//! - `Busy`: the whole request is in and is being answered. No deadline: how long a call may
//!   take is the handler's business (tools have their own limits).
//! - `Idle`: between an answer and the next request's first byte. Closed at `idle_timeout`.
//!
//! At `max_connections`, a new connection takes the place of one that is not `Busy`: the one
//! idle the longest or the longest in sending its request. So a flood of silent or slow
//! connections cannot lock callers out; they only push each other out. When every slot is
//! `Busy`, the new connection is answered 503 and closed. Requests that stay `Busy` for long
//! (long polls, event streams, held MCP calls) are bounded where their caller is known, not
//! here: per principal, and for agents together at `max_connections` less
//! `reserved_connections` ([`crate::limits::Held`]), so agents cannot make every slot `Busy`
//! and a probe or a human always finds one to take.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::JsonRejection;
use axum::response::IntoResponse as _;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};
use tower_service::Service as _;

use crate::config::ServerSettings;
use crate::gateway::Error;

/// Connections being answered 503 at once; past that an over-cap connection is closed unanswered.
const REJECTING: usize = 64;
/// How long an over-cap connection has to send its request head before it is closed unanswered.
const REJECT_WITHIN: Duration = Duration::from_secs(1);
/// How long a connection closed after a body timeout may keep sending before it is cut.
const LINGER: Duration = Duration::from_secs(1);
/// Descriptors kept for everything but client connections: the stores, policy files, the
/// watcher, tool runs' pipes, and the 503s in progress.
pub const RESERVED_FDS: u64 = 128 + REJECTING as u64;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Answering = Pin<Box<dyn Future<Output = Result<hyper::Response<Answer>, Infallible>> + Send>>;

/// The request body did not arrive within `[server] body_timeout_ms` of its head.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within the body timeout")]
pub struct BodyTimedOut;

/// Whether a body extraction failed because the body timed out (answered 408, not 400).
pub(super) fn timed_out(rejection: &JsonRejection) -> bool {
    let mut cause = std::error::Error::source(rejection);
    while let Some(e) = cause {
        if e.is::<BodyTimedOut>() {
            return true;
        }
        cause = e.source();
    }
    false
}

/// The soft `RLIMIT_NOFILE` after raising it to the hard limit (or as it was, if it cannot be
/// raised; the reason is logged). Called once by `serve`, before the cap is fitted under it.
pub fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(e) => {
                tracing::warn!(soft, hard, error = %e, "cannot raise the open file limit");
                soft
            }
        },
        Ok((soft, _)) => soft,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the open file limit");
            // What Linux gives a process by default.
            1024
        }
    }
}

/// `settings` with `max_connections` lowered, with a warning, so that the connections and
/// [`RESERVED_FDS`] fit under `fd_limit`.
pub fn fit_to_fd_limit(mut settings: ServerSettings, fd_limit: u64) -> ServerSettings {
    let room = usize::try_from(fd_limit.saturating_sub(RESERVED_FDS))
        .unwrap_or(usize::MAX)
        .max(1);
    if settings.max_connections > room {
        tracing::warn!(
            max_connections = settings.max_connections,
            fd_limit,
            reserved = RESERVED_FDS,
            serving = room,
            "server.max_connections does not fit under the open file limit; lowered"
        );
        // The reserve keeps its share of the cap.
        settings.reserved_connections = settings
            .reserved_connections
            .saturating_mul(room)
            .checked_div(settings.max_connections)
            .unwrap_or(0);
        settings.max_connections = room;
    }
    settings
}

/// Serves `app` on `listener` until `shutdown` completes. Then it stops accepting, closes the
/// connections that have no request in progress, lets the others finish within
/// `shutdown_timeout`, and closes whatever is left.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    settings: ServerSettings,
    shutdown: impl Future<Output = ()>,
) {
    let conns = Arc::new(Conns {
        cap: settings.max_connections,
        table: Mutex::new(Table::default()),
    });
    let rejecting = Arc::new(Semaphore::new(REJECTING));
    let mut tasks = JoinSet::new();
    let mut shutdown = pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // Answers are small and written at once: do not wait to coalesce them.
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!(error = %e, "cannot set TCP_NODELAY");
                    }
                    match conns.admit() {
                        Some(slot) => {
                            tasks.spawn(connection(stream, app.clone(), slot, settings));
                        }
                        None => match rejecting.clone().try_acquire_owned() {
                            Ok(permit) => {
                                tasks.spawn(reject(stream, permit));
                            }
                            Err(_) => drop(stream),
                        },
                    }
                }
                Err(e) => accept_failed(&e).await,
            },
        }
    }
    drop(listener);
    let open = conns.stop_all();
    tracing::info!(
        open,
        within_ms = settings.shutdown_timeout.as_millis(),
        "shutting down: no new connections; requests in progress may finish"
    );
    let drained = tokio::time::timeout(settings.shutdown_timeout, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = tasks.len(),
            "shutdown timeout: closing connections with requests still in progress"
        );
    }
    tasks.shutdown().await;
}

/// Connection errors are the client's; running out of descriptors (or memory) is ours, and
/// the pause lets connections close before the next try instead of spinning.
async fn accept_failed(e: &std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::ConnectionRefused
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed; pausing");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Answers an over-cap connection's first request 503 (body by [`Error`]) and closes it.
async fn reject(stream: TcpStream, _permit: OwnedSemaphorePermit) {
    let answer = hyper::service::service_fn(|_req: hyper::Request<Incoming>| {
        std::future::ready(Ok::<_, Infallible>(
            Error::TooManyConnections.into_response(),
        ))
    });
    let mut http = http1::Builder::new();
    http.keep_alive(false);
    let served = tokio::time::timeout(
        REJECT_WITHIN,
        http.serve_connection(TokioIo::new(stream), answer),
    )
    .await;
    if let Ok(Err(e)) = served {
        tracing::debug!(error = %e, "over-cap connection failed");
    }
}

/// Serves one admitted connection until it closes, times out, is pushed out, or is stopped.
async fn connection(stream: TcpStream, app: Router, slot: Slot, settings: ServerSettings) {
    let conn = slot.conn.clone();
    let io = TokioIo::new(Watched {
        stream,
        conn: conn.clone(),
    });
    let service = {
        let conn = conn.clone();
        hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let complete = req.body().is_end_stream();
            conn.begin(complete);
            let deadline = Instant::now() + settings.body_timeout;
            let conn_for_body = conn.clone();
            let req = req.map(move |inner| Timed {
                inner,
                conn: conn_for_body,
                deadline,
                sleep: None,
                done: complete,
            });
            let answer = app.clone().call(req);
            let conn = conn.clone();
            // Boxed: hyper polls a connection without shutting it down (below) only over
            // `Unpin` futures.
            let answer: Answering = Box::pin(async move {
                let response = match answer.await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                Ok(response.map(|body| Answer { body, conn }))
            });
            answer
        })
    };
    let mut http = http1::Builder::new().serve_connection(io, service);
    let mut told = pin!(conn.wake.notified());
    let mut sleep = pin!(tokio::time::sleep(settings.header_timeout));
    let mut armed = None;
    let mut stopping = false;
    let end = poll_fn(|cx| {
        if let Poll::Ready(served) = http.poll_without_shutdown(cx) {
            return Poll::Ready(match served {
                Ok(()) => End::Closed,
                Err(e) => End::Failed(e),
            });
        }
        while told.as_mut().poll(cx).is_ready() {
            match conn.state().told {
                Some(Told::Go) => return Poll::Ready(End::PushedOut),
                Some(Told::Stop) if !stopping => {
                    stopping = true;
                    // Answer what is in progress, then close; poll again for hyper to act.
                    Pin::new(&mut http).graceful_shutdown();
                    cx.waker().wake_by_ref();
                }
                _ => {}
            }
            told.set(conn.wake.notified());
        }
        let state = conn.state();
        if stopping && !state.phase.in_request() {
            return Poll::Ready(End::Stopped);
        }
        if let Some(deadline) = state.deadline(&settings) {
            if armed != Some(deadline) {
                sleep.as_mut().reset(deadline);
                armed = Some(deadline);
            }
            if sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(End::TimedOut(state.phase));
            }
        }
        Poll::Pending
    })
    .await;
    match end {
        End::Closed => {
            if conn.state().linger {
                linger(http.into_parts().io.into_inner().stream).await;
            }
        }
        End::Stopped => {}
        End::Failed(e) => tracing::debug!(error = %e, "connection failed"),
        End::PushedOut => tracing::debug!("connection pushed out by a new one at the cap"),
        End::TimedOut(phase) => tracing::debug!(?phase, "connection timed out"),
    }
}

/// Closes a connection whose client may still be sending (a body cut at its deadline): closing
/// with unread bytes would send a reset, which can destroy the 408 before the client reads it.
/// So: no more writing, read and discard for at most [`LINGER`], then close.
async fn linger(mut stream: TcpStream) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    if stream.shutdown().await.is_err() {
        return;
    }
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(LINGER, async {
        while let Ok(1..) = stream.read(&mut sink).await {}
    })
    .await;
}

/// How a connection ended.
enum End {
    Closed,
    Failed(hyper::Error),
    PushedOut,
    TimedOut(Phase),
    Stopped,
}

/// The connections being served, for the cap and for shutdown.
struct Conns {
    cap: usize,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    next: u64,
    open: HashMap<u64, Arc<Conn>>,
}

impl Conns {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for a new connection, pushing out the connection that least needs its own (see
    /// the module docs); `None` when every slot has a request in progress.
    fn admit(self: &Arc<Self>) -> Option<Slot> {
        let mut table = self.table();
        if table.open.len() >= self.cap {
            let (_, id) = table
                .open
                .iter()
                .filter_map(|(id, c)| c.state().rank().map(|r| (r, *id)))
                .min()?;
            let victim = table.open.remove(&id)?;
            if !victim.tell(Told::Go) {
                // It started answering a request since it was ranked: keep it.
                table.open.insert(id, victim);
                return None;
            }
        }
        let id = table.next;
        table.next += 1;
        let conn = Arc::new(Conn::new());
        table.open.insert(id, conn.clone());
        Some(Slot {
            conns: self.clone(),
            id,
            conn,
        })
    }

    /// Tells every connection to stop; returns how many there were.
    fn stop_all(&self) -> usize {
        let table = self.table();
        for c in table.open.values() {
            c.tell(Told::Stop);
        }
        table.open.len()
    }
}

/// A connection's place in [`Conns`], given back when its task ends (or is aborted).
struct Slot {
    conns: Arc<Conns>,
    id: u64,
    conn: Arc<Conn>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.conns.table().open.remove(&self.id);
    }
}

/// One connection's phase, shared by its task, its I/O, its requests and the accept loop.
struct Conn {
    state: Mutex<State>,
    /// Woken when the accept loop tells the connection to go or to stop.
    wake: Notify,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Head,
    Body,
    Busy,
    Idle,
}

impl Phase {
    fn in_request(self) -> bool {
        matches!(self, Phase::Body | Phase::Busy)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Told {
    /// Pushed out at the cap: close now.
    Go,
    /// Shutting down: finish the request in progress, if any, then close.
    Stop,
}

#[derive(Clone, Copy)]
struct State {
    phase: Phase,
    /// When the phase began (for the deadlines).
    since: Instant,
    /// When the request in progress began, or the idle spell: what the cap pushes out first.
    began: Instant,
    told: Option<Told>,
    /// A request body was cut at its deadline: the client may still be sending.
    linger: bool,
}

impl State {
    fn deadline(&self, settings: &ServerSettings) -> Option<Instant> {
        match self.phase {
            Phase::Head => Some(self.since + settings.header_timeout),
            Phase::Idle => Some(self.since + settings.idle_timeout),
            Phase::Body | Phase::Busy => None,
        }
    }

    /// Order in which connections are pushed out at the cap (lowest first); `None`: never.
    /// The longest idle, or the longest in sending its request, goes first: a caller that
    /// sends a request at once is the newest there is, and a slow one only gets older.
    fn rank(&self) -> Option<Instant> {
        match (self.told, self.phase) {
            (Some(_), _) | (None, Phase::Busy) => None,
            (None, Phase::Idle | Phase::Head | Phase::Body) => Some(self.began),
        }
    }
}

impl Conn {
    fn new() -> Conn {
        Conn {
            state: Mutex::new(State {
                phase: Phase::Head,
                since: Instant::now(),
                began: Instant::now(),
                told: None,
                linger: false,
            }),
            wake: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn state(&self) -> State {
        *self.lock()
    }

    fn enter(&self, from: &[Phase], to: Phase) {
        let mut s = self.lock();
        if from.contains(&s.phase) {
            let now = Instant::now();
            s.phase = to;
            s.since = now;
            if matches!(to, Phase::Head | Phase::Idle) {
                s.began = now;
            }
        }
    }

    /// Bytes arrived: after an idle spell, the next request's head has begun.
    fn heard(&self) {
        self.enter(&[Phase::Idle], Phase::Head);
    }

    /// A request head was read.
    fn begin(&self, complete: bool) {
        let to = if complete { Phase::Busy } else { Phase::Body };
        self.enter(&[Phase::Head, Phase::Idle, Phase::Body, Phase::Busy], to);
    }

    /// The request body has all arrived.
    fn body_done(&self) {
        self.enter(&[Phase::Body], Phase::Busy);
    }

    /// The answer was handed to the connection.
    fn answered(&self) {
        self.enter(&[Phase::Body, Phase::Busy], Phase::Idle);
    }

    /// Tells the connection to go or stop; `false` (and nothing told) when it was told
    /// already, or when it is busy and is told to go.
    fn tell(&self, told: Told) -> bool {
        let mut s = self.lock();
        if s.told.is_some() || (told == Told::Go && s.phase == Phase::Busy) {
            return false;
        }
        s.told = Some(told);
        drop(s);
        self.wake.notify_one();
        true
    }
}

/// The socket, noticing bytes that arrive while the connection is idle.
struct Watched {
    stream: TcpStream,
    conn: Arc<Conn>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.heard();
        }
        read
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// A request body that fails with [`BodyTimedOut`] once its deadline passes. (tower-http's
/// `TimeoutBody` bounds the wait for each frame, which a body sent a byte a second never hits.)
struct Timed {
    inner: Incoming,
    conn: Arc<Conn>,
    deadline: Instant,
    /// Made on the first wait, so a body that came with its head costs no timer.
    sleep: Option<Pin<Box<Sleep>>>,
    done: bool,
}

impl Timed {
    fn finish(&mut self) {
        if !self.done {
            self.done = true;
            self.conn.body_done();
        }
    }
}

impl HttpBody for Timed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(None) => {
                this.finish();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok(frame))) => {
                if this.inner.is_end_stream() {
                    this.finish();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Pending => {
                let deadline = this.deadline;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if sleep.as_mut().poll(cx).is_ready() {
                    this.conn.lock().linger = true;
                    return Poll::Ready(Some(Err(Box::new(BodyTimedOut))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body; the connection is idle from when hyper is done with it.
struct Answer {
    body: Body,
    conn: Arc<Conn>,
}

impl Drop for Answer {
    fn drop(&mut self) {
        self.conn.answered();
    }
}

impl HttpBody for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_lowered_to_fit_the_descriptors_keeps_its_reserve_share() {
        let fitted = fit_to_fd_limit(ServerSettings::default(), RESERVED_FDS + 512);
        assert_eq!(fitted.max_connections, 512);
        assert_eq!(fitted.reserved_connections, 64);
        assert_eq!(fitted.agents_may_hold(), 448);
        let fitted = fit_to_fd_limit(ServerSettings::default(), RESERVED_FDS + 1);
        assert_eq!(
            (fitted.max_connections, fitted.reserved_connections),
            (1, 0)
        );
        assert_eq!(fitted.agents_may_hold(), 1);
    }
}
