//! The listeners' accept loop, bounded by design: a cap on connections
//! served at once, a header-read timeout, an idle keep-alive timeout, and
//! a close that ends every connection at once (the end of a shutdown).
//!
//! * **Connection cap** (`bounds.max_connections`): a connection is
//!   accepted only with a free place; beyond the cap new connections wait
//!   in the kernel's listen backlog (and are refused by it when that is
//!   full). Reaching the cap is logged (at most every 10 s).
//! * **Accept errors**: out of descriptors (`EMFILE`, `ENFILE`: logged at
//!   most every 10 s) or any other failure is logged and retried after a
//!   100 ms backoff, never in a busy loop.
//! * **Header read timeout** (`bounds.header_read_timeout_ms`): from the
//!   first byte of a request's head to its end. A connection that sends
//!   half a header is closed then.
//! * **Idle timeout** (`bounds.idle_timeout_ms`): a connection with no
//!   request in progress and no byte of the next one is closed after it. A
//!   request is in progress from its head to the end of its answer: while
//!   it waits for admission, for its upstream, or streams its answer, its
//!   connection is never idle.
//!
//! The timers are the proxy's own, not hyper's `header_read_timeout`
//! (which starts when the connection waits for a head, so it would close
//! an idle keep-alive connection at the header timeout).

use axum::body::Body;
use axum::Router;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper_util::rt::TokioIo;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, Semaphore};
use tokio::time::Instant;
use tower::Service;

/// A listener's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// From a request head's first byte to its end.
    pub header_read_timeout: Duration,
    /// A connection with no request in progress.
    pub idle_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

/// How long the accept loop waits after a failed accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// A listener being served.
pub struct Served {
    close: watch::Sender<bool>,
    active: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    /// Requests in progress on this listener (head read, answer not yet
    /// written to its end).
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    /// Stops accepting and ends every connection at once.
    pub async fn close(self) {
        let _ = self.close.send(true);
        let _ = self.task.await;
    }
}

/// Serves `router` on `listener` within `bounds`; `name` names the
/// listener in logs.
pub fn serve(listener: TcpListener, router: Router, bounds: Bounds, name: &'static str) -> Served {
    let (close, closed) = watch::channel(false);
    let active = Arc::new(AtomicUsize::new(0));
    let task = tokio::spawn(accept_loop(
        listener,
        router,
        bounds,
        name,
        closed,
        active.clone(),
    ));
    Served {
        close,
        active,
        task,
    }
}

async fn accept_loop(
    listener: TcpListener,
    router: Router,
    bounds: Bounds,
    name: &'static str,
    mut closed: watch::Receiver<bool>,
    active: Arc<AtomicUsize>,
) {
    let places = Arc::new(Semaphore::new(bounds.max_connections.max(1)));
    let mut conns = tokio::task::JoinSet::new();
    // The cap and the descriptor limit are logged at most once per
    // LOG_EVERY each, so a listener held at its cap does not flood the log.
    let mut cap_logged: Option<Instant> = None;
    let mut emfile_logged: Option<Instant> = None;
    loop {
        let place = match places.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if due(&mut cap_logged) {
                    tracing::warn!(
                        listener = name,
                        max_connections = bounds.max_connections,
                        "connection cap reached: new connections wait in the listen backlog (bounds.max_connections)"
                    );
                }
                tokio::select! {
                    p = places.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                    _ = closed.wait_for(|c| *c) => break,
                }
            }
        };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = closed.wait_for(|c| *c) => break,
        };
        // Finished connections' tasks are reaped as new ones come.
        while conns.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                if is_out_of_descriptors(&e) {
                    if due(&mut emfile_logged) {
                        tracing::warn!(listener = name, error = %e,
                            "out of file descriptors: accepting again after a pause (lower bounds.max_connections or raise the limit)");
                    }
                } else {
                    tracing::warn!(listener = name, error = %e, "accept failed: accepting again after a pause");
                }
                drop(place);
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let closed = closed.clone();
        let active = active.clone();
        conns.spawn(async move {
            let _place = place;
            connection(stream, router, bounds, closed, active).await;
        });
    }
    // Closed: every connection ends now.
    conns.shutdown().await;
}

/// How often a listener at its cap, or out of descriptors, says so.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Whether a warning last given at `last` is due again (and notes it).
fn due(last: &mut Option<Instant>) -> bool {
    let now = Instant::now();
    if last.is_some_and(|t| now.duration_since(t) < LOG_EVERY) {
        return false;
    }
    *last = Some(now);
    true
}

fn is_out_of_descriptors(e: &io::Error) -> bool {
    // EMFILE (24) and ENFILE (23) on Linux and the BSDs.
    matches!(e.raw_os_error(), Some(23 | 24))
}

/// What one connection's watchdog reads: requests in progress, when the
/// connection last had none, and when the head being read began.
struct Watch {
    active: AtomicUsize,
    times: Mutex<Times>,
    changed: Notify,
}

struct Times {
    idle_since: Instant,
    head_from: Option<Instant>,
}

impl Watch {
    fn begin(&self) {
        self.active.fetch_add(1, Ordering::AcqRel);
        self.times().head_from = None;
        self.changed.notify_one();
    }

    fn end(&self) {
        if self.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            let mut t = self.times();
            t.idle_since = Instant::now();
            t.head_from = None;
        }
        self.changed.notify_one();
    }

    fn read_some(&self) {
        if self.active.load(Ordering::Acquire) == 0 {
            let mut t = self.times();
            if t.head_from.is_none() {
                t.head_from = Some(Instant::now());
                drop(t);
                self.changed.notify_one();
            }
        }
    }

    fn times(&self) -> std::sync::MutexGuard<'_, Times> {
        self.times.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Resolves when the connection has been idle, or reading a head, for
    /// too long.
    async fn expired(&self, bounds: Bounds) -> &'static str {
        loop {
            let notified = self.changed.notified();
            let until = if self.active.load(Ordering::Acquire) > 0 {
                None
            } else {
                let t = self.times();
                Some(match t.head_from {
                    Some(from) => (from + bounds.header_read_timeout, "header read timeout"),
                    None => (t.idle_since + bounds.idle_timeout, "idle timeout"),
                })
            };
            match until {
                None => notified.await,
                Some((at, why)) => {
                    if Instant::now() >= at {
                        return why;
                    }
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
            }
        }
    }
}

async fn connection(
    stream: TcpStream,
    router: Router,
    bounds: Bounds,
    mut closed: watch::Receiver<bool>,
    active: Arc<AtomicUsize>,
) {
    let watch = Arc::new(Watch {
        active: AtomicUsize::new(0),
        times: Mutex::new(Times {
            idle_since: Instant::now(),
            head_from: None,
        }),
        changed: Notify::new(),
    });
    let io = TokioIo::new(Watched {
        inner: stream,
        watch: watch.clone(),
    });
    let w = watch.clone();
    let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let guard = InProgress::enter(w.clone(), active.clone());
        let mut router = router.clone();
        async move {
            let resp = match router.call(req.map(Body::new)).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            Ok::<_, std::convert::Infallible>(resp.map(|b| Tracked {
                inner: b,
                _guard: guard,
            }))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .header_read_timeout(None)
        .serve_connection(io, svc);
    tokio::select! {
        r = conn => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        why = watch.expired(bounds) => {
            tracing::debug!(reason = why, "connection closed");
        }
        _ = closed.wait_for(|c| *c) => {}
    }
}

/// A request in progress, until its answer's body ends or is dropped.
struct InProgress {
    watch: Arc<Watch>,
    active: Arc<AtomicUsize>,
}

impl InProgress {
    fn enter(watch: Arc<Watch>, active: Arc<AtomicUsize>) -> Self {
        watch.begin();
        active.fetch_add(1, Ordering::AcqRel);
        InProgress { watch, active }
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.active.fetch_sub(1, Ordering::AcqRel);
        self.watch.end();
    }
}

/// An answer's body, holding its request in progress until it is written.
struct Tracked {
    inner: Body,
    _guard: InProgress,
}

impl http_body::Body for Tracked {
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

/// The connection's socket, noting when bytes of a new head arrive.
struct Watched {
    inner: TcpStream,
    watch: Arc<Watch>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.watch.read_some();
        }
        polled
    }
}

impl AsyncWrite for Watched {
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
