//! `Shared` with several threads on one limiter: conservation, the rate
//! bound, and no credit minted, through the in-memory store. (The
//! single-threaded invariants are the controller's: `admit_props.rs`.)

use ratewise_core::admit::{
    Admission, AdmitRequest, Burst, Config, Controller, Ledger, Limits, RampConfig, Reservation,
    RetryBudgetConfig, Shared,
};
use ratewise_core::{Instant, Now, Usage};
use std::time::{Duration, SystemTime};

const RPM: u64 = 1_200;
const ITPM: u64 = 600_000;
const OTPM: u64 = 120_000;

fn now_at(t: Instant) -> Now {
    Now::new(t, SystemTime::UNIX_EPOCH + t.since_origin())
}

fn shared() -> Shared {
    Shared::new(Controller::new({
        let mut config = Config::default();
        config.limits = Limits {
            requests: Some(RPM),
            input_tokens: Some(ITPM),
            output_tokens: Some(OTPM),
            tokens: None,
        };
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp.idle_after = Duration::from_secs(5);
            ramp
        };
        config.retry_budget = {
            let mut budget = RetryBudgetConfig::default();
            budget.window = Duration::from_secs(10);
            budget.ratio_permille = 200;
            budget.min_retries = 10;
            budget
        };
        config.lease = Duration::from_secs(40);
        config.burst = Burst::default().with_known_credit(Duration::from_secs(60));
        config
    }))
}

/// Net units taken from the buckets so far, per dimension, as the ledger
/// says: reserved − released − settled estimates + settled actuals.
fn net(l: &Ledger) -> [i64; 3] {
    let f = |r: u64, rel: u64, s: u64, c: u64| r as i64 - rel as i64 - s as i64 + c as i64;
    [
        f(
            l.reserved.requests,
            l.released.requests,
            l.settled.requests,
            l.charged.requests,
        ),
        f(
            l.reserved.input,
            l.released.input,
            l.settled.input,
            l.charged.input,
        ),
        f(
            l.reserved.output,
            l.released.output,
            l.settled.output,
            l.charged.output,
        ),
    ]
}

/// Two threads on one limiter, bounded iterations: conservation holds and
/// no more was admitted than the buckets allowed (capacity + refill over
/// the virtual time used).
#[test]
fn two_threads_conserve_and_stay_within_the_buckets() {
    threads_conserve_and_stay_within_the_buckets(2, 50_000);
}

/// The same with more threads than cores.
#[test]
fn many_threads_conserve_and_stay_within_the_buckets() {
    threads_conserve_and_stay_within_the_buckets(11, 8_000);
}

fn threads_conserve_and_stay_within_the_buckets(threads: u64, per_thread: u64) {
    let s = shared();
    let target = s.target("k", "claude-sonnet-4-5");
    // Virtual time: each thread steps 1 ms per iteration, so the refill
    // over the run is RPM · per_thread ms / 60 s.
    let start = std::sync::Barrier::new(threads as usize);
    std::thread::scope(|sc| {
        for k in 0..threads {
            let s = &s;
            let start = &start;
            sc.spawn(move || {
                start.wait();
                let mut open: Vec<Reservation> = Vec::new();
                for i in 0..per_thread {
                    let now = now_at(Instant::from_millis(i));
                    let mut req = AdmitRequest::new(target);
                    req.input_estimate = Some(100 + (i % 7) * 10);
                    req.max_tokens = Some(50);
                    if let Admission::Go(r) = s.admit(&req, now) {
                        open.push(r);
                    }
                    if open.len() > 3 || (i + k) % 5 == 0 {
                        if let Some(r) = open.pop() {
                            match i % 4 {
                                0 => s.lock().release(r, now),
                                1 => {
                                    s.lock().hold_unknown(&r, now);
                                    s.lock().resolve_unknown(r, Some(&Usage::default()), now);
                                }
                                _ => {
                                    let u = Usage {
                                        input_tokens: r.amounts().input / 2,
                                        output_tokens: 10,
                                        ..Usage::default()
                                    };
                                    s.lock().settle(r, &u, now);
                                }
                            }
                        }
                    }
                    if i % 997 == 0 {
                        assert_eq!(s.lock().ledger().refused_ends, 0);
                    }
                }
                let end = now_at(Instant::from_millis(per_thread));
                for r in open {
                    s.lock().settle(r, &Usage::default(), end);
                }
            });
        }
    });
    let l = s.lock().ledger();
    assert!(l.is_clean(), "{l:?}");
    let burst = Burst::default();
    let span = Duration::from_millis(per_thread);
    let refill = |limit: u64| (u128::from(limit) * span.as_nanos() / 60_000_000_000) as u64;
    // Net units taken (reserved − given back) within the buckets.
    let [requests, input, _] = net(&l);
    let peak = u128::from(RampConfig::default().peak());
    let bound = |limit: u64, pace: Duration| {
        let paced = (u128::from(limit) * peak * span.as_nanos() / 60_000_000_000_000) as u64;
        (capacity_for(limit, burst.credit) + refill(limit)).min(capacity_for(limit, pace) + paced)
    };
    assert!(
        requests as u64 <= bound(RPM, burst.requests),
        "{requests} taken"
    );
    assert!(
        input as u64 <= bound(ITPM, burst.tokens) + 160,
        "{input} taken"
    );
    assert!(l.reserved.requests > 100, "{l:?}");
}

/// Concurrent admissions, settles and ledger reads never give back credit
/// that was used. Time stands still (no refill) and every usage equals its
/// estimate, so the input credit must end at exactly its capacity less the
/// net input taken.
#[test]
fn threads_racing_settles_never_mint_credit() {
    const BIG: u64 = 1_000_000_000_000;
    let s = Shared::new(Controller::new({
        let mut config = Config::default();
        config.limits = Limits {
            requests: Some(BIG),
            input_tokens: Some(BIG),
            output_tokens: Some(BIG),
            tokens: None,
        };
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        config.burst = Burst::default().with_known_credit(Duration::from_secs(60));
        config
    }));
    let target = s.target("k", "claude-sonnet-4-5");
    let now = now_at(Instant::ZERO);
    let done = std::sync::atomic::AtomicU64::new(0);
    let mut reads = 0u64;
    std::thread::scope(|sc| {
        for k in 0..2u64 {
            let (s, done) = (&s, &done);
            sc.spawn(move || {
                for i in 0..20_000u64 {
                    let mut req = AdmitRequest::new(target);
                    req.input_estimate = Some(1_000 + (i + k) % 3);
                    req.max_tokens = Some(500);
                    if let Admission::Go(r) = s.admit(&req, now) {
                        let a = r.amounts();
                        let u = Usage {
                            input_tokens: a.input,
                            output_tokens: a.output,
                            ..Usage::default()
                        };
                        s.lock().settle(r, &u, now);
                    }
                }
                done.fetch_add(1, std::sync::atomic::Ordering::Release);
            });
        }
        while done.load(std::sync::atomic::Ordering::Acquire) < 2 {
            assert_eq!(s.lock().ledger().refused_ends, 0);
            reads += 1;
        }
    });
    let l = s.lock().ledger();
    assert!(l.is_clean(), "{l:?}");
    assert!(l.settled.requests == 40_000 && reads > 0, "{l:?}");
    let taken = net(&l)[1];
    let credit = s.snapshot(target.scope, now).unwrap().credits[1].unwrap();
    let cap = capacity_for(BIG, Burst::default().credit) as i64;
    assert_eq!(
        credit,
        cap - taken,
        "{} tokens minted",
        credit - (cap - taken)
    );
}

/// Usage above the estimate (debt), a release and a hold take their paths
/// through the seam.
#[test]
fn debt_release_and_hold_through_the_seam() {
    let s = shared();
    let target = s.target("k", "claude-sonnet-4-5");
    let mut req = AdmitRequest::new(target);
    req.input_estimate = Some(100);
    req.max_tokens = Some(100);
    let t = now_at(Instant::ZERO);
    let [a, b, c, d] = [0; 4].map(|_| s.admit(&req, t).go().unwrap());
    let before = s.snapshot(target.scope, t).unwrap().levels[1].unwrap();
    // 300 input tokens against an estimate of 100: a debt of 200.
    s.lock().settle(
        a,
        &Usage {
            input_tokens: 300,
            output_tokens: 50,
            ..Usage::default()
        },
        t,
    );
    assert_eq!(
        s.snapshot(target.scope, t).unwrap().levels[1].unwrap(),
        before - 200
    );
    s.lock().release(b, t);
    s.lock().hold_unknown(&c, t);
    let l = s.lock().ledger();
    assert_eq!(
        (l.held.requests, l.released.requests, l.settled.requests),
        (1, 1, 1)
    );
    assert_eq!(l.charged.input, 300);
    s.lock().resolve_unknown(
        c,
        Some(&Usage {
            input_tokens: 10,
            ..Usage::default()
        }),
        t,
    );
    s.lock().settle(d, &Usage::default(), t);
    let l = s.lock().ledger();
    assert!(l.is_clean(), "{l:?}");
    assert_eq!((l.held.requests, l.settled.requests), (0, 3));
}

/// The capacity of a bucket of `limit` per minute holding `burst` worth of
/// refill, as the core documents it: `ceil(limit · burst / 1 min)`, at
/// least 1 (the core's own function is not public API).
fn capacity_for(limit: u64, burst: std::time::Duration) -> u64 {
    let cap = (u128::from(limit) * burst.as_nanos()).div_ceil(60_000_000_000);
    cap.clamp(1, u128::from(u64::MAX)) as u64
}
