//! A cold start into unknown limits through the layer: sixteen calls at
//! once send one request, learn the limits from its answer's headers, and
//! only then pace the rest — none of them goes out blind.

mod common;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use ratewise_core::Provider;
use ratewise_tower::{Config, RetryLayer, TokioClock};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::{service_fn, Layer, ServiceExt};

#[derive(Default)]
struct Provider16 {
    sends: AtomicU32,
    /// Sends that started before the first answer was back.
    before_first_answer: AtomicU32,
    answered: AtomicBool,
}

#[tokio::test(start_paused = true)]
async fn sixteen_calls_into_unknown_limits_send_one_first() {
    let seen = Arc::new(Provider16::default());
    let p = seen.clone();
    let inner = service_fn(move |_req: Request<Full<Bytes>>| {
        let p = p.clone();
        async move {
            p.sends.fetch_add(1, Ordering::SeqCst);
            if !p.answered.load(Ordering::SeqCst) {
                p.before_first_answer.fetch_add(1, Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            let resp = Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .header("anthropic-ratelimit-requests-limit", "6000")
                .header("anthropic-ratelimit-requests-remaining", "999")
                .body(Full::new(Bytes::from_static(
                    br#"{"type":"message","content":[],"usage":{"input_tokens":3,"output_tokens":4}}"#,
                )))
                .unwrap();
            p.answered.store(true, Ordering::SeqCst);
            Ok::<_, std::io::Error>(resp)
        }
    });
    let layer = RetryLayer::builder()
        .config({
            let mut config = Config::default();
            config.policy = common::fast_policy();
            config.provider = Some(Provider::Anthropic);
            config.seed = Some(1);
            config
        })
        .store(common::state())
        .clock(Arc::new(TokioClock::new()))
        .build()
        .unwrap();
    let svc = layer.layer(inner);
    let calls = (0..16).map(|_| {
        let svc = svc.clone();
        async move {
            let req = Request::post("http://provider.invalid/v1/messages")
                .body(Full::new(Bytes::from_static(
                    br#"{"model":"claude-sonnet-4-5","max_tokens":100}"#,
                )))
                .unwrap();
            let resp = svc.oneshot(req).await.expect("done");
            resp.into_body().collect().await.expect("body").to_bytes()
        }
    });
    let bodies = futures::future::join_all(calls).await;
    assert_eq!(bodies.len(), 16);
    assert_eq!(
        seen.sends.load(Ordering::SeqCst),
        16,
        "every call sent once"
    );
    assert_eq!(
        seen.before_first_answer.load(Ordering::SeqCst),
        1,
        "requests went out before the probe's answer"
    );
}
