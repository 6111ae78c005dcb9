//! classify + decide of a typical 429, per provider. Target: well under 1 µs.
//!
//! `cargo bench -p ratewise-core --bench decide`

use criterion::{criterion_group, criterion_main, Criterion};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use ratewise_core::classify::{classify_response, ResponseView};
use ratewise_core::decide::{decide, JobState, Policy};
use ratewise_core::{Instant, Now, Provider};
use std::hint::black_box;
use std::time::{Duration, SystemTime};

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (k, v) in pairs {
        map.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    map
}

fn bench(c: &mut Criterion) {
    let anthropic_headers = headers(&[
        ("request-id", "req_011CVrl1"),
        ("retry-after", "8"),
        ("x-should-retry", "true"),
        ("anthropic-ratelimit-requests-limit", "50"),
        ("anthropic-ratelimit-requests-remaining", "31"),
        ("anthropic-ratelimit-requests-reset", "2026-11-29T12:00:04Z"),
        ("anthropic-ratelimit-input-tokens-limit", "30000"),
        ("anthropic-ratelimit-input-tokens-remaining", "0"),
        (
            "anthropic-ratelimit-input-tokens-reset",
            "2026-11-29T12:00:08Z",
        ),
        ("anthropic-ratelimit-output-tokens-limit", "8000"),
        ("anthropic-ratelimit-output-tokens-remaining", "8000"),
        (
            "anthropic-ratelimit-output-tokens-reset",
            "2026-11-29T12:00:00Z",
        ),
    ]);
    let anthropic_body = br#"{"type": "error", "error": {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your per-minute rate limit"}, "request_id": "req_011CVrl1"}"#;
    let openai_headers = headers(&[
        ("x-request-id", "req_abc123"),
        ("retry-after", "2"),
        ("x-ratelimit-limit-tokens", "200000"),
        ("x-ratelimit-remaining-tokens", "0"),
        ("x-ratelimit-reset-tokens", "1.146s"),
    ]);
    let openai_body = br#"{"error": {"message": "Rate limit reached for gpt-4o-mini in organization org-x on tokens per min (TPM): Limit 200000, Used 195869, Requested 4412. Please try again in 1.146s.", "type": "tokens", "param": null, "code": "rate_limit_exceeded"}}"#;

    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_953_600);
    let now = Now::new(Instant::ZERO, wall);
    let policy = Policy::default();
    let job = JobState::new(1, Instant::ZERO, Some(Duration::from_secs(600)));
    let mut rng = fastrand::Rng::with_seed(1);

    let mut group = c.benchmark_group("classify+decide 429");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (name, provider, headers, body) in [
        (
            "anthropic",
            Provider::Anthropic,
            &anthropic_headers,
            &anthropic_body[..],
        ),
        (
            "openai",
            Provider::Openai,
            &openai_headers,
            &openai_body[..],
        ),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let view = ResponseView {
                    status: StatusCode::TOO_MANY_REQUESTS,
                    headers: black_box(headers),
                    body: black_box(body),
                };
                let c = classify_response(provider, &view, wall);
                black_box(decide(&policy, &job, &c, now, &mut rng))
            })
        });
    }
    group.finish();

    // Where the time goes, for the Anthropic 429.
    let mut parts = c.benchmark_group("parts (anthropic 429)");
    parts
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    parts.bench_function("rate-limit headers", |b| {
        b.iter(|| {
            ratewise_core::parse::ratelimit::RateLimitSnapshot::from_headers(
                black_box(&anthropic_headers),
                Provider::Anthropic,
            )
        })
    });
    parts.bench_function("error body", |b| {
        b.iter(|| ratewise_core::parse::body::parse_error_body(black_box(&anthropic_body[..])))
    });
    let view = ResponseView {
        status: StatusCode::TOO_MANY_REQUESTS,
        headers: &anthropic_headers,
        body: &anthropic_body[..],
    };
    let classified = classify_response(Provider::Anthropic, &view, wall);
    parts.bench_function("classify", |b| {
        b.iter(|| classify_response(Provider::Anthropic, black_box(&view), wall))
    });
    parts.bench_function("decide", |b| {
        b.iter(|| decide(&policy, &job, black_box(&classified), now, &mut rng))
    });
    parts.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
