//! The listeners' accept loop, bounded by design: a cap on connections
//! served at once, a header-read timeout, an idle keep-alive timeout, and
//! a close that ends every connection at once (the end of a shutdown).
//!
//! * **Connection cap** (`bounds.max_connections`): at the cap, a new
//!   connection is admitted by closing the connection idle longest — one
//!   with no request in progress: opened and never used, or idle between
//!   requests (as servers reuse their idle keep-alive connections).
//!   Idle connections above the cap never hold back a caller. Only while
//!   every connection has a request in progress (or is sending one) do
//!   new connections wait in the kernel's listen backlog (refused by it
//!   when that is full). Reaching the cap is logged (at most every 10 s).
//!   An idle connection closed so is shut down as hyper does it (what is
//!   being written is written first; a request that arrives in that
//!   instant is answered, then the connection closes).
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
use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
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
    let registry = Arc::new(Registry::default());
    let mut oldest = Oldest::default();
    let mut conns = tokio::task::JoinSet::new();
    // The cap and the descriptor limit are logged at most once per
    // LOG_EVERY each, so a listener held at its cap does not flood the log.
    let mut cap_logged: Option<Instant> = None;
    let mut emfile_logged: Option<Instant> = None;
    loop {
        // A free place; at the cap, a connection with no request in
        // progress, to be closed for the next one. While every connection
        // is busy, new ones wait in the listen backlog.
        let place = match places.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => {
                if due(&mut cap_logged) {
                    tracing::warn!(
                        listener = name,
                        max_connections = bounds.max_connections,
                        "connection cap reached: the connections idle longest are closed to admit new ones; while every connection has a request in progress, new connections wait in the listen backlog (bounds.max_connections)"
                    );
                }
                tokio::select! {
                    p = places.clone().acquire_owned() => match p {
                        Ok(p) => Some(p),
                        Err(_) => break,
                    },
                    () = registry.some_idle() => None,
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
        let place = match place {
            Some(p) => p,
            None => match make_room(&places, &registry, &mut oldest, &mut closed).await {
                Some(p) => p,
                None => break,
            },
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let closed = closed.clone();
        let active = active.clone();
        // Idle (never used) from its accept, in the order of the accepts.
        let (conn, registered) = registry.add();
        conns.spawn(async move {
            let _place = place;
            // Dropped before the place: out of the registry first.
            let _registered = registered;
            connection(stream, router, bounds, closed, active, conn).await;
        });
    }
    // Closed: every connection ends now.
    conns.shutdown().await;
}

/// At the cap, with a connection accepted: closes the connection idle
/// longest and waits for its place (or any place that frees first). When
/// the one asked has a request in progress again by then, the next idle
/// one is asked; with none idle, this waits for one to be.
async fn make_room(
    places: &Arc<Semaphore>,
    registry: &Registry,
    oldest: &mut Oldest,
    closed: &mut watch::Receiver<bool>,
) -> Option<OwnedSemaphorePermit> {
    let mut asked: Option<Arc<Conn>> = None;
    loop {
        if let Ok(p) = places.clone().try_acquire_owned() {
            return Some(p);
        }
        let changed = registry.changed.notified();
        if !asked
            .as_ref()
            .is_some_and(|c| c.asked.load(Ordering::Acquire))
        {
            asked = oldest.next(registry);
        }
        tokio::select! {
            p = places.clone().acquire_owned() => return p.ok(),
            () = changed => {}
            _ = closed.wait_for(|c| *c) => return None,
        }
    }
}

/// A listener's connections, for closing the idle longest at the cap.
#[derive(Default)]
struct Registry {
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    /// A connection became idle, ended, or declined to close (it had a
    /// request in progress again).
    changed: Arc<Notify>,
}

/// One connection as the accept loop sees it.
struct Conn {
    watch: Arc<Watch>,
    /// Set by the accept loop when it asks the connection to close; cleared
    /// by the connection when it declines (a request is in progress).
    asked: AtomicBool,
    close: Notify,
}

/// A connection's place in the [`Registry`], left when dropped.
struct Registered {
    registry: Arc<Registry>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.id);
        self.registry.changed.notify_one();
    }
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new connection: idle (never used) from now.
    fn add(self: &Arc<Self>) -> (Arc<Conn>, Registered) {
        let conn = Arc::new(Conn {
            watch: Arc::new(Watch::new(self.changed.clone())),
            asked: AtomicBool::new(false),
            close: Notify::new(),
        });
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, conn.clone());
        (
            conn,
            Registered {
                registry: self.clone(),
                id,
            },
        )
    }

    /// Resolves once a connection has no request in progress.
    async fn some_idle(&self) {
        loop {
            let changed = self.changed.notified();
            let any = self
                .lock()
                .values()
                .any(|c| !c.asked.load(Ordering::Acquire) && c.watch.idle_since().is_some());
            if any {
                return;
            }
            changed.await;
        }
    }

    /// Up to `n` idle connections, the idle longest last, with the moment
    /// each became idle.
    fn oldest_idle(&self, n: usize) -> Vec<(Instant, Weak<Conn>)> {
        let conns = self.lock();
        let mut idle: Vec<(Instant, u64)> = conns
            .iter()
            .filter(|(_, c)| !c.asked.load(Ordering::Acquire))
            .filter_map(|(id, c)| Some((c.watch.idle_since()?, *id)))
            .collect();
        if idle.len() > n {
            idle.select_nth_unstable(n);
            idle.truncate(n);
        }
        idle.sort_unstable();
        idle.into_iter()
            .rev()
            .filter_map(|(at, id)| Some((at, Arc::downgrade(conns.get(&id)?))))
            .collect()
    }
}

/// Idle connections found by one pass over the registry, handed out idle
/// longest first (one pass per [`OLDEST_BATCH`] closes, not one per close).
#[derive(Default)]
struct Oldest {
    queue: Vec<(Instant, Weak<Conn>)>,
}

/// Idle connections taken by one pass over a listener's connections.
const OLDEST_BATCH: usize = 64;

impl Oldest {
    /// Asks the connection idle longest to close; `None` when none is
    /// idle. One found by an earlier pass is asked only if it has stayed
    /// idle since (one used meanwhile is idle more recently than any not
    /// taken by that pass).
    fn next(&mut self, registry: &Registry) -> Option<Arc<Conn>> {
        for pass in [false, true] {
            if pass {
                self.queue = registry.oldest_idle(OLDEST_BATCH);
            }
            while let Some((at, c)) = self.queue.pop() {
                let Some(c) = c.upgrade() else { continue };
                if c.watch.idle_since() == Some(at)
                    && c.asked
                        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                {
                    c.close.notify_one();
                    return Some(c);
                }
            }
        }
        None
    }
}

/// How often a listener at its cap, or out of descriptors, says so.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// How long a connection closed for a new one may take to write what it
/// has before it is dropped (checked again while a request that arrived
/// in that instant is in progress).
const CLOSE_FLUSH: Duration = Duration::from_secs(1);

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
    /// The listener's: told when this connection becomes idle.
    idle: Arc<Notify>,
}

struct Times {
    idle_since: Instant,
    head_from: Option<Instant>,
}

impl Watch {
    fn new(idle: Arc<Notify>) -> Self {
        Watch {
            active: AtomicUsize::new(0),
            times: Mutex::new(Times {
                idle_since: Instant::now(),
                head_from: None,
            }),
            changed: Notify::new(),
            idle,
        }
    }

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
            drop(t);
            self.idle.notify_one();
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

    /// Since when the connection has had no request in progress and no
    /// byte of a next one; `None` while it has.
    fn idle_since(&self) -> Option<Instant> {
        if self.active.load(Ordering::Acquire) > 0 {
            return None;
        }
        let t = self.times();
        t.head_from.is_none().then_some(t.idle_since)
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
    me: Arc<Conn>,
) {
    let watch = me.watch.clone();
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
    tokio::pin!(conn);
    // Asked to close for a new connection: by when it is dropped, if it is
    // still idle then.
    let mut closing: Option<Instant> = None;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                break;
            }
            why = watch.expired(bounds) => {
                tracing::debug!(reason = why, "connection closed");
                break;
            }
            _ = closed.wait_for(|c| *c) => break,
            () = me.close.notified(), if closing.is_none() => {
                if watch.idle_since().is_some() {
                    tracing::debug!("connection closed: idle longest at the connection cap");
                    // As hyper closes: what is being written is written.
                    conn.as_mut().graceful_shutdown();
                    closing = Some(Instant::now() + CLOSE_FLUSH);
                } else {
                    // A request came meanwhile: another is asked.
                    me.asked.store(false, Ordering::Release);
                    watch.idle.notify_one();
                }
            }
            () = tokio::time::sleep_until(closing.unwrap_or_else(Instant::now)), if closing.is_some() => {
                if watch.idle_since().is_some() {
                    break;
                }
                // A request that came in that instant is answered first
                // (keep-alive is off: hyper closes after it); the accept
                // loop asks another meanwhile.
                if me.asked.swap(false, Ordering::AcqRel) {
                    watch.idle.notify_one();
                }
                closing = Some(Instant::now() + CLOSE_FLUSH);
            }
        }
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
