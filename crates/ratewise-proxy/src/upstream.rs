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

/// Set when a job's request is handed to the upstream client: from then on
/// a caller that goes away does not cancel the job (its usage must settle).
/// Until then the job counts as waiting (`Metrics::waiting`).
#[derive(Debug, Clone)]
pub struct SentFlag(Arc<Flag>);

#[derive(Debug)]
struct Flag {
    sent: AtomicBool,
    /// Whether it still counts as waiting.
    counted: AtomicBool,
    metrics: Arc<crate::metrics::Metrics>,
}

impl SentFlag {
    /// A job that waits for its first send, counted in `metrics.waiting`.
    pub fn waiting(metrics: Arc<crate::metrics::Metrics>) -> Self {
        metrics.waiting.fetch_add(1, Ordering::Relaxed);
        SentFlag(Arc::new(Flag {
            sent: AtomicBool::new(false),
            counted: AtomicBool::new(true),
            metrics,
        }))
    }

    /// Whether the request was handed to the client.
    pub fn is_set(&self) -> bool {
        self.0.sent.load(Ordering::Acquire)
    }

    fn mark(&self) {
        self.0.sent.store(true, Ordering::Release);
        self.uncount();
    }

    fn uncount(&self) {
        if self.0.counted.swap(false, Ordering::AcqRel) {
            self.0.metrics.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Held by a job's task: when the job ends, however (answered, failed,
/// aborted), it no longer counts as waiting.
pub struct NoLongerWaiting(pub SentFlag);

impl Drop for NoLongerWaiting {
    fn drop(&mut self) {
        self.0.uncount();
    }
}

/// The upstream client, marking each request's [`SentFlag`] as it sends.
#[derive(Clone)]
pub struct Marking(pub HttpClient);

impl Service<http::Request<UpBody>> for Marking {
    type Response = <HttpClient as Service<http::Request<UpBody>>>::Response;
    type Error = <HttpClient as Service<http::Request<UpBody>>>::Error;
    type Future = <HttpClient as Service<http::Request<UpBody>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::poll_ready(&mut self.0, cx)
    }

    fn call(&mut self, req: http::Request<UpBody>) -> Self::Future {
        if let Some(flag) = req.extensions().get::<SentFlag>() {
            flag.mark();
        }
        Service::call(&mut self.0, req)
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
