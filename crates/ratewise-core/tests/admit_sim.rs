//! Deterministic simulations of admission control in virtual time, in the
//! quinn-proto style: the driver steps the clock to the next instant the
//! state machine asked for (a `Wait { until }`, a completion, or
//! `next_wakeup`). No wall clock, no sleeps: every run is identical.

use ratewise_core::admit::{
    Admission, AdmitRequest, Config, Controller, Limits, Price, PriceTable, RampConfig,
    Reservation, RetryBudgetConfig, SpendConfig, Target, WaitReason,
};
use ratewise_core::parse::ratelimit::{RateLimitSnapshot, Window};
use ratewise_core::{Cause, Dimension, GiveUpReason, Instant, Now, Provider, Usage};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

const WALL0: u64 = 1_795_000_000; // some wall-clock origin (2026)

fn now_at(t: Instant) -> Now {
    Now::new(
        t,
        SystemTime::UNIX_EPOCH + Duration::from_secs(WALL0) + t.since_origin(),
    )
}

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

fn rpm(n: u64) -> Config {
    let mut config = base();
    config.limits = Limits {
        requests: Some(n),
        ..Limits::NONE
    };
    config
}

/// The default configuration with a one-second burst on every bucket: the
/// arithmetic of these simulations is stated for that burst (the default's
/// larger token burst is covered by its own test below).
fn base() -> Config {
    let mut config = Config::default();
    config.burst = ratewise_core::admit::Burst::uniform(Duration::from_secs(1))
        .with_known_credit(Duration::from_secs(60));
    config
}

/// A backlog of `jobs` identical requests served in FIFO order (only the
/// head of the line asks), each completing `latency` after admission with
/// `usage`. Returns the admission instants.
fn drain(
    c: &mut Controller,
    target: Target,
    jobs: usize,
    latency: Duration,
    usage: Usage,
    max_tokens: Option<u64>,
) -> Vec<Instant> {
    let mut left = jobs;
    let mut next_poll = ms(0);
    let mut inflight: BTreeMap<(Instant, u64), Reservation> = BTreeMap::new();
    let mut seq = 0u64;
    let mut admitted = Vec::new();
    let mut steps = 0u64;
    while left > 0 || !inflight.is_empty() {
        steps += 1;
        assert!(steps < 1_000_000, "simulation does not converge");
        let next_done = inflight.keys().next().map(|k| k.0);
        let t = match (left > 0, next_done) {
            (true, Some(d)) => next_poll.min(d),
            (true, None) => next_poll,
            (false, Some(d)) => d,
            (false, None) => unreachable!(),
        };
        // Completions first.
        while let Some(entry) = inflight.first_entry() {
            if entry.key().0 > t {
                break;
            }
            let res = entry.remove();
            c.settle(res, &usage, now_at(t));
        }
        while left > 0 && next_poll <= t {
            let mut req = AdmitRequest::new(target);
            req.input_estimate = Some(usage.rate_limited_input());
            req.max_tokens = max_tokens;
            match c.admit(&req, now_at(t)) {
                Admission::Go(res) => {
                    admitted.push(t);
                    left -= 1;
                    seq += 1;
                    inflight.insert((t + latency, seq), res);
                }
                Admission::Wait { until, .. } => {
                    assert!(until > t, "a wait must move time forward");
                    next_poll = until;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    admitted
}

fn max_in_window(times: &[Instant], w: Duration) -> usize {
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= w {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best
}

#[test]
fn sixty_rpm_cold_start_ramps_to_one_per_second() {
    let mut c = Controller::new(rpm(60));
    let target = c.target("k", "claude-sonnet-4-5");
    let usage = Usage {
        input_tokens: 100,
        output_tokens: 50,
        ..Usage::default()
    };
    let times = drain(
        &mut c,
        target,
        600,
        Duration::from_millis(500),
        usage,
        Some(100),
    );
    assert_eq!(times.len(), 600);
    // Cold start: the first 10 s admit a handful, not a minute's worth:
    // from 10 % growing ×1.4 per calm second, six (×1.5 admitted seven).
    let first_10s = times.iter().filter(|t| **t < ms(10_000)).count();
    assert!(first_10s <= 6, "cold start admitted {first_10s} in 10 s");
    // Never more than the pace allows: capacity 1 + 1.2 per second.
    assert!(max_in_window(&times, Duration::from_secs(1)) <= 2);
    for pair in times.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_millis(833), "{pair:?}");
    }
    // The idle key's full credit (a minute: 60) is spent at the peak, 1.2
    // per second, over about five minutes: one request every 5/6 s, never
    // at once.
    let credit_phase: Vec<_> = times
        .iter()
        .filter(|t| **t >= ms(40_000) && **t < ms(200_000))
        .collect();
    for pair in credit_phase.windows(2) {
        let gap = *pair[1] - *pair[0];
        assert!(
            gap >= Duration::from_millis(833) && gap <= Duration::from_millis(834),
            "credit-phase gap {gap:?}"
        );
    }
    // Then the limit binds: one per second.
    let steady: Vec<_> = times.iter().filter(|t| **t >= ms(400_000)).collect();
    assert!(steady.len() > 100);
    for pair in steady.windows(2) {
        let gap = *pair[1] - *pair[0];
        assert!(
            gap >= Duration::from_millis(999) && gap <= Duration::from_millis(1001),
            "steady gap {gap:?}"
        );
    }
    // Over any minute: at most the credit and the minute's refill.
    assert!(max_in_window(&times, Duration::from_secs(60)) <= 72);
    // 600 jobs: 60 of credit and 540 at 1/s, after a few seconds of ramp.
    let last = *times.last().unwrap();
    assert!(last > ms(535_000) && last < ms(560_000), "last at {last:?}");
    assert!(c.ledger().is_clean(), "{:?}", c.ledger());
}

#[test]
fn ten_times_backlog_drains_without_burst() {
    // 600 RPM, 6000 jobs queued at once, tokens limited too.
    let mut c = Controller::new({
        let mut config = base();
        config.limits = Limits {
            requests: Some(600),
            input_tokens: Some(600_000),
            output_tokens: Some(120_000),
            ..Limits::NONE
        };
        config
    });
    let target = c.target("k", "claude-haiku-4-5");
    let usage = Usage {
        input_tokens: 800,
        output_tokens: 150,
        cache_read_input_tokens: 5_000,
        ..Usage::default()
    };
    let times = drain(
        &mut c,
        target,
        6_000,
        Duration::from_secs(2),
        usage,
        Some(200),
    );
    assert_eq!(times.len(), 6_000);
    // 600 RPM = 10/s; the pace holds one second's worth (10) and refills
    // at 12/s at the peak: at most 22 in any second, and the ramp keeps the
    // first seconds far below.
    assert!(max_in_window(&times, Duration::from_secs(1)) <= 22);
    assert!(times.iter().filter(|t| **t < ms(1_000)).count() <= 2);
    // Over any minute, never more than the pace allows (10 + 720), the
    // idle key's credit being spent at the peak.
    assert!(max_in_window(&times, Duration::from_secs(60)) <= 730);
    // Goodput: drains in 10 minutes less the minute of credit, plus the
    // ramp.
    let last = *times.last().unwrap();
    assert!(last < ms(550_000), "drained at {last:?}");
    assert!(c.ledger().is_clean(), "{:?}", c.ledger());
}

#[test]
fn a_429_hint_pauses_everyone_and_release_is_paced_and_jittered() {
    let mut c = Controller::new({
        let mut config = rpm(600);
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        config
    });
    let target = c.target("k", "gpt-4o");
    let t0 = ms(5_000);
    c.pause(target.scope, t0 + Duration::from_secs(8), None, now_at(t0));
    let mut untils = Vec::new();
    for _ in 0..20 {
        match c.admit(&AdmitRequest::new(target), now_at(t0)) {
            Admission::Wait {
                until,
                reason: WaitReason::Paused,
            } => {
                assert!(until >= ms(13_000) && until <= ms(13_500));
                untils.push(until);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(c.next_wakeup(now_at(ms(6_000))), Some(ms(13_000)));
    untils.sort();
    untils.dedup();
    assert!(untils.len() > 10, "jitter spreads released jobs");
    // After the pause the bucket was drained: the release is paced.
    let mut admitted = 0;
    for _ in 0..20 {
        if let Admission::Go(r) = c.admit(&AdmitRequest::new(target), now_at(ms(13_000))) {
            admitted += 1;
            c.release(r, now_at(ms(13_000)));
        }
    }
    assert!(admitted <= 1, "backlog released in a burst: {admitted}");
    // Then one per 100 ms (600 RPM), not a burst.
    match c.admit(&AdmitRequest::new(target), now_at(ms(13_000))) {
        Admission::Wait { until, .. } => {
            assert_eq!(until, ms(13_100) + EDGE_MARGIN)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn stopped_scope_admits_nothing_until_it_lifts_then_ramps() {
    let mut c = Controller::new(rpm(600));
    let sonnet = c.target("k", "claude-sonnet-4");
    let haiku = c.target("k", "claude-haiku-4-5");
    let other = c.target("other-key", "claude-sonnet-4");
    let t0 = now_at(ms(0));
    let until = t0.wall + Duration::from_secs(3600);
    c.stop(sonnet.scope, Cause::SpendCap, Some(until), t0);
    for t in [0, 1_000, 3_599_999] {
        for target in [sonnet, haiku] {
            assert_eq!(
                c.admit(&AdmitRequest::new(target), now_at(ms(t))),
                Admission::Stopped {
                    cause: Cause::SpendCap,
                    until: Some(until)
                }
            );
        }
    }
    // Another key is not affected.
    let r = c.admit(&AdmitRequest::new(other), t0).go().unwrap();
    c.release(r, t0);
    assert_eq!(c.next_wakeup(t0).map(|t| t >= ms(3_600_000)), Some(true));
    // It lifts by itself at `until`, and restarts at 10 % of the rate.
    let after = now_at(ms(3_600_000));
    assert!(matches!(
        c.admit(&AdmitRequest::new(sonnet), after),
        Admission::Go(_)
    ));
    assert_eq!(c.snapshot(sonnet.scope, after).unwrap().ramp_permille, 100);
    // An open-ended stop waits for resume().
    c.stop(haiku.scope, Cause::Authentication, None, after);
    assert!(matches!(
        c.admit(&AdmitRequest::new(haiku), now_at(ms(99_000_000))),
        Admission::Stopped { until: None, .. }
    ));
    c.resume("k", now_at(ms(99_000_000)));
    assert!(matches!(
        c.admit(&AdmitRequest::new(haiku), now_at(ms(99_000_000))),
        Admission::Go(_)
    ));
}

#[test]
fn a_wait_past_the_deadline_is_refused_at_once() {
    // 6 RPM: one per 10 s at full rate, one per 100 s at the ramp's 10 %
    // start; the ramp reaches full within seconds, and the wait is
    // predicted at the pace it will have (about 15 s), not 100 s.
    let mut c = Controller::new(rpm(6));
    let target = c.target("k", "m");
    let mut req = AdmitRequest::new(target);
    assert!(c.admit(&req, now_at(ms(0))).go().is_some());
    req.deadline = Some(ms(5_000));
    assert!(matches!(
        c.admit(&req, now_at(ms(0))),
        Admission::Refused {
            reason: GiveUpReason::Deadline,
            earliest: Some(at),
        } if at > ms(5_000) && at < ms(30_000)
    ));
    req.deadline = Some(ms(30_000));
    assert!(matches!(
        c.admit(&req, now_at(ms(0))),
        Admission::Wait {
            reason: WaitReason::Bucket(Dimension::Requests),
            ..
        }
    ));
}

#[test]
fn settle_counts_cache_writes_not_cache_reads_and_charges_overruns() {
    let mut c = Controller::new({
        let mut config = base();
        config.limits = Limits {
            input_tokens: Some(60_000),
            output_tokens: Some(60_000),
            ..Limits::NONE
        };
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        config
    });
    let target = c.target("k", "claude-sonnet-4");
    let t = now_at(ms(0));
    // capacity: one second's worth = 1000 tokens each.
    let mut req = AdmitRequest::new(target);
    req.input_estimate = Some(400);
    req.max_tokens = Some(500);
    let r = c.admit(&req, t).go().unwrap();
    let lv = c.snapshot(target.scope, t).unwrap().levels;
    assert_eq!((lv[1], lv[2]), (Some(600), Some(500)));
    let usage = Usage {
        input_tokens: 100,
        cache_creation_input_tokens: 200,
        cache_read_input_tokens: 10_000,
        output_tokens: 700,
    };
    c.settle(r, &usage, t);
    let lv = c.snapshot(target.scope, t).unwrap().levels;
    // input: 1000 - 300; output: 1000 - 700.
    assert_eq!((lv[1], lv[2]), (Some(700), Some(300)));
    assert_eq!(c.ledger().charged.input, 300);
    // Bytes heuristic: 4 bytes per token, rounded up.
    req.input_estimate = None;
    req.max_tokens = Some(100);
    req.body_bytes = 401;
    let r = c.admit(&req, t).go().unwrap();
    assert_eq!(r.amounts().input, 101);
    c.release(r, t);
    assert!(c.ledger().is_clean(), "{:?}", c.ledger());
}

#[test]
fn header_sync_lowers_to_the_server_view_without_oscillating() {
    let mut c = Controller::new({
        let mut config = base();
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        config.burst = ratewise_core::admit::Burst::uniform(Duration::from_secs(60))
            .with_known_credit(Duration::from_secs(60));
        config
    });
    let target = c.target("k", "claude-sonnet-4");
    let t = now_at(ms(0));
    let mut snap = RateLimitSnapshot {
        requests: Window {
            limit: Some(50),
            remaining: Some(3),
            reset: None,
        },
        input_tokens: Window {
            limit: Some(30_000),
            remaining: Some(29_000),
            reset: None,
        },
        ..RateLimitSnapshot::default()
    };
    c.sync_headers(target.scope, &snap, Provider::Anthropic, t);
    let s = c.snapshot(target.scope, t).unwrap();
    assert_eq!(s.limits.requests, Some(50));
    assert_eq!(s.levels[0], Some(3), "server view lower: it wins");
    // 29 000 is rounded to the nearest thousand (Anthropic documents it):
    // the truth is in [28 500, 29 500). The full credit of 30 000 is above
    // that, so it goes to the value reported.
    assert_eq!(s.levels[1], Some(29_000), "a rounded view: its value");
    // Rounded values bouncing between 20 000 and 21 000 do not oscillate.
    snap.input_tokens.remaining = Some(20_000);
    c.sync_headers(target.scope, &snap, Provider::Anthropic, t);
    assert_eq!(c.snapshot(target.scope, t).unwrap().levels[1], Some(20_000));
    for bounce in [21_000, 20_000, 21_000, 20_000] {
        snap.input_tokens.remaining = Some(bounce);
        c.sync_headers(target.scope, &snap, Provider::Anthropic, t);
        assert_eq!(c.snapshot(target.scope, t).unwrap().levels[1], Some(20_000));
    }
    // A value that is not a multiple of the rounding is exact: it wins.
    snap.input_tokens.remaining = Some(19_450);
    c.sync_headers(target.scope, &snap, Provider::Anthropic, t);
    assert_eq!(c.snapshot(target.scope, t).unwrap().levels[1], Some(19_450));
}

#[test]
fn retry_budget_refuses_retries_beyond_the_ratio() {
    let mut c = Controller::new({
        let mut config = base();
        config.retry_budget = {
            let mut budget = RetryBudgetConfig::default();
            budget.window = Duration::from_secs(10);
            budget.ratio_permille = 100;
            budget.min_retries = 0;
            budget
        };
        config
    });
    let target = c.target("k", "m");
    let t = now_at(ms(0));
    for _ in 0..20 {
        let r = c.admit(&AdmitRequest::new(target), t).go().unwrap();
        c.release(r, t);
    }
    let mut retry = AdmitRequest::new(target);
    retry.is_retry = true;
    for _ in 0..2 {
        let r = c.admit(&retry, t).go().unwrap();
        c.release(r, t);
    }
    assert_eq!(
        c.admit(&retry, t),
        Admission::Refused {
            reason: GiveUpReason::RetryBudget,
            earliest: None,
        }
    );
}

#[test]
fn spend_budget_never_exceeds_and_stops_until_the_window_resets() {
    let mut prices = PriceTable::default();
    prices.set(
        "claude-sonnet-4",
        Price {
            input: 3_000_000,
            output: 15_000_000,
            cache_write: 3_750_000,
            cache_read: 300_000,
        },
    );
    let mut c = Controller::new({
        // Limits far away: the spend budget alone gates (with none known,
        // a second request would wait for the first's answer).
        let mut config = rpm(1_000_000);
        config.spend = Some({
            let mut spend = SpendConfig::default();
            spend.window = Duration::from_secs(3600);
            spend.max_micros = Some(90_000); // 9 cents
            spend
        });
        config.prices = prices;
        config
    });
    let target = c.target("k", "claude-sonnet-4-5");
    let mut req = AdmitRequest::new(target);
    req.input_estimate = Some(1_000);
    req.max_tokens = Some(2_000);
    // worst case: 1000 × 3.75 + 2000 × 15 = 33 750 micro-dollars.
    let t = now_at(ms(0));
    let a = c.admit(&req, t).go().unwrap();
    assert_eq!(a.cost_micros(), 33_750);
    let b = c.admit(&req, t).go().unwrap();
    // A third worst case would not fit with two in flight: wait, not stop.
    assert!(matches!(
        c.admit(&req, t),
        Admission::Wait {
            reason: WaitReason::SpendInFlight,
            ..
        }
    ));
    let full = Usage {
        input_tokens: 1_000,
        output_tokens: 2_000,
        ..Usage::default()
    };
    c.settle(a, &full, t);
    c.settle(b, &full, t);
    // 66 000 settled: a third worst case (33 750) no longer fits this window.
    match c.admit(&req, t) {
        Admission::Stopped {
            cause: Cause::UserLimit,
            until,
        } => assert_eq!(until, Some(t.wall + Duration::from_secs(3600))),
        other => panic!("{other:?}"),
    }
    let totals = c.spend_totals(t).unwrap();
    assert_eq!(totals.settled_micros, 66_000);
    // A new window admits again.
    assert!(c.admit(&req, now_at(ms(3_600_000))).go().is_some());
}

#[test]
fn unknown_outcomes_keep_their_worst_case_and_abandoned_ones_expire() {
    let mut c = Controller::new({
        let mut config = base();
        config.limits = Limits {
            output_tokens: Some(60_000),
            ..Limits::NONE
        };
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        config
    });
    let target = c.target("k", "m");
    let t = now_at(ms(0));
    let mut req = AdmitRequest::new(target);
    req.max_tokens = Some(400);
    let held = c.admit(&req, t).go().unwrap();
    let abandoned = c.admit(&req, t).go().unwrap();
    c.hold_unknown(&held, t);
    let late = now_at(ms(3_600_000));
    assert_eq!(c.expire(late), 1);
    // Only the held one is still outstanding.
    assert_eq!(c.ledger().outstanding.requests, 1, "{:?}", c.ledger());
    assert_eq!(c.ledger().held.output, 400);
    assert_eq!(c.ledger().released.output, 400);
    // Settling the expired handle charges the actual usage in full (one
    // request, no tokens), once.
    let charged = c.ledger().charged;
    c.settle(abandoned, &Usage::default(), late);
    assert_eq!(c.ledger().charged.requests, charged.requests + 1);
    c.resolve_unknown(held, None, late);
    let l = c.ledger();
    assert!(l.is_clean(), "{l:?}");
}

#[test]
fn shared_state_works_across_threads() {
    use ratewise_core::admit::Shared;
    // Known limits far above the load: every admission goes, whichever
    // thread asks first (with none known, a request waits while another's
    // probe is out, and how many do depends on the threads' interleaving).
    let mut config = base();
    config.limits = Limits {
        requests: Some(1_000_000),
        ..Limits::NONE
    };
    let shared = std::sync::Arc::new(Shared::new(Controller::new(config)));
    let target = shared.target("k", "m");
    let handles: Vec<_> = (0..2)
        .map(|i| {
            let s = shared.clone();
            std::thread::spawn(move || {
                for n in 0..1000u64 {
                    let t = now_at(ms(i * 10_000 + n));
                    if let Admission::Go(r) = s.admit(&AdmitRequest::new(target), t) {
                        s.lock().settle(r, &Usage::default(), t);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let l = shared.lock().ledger();
    assert!(l.is_clean(), "{l:?}");
    assert_eq!(l.settled.requests, 2000);
}

#[test]
fn idle_restarts_the_ramp_and_waiting_records_no_attempt() {
    let mut c = Controller::new(rpm(600));
    let target = c.target("k", "m");
    // Ramp to the peak over ten calm seconds, one request per second.
    for i in 0..11 {
        let n = now_at(ms(i * 1_000));
        let r = c.admit(&AdmitRequest::new(target), n).go().unwrap();
        c.settle(r, &Usage::default(), n);
    }
    assert_eq!(
        c.snapshot(target.scope, now_at(ms(10_000)))
            .unwrap()
            .ramp_permille,
        1200
    );
    // Many waits burn nothing: the retry budget counts sends only.
    // (The send at 0 s has left the budget's 10 s window by now.)
    let (mut waits, mut sends) = (0, 10);
    for _ in 0..50 {
        match c.admit(&AdmitRequest::new(target), now_at(ms(10_000))) {
            Admission::Wait { .. } => waits += 1,
            Admission::Go(r) => {
                sends += 1;
                c.settle(r, &Usage::default(), now_at(ms(10_000)));
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(waits > 30);
    assert_eq!(c.retry_counts(now_at(ms(10_000))), (sends, 0));
    // Idle for more than a minute: back to 10 %.
    let later = now_at(ms(10_000 + 61_000));
    let r = c.admit(&AdmitRequest::new(target), later).go().unwrap();
    c.release(r, later);
    assert_eq!(c.snapshot(target.scope, later).unwrap().ramp_permille, 100);
}

#[test]
fn default_burst_holds_seconds_of_requests_and_a_large_request_of_tokens() {
    use ratewise_core::admit::Burst;
    let burst = Burst::default();
    // 60 RPM: five requests at most at once, never a minute's worth.
    assert_eq!(capacity_for(60, burst.requests), 5);
    // 30 000 ITPM: a 4 000-token prompt fits without waiting for a full minute.
    assert!(capacity_for(30_000, burst.tokens) >= 4_000);
    assert!(capacity_for(30_000, burst.tokens) < 30_000);
}

/// The capacity of a bucket of `limit` per minute holding `burst` worth of
/// refill, as the core documents it: `ceil(limit · burst / 1 min)`, at
/// least 1 (the core's own function is not public API).
fn capacity_for(limit: u64, burst: std::time::Duration) -> u64 {
    let cap = (u128::from(limit) * burst.as_nanos()).div_ceil(60_000_000_000);
    cap.clamp(1, u128::from(u64::MAX)) as u64
}

/// How far past the exact instant the core puts a bucket's wait (its
/// `EDGE_MARGIN`, a tuning constant that is not public API).
const EDGE_MARGIN: std::time::Duration = std::time::Duration::from_millis(1);
