//! The fast lane of `Shared`: the invariants of admission control (rate
//! bounds, conservation, stops, pauses, header sync, retry budget) under
//! any single-threaded mix of lane and locked operations, and conservation
//! and the rate bound with two threads on one limiter.

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use proptest::prelude::*;
use ratewise_core::admit::bucket::capacity_for;
use ratewise_core::admit::retry_budget::SLOTS;
use ratewise_core::admit::{
    Admission, AdmissionState, AdmitRequest, Burst, Config, Controller, Ledger, Limits, RampConfig,
    Reservation, RetryBudgetConfig, Shared, WaitReason,
};
use ratewise_core::classify::{classify_response, ResponseView};
use ratewise_core::decide::{decide, JobState, Policy};
use ratewise_core::{Cause, GiveUpReason, Instant, Now, Provider, Usage};
use std::time::{Duration, SystemTime};

const RPM: u64 = 1_200;
const ITPM: u64 = 600_000;
const OTPM: u64 = 120_000;
const LEASE: Duration = Duration::from_secs(40);
const RETRY_WINDOW: Duration = Duration::from_secs(10);

fn now_at(t: Instant) -> Now {
    Now::new(t, SystemTime::UNIX_EPOCH + t.since_origin())
}

fn shared(ramp: bool, ratio: u32, min: u32) -> Shared {
    Shared::new(Controller::new(Config {
        limits: Limits {
            requests: Some(RPM),
            input_tokens: Some(ITPM),
            output_tokens: Some(OTPM),
            tokens: None,
        },
        ramp: RampConfig {
            start: if ramp { 100 } else { 1000 },
            idle_after: Duration::from_secs(5),
            ..RampConfig::default()
        },
        retry_budget: RetryBudgetConfig {
            window: RETRY_WINDOW,
            ratio_permille: ratio,
            min_retries: min,
        },
        lease: LEASE,
        burst: ratewise_core::admit::Burst::default().with_known_credit(Duration::from_secs(60)),
        ..Config::default()
    }))
}

/// A response classified and applied through `observe`.
fn observe(
    s: &Shared,
    scope: ratewise_core::admit::ScopeId,
    status: u16,
    headers: &[(&str, String)],
    now: Now,
) {
    let mut h = HeaderMap::new();
    for (k, v) in headers {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    let body = if status == 429 {
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your per-minute rate limit"}}"#
    } else {
        r#"{"type":"message","usage":{"input_tokens":1,"output_tokens":1}}"#
    };
    let view = ResponseView {
        status: StatusCode::from_u16(status).unwrap(),
        headers: &h,
        body: body.as_bytes(),
    };
    let c = classify_response(Provider::Anthropic, &view, now.wall);
    let d = decide(
        &Policy::default(),
        &JobState::new(1, now.instant, None),
        &c,
        now,
        &mut fastrand::Rng::with_seed(7),
    );
    let _ = s.observe(scope, &c, d, now);
}

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Admit {
        input: u64,
        max_tokens: u64,
        retry: bool,
    },
    Settle {
        pick: usize,
        input_pct: u64,
        output_pct: u64,
    },
    Release {
        pick: usize,
    },
    Hold {
        pick: usize,
    },
    Resolve {
        pick: usize,
        sent: bool,
    },
    Stop {
        until_ms: Option<u64>,
    },
    Resume,
    Pause {
        secs: u64,
    },
    Sync {
        remaining: u64,
    },
    Expire,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (0u64..1_500).prop_map(Op::Advance),
        30 => (0u64..3_000, 1u64..1_500, proptest::bool::weighted(0.15))
            .prop_map(|(input, max_tokens, retry)| Op::Admit { input, max_tokens, retry }),
        14 => (any::<usize>(), 0u64..=100, 0u64..=100)
            .prop_map(|(pick, input_pct, output_pct)| Op::Settle { pick, input_pct, output_pct }),
        3 => any::<usize>().prop_map(|pick| Op::Release { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Hold { pick }),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(pick, sent)| Op::Resolve { pick, sent }),
        1 => proptest::option::weighted(0.8, 0u64..20_000).prop_map(|until_ms| Op::Stop { until_ms }),
        1 => Just(Op::Resume),
        1 => (1u64..8).prop_map(|secs| Op::Pause { secs }),
        1 => (0u64..120).prop_map(|remaining| Op::Sync { remaining }),
        1 => Just(Op::Expire),
    ]
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

/// Over every window [a, b] of sample times, the net units taken never
/// exceed `min(credit + limit · w, pace + peak · limit · w) + slack` with
/// `w = (b − a) / 1 min` (the bound documented on `Burst`).
fn check_window_bound(
    samples: &[(Instant, [i64; 3])],
    d: usize,
    limit: u64,
    burst: Duration,
    slack: i64,
) {
    let pace = capacity_for(limit, burst) as i64;
    let credit = capacity_for(limit, Burst::default().credit) as i64;
    let peak = u128::from(RampConfig::default().peak());
    for i in 0..samples.len() {
        // The window starts just after sample i-1: what sample i added is in it.
        let base = if i == 0 { 0 } else { samples[i - 1].1[d] };
        for e in &samples[i..] {
            let w = (e.0 - samples[i].0).as_nanos();
            let refill = (u128::from(limit) * w / 60_000_000_000) as i64;
            let paced = (u128::from(limit) * peak * w / 60_000_000_000_000) as i64;
            let bound = (credit + refill).min(pace + paced);
            let taken = e.1[d] - base;
            assert!(
                taken <= bound + slack,
                "dim {d} window {:?}..{:?}: {taken} > min(credit {credit} + {refill}, pace {pace} + {paced}) + slack {slack}",
                samples[i].0,
                e.0
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Any mix of lane and locked operations keeps every invariant.
    #[test]
    fn lane_and_lock_keep_the_invariants(
        ops in proptest::collection::vec(op(), 1..400),
        ramp in any::<bool>(),
        ratio in 0u32..=1000,
        min in 0u32..5,
    ) {
        let s = shared(ramp, ratio, min);
        let target = s.target("k", "claude-sonnet-4-5");
        let scope = target.scope;
        let mut t = Instant::ZERO;
        let mut open: Vec<Reservation> = Vec::new();
        let mut held: Vec<Reservation> = Vec::new();
        // Expired by `expire` (a lease with no admission later): settling
        // them is a stale handle's charge, done after the rate checks.
        let mut expired: Vec<Reservation> = Vec::new();
        let mut samples: Vec<(Instant, [i64; 3])> = vec![(t, [0; 3])];
        let mut largest = [1u64; 3];
        let mut admitted = 0u64;
        let mut fast = 0u64;
        // None = running, Some(None) = until resume, Some(Some(t)) = until t.
        let mut stopped: Option<Option<Instant>> = None;
        let mut paused_until = Instant::ZERO;
        // (time, remaining, net requests then): header syncs.
        let mut syncs: Vec<(Instant, u64, i64)> = Vec::new();
        // Retry-budget log: (slot, is_retry); lane first attempts are
        // counted at the next locked admission (the documented skew).
        let slot_ns = (RETRY_WINDOW.as_nanos() / SLOTS as u128).max(1);
        let mut log: Vec<(u128, bool)> = Vec::new();
        let mut lane_firsts_pending = 0u64;
        for op in ops {
            let now = now_at(t);
            match op {
                Op::Advance(ms) => t = t + Duration::from_millis(ms),
                Op::Admit { input, max_tokens, retry } => {
                    if let Some(Some(until)) = stopped {
                        if t >= until { stopped = None; }
                    }
                    let mut req = AdmitRequest::new(target);
                    req.input_estimate = Some(input);
                    req.max_tokens = Some(max_tokens);
                    req.is_retry = retry;
                    let a = s.admit(&req, now);
                    let slot = t.since_origin().as_nanos() / slot_ns;
                    let lane = matches!(&a, Admission::Go(r) if r.is_fast_lane());
                    if !lane {
                        for _ in 0..std::mem::take(&mut lane_firsts_pending) {
                            log.push((slot, false));
                        }
                    }
                    match a {
                        Admission::Go(r) => {
                            prop_assert!(stopped.is_none(), "admitted while stopped");
                            prop_assert!(t >= paused_until, "admitted while paused");
                            prop_assert!(!(retry && r.is_fast_lane()), "a retry in the lane");
                            prop_assert_eq!(r.amounts().input, input);
                            prop_assert_eq!(r.amounts().output, max_tokens);
                            admitted += 1;
                            largest[1] = largest[1].max(input);
                            largest[2] = largest[2].max(max_tokens);
                            if r.is_fast_lane() {
                                fast += 1;
                                lane_firsts_pending += 1;
                            } else {
                                log.push((slot, retry));
                            }
                            if retry {
                                let lo = slot.saturating_sub(SLOTS as u128 - 1);
                                let (retries, firsts) = log
                                    .iter()
                                    .filter(|(s, _)| *s >= lo && *s <= slot)
                                    .fold((0u64, 0u64), |(r, f), (_, rt)| if *rt { (r + 1, f) } else { (r, f + 1) });
                                prop_assert!(
                                    retries * 1000 <= u64::from(min) * 1000 + firsts * u64::from(ratio),
                                    "{} retries for {} firsts", retries, firsts
                                );
                            }
                            open.push(r);
                        }
                        Admission::Stopped { cause, .. } => {
                            prop_assert!(stopped.is_some());
                            prop_assert_eq!(cause, Cause::SpendCap);
                        }
                        Admission::Wait { until, reason } => {
                            prop_assert!(until > t);
                            if reason == WaitReason::Paused {
                                prop_assert!(t < paused_until);
                            }
                        }
                        Admission::Refused { reason } => {
                            prop_assert!(retry);
                            prop_assert_eq!(reason, GiveUpReason::RetryBudget);
                        }
                    }
                }
                Op::Settle { pick, input_pct, output_pct } if !open.is_empty() => {
                    let r = open.swap_remove(pick % open.len());
                    let a = r.amounts();
                    let usage = Usage {
                        input_tokens: a.input * input_pct / 100,
                        output_tokens: a.output * output_pct / 100,
                        ..Usage::default()
                    };
                    s.settle(r, &usage, now);
                }
                Op::Release { pick } if !open.is_empty() => {
                    let r = open.swap_remove(pick % open.len());
                    s.release(r, now);
                }
                Op::Hold { pick } if !open.is_empty() => {
                    let r = open.swap_remove(pick % open.len());
                    s.hold_unknown(&r, now);
                    held.push(r);
                }
                Op::Resolve { pick, sent } if !held.is_empty() => {
                    let r = held.swap_remove(pick % held.len());
                    let usage = Usage { input_tokens: r.amounts().input / 2, ..Usage::default() };
                    s.resolve_unknown(r, sent.then_some(&usage), now);
                }
                Op::Stop { until_ms } => {
                    let until = until_ms.map(|ms| t + Duration::from_millis(ms));
                    s.lock().stop(scope, Cause::SpendCap, until.map(|u| now_at(u).wall), now);
                    stopped = match (stopped, until) {
                        (Some(None), _) | (_, None) => Some(None),
                        (Some(Some(a)), Some(b)) if a > t => Some(Some(a.max(b))),
                        (_, Some(b)) => Some(Some(b)),
                    };
                }
                Op::Resume => {
                    s.resume("k", now);
                    stopped = None;
                }
                Op::Pause { secs } => {
                    observe(&s, scope, 429, &[("retry-after", secs.to_string())], now);
                    paused_until = paused_until.max(t + Duration::from_secs(secs));
                }
                Op::Sync { remaining } => {
                    observe(&s, scope, 200, &[
                        ("anthropic-ratelimit-requests-limit", RPM.to_string()),
                        ("anthropic-ratelimit-requests-remaining", remaining.to_string()),
                    ], now);
                    let n = net(&s.ledger())[0];
                    syncs.push((t, remaining, n));
                }
                Op::Expire => {
                    // A lease and a second: lane admission instants are
                    // kept to the millisecond, rounded up.
                    t = t + LEASE + Duration::from_secs(1);
                    let n = s.expire(now_at(t));
                    prop_assert_eq!(n, open.len(), "expired");
                    expired.append(&mut open);
                }
                _ => {}
            }
            let l = s.ledger();
            prop_assert!(l.conserved(), "{:?}", l);
            prop_assert_eq!(l.reserved.requests, admitted);
            let n = net(&l);
            samples.push((t, n));
            for (at, remaining, before) in &syncs {
                let refill = (u128::from(RPM) * (t - *at).as_nanos() / 60_000_000_000) as i64;
                prop_assert!(
                    n[0] - before <= *remaining as i64 + refill,
                    "after a sync to {} at {:?}: {} taken by {:?}", remaining, at, n[0] - before, t
                );
            }
        }
        let l = s.ledger();
        prop_assert_eq!(l.outstanding.requests + l.released.requests + l.settled.requests, admitted);
        prop_assert_eq!(l.held.requests, held.len() as u64);
        if std::env::var_os("LANE_PROPS_STATS").is_some() {
            eprintln!("admitted {admitted} fast {fast} open {} held {}", open.len(), held.len());
        }
        let burst = Burst::default();
        check_window_bound(&samples, 0, RPM, burst.requests, 0);
        check_window_bound(&samples, 1, ITPM, burst.tokens, largest[1] as i64 - 1);
        check_window_bound(&samples, 2, OTPM, burst.tokens, largest[2] as i64 - 1);
        // Stale handles: ignored by the ledger's reservations, charged.
        let end = now_at(t);
        for r in expired {
            s.settle(r, &Usage::default(), end);
        }
        for r in open {
            s.release(r, end);
        }
        for r in held {
            s.resolve_unknown(r, None, end);
        }
        let l = s.ledger();
        prop_assert!(l.conserved(), "{:?}", l);
        prop_assert_eq!(l.outstanding, Default::default());
    }
}

/// Two threads on one limiter, bounded iterations: conservation holds and
/// no more was admitted than the buckets allowed (capacity + refill over
/// the virtual time used), with a good share taken by the lane.
#[test]
fn two_threads_conserve_and_stay_within_the_buckets() {
    threads_conserve_and_stay_within_the_buckets(2, 50_000);
}

/// The same with more threads than a lane has stripes to own (8): the
/// threads beyond them settle into shared stripes with atomic adds.
#[test]
fn more_threads_than_stripes_conserve_and_stay_within_the_buckets() {
    threads_conserve_and_stay_within_the_buckets(11, 8_000);
}

fn threads_conserve_and_stay_within_the_buckets(threads: u64, per_thread: u64) {
    let s = shared(false, 200, 10);
    let target = s.target("k", "claude-sonnet-4-5");
    // Virtual time: each thread steps 1 ms per iteration, so the refill
    // over the run is RPM · per_thread ms / 60 s.
    let fast = std::sync::atomic::AtomicU64::new(0);
    let start = std::sync::Barrier::new(threads as usize);
    std::thread::scope(|sc| {
        for k in 0..threads {
            let s = &s;
            let fast = &fast;
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
                        if r.is_fast_lane() {
                            fast.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        open.push(r);
                    }
                    if open.len() > 3 || (i + k) % 5 == 0 {
                        if let Some(r) = open.pop() {
                            match i % 4 {
                                0 => s.release(r, now),
                                1 => {
                                    s.hold_unknown(&r, now);
                                    s.resolve_unknown(r, Some(&Usage::default()), now);
                                }
                                _ => {
                                    let u = Usage {
                                        input_tokens: r.amounts().input / 2,
                                        output_tokens: 10,
                                        ..Usage::default()
                                    };
                                    s.settle(r, &u, now);
                                }
                            }
                        }
                    }
                    if i % 997 == 0 {
                        assert!(s.ledger().conserved());
                    }
                }
                let end = now_at(Instant::from_millis(per_thread));
                for r in open {
                    s.settle(r, &Usage::default(), end);
                }
            });
        }
    });
    let l = s.ledger();
    assert!(l.conserved(), "{l:?}");
    assert_eq!(l.outstanding.requests, 0);
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
    assert!(fast.into_inner() > 0);
}

/// A lease parked while the bucket refills to full is no extra burst: at
/// one instant, lane and lock together admit at most the capacity.
#[test]
fn a_parked_lease_adds_no_burst_to_a_full_bucket() {
    let s = shared(false, 200, 10);
    let target = s.target("k", "claude-sonnet-4-5");
    let req = AdmitRequest::new(target);
    let first = s.admit(&req, now_at(Instant::ZERO)).go().unwrap();
    assert!(!first.is_fast_lane());
    s.settle(first, &Usage::default(), now_at(Instant::ZERO));
    // Long enough to refill the bucket (5 s burst), short enough for the
    // lease to stay fresh (idle after 5 s).
    let t = now_at(Instant::from_millis(4_900));
    let (mut lane, mut locked) = (0, 0);
    while let Admission::Go(r) = s.admit(&req, t) {
        if r.is_fast_lane() {
            lane += 1;
        } else {
            locked += 1;
        }
        s.settle(r, &Usage::default(), t);
        assert!(lane + locked <= 200, "runaway");
    }
    let cap = capacity_for(RPM, Burst::default().requests);
    assert!(lane > 0, "{lane} {locked}");
    assert!(
        lane + locked <= cap,
        "{lane} by the lane + {locked} locked > {cap}"
    );
}

/// Usage above the estimate (debt) and a release take their paths; a
/// reservation held as unknown moves to the slab and resolves there.
#[test]
fn debt_release_and_hold_of_lane_reservations() {
    let s = shared(false, 200, 10);
    let target = s.target("k", "claude-sonnet-4-5");
    let mut req = AdmitRequest::new(target);
    req.input_estimate = Some(100);
    req.max_tokens = Some(100);
    let t = now_at(Instant::ZERO);
    let slow = s.admit(&req, t).go().unwrap();
    let [a, b, c] = [0; 3].map(|_| s.admit(&req, t).go().unwrap());
    assert!(!slow.is_fast_lane() && a.is_fast_lane() && b.is_fast_lane() && c.is_fast_lane());
    let before = s.snapshot(target.scope, t).unwrap().levels[1].unwrap();
    // 300 input tokens against an estimate of 100: a debt of 200.
    s.settle(
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
    s.release(b, t);
    s.hold_unknown(&c, t);
    let l = s.ledger();
    assert!(l.conserved(), "{l:?}");
    assert_eq!(
        (l.held.requests, l.released.requests, l.settled.requests),
        (1, 1, 1)
    );
    assert_eq!(l.charged.input, 300);
    s.resolve_unknown(
        c,
        Some(&Usage {
            input_tokens: 10,
            ..Usage::default()
        }),
        t,
    );
    s.settle(slow, &Usage::default(), t);
    let l = s.ledger();
    assert!(l.conserved(), "{l:?}");
    assert_eq!(l.outstanding, Default::default());
    assert_eq!((l.held.requests, l.settled.requests), (0, 3));
}

/// `observe_sent` for a lane reservation (no credit marks: read against
/// the present) puts the lease back first, so a server's remaining below
/// the level *with* the lease lowers it; the lane serves again afterwards.
#[test]
fn observe_sent_of_a_lane_reservation_syncs_with_the_lease_counted() {
    let s = shared(false, 200, 10);
    let target = s.target("k", "claude-sonnet-4-5");
    let req = AdmitRequest::new(target);
    let t = now_at(Instant::ZERO);
    let first = s.admit(&req, t).go().unwrap();
    let lane = s.admit(&req, t).go().unwrap();
    assert!(lane.is_fast_lane());
    let sent = lane.sent();
    let mut h = HeaderMap::new();
    h.insert("anthropic-ratelimit-requests-limit", HeaderValue::from(RPM));
    h.insert(
        "anthropic-ratelimit-requests-remaining",
        HeaderValue::from(5u64),
    );
    let body = r#"{"type":"message","usage":{"input_tokens":1,"output_tokens":1}}"#;
    let view = ResponseView {
        status: StatusCode::OK,
        headers: &h,
        body: body.as_bytes(),
    };
    let c = classify_response(Provider::Anthropic, &view, t.wall);
    let d = decide(
        &Policy::default(),
        &JobState::new(1, t.instant, None),
        &c,
        t,
        &mut fastrand::Rng::with_seed(7),
    );
    let _ = s.observe_sent(&sent, &c, d, t);
    s.settle(lane, &Usage::default(), t);
    s.settle(first, &Usage::default(), t);
    // At most the server's 5 (plus nothing refilled at the same instant).
    let mut kept = Vec::new();
    while let Admission::Go(r) = s.admit(&req, t) {
        kept.push(r);
        assert!(kept.len() <= 100, "runaway");
    }
    assert!(
        kept.len() <= 5,
        "{} admitted after the server said 5",
        kept.len()
    );
    assert!(!kept.is_empty());
    for r in kept {
        s.settle(r, &Usage::default(), t);
    }
    assert!(s.ledger().conserved());
}

/// Drains racing lock-free settles never give back credit that was used.
/// Time stands still (no refill) and every usage equals its estimate, so
/// the input credit must end at exactly its capacity less the net input
/// taken, however the drains (`Shared::ledger`, on another thread) cut
/// through settles being written. (A drain that took a settle's actual
/// before its estimate used to put back the whole estimate at the next
/// drain: 10⁵ tokens minted in a few seconds.)
#[test]
fn drains_racing_settles_never_mint_credit() {
    const BIG: u64 = 1_000_000_000_000;
    let s = Shared::new(Controller::new(Config {
        limits: Limits {
            requests: Some(BIG),
            input_tokens: Some(BIG),
            output_tokens: Some(BIG),
            tokens: None,
        },
        ramp: RampConfig {
            start: 1000,
            ..RampConfig::default()
        },
        burst: ratewise_core::admit::Burst::default().with_known_credit(Duration::from_secs(60)),
        ..Config::default()
    }));
    let target = s.target("k", "claude-sonnet-4-5");
    let now = now_at(Instant::ZERO);
    let done = std::sync::atomic::AtomicBool::new(false);
    let mut fast = 0u64;
    let mut drains = 0u64;
    std::thread::scope(|sc| {
        let settler = sc.spawn(|| {
            let mut fast = 0u64;
            for i in 0..200_000u64 {
                let mut req = AdmitRequest::new(target);
                req.input_estimate = Some(1_000 + i % 3);
                req.max_tokens = Some(500);
                if let Admission::Go(r) = s.admit(&req, now) {
                    fast += u64::from(r.is_fast_lane());
                    let a = r.amounts();
                    let u = Usage {
                        input_tokens: a.input,
                        output_tokens: a.output,
                        ..Usage::default()
                    };
                    s.settle(r, &u, now);
                }
            }
            done.store(true, std::sync::atomic::Ordering::Release);
            fast
        });
        loop {
            assert!(s.ledger().conserved());
            drains += 1;
            if done.load(std::sync::atomic::Ordering::Acquire) {
                break;
            }
        }
        fast = settler.join().unwrap();
    });
    let l = s.ledger();
    assert!(l.conserved(), "{l:?}");
    assert!(
        fast > 100_000 && drains > 0,
        "{fast} lane admissions, {drains} drains"
    );
    let taken = l.reserved.input as i64 - l.released.input as i64 - l.settled.input as i64
        + l.charged.input as i64;
    let credit = {
        let mut c = s.lock();
        c.snapshot(target.scope, now).unwrap().credits[1].unwrap()
    };
    let cap = capacity_for(BIG, Burst::default().credit) as i64;
    assert_eq!(
        credit,
        cap - taken,
        "{} tokens minted",
        credit - (cap - taken)
    );
}
