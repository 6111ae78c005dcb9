//! Unit tests of `estimated.rs`: the estimator alone, in virtual seconds.

use super::*;

fn s(secs: f64) -> Instant {
    Instant::from_origin(Duration::from_secs_f64(secs))
}

/// `n` admissions of one unit at `t`.
fn take(e: &mut SilentEstimate, n: u64, t: f64) {
    for _ in 0..n {
        e.took(1, s(t));
    }
}

/// Sends at `per_min` from `from` to `to` seconds, one unit at a time.
fn send_at(e: &mut SilentEstimate, per_min: f64, from: f64, to: f64) {
    let step = 60.0 / per_min;
    let mut t = from;
    while t < to {
        e.took(1, s(t));
        t += step;
    }
}

#[test]
fn nothing_before_a_429() {
    let mut e = SilentEstimate::default();
    take(&mut e, 100, 0.0);
    assert_eq!(e.rate(s(10.0)), None);
}

#[test]
fn a_cold_429_is_a_lower_bound_that_grows_while_used() {
    // 50 per minute with a minute's bucket: 53 let through in 4 s, the
    // 54th throttled: at least 53 / (4 s + a minute) = 49, at most
    // 54 / 4 s = 810 if the bucket never spilled.
    let mut e = SilentEstimate::default();
    take(&mut e, 53, 0.0);
    take(&mut e, 1, 4.0);
    assert_eq!(e.throttled(1, None, s(4.0)), Taught::Cold);
    assert_eq!(e.state(), Some(EstimateState::Cold));
    assert_eq!(e.rate(s(4.0)), Some(49));
    // Unused, it does not grow (RFC 7661): an idle key keeps it.
    assert_eq!(e.rate(s(60.0)), Some(49));
    // Used at the rate it allows, it doubles every ten seconds...
    let mut used = e.clone();
    send_at(&mut used, 49.0, 4.0, 14.0);
    let r = used.rate(s(14.0)).unwrap();
    assert!((90..=98).contains(&r), "{r}");
    // ... up to (53 + 1) / 4 s, where it rests ten seconds of use...
    send_at(&mut used, 810.0, 14.0, 50.0);
    assert!((800..=810).contains(&used.rate(s(50.0)).unwrap()));
    // ... and, with no 429 there, goes past it: a bound from a window
    // that spilled (a slow start into a short bucket) was no bound.
    send_at(&mut used, 1620.0, 50.0, 80.0);
    assert!(used.rate(s(80.0)).unwrap() > 1000);
}

#[test]
fn a_slow_start_into_a_short_bucket_is_not_held_to_its_window() {
    // 1,362 tokens a second in a one-second bucket; a cold key sends one
    // request of 1,000 every 9.6 s (long answers, one out at a time):
    // the 429 comes on the third, 19 s in. The window's "bound" (3,000
    // tokens in 19 s: 9,500 a minute) is a ninth of the limit; within
    // two minutes of use the estimate is past a third of it.
    let mut e = SilentEstimate::default();
    e.took(1000, s(0.0));
    e.took(1000, s(9.6));
    e.took(1000, s(19.0));
    e.took(1000, s(19.0));
    e.took(1000, s(19.0));
    assert_eq!(
        e.throttled(1000, Some(Duration::from_secs(1)), s(19.0)),
        Taught::Cold
    );
    assert!(e.rate(s(19.0)).unwrap() < 10_000);
    let mut t = 19.0;
    while t < 140.0 {
        let r = e.rate(s(t)).unwrap() as f64;
        send_at(&mut e, r.max(1.0), t, t + 1.0);
        t += 1.0;
    }
    assert!(
        e.rate(s(140.0)).unwrap() > 81_720 / 3,
        "{:?}",
        e.rate(s(140.0))
    );
}

#[test]
fn a_window_between_two_429s_measures_the_rate() {
    let mut e = SilentEstimate::default();
    take(&mut e, 61, 0.0);
    take(&mut e, 1, 2.0);
    assert_eq!(e.throttled(1, None, s(2.0)), Taught::Cold);
    // Its release belongs to the closed window: not counted again.
    e.corrected(-1, s(2.0));
    // 30 s later, 25 let through: 50 a minute (the climb from the cold
    // bound spilled nothing: it was above the limit).
    send_at(&mut e, 50.0, 2.0, 32.0);
    take(&mut e, 1, 32.0);
    assert_eq!(e.throttled(1, None, s(32.0)), Taught::Measured);
    assert_eq!(e.state(), Some(EstimateState::Measured));
    // Held 3 % under, back at the measurement after a minute of use.
    let r = e.rate(s(32.0)).unwrap();
    assert!((45..=52).contains(&r), "{r}");
    send_at(&mut e, 50.0, 32.0, 92.0);
    let r = e.rate(s(92.0)).unwrap();
    assert!((47..=54).contains(&r), "{r}");
}

#[test]
fn a_settle_corrects_only_the_window_it_was_taken_in() {
    let mut e = SilentEstimate::default();
    take(&mut e, 61, 0.0);
    e.throttled(1, None, s(2.0));
    // Taken at 3 s with an estimate of 1 000, used 400.
    e.took(1_000, s(3.0));
    e.corrected(-600, s(3.0));
    // A request of the cold window settles late: not this window's.
    e.corrected(5_000, s(1.0));
    assert_eq!(e.window.unwrap().through(0), 400);
}

#[test]
fn the_requests_in_flight_at_one_429_are_one_event() {
    let mut e = SilentEstimate::default();
    take(&mut e, 60, 0.0);
    assert_eq!(e.throttled(1, None, s(2.0)), Taught::Cold);
    let before = e.clone();
    assert_eq!(e.throttled(1, None, s(2.3)), Taught::Nothing);
    assert_eq!(e.events(), 1);
    assert_eq!(e.rate(s(3.0)), before.rate(s(3.0)));
}

#[test]
fn a_cold_key_throttled_at_once_learns_nothing() {
    // A 429 on the first requests (a fault, a one-off): no lower bound
    // from a window that let almost nothing through.
    let mut e = SilentEstimate::default();
    take(&mut e, 3, 0.0);
    assert_eq!(e.throttled(1, None, s(0.1)), Taught::Nothing);
    assert_eq!(e.rate(s(1.0)), None);
    take(&mut e, 20, 1.0);
    assert_eq!(e.throttled(1, None, s(2.0)), Taught::Cold);
}

#[test]
fn a_climb_that_crosses_the_limit_falls_back_to_half_its_pace() {
    // A cold bound of 20 a minute, then a climb used at full pace; a
    // 429 3 s later (too short to measure) halves the pace, never
    // below the cold bound.
    let mut e = SilentEstimate::default();
    take(&mut e, 20, 0.0);
    e.took(1, s(0.5));
    assert_eq!(e.throttled(1, None, s(0.5)), Taught::Cold);
    let cold = e.rate(s(0.5)).unwrap();
    send_at(&mut e, 1000.0, 0.5, 30.0);
    let pace = e.rate(s(30.0)).unwrap();
    assert!(pace > cold * 3, "{cold} -> {pace}");
    e.took(1, s(30.0));
    let taught = e.throttled(1, None, s(30.0));
    let r = e.rate(s(30.0)).unwrap();
    assert!(
        taught == Taught::Measured || r <= pace / 2 + 1,
        "{taught:?} {pace} -> {r}"
    );
    assert!(r >= cold, "{r} < {cold}");
}

#[test]
fn a_hint_bounds_the_climb() {
    // The provider needed 2.5 s to refill one request: at most 24 a
    // minute, whatever the window says.
    let mut e = SilentEstimate::default();
    take(&mut e, 20, 0.0);
    e.took(1, s(0.5));
    e.throttled(1, Some(Duration::from_millis(2_500)), s(0.5));
    send_at(&mut e, 400.0, 0.5, 300.0);
    assert!(e.rate(s(300.0)).unwrap() <= 24);
}

#[test]
fn garbage_never_becomes_zero_or_unbounded() {
    let mut e = SilentEstimate::default();
    e.took(0, s(0.0));
    assert_eq!(e.throttled(u64::MAX, None, s(0.0)), Taught::Nothing);
    let mut e = SilentEstimate::default();
    for _ in 0..10 {
        e.took(u64::MAX, s(0.0));
    }
    assert_eq!(e.throttled(u64::MAX / 16, None, s(0.0)), Taught::Cold);
    assert!(e.rate(s(0.0)).unwrap() <= crate::admit::bucket::MAX_LIMIT);
    let r = e.rate(s(1e6)).unwrap();
    assert!((1..=crate::admit::bucket::MAX_LIMIT).contains(&r));
    let mut e = SilentEstimate::default();
    take(&mut e, 10, 0.0);
    e.throttled(1, Some(Duration::MAX), s(0.0));
    assert!(e.rate(s(1.0)).unwrap() >= 1);
}

mod as_a_belief {
    use super::*;
    use crate::admit::belief::test_streams::silent_600_rpm;
    use crate::admit::belief::{Belief, Sureness};

    #[test]
    fn a_silent_600_rpm_stream_is_measured_between_two_429s() {
        let mut e = SilentEstimate::default();
        assert_eq!(e.believed(s(0.0)), None);
        let mut taught = Vec::new();
        let mut last = s(0.0);
        for x in silent_600_rpm() {
            if let Some(how) = e.observe(&x).taught {
                taught.push(how);
            }
            if let crate::admit::belief::Sample::Admitted { at, .. }
            | crate::admit::belief::Sample::Throttled { at, .. } = x
            {
                last = at;
            }
        }
        assert_eq!(taught, vec![Taught::Cold, Taught::Measured]);
        let b = e.believed(last).unwrap();
        assert_eq!(b.sure, Sureness::Estimated(EstimateState::Measured));
        // 240 let through in 24 s between two 429s: 600 a minute, held
        // just under it.
        assert!((560..=600).contains(&b.limit), "{}", b.limit);
    }
}

#[test]
fn a_window_of_refused_sends_never_measures_a_limit_under_one_request() {
    // Measured at 60,000 tokens a minute, then a window in which four
    // requests of 9,000 tokens were all refused (each released, so none
    // went through) ends in a 429: nothing went through, but the limit is
    // not zero — at least one such request a minute (an estimate of one
    // token a minute held a replica's next request for a day).
    let mut e = SilentEstimate::seeded(60_000, s(0.0));
    for i in 0..4 {
        let at = s(1.0 + f64::from(i) * 2.0);
        e.took(9_000, at);
        e.corrected(-9_000, at);
    }
    e.took(9_000, s(8.0));
    e.throttled(9_000, None, s(8.0));
    assert!(e.rate(s(8.0)).unwrap() >= 8_700, "{:?}", e.rate(s(8.0)));
}

/// One a second into a bucket that holds one: a cold key's first burst
/// of three is throttled on its third (the bucket held less than three),
/// then one a second goes through for twenty seconds, and the 429 that
/// follows is the cold event. `with_burst` says whether the first burst
/// happened.
fn cold_event_after_steady_sends(with_burst: bool) -> SilentEstimate {
    let mut e = SilentEstimate::default();
    if with_burst {
        take(&mut e, 3, 0.0);
        assert_eq!(
            e.throttled(1, Some(Duration::from_secs(1)), s(0.1)),
            Taught::Nothing
        );
        // The throttled request is released: the provider never charged it.
        e.corrected(-1, s(0.0));
    } else {
        take(&mut e, 2, 0.0);
    }
    send_at(&mut e, 60.0, 1.0, 20.5);
    e.took(1, s(20.5));
    assert_eq!(
        e.throttled(1, Some(Duration::from_secs(1)), s(20.5)),
        Taught::Cold
    );
    e
}

#[test]
fn an_early_429_bounds_what_the_bucket_held_and_the_cold_window_proves_the_rest() {
    // Without the early 429 the bucket may have held a minute of the
    // rate: 22 let through in 20.5 s prove only 22 / 80.5 s = 16 a
    // minute. With it, the bucket held under three when the window
    // opened, so the twenty-two took at least 19 from the refill: 55 a
    // minute, for a true 60.
    let unbounded = cold_event_after_steady_sends(false).rate(s(20.5)).unwrap();
    assert!(unbounded <= 17, "{unbounded}");
    let bounded = cold_event_after_steady_sends(true).rate(s(20.5)).unwrap();
    assert!((50..=60).contains(&bounded), "{bounded}");
}

#[test]
fn an_early_429_that_was_a_one_off_is_cut_back_at_the_next() {
    // A minute's bucket of 60 a minute, full: the first burst of three
    // meets a one-off 429 (the bucket held sixty, not under three), then
    // the slow start drains the bank in 20 s and the cold 429 comes. The
    // bound reads the bank as refill: about 170 a minute, nearly three
    // times the limit.
    let mut e = SilentEstimate::default();
    take(&mut e, 3, 0.0);
    assert_eq!(e.throttled(1, None, s(0.1)), Taught::Nothing);
    e.corrected(-1, s(0.0));
    send_at(&mut e, 180.0, 1.0, 20.0);
    e.took(1, s(20.0));
    assert_eq!(e.throttled(1, None, s(20.0)), Taught::Cold);
    assert!(e.rate(s(20.0)).unwrap() > 120);
    // Paced at it, the next 429 comes within seconds: a climb that
    // crossed the limit, cut to half its pace, not held at the bound the
    // one-off made.
    send_at(&mut e, 170.0, 20.0, 22.0);
    e.took(1, s(22.0));
    e.throttled(1, None, s(22.0));
    let r = e.rate(s(22.0)).unwrap();
    assert!(r <= 90, "{r}");
}
