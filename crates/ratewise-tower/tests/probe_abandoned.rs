//! A cold key sends one probe into limits it does not know. When the
//! probe's caller leaves before its answer (a client timeout), the probe
//! taught nothing: the next request becomes the probe, and nothing else
//! goes out into the unknown limits until an answer says what they are.

mod common;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use ratewise_core::Provider;
use ratewise_tower::RetryLayer;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::{service_fn, Layer, ServiceExt};

const OK: &str = r#"{"type":"message","content":[],"usage":{"input_tokens":10,"output_tokens":5}}"#;

#[tokio::test(start_paused = true)]
async fn a_probe_whose_caller_timed_out_is_followed_by_one_probe_not_a_burst() {
    let start = tokio::time::Instant::now();
    let sends: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let s = sends.clone();
    // The provider answers 800 ms after each send, with its limits.
    let provider = service_fn(move |_req: Request<Full<Bytes>>| {
        s.lock().unwrap().push(start.elapsed());
        async move {
            tokio::time::sleep(Duration::from_millis(800)).await;
            Ok::<_, std::io::Error>(
                Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .header("anthropic-ratelimit-requests-limit", "1000")
                    .header("anthropic-ratelimit-requests-remaining", "999")
                    .body(Full::new(Bytes::from_static(OK.as_bytes())))
                    .unwrap(),
            )
        }
    });
    let svc = RetryLayer::builder()
        .provider(Provider::Anthropic)
        .policy(common::fast_policy())
        .seed(4)
        .build()
        .unwrap()
        .layer(provider);
    // The probe's caller gives up after 200 ms, with its request sent.
    let probe = svc
        .clone()
        .oneshot(common::request_to("http://p.invalid", "probe", false));
    assert!(tokio::time::timeout(Duration::from_millis(200), probe)
        .await
        .is_err());
    // Six more arrive on the still unknown key.
    let mut tasks = Vec::new();
    for i in 0..6 {
        let svc = svc.clone();
        tasks.push(tokio::spawn(async move {
            let req = common::request_to("http://p.invalid", &format!("j{i}"), false);
            let resp = svc.oneshot(req).await.expect("done");
            resp.into_body().collect().await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let sends = sends.lock().unwrap().clone();
    assert_eq!(sends.len(), 7, "{sends:?}");
    // After the abandoned probe, one new probe goes; the other five wait
    // for its answer, 800 ms later.
    let next = sends[1];
    let during: Vec<_> = sends[2..]
        .iter()
        .filter(|t| **t < next + Duration::from_millis(800))
        .collect();
    assert!(during.is_empty(), "sent into unknown limits: {sends:?}");
}
