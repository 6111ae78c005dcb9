//! Upstreams: the HTTP(S) client each one is reached with, and which one a
//! request goes to.

use crate::config::{Roots, Upstream};
use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
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

/// Where a job stands with its upstream, one atomic state: waiting for its
/// first send, sent (a caller that leaves then does not cancel it: its
/// usage must settle), or cancelled because its caller left (before any
/// send: the job is aborted; after one: no further send is made). Until
/// its first send the job counts as waiting (`Metrics::waiting`).
#[derive(Debug, Clone)]
pub struct SentFlag(Arc<Flag>);

#[derive(Debug)]
struct Flag {
    state: AtomicU8,
    /// Whether it still counts as waiting.
    counted: AtomicBool,
    metrics: Arc<crate::metrics::Metrics>,
    /// Its send is on the wire (counted in [`Wire::on_wire`]): from the
    /// moment it is handed to the client until an error answer comes back
    /// (the layer then decides on it), a later send is refused by the
    /// gate, or the job ends.
    on_wire: AtomicBool,
    /// The gate it was sent through, once sent.
    wire: std::sync::OnceLock<Arc<Wire>>,
    /// Woken when a send of this job is refused because the proxy drains,
    /// or when its send comes back with an answer that is not a success.
    changed: tokio::sync::Notify,
    /// Sends handed to the client (its last attempt's number) and when
    /// the last one started (Unix milliseconds): what an unknown outcome
    /// is journaled with.
    attempts: std::sync::atomic::AtomicU32,
    last_send_ms: std::sync::atomic::AtomicU64,
}

impl Drop for Flag {
    fn drop(&mut self) {
        if self.on_wire.swap(false, Ordering::AcqRel) {
            if let Some(w) = self.wire.get() {
                w.on_wire.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// The gate every send passes: closed when the proxy drains (no attempt
/// starts after the signal, first sends and retries alike), and the count
/// of sends on the wire, which the shutdown waits for.
#[derive(Debug, Default)]
pub struct Wire {
    closed: AtomicBool,
    on_wire: std::sync::atomic::AtomicUsize,
}

impl Wire {
    /// Closes the gate: every send from now on is refused.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Whether the gate is closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Sends on the wire now (jobs whose answer has not come back, and
    /// successes whose job has not ended).
    pub fn on_wire(&self) -> usize {
        self.on_wire.load(Ordering::Acquire)
    }
}

const WAITING: u8 = 0;
const SENT: u8 = 1;
const CANCELLED: u8 = 2;
const GONE_AFTER_SEND: u8 = 3;

impl SentFlag {
    /// A job that waits for its first send, counted in `metrics.waiting`.
    pub fn waiting(metrics: Arc<crate::metrics::Metrics>) -> Self {
        metrics.waiting.fetch_add(1, Ordering::Relaxed);
        SentFlag(Arc::new(Flag {
            state: AtomicU8::new(WAITING),
            counted: AtomicBool::new(true),
            metrics,
            on_wire: AtomicBool::new(false),
            wire: std::sync::OnceLock::new(),
            changed: tokio::sync::Notify::new(),
            attempts: std::sync::atomic::AtomicU32::new(0),
            last_send_ms: std::sync::atomic::AtomicU64::new(0),
        }))
    }

    /// The proxy drains: a job never sent is held back for good (`true`:
    /// its caller is answered now, nothing will be sent); `false` when it
    /// was sent (see [`SentFlag::on_wire`]).
    pub fn hold(&self) -> bool {
        self.0
            .state
            .compare_exchange(WAITING, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Whether a send of this job is on the wire now.
    pub fn on_wire(&self) -> bool {
        self.0.on_wire.load(Ordering::Acquire)
    }

    /// Resolves at the next change worth a look by a draining caller's
    /// handler: a send refused, or an answer that is not a success.
    pub async fn changed(&self) {
        self.0.changed.notified().await
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
        self.off_wire();
    }

    fn on(&self, wire: &Arc<Wire>) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.0.last_send_ms.store(now, Ordering::Release);
        self.0.attempts.fetch_add(1, Ordering::AcqRel);
        let _ = self.0.wire.set(wire.clone());
        if !self.0.on_wire.swap(true, Ordering::AcqRel) {
            wire.on_wire.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn off_wire(&self) {
        if self.0.on_wire.swap(false, Ordering::AcqRel) {
            if let Some(w) = self.0.wire.get() {
                w.on_wire.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// The caller left. Returns `true` when nothing was sent (the job is
    /// to be aborted: no send can start from now on); `false` when a send
    /// was made (the job finishes it, and makes no other).
    pub fn cancel(&self) -> bool {
        match self
            .0
            .state
            .compare_exchange(WAITING, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(_) => {
                self.0.state.store(GONE_AFTER_SEND, Ordering::Release);
                false
            }
        }
    }

    /// A send is about to start: `false` when the caller has left (the
    /// send must not be made).
    fn try_send(&self) -> bool {
        let first =
            self.0
                .state
                .compare_exchange(WAITING, SENT, Ordering::AcqRel, Ordering::Acquire);
        let ok = match first {
            Ok(_) => true,
            Err(SENT) => true,
            Err(_) => false,
        };
        if ok {
            self.uncount();
        }
        ok
    }

    fn uncount(&self) {
        if self.0.counted.swap(false, Ordering::AcqRel) {
            self.0.metrics.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Held by a job's future: when the job ends, however (answered, failed,
/// aborted), it no longer counts as waiting.
pub struct NoLongerWaiting(pub SentFlag);

impl Drop for NoLongerWaiting {
    fn drop(&mut self) {
        self.0.uncount();
    }
}

/// A send refused because its caller left: nothing reached the upstream.
#[derive(Debug)]
pub struct CallerLeft;

impl std::fmt::Display for CallerLeft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the caller left: not sent")
    }
}

impl std::error::Error for CallerLeft {}

/// A send refused because the proxy drains (shutdown): nothing reached
/// the upstream.
#[derive(Debug)]
pub struct Draining;

impl std::fmt::Display for Draining {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the proxy is shutting down: not sent")
    }
}

impl std::error::Error for Draining {}

/// The upstream client, marking each request's [`SentFlag`] as it sends,
/// behind the [`Wire`] gate.
#[derive(Clone)]
pub struct Marking(pub HttpClient, pub Arc<Wire>);

type Answered = Result<
    <HttpClient as Service<http::Request<UpBody>>>::Response,
    Box<dyn std::error::Error + Send + Sync>,
>;

impl Service<http::Request<UpBody>> for Marking {
    type Response = <HttpClient as Service<http::Request<UpBody>>>::Response;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = futures::future::Either<
        futures::future::BoxFuture<'static, Answered>,
        futures::future::Ready<Result<Self::Response, Self::Error>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::poll_ready(&mut self.0, cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<UpBody>) -> Self::Future {
        use futures::FutureExt;
        let flag = req.extensions().get::<SentFlag>().cloned();
        if self.1.is_closed() {
            // The proxy drains: no attempt starts, a retry no more than a
            // first send. Refused as a caller that left is (a connection
            // that never opened: nothing charged, the attempt journaled as
            // ended); the caller's handler, woken, answers it at once.
            if let Some(flag) = &flag {
                flag.off_wire();
                flag.0.changed.notify_one();
            }
            let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, Draining);
            return futures::future::Either::Right(futures::future::ready(Err(refused.into())));
        }
        if let Some(flag) = &flag {
            if !flag.try_send() {
                // Refused before anything was written: the layer reads a
                // connection that never opened, so nothing is charged.
                let refused =
                    std::io::Error::new(std::io::ErrorKind::ConnectionRefused, CallerLeft);
                return futures::future::Either::Right(futures::future::ready(Err(refused.into())));
            }
            flag.on(&self.1);
        }
        let call = Service::call(&mut self.0, req);
        futures::future::Either::Left(
            async move {
                let answered = call.await;
                if let Some(flag) = flag {
                    // An error answer came back: the provider did not take
                    // the request, and what follows is the layer's to
                    // decide (the answer, or a retry the gate refuses while
                    // draining). A success stays on the wire until its job
                    // ends; so does a transport failure, which may have
                    // reached the provider (the layer holds it as unknown,
                    // or retries one that never left, which the gate
                    // refuses).
                    if matches!(&answered, Ok(r) if !r.status().is_success()) {
                        flag.off_wire();
                        flag.0.changed.notify_one();
                    }
                }
                answered.map_err(|e| Box::new(e) as Self::Error)
            }
            .boxed(),
        )
    }
}

/// Picks the upstream of a request: `x-ratewise-upstream` names one, else
/// the longest matching path prefix, else the first.
pub fn choose(ups: &[Upstream], headers: &http::HeaderMap, path: &str) -> Option<usize> {
    if let Some(name) = headers
        .get("x-ratewise-upstream")
        .and_then(|v| v.to_str().ok())
    {
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
