//! The layer inside an axum reverse proxy, in a page: how `ratewise proxy`
//! (the `ratewise-proxy` crate: config, fingerprints, answers in the
//! provider's shape, admin, journal, HTTPS) is built. For a gateway to run,
//! use `ratewise proxy --upstream URL`. Point any
//! language's SDK at it (`base_url = "http://127.0.0.1:PORT"`) with the
//! SDK's own retries off (`max_retries=0` in the Anthropic and OpenAI
//! SDKs): the proxy is the one retry owner.
//!
//! ```text
//! cargo run --example proxy --features tower            # demo, then exit
//! cargo run --example proxy --features tower -- --serve # keep serving
//! ```
//!
//! Upstream is the in-process mock provider (set `RATEWISE_UPSTREAM` to
//! forward elsewhere: then no demo request is sent, and `--serve` only
//! serves); `RATEWISE_LISTEN` sets the address (default `127.0.0.1:0`). Errors come back as the provider's last answer with
//! `x-ratewise-action` and `x-should-retry: false` added; calls that ended
//! without an answer (stopped, deferred, held unknown) get a 503 in the
//! provider's error shape.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use http::{HeaderValue, StatusCode, Uri};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise::tower::{Config, Error, RetryLayer, RetryService};
use ratewise_mock::{Fault, FaultRule, MockConfig, MockServer};
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};

type Upstream = RetryService<Client<HttpConnector, UnsyncBoxBody<Bytes, axum::Error>>>;

#[derive(Clone)]
struct Gateway {
    upstream: String,
    service: Upstream,
}

async fn forward(State(gw): State<Gateway>, req: Request) -> Response {
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = match format!("{}{path}", gw.upstream).parse::<Uri>() {
        Ok(uri) => uri,
        Err(_) => return plain(StatusCode::BAD_REQUEST, "bad path"),
    };
    parts.headers.remove(http::header::HOST);
    // Stops and buckets are per key: with no `KeyLabel` the layer paces
    // each caller under its credentials' SHA-256 fingerprint
    // (`KeyLabel::from_credentials`); the key never leaves the request.
    let req = http::Request::from_parts(parts, body.boxed_unsync());
    let mut svc = gw.service.clone();
    let result = match svc.ready().await {
        Ok(s) => s.call(req).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(resp) => resp.map(Body::new),
        Err(e) => error_response(&e),
    }
}

/// The provider's last answer when there was one, else a 503 in the
/// provider's error shape; either way the SDK is told not to retry.
fn error_response(e: &Error) -> Response {
    let action = e.action().map_or("error", |a| a.as_str());
    let mut resp = match (e.status(), e.headers(), e.body()) {
        (Some(status), Some(headers), Some(body)) => {
            let mut r = Response::new(Body::from(body.clone()));
            *r.status_mut() = status;
            *r.headers_mut() = headers.clone();
            // The body may have been cut at the layer's bound.
            r.headers_mut().remove(http::header::CONTENT_LENGTH);
            r.headers_mut().remove(http::header::TRANSFER_ENCODING);
            r
        }
        _ => {
            let body = serde_json::json!({"type": "error", "error": {
                "type": format!("ratewise_{action}"), "message": e.to_string()}});
            let mut r = Response::new(Body::from(body.to_string()));
            *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }
    };
    let h = resp.headers_mut();
    h.insert("x-should-retry", HeaderValue::from_static("false"));
    if let Ok(v) = HeaderValue::from_str(action) {
        h.insert("x-ratewise-action", v);
    }
    resp
}

fn plain(status: StatusCode, text: &'static str) -> Response {
    let mut r = Response::new(Body::from(text));
    *r.status_mut() = status;
    r
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let serve = std::env::args().any(|a| a == "--serve");
    // The upstream: a real base URL, or the mock (its first request overloaded).
    let mut _mock = None;
    let upstream = match std::env::var("RATEWISE_UPSTREAM") {
        Ok(u) => u.trim_end_matches('/').to_owned(),
        Err(_) => {
            let mut cfg = MockConfig {
                faults: vec![FaultRule::nth(Fault::Overloaded, [1])],
                ..MockConfig::default()
            };
            cfg.anthropic_limits.requests_per_minute = Some(10_000);
            cfg.anthropic_limits.input_tokens_per_minute = Some(10_000_000);
            cfg.anthropic_limits.output_tokens_per_minute = Some(10_000_000);
            let server = MockServer::start(cfg).await?;
            let url = server.base_url();
            _mock = Some(server);
            url
        }
    };

    let client = Client::builder(TokioExecutor::new()).build_http();
    let mut config = Config::default();
    config.policy.default_deadline = Some(Duration::from_secs(120));
    let layer = RetryLayer::builder().config(config).build()?;
    let gateway = Gateway {
        upstream,
        service: layer.layer(client),
    };
    let app = Router::new().fallback(forward).with_state(gateway);
    let listen = std::env::var("RATEWISE_LISTEN").unwrap_or_else(|_| "127.0.0.1:0".to_owned());
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    println!("ratewise gateway on http://{addr} (base_url for any SDK, retries off)");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    // Nothing is sent to a real upstream at start.
    if serve && _mock.is_none() {
        server.await??;
        return Ok(());
    }
    // A demo call, as an SDK would make it: one overload upstream is
    // retried by the gateway; the caller sees one clean answer.
    let demo = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let body = br#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
    let req = http::Request::post(format!("http://{addr}/v1/messages"))
        .header("content-type", "application/json")
        .header("x-api-key", "sk-ant-demo")
        .body(Full::new(Bytes::from_static(body)))?;
    let resp = demo.request(req).await?;
    let status = resp.status();
    let text = resp.into_body().collect().await?.to_bytes();
    println!("demo call: {status} {}", String::from_utf8_lossy(&text));
    if let Some(m) = &_mock {
        println!(
            "sends upstream: {} (one overloaded, one retried by the gateway)",
            m.records().len()
        );
    }
    if serve {
        server.await??;
    }
    Ok(())
}
