//! Usage settles from the actual counts however the provider frames and
//! encodes the body, when the consumer is a server that stops polling at
//! the body's end (as `examples/proxy.rs` is): a hyper server on loopback
//! proxies through `RetryLayer` to the mock, a client reads the proxy.
//!
//! `Content-Length`, chunked and SSE bodies, each plain and compressed
//! (gzip, br, deflate), must settle to the mock's actual output tokens —
//! not the reservation's estimate (`max_tokens`), which is what a body
//! dropped unread settles at.

mod common;

use bytes::Bytes;
use common::*;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use ratewise_core::admit::Shared;
use ratewise_core::Provider;
use ratewise_mock::encoding::Coding;
use ratewise_mock::{Framing, MockConfig, MockServer};
use ratewise_streaming::CommitPoint;
use ratewise_tower::{Config, MeteredBody, RetryLayer, TokioClock};
use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tower::{Layer, Service, ServiceExt};

/// Far above any output the mock generates (5..=50 tokens).
const MAX_TOKENS: u64 = 1000;
/// Requests per case.
const CALLS: u64 = 3;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The proxy: forwards every request upstream through the layer and hands
/// the metered body to hyper's server as it is.
async fn forward(
    mut svc: Svc,
    upstream: String,
    req: Request<Incoming>,
) -> Result<Response<MeteredBody<Incoming>>, BoxError> {
    let (mut parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    parts.uri = format!("{upstream}{}", parts.uri.path()).parse()?;
    parts.headers.remove(http::header::HOST);
    let req = Request::from_parts(parts, Full::new(body));
    Ok(svc.ready().await?.call(req).await?)
}

/// Starts the proxy on loopback; it stops when the test's runtime ends.
async fn proxy(svc: Svc, upstream: String) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (svc, upstream) = (svc.clone(), upstream.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    forward(svc.clone(), upstream.clone(), req)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    addr
}

struct Case {
    framing: Framing,
    /// `Accept-Encoding` sent (the mock compresses when it is set).
    accept: Option<&'static str>,
    stream: bool,
    commit_point: CommitPoint,
}

impl Case {
    fn json(framing: Framing, accept: Option<&'static str>) -> Self {
        Case {
            framing,
            accept,
            stream: false,
            commit_point: CommitPoint::FirstByte,
        }
    }

    fn sse(accept: Option<&'static str>, commit_point: CommitPoint) -> Self {
        Case {
            framing: Framing::ContentLength,
            accept,
            stream: true,
            commit_point,
        }
    }
}

fn decode(coding: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        None => out.extend_from_slice(body),
        Some("gzip") => {
            flate2::read::GzDecoder::new(body)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some("deflate") => {
            flate2::read::ZlibDecoder::new(body)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some("br") => {
            brotli_decompressor::Decompressor::new(body, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some(other) => panic!("unexpected coding {other}"),
    }
    out
}

/// Runs `CALLS` requests of `case` through the proxy and checks the
/// ledger: every reservation settled, to the mock's actual output.
async fn settles_from_actual_usage(case: Case) {
    let server: MockServer = mock(MockConfig {
        framing: case.framing,
        compression: case.accept.is_some(),
        ..roomy()
    })
    .await;
    let st: Arc<Shared> = state();
    let layer = RetryLayer::builder()
        .config({
            let mut config = Config::default();
            config.policy = fast_policy();
            config.provider = Some(Provider::Anthropic);
            config.commit_point = case.commit_point;
            config
        })
        .store(st.clone())
        .clock(Arc::new(TokioClock::new()))
        .build()
        .unwrap();
    let addr = proxy(layer.layer(client()), server.base_url()).await;
    let caller = client();
    for i in 0..CALLS {
        let mut req = Request::post(format!("http://{addr}/v1/messages"))
            .header("content-type", "application/json")
            .header("x-api-key", "sk-ant-test")
            .body(Full::new(Bytes::from(
                serde_json::to_vec(&serde_json::json!({
                    "model": "claude-sonnet-4-5",
                    "max_tokens": MAX_TOKENS,
                    "stream": case.stream,
                    "messages": [{"role": "user", "content": format!("call {i}")}]
                }))
                .unwrap(),
            )))
            .unwrap();
        if let Some(accept) = case.accept {
            req.headers_mut()
                .insert(http::header::ACCEPT_ENCODING, accept.parse().unwrap());
        }
        let resp = caller.request(req).await.expect("the proxy answers");
        assert_eq!(resp.status(), 200);
        let headers = resp.headers().clone();
        let coding = headers
            .get(http::header::CONTENT_ENCODING)
            .map(|v| v.to_str().unwrap().to_owned());
        let expected = case
            .accept
            .and_then(Coding::negotiate)
            .map(|c| c.as_str().to_owned());
        assert_eq!(coding, expected, "the proxy passes the coding through");
        if !case.stream && case.framing == Framing::ContentLength {
            assert!(headers.contains_key(http::header::CONTENT_LENGTH));
        } else {
            assert_eq!(
                headers
                    .get(http::header::TRANSFER_ENCODING)
                    .map(|v| v.as_bytes()),
                Some(&b"chunked"[..])
            );
        }
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        // The caller gets the provider's bytes untouched (still compressed).
        let plain = decode(coding.as_deref(), &body);
        let record = server.records().last().cloned().unwrap();
        if case.stream {
            let text = String::from_utf8(plain).unwrap();
            assert!(text.contains(&format!("\"output_tokens\":{}", record.output_tokens)));
        } else {
            let v: serde_json::Value = serde_json::from_slice(&plain).unwrap();
            assert_eq!(v["usage"]["output_tokens"], record.output_tokens);
        }
    }
    // The server settled as it wrote the last byte, before the caller
    // could read it: nothing to wait for.
    let records = server.records();
    assert_eq!(records.len() as u64, CALLS, "one send per call");
    let actual: u64 = records.iter().map(|r| r.output_tokens).sum();
    assert!(actual < CALLS * MAX_TOKENS);
    let ledger = st.lock().ledger();
    assert!(
        ledger.is_clean(),
        "every reservation settled, once: {ledger:?}"
    );
    assert_eq!(ledger.settled.requests, CALLS, "each exactly once");
    assert_eq!(ledger.reserved.output, CALLS * MAX_TOKENS);
    assert_eq!(
        ledger.charged.output, actual,
        "the bucket is charged the actual output, not max_tokens"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_content_length_json_body_settles_from_its_usage() {
    settles_from_actual_usage(Case::json(Framing::ContentLength, None)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_json_body_settles_from_its_usage() {
    settles_from_actual_usage(Case::json(Framing::Chunked, None)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_stream_settles_from_its_usage() {
    settles_from_actual_usage(Case::sse(None, CommitPoint::FirstByte)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_json_settles_from_its_usage_either_framing() {
    settles_from_actual_usage(Case::json(Framing::ContentLength, Some("gzip"))).await;
    settles_from_actual_usage(Case::json(Framing::Chunked, Some("gzip"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brotli_json_settles_from_its_usage() {
    settles_from_actual_usage(Case::json(Framing::ContentLength, Some("br"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deflate_json_settles_from_its_usage() {
    settles_from_actual_usage(Case::json(Framing::ContentLength, Some("deflate"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_sse_streams_settle_from_their_usage() {
    settles_from_actual_usage(Case::sse(Some("gzip"), CommitPoint::FirstByte)).await;
    settles_from_actual_usage(Case::sse(Some("br"), CommitPoint::FirstByte)).await;
    settles_from_actual_usage(Case::sse(Some("deflate"), CommitPoint::FirstByte)).await;
    // Held back until the first content event, read from the decoded copy.
    settles_from_actual_usage(Case::sse(Some("gzip"), CommitPoint::FirstContent)).await;
}

#[test]
fn the_metered_body_can_cross_threads() {
    fn send<T: Send + 'static>() {}
    send::<MeteredBody<Incoming>>();
}

/// A compressed error answer is classified from its decoded body: the
/// spend cap's code is in the body only (a 429 without it is a rate limit,
/// retried), so reading the gzip bytes raw would retry a money stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_error_body_is_classified_from_its_code() {
    let mut cfg = MockConfig {
        compression: true,
        ..roomy()
    };
    cfg.spend.cap_usd = Some(0.0);
    let server = mock(cfg).await;
    let mut svc = layer().layer(client());
    let mut req = request(&server, "capped", false);
    req.headers_mut()
        .insert(http::header::ACCEPT_ENCODING, "gzip".parse().unwrap());
    let ended = run(&mut svc, req).await;
    assert_eq!(ended.action, ratewise_core::ActionKind::StopQueue);
    let error = ended.error.unwrap();
    assert_eq!(
        error.classification().unwrap().cause,
        ratewise_core::Cause::SpendCap
    );
    assert_eq!(sends(&server, "capped"), 1, "not retried");
    // The caller gets the answer as it was sent: still compressed.
    assert_eq!(
        error.headers().unwrap().get(http::header::CONTENT_ENCODING),
        Some(&http::HeaderValue::from_static("gzip"))
    );
    let v: serde_json::Value =
        serde_json::from_slice(&decode(Some("gzip"), error.body().unwrap())).unwrap();
    assert_eq!(
        v["error"]["details"]["error_code"],
        "enforced_spend_limit_reached"
    );
    server.shutdown().await;
}
