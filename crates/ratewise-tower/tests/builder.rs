//! One configuration a user can reach: limits per key, keys grouped under
//! one organisation's limits, through the layer's builder; a request
//! without a label paced under its credentials; no setting dropped.

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
        .clock(Arc::new(ratewise_tower::TokioClock::new()))
        .build()
        .unwrap();
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
        .build()
        .unwrap();
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

/// An answer with its usage: the body's end settles the reservation.
fn ok_service() -> impl tower::Service<
    Request<Full<Bytes>>,
    Response = Response<Full<Bytes>>,
    Error = std::io::Error,
    Future = impl Send,
> + Clone {
    service_fn(|_: Request<Full<Bytes>>| async {
        Ok::<_, std::io::Error>(
            Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from_static(OK.as_bytes())))
                .unwrap(),
        )
    })
}

fn unlabelled(headers: &[(&str, &str)]) -> Request<Full<Bytes>> {
    let mut r = Request::post("http://provider.invalid/v1/messages");
    for (n, v) in headers {
        r = r.header(*n, *v);
    }
    r.body(Full::new(Bytes::from_static(
        br#"{"model":"claude-sonnet-4-5","max_tokens":100}"#,
    )))
    .unwrap()
}

#[tokio::test]
async fn a_request_without_a_key_label_is_paced_under_its_credentials() {
    let (a, b) = ("sk-ant-key-a", "sk-ant-key-b");
    let fp = |k: &str| KeyLabel::fingerprint(k).as_str().to_owned();
    let layer = RetryLayer::builder()
        .provider(Provider::Anthropic)
        .key_limits(fp(a), Limits::per_minute().requests(50))
        .key_limits(fp(b), Limits::per_minute().requests(4000))
        .seed(3)
        .build()
        .unwrap();
    let svc = layer.layer(ok_service());
    for r in [
        unlabelled(&[("x-api-key", a)]),
        unlabelled(&[("authorization", &format!("Bearer {b}"))]),
        unlabelled(&[]),
    ] {
        let ok = svc.clone().oneshot(r).await.expect("sent");
        ok.into_body().collect().await.unwrap();
    }
    let scopes = layer.snapshots().expect("the builder's in-memory store");
    let limit = |key: &str| {
        scopes
            .iter()
            .find(|s| s.key == key)
            .unwrap_or_else(|| panic!("a scope for {key}: {scopes:?}"))
            .limits
            .requests
    };
    // Two keys, two scopes, each with the limits configured for it.
    assert_eq!(limit(&fp(a)), Some(50));
    assert_eq!(limit(&fp(b)), Some(4000));
    // No credentials: the one anonymous scope, never a shared default.
    assert_eq!(limit(KeyLabel::ANONYMOUS), None);
    assert_eq!(scopes.len(), 3);
    assert!(layer.ledger().unwrap().is_clean());
}

#[tokio::test]
async fn admission_after_key_limits_keeps_both() {
    let mut admission = ratewise_core::admit::Config::default();
    admission.limits = Limits::per_minute().requests(7);
    let layer = RetryLayer::builder()
        .key_limits("team-a", rpm(50))
        .admission(admission)
        .policy({
            let mut p = ratewise_tower::Policy::default();
            p.max_attempts = 2;
            p
        })
        .config(ratewise_tower::Config::default())
        .build()
        .unwrap();
    // `.config(..)` given last is the base: the policy set before it holds.
    assert_eq!(layer.config().policy.max_attempts, 2);
    let state = layer.state();
    let now = Now::new(Instant::ZERO, SystemTime::UNIX_EPOCH);
    let limit = |key: &'static str| {
        let state = state.clone();
        async move {
            let t = state.target(key, "claude-sonnet-4-5").await;
            state.snapshot(t.scope, now).await.unwrap().limits.requests
        }
    };
    assert_eq!(limit("team-a").await, Some(50), "the key's limits");
    assert_eq!(limit("team-b").await, Some(7), "the admission's limits");
}

#[test]
fn limits_given_with_a_store_are_an_error_not_dropped() {
    use ratewise_core::admit::{Config, Controller, Shared};
    let store = || Arc::new(Shared::new(Controller::new(Config::default())));
    let err = RetryLayer::builder()
        .key_limits("team-a", rpm(50))
        .clock(Arc::new(ratewise_tower::TokioClock::new()))
        .store(store())
        .build()
        .expect_err("the limits could not reach the store");
    let said = err.to_string();
    assert!(said.contains("key_limits"), "{said}");
    assert!(said.contains(".store("), "{said}");
    // Through a whole configuration too.
    let mut config = ratewise_tower::Config::default();
    config.admission.limits = rpm(5);
    assert!(RetryLayer::builder()
        .config(config)
        .clock(Arc::new(ratewise_tower::TokioClock::new()))
        .store(store())
        .build()
        .is_err());
    // A store alone is configured by whoever made it.
    let given = store();
    let layer = RetryLayer::builder()
        .clock(Arc::new(ratewise_tower::TokioClock::new()))
        .store(given.clone())
        .build()
        .unwrap();
    assert!(std::ptr::eq(layer.in_memory_store().unwrap(), &*given));
}

/// Every admission setting of a whole configuration, given beside a store
/// of the caller's, is named in the error (not only the limits): the ramp,
/// the burst, the retry budget, the prices, the in-flight bound — and a
/// seed, which could not reach the store's jitter either.
#[test]
fn no_admission_setting_is_dropped_beside_a_store() {
    use ratewise_core::admit::{Config, Controller, Shared};
    let store = || Arc::new(Shared::new(Controller::new(Config::default())));
    let build = |b: ratewise_tower::Builder| {
        b.clock(Arc::new(ratewise_tower::TokioClock::new()))
            .store(store())
            .build()
    };
    type Change = fn(&mut Config);
    let changes: [(&str, Change); 6] = [
        ("ramp", |a| a.ramp.start = 999),
        ("burst", |a| {
            a.burst = ratewise_core::admit::Burst::uniform(std::time::Duration::from_secs(7))
        }),
        ("retry_budget", |a| a.retry_budget.ratio_permille = 500),
        ("lease", |a| a.lease = std::time::Duration::from_secs(1)),
        ("learn_margins", |a| a.learn_margins = false),
        ("max_in_flight", |a| a.max_in_flight = Some(3)),
    ];
    for (name, change) in changes {
        let mut config = ratewise_tower::Config::default();
        change(&mut config.admission);
        let err = build(RetryLayer::builder().config(config))
            .expect_err("an admission setting beside a store is an error");
        assert!(err.to_string().contains(name), "{name}: {err}");
        // Given as a whole admission configuration: the same.
        let mut admission = Config::default();
        change(&mut admission);
        let err = build(RetryLayer::builder().admission(admission)).unwrap_err();
        assert!(err.to_string().contains(name), "{name}: {err}");
    }
    let err = build(RetryLayer::builder().seed(7)).unwrap_err();
    assert!(err.to_string().contains("seed"), "{err}");
    // Without a store, every one of them configures the store built.
    let layer = RetryLayer::builder()
        .seed(7)
        .admission({
            let mut a = Config::default();
            a.max_in_flight = Some(3);
            a
        })
        .clock(Arc::new(ratewise_tower::TokioClock::new()))
        .build()
        .unwrap();
    assert!(layer.in_memory_store().is_some());
    // A store alone, with settings that are the layer's own (policy,
    // deadline, provider): fine.
    assert!(build(
        RetryLayer::builder()
            .deadline(std::time::Duration::from_secs(9))
            .provider(ratewise_core::Provider::Groq)
    )
    .is_ok());
}
