//! Concurrency as a limit (DeepSeek limits requests in flight per account,
//! "from send to the end of its answer"): at `max_in_flight` the next
//! request waits, whatever the buckets hold, and goes once one ends —
//! settled, released, or not before a held unknown outcome is resolved.

use ratewise_core::admit::{
    Admission, AdmitRequest, Config, Controller, Limits, RampConfig, WaitReason,
};
use ratewise_core::{Instant, Now, Usage};
use std::time::Duration;

fn now_at(ms: u64) -> Now {
    let wall0 = ratewise_core::time::parse_rfc3339("2026-11-29T12:00:00Z").unwrap();
    Now::new(Instant::from_millis(ms), wall0 + Duration::from_millis(ms))
}

fn controller(max_in_flight: Option<u32>) -> Controller {
    Controller::new({
        let mut config = Config::default();
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        // Limits far above the test's pace: no probe, no bucket wait.
        config.limits = Limits::per_minute().requests(1_000_000);
        config.max_in_flight = max_in_flight;
        config.seed = Some(1);
        config
    })
}

#[test]
fn the_key_waits_at_its_cap_and_goes_when_an_answer_ends() {
    let mut c = controller(Some(2));
    let a = c.target("k", "deepseek-chat");
    let b = c.target("k", "deepseek-reasoner"); // another class, the same key
    let other_key = c.target("k2", "deepseek-chat");
    let go = |c: &mut Controller, t, ms| match c.admit(&AdmitRequest::new(t), now_at(ms)) {
        Admission::Go(r) => r,
        other => panic!("{other:?}"),
    };
    let first = go(&mut c, a, 0);
    let second = go(&mut c, b, 1);
    match c.admit(&AdmitRequest::new(a), now_at(2)) {
        Admission::Wait {
            reason: WaitReason::InFlight,
            until,
        } => assert!(until > Instant::from_millis(2)),
        other => panic!("{other:?}"),
    }
    // Another key has its own count.
    let _third = go(&mut c, other_key, 3);
    // An answer ends: one more may go.
    c.settle(first, &Usage::default(), now_at(10));
    let fourth = go(&mut c, a, 11);
    // A held unknown outcome still counts (it may be generating).
    c.hold_unknown(&second, now_at(12));
    assert!(matches!(
        c.admit(&AdmitRequest::new(a), now_at(13)),
        Admission::Wait {
            reason: WaitReason::InFlight,
            ..
        }
    ));
    c.release(fourth, now_at(14));
    let _fifth = go(&mut c, b, 15);
}

#[test]
fn without_a_cap_nothing_waits_for_answers_in_flight() {
    let mut c = controller(None);
    let t = c.target("k", "m");
    for ms in 0..50 {
        assert!(matches!(
            c.admit(&AdmitRequest::new(t), now_at(ms)),
            Admission::Go(_)
        ));
    }
}
