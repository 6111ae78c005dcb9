//! The consumer users run in front of the layer is often axum (as in
//! `examples/proxy.rs`): it stops polling a body once the body says it has
//! ended. `Content-Length`, chunked, SSE and gzip bodies passed through an
//! axum handler must still settle from their actual usage, not from the
//! reservation's estimate.

mod common;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use ratewise_core::admit::Shared;
use ratewise_core::Provider;
use ratewise_mock::{Framing, MockConfig};
use ratewise_tower::{Config, RetryLayer, TokioClock};
use std::sync::Arc;
use tower::{Layer, Service, ServiceExt};

const MAX_TOKENS: u64 = 1000;

#[derive(Clone)]
struct Upstream {
    svc: Svc,
    base: String,
}

async fn forward(State(up): State<Upstream>, req: Request) -> Response {
    let (mut parts, body) = req.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    parts.uri = format!("{}{}", up.base, parts.uri.path()).parse().unwrap();
    parts.headers.remove(http::header::HOST);
    let mut svc = up.svc.clone();
    let resp = svc
        .ready()
        .await
        .unwrap()
        .call(http::Request::from_parts(parts, Full::new(body)))
        .await
        .expect("the layer answers");
    resp.map(Body::new)
}

async fn settles_through_axum(framing: Framing, stream: bool, accept: Option<&str>) {
    let server = mock(MockConfig {
        framing,
        compression: accept.is_some(),
        ..roomy()
    })
    .await;
    let st: Arc<Shared> = state();
    let layer = RetryLayer::builder()
        .config({
            let mut config = Config::default();
            config.policy = fast_policy();
            config.provider = Some(Provider::Anthropic);
            config
        })
        .store(st.clone())
        .clock(Arc::new(TokioClock::new()))
        .build()
        .unwrap();
    let app = Router::new().fallback(forward).with_state(Upstream {
        svc: layer.layer(client()),
        base: server.base_url(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let caller = client();
    for i in 0..3 {
        let mut req = http::Request::post(format!("http://{addr}/v1/messages"))
            .header("content-type", "application/json")
            .header("x-api-key", "sk-ant-test")
            .body(Full::new(Bytes::from(
                serde_json::to_vec(&serde_json::json!({
                    "model": "claude-sonnet-4-5",
                    "max_tokens": MAX_TOKENS,
                    "stream": stream,
                    "messages": [{"role": "user", "content": format!("axum call {i}")}]
                }))
                .unwrap(),
            )))
            .unwrap();
        if let Some(a) = accept {
            req.headers_mut()
                .insert(http::header::ACCEPT_ENCODING, a.parse().unwrap());
        }
        let resp = caller.request(req).await.expect("axum answers");
        assert_eq!(resp.status(), 200);
        resp.into_body().collect().await.unwrap();
    }
    // Settles happen as the last byte passes; give the server task a beat.
    for _ in 0..100 {
        if st.ledger().outstanding.requests == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let l = st.ledger();
    assert!(l.is_clean(), "{l:?}");
    let actual: u64 = server.records().iter().map(|r| r.output_tokens).sum();
    assert!(actual < 3 * MAX_TOKENS);
    assert_eq!(
        l.charged.output, actual,
        "settled from usage, not max_tokens"
    );
}

#[tokio::test]
async fn a_content_length_body_settles_through_axum() {
    settles_through_axum(Framing::ContentLength, false, None).await;
}

#[tokio::test]
async fn a_chunked_body_settles_through_axum() {
    settles_through_axum(Framing::Chunked, false, None).await;
}

#[tokio::test]
async fn a_stream_settles_through_axum() {
    settles_through_axum(Framing::ContentLength, true, None).await;
}

#[tokio::test]
async fn a_gzip_body_settles_through_axum() {
    settles_through_axum(Framing::ContentLength, false, Some("gzip")).await;
}
