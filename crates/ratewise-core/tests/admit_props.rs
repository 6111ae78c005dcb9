//! Property tests of admission control: rate bounds, conservation, stops,
//! retry budget, never-exceed spend.

use proptest::prelude::*;
use ratewise_core::admit::{
    Admission, AdmitRequest, Config, Controller, Limits, Price, PriceTable, Reservation,
    RetryBudgetConfig, SpendConfig,
};
use ratewise_core::admit::{Burst, RampConfig};
use ratewise_core::{Cause, GiveUpReason, Instant, Now, Usage};
use std::time::{Duration, SystemTime};

fn now_at(t: Instant) -> Now {
    Now::new(t, SystemTime::UNIX_EPOCH + t.since_origin())
}

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Admit {
        input: u64,
        max_tokens: u64,
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
    Stop {
        until_ms: Option<u64>,
    },
    Resume,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0u64..1_500).prop_map(Op::Advance),
        18 => (0u64..2_000, 1u64..1_500).prop_map(|(input, max_tokens)| Op::Admit { input, max_tokens }),
        9 => (any::<usize>(), 0u64..=100, 0u64..=100)
            .prop_map(|(pick, input_pct, output_pct)| Op::Settle { pick, input_pct, output_pct }),
        3 => any::<usize>().prop_map(|pick| Op::Release { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Hold { pick }),
        1 => proptest::option::weighted(0.8, 0u64..20_000).prop_map(|until_ms| Op::Stop { until_ms }),
        2 => Just(Op::Resume),
    ]
}

const RPM: u64 = 120;
const ITPM: u64 = 60_000;

/// (time, requests delta, input delta) of admissions and give-backs.
type Events = Vec<(Instant, i64, i64)>;

/// Over every window [a, b] of event times, net admitted units never exceed
/// `min(credit + limit · w, pace + peak · limit · w) + slack` with `w =
/// (b − a) / 1 min`: the provider's credit refills at the limit, the pace
/// (a few seconds' capacity) at the ramp's peak.
fn check_window_bound(
    events: &Events,
    unit: fn(&(Instant, i64, i64)) -> i64,
    limit: u64,
    burst: Duration,
    slack: i64,
) {
    let bursts = Burst::default();
    let pace = capacity_for(limit, burst) as i64;
    let credit = capacity_for(limit, bursts.credit) as i64;
    let peak = u128::from(RampConfig::default().peak());
    for i in 0..events.len() {
        let mut net = 0i64;
        for e in &events[i..] {
            net += unit(e);
            let w = (e.0 - events[i].0).as_nanos();
            let refill = (u128::from(limit) * w / 60_000_000_000) as i64;
            let paced = (u128::from(limit) * peak * w / 60_000_000_000_000) as i64;
            let bound = (credit + refill).min(pace + paced);
            assert!(
                net <= bound + slack,
                "window {:?}..{:?}: net {net} > min(credit {credit} + {refill}, pace {pace} + {paced}) + slack {slack}",
                events[i].0,
                e.0
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Rate bounds, conservation and stops, under any interleaving.
    #[test]
    fn buckets_bound_the_rate_conserve_and_respect_stops(ops in proptest::collection::vec(op(), 1..400), ramp in any::<bool>()) {
        let mut config = Config::default();
        config.limits = Limits { requests: Some(RPM), input_tokens: Some(ITPM), ..Limits::NONE };
        config.burst = ratewise_core::admit::Burst::default().with_known_credit(Duration::from_secs(60));
        config.ramp = ratewise_core::admit::RampConfig::default();
        config.ramp.start = if ramp { 100 } else { 1000 };
        let mut c = Controller::new(config);
        let target = c.target("k", "claude-sonnet-4");
        let mut t = Instant::ZERO;
        let mut open: Vec<Reservation> = Vec::new();
        let mut held: Vec<Reservation> = Vec::new();
        let mut events: Events = Vec::new();
        let mut largest_input = 0u64;
        // The model of the stop: None = running, Some(None) = until resume,
        // Some(Some(t)) = until t.
        let mut stopped: Option<Option<Instant>> = None;
        for op in ops {
            let now = now_at(t);
            match op {
                Op::Advance(ms) => t = t + Duration::from_millis(ms),
                Op::Admit { input, max_tokens } => {
                    if let Some(Some(until)) = stopped {
                        if t >= until { stopped = None; }
                    }
                    let mut req = AdmitRequest::new(target);
                    req.input_estimate = Some(input);
                    req.max_tokens = Some(max_tokens);
                    match c.admit(&req, now) {
                        Admission::Go(r) => {
                            prop_assert!(stopped.is_none(), "admitted while stopped");
                            largest_input = largest_input.max(input);
                            events.push((t, 1, input as i64));
                            open.push(r);
                        }
                        Admission::Stopped { cause, .. } => {
                            prop_assert!(stopped.is_some());
                            prop_assert_eq!(cause, Cause::SpendCap);
                        }
                        Admission::Wait { until, .. } => prop_assert!(until > t),
                        Admission::Refused { reason, .. } => prop_assert!(false, "refused {reason}"),
                        other => prop_assert!(false, "unexpected {other:?}"),
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
                    events.push((t, 0, -((a.input - usage.input_tokens) as i64)));
                    c.settle(r, &usage, now);
                }
                Op::Release { pick } if !open.is_empty() => {
                    let r = open.swap_remove(pick % open.len());
                    events.push((t, -1, -(r.amounts().input as i64)));
                    c.release(r, now);
                }
                Op::Hold { pick } if !open.is_empty() => {
                    let r = open.swap_remove(pick % open.len());
                    c.hold_unknown(&r, now);
                    held.push(r);
                }
                Op::Stop { until_ms } => {
                    let until = until_ms.map(|ms| t + Duration::from_millis(ms));
                    c.stop(target.scope, Cause::SpendCap, until.map(|u| now_at(u).wall), now);
                    stopped = match (stopped, until) {
                        (Some(None), _) | (_, None) => Some(None),
                        (Some(Some(a)), Some(b)) if a > t => Some(Some(a.max(b))),
                        (_, Some(b)) => Some(Some(b)),
                    };
                }
                Op::Resume => {
                    c.resume("k", now);
                    stopped = None;
                }
                _ => {}
            }
            // (`ledger()` also checks its counters against the live
            // reservations in debug builds.)
            prop_assert_eq!(c.ledger().refused_ends, 0, "{:?}", c.ledger());
        }
        let l = c.ledger();
        prop_assert_eq!(l.outstanding.requests, (open.len() + held.len()) as u64);
        prop_assert_eq!(l.held.requests, held.len() as u64);
        if std::env::var_os("ADMIT_PROPS_STATS").is_some() {
            eprintln!("admitted {} events {} stopped {:?} held {}", l.reserved.requests, events.len(), stopped, held.len());
        }
        let burst = Burst::default();
        check_window_bound(&events, |e| e.1, RPM, burst.requests, 0);
        check_window_bound(&events, |e| e.2, ITPM, burst.tokens, largest_input.saturating_sub(1) as i64);
    }

    /// Retries admitted never exceed `min_retries + ratio · first attempts`
    /// counted over the window, recounted independently from a log.
    #[test]
    fn retry_budget_bounds_retries(ops in proptest::collection::vec((0u64..800, any::<bool>()), 1..400),
                                   ratio in 0u32..=1000, min in 0u32..5) {
        let mut cfg = RetryBudgetConfig::default();
        cfg.window = Duration::from_secs(10);
        cfg.ratio_permille = ratio;
        cfg.min_retries = min;
        let mut config = Config::default();
        config.retry_budget = cfg;
        let mut c = Controller::new(config);
        let target = c.target("k", "m");
        let slot_ns = (cfg.window.as_nanos() / SLOTS as u128).max(1);
        let mut log: Vec<(u128, bool)> = Vec::new();
        let mut t = Instant::ZERO;
        for (step, is_retry) in ops {
            t = t + Duration::from_millis(step);
            let mut req = AdmitRequest::new(target);
            req.is_retry = is_retry;
            match c.admit(&req, now_at(t)) {
                Admission::Go(r) => {
                    let slot = t.since_origin().as_nanos() / slot_ns;
                    log.push((slot, is_retry));
                    c.release(r, now_at(t));
                    if is_retry {
                        let lo = slot.saturating_sub(SLOTS as u128 - 1);
                        let in_window = log.iter().filter(|(s, _)| *s >= lo && *s <= slot);
                        let (retries, firsts) = in_window.fold((0u64, 0u64), |(r, f), (_, rt)| {
                            if *rt { (r + 1, f) } else { (r, f + 1) }
                        });
                        prop_assert!(
                            retries * 1000 <= u64::from(min) * 1000 + firsts * u64::from(ratio),
                            "{retries} retries for {firsts} firsts"
                        );
                    }
                }
                Admission::Refused { reason, .. } => {
                    prop_assert!(is_retry);
                    prop_assert_eq!(reason, GiveUpReason::RetryBudget);
                }
                other => prop_assert!(false, "{other:?}"),
            }
        }
    }

    /// Never-exceed: settled spend (money and tokens) stays within the
    /// budget whenever actual usage is within the worst case.
    #[test]
    fn never_exceed_spend_holds(ops in proptest::collection::vec(
            (0u64..120_000, 0u64..3_000, 1u64..2_000, any::<usize>(), 0u64..=100, 0u64..=100, 0u64..=100, any::<bool>()), 1..200),
            max_micros in 1_000u64..200_000, max_tokens in 1_000u64..40_000) {
        let mut prices = PriceTable::default();
        prices.set("m", Price { input: 3_000_000, output: 15_000_000, cache_write: 3_750_000, cache_read: 300_000 });
        let mut spend = SpendConfig::default();
        spend.window = Duration::from_secs(3600);
        spend.max_micros = Some(max_micros);
        spend.max_tokens = Some(max_tokens);
        spend.never_exceed = true;
        spend.recheck = Duration::from_secs(1);
        let mut config = Config::default();
        config.spend = Some(spend);
        config.prices = prices;
        let mut c = Controller::new(config);
        let target = c.target("k", "m-1");
        let mut t = Instant::ZERO;
        let mut open: Vec<Reservation> = Vec::new();
        for (step, input, max_out, pick, a, b, o, settle) in ops {
            t = t + Duration::from_millis(step);
            let now = now_at(t);
            if settle && !open.is_empty() {
                let r = open.swap_remove(pick % open.len());
                let est = r.amounts();
                // Split at most the estimated input between uncached,
                // cache writes and cache reads; output at most max_tokens.
                let inp = est.input * a / 100;
                let write = (est.input - inp) * b / 100;
                let read = (est.input - inp - write) * b / 100;
                let usage = Usage {
                    input_tokens: inp,
                    cache_creation_input_tokens: write,
                    cache_read_input_tokens: read,
                    output_tokens: est.output * o / 100,
                };
                c.settle(r, &usage, now);
            } else {
                let mut req = AdmitRequest::new(target);
                req.input_estimate = Some(input);
                req.max_tokens = Some(max_out);
                if let Admission::Go(r) = c.admit(&req, now) {
                    open.push(r);
                }
            }
            let totals = c.spend_totals(now).unwrap();
            prop_assert!(totals.settled_micros <= max_micros, "{totals:?}");
            prop_assert!(totals.settled_tokens <= max_tokens, "{totals:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Header sync with `-remaining` and `-reset`: a credit is never raised;
    /// a reset that has passed or lies beyond the horizon changes nothing;
    /// a usable reset leaves the credit at most the server's implied level
    /// (`limit · (1 min − (wait − slack)) / 1 min`).
    #[test]
    fn reset_sync_only_lowers_and_ignores_garbage(
        ops in proptest::collection::vec((0u64..3_000, 0u64..4_000), 0..20),
        remaining in proptest::option::of(prop_oneof![0u64..80_000, (0u64..80).prop_map(|k| k * 1000)]),
        reset_ms in proptest::option::of(-120_000i64..400_000),
        at_ms in 0u64..5_000,
        openai in any::<bool>(),
    ) {
        use ratewise_core::admit::Profile;
        use ratewise_core::parse::ratelimit::{RateLimitSnapshot, Reset, Window};
        use ratewise_core::Provider;
        const LIMIT: u64 = 60_000;
        let mut config = Config::default();
        config.limits = Limits { input_tokens: Some(LIMIT), ..Limits::NONE };
        config.burst = ratewise_core::admit::Burst::default().with_known_credit(Duration::from_secs(60));
        config.ramp = ratewise_core::admit::RampConfig::default();
        config.ramp.start = 1000;
        let mut c = Controller::new(config);
        let target = c.target("k", "m");
        // Spend some of the bucket first.
        let mut t = Instant::ZERO;
        for (advance, input) in ops {
            t = t + Duration::from_millis(advance);
            let mut req = AdmitRequest::new(target);
            req.input_estimate = Some(input);
            if let Admission::Go(r) = c.admit(&req, now_at(t)) {
                c.release(r, now_at(t));
            }
        }
        let now = now_at(t + Duration::from_millis(at_ms));
        let reset = reset_ms.map(|ms| {
            let d = Duration::from_millis(ms.unsigned_abs());
            match (openai, ms >= 0) {
                (true, _) => Reset::After(if ms >= 0 { d } else { Duration::ZERO }),
                (false, true) => Reset::At(now.wall + d),
                (false, false) => Reset::At(now.wall - d),
            }
        });
        let snap = RateLimitSnapshot {
            input_tokens: Window { limit: Some(LIMIT), remaining, reset },
            ..RateLimitSnapshot::default()
        };
        let before = c.snapshot(target.scope, now).unwrap().credits[1].unwrap();
        let provider = if openai { Provider::Openai } else { Provider::Anthropic };
        c.sync_headers(target.scope, &snap, provider, now);
        let after = c.snapshot(target.scope, now).unwrap().credits[1].unwrap();
        prop_assert!(after <= before, "raised: {before} -> {after}");
        // What remaining alone allows, read as the provider documents it
        // (Anthropic: a multiple of 1,000 is the nearest thousand, the
        // truth in [r − 500, r + 500); OpenAI: exact); the credit goes to
        // the value reported when it is at or above the range's highest.
        let profile = Profile::of(provider);
        let by_remaining = match remaining {
            Some(r) => {
                let (_, hi) = profile.token_remaining.range(r);
                if before >= hi as i64 { r as i64 } else { before }
            }
            None => before,
        };
        let wait = reset.map(|r| r.wait_from(now.wall));
        match wait {
            Some(w) if !w.is_zero() && w <= RESET_HORIZON => {
                let slack = profile.reset_uncertainty(reset.unwrap());
                let left = Duration::from_secs(60).saturating_sub(w.saturating_sub(slack));
                let implied = (u128::from(LIMIT) * left.as_nanos() / 60_000_000_000) as i64;
                // Either the reset's view won, or remaining's did, or the
                // credit was at or below both already.
                prop_assert!(after <= by_remaining);
                prop_assert!(after == implied || after == by_remaining, "after {after}, implied {implied}");
                prop_assert!(after <= implied, "after {after}, implied {implied}");
            }
            // Garbage or no reset: exactly what remaining alone does.
            _ => prop_assert_eq!(after, by_remaining),
        }
    }
}

/// The capacity of a bucket of `limit` per minute holding `burst` worth of
/// refill, as the core documents it: `ceil(limit · burst / 1 min)`, at
/// least 1 (the core's own function is not public API).
fn capacity_for(limit: u64, burst: std::time::Duration) -> u64 {
    let cap = (u128::from(limit) * burst.as_nanos()).div_ceil(60_000_000_000);
    cap.clamp(1, u128::from(u64::MAX)) as u64
}

/// The retry budget's window slots (the core's `retry_budget::SLOTS`, not
/// public API).
const SLOTS: usize = 10;

/// The furthest `*-reset` header sync trusts (the core's `RESET_HORIZON`,
/// not public API).
const RESET_HORIZON: std::time::Duration = std::time::Duration::from_secs(65);
