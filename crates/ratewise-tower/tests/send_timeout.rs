//! Deadlines gate admission and bound waits; they never cut a send in
//! flight. Only the policy's `send_timeout` does, and a send cut that way
//! is an unknown outcome: held for its caller, charged at its estimate.

mod common;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use ratewise_core::decide::Policy;
use ratewise_core::Provider;
use ratewise_tower::{Config, RetryLayer, TokioClock};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tower::{service_fn, Layer, ServiceExt};

const OK: &str = r#"{"type":"message","content":[],"usage":{"input_tokens":3,"output_tokens":4}}"#;

/// A provider that answers every send after `latency`.
fn slow(
    latency: Duration,
    calls: Arc<AtomicU32>,
) -> impl tower::Service<
    Request<Full<Bytes>>,
    Response = Response<Full<Bytes>>,
    Error = std::io::Error,
    Future = impl Send,
> + Clone {
    service_fn(move |_req: Request<Full<Bytes>>| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(latency).await;
            Ok(Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from_static(OK.as_bytes())))
                .unwrap())
        }
    })
}

fn layer(policy: Policy) -> (RetryLayer, Arc<ratewise_core::admit::Shared>) {
    let state = common::state();
    let mut config = Config::default();
    config.policy = policy;
    config.provider = Some(Provider::Anthropic);
    config.seed = Some(2);
    (
        RetryLayer::builder()
            .config(config)
            .store(state.clone())
            .clock(Arc::new(TokioClock::new()))
            .build()
            .unwrap(),
        state,
    )
}

#[tokio::test(start_paused = true)]
async fn a_deadline_never_cuts_a_send_in_flight() {
    let calls = Arc::new(AtomicU32::new(0));
    let (layer, state) = layer({
        let mut policy = Policy::default();
        policy.default_deadline = Some(Duration::from_secs(2));
        policy
    });
    let svc = layer.layer(slow(Duration::from_secs(5), calls.clone()));
    let t0 = Instant::now();
    let resp = svc
        .oneshot(common::request_to("http://provider.invalid", "late", false))
        .await
        .expect("the answer comes, late, and is the caller's");
    assert_eq!(t0.elapsed(), Duration::from_secs(5));
    resp.into_body().collect().await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let l = state.ledger();
    assert!(l.is_clean(), "{l:?}");
    assert_eq!(l.charged.output, 4, "settled from the usage");
}

#[tokio::test(start_paused = true)]
async fn a_send_timeout_makes_a_late_answer_an_unknown_outcome_charged_at_its_estimate() {
    let calls = Arc::new(AtomicU32::new(0));
    let (layer, state) = layer({
        let mut policy = Policy::default();
        policy.send_timeout = Some(Duration::from_secs(1));
        policy
    });
    let svc = layer.layer(slow(Duration::from_secs(5), calls.clone()));
    let t0 = Instant::now();
    let err = svc
        .oneshot(common::request_to("http://provider.invalid", "cut", false))
        .await
        .expect_err("cut at the send timeout");
    assert_eq!(t0.elapsed(), Duration::from_secs(1));
    assert!(err.is_hold_unknown(), "{err:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "never resent blindly");
    let l = state.ledger();
    assert!(l.is_clean(), "charged at once, not held: {l:?}");
    assert_eq!(l.settled.requests, 1, "{l:?}");
    assert!(l.charged.output > 4, "the estimate, not a usage: {l:?}");
}

#[tokio::test(start_paused = true)]
async fn a_send_within_its_timeout_is_untouched() {
    let calls = Arc::new(AtomicU32::new(0));
    let (layer, _state) = layer({
        let mut policy = Policy::default();
        policy.send_timeout = Some(Duration::from_secs(10));
        policy
    });
    let svc = layer.layer(slow(Duration::from_secs(5), calls));
    let resp = svc
        .oneshot(common::request_to("http://provider.invalid", "ok", false))
        .await
        .expect("in time");
    assert_eq!(resp.status(), 200);
}
