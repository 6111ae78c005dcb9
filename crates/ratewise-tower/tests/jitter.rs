//! Jitter is meant to spread a fleet: two layers built with the default
//! configuration draw different delays for the same answer, and a fixed
//! seed repeats exactly.

mod common;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use ratewise_core::decide::{Backoff, Policy};
use ratewise_core::Provider;
use ratewise_tower::{Config, RetryLayer, TokioClock};
use std::sync::Arc;
use std::time::Duration;
use tower::{service_fn, Layer, ServiceExt};

const OVERLOADED: &str =
    r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;

/// The delays the layer decided after three 529s in a row, with `seed`.
async fn delays_ms(seed: Option<u64>) -> Vec<u64> {
    let layer = RetryLayer::builder()
        .config({
            let mut config = Config::default();
            config.policy = {
                let mut policy = Policy::default();
                policy.max_attempts = 4;
                // Full jitter over seconds, in milliseconds, three times:
                // two independent sequences tie once in billions.
                policy.backoff = {
                    let mut backoff = Backoff::default();
                    backoff.transient_base = Duration::from_secs(5);
                    backoff.throttle_base = Duration::from_secs(5);
                    backoff.cap = Duration::from_secs(20);
                    backoff
                };
                policy.default_deadline = None;
                policy
            };
            config.provider = Some(Provider::Anthropic);
            config.seed = seed;
            config
        })
        .store(common::state())
        .clock(Arc::new(TokioClock::new()))
        .build()
        .unwrap();
    let inner = service_fn(|_req: Request<Full<Bytes>>| async {
        Ok::<_, std::io::Error>(
            Response::builder()
                .status(529)
                .body(Full::new(Bytes::from_static(OVERLOADED.as_bytes())))
                .unwrap(),
        )
    });
    let req = Request::post("http://provider.invalid/v1/messages")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"m","max_tokens":100}"#,
        )))
        .unwrap();
    let err = layer
        .layer(inner)
        .oneshot(req)
        .await
        .expect_err("529 four times gives up");
    let delays: Vec<u64> = err.attempts().iter().filter_map(|a| a.delay_ms).collect();
    assert_eq!(delays.len(), 3, "{:#?}", err.attempts());
    delays
}

#[tokio::test(start_paused = true)]
async fn two_default_layers_draw_different_jitter() {
    let a = delays_ms(None).await;
    let b = delays_ms(None).await;
    assert_ne!(a, b, "two layers drew the same jitter: {a:?} ms");
}

#[tokio::test(start_paused = true)]
async fn a_fixed_seed_repeats() {
    assert_eq!(delays_ms(Some(9)).await, delays_ms(Some(9)).await);
}
