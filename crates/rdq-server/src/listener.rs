//! The listener of `rdq serve`: accepts TCP connections (optionally TLS),
//! speaks HTTP/1.1 and HTTP/2 on the same port (HTTP/2 by ALPN over TLS, or
//! by prior knowledge in clear text, so gRPC shares the port), and protects
//! the server from slow, idle and numerous clients (`docs/server.md`, "The
//! listener"):
//!
//! - **header read** — a new connection must complete its TLS handshake and
//!   its first request head (for HTTP/2, the connection preface) within
//!   `header_read_timeout_ms` of being accepted; on a kept-alive HTTP/1.1
//!   connection, a request head must be complete within that long of its
//!   first byte. Otherwise the connection is closed without an answer.
//! - **body read** — a request body that delivers nothing for
//!   `body_read_timeout_ms` fails with [`BodyStalled`]; the request is
//!   answered 408 `REQUEST_TIMEOUT` and an HTTP/1.1 connection is closed.
//! - **idle** — a connection with no request in flight for
//!   `idle_timeout_ms` is shut down gracefully (HTTP/2: `GOAWAY`). HTTP/2
//!   keep-alive pings (not counted as activity) close connections whose peer
//!   is gone.
//! - **connection limit** — at most `max_connections` are open at once; the
//!   listener accepts no more until one closes, so further clients wait in
//!   the operating system's accept backlog (and are refused by it once the
//!   backlog is full).
//!
//! Shutdown: the listener stops accepting (and closes the socket, so queued
//! clients are refused), every connection is shut down gracefully (in-flight
//! requests finish; idle connections close at once) and [`serve`] returns
//! when all are closed. The caller bounds that wait (`shutdown_grace_ms`) by
//! dropping the future, which closes what is left.

use std::convert::Infallible;
use std::error::Error as StdError;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, Request, Response, Version, header};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rdq_runtime::Shutdown;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};
use tower_service::Service;
use tracing::{debug, warn};

use crate::config::HttpSettings;

/// The stable code of a request whose body stalled (408).
pub const REQUEST_TIMEOUT: &str = "REQUEST_TIMEOUT";

/// The TLS acceptor of an HTTPS listener.
#[cfg(feature = "https")]
pub type TlsAcceptor = tokio_rustls::TlsAcceptor;

/// Without the `https` feature there is no TLS acceptor: a type with no
/// values, so the listener's TLS paths compile away.
#[cfg(not(feature = "https"))]
#[derive(Debug, Clone)]
pub enum TlsAcceptor {}

/// The error a request body reports when it delivered nothing for
/// `body_read_timeout_ms`; the request is answered 408 `REQUEST_TIMEOUT`.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "the request body sent nothing for {timeout_ms} ms (the server's body_read_timeout_ms); closing the connection"
)]
pub struct BodyStalled {
    /// The configured timeout (ms).
    pub timeout_ms: u64,
}

impl BodyStalled {
    /// Finds a `BodyStalled` in an error's source chain (as a body error
    /// reaches a handler wrapped by the extractors).
    pub fn find<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a Self> {
        let mut current = Some(error);
        while let Some(e) = current {
            if let Some(stalled) = e.downcast_ref::<Self>() {
                return Some(stalled);
            }
            current = e.source();
        }
        None
    }
}

type BoxError = Box<dyn StdError + Send + Sync>;

/// Serves `router` on `listener` until `shutdown` fires, then shuts every
/// connection down gracefully and returns once all are closed (see the
/// module documentation).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    settings: HttpSettings,
    tls: Option<TlsAcceptor>,
    mut shutdown: Shutdown,
) {
    let settings = Arc::new(settings);
    let builder = Arc::new(builder(&settings));
    let permits = Arc::new(Semaphore::new(settings.max_connections.max(1)));
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        // A free slot first, then a connection: past the limit, clients
        // wait in the accept backlog.
        let permit = tokio::select! {
            () = shutdown.wait() => break,
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let (tcp, peer) = tokio::select! {
            () = shutdown.wait() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // E.g. out of file descriptors: wait instead of spinning.
                    warn!(error = %e, "accepting a connection failed; retrying in 1 s");
                    tokio::select! {
                        () = shutdown.wait() => break,
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            },
        };
        let accepted = Instant::now();
        if let Err(e) = tcp.set_nodelay(true) {
            debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        let conn = Connection {
            peer,
            accepted,
            settings: Arc::clone(&settings),
            builder: Arc::clone(&builder),
            router: router.clone(),
            shutdown: shutdown.clone(),
        };
        let tls = tls.clone();
        connections.spawn(async move {
            conn.run(tcp, tls).await;
            drop(permit);
        });
    }
    // Closing the socket refuses the clients still in the backlog.
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// Errors of one incoming connection, not of the listener.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

fn builder(settings: &HttpSettings) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper's own header timer starts when the previous response is done,
    // so it spans the idle wait too; the watchdog enforces the real limits
    // and this is only a backstop for pipelined requests.
    builder
        .http1()
        .timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(ms(settings.idle_timeout_ms) + ms(settings.header_read_timeout_ms));
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(ms(settings.h2_keepalive_interval_ms))
        .keep_alive_timeout(ms(settings.h2_keepalive_timeout_ms))
        .max_concurrent_streams(settings.h2_max_concurrent_streams);
    builder
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// One accepted connection and what it needs.
struct Connection {
    peer: SocketAddr,
    accepted: Instant,
    settings: Arc<HttpSettings>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    router: Router,
    shutdown: Shutdown,
}

impl Connection {
    async fn run(self, tcp: TcpStream, tls: Option<TlsAcceptor>) {
        match tls {
            None => self.http(tcp).await,
            #[cfg(feature = "https")]
            Some(acceptor) => {
                // The handshake counts against the header-read timeout.
                let deadline = self.accepted + ms(self.settings.header_read_timeout_ms);
                match tokio::time::timeout_at(deadline, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => self.http(stream).await,
                    Ok(Err(e)) => debug!(peer = %self.peer, error = %e, "TLS handshake failed"),
                    Err(_) => debug!(
                        peer = %self.peer,
                        "TLS handshake not done within header_read_timeout_ms; closing"
                    ),
                }
            }
            #[cfg(not(feature = "https"))]
            Some(never) => match never {},
        }
    }

    async fn http<S>(self, stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let state = Arc::new(ConnState::new(self.accepted));
        let io = TokioIo::new(Tracked {
            inner: stream,
            state: Arc::clone(&state),
        });
        let service = ConnService {
            router: self.router.clone(),
            state: Arc::clone(&state),
            body_timeout_ms: self.settings.body_read_timeout_ms,
        };
        let conn = self
            .builder
            .serve_connection(io, hyper_util::service::TowerToHyperService::new(service));
        tokio::pin!(conn);
        let mut shutdown = self.shutdown.clone();
        let mut graceful = false;
        let mut hard_close: Option<Instant> = None;
        let peer = self.peer;
        loop {
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        debug!(%peer, error = %e, "connection ended with an error");
                    }
                    return;
                }
                // Once closing, the connection finishes on its own (or is
                // dropped: `hard_close` here, the grace period at shutdown).
                verdict = state.verdict(&self.settings), if !graceful => match verdict {
                    Verdict::Stalled(why) => {
                        debug!(%peer, "{why}; closing the connection");
                        return;
                    }
                    Verdict::Idle => {
                        debug!(%peer, "idle for idle_timeout_ms; closing the connection");
                        conn.as_mut().graceful_shutdown();
                        graceful = true;
                        hard_close =
                            Some(Instant::now() + ms(self.settings.header_read_timeout_ms));
                    }
                },
                () = shutdown.wait(), if !graceful => {
                    conn.as_mut().graceful_shutdown();
                    graceful = true;
                }
                () = sleep_until_opt(hard_close), if hard_close.is_some() => return,
            }
        }
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// What the watchdog decided about a connection.
enum Verdict {
    /// A client is too slow: close at once, without an answer.
    Stalled(&'static str),
    /// No request in flight for the idle timeout: shut down gracefully.
    Idle,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Unknown,
    Http1,
    Http2,
}

/// The HTTP/2 connection preface a client starts with.
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What the watchdog knows about one connection.
struct ConnState {
    accepted: Instant,
    inner: Mutex<Inner>,
    changed: Notify,
}

struct Inner {
    proto: Proto,
    /// Bytes of the preface seen so far, while the protocol is unknown.
    seen: usize,
    /// Requests started on this connection.
    requests: u64,
    /// Requests whose response has not finished.
    in_flight: usize,
    /// When the last response finished (or the connection was accepted).
    last_done: Instant,
    /// HTTP/1.1: when the first byte of the next request head arrived.
    head_started: Option<Instant>,
}

impl ConnState {
    fn new(accepted: Instant) -> Self {
        Self {
            accepted,
            inner: Mutex::new(Inner {
                proto: Proto::Unknown,
                seen: 0,
                requests: 0,
                in_flight: 0,
                last_done: accepted,
                head_started: None,
            }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes arrived from the client.
    fn on_read(&self, bytes: &[u8]) {
        let mut inner = self.lock();
        if inner.proto == Proto::Unknown {
            let start = inner.seen;
            let n = bytes.len().min(H2_PREFACE.len() - start);
            if bytes[..n] == H2_PREFACE[start..start + n] {
                inner.seen += n;
                if inner.seen == H2_PREFACE.len() {
                    inner.proto = Proto::Http2;
                    self.changed.notify_one();
                }
            } else {
                inner.proto = Proto::Http1;
            }
        }
        if inner.proto == Proto::Http1
            && inner.requests > 0
            && inner.in_flight == 0
            && inner.head_started.is_none()
        {
            inner.head_started = Some(Instant::now());
            self.changed.notify_one();
        }
    }

    fn request_started(&self) {
        let mut inner = self.lock();
        inner.requests += 1;
        inner.in_flight += 1;
        inner.head_started = None;
        self.changed.notify_one();
    }

    fn request_done(&self) {
        let mut inner = self.lock();
        inner.in_flight = inner.in_flight.saturating_sub(1);
        inner.last_done = Instant::now();
        self.changed.notify_one();
    }

    /// The next deadline and what happens at it; `None` while a request is
    /// in flight (its body has its own timeout, its handler none).
    fn due(&self, settings: &HttpSettings) -> Option<(Instant, Verdict)> {
        let inner = self.lock();
        let header = ms(settings.header_read_timeout_ms);
        if inner.requests == 0 && inner.proto != Proto::Http2 {
            return Some((
                self.accepted + header,
                Verdict::Stalled("no complete request head within header_read_timeout_ms"),
            ));
        }
        if inner.in_flight > 0 {
            return None;
        }
        if let Some(started) = inner.head_started {
            return Some((
                started + header,
                Verdict::Stalled("request head not complete within header_read_timeout_ms"),
            ));
        }
        Some((
            inner.last_done + ms(settings.idle_timeout_ms),
            Verdict::Idle,
        ))
    }

    /// Completes when a deadline passes with its condition still true.
    async fn verdict(&self, settings: &HttpSettings) -> Verdict {
        loop {
            match self.due(settings) {
                None => self.changed.notified().await,
                Some((at, verdict)) => {
                    if at <= Instant::now() {
                        return verdict;
                    }
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = self.changed.notified() => {}
                    }
                }
            }
        }
    }
}

/// The connection's byte stream, telling the watchdog when bytes arrive.
struct Tracked<S> {
    inner: S,
    state: Arc<ConnState>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let filled = buf.filled();
            if filled.len() > before {
                this.state.on_read(&filled[before..]);
            }
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The per-connection service: counts requests in flight for the
/// watchdog, puts the body-read timeout on request bodies, and closes an
/// HTTP/1.1 connection whose request body stalled.
#[derive(Clone)]
struct ConnService {
    router: Router,
    state: Arc<ConnState>,
    body_timeout_ms: u64,
}

impl Service<Request<Incoming>> for ConnService {
    type Response = Response<GuardedBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        self.state.request_started();
        let guard = InFlight(Arc::clone(&self.state));
        let stalled = Arc::new(AtomicBool::new(false));
        let http1 = req.version() <= Version::HTTP_11;
        let timeout_ms = self.body_timeout_ms;
        let stalled_flag = Arc::clone(&stalled);
        // A gRPC stream (the `Work` RPC) may rightly send nothing for
        // minutes; HTTP/2 keep-alive pings watch its connection instead.
        let grpc = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("application/grpc"));
        let req = if grpc {
            req.map(Body::new)
        } else {
            req.map(|body| {
                Body::new(StallGuard {
                    inner: body,
                    timeout_ms,
                    timer: None,
                    stalled: stalled_flag,
                })
            })
        };
        // A router is always ready (axum's documentation), so `call` may
        // follow `clone` directly.
        let response = self.router.clone().call(req);
        Box::pin(async move {
            let mut response = match response.await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            if http1 && stalled.load(Ordering::Relaxed) {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(response.map(|body| GuardedBody {
                inner: body,
                _guard: guard,
            }))
        })
    }
}

/// Marks a request finished when dropped (with its response body, or with
/// the response future if the connection went away first).
struct InFlight(Arc<ConnState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_done();
    }
}

/// A response body that holds its request's [`InFlight`] mark.
struct GuardedBody {
    inner: Body,
    _guard: InFlight,
}

impl http_body::Body for GuardedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that fails with [`BodyStalled`] when it delivers nothing
/// for the body-read timeout.
struct StallGuard {
    inner: Incoming,
    timeout_ms: u64,
    timer: Option<Pin<Box<Sleep>>>,
    stalled: Arc<AtomicBool>,
}

impl http_body::Body for StallGuard {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.stalled.load(Ordering::Relaxed) {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                // Data arrived: the next wait starts from now.
                this.timer = None;
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Box::new(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let timeout = ms(this.timeout_ms);
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                if timer.as_mut().poll(cx).is_ready() {
                    this.stalled.store(true, Ordering::Relaxed);
                    return Poll::Ready(Some(Err(Box::new(BodyStalled {
                        timeout_ms: this.timeout_ms,
                    }))));
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
