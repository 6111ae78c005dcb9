//! Invariants of the decision core, over generated inputs.

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use proptest::prelude::*;
use ratewise_core::classify::{classify_response, ResponseView};
use ratewise_core::decide::{decide, JobState, Policy};
use ratewise_core::parse::{body, duration, message, ratelimit, request_id, retry_after};
use ratewise_core::time::parse_rfc3339;
use ratewise_core::{Action, ActionKind, Cause, Instant, Now, Provider};
use std::time::{Duration, SystemTime};

fn wall() -> SystemTime {
    parse_rfc3339("2026-11-29T12:00:00Z").unwrap()
}

fn provider() -> impl Strategy<Value = Provider> {
    prop::sample::select(Provider::ALL.to_vec())
}

fn headers(pairs: &[(String, Vec<u8>)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (k, v) in pairs {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_bytes(v),
        ) {
            map.append(k, v);
        }
    }
    map
}

fn header_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        any::<u32>().prop_map(|n| n.to_string().into_bytes()),
        "[0-9]{0,3}\\.[0-9]{0,4}".prop_map(String::into_bytes),
        prop_oneof![
            Just("NaN"),
            Just("inf"),
            Just("-1"),
            Just("-0.5"),
            Just("1e3"),
            Just("true"),
            Just("false"),
            Just("Sun, 29 Nov 2026 12:00:30 GMT"),
            Just("2026-11-29T12:00:04Z"),
            Just("6m0s")
        ]
        .prop_map(|s| s.as_bytes().to_vec()),
        proptest::collection::vec(0x20u8..0x7f, 0..40),
    ]
}

fn header_pairs() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    let names = prop_oneof![
        Just("retry-after"),
        Just("retry-after-ms"),
        Just("x-should-retry"),
        Just("request-id"),
        Just("x-request-id"),
        Just("anthropic-ratelimit-input-tokens-remaining"),
        Just("anthropic-ratelimit-input-tokens-reset"),
        Just("anthropic-ratelimit-requests-limit"),
        Just("x-ratelimit-reset-tokens"),
        Just("x-ratelimit-remaining-requests"),
    ];
    proptest::collection::vec((names.prop_map(str::to_owned), header_value()), 0..6)
}

const MONEY_BODIES: &[(Provider, u16, &str)] = &[
    (
        Provider::Anthropic,
        429,
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"m","details":{"error_code":"enforced_spend_limit_reached"}}}"#,
    ),
    (
        Provider::Anthropic,
        402,
        r#"{"type":"error","error":{"type":"billing_error","message":"m"}}"#,
    ),
    (
        Provider::Anthropic,
        400,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits."}}"#,
    ),
    (
        Provider::Openai,
        429,
        r#"{"error":{"message":"q","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#,
    ),
    (
        Provider::Openai,
        429,
        r#"{"error":{"message":"q","type":"requests","param":null,"code":"organization_spend_limit_exceeded"}}"#,
    ),
    (
        Provider::Openai,
        429,
        r#"{"error":{"message":"q","type":"x","param":null,"code":"credit_balance_exhausted"}}"#,
    ),
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A retry never comes before a valid hint.
    #[test]
    fn retry_delay_is_never_below_a_valid_hint(
        p in provider(),
        status in prop_oneof![Just(429u16), Just(503), Just(529), Just(500), Just(408)],
        secs in 0u32..100_000,
        seed in any::<u64>(),
        attempts in 1u32..3,
    ) {
        let map = headers(&[("retry-after".into(), secs.to_string().into_bytes())]);
        let body = match p {
            Provider::Anthropic => r#"{"type":"error","error":{"type":"rate_limit_error","message":"x"}}"#,
            // A shorter structured delay beside the header: the header wins.
            Provider::Gemini => r#"{"error":{"code":429,"message":"x","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"0.5s"}]}}"#,
            _ => r#"{"error":{"message":"x","type":"tokens","code":"rate_limit_exceeded"}}"#,
        };
        let view = ResponseView { status: StatusCode::from_u16(status).unwrap(), headers: &map, body: body.as_bytes() };
        let c = classify_response(p, &view, wall());
        let now = Now::new(Instant::ZERO, wall());
        let d = decide(&Policy::default(), &JobState::new(attempts, Instant::ZERO, None), &c, now, &mut fastrand::Rng::with_seed(seed));
        let hint = Duration::from_secs(u64::from(secs));
        // Every case asserts: a send again is never before the hint, and
        // an answer with a hint is never read as done or unknown.
        match d.action {
            Action::Retry { delay } => prop_assert!(delay >= hint, "{delay:?} < {secs}s"),
            Action::Defer { until, not_before } => {
                prop_assert!(not_before >= now.instant + hint, "not_before {not_before:?} < {secs}s");
                prop_assert!(until >= now.wall + hint, "until before the hint");
            }
            ref other => prop_assert!(
                matches!(other, Action::GiveUp { .. } | Action::StopQueue { .. } | Action::Fail | Action::Inspect),
                "{other:?}"
            ),
        }
    }

    /// Spend cap, billing or a self-set limit never yields a retry, whatever the headers.
    #[test]
    fn money_never_retries(which in 0..MONEY_BODIES.len(), pairs in header_pairs(), seed in any::<u64>(), attempts in 0u32..5) {
        let (p, status, body) = MONEY_BODIES[which];
        let map = headers(&pairs);
        let view = ResponseView { status: StatusCode::from_u16(status).unwrap(), headers: &map, body: body.as_bytes() };
        let c = classify_response(p, &view, wall());
        prop_assert!(c.cause.is_money(), "{:?}", c.cause);
        let d = decide(&Policy::default(), &JobState::new(attempts, Instant::ZERO, None), &c, Now::new(Instant::ZERO, wall()), &mut fastrand::Rng::with_seed(seed));
        prop_assert_eq!(d.action.kind(), ActionKind::StopQueue);
    }

    /// No retry once attempts are spent (a rate signal with a hint, for a
    /// job with a deadline, is paced, not counted: `decide::paced`) or the
    /// deadline has passed; and a retry always fits the deadline.
    #[test]
    fn no_retry_past_attempts_or_deadline(
        p in provider(),
        status in prop_oneof![Just(429u16), Just(500), Just(502), Just(503), Just(529), Just(408), Just(409)],
        pairs in header_pairs(),
        attempts in 0u32..6,
        deadline_ms in proptest::option::of(0u64..120_000),
        elapsed_ms in 0u64..200_000,
        seed in any::<u64>(),
    ) {
        let map = headers(&pairs);
        let view = ResponseView { status: StatusCode::from_u16(status).unwrap(), headers: &map, body: b"" };
        let c = classify_response(p, &view, wall());
        let policy = Policy::default();
        let job = JobState::new(attempts, Instant::ZERO, deadline_ms.map(Duration::from_millis));
        let now = Now::new(Instant::from_millis(elapsed_ms), wall());
        let d = decide(&policy, &job, &c, now, &mut fastrand::Rng::with_seed(seed));
        if let Some(delay) = d.action.delay() {
            prop_assert!(attempts < policy.max_attempts || ratewise_core::decide::paced(&c, &job));
            if let Some(dl) = deadline_ms {
                prop_assert!(elapsed_ms as u128 + delay.as_millis() <= dl as u128);
            }
            prop_assert!(delay >= Duration::from_millis(1));
        }
    }

    /// Invalid hints never yield a zero delay (throttling: never below 1 s).
    #[test]
    fn invalid_hints_never_zero(junk in "[^0-9]{1,20}|-[0-9]{1,5}|NaN|inf|[0-9]+e[0-9]", seed in any::<u64>()) {
        let map = headers(&[("retry-after".into(), junk.clone().into_bytes()), ("retry-after-ms".into(), junk.into_bytes())]);
        let body = r#"{"type":"error","error":{"type":"rate_limit_error","message":"x"}}"#;
        let view = ResponseView { status: StatusCode::TOO_MANY_REQUESTS, headers: &map, body: body.as_bytes() };
        let c = classify_response(Provider::Anthropic, &view, wall());
        let d = decide(&Policy::default(), &JobState::new(1, Instant::ZERO, None), &c, Now::new(Instant::ZERO, wall()), &mut fastrand::Rng::with_seed(seed));
        if let Some(delay) = d.action.delay() {
            prop_assert!(delay >= Duration::from_secs(1), "{delay:?}");
        }
    }

    /// Every parser is total on arbitrary bytes.
    #[test]
    fn parsers_are_total(bytes in proptest::collection::vec(any::<u8>(), 0..300), status in 100u16..600, p in provider()) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = retry_after::parse_retry_after(&bytes, wall());
        let _ = retry_after::parse_retry_after_ms(&bytes);
        let _ = retry_after::parse_should_retry(&bytes);
        let _ = duration::parse_go_duration(&text);
        let _ = ratelimit::parse_count(&bytes);
        let _ = ratelimit::parse_instant(&bytes);
        let _ = body::parse_error_body(&bytes);
        let _ = body::parse_usage(&bytes);
        let _ = message::try_again_in(&text);
        let _ = message::too_large_for_limit(&text);
        let mut map = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_bytes(&bytes) {
            for name in ["retry-after", "retry-after-ms", "x-should-retry", "request-id", "anthropic-ratelimit-tokens-reset", "x-ratelimit-reset-requests", "x-ratelimit-limit-tokens"] {
                map.insert(name, v.clone());
            }
        }
        let _ = request_id::request_id_from_headers(&map);
        let view = ResponseView { status: StatusCode::from_u16(status).unwrap(), headers: &map, body: &bytes };
        let c = classify_response(p, &view, wall());
        let _ = decide(&Policy::default(), &JobState::new(1, Instant::ZERO, Some(Duration::from_secs(30))), &c, Now::new(Instant::ZERO, wall()), &mut fastrand::Rng::with_seed(1));
    }

    /// A formatted Go duration parses back to itself.
    #[test]
    fn go_durations_round_trip(micros in 0u64..10_000_000_000_000) {
        let d = Duration::from_micros(micros);
        prop_assert_eq!(duration::parse_go_duration(&duration::format_go_duration(d)), Ok(d));
    }
}

#[test]
fn spend_cap_is_classified_as_money_with_every_status_it_comes_with() {
    // Not a property, a reminder: the cap is read from the body.
    let map = HeaderMap::new();
    let (_, _, body) = MONEY_BODIES[0];
    let view = ResponseView {
        status: StatusCode::TOO_MANY_REQUESTS,
        headers: &map,
        body: body.as_bytes(),
    };
    assert_eq!(
        classify_response(Provider::Anthropic, &view, wall()).cause,
        Cause::SpendCap
    );
}
