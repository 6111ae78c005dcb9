//! What the store's tests share: a fixed clock, a provider that answers at
//! once, one job through a layer, a plain connection to look into Redis.
#![allow(dead_code)]

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use ratewise_core::{Instant, Now};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::{service_fn, Service, ServiceExt};

/// `ms` milliseconds after 2026-12-01T12:00:00Z, on both clocks.
pub fn at(ms: u64) -> Now {
    let wall0 = ratewise_core::time::parse_rfc3339("2026-12-01T12:00:00Z").unwrap();
    Now::new(Instant::from_millis(ms), wall0 + Duration::from_millis(ms))
}

/// An Anthropic-shaped provider that answers every request with a success
/// after `delay`, counting them in `calls`.
pub fn provider(
    calls: Arc<AtomicU32>,
    delay: Duration,
) -> impl Service<
    Request<Full<Bytes>>,
    Response = Response<Full<Bytes>>,
    Error = std::io::Error,
    Future = impl Send,
> + Clone
       + Send {
    service_fn(move |_req: Request<Full<Bytes>>| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(delay).await;
            Ok::<_, std::io::Error>(
                Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(
                        br#"{"type":"message","content":[],"usage":{"input_tokens":30,"output_tokens":9}}"#,
                    )))
                    .unwrap(),
            )
        }
    })
}

/// One job through `svc`, on the key `label` (the layer's default when
/// `None`): it must succeed, its body read to the end.
pub async fn job<S, B>(svc: S, label: Option<&str>)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let mut req = Request::post("http://provider.invalid/v1/messages");
    if let Some(l) = label {
        req = req.extension(ratewise_tower::KeyLabel(l.into()));
    }
    let req = req
        .body(Full::new(Bytes::from_static(
            br#"{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[]}"#,
        )))
        .unwrap();
    let resp = svc.oneshot(req).await.expect("the job succeeds");
    assert_eq!(resp.status(), 200);
    http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap();
}

/// A plain connection, to look into Redis.
pub async fn conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}
