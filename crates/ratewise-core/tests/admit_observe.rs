//! `Controller::observe`: real responses, classified and decided by the
//! core, applied to the shared admission state.

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use ratewise_core::admit::{Admission, AdmitRequest, Config, Controller, Limits, WaitReason};
use ratewise_core::classify::{classify_response, Classification, ResponseView};
use ratewise_core::decide::{decide, JobState, Policy};
use ratewise_core::{Action, Cause, Decision, GiveUpReason, Instant, Now, Provider};
use std::time::Duration;

fn now_at(ms: u64) -> Now {
    let wall0 = ratewise_core::time::parse_rfc3339("2026-11-29T12:00:00Z").unwrap();
    Now::new(Instant::from_millis(ms), wall0 + Duration::from_millis(ms))
}

fn respond(
    provider: Provider,
    status: u16,
    headers: &[(&str, &str)],
    body: &str,
    now: Now,
) -> (Classification, Decision) {
    let mut h = HeaderMap::new();
    for (k, v) in headers {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    let view = ResponseView {
        status: StatusCode::from_u16(status).unwrap(),
        headers: &h,
        body: body.as_bytes(),
    };
    let c = classify_response(provider, &view, now.wall);
    let job = JobState::new(1, now.instant, None);
    let d = decide(
        &Policy::default(),
        &job,
        &c,
        now,
        &mut fastrand::Rng::with_seed(7),
    );
    (c, d)
}

fn controller() -> Controller {
    Controller::new(Config {
        limits: Limits {
            requests: Some(600),
            ..Limits::NONE
        },
        ..Config::default()
    })
}

const RATE_LIMIT_BODY: &str = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;

#[test]
fn a_hinted_429_pauses_the_bucket_and_syncs_headers() {
    let mut c = controller();
    let target = c.target("k", "claude-sonnet-4-5");
    let t = now_at(0);
    let (cl, d) = respond(
        Provider::Anthropic,
        429,
        &[
            ("retry-after", "8"),
            ("anthropic-ratelimit-input-tokens-limit", "30000"),
            ("anthropic-ratelimit-input-tokens-remaining", "0"),
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "31"),
        ],
        RATE_LIMIT_BODY,
        t,
    );
    assert_eq!(cl.cause, Cause::RateLimited);
    let d = c.observe(target.scope, &cl, d, t);
    assert!(matches!(d.action, Action::Retry { .. }));
    let snap = c.snapshot(target.scope, t).unwrap();
    assert_eq!(snap.limits.requests, Some(50), "limit learned, lower wins");
    assert_eq!(snap.limits.input_tokens, Some(30_000));
    assert_eq!(snap.paused_until, Some(Instant::from_millis(8_000)));
    // Every job on the bucket waits, including first attempts.
    match c.admit(&AdmitRequest::new(target), now_at(1_000)) {
        Admission::Wait {
            until,
            reason: WaitReason::Paused,
        } => assert!(until >= Instant::from_millis(8_000)),
        other => panic!("{other:?}"),
    }
    // Another class on the same key is not paused.
    let haiku = c.target("k", "claude-haiku-4-5");
    assert!(c
        .admit(&AdmitRequest::new(haiku), now_at(1_000))
        .go()
        .is_some());
}

#[test]
fn slow_down_cuts_the_rate_of_the_key() {
    let mut c = controller();
    let target = c.target("k", "gpt-4o");
    let t = now_at(0);
    // Ramp to full first.
    for i in 0..10 {
        let now = now_at(i * 1_000);
        let r = c.admit(&AdmitRequest::new(target), now).go().unwrap();
        c.settle(r, &Default::default(), now);
    }
    assert_eq!(c.snapshot(target.scope, t).unwrap().ramp_permille, 1000);
    let (cl, d) = respond(
        Provider::Openai,
        429,
        &[("retry-after", "2")],
        r#"{"error":{"message":"Please reduce the rate at which you send requests.","type":"rate_limit_error","param":null,"code":"slow_down"}}"#,
        now_at(10_000),
    );
    assert_eq!(cl.cause, Cause::AccelerationLimited);
    let d = c.observe(target.scope, &cl, d, now_at(10_000));
    assert!(matches!(d.action, Action::Retry { .. }));
    assert_eq!(
        c.snapshot(target.scope, now_at(10_000))
            .unwrap()
            .ramp_permille,
        500
    );
}

#[test]
fn a_spend_cap_stops_the_key_until_the_reset() {
    let mut c = controller();
    let target = c.target("k", "claude-sonnet-4-5");
    let opus = c.target("k", "claude-opus-4-1");
    let t = now_at(0);
    let (cl, d) = respond(
        Provider::Anthropic,
        429,
        &[],
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your API usage limits. You will regain access on 2026-12-01 at 00:00 UTC.","details":{"error_code":"enforced_spend_limit_reached"}}}"#,
        t,
    );
    let d = c.observe(target.scope, &cl, d, t);
    let until = ratewise_core::time::parse_rfc3339("2026-12-01T00:00:00Z").unwrap();
    assert_eq!(d.action, Action::StopQueue { until: Some(until) });
    for s in [target, opus] {
        assert_eq!(
            c.admit(&AdmitRequest::new(s), now_at(60_000)),
            Admission::Stopped {
                cause: Cause::SpendCap,
                until: Some(until)
            }
        );
    }
}

#[test]
fn a_retry_becomes_give_up_when_the_retry_budget_is_spent() {
    let mut c = Controller::new(Config {
        retry_budget: ratewise_core::admit::RetryBudgetConfig {
            min_retries: 0,
            ..Default::default()
        },
        ..Config::default()
    });
    let target = c.target("k", "m");
    let t = now_at(0);
    let (cl, d) = respond(
        Provider::Anthropic,
        500,
        &[],
        r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#,
        t,
    );
    assert!(matches!(d.action, Action::Retry { .. }));
    let d = c.observe(target.scope, &cl, d, t);
    assert_eq!(
        d.action,
        Action::GiveUp {
            reason: GiveUpReason::RetryBudget
        }
    );
}
