//! An error answer's reservation is given back only after its evidence (a
//! 429's pause) is in the shared state: a waiter woken by the give-back on
//! another thread must not find the scope unpaused and send into the 429
//! the answer just reported.

mod common;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use ratewise_core::admit::{
    Admission, AdmitRequest, Applied, ScopeId, ScopeSnapshot, Shared, Store, StoreFuture, Target,
    Update,
};
use ratewise_core::{Now, Provider};
use ratewise_tower::{Config, RetryLayer, TokioClock};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tower::{service_fn, Layer, ServiceExt};

/// The in-memory state, slow to apply an answer: widens the window in
/// which a give-back before the answer's evidence would let a waiter
/// through (the update is one step, so there is none). The delay is an
/// await before the update is applied, not a blocked worker thread: the
/// runtime keeps running the waiter meanwhile.
struct SlowObserve(Arc<Shared>);

impl Store for SlowObserve {
    fn target<'a>(&'a self, key: &'a str, model: &'a str) -> StoreFuture<'a, Target> {
        Store::target(&*self.0, key, model)
    }
    fn resume<'a>(&'a self, key: &'a str, now: Now) -> StoreFuture<'a, ()> {
        Store::resume(&*self.0, key, now)
    }
    fn snapshot(&self, scope: ScopeId, now: Now) -> StoreFuture<'_, Option<ScopeSnapshot>> {
        Store::snapshot(&*self.0, scope, now)
    }
    fn admit(&self, req: AdmitRequest, now: Now) -> StoreFuture<'_, Admission> {
        Store::admit(&*self.0, req, now)
    }
    fn update(&self, update: Update, now: Now) -> StoreFuture<'_, Option<Applied>> {
        StoreFuture::new(async move {
            if update.observed.is_some() {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Store::update(&*self.0, update, now).await
        })
    }
    fn update_detached(&self, update: Update, now: Now) {
        self.0.update_detached(update, now)
    }
}

const RATE_LIMITED: &str = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
const OK: &str = r#"{"type":"message","content":[],"usage":{"input_tokens":3,"output_tokens":4}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_woken_by_a_429s_give_back_waits_out_its_pause() {
    let sends: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let answered_429: Arc<Mutex<Option<Instant>>> = Arc::default();
    let probe_sent = Arc::new(tokio::sync::Notify::new());
    let (s, a, p) = (sends.clone(), answered_429.clone(), probe_sent.clone());
    let inner = service_fn(move |_req: Request<Full<Bytes>>| {
        let (s, a, p) = (s.clone(), a.clone(), p.clone());
        async move {
            let first = {
                let mut s = s.lock().unwrap();
                s.push(Instant::now());
                s.len() == 1
            };
            let resp = if first {
                *a.lock().unwrap() = Some(Instant::now());
                p.notify_one();
                Response::builder()
                    .status(429)
                    .header("retry-after", "2")
                    .header("anthropic-ratelimit-requests-limit", "6000")
                    .header("anthropic-ratelimit-requests-remaining", "0")
                    .body(Full::new(Bytes::from_static(RATE_LIMITED.as_bytes())))
            } else {
                Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(OK.as_bytes())))
            };
            Ok::<_, std::io::Error>(resp.unwrap())
        }
    });
    let layer = RetryLayer::builder()
        .config({
            let mut config = Config::default();
            config.policy = common::fast_policy();
            config.provider = Some(Provider::Anthropic);
            config.seed = Some(5);
            config
        })
        .store(Arc::new(SlowObserve(common::state())))
        .clock(Arc::new(TokioClock::new()))
        .build()
        .unwrap();
    let svc = layer.layer(inner);
    let call = |svc: ratewise_tower::RetryService<_>| async move {
        let req = Request::post("http://provider.invalid/v1/messages")
            .body(Full::new(Bytes::from_static(
                br#"{"model":"claude-sonnet-4-5","max_tokens":100}"#,
            )))
            .unwrap();
        let resp = svc.oneshot(req).await.expect("done after the pause");
        resp.into_body().collect().await.expect("body");
    };
    // The first call is the probe (no limits known); the second comes
    // once the probe is answered, while its update is being applied,
    // waits for it, and is woken when the 429's reservation is given back.
    let first = tokio::spawn(call(svc.clone()));
    probe_sent.notified().await;
    let second = tokio::spawn(call(svc.clone()));
    first.await.unwrap();
    second.await.unwrap();
    let t429 = answered_429.lock().unwrap().expect("a 429 was answered");
    let sends = sends.lock().unwrap();
    assert_eq!(
        sends.len(),
        3,
        "the 429'd call retried once, the other sent once"
    );
    for at in &sends[1..] {
        let after = at.duration_since(t429);
        assert!(
            after >= Duration::from_millis(1900),
            "a send went out {after:?} after the 429 that paused the key for 2 s"
        );
    }
}
