//! What providers leave open, over loopback: buckets shorter than a minute
//! (`capacity_seconds`), rejected requests that count (`count_rejected`),
//! and requests larger than a whole bucket. The headers stay truthful:
//! `*-limit` per minute, `*-remaining` the level, `*-reset` when that bucket
//! is full again.

mod common;
use common::*;
use ratewise_core::parse::ratelimit::RateLimitSnapshot;
use ratewise_core::parse::retry_after::parse_retry_after;
use ratewise_core::{Dimension, Provider};
use ratewise_mock::{Limits, MockConfig, MockServer};
use std::time::{Duration, Instant, SystemTime};

fn window(r: &Reply, provider: Provider, d: Dimension) -> (u64, u64, Duration) {
    let snap = RateLimitSnapshot::from_headers(&r.headers, provider);
    assert!(snap.rejected.is_empty(), "{:?}", snap.rejected);
    let w = snap.window(d);
    (
        w.limit.expect("limit"),
        w.remaining.expect("remaining"),
        w.reset.expect("reset").wait_from(SystemTime::now()),
    )
}

fn retry_after(r: &Reply) -> Duration {
    parse_retry_after(
        r.header("retry-after").expect("retry-after").as_bytes(),
        SystemTime::now(),
    )
    .expect("valid retry-after")
}

#[tokio::test]
async fn a_ten_second_bucket_admits_ten_seconds_of_a_burst_and_says_so() {
    // A provider minute lasts 10 real minutes, so a slow machine adds
    // little refill: 120 RPM is 0.2 requests per real second, and the
    // 10 s bucket (20 requests) refills in 100 real seconds.
    let cfg = MockConfig {
        seconds_per_minute: 600.0,
        capacity_seconds: 10.0,
        anthropic_limits: Limits {
            requests_per_minute: Some(120),
            ..Limits::default()
        },
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let started = Instant::now();
    let mut ok = 0;
    let mut first_429 = None;
    for i in 0..40 {
        let r = anthropic(&server, &anthropic_body(&format!("job {i}"), 10, false)).await;
        let (limit, remaining, reset) = window(&r, Provider::Anthropic, Dimension::Requests);
        assert_eq!(limit, 120, "the limit header stays per minute");
        assert!(remaining < 20, "{remaining}");
        // ≤ 10 provider seconds = 100 real seconds (+ the ms rounding)
        assert!(reset <= Duration::from_millis(100_001), "{reset:?}");
        match r.status {
            200 => ok += 1,
            429 => {
                assert_eq!(remaining, 0);
                first_429.get_or_insert(r);
            }
            s => panic!("status {s}"),
        }
    }
    let refill = (started.elapsed().as_secs_f64() * 0.2).ceil() as u64;
    assert!(ok >= 20 && ok <= 20 + refill, "{ok} admitted");
    let r = first_429.expect("a burst of 40 is refused past 20");
    // one request is 0.5 provider seconds away: whole seconds, so 1 s = 10 s real
    let wait = retry_after(&r);
    assert!(wait <= Duration::from_secs(10), "{wait:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn openai_counts_rejected_requests_and_admits_one_larger_than_the_bucket() {
    // 60 RPM and 60 000 TPM over 2 s: 2 requests and 2000 tokens.
    let cfg = MockConfig {
        seconds_per_minute: 600.0,
        capacity_seconds: 2.0,
        count_rejected: true,
        openai_limits: Limits {
            requests_per_minute: Some(60),
            tokens_per_minute: Some(60_000),
            ..Limits::default()
        },
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    // input + max_tokens = 4 + 4096, above the whole bucket: admitted
    // by the full bucket, which is left in debt.
    let big = openai_body("a larger request", 4096, false);
    let r = openai(&server, &big).await;
    assert_eq!(r.status, 200);
    let (limit, remaining, reset) = window(&r, Provider::Openai, Dimension::Tokens);
    assert_eq!((limit, remaining), (60_000, 0));
    // debt ~2100 and the 2000 of the bucket at 1000 per provider second:
    // ~4.1 provider seconds = ~41 real seconds (the headers are taken at
    // admission, before the output correction)
    assert!(
        reset > Duration::from_secs(35) && reset <= Duration::from_secs(42),
        "{reset:?}"
    );
    // The answer's end corrected max_tokens to the actual output (≤ 50),
    // paying the debt back, but the bucket is not full: the same request
    // waits for a full one.
    let r = openai(&server, &big).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["type"], "tokens");
    let (_, tokens_left, _) = window(&r, Provider::Openai, Dimension::Tokens);
    assert!(tokens_left > 1900 && tokens_left < 2000, "{tokens_left}");
    // the refused request took a request
    let (_, requests_left, _) = window(&r, Provider::Openai, Dimension::Requests);
    assert_eq!(requests_left, 0, "2 requests: one admitted, one refused");
    // every further refusal digs the request bucket deeper: its reset
    // moves out by a provider second (10 real seconds) each time
    let small = openai_body("x", 10, false);
    let mut resets = Vec::new();
    for _ in 0..3 {
        let r = openai(&server, &small).await;
        assert_eq!(r.status, 429);
        assert_eq!(r.json()["error"]["type"], "requests");
        resets.push(window(&r, Provider::Openai, Dimension::Requests).2);
    }
    // ... and no tokens: the token bucket only refilled
    let r = openai(&server, &small).await;
    let (_, tokens_now, _) = window(&r, Provider::Openai, Dimension::Tokens);
    assert!(tokens_now >= tokens_left, "{tokens_now} < {tokens_left}");
    for pair in resets.windows(2) {
        let step = pair[1].saturating_sub(pair[0]);
        assert!(
            step > Duration::from_secs(9) && step <= Duration::from_secs(10),
            "{resets:?}"
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn without_count_rejected_refusals_cost_nothing() {
    let cfg = MockConfig {
        seconds_per_minute: 600.0,
        capacity_seconds: 2.0,
        openai_limits: Limits {
            requests_per_minute: Some(60),
            ..Limits::default()
        },
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let body = openai_body("x", 10, false);
    for _ in 0..2 {
        assert_eq!(openai(&server, &body).await.status, 200);
    }
    let mut resets = Vec::new();
    for _ in 0..3 {
        let r = openai(&server, &body).await;
        assert_eq!(r.status, 429);
        resets.push(window(&r, Provider::Openai, Dimension::Requests).2);
    }
    // the bucket refills from the last success: never more than 2 provider
    // seconds (20 real seconds) away, and not moving out
    assert!(resets.iter().all(|r| *r <= Duration::from_millis(20_001)));
    assert!(resets[2] <= resets[0], "{resets:?}");
    server.shutdown().await;
}
