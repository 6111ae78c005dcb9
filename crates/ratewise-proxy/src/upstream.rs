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
/// it is on the wire, and its last send (what an unknown outcome is
/// journaled with). It observes and decides nothing: whether a job sends
/// again is the job machine's, told through the job's
/// [`Cancel`](ratewise_tower::Cancel).
#[derive(Debug, Clone)]
pub struct WireWatch(Arc<Watched>);

#[derive(Debug)]
struct Watched {
    /// Whether it still counts as waiting.
    counted: AtomicBool,
    metrics: Arc<crate::metrics::Metrics>,
    /// Its send is on the wire (counted in [`Wire::on_wire`]): from the
    /// moment it is handed to the client until an error answer comes back
    /// (the layer then decides on it), or the job ends.
    on_wire: AtomicBool,
    /// The count it was added to, once sent.
    wire: std::sync::OnceLock<Arc<Wire>>,
    /// Woken when its send comes back with an answer that is not a
    /// success (a draining handler looks again).
    changed: tokio::sync::Notify,
    /// Sends handed to the client (its last attempt's number) and when
    /// the last one started (Unix milliseconds).
    attempts: std::sync::atomic::AtomicU32,
    last_send_ms: std::sync::atomic::AtomicU64,
}

impl Drop for Watched {
    fn drop(&mut self) {
        if self.on_wire.swap(false, Ordering::AcqRel) {
            if let Some(w) = self.wire.get() {
                w.on_wire.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// The count of sends on the wire, which the shutdown waits for.
#[derive(Debug, Default)]
pub struct Wire {
    on_wire: std::sync::atomic::AtomicUsize,
}

impl Wire {
    /// Sends on the wire now (jobs whose answer has not come back, and
    /// successes whose job has not ended).
    pub fn on_wire(&self) -> usize {
        self.on_wire.load(Ordering::Acquire)
    }
}

impl WireWatch {
    /// A job that waits for its first send, counted in `metrics.waiting`.
    pub fn waiting(metrics: Arc<crate::metrics::Metrics>) -> Self {
        metrics.waiting.fetch_add(1, Ordering::Relaxed);
        WireWatch(Arc::new(Watched {
            counted: AtomicBool::new(true),
            metrics,
            on_wire: AtomicBool::new(false),
            wire: std::sync::OnceLock::new(),
            changed: tokio::sync::Notify::new(),
            attempts: std::sync::atomic::AtomicU32::new(0),
            last_send_ms: std::sync::atomic::AtomicU64::new(0),
        }))
    }

    /// Whether a send of this job is on the wire now.
    pub fn on_wire(&self) -> bool {
        self.0.on_wire.load(Ordering::Acquire)
    }

    /// Resolves at the next change worth a look by a draining caller's
    /// handler: an answer that is not a success.
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
        self.uncount();
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

/// The upstream client, telling each request's [`WireWatch`] what goes on
/// the wire and what comes back. Every send it is given is made: the layer
/// hands a send over only when the job's cancellation allows it.
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
        let watch = req.extensions().get::<WireWatch>().cloned();
        if let Some(watch) = &watch {
            watch.on(&self.1);
        }
        let call = Service::call(&mut self.0, req);
        async move {
            let answered = call.await;
            if let Some(watch) = watch {
                // An error answer came back: the provider did not take
                // the request, and what follows is the layer's to decide.
                // A success stays on the wire until its job ends; so does
                // a transport failure, which may have reached the
                // provider.
                if matches!(&answered, Ok(r) if !r.status().is_success()) {
                    watch.off_wire();
                    watch.0.changed.notify_one();
                }
            }
            answered.map_err(|e| Box::new(e) as Self::Error)
        }
        .boxed()
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
