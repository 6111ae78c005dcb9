//! Rate limits, output correction, time scale, acceleration, spend cap,
//! billing and records, over loopback.

mod common;
use common::*;
use ratewise_core::parse::retry_after::parse_retry_after;
use ratewise_core::{Cause, Dimension};
use ratewise_mock::{
    sends_per_job, AccelerationConfig, Limits, MockConfig, MockServer, RemainingRounding,
    ATTEMPT_HEADER, JOB_HEADER,
};
use std::time::{Duration, SystemTime};

fn limits(rpm: Option<u64>, itpm: Option<u64>, otpm: Option<u64>) -> Limits {
    Limits {
        requests_per_minute: rpm,
        input_tokens_per_minute: itpm,
        output_tokens_per_minute: otpm,
        tokens_per_minute: None,
    }
}

fn retry_after(r: &Reply) -> Duration {
    parse_retry_after(
        r.header("retry-after").expect("retry-after").as_bytes(),
        SystemTime::now(),
    )
    .expect("valid retry-after")
}

#[tokio::test]
async fn anthropic_request_limit_names_dimension_with_hints() {
    let cfg = MockConfig {
        anthropic_limits: limits(Some(2), None, None),
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let body = anthropic_body("hi", 10, false);
    assert_eq!(anthropic(&server, &body).await.status, 200);
    assert_eq!(anthropic(&server, &body).await.status, 200);
    let r = anthropic(&server, &body).await;
    assert_eq!(r.status, 429);
    let v = r.json();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("requests per minute"));
    assert_eq!(v["request_id"].as_str(), r.header("request-id"));
    assert_eq!(r.header("x-should-retry"), Some("true"));
    assert_eq!(
        r.header("anthropic-ratelimit-requests-remaining"),
        Some("0")
    );
    let wait = retry_after(&r);
    // 1 request refills in 30 s at 2/min (whole seconds, rounded up)
    // (a loaded machine may be slow between requests: bound loosely from below)
    assert!(
        wait >= Duration::from_secs(20) && wait <= Duration::from_secs(30),
        "{wait:?}"
    );
    let rec = server.records().pop().unwrap();
    assert_eq!(
        (rec.cause, rec.dimension, rec.status),
        (Cause::RateLimited, Some(Dimension::Requests), Some(429))
    );
    server.shutdown().await;
}

#[tokio::test]
async fn openai_token_limit_429_has_x_ratelimit_headers() {
    let cfg = MockConfig {
        openai_limits: Limits {
            requests_per_minute: Some(100),
            tokens_per_minute: Some(1000),
            ..Limits::default()
        },
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let body = openai_body("hi", 400, false);
    let big = |server| {
        post(
            server,
            "/v1/chat/completions",
            "k",
            &body,
            &[("x-mock-input-tokens", "500")],
        )
    };
    assert_eq!(big(&server).await.status, 200);
    // 500 input + ≤ 50 output stay charged: 900 more does not fit
    let r = big(&server).await;
    assert_eq!(r.status, 429);
    let v = r.json();
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert_eq!(v["error"]["type"], "tokens");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("tokens per min (TPM): Limit 1000"), "{msg}");
    assert!(
        ratewise_core::parse::message::try_again_in(msg).is_some(),
        "{msg}"
    );
    assert_eq!(r.header("x-ratelimit-limit-tokens"), Some("1000"));
    assert!(r.header("x-ratelimit-reset-tokens").is_some());
    assert!(retry_after(&r) >= Duration::from_secs(1));
    server.shutdown().await;
}

#[tokio::test]
async fn output_is_charged_from_max_tokens_and_corrected_at_the_end() {
    let cfg = MockConfig {
        anthropic_limits: limits(None, None, Some(1000)),
        // the charge is read off the header: exact, not to the thousand
        remaining_rounding: RemainingRounding::Exact,
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let r = anthropic(&server, &anthropic_body("a", 800, false)).await;
    assert_eq!(r.status, 200);
    // charged 800 at the start (the header is taken then) ...
    let remaining: u64 = r
        .header("anthropic-ratelimit-output-tokens-remaining")
        .unwrap()
        .parse()
        .unwrap();
    assert!(remaining <= 201, "{remaining}");
    // ... and corrected to the actual ≤ 50 at the end, so another 800 fits
    let r = anthropic(&server, &anthropic_body("b", 800, false)).await;
    assert_eq!(r.status, 200);
    // a max_tokens above the whole bucket waits for a full bucket (not
    // yet: the two answers above stay charged)
    let r = anthropic(&server, &anthropic_body("c", 1001, false)).await;
    assert_eq!(r.status, 429);
    assert_eq!(
        server.records().pop().unwrap().dimension,
        Some(Dimension::OutputTokens)
    );
    server.shutdown().await;
}

#[tokio::test]
async fn input_token_limit() {
    let cfg = MockConfig {
        anthropic_limits: limits(None, Some(100), None),
        // the level is read off the header: exact, not to the thousand
        remaining_rounding: RemainingRounding::Exact,
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let r = post(
        &server,
        "/v1/messages",
        "k",
        &anthropic_body("x", 10, false),
        &[("x-mock-input-tokens", "80")],
    )
    .await;
    assert_eq!(r.status, 200);
    let r = post(
        &server,
        "/v1/messages",
        "k",
        &anthropic_body("x", 10, false),
        &[("x-mock-input-tokens", "80")],
    )
    .await;
    assert_eq!(r.status, 429);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("input tokens"));
    assert_eq!(
        r.header("anthropic-ratelimit-input-tokens-remaining"),
        Some("20")
    );
    // another key has its own buckets
    let r = post(
        &server,
        "/v1/messages",
        "k2",
        &anthropic_body("x", 10, false),
        &[("x-mock-input-tokens", "80")],
    )
    .await;
    assert_eq!(r.status, 200);
    server.shutdown().await;
}

#[tokio::test]
async fn scaled_minute_refills_in_scaled_time_and_retry_after_is_real() {
    // one provider minute lasts 0.6 real seconds; 1 request per minute
    let cfg = MockConfig {
        seconds_per_minute: 0.6,
        anthropic_limits: limits(Some(1), None, None),
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let body = anthropic_body("hi", 10, false);
    assert_eq!(anthropic(&server, &body).await.status, 200);
    let r = anthropic(&server, &body).await;
    assert_eq!(r.status, 429);
    let wait = retry_after(&r);
    assert!(
        wait <= Duration::from_millis(600) && wait > Duration::ZERO,
        "{wait:?}"
    );
    assert!(
        r.header("retry-after").unwrap().contains('.'),
        "fractional real seconds"
    );
    tokio::time::sleep(wait + Duration::from_millis(20)).await;
    assert_eq!(
        anthropic(&server, &body).await.status,
        200,
        "waiting the advertised time is enough"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn acceleration_after_idle_gives_slow_down() {
    let cfg = MockConfig {
        acceleration: Some(AccelerationConfig {
            idle_secs: 60.0,
            window_secs: 30.0,
            max_requests: 3,
        }),
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    for _ in 0..3 {
        assert_eq!(
            openai(&server, &openai_body("x", 10, false)).await.status,
            200
        );
    }
    let r = openai(&server, &openai_body("x", 10, false)).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["code"], "slow_down");
    assert!(retry_after(&r) >= Duration::from_secs(1));
    for _ in 0..3 {
        assert_eq!(
            anthropic(&server, &anthropic_body("x", 10, false))
                .await
                .status,
            200
        );
    }
    let r = anthropic(&server, &anthropic_body("x", 10, false)).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("sharply"));
    let causes: Vec<Cause> = server.records().iter().map(|r| r.cause).collect();
    assert_eq!(
        causes
            .iter()
            .filter(|c| **c == Cause::AccelerationLimited)
            .count(),
        2
    );
    server.shutdown().await;
}

#[tokio::test]
async fn spend_cap_stops_every_answer() {
    let mut cfg = MockConfig::default();
    cfg.spend.cap_usd = Some(0.000_01); // a single small request crosses it
    let server = MockServer::start(cfg).await.unwrap();
    assert_eq!(
        anthropic(&server, &anthropic_body("x", 10, false))
            .await
            .status,
        200
    );
    assert!(server.spend_usd() >= 0.000_01);
    let r = anthropic(&server, &anthropic_body("x", 10, false)).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), None);
    let v = r.json();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert_eq!(
        v["error"]["details"]["error_code"],
        "enforced_spend_limit_reached"
    );
    let r = openai(&server, &openai_body("x", 10, false)).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["code"], "insufficient_quota");
    assert_eq!(r.json()["error"]["type"], "insufficient_quota");
    let causes: Vec<Cause> = server.records().iter().map(|r| r.cause).collect();
    assert_eq!(causes, [Cause::Success, Cause::SpendCap, Cause::SpendCap]);
    server.set_spend_cap(None);
    assert_eq!(
        anthropic(&server, &anthropic_body("x", 10, false))
            .await
            .status,
        200
    );
    server.shutdown().await;
}

#[tokio::test]
async fn billing_402_on_demand() {
    let server = MockServer::start(MockConfig::default()).await.unwrap();
    server.set_billing_error(true);
    let r = anthropic(&server, &anthropic_body("x", 10, false)).await;
    assert_eq!(r.status, 402);
    assert_eq!(r.json()["error"]["type"], "billing_error");
    let r = openai(&server, &openai_body("x", 10, false)).await;
    assert_eq!(r.status, 402);
    server.set_billing_error(false);
    assert_eq!(
        anthropic(&server, &anthropic_body("x", 10, false))
            .await
            .status,
        200
    );
    // the same switch over HTTP, for the binary
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let req = http::Request::put(format!("{}/mock/billing", server.base_url()))
        .body(http_body_util::Full::new(bytes::Bytes::from_static(
            b"true",
        )))
        .unwrap();
    assert_eq!(client.request(req).await.unwrap().status(), 204);
    assert_eq!(
        anthropic(&server, &anthropic_body("x", 10, false))
            .await
            .status,
        402
    );
    server.shutdown().await;
}

#[tokio::test]
async fn records_count_sends_per_job_and_hide_keys() {
    let mut cfg = MockConfig::default();
    cfg.key_labels.insert("sk-labelled".into(), "team-a".into());
    let server = MockServer::start(cfg).await.unwrap();
    for attempt in ["1", "2"] {
        post(
            &server,
            "/v1/messages",
            "sk-secret-key",
            &anthropic_body("x", 10, false),
            &[(JOB_HEADER, "job-7"), (ATTEMPT_HEADER, attempt)],
        )
        .await;
    }
    post(
        &server,
        "/v1/messages",
        "sk-labelled",
        &anthropic_body("x", 10, false),
        &[(JOB_HEADER, "job-8")],
    )
    .await;
    let recs = server.records();
    let per_job = sends_per_job(&recs);
    assert_eq!(per_job.get("job-7"), Some(&2));
    assert_eq!(per_job.get("job-8"), Some(&1));
    assert_eq!(recs[1].attempt, Some(2));
    assert_eq!(recs[2].key, "team-a");
    assert!(recs[0].key.starts_with("k:") && recs[0].key.len() == 10);
    let json = serde_json::to_string(&recs).unwrap();
    assert!(!json.contains("sk-secret-key") && !json.contains("sk-labelled"));
    server.clear_records();
    assert!(server.records().is_empty());
    server.shutdown().await;
}
