//! "Is this key stopped?" has one owner: the store's record of the key
//! (the core's `KeyState.stop`; the Redis store holds the same record for
//! every process). The proxy's `/status`, the reqwest middleware's
//! [`stop_evidence`](ratewise_reqwest::RatewiseMiddleware::stop_evidence)
//! and the Redis store itself are views of it: a stop made through one
//! surface is seen by each with the same typed cause (the core's
//! [`Cause`], compared as a value, never as differently spelt strings),
//! whichever surface made it — the provider's answer kept beside it as
//! evidence where that surface received it.
//!
//! The shared store is Redis; the tests that need it are
//! `#[ignore = "needs redis-server"]` as every other Redis test (`.ci/run`
//! starts one and runs them with `--include-ignored`).

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_core::admit::Store;
use ratewise_core::{Cause, Provider};
use ratewise_mock::{MockConfig, MockServer};
use ratewise_proxy::config::{Flags, ProxyConfig};
use ratewise_proxy::keys::fingerprint;
use ratewise_proxy::Running;
use ratewise_redis::RedisStore;
use ratewise_reqwest::{reqwest, reqwest_middleware, RatewiseMiddleware};
use std::sync::Arc;

const BODY: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;

fn roomy() -> MockConfig {
    let mut cfg = MockConfig::default();
    cfg.anthropic_limits.requests_per_minute = Some(100_000);
    cfg.anthropic_limits.input_tokens_per_minute = Some(100_000_000);
    cfg.anthropic_limits.output_tokens_per_minute = Some(100_000_000);
    cfg
}

async fn proxy(upstream: &str, redis: &str, prefix: &str) -> Running {
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:0".into()),
        upstream: Some(upstream.into()),
        ..Flags::default()
    };
    let toml = format!("[redis]\nurl = \"{redis}\"\nprefix = \"{prefix}\"\n");
    let config = ProxyConfig::from_toml(&flags, &toml, |_| None).expect("config");
    ratewise_proxy::start(config)
        .await
        .expect("the proxy starts")
}

/// The Redis store on `prefix`, as another process opens it.
async fn store(redis: &str, prefix: &str) -> RedisStore {
    let mut c = ratewise_redis::Config::default();
    c.prefix = prefix.to_owned();
    RedisStore::connect(redis, c).await.expect("redis answers")
}

/// A reqwest client whose calls run on a layer over `store`.
fn client(store: RedisStore) -> (reqwest_middleware::ClientWithMiddleware, RatewiseMiddleware) {
    let layer = ratewise_tower::RetryLayer::builder()
        .provider(Provider::Anthropic)
        .store(Arc::new(store))
        .build()
        .expect("a layer");
    let mw = RatewiseMiddleware::from_layer(layer);
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(mw.clone())
        .build();
    (client, mw)
}

async fn through_reqwest(
    c: &reqwest_middleware::ClientWithMiddleware,
    base: &str,
    key: &str,
) -> (u16, String) {
    let r = c
        .post(format!("{base}/v1/messages"))
        .header("content-type", "application/json")
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .body(BODY)
        .send()
        .await
        .expect("an answer");
    let action = r
        .headers()
        .get(ratewise_reqwest::ACTION_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    (r.status().as_u16(), action)
}

async fn through_proxy(p: &Running, key: &str) -> (StatusCode, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::post(format!("http://{}/v1/messages", p.addr))
        .header("content-type", "application/json")
        .header("x-api-key", key)
        .body(Full::new(Bytes::from(BODY)))
        .unwrap();
    let resp = client.request(req).await.expect("the proxy answers");
    let status = resp.status();
    let action = resp
        .headers()
        .get("x-ratewise-action")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    (status, action)
}

/// `/status?key=fp`'s key entry.
async fn status_of(p: &Running, fp: &str) -> serde_json::Value {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::get(format!("http://{}/status?key={fp}", p.admin_addr))
        .header("authorization", p.app.admin.authorization())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    v["keys"][0].clone()
}

/// The cause `/status` gives a key's stop, typed; `None` when it shows
/// no stop.
fn status_cause(key: &serde_json::Value) -> Option<Cause> {
    let word = key["stop"]["cause"].as_str()?;
    Some(Cause::from_word(word).unwrap_or_else(|| panic!("not a cause: {word:?} in {key}")))
}

/// The cause of each class's stop in `/status` (the store's scopes).
fn class_causes(key: &serde_json::Value) -> Vec<Option<Cause>> {
    key["classes"]
        .as_array()
        .expect("classes")
        .iter()
        .map(|c| c["stopped"]["cause"].as_str().and_then(Cause::from_word))
        .collect()
}

/// The cause of `fp`'s stop in the Redis record, as any process reads it.
async fn redis_cause(store: &RedisStore, fp: &str, now: ratewise_core::Now) -> Option<Cause> {
    let t = Store::target(store, fp, "claude-sonnet-4-5").await;
    Store::snapshot(store, t.scope, now)
        .await?
        .stopped
        .map(|s| s.cause)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server"]
async fn a_stop_made_through_the_proxy_has_one_cause_in_status_reqwest_and_redis() {
    const KEY: &str = "sk-ant-api03-test-STOP-OWNER-PROXY";
    let (url, _server) = ratewise_redis::testing::redis();
    let prefix = ratewise_redis::testing::prefix();
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = proxy(&mock.base_url(), &url, &prefix).await;
    let fp = fingerprint(KEY);
    assert_eq!(through_proxy(&p, KEY).await.0, 200);
    mock.set_billing_error(true);
    let (status, action) = through_proxy(&p, KEY).await;
    assert_eq!((status.as_u16(), action.as_str()), (402, "stop_queue"));

    // The owner: the record in Redis.
    let reader = store(&url, &prefix).await;
    let owner = redis_cause(&reader, &fp, p.app.layer.now()).await;
    assert_eq!(owner, Some(Cause::Billing));
    // The proxy's /status: the key's stop and each class's, one cause,
    // with the answer that stopped it beside it.
    let key = status_of(&p, &fp).await;
    assert_eq!(status_cause(&key), owner, "{key}");
    assert!(class_causes(&key).iter().all(|c| *c == owner), "{key}");
    assert_eq!(key["stop"]["answer"]["status"], 402, "{key}");
    // reqwest, on the same store: the same stop, typed; no answer of its
    // own (it never received one).
    let (_, mw) = client(store(&url, &prefix).await);
    let ev = mw.stop_evidence(&fp).await.expect("stopped in the store");
    assert_eq!(Some(ev.cause), owner);
    assert_eq!(ev.status, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server"]
async fn a_stop_made_through_reqwest_has_one_cause_in_status_reqwest_and_redis() {
    const KEY: &str = "sk-ant-api03-test-STOP-OWNER-REQWEST";
    let (url, _server) = ratewise_redis::testing::redis();
    let prefix = ratewise_redis::testing::prefix();
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = proxy(&mock.base_url(), &url, &prefix).await;
    let fp = fingerprint(KEY);
    // The proxy has seen the key (its /status lists the keys it knows).
    assert_eq!(through_proxy(&p, KEY).await.0, 200);
    let (c, mw) = client(store(&url, &prefix).await);
    mock.set_billing_error(true);
    let (status, action) = through_reqwest(&c, &mock.base_url(), KEY).await;
    assert_eq!((status, action.as_str()), (402, "stop_queue"));

    let reader = store(&url, &prefix).await;
    let owner = redis_cause(&reader, &fp, p.app.layer.now()).await;
    assert_eq!(owner, Some(Cause::Billing));
    // reqwest: the store's stop, with the answer it received beside it.
    let ev = mw.stop_evidence(&fp).await.expect("stopped in the store");
    assert_eq!(Some(ev.cause), owner);
    assert_eq!(ev.status, Some(StatusCode::PAYMENT_REQUIRED));
    // The proxy never saw the answer: its /status still shows the stop,
    // with the store's cause.
    let key = status_of(&p, &fp).await;
    assert_eq!(status_cause(&key), owner, "{key}");
    assert!(class_causes(&key).iter().all(|c| *c == owner), "{key}");
    // And the proxy answers a call on it as stopped, nothing sent.
    let sends = mock.records().len();
    let (_, action) = through_proxy(&p, KEY).await;
    assert_eq!(action, "stop_queue");
    assert_eq!(mock.records().len(), sends);
}

/// Without Redis, the proxy's own store is the owner: a stop it holds
/// with no evidence here (set in the store by another of its users) is
/// shown by `/status` with the store's cause, and a stop the proxy met
/// shows the answer beside it; the key's stop and each class's agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_stores_stop_with_or_without_evidence() {
    const KEY: &str = "sk-ant-api03-test-STOP-OWNER-LOCAL";
    let mock = MockServer::start(roomy()).await.unwrap();
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:0".into()),
        upstream: Some(mock.base_url()),
        ..Flags::default()
    };
    let config = ProxyConfig::from_toml(&flags, "", |_| None).expect("config");
    let p = ratewise_proxy::start(config)
        .await
        .expect("the proxy starts");
    let fp = fingerprint(KEY);
    assert_eq!(through_proxy(&p, KEY).await.0, 200);
    let key = status_of(&p, &fp).await;
    assert_eq!(status_cause(&key), None, "{key}");
    // Stopped in the store alone: no answer, no evidence kept here.
    {
        let now = p.app.layer.now();
        let mut c = p.app.store.lock();
        let scope = c.scopes_of(&fp)[0];
        c.stop(scope, Cause::Permission, None, now);
    }
    let key = status_of(&p, &fp).await;
    assert_eq!(status_cause(&key), Some(Cause::Permission), "{key}");
    assert!(key["stop"]["since_ms"].is_null(), "{key}");
    assert!(
        class_causes(&key)
            .iter()
            .all(|c| *c == Some(Cause::Permission)),
        "{key}"
    );
    let (_, action) = through_proxy(&p, KEY).await;
    assert_eq!(action, "stop_queue");
    // Resumed, then stopped by the provider's answer: that cause, with
    // its answer beside it.
    p.app.resume(&fp).await;
    p.app.stops.forget(&fp);
    mock.set_billing_error(true);
    let (status, action) = through_proxy(&p, KEY).await;
    assert_eq!((status.as_u16(), action.as_str()), (402, "stop_queue"));
    let key = status_of(&p, &fp).await;
    assert_eq!(status_cause(&key), Some(Cause::Billing), "{key}");
    assert!(
        class_causes(&key)
            .iter()
            .all(|c| *c == Some(Cause::Billing)),
        "{key}"
    );
    assert_eq!(key["stop"]["answer"]["status"], 402, "{key}");
    assert!(key["stop"]["since_ms"].as_u64().is_some(), "{key}");
}
