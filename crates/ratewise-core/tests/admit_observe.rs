//! `Controller::observe`: real responses, classified and decided by the
//! core, applied to the shared admission state.

mod common;

use common::{now_at, respond};
use ratewise_core::admit::{
    Admission, AdmitRequest, Config, Controller, Limits, Observed, Update, WaitReason,
};
use ratewise_core::classify::Classification;
use ratewise_core::{Action, Cause, Decision, Instant, Now, Provider, RetryBudgetState};
use std::time::Duration;

fn controller() -> Controller {
    Controller::new({
        let mut config = Config::default();
        config.limits = Limits {
            requests: Some(600),
            ..Limits::NONE
        };
        // These tests read views against a known minute-long credit.
        config.burst =
            ratewise_core::admit::Burst::default().with_known_credit(Duration::from_secs(60));
        config
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
    let d = c.observe(&Observed::new(target.scope, cl.clone(), d), t);
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
    // Ramp to the peak first (nine calm seconds to full, one more to it).
    for i in 0..11 {
        let now = now_at(i * 1_000);
        let r = c.admit(&AdmitRequest::new(target), now).go().unwrap();
        c.settle(r, &Default::default(), now);
    }
    assert_eq!(c.snapshot(target.scope, t).unwrap().ramp_permille, 1200);
    let (cl, d) = respond(
        Provider::Openai,
        429,
        &[("retry-after", "2")],
        r#"{"error":{"message":"Please reduce the rate at which you send requests.","type":"rate_limit_error","param":null,"code":"slow_down"}}"#,
        now_at(10_000),
    );
    assert_eq!(cl.cause, Cause::AccelerationLimited);
    let d = c.observe(&Observed::new(target.scope, cl.clone(), d), now_at(10_000));
    assert!(matches!(d.action, Action::Retry { .. }));
    assert_eq!(
        c.snapshot(target.scope, now_at(10_000))
            .unwrap()
            .ramp_permille,
        600
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
    let d = c.observe(&Observed::new(target.scope, cl.clone(), d), t);
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

/// The store keeps the retry budget and reports its state; it never
/// changes the decision's action (that is `decide`'s: see
/// `job_machine.rs`, `a_retry_against_a_spent_retry_budget_gives_up`).
#[test]
fn the_store_reports_a_spent_retry_budget_and_leaves_the_action_alone() {
    let mut c = Controller::new({
        let mut config = Config::default();
        config.retry_budget = {
            let mut budget = ratewise_core::admit::RetryBudgetConfig::default();
            budget.min_retries = 0;
            budget
        };
        config
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
    let update = Update::answer(Observed::new(target.scope, cl.clone(), d.clone()), None);
    let applied = c.apply(&update, t).expect("an answer's update answers");
    assert_eq!(applied.retry_budget, RetryBudgetState::Spent);
    assert_eq!(applied.decision.action, d.action, "the action is decide's");
    assert!(
        applied
            .decision
            .notes
            .iter()
            .any(|n| n.to_string().contains("0 retries for 0 first attempts")),
        "{:?}",
        applied.decision.notes
    );

    // With room in the budget (the default's ten retries a window), the
    // state says so.
    let mut c = Controller::new(Config::default());
    let target = c.target("k", "m");
    let update = Update::answer(Observed::new(target.scope, cl, d), None);
    let applied = c.apply(&update, t).expect("an answer's update answers");
    assert_eq!(applied.retry_budget, RetryBudgetState::Available);
}

fn sonnet_at_full_rate(limits: Limits) -> (Controller, ratewise_core::admit::Target) {
    let mut c = Controller::new({
        let mut config = Config::default();
        config.limits = limits;
        config.ramp = {
            let mut ramp = ratewise_core::admit::RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        config
    });
    let target = c.target("k", "claude-sonnet-4-5");
    (c, target)
}

fn ok_with(headers: &[(&str, &str)], now: Now) -> (Classification, Decision) {
    respond(
        Provider::Anthropic,
        200,
        headers,
        r#"{"type":"message","content":[],"usage":{"input_tokens":1,"output_tokens":1}}"#,
        now,
    )
}

fn input_request(target: ratewise_core::admit::Target, input: u64) -> AdmitRequest {
    let mut req = AdmitRequest::new(target);
    req.input_estimate = Some(input);
    req.max_tokens = Some(1);
    req
}

#[test]
fn remaining_zero_with_a_reset_admits_nothing_before_the_server_has_refilled() {
    // 20 RPM, and the server is empty and full again in 3 s: consistent
    // with its rate (one request per 3 s), so nothing goes before 3 s.
    let (mut c, target) = sonnet_at_full_rate(Limits {
        requests: Some(20),
        ..Limits::NONE
    });
    let t = now_at(0);
    let (cl, d) = ok_with(
        &[
            ("anthropic-ratelimit-requests-limit", "20"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", "2026-11-29T12:00:03Z"),
        ],
        t,
    );
    c.observe(&Observed::new(target.scope, cl.clone(), d), t);
    for ms in [0, 1_000, 2_999] {
        match c.admit(&AdmitRequest::new(target), now_at(ms)) {
            // The server's line reaches one request at 3 s (plus the edge
            // margin).
            Admission::Wait { until, .. } => {
                assert_eq!(until, Instant::from_millis(3_000) + EDGE_MARGIN)
            }
            other => panic!("at {ms} ms: {other:?}"),
        }
    }
    assert!(c
        .admit(&AdmitRequest::new(target), now_at(3_000))
        .go()
        .is_some());
}

#[test]
fn a_reset_corrects_a_remaining_rounded_up_to_thousands() {
    // 90 000 ITPM = 1 500 per second. The server says 3 000 left (rounded),
    // but full again only in 61 s: a minute's refill away, so it really
    // holds next to nothing. A 1 500-token prompt waits a second for it.
    let headers = [
        ("anthropic-ratelimit-input-tokens-limit", "90000"),
        ("anthropic-ratelimit-input-tokens-remaining", "3000"),
        (
            "anthropic-ratelimit-input-tokens-reset",
            "2026-11-29T12:01:01Z",
        ),
    ];
    let limits = Limits {
        input_tokens: Some(90_000),
        ..Limits::NONE
    };
    let (mut c, target) = sonnet_at_full_rate(limits);
    let t = now_at(0);
    let (cl, d) = ok_with(&headers, t);
    c.observe(&Observed::new(target.scope, cl.clone(), d), t);
    assert_eq!(c.snapshot(target.scope, t).unwrap().levels[1], Some(0));
    match c.admit(&input_request(target, 1_500), t) {
        Admission::Wait {
            until,
            reason: WaitReason::Bucket(ratewise_core::Dimension::InputTokens),
        } => assert_eq!(until, Instant::from_millis(1_000) + EDGE_MARGIN),
        other => panic!("{other:?}"),
    }
    // Without the reset, the rounded remaining alone admits it at once.
    let (mut c, target) = sonnet_at_full_rate(limits);
    let (cl, d) = ok_with(&headers[..2], t);
    c.observe(&Observed::new(target.scope, cl.clone(), d), t);
    assert!(c.admit(&input_request(target, 1_500), t).go().is_some());
}

#[test]
fn a_reset_in_the_past_or_too_far_ahead_changes_nothing() {
    let limits = Limits {
        requests: Some(60),
        ..Limits::NONE
    };
    for reset in [
        "2026-11-29T11:59:00Z", // passed a minute ago
        "2026-11-29T12:00:00Z", // now
        "2026-11-29T12:06:00Z", // six minutes: not a per-minute bucket
        "2027-01-01T00:00:00Z", // absurd
    ] {
        let (mut c, target) = sonnet_at_full_rate(limits);
        let t = now_at(0);
        let before = c.snapshot(target.scope, t).unwrap().levels;
        let (cl, d) = ok_with(
            &[
                ("anthropic-ratelimit-requests-limit", "60"),
                ("anthropic-ratelimit-requests-reset", reset),
            ],
            t,
        );
        c.observe(&Observed::new(target.scope, cl.clone(), d), t);
        assert_eq!(
            c.snapshot(target.scope, t).unwrap().levels,
            before,
            "{reset}"
        );
    }
    // OpenAI's per-day style "6m0s" request reset is ignored the same way.
    let (mut c, target) = sonnet_at_full_rate(limits);
    let t = now_at(0);
    let before = c.snapshot(target.scope, t).unwrap().levels;
    let (cl, d) = respond(
        Provider::Openai,
        200,
        &[
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-reset-requests", "6m0s"),
        ],
        r#"{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#,
        t,
    );
    c.observe(&Observed::new(target.scope, cl.clone(), d), t);
    assert_eq!(c.snapshot(target.scope, t).unwrap().levels, before);
}

#[test]
fn the_dead_band_keeps_rounded_tokens_from_oscillating_with_resets() {
    // 60 000 ITPM (1 000/s), credit 60 000 (the provider's bucket). The
    // first response says "remaining 19 000, full in 2 s" (rounded to the
    // nearest thousand, as Anthropic documents: the server holds 18 500 to
    // 19 499): the server wins, down to 18 500. The same rounded view
    // again is within the dead band of the credit as it refills, so nothing
    // changes, response after response; then a lower view wins once.
    let (mut c, target) = sonnet_at_full_rate(Limits {
        input_tokens: Some(60_000),
        ..Limits::NONE
    });
    let level = |c: &mut Controller, ms| c.snapshot(target.scope, now_at(ms)).unwrap().credits[1];
    for i in 0..5u64 {
        let t = now_at(i * 10);
        let (cl, d) = ok_with(
            &[
                ("anthropic-ratelimit-input-tokens-limit", "60000"),
                ("anthropic-ratelimit-input-tokens-remaining", "19000"),
                (
                    "anthropic-ratelimit-input-tokens-reset",
                    "2026-11-29T12:00:02Z",
                ),
            ],
            t,
        );
        c.observe(&Observed::new(target.scope, cl.clone(), d), t);
        assert_eq!(level(&mut c, i * 10), Some(18_500 + 10 * i as i64));
    }
    let t = now_at(50);
    let (cl, d) = ok_with(
        &[
            ("anthropic-ratelimit-input-tokens-limit", "60000"),
            ("anthropic-ratelimit-input-tokens-remaining", "12000"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2026-11-29T12:00:49Z",
            ),
        ],
        t,
    );
    c.observe(&Observed::new(target.scope, cl.clone(), d.clone()), t);
    // Full in 48.95 s, less the second a whole-second reset may be off:
    // 12 050 implied; the remaining's [11 500, 12 500) reaches lower, and
    // the credit goes to the lowest level the two allow.
    assert_eq!(level(&mut c, 50), Some(11_500));
    // The same view again lowers nothing further, and a nearer reset never
    // raises it.
    c.observe(&Observed::new(target.scope, cl.clone(), d), t);
    assert_eq!(level(&mut c, 50), Some(11_500));
    let (cl, d) = ok_with(
        &[
            ("anthropic-ratelimit-input-tokens-limit", "60000"),
            ("anthropic-ratelimit-input-tokens-remaining", "19000"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2026-11-29T12:00:01Z",
            ),
        ],
        t,
    );
    c.observe(&Observed::new(target.scope, cl.clone(), d), t);
    assert_eq!(level(&mut c, 50), Some(11_500));
}

/// How far past the exact instant the core puts a bucket's wait (its
/// `EDGE_MARGIN`, a tuning constant that is not public API).
const EDGE_MARGIN: std::time::Duration = std::time::Duration::from_millis(1);
