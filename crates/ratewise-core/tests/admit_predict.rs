//! A predicted wait is the wait that will happen: a cold scope ramps up
//! to full rate within seconds, so its first waits are predicted at the
//! pace they will really go, not at the start fraction of this instant.

use ratewise_core::admit::Observed;
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

/// A 200 from Anthropic with no rate-limit headers, classified at `now`.
fn ok(now: Now) -> ratewise_core::classify::Classification {
    let headers = http::HeaderMap::new();
    let view = ratewise_core::classify::ResponseView {
        status: http::StatusCode::OK,
        headers: &headers,
        body: br#"{"type":"message","usage":{"input_tokens":10,"output_tokens":10}}"#,
    };
    ratewise_core::classify::classify_response(ratewise_core::Provider::Anthropic, &view, now.wall)
}

#[test]
fn a_job_is_never_sent_later_than_its_deadline_less_the_time_to_its_first_byte() {
    // 6 RPM at full rate: one request every 10 s.
    let mut config = Config::default();
    config.seed = Some(1);
    config.ramp.start = 1000;
    config.limits = Limits {
        requests: Some(6),
        ..Limits::NONE
    };
    config.burst = ratewise_core::admit::Burst::uniform(Duration::from_secs(1));
    let mut c = Controller::new(config);
    let target = c.target("k", "claude-sonnet-4-5");
    let req = AdmitRequest::new(target);
    // A non-streamed answer whose head came 8 s after the send.
    let t0 = now_at(Instant::ZERO);
    let r = c.admit(&req, t0).go().expect("the first goes");
    let t8 = now_at(Instant::from_millis(8_000));
    c.observe(
        &Observed::new(
            r.sent().scope(),
            ok(t8),
            ratewise_core::Decision::new(ratewise_core::Action::Done),
        )
        .of_sent(r.sent()),
        t8,
    );
    c.settle(r, &ratewise_core::Usage::default(), t8);
    // The next request unit comes at 10 s. A caller whose first byte must
    // come by 17 s cannot have it (10 s + 8 s to the head): refused at once,
    // nothing sent, saying it could have gone at 10 s.
    let mut late = req;
    late.deadline = Some(Instant::from_millis(17_000));
    match c.clone().admit(&late, t8) {
        Admission::Refused {
            earliest: Some(at), ..
        } => assert_eq!(at.since_origin().as_secs(), 10),
        other => panic!("{other:?}"),
    }
    // By 20 s it can (10 s + 8 s + a margin of 1 s ≤ 20 s): it waits.
    let mut fits = req;
    fits.deadline = Some(Instant::from_millis(20_000));
    assert!(matches!(c.clone().admit(&fits, t8), Admission::Wait { .. }));
    // A caller's own attempt time counts instead of the learned 8 s only
    // when it is longer — never added to it: an attempt believed to take
    // 5 s still fits by 20 s (10 s + 8 s + 1 s), one of 12 s does not
    // (10 s + 12 s), and one of 9 s fits by 20 s (10 s + 9 s), where the
    // sum (8 + 9 s) would have refused it.
    let mut five = fits;
    five.attempt_time = Duration::from_secs(5);
    assert!(matches!(c.clone().admit(&five, t8), Admission::Wait { .. }));
    let mut twelve = fits;
    twelve.attempt_time = Duration::from_secs(12);
    assert!(matches!(
        c.clone().admit(&twelve, t8),
        Admission::Refused { .. }
    ));
    let mut nine = fits;
    nine.attempt_time = Duration::from_secs(9);
    assert!(matches!(c.clone().admit(&nine, t8), Admission::Wait { .. }));
    // A streamed request's head comes with its first token: the 8 s of a
    // whole generation do not count against it.
    let mut streamed = late;
    streamed.streamed = true;
    assert!(matches!(
        c.clone().admit(&streamed, t8),
        Admission::Wait { .. }
    ));
    // With room in the bucket, a send past the last moment is still
    // refused: at 12 s of a 17 s deadline the head would come at 20 s.
    let t12 = now_at(Instant::from_millis(12_000));
    assert!(matches!(c.admit(&late, t12), Admission::Refused { .. }));
}

#[test]
fn a_prediction_counts_the_jobs_ahead_and_takes_nothing() {
    // 6 RPM at full rate: one request every 10 s.
    let mut config = Config::default();
    config.ramp.start = 1000;
    config.limits = Limits {
        requests: Some(6),
        ..Limits::NONE
    };
    let mut c = Controller::new(config);
    let target = c.target("k", "m");
    let t = now_at(Instant::ZERO);
    let mut req = AdmitRequest::new(target);
    assert!(c.admit(&req, t).go().is_some());
    // Two ahead: its turn is the third unit from now, 30 s.
    match c.predict(&req, 2, t) {
        Some(Admission::Wait { until, .. }) => {
            assert_eq!(until.since_origin().as_secs(), 30, "{until:?}")
        }
        other => panic!("{other:?}"),
    }
    // Past a 25 s deadline (less the 1 s margin): refused, saying when.
    req.deadline = Some(Instant::from_millis(25_000));
    assert!(matches!(
        c.predict(&req, 2, t),
        Some(Admission::Refused {
            earliest: Some(_),
            ..
        })
    ));
    // Nothing was taken: the next unit is still 10 s away.
    req.deadline = None;
    match c.admit(&req, t) {
        Admission::Wait { until, .. } => assert_eq!(until.since_origin().as_secs(), 10),
        other => panic!("{other:?}"),
    }
}
