//! `ratewise proxy --redis`: replicas of the proxy sharing one key's state
//! through Redis. A stop one of them meets stops the others with no send;
//! an operator's stop and resume on one hold for all; `/status`,
//! `/metrics` and `/healthz` say which store is in use and how it is
//! doing.

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_mock::{MockConfig, MockServer};
use ratewise_proxy::config::{Flags, ProxyConfig};
use ratewise_proxy::keys::fingerprint;
use ratewise_proxy::Running;

const KEY: &str = "sk-ant-api03-test-REDIS";
const BODY: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;

fn roomy() -> MockConfig {
    let mut cfg = MockConfig::default();
    cfg.anthropic_limits.requests_per_minute = Some(100_000);
    cfg.anthropic_limits.input_tokens_per_minute = Some(100_000_000);
    cfg.anthropic_limits.output_tokens_per_minute = Some(100_000_000);
    cfg
}

async fn replica(upstream: &str, redis: &str, prefix: &str) -> Running {
    replica_with(upstream, redis, prefix, "").await
}

async fn replica_with(upstream: &str, redis: &str, prefix: &str, extra: &str) -> Running {
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:0".into()),
        upstream: Some(upstream.into()),
        ..Flags::default()
    };
    let toml = format!("{extra}[redis]\nurl = \"{redis}\"\nprefix = \"{prefix}\"\n");
    let config = ProxyConfig::from_toml(&flags, &toml, |_| None).expect("config");
    ratewise_proxy::start(config)
        .await
        .expect("the proxy starts")
}

async fn call(p: &Running) -> (StatusCode, String, String) {
    call_with(p, BODY).await
}

async fn call_with(p: &Running, body: &str) -> (StatusCode, String, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::post(format!("http://{}/v1/messages", p.addr))
        .header("content-type", "application/json")
        .header("x-api-key", KEY)
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let resp = client.request(req).await.expect("the proxy answers");
    let status = resp.status();
    let action = resp
        .headers()
        .get("x-ratewise-action")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, action, String::from_utf8_lossy(&body).into_owned())
}

async fn admin(p: &Running, method: &str, path: &str) -> (StatusCode, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", p.admin_addr))
        .header("authorization", p.app.admin.authorization())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server"]
async fn a_spend_cap_met_by_one_replica_stops_the_others_with_no_send() {
    let (url, _server) = ratewise_redis::testing::redis();
    let prefix = ratewise_redis::testing::prefix();
    let mock = MockServer::start(roomy()).await.unwrap();
    let a = replica(&mock.base_url(), &url, &prefix).await;
    let b = replica(&mock.base_url(), &url, &prefix).await;
    // Both serve.
    assert_eq!(call(&a).await.0, 200);
    assert_eq!(call(&b).await.0, 200);
    mock.set_spend_cap(Some(0.0));
    let (_, action, body) = call(&a).await;
    assert_eq!(action, "stop_queue", "{body}");
    let sends = mock.records().len();
    assert_eq!(sends, 3);
    // The other replica learns it from Redis: stopped, nothing sent.
    for _ in 0..3 {
        let (status, action, body) = call(&b).await;
        assert_eq!(action, "stop_queue", "{status} {body}");
        assert_eq!(status, 429, "{body}");
    }
    assert_eq!(
        mock.records().len(),
        sends,
        "no send after the cap, on either replica"
    );
    let (_, status) = admin(&b, "GET", "/status").await;
    assert!(status.contains("\"kind\":\"redis\""), "{status}");
    assert!(status.contains("spend_cap"), "{status}");
    assert!(!status.contains(KEY), "no key in /status");
    // A human raises the cap and resumes on one replica: both serve again.
    mock.set_spend_cap(None);
    let fp = fingerprint(KEY);
    let (s, _) = admin(&b, "POST", &format!("/resume?key={fp}")).await;
    assert_eq!(s, 200);
    let (status, _, body) = call(&a).await;
    assert_eq!(status, 200, "{body}");
    let (_, metrics) = admin(&a, "GET", "/metrics").await;
    assert!(metrics.contains("ratewise_store_degraded 0"), "{metrics}");
    // What Redis holds names the key by its fingerprint only.
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        keys.iter().filter(|k| k.ends_with(":record")).count(),
        1,
        "{keys:?}"
    );
    for k in &keys {
        assert!(k.contains(&format!("{{{fp}}}")) && !k.contains(KEY), "{k}");
    }
    let record: String = redis::cmd("HGET")
        .arg(format!("{prefix}:{{{fp}}}:record"))
        .arg("r")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(record.contains(&fp) && !record.contains(KEY), "{record}");
    assert!(metrics.contains("ratewise_store_processes 2"), "{metrics}");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server"]
async fn an_operators_stop_on_one_replica_holds_on_the_other() {
    let (url, _server) = ratewise_redis::testing::redis();
    let prefix = ratewise_redis::testing::prefix();
    let mock = MockServer::start(roomy()).await.unwrap();
    let a = replica(&mock.base_url(), &url, &prefix).await;
    let b = replica(&mock.base_url(), &url, &prefix).await;
    let fp = fingerprint(KEY);
    let (s, _) = admin(&a, "POST", &format!("/stop?key={fp}")).await;
    assert_eq!(s, 200);
    let (status, action, _) = call(&b).await;
    assert_eq!((status.as_u16(), action.as_str()), (429, "stop_queue"));
    assert_eq!(mock.records().len(), 0);
    admin(&b, "POST", &format!("/resume?key={fp}")).await;
    assert_eq!(call(&a).await.0, 200);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_does_not_answer_at_start_leaves_the_proxy_serving() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = replica(
        &mock.base_url(),
        &format!("redis://127.0.0.1:{port}/"),
        "down",
    )
    .await;
    assert_eq!(call(&p).await.0, 200, "served on local pacing");
    let (_, metrics) = admin(&p, "GET", "/metrics").await;
    assert!(metrics.contains("ratewise_store_degraded 1"), "{metrics}");
    p.shutdown().await;
}

/// The input-token level `/status` shows for `KEY`'s only class.
fn input_level(status: &str) -> i64 {
    let v: serde_json::Value = serde_json::from_str(status).expect("/status is JSON");
    let fp = fingerprint(KEY);
    v["keys"]
        .as_array()
        .and_then(|ks| ks.iter().find(|k| k["fingerprint"] == fp.as_str()))
        .and_then(|k| k["classes"][0]["levels"]["input_tokens"].as_i64())
        .unwrap_or_else(|| panic!("an input level for {fp} in {status}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server"]
async fn status_shows_the_shared_levels_refilled_to_now() {
    let (url, _server) = ratewise_redis::testing::redis();
    let prefix = ratewise_redis::testing::prefix();
    let mock = MockServer::start(roomy()).await.unwrap();
    // 1 000 input tokens a second; the big request takes ~9 000.
    let limits = "[limits]\nrequests = 6000\ninput_tokens = 60000\noutput_tokens = 600000\n";
    let a = replica_with(&mock.base_url(), &url, &prefix, limits).await;
    let b = replica_with(&mock.base_url(), &url, &prefix, limits).await;
    let big = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "lorem ipsum ".repeat(3000)
    );
    // a knows the key from a small request; b then takes far more than the
    // bucket holds (it goes, and leaves a debt of some seconds' refill).
    assert_eq!(call(&a).await.0, 200);
    let (_, before) = admin(&a, "GET", "/status").await;
    assert!(input_level(&before) > 0, "{before}");
    assert_eq!(call_with(&b, &big).await.0, 200);
    // b's take shows on a's /status: it reads the shared model, not its
    // view as of its own last answer.
    let (_, first) = admin(&a, "GET", "/status").await;
    let first = input_level(&first);
    assert!(first < 0, "b's debt shows on a: {first}");
    // No traffic: only time passes.
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let (_, second) = admin(&a, "GET", "/status").await;
    let second = input_level(&second);
    assert!(second > first, "refilled to now: {first} then {second}");
    a.shutdown().await;
    b.shutdown().await;
}

/// (status, error type, error code) of an Anthropic-shaped answer.
fn typed(status: StatusCode, body: &str) -> (u16, String, String) {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    (
        status.as_u16(),
        v["error"]["type"].as_str().unwrap_or_default().to_owned(),
        v["error"]["details"]["error_code"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

/// The stop's `since_ms` for `KEY` in `/status`.
fn stop_since(status: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(status).ok()?;
    let fp = fingerprint(KEY);
    v["keys"]
        .as_array()?
        .iter()
        .find(|k| k["fingerprint"] == fp.as_str())?["stop"]["since_ms"]
        .as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server"]
async fn every_replica_gives_the_spend_caps_typed_answer_with_its_since() {
    let (url, _server) = ratewise_redis::testing::redis();
    let prefix = ratewise_redis::testing::prefix();
    let mock = MockServer::start(roomy()).await.unwrap();
    let a = replica(&mock.base_url(), &url, &prefix).await;
    let b = replica(&mock.base_url(), &url, &prefix).await;
    assert_eq!(call(&a).await.0, 200);
    assert_eq!(call(&b).await.0, 200);
    mock.set_spend_cap(Some(0.0));
    let (s, action, body) = call(&a).await;
    assert_eq!(action, "stop_queue", "{body}");
    let want = typed(s, &body);
    assert_eq!(
        want,
        (
            429,
            "rate_limit_error".into(),
            "enforced_spend_limit_reached".into()
        )
    );
    let (_, status_a) = admin(&a, "GET", "/status").await;
    let since = stop_since(&status_a).expect("a shows the stop");
    let sends = mock.records().len();
    for _ in 0..2 {
        let (s, action, body) = call(&b).await;
        assert_eq!(action, "stop_queue");
        assert_eq!(typed(s, &body), want, "{body}");
    }
    let (_, status_b) = admin(&b, "GET", "/status").await;
    assert_eq!(stop_since(&status_b), Some(since), "{status_b}");
    // A replica started after the stop: the same.
    let c = replica(&mock.base_url(), &url, &prefix).await;
    let (s, _, body) = call(&c).await;
    assert_eq!(typed(s, &body), want, "{body}");
    assert_eq!(mock.records().len(), sends, "nothing sent after the cap");
    // Resumed on one replica: the evidence goes with the stop.
    mock.set_spend_cap(None);
    let fp = fingerprint(KEY);
    admin(&c, "POST", &format!("/resume?key={fp}")).await;
    assert_eq!(call(&c).await.0, 200);
    // Stopped again, met by a: b, which saw the first stop and nothing
    // since, answers with the new stop's since once it looks again (at
    // most a second later).
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    mock.set_spend_cap(Some(0.0));
    let (s, action, body) = call(&a).await;
    assert_eq!(
        (action.as_str(), typed(s, &body)),
        ("stop_queue", want.clone())
    );
    let (_, status_a) = admin(&a, "GET", "/status").await;
    let again = stop_since(&status_a).expect("a shows the new stop");
    assert!(again > since, "{again} > {since}");
    let (s, _, body) = call(&b).await;
    assert_eq!(typed(s, &body), want, "{body}");
    let (_, status_b) = admin(&b, "GET", "/status").await;
    assert_eq!(stop_since(&status_b), Some(again), "{status_b}");
    a.shutdown().await;
    b.shutdown().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_unreached_at_start_is_degraded_at_half_share_from_the_first_read() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = replica(
        &mock.base_url(),
        &format!("redis://127.0.0.1:{port}/"),
        "down-at-start",
    )
    .await;
    // Before any traffic.
    let (_, metrics) = admin(&p, "GET", "/metrics").await;
    assert!(metrics.contains("ratewise_store_degraded 1"), "{metrics}");
    assert!(metrics.contains("ratewise_store_share 0.5"), "{metrics}");
    let (_, status) = admin(&p, "GET", "/status").await;
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(v["store"]["degraded"], true, "{status}");
    assert_eq!(v["store"]["share_percent"], 50.0, "{status}");
    assert_eq!(call(&p).await.0, 200, "served on local pacing");
    let (_, metrics) = admin(&p, "GET", "/metrics").await;
    assert!(metrics.contains("ratewise_store_share 0.5"), "{metrics}");
    p.shutdown().await;
}

/// `GET /healthz`, as a load balancer sends it (no token).
async fn healthz(p: &Running) -> (StatusCode, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::get(format!("http://{}/healthz", p.admin_addr))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_says_degraded_with_its_reason_while_redis_is_unreached() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = replica(
        &mock.base_url(),
        &format!("redis://127.0.0.1:{port}/"),
        "healthz-unreached",
    )
    .await;
    // Before any traffic, and after: degraded, still 200 (it serves).
    for _ in 0..2 {
        let (s, body) = healthz(&p).await;
        assert_eq!(s, StatusCode::OK, "{body}");
        assert!(body.starts_with("degraded: Redis unavailable"), "{body}");
        assert!(body.contains("(50%)"), "the share it paces on: {body}");
        assert_eq!(call(&p).await.0, 200, "served on local pacing");
    }
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server"]
async fn healthz_says_degraded_while_redis_is_down_and_ok_once_it_is_back() {
    // A server of this test's own: it is killed and started again.
    let mut server = ratewise_redis::testing::Server::start();
    let port = server.port;
    let prefix = ratewise_redis::testing::prefix();
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = replica(&mock.base_url(), &server.url(), &prefix).await;
    assert_eq!(call(&p).await.0, 200);
    assert_eq!(healthz(&p).await, (StatusCode::OK, "ok\n".to_owned()));

    server.kill();
    // The next round trips find it gone; requests are served meanwhile.
    let mut said = String::new();
    for _ in 0..50 {
        assert_eq!(call(&p).await.0, 200, "served on local pacing");
        let (s, body) = healthz(&p).await;
        assert_eq!(s, StatusCode::OK, "degraded is still 200: {body}");
        said = body;
        if said != "ok\n" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(said.starts_with("degraded: Redis unavailable"), "{said}");
    let (_, metrics) = admin(&p, "GET", "/metrics").await;
    assert!(metrics.contains("ratewise_store_degraded 1"), "{metrics}");

    // Back: Redis is tried again (at most once a second) and the store
    // shares again.
    let _back = ratewise_redis::testing::Server::start_on(port);
    for _ in 0..100 {
        assert_eq!(call(&p).await.0, 200);
        said = healthz(&p).await.1;
        if said == "ok\n" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(said, "ok\n");
    let (_, metrics) = admin(&p, "GET", "/metrics").await;
    assert!(metrics.contains("ratewise_store_degraded 0"), "{metrics}");
    p.shutdown().await;
}
