//! One configuration a user can reach: limits per key, keys grouped under
//! one organisation's limits, through the layer's builder.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use ratewise_core::admit::Limits;
use ratewise_core::{ActionKind, Instant, Now, Provider};
use ratewise_tower::{KeyLabel, RetryLayer};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::SystemTime;
use tower::{service_fn, Layer, ServiceExt};

fn rpm(n: u64) -> Limits {
    Limits {
        requests: Some(n),
        ..Limits::NONE
    }
}

const SPEND_CAP: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on 2099-01-01 at 00:00 UTC."}}"#;
const OK: &str = r#"{"type":"message","content":[],"usage":{"input_tokens":3,"output_tokens":4}}"#;

fn req(key: &str) -> Request<Full<Bytes>> {
    let mut r = Request::post("http://provider.invalid/v1/messages")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"claude-sonnet-4-5","max_tokens":100}"#,
        )))
        .unwrap();
    r.extensions_mut().insert(KeyLabel::new(key));
    r
}

#[tokio::test]
async fn two_keys_get_their_own_limits() {
    let layer = RetryLayer::builder()
        .provider(Provider::Anthropic)
        .key_limits("tier1", rpm(50))
        .key_limits("tier4", rpm(4000))
        .seed(1)
        .build_with_clock(Arc::new(ratewise_tower::TokioClock::new()));
    let state = layer.state();
    let now = Now::new(Instant::ZERO, SystemTime::UNIX_EPOCH);
    let limit = |key: &'static str| {
        let state = state.clone();
        async move {
            let t = state.target(key, "claude-sonnet-4-5").await;
            state.snapshot(t.scope, now).await.unwrap().limits.requests
        }
    };
    assert_eq!(limit("tier1").await, Some(50));
    assert_eq!(limit("tier4").await, Some(4000));
    assert_eq!(
        limit("unconfigured").await,
        None,
        "learned from headers instead"
    );
}

#[tokio::test(start_paused = true)]
async fn a_spend_cap_seen_through_one_key_of_a_group_stops_the_other() {
    let sends = Arc::new(AtomicU32::new(0));
    let s = sends.clone();
    let inner = service_fn(move |r: Request<Full<Bytes>>| {
        let s = s.clone();
        async move {
            s.fetch_add(1, Ordering::SeqCst);
            let capped = r
                .headers()
                .get("x-test-key")
                .is_some_and(|v| v == "acme-batch");
            let (status, body) = if capped { (400, SPEND_CAP) } else { (200, OK) };
            Ok::<_, std::io::Error>(
                Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(body.as_bytes())))
                    .unwrap(),
            )
        }
    });
    let layer = RetryLayer::builder()
        .provider(Provider::Anthropic)
        .key_group("acme", ["acme-batch", "acme-web"])
        .key_limits("acme", rpm(600))
        .seed(2)
        .build();
    let svc = layer.layer(inner);
    let mut batch = req("acme-batch");
    batch
        .headers_mut()
        .insert("x-test-key", "acme-batch".parse().unwrap());
    let err = svc.clone().oneshot(batch).await.expect_err("the cap stops");
    assert_eq!(err.action(), Some(ActionKind::StopQueue));
    assert_eq!(sends.load(Ordering::SeqCst), 1);
    // The other key of the organisation is stopped too: nothing is sent.
    let err = svc
        .clone()
        .oneshot(req("acme-web"))
        .await
        .expect_err("stopped");
    assert_eq!(err.action(), Some(ActionKind::StopQueue));
    assert_eq!(sends.load(Ordering::SeqCst), 1, "no send after the cap");
    // A key outside the group is not.
    let ok = svc.oneshot(req("other")).await.expect("sent");
    ok.into_body().collect().await.unwrap();
    assert_eq!(sends.load(Ordering::SeqCst), 2);
}
