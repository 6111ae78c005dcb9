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
        }))
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

/// The upstream client, marking each request's [`SentFlag`] as it sends.
#[derive(Clone)]
pub struct Marking(pub HttpClient);

type ClientFuture = <HttpClient as Service<http::Request<UpBody>>>::Future;

impl Service<http::Request<UpBody>> for Marking {
    type Response = <HttpClient as Service<http::Request<UpBody>>>::Response;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = futures::future::Either<
        futures::future::MapErr<ClientFuture, fn(hyper_util::client::legacy::Error) -> Self::Error>,
        futures::future::Ready<Result<Self::Response, Self::Error>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::poll_ready(&mut self.0, cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<UpBody>) -> Self::Future {
        use futures::TryFutureExt;
        if let Some(flag) = req.extensions().get::<SentFlag>() {
            if !flag.try_send() {
                // Refused before anything was written: the layer reads a
                // connection that never opened, so nothing is charged.
                let refused =
                    std::io::Error::new(std::io::ErrorKind::ConnectionRefused, CallerLeft);
                return futures::future::Either::Right(futures::future::ready(Err(refused.into())));
            }
        }
        let boxed: fn(hyper_util::client::legacy::Error) -> Self::Error = |e| Box::new(e);
        futures::future::Either::Left(Service::call(&mut self.0, req).map_err(boxed))
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
