//! A predicted wait is the wait that will happen: a cold scope ramps up
//! to full rate within seconds, so its first waits are predicted at the
//! pace they will really go, not at the start fraction of this instant.

use ratewise_core::admit::{Admission, AdmitRequest, Config, Controller, Limits};
use ratewise_core::{Instant, Now};
use std::time::{Duration, SystemTime};

fn now_at(t: Instant) -> Now {
    Now::new(
        t,
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000) + t.since_origin(),
    )
}

/// Anthropic tier 1: 50 RPM, 40,000 ITPM, 8,000 OTPM, default buckets and
/// ramp (a cold scope starts at 10 % of the rate).
fn tier1() -> Controller {
    let mut config = Config::default();
    config.seed = Some(1);
    config.limits = Limits {
        requests: Some(50),
        input_tokens: Some(40_000),
        output_tokens: Some(8_000),
        ..Limits::NONE
    };
    Controller::new(config)
}

fn request(c: &mut Controller) -> AdmitRequest {
    let mut req = AdmitRequest::new(c.target("k", "claude-sonnet-4-5"));
    req.input_estimate = Some(500);
    req.max_tokens = Some(1_024);
    req
}

#[test]
fn a_cold_scope_predicts_its_waits_at_the_pace_the_ramp_will_reach() {
    let mut c = tier1();
    let req = request(&mut c);
    let mut t = Instant::ZERO;
    let mut admitted = 0;
    let mut longest = Duration::ZERO;
    // The head of a backlog of 12 asks; each wait it is told is when it
    // goes: asked then, it is admitted, and asked a little before, it
    // still waits.
    while admitted < 12 {
        match c.admit(&req, now_at(t)) {
            Admission::Go(_) => admitted += 1,
            Admission::Wait { until, .. } => {
                let wait = until.saturating_duration_since(t);
                longest = longest.max(wait);
                // 1,024 output tokens at 10 % of 8,000 a minute would be
                // 76.8 s; the ramp is at full rate within seconds.
                assert!(
                    wait < Duration::from_secs(20),
                    "predicted {wait:?} at {t:?}"
                );
                let before = Instant::from_origin(
                    until
                        .since_origin()
                        .saturating_sub(Duration::from_millis(50)),
                );
                if before > t {
                    let mut probe = c.clone();
                    assert!(
                        matches!(probe.admit(&req, now_at(before)), Admission::Wait { .. }),
                        "admitted before the predicted {until:?}"
                    );
                }
                t = until;
                assert!(
                    matches!(c.admit(&req, now_at(t)), Admission::Go(_)),
                    "not admitted at the predicted {until:?}"
                );
                admitted += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(longest > Duration::ZERO);
}

#[test]
fn a_deadline_is_refused_only_when_the_ramped_wait_misses_it() {
    let mut c = tier1();
    let mut req = request(&mut c);
    let t = now_at(Instant::ZERO);
    assert!(c.admit(&req, t).go().is_some());
    // The second request's real wait is seconds: a 20 s deadline holds.
    req.deadline = Some(Instant::from_millis(20_000));
    match c.clone().admit(&req, t) {
        Admission::Wait { until, .. } => assert!(until < Instant::from_millis(20_000)),
        other => panic!("{other:?}"),
    }
    // A deadline before it is refused at once, saying when it could go.
    req.deadline = Some(Instant::from_millis(100));
    match c.admit(&req, t) {
        Admission::Refused {
            earliest: Some(at), ..
        } => assert!(at > Instant::from_millis(100)),
        other => panic!("{other:?}"),
    }
}
