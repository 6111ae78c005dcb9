//! The admin listener against a hostile browser and a neighbour: a
//! cross-origin `POST /stop`, a wrong `Host`, a missing or wrong token are
//! refused and stop nothing; keys are validated and must have been seen;
//! every admin error has one shape; the key table stays within its bound
//! and never forgets a stopped key.

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_mock::{MockConfig, MockServer};
use ratewise_proxy::config::{Flags, ProxyConfig};
use ratewise_proxy::keys::fingerprint;
use ratewise_proxy::Running;

const KEY: &str = "sk-ant-api03-admin-test-KEY1";
const BODY: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;

fn roomy() -> MockConfig {
    let mut cfg = MockConfig::default();
    cfg.anthropic_limits.requests_per_minute = Some(10_000_000);
    cfg.anthropic_limits.input_tokens_per_minute = Some(1_000_000_000);
    cfg.anthropic_limits.output_tokens_per_minute = Some(1_000_000_000);
    cfg.max_keys = 100_000;
    cfg
}

async fn proxy(upstream: &str, toml: &str) -> Running {
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:1".into()),
        upstream: Some(upstream.into()),
        ..Flags::default()
    };
    let mut config = ProxyConfig::from_toml(&flags, toml, |_| None).expect("config");
    config.admin = "127.0.0.1:0".parse().unwrap();
    ratewise_proxy::start(config).await.expect("proxy starts")
}

type Http = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

async fn call_with(p: &Running, key: &str) -> (StatusCode, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    call_on(&client, p, key).await
}

async fn call_on(client: &Http, p: &Running, key: &str) -> (StatusCode, String) {
    let req = Request::post(format!("http://{}/v1/messages", p.addr))
        .header("content-type", "application/json")
        .header("x-api-key", key)
        .body(Full::new(Bytes::from(BODY)))
        .unwrap();
    let resp = client.request(req).await.expect("the proxy answers");
    let action = resp
        .headers()
        .get("x-ratewise-action")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let status = resp.status();
    resp.into_body().collect().await.unwrap();
    (status, action)
}

/// An admin request with exactly these headers (hyper adds `Host` only
/// when none is given).
async fn raw_admin(
    p: &Running,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", p.admin_addr));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client
        .request(req.body(Full::new(Bytes::from("stop"))).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// An admin request as an operator sends it: with the token.
async fn admin(p: &Running, method: &str, path: &str) -> (StatusCode, serde_json::Value) {
    let auth = p.app.admin.authorization();
    let (s, body) = raw_admin(p, method, path, &[("authorization", &auth)]).await;
    (
        s,
        serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_a_wrong_host_or_a_missing_token_stop_nothing() {
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = proxy(&mock.base_url(), "").await;
    assert_eq!(call_with(&p, KEY).await.0, 200);
    let fp = fingerprint(KEY);
    let stop = format!("/stop?key={fp}");
    let auth = p.app.admin.authorization();
    let token = p.app.admin.token().to_owned();
    let own_host = p.admin_addr.to_string();
    // (headers sent, status expected, refusal's type)
    type Case<'a> = (Vec<(&'a str, &'a str)>, u16, &'a str);
    let cases: Vec<Case> = vec![
        // What a web page's fetch() sends: no preflight for text/plain.
        (
            vec![
                ("origin", "http://evil.example"),
                ("content-type", "text/plain"),
            ],
            403,
            "origin_not_allowed",
        ),
        // Even with the token, a foreign page is refused.
        (
            vec![("origin", "http://evil.example"), ("authorization", &auth)],
            403,
            "origin_not_allowed",
        ),
        // DNS rebinding: the page's own name in Host.
        (
            vec![("host", "evil.example"), ("authorization", &auth)],
            421,
            "host_not_allowed",
        ),
        (
            vec![("host", "evil.example:80"), ("content-type", "text/plain")],
            421,
            "host_not_allowed",
        ),
        (vec![("host", &own_host)], 401, "token_required"),
        (
            vec![("authorization", "Bearer not-the-admin-token")],
            401,
            "token_wrong",
        ),
        (
            vec![("authorization", "Basic YWRtaW46YWRtaW4=")],
            401,
            "token_required",
        ),
    ];
    for (headers, want, kind) in cases {
        let (s, body) = raw_admin(&p, "POST", &stop, &headers).await;
        assert_eq!(s.as_u16(), want, "{headers:?}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("a JSON refusal");
        assert_eq!(v["error"]["type"], kind, "{body}");
        assert!(!body.contains(&token), "a refusal never echoes the token");
        // The key still goes through.
        assert_eq!(call_with(&p, KEY).await.0, StatusCode::OK, "{headers:?}");
    }
    let (_, status) = admin(&p, "GET", "/status").await;
    assert_eq!(
        status["keys"][0]["stop"],
        serde_json::Value::Null,
        "{status}"
    );
    // The operator's own call, with the token and a local Origin, works.
    let origin = format!("http://{own_host}");
    let (s, _) = raw_admin(
        &p,
        "POST",
        &stop,
        &[("authorization", &auth), ("origin", &origin)],
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(call_with(&p, KEY).await.1, "stop_queue");
    // Reads are guarded too: no /status without the token.
    let (s, _) = raw_admin(&p, "GET", "/status", &[]).await;
    assert_eq!(s, 401);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_open_and_metrics_need_the_token_unless_open() {
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = proxy(&mock.base_url(), "").await;
    let (s, body) = raw_admin(&p, "GET", "/healthz", &[]).await;
    assert_eq!((s.as_u16(), body.as_str()), (200, "ok\n"));
    let (s, _) = raw_admin(&p, "GET", "/metrics", &[]).await;
    assert_eq!(s, 401);
    let (s, _) = admin(&p, "GET", "/metrics").await;
    assert_eq!(s, 200);
    p.shutdown().await;

    let open = proxy(&mock.base_url(), "[admin]\nopen_metrics = true\n").await;
    let (s, body) = raw_admin(&open, "GET", "/metrics", &[]).await;
    assert_eq!(s, 200);
    assert!(body.contains("ratewise_sends_total"), "{body}");
    // Only the token is skipped: the Host check holds.
    let (s, _) = raw_admin(&open, "GET", "/metrics", &[("host", "evil.example")]).await;
    assert_eq!(s, 421);
    let (s, _) = raw_admin(&open, "GET", "/status", &[]).await;
    assert_eq!(s, 401);
    open.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_validated_and_must_have_been_seen() {
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = proxy(&mock.base_url(), "").await;
    let unseen = fingerprint("sk-never-sent");
    for path in ["/stop", "/resume"] {
        let (s, body) = admin(&p, "POST", &format!("{path}?key={unseen}")).await;
        assert_eq!(s, 404, "{path}: {body}");
        // Upper-cased, it is the same key's fingerprint: unseen, not junk.
        let upper = format!("fp-{}", unseen[3..].to_ascii_uppercase());
        let (s, body) = admin(&p, "POST", &format!("{path}?key={upper}")).await;
        assert_eq!(s, 404, "{path}?key={upper}: {body}");
        for junk in ["junk", "fp-XYZ", "fp-0123456789abcdef0", "%00"] {
            let (s, body) = admin(&p, "POST", &format!("{path}?key={junk}")).await;
            assert_eq!(s, 400, "{path}?key={junk}: {body}");
        }
        let (s, _) = admin(&p, "POST", path).await;
        assert_eq!(s, 400);
    }
    let (s, _) = admin(&p, "GET", &format!("/status?key={unseen}")).await;
    assert_eq!(s, 404);
    let (s, _) = admin(&p, "GET", "/status?key=junk").await;
    assert_eq!(s, 400);
    // Nothing was made for them.
    assert_eq!(p.app.store.lock().key_count(), 0);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_error_has_one_shape() {
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = proxy(&mock.base_url(), "").await;
    let unseen = fingerprint("sk-never-sent");
    let auth = p.app.admin.authorization();
    let token: &[(&str, &str)] = &[("authorization", &auth)];
    let evil_origin: &[(&str, &str)] =
        &[("authorization", &auth), ("origin", "http://evil.example")];
    let evil_host: &[(&str, &str)] = &[("authorization", &auth), ("host", "evil.example")];
    let wrong: &[(&str, &str)] = &[("authorization", "Bearer nope")];
    let none: &[(&str, &str)] = &[];
    // (method, path, headers, status, type)
    type Case<'a> = (&'a str, String, &'a [(&'a str, &'a str)], u16, &'a str);
    let cases: Vec<Case> = vec![
        ("POST", "/stop".into(), token, 400, "key_required"),
        ("POST", "/resume?key=".into(), token, 400, "key_required"),
        ("GET", "/status?key=".into(), token, 400, "key_required"),
        ("POST", "/stop?key=junk".into(), token, 400, "key_invalid"),
        ("GET", "/status?key=junk".into(), token, 400, "key_invalid"),
        (
            "POST",
            format!("/resume?key={unseen}&key={unseen}"),
            token,
            400,
            "query_invalid",
        ),
        (
            "POST",
            format!("/stop?key={unseen}"),
            token,
            404,
            "key_not_found",
        ),
        (
            "POST",
            format!("/resume?key={unseen}"),
            token,
            404,
            "key_not_found",
        ),
        (
            "GET",
            format!("/status?key={unseen}"),
            token,
            404,
            "key_not_found",
        ),
        ("GET", "/nowhere".into(), token, 404, "not_found"),
        ("GET", "/stop".into(), token, 405, "method_not_allowed"),
        ("POST", "/status".into(), token, 405, "method_not_allowed"),
        ("GET", "/status".into(), none, 401, "token_required"),
        ("GET", "/status".into(), wrong, 401, "token_wrong"),
        (
            "GET",
            "/status".into(),
            evil_origin,
            403,
            "origin_not_allowed",
        ),
        ("GET", "/status".into(), evil_host, 421, "host_not_allowed"),
    ];
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    for (method, path, headers, status, kind) in cases {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", p.admin_addr));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = client
            .request(req.body(Full::new(Bytes::new())).unwrap())
            .await
            .unwrap();
        let what = format!("{method} {path} {headers:?}");
        assert_eq!(resp.status().as_u16(), status, "{what}");
        assert_eq!(
            resp.headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("application/json"),
            "{what}"
        );
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body)
            .unwrap_or_else(|_| panic!("{what}: JSON: {}", String::from_utf8_lossy(&body)));
        let error = v["error"]
            .as_object()
            .unwrap_or_else(|| panic!("{what}: {v}"));
        assert_eq!(error.len(), 2, "{what}: only type and message: {v}");
        assert_eq!(error["type"], kind, "{what}: {v}");
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: {v}"
        );
        assert_eq!(v.as_object().map(|o| o.len()), Some(1), "{what}: {v}");
    }
    // Nothing was made for them.
    assert_eq!(p.app.store.lock().key_count(), 0);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_admin_address_needs_allow_remote() {
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("0.0.0.0:0".into()),
        upstream: Some("http://127.0.0.1:9".into()),
        ..Flags::default()
    };
    let e = ProxyConfig::from_toml(&flags, "", |_| None).unwrap_err();
    assert!(e.to_string().contains("allow_remote"), "{e}");
    // A configuration changed after loading is checked at start too.
    let loopback = Flags {
        admin: Some("127.0.0.1:0".into()),
        ..flags.clone()
    };
    let mut config = ProxyConfig::from_toml(&loopback, "", |_| None).unwrap();
    config.admin = "0.0.0.0:0".parse().unwrap();
    let e = ratewise_proxy::start(config).await.err().expect("refused");
    assert!(e.to_string().contains("allow_remote"), "{e}");
    // Allowed, it starts.
    let config =
        ProxyConfig::from_toml(&flags, "[admin]\nallow_remote = true\n", |_| None).unwrap();
    let p = ratewise_proxy::start(config).await.expect("starts");
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_a_capped_number_of_keys_stopped_first_or_one() {
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = proxy(&mock.base_url(), "[admin]\nstatus_max_keys = 3\n").await;
    let keys: Vec<String> = (0..5).map(|i| format!("sk-status-key-{i}")).collect();
    for k in &keys {
        assert_eq!(call_with(&p, k).await.0, 200);
    }
    // The stopped key sorts last by fingerprint, so only "stopped first"
    // lists it.
    let mut fps: Vec<String> = keys.iter().map(|k| fingerprint(k)).collect();
    fps.sort();
    let stopped = fps[4].clone();
    let (s, _) = admin(&p, "POST", &format!("/stop?key={stopped}")).await;
    assert_eq!(s, 200);
    let (_, status) = admin(&p, "GET", "/status").await;
    let listed: Vec<&str> = status["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["fingerprint"].as_str().unwrap())
        .collect();
    assert_eq!(listed, vec![stopped.as_str(), &fps[0], &fps[1]], "{status}");
    assert_eq!(status["keys_total"], 5);
    assert_eq!(status["keys_not_listed"], 2);
    let (s, one) = admin(&p, "GET", &format!("/status?key={}", fps[2])).await;
    assert_eq!(s, 200);
    let ks = one["keys"].as_array().unwrap();
    assert_eq!(ks.len(), 1, "{one}");
    assert_eq!(ks[0]["fingerprint"], fps[2].as_str());
    assert!(ks[0]["last_four"].is_string());
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_thousand_keys_stay_within_the_bound_and_a_stopped_one_stays() {
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = proxy(
        &mock.base_url(),
        "[key_table]\nmax_keys = 1000\nidle_s = 3600\n",
    )
    .await;
    assert_eq!(call_with(&p, KEY).await.0, 200);
    let fp = fingerprint(KEY);
    let (s, _) = admin(&p, "POST", &format!("/stop?key={fp}")).await;
    assert_eq!(s, 200);
    let p = std::sync::Arc::new(p);
    let mut tasks = Vec::new();
    for w in 0..32 {
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
            for i in 0..625 {
                let (s, _) = call_on(&client, &p, &format!("sk-random-{w}-{i}")).await;
                assert_eq!(s, 200);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // The sweep runs each second while over the bound; one more now, so
    // the check does not depend on timing.
    ratewise_proxy::forget::once(&p.app);
    let kept = p.app.store.lock().key_count();
    assert!(kept <= 1000, "{kept} keys kept over a bound of 1000");
    assert!(
        p.app.keys.len() <= 1000,
        "{} fingerprints",
        p.app.keys.len()
    );
    assert!(p.app.store.lock().knows_key(&fp), "the stopped key is kept");
    assert_eq!(call_with(&p, KEY).await.1, "stop_queue");
    let (_, status) = admin(&p, "GET", &format!("/status?key={fp}")).await;
    assert_eq!(status["keys"][0]["stop"]["cause"], "operator", "{status}");
    // The forgotten keys' series are gone from /metrics.
    let auth = p.app.admin.authorization();
    let (_, metrics) = raw_admin(&p, "GET", "/metrics", &[("authorization", &auth)]).await;
    let series = metrics
        .lines()
        .filter(|l| l.starts_with("ratewise_bucket_level{") && l.contains("dimension=\"requests\""))
        .count();
    assert!(series <= 1000, "{series} series");
    assert!(metrics.contains(&fp));
    assert!(p.app.store.ledger().is_clean());
}
