//! Upstreams: the HTTP(S) client each one is reached with, and which one a
//! request goes to.

use crate::config::{Roots, Upstream};
use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::Service;

/// The body the proxy sends upstream.
pub type UpBody = UnsyncBoxBody<Bytes, axum::Error>;

/// The client of one upstream: HTTP or HTTPS (rustls).
pub type HttpClient = Client<HttpsConnector<HttpConnector>, UpBody>;

/// Why an upstream's client could not be made.
#[derive(Debug)]
pub struct TlsSetupError(pub String);

impl std::fmt::Display for TlsSetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsSetupError {}

/// The client for `up`: its roots (Mozilla's or the system's, plus its
/// `ca_file`), HTTP/1.1, pooled connections.
pub fn client(up: &Upstream) -> Result<HttpClient, TlsSetupError> {
    let mut roots = rustls::RootCertStore::empty();
    match up.roots {
        Roots::Webpki => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Roots::Native => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                // A certificate the store holds but rustls cannot read is
                // skipped, as browsers do.
                let _ = roots.add(cert);
            }
        }
    }
    if let Some(path) = &up.ca_file {
        let pem = std::fs::read(path).map_err(|e| {
            TlsSetupError(format!(
                "upstream {}: ca_file {}: {e}",
                up.name,
                path.display()
            ))
        })?;
        let mut n = 0;
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            let cert = cert.map_err(|e| {
                TlsSetupError(format!(
                    "upstream {}: ca_file {}: {e}",
                    up.name,
                    path.display()
                ))
            })?;
            roots.add(cert).map_err(|e| {
                TlsSetupError(format!(
                    "upstream {}: ca_file {}: {e}",
                    up.name,
                    path.display()
                ))
            })?;
            n += 1;
        }
        if n == 0 {
            return Err(TlsSetupError(format!(
                "upstream {}: ca_file {} holds no PEM certificate",
                up.name,
                path.display()
            )));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsSetupError(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// The client of pool `name`: it reaches every member, over HTTPS with
/// Mozilla's roots or over HTTP.
pub fn pool_client(name: &str) -> Result<HttpClient, TlsSetupError> {
    client(&Upstream {
        name: format!("pool {name}"),
        url: String::new(),
        provider: None,
        provider_source: Default::default(),
        paths: Vec::new(),
        ca_file: None,
        roots: Roots::Webpki,
    })
}

/// What the proxy sees of one job's sends: whether it still counts as
/// waiting (`Metrics::waiting`, until its first send), whether a send of
/// it may be on the wire, and its last send (what an unknown outcome is
/// journaled with). It observes and decides nothing: whether a send
/// reached the wire is the job machine's, published by the layer (and
/// reported by [`Marking`]) on the job's
/// [`Cancel`](ratewise_tower::Cancel), which this reads; whether a job
/// sends again is the machine's too, told through that same `Cancel`.
#[derive(Debug, Clone)]
pub struct WireWatch(Arc<Watched>);

#[derive(Debug)]
struct Watched {
    /// Whether it still counts as waiting.
    counted: AtomicBool,
    metrics: Arc<crate::metrics::Metrics>,
    /// The job's published view of its send.
    view: ratewise_tower::Cancel,
    /// The job ended (answered or cut in its handler, or run to its end
    /// after its caller left): nothing of it is on the wire any more.
    ended: AtomicBool,
    /// Where it is counted among the sends ([`Wire`]), from its first
    /// hand-over to the client: the count and its place in it.
    wire: std::sync::OnceLock<(Arc<Wire>, u64)>,
    /// Its last send: the attempt's number, and when it was handed to the
    /// client (Unix milliseconds).
    attempts: std::sync::atomic::AtomicU32,
    last_send_ms: std::sync::atomic::AtomicU64,
}

impl Watched {
    fn on_wire(&self) -> bool {
        !self.ended.load(Ordering::Acquire) && self.view.sending().may_have_reached()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some((wire, id)) = self.wire.get() {
            wire.forget(*id);
        }
    }
}

/// The sends on the wire, which the shutdown waits for: of the jobs
/// handed to an upstream's client and not yet ended, those whose send may
/// have reached the provider, as each job's view says (a job still
/// waiting for a connection is not on the wire).
#[derive(Debug, Default)]
pub struct Wire {
    next: std::sync::atomic::AtomicU64,
    jobs: std::sync::Mutex<rustc_hash::FxHashMap<u64, std::sync::Weak<Watched>>>,
}

impl Wire {
    /// Sends on the wire now (jobs whose send may have reached the
    /// provider and whose answer has not come back, and successes whose
    /// job has not ended).
    pub fn on_wire(&self) -> usize {
        // Taken out of the lock: the last reference to one may go here,
        // and its drop takes the lock.
        let live: Vec<Arc<Watched>> = self
            .jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .filter_map(std::sync::Weak::upgrade)
            .collect();
        live.iter().filter(|w| w.on_wire()).count()
    }

    fn add(&self, w: &Arc<Watched>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id, Arc::downgrade(w));
        id
    }

    fn forget(&self, id: u64) {
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&id);
    }
}

impl WireWatch {
    /// A job that waits for its first send, counted in `metrics.waiting`,
    /// whose send is published on `view` (the job's cancellation).
    pub fn waiting(metrics: Arc<crate::metrics::Metrics>, view: ratewise_tower::Cancel) -> Self {
        metrics.waiting.fetch_add(1, Ordering::Relaxed);
        WireWatch(Arc::new(Watched {
            counted: AtomicBool::new(true),
            metrics,
            view,
            ended: AtomicBool::new(false),
            wire: std::sync::OnceLock::new(),
            attempts: std::sync::atomic::AtomicU32::new(0),
            last_send_ms: std::sync::atomic::AtomicU64::new(0),
        }))
    }

    /// Whether a send of this job may be on the wire now (its view says
    /// so, and the job has not ended).
    pub fn on_wire(&self) -> bool {
        self.0.on_wire()
    }

    /// The last send: its attempt number and when it started (Unix
    /// milliseconds).
    pub fn last_send(&self) -> (u32, u64) {
        (
            self.0.attempts.load(Ordering::Acquire),
            self.0.last_send_ms.load(Ordering::Acquire),
        )
    }

    /// The job ended: its send, if any, is no longer on the wire.
    pub fn ended(&self) {
        self.0.ended.store(true, Ordering::Release);
    }

    /// Attempt `attempt` (its number as the layer's mark says, else one
    /// more) is handed to the client: the job no longer waits, and is
    /// counted among the sends.
    fn handed(&self, wire: &Arc<Wire>, attempt: Option<u32>) {
        self.uncount();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.0.last_send_ms.store(now, Ordering::Release);
        match attempt {
            Some(n) => self.0.attempts.store(n, Ordering::Release),
            None => {
                self.0.attempts.fetch_add(1, Ordering::AcqRel);
            }
        }
        if self.0.wire.get().is_none() {
            let id = wire.add(&self.0);
            if let Err((_, id)) = self.0.wire.set((wire.clone(), id)) {
                wire.forget(id);
            }
        }
    }

    fn uncount(&self) {
        if self.0.counted.swap(false, Ordering::AcqRel) {
            self.0.metrics.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Held by a job's future: when the job ends, however (answered, failed,
/// aborted), it no longer counts as waiting.
pub struct NoLongerWaiting(pub WireWatch);

impl Drop for NoLongerWaiting {
    fn drop(&mut self) {
        self.0.uncount();
    }
}

/// The upstream client, telling each request's [`WireWatch`] that it was
/// handed over, and reporting where the request is through the layer's
/// [`WireMark`](ratewise_tower::WireMark): waiting for a connection until
/// hyper polls its body (which it does only once the request has one),
/// then on the wire. A job cancelled before that — a caller gone, the
/// proxy draining — has its request withdrawn: its body fails at that
/// first poll, and nothing of it is sent. (A request with an empty body,
/// which hyper never polls, is not watched: handed over, it counts as
/// maybe sent.)
#[derive(Clone)]
pub struct Marking(pub HttpClient, pub Arc<Wire>);

impl Service<http::Request<UpBody>> for Marking {
    type Response = <HttpClient as Service<http::Request<UpBody>>>::Response;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::poll_ready(&mut self.0, cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<UpBody>) -> Self::Future {
        use futures::FutureExt;
        use http_body::Body as _;
        use http_body_util::BodyExt;
        let mark = req
            .extensions()
            .get::<ratewise_tower::WireMark>()
            .cloned()
            .filter(|_| !req.body().is_end_stream());
        if let Some(watch) = req.extensions().get::<WireWatch>() {
            watch.handed(
                &self.1,
                mark.as_ref().map(ratewise_tower::WireMark::attempt),
            );
        }
        let req = match mark {
            Some(mark) => {
                mark.watching();
                req.map(|body| {
                    ReportsWire {
                        body,
                        mark: Some(mark),
                    }
                    .boxed_unsync()
                })
            }
            None => req,
        };
        let call = Service::call(&mut self.0, req);
        async move { call.await.map_err(|e| Box::new(e) as Self::Error) }.boxed()
    }
}

/// A request body whose first poll reports its request on the wire
/// ([`WireMark::reached`](ratewise_tower::WireMark::reached)): hyper polls
/// a request's body only once the request has a connection, before any of
/// it is written. A request whose job was cancelled first fails there
/// instead, and is not sent.
struct ReportsWire {
    body: UpBody,
    /// Until the first poll.
    mark: Option<ratewise_tower::WireMark>,
}

/// Why a request's body failed at its first poll.
#[derive(Debug)]
struct Withdrawn;

impl std::fmt::Display for Withdrawn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the job was cancelled before its request reached the wire: not sent")
    }
}

impl std::error::Error for Withdrawn {}

impl http_body::Body for ReportsWire {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        if let Some(mark) = &self.mark {
            if !mark.reached() {
                return Poll::Ready(Some(Err(axum::Error::new(Withdrawn))));
            }
            self.mark = None;
        }
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        // Polled once at least: that poll is the report.
        self.mark.is_none() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The header a caller sets to name the upstream its request goes to
/// (read here, never forwarded).
pub const UPSTREAM_HEADER: http::HeaderName = http::HeaderName::from_static("x-ratewise-upstream");

/// Picks the upstream of a request: [`UPSTREAM_HEADER`] names one, else
/// the longest matching path prefix, else the first.
pub fn choose(ups: &[Upstream], headers: &http::HeaderMap, path: &str) -> Option<usize> {
    if let Some(name) = headers.get(UPSTREAM_HEADER).and_then(|v| v.to_str().ok()) {
        return ups.iter().position(|u| u.name == name);
    }
    let best = ups
        .iter()
        .enumerate()
        .flat_map(|(i, u)| u.paths.iter().map(move |p| (i, p)))
        .filter(|(_, p)| path.starts_with(p.as_str()))
        .max_by_key(|(_, p)| p.len())
        .map(|(i, _)| i);
    best.or(if ups.is_empty() { None } else { Some(0) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(name: &str, paths: &[&str]) -> Upstream {
        Upstream {
            name: name.into(),
            url: "http://x".into(),
            provider: None,
            provider_source: Default::default(),
            paths: paths.iter().map(|p| p.to_string()).collect(),
            ca_file: None,
            roots: Roots::Webpki,
        }
    }

    #[test]
    fn routing_by_header_then_longest_prefix_then_default() {
        let ups = [
            up("a", &[]),
            up("o", &["/v1/chat"]),
            up("r", &["/v1/chat/completions"]),
        ];
        let mut h = http::HeaderMap::new();
        assert_eq!(choose(&ups, &h, "/v1/messages"), Some(0));
        assert_eq!(choose(&ups, &h, "/v1/chat/completions"), Some(2));
        assert_eq!(choose(&ups, &h, "/v1/chat/x"), Some(1));
        h.insert("x-ratewise-upstream", "o".parse().unwrap());
        assert_eq!(choose(&ups, &h, "/v1/chat/completions"), Some(1));
        h.insert("x-ratewise-upstream", "nope".parse().unwrap());
        assert_eq!(choose(&ups, &h, "/v1/messages"), None);
    }
}
