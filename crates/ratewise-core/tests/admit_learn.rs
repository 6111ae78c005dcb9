//! Limits and bucket capacity the client was not told: a cold start probes
//! with one request, the provider's capacity is learned from its
//! `*-remaining` headers (never assumed a minute), and the jitter source
//! differs between controllers unless a seed is fixed.

mod common;

use common::now_at;
use ratewise_core::admit::Observed;
use ratewise_core::admit::{
    Admission, AdmitRequest, Burst, Config, Controller, Limits, RampConfig, Target, WaitReason,
};
use ratewise_core::classify::Classification;
use ratewise_core::{Decision, Instant, Now, Provider, Usage};
use std::time::Duration;

fn respond(
    status: u16,
    headers: &[(&str, &str)],
    body: &str,
    now: Now,
) -> (Classification, Decision) {
    common::respond(Provider::Anthropic, status, headers, body, now)
}

const OK_BODY: &str =
    r#"{"type":"message","content":[],"usage":{"input_tokens":10,"output_tokens":5}}"#;

/// A success whose headers say: 120 RPM, `remaining` requests left.
fn ok_requests(remaining: u64, now: Now) -> (Classification, Decision) {
    let r = remaining.to_string();
    respond(
        200,
        &[
            ("anthropic-ratelimit-requests-limit", "120"),
            ("anthropic-ratelimit-requests-remaining", r.as_str()),
        ],
        OK_BODY,
        now,
    )
}

fn full_rate(limits: Limits) -> (Controller, Target) {
    let mut c = Controller::new({
        let mut config = Config::default();
        config.limits = limits;
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        config.seed = Some(1);
        config
    });
    let target = c.target("k", "claude-sonnet-4-5");
    (c, target)
}

fn usage() -> Usage {
    Usage {
        input_tokens: 10,
        output_tokens: 5,
        ..Usage::default()
    }
}

#[test]
fn a_cold_start_sends_one_request_then_paces_from_its_headers() {
    let (mut c, target) = full_rate(Limits::NONE);
    let t = now_at(0);
    let probe = c
        .admit(&AdmitRequest::new(target), t)
        .go()
        .expect("the probe");
    // The backlog waits for the probe's answer instead of going out blind.
    for _ in 0..15 {
        match c.admit(&AdmitRequest::new(target), t) {
            Admission::Wait {
                reason: WaitReason::Probe,
                until,
            } => assert!(until > t.instant),
            other => panic!("a second request went out before the probe's answer: {other:?}"),
        }
    }
    // The answer: 120 RPM, 19 left after this request (a 10 s bucket).
    let t = now_at(300);
    let (cl, d) = ok_requests(19, t);
    c.observe(
        &Observed::new(probe.sent().scope(), cl.clone(), d).of_sent(probe.sent()),
        t,
    );
    c.settle(probe, &usage(), t);
    let snap = c.snapshot(target.scope, t).unwrap();
    assert_eq!(snap.limits.requests, Some(120));
    // The credit is the server's view: 19 of a 20-request bucket, not a
    // minute (120) and not the cautious second (2).
    assert_eq!(snap.credits[0], Some(19));
    // Now paced by the learned bucket: the pace (5 s = 10 requests) binds.
    let mut sent = 0;
    while c.admit(&AdmitRequest::new(target), t).go().is_some() {
        sent += 1;
    }
    assert_eq!(sent, 10);
}

#[test]
fn a_probe_that_taught_nothing_passes_the_turn() {
    let (mut c, target) = full_rate(Limits::NONE);
    let t = now_at(0);
    // Released (never sent): the next request is the probe.
    let p = c.admit(&AdmitRequest::new(target), t).go().unwrap();
    c.release(p, t);
    let p = c
        .admit(&AdmitRequest::new(target), t)
        .go()
        .expect("next probe");
    // Sent, no answer (held): the next request probes.
    c.hold_unknown(&p, t);
    let p2 = c
        .admit(&AdmitRequest::new(target), t)
        .go()
        .expect("next probe");
    // A gateway's 502 without rate-limit headers says nothing about the
    // limits: once it is released, one more probe, and only one.
    let (cl, d) = respond(502, &[], "<html>bad gateway</html>", t);
    c.observe(
        &Observed::new(p2.sent().scope(), cl.clone(), d).of_sent(p2.sent()),
        t,
    );
    c.release(p2, t);
    let _p3 = c
        .admit(&AdmitRequest::new(target), t)
        .go()
        .expect("next probe");
    assert!(matches!(
        c.admit(&AdmitRequest::new(target), t),
        Admission::Wait {
            reason: WaitReason::Probe,
            ..
        }
    ));
}

#[test]
fn a_probe_whose_caller_left_before_its_answer_taught_nothing() {
    let (mut c, target) = full_rate(Limits::NONE);
    let t = now_at(0);
    // The probe was sent; its caller went away before the answer: the job
    // machine charges it at its estimate (a settle, never an observe).
    let p = c.admit(&AdmitRequest::new(target), t).go().unwrap();
    let charged = Usage {
        input_tokens: p.amounts().input,
        output_tokens: p.amounts().output,
        ..Usage::default()
    };
    c.settle(p, &charged, t);
    // One new probe, not a burst into limits still unknown.
    assert!(
        c.admit(&AdmitRequest::new(target), t).go().is_some(),
        "the next request is the probe"
    );
    for _ in 0..15 {
        assert!(matches!(
            c.admit(&AdmitRequest::new(target), t),
            Admission::Wait {
                reason: WaitReason::Probe,
                ..
            }
        ));
    }
}

/// A provider whose answers carry no rate-limit headers is slow-started
/// (DESIGN principle 17): one request out, then one more per few
/// successes — its first 429 answers every request out — until
/// nothing holds them back; no 429 came, so no limit was learned.
#[test]
fn a_provider_without_rate_limit_headers_is_slow_started_then_not_held() {
    // Round trips of `rtt_ms`: the widths of successive rounds.
    fn widths(rtt_ms: u64) -> Vec<usize> {
        let (mut c, target) = full_rate(Limits::NONE);
        let mut widths = Vec::new();
        for round in 0..400 {
            let t = now_at(round * rtt_ms);
            let mut out = Vec::new();
            while let Some(r) = c.admit(&AdmitRequest::new(target), t).go() {
                out.push(r);
                if out.len() > 100 {
                    break;
                }
            }
            widths.push(out.len());
            let done = out.len() > 100;
            let t = now_at(round * rtt_ms + rtt_ms - 1);
            for p in out {
                let (cl, d) = respond(200, &[], OK_BODY, t);
                c.observe(
                    &Observed::new(p.sent().scope(), cl.clone(), d).of_sent(p.sent()),
                    t,
                );
                c.settle(p, &usage(), t);
            }
            if done {
                break;
            }
        }
        assert!(c.ledger().is_clean());
        widths
    }
    for rtt_ms in [400, 5_000] {
        let w = widths(rtt_ms);
        assert_eq!(w[0], 1, "one request into unknown limits: {w:?}");
        assert!(w.windows(2).all(|p| p[1] >= p[0]), "never narrower: {w:?}");
        assert!(*w.last().unwrap() > 100, "then nothing holds them: {w:?}");
        // From one to 64 out at most e-fold per 8 s: 8 s × ln 64 ≈ 33 s
        // to 64, 8 s × ln 8 ≈ 16.6 s to 8, however quick the answers; and
        // one more per success (doubling per round trip) where the answers
        // take longer than that.
        let secs = (w.len() as u64 - 1) * rtt_ms / 1000;
        assert!((33..=45).contains(&secs), "{secs} s at {rtt_ms} ms: {w:?}");
        let rounds_to_8 = w.iter().position(|&n| n >= 8).unwrap();
        let at_8 = rounds_to_8 as u64 * rtt_ms;
        assert!(
            at_8 >= 16_000,
            "e-fold per 8 s at most: 8 out at {at_8} ms: {w:?}"
        );
    }
}

#[test]
fn configured_limits_need_no_probe_but_the_capacity_starts_at_a_second() {
    // 120 RPM configured; the provider's bucket holds 10 s (20 requests).
    let (mut c, target) = full_rate(Limits {
        requests: Some(120),
        ..Limits::NONE
    });
    let t = now_at(0);
    let a = c.admit(&AdmitRequest::new(target), t).go().unwrap();
    let b = c.admit(&AdmitRequest::new(target), t).go().unwrap();
    // A second of 120 RPM: two, then a wait for the credit (not a probe).
    match c.admit(&AdmitRequest::new(target), t) {
        Admission::Wait {
            reason: WaitReason::Bucket(_),
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    // The server answers `a`: 19 left after it. The capacity is at least
    // 20, and the credit rises to what the server showed, less `b`.
    let t = now_at(100);
    let (cl, d) = ok_requests(19, t);
    c.observe(
        &Observed::new(a.sent().scope(), cl.clone(), d).of_sent(a.sent()),
        t,
    );
    c.settle(a, &usage(), t);
    let snap = c.snapshot(target.scope, t).unwrap();
    assert_eq!(snap.credits[0], Some(18));
    // `b`'s view agrees (18 left after both): nothing changes.
    let (cl, d) = ok_requests(18, t);
    c.observe(
        &Observed::new(b.sent().scope(), cl.clone(), d).of_sent(b.sent()),
        t,
    );
    c.settle(b, &usage(), t);
    assert_eq!(c.snapshot(target.scope, t).unwrap().credits[0], Some(18));
}

#[test]
fn a_reset_with_the_remaining_shows_the_capacity_of_a_bucket_that_is_not_full() {
    // 600 000 ITPM = 10 000 per second. The server: 20 000 left, rounded
    // to the nearest thousand as Anthropic documents (at least 19 500),
    // full in 4 s, a whole-second reset: it holds at least 19 500 + 3 s of
    // refill (the second the reset may be off is taken in its favour) =
    // 49 500.
    let (mut c, target) = full_rate(Limits {
        input_tokens: Some(600_000),
        ..Limits::NONE
    });
    let t = now_at(0);
    let (cl, d) = respond(
        200,
        &[
            ("anthropic-ratelimit-input-tokens-limit", "600000"),
            ("anthropic-ratelimit-input-tokens-remaining", "20000"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2026-11-29T12:00:04Z",
            ),
        ],
        OK_BODY,
        t,
    );
    c.observe(&Observed::new(target.scope, cl.clone(), d), t);
    let snap = c.snapshot(target.scope, t).unwrap();
    assert_eq!(snap.credits[1], Some(19_500));
    // Refilling at 10 000/s, the credit stops at the learned 49 500 (not
    // at a minute's 600 000).
    let later = now_at(60_000);
    assert_eq!(
        c.snapshot(target.scope, later).unwrap().credits[1],
        Some(49_500)
    );
}

#[test]
fn a_known_capacity_is_used_from_the_start() {
    let mut c = Controller::new({
        let mut config = Config::default();
        config.limits = Limits {
            requests: Some(120),
            ..Limits::NONE
        };
        config.burst = Burst::default().with_known_credit(Duration::from_secs(10));
        config.seed = Some(1);
        config
    });
    let target = c.target("k", "m");
    assert_eq!(
        c.snapshot(target.scope, now_at(0)).unwrap().credits[0],
        Some(20)
    );
}

/// The pause jitter a fresh controller adds to one pause.
fn pause_jitter(seed: Option<u64>) -> Instant {
    let mut c = Controller::new({
        let mut config = Config::default();
        config.limits = Limits {
            requests: Some(60),
            ..Limits::NONE
        };
        config.seed = seed;
        config
    });
    let target = c.target("k", "m");
    let t = now_at(0);
    c.pause(target.scope, Instant::from_millis(1_000), None, t);
    match c.admit(&AdmitRequest::new(target), t) {
        Admission::Wait {
            until,
            reason: WaitReason::Paused,
        } => until,
        other => panic!("{other:?}"),
    }
}

#[test]
fn controllers_draw_their_own_jitter_unless_a_seed_is_fixed() {
    // Entropy by default: a fleet's replicas (and two controllers in one
    // process) spread out. Up to 500 ms in nanoseconds: a tie is a
    // one-in-5·10⁸ event.
    assert_ne!(pause_jitter(None), pause_jitter(None));
    // A fixed seed repeats exactly.
    assert_eq!(pause_jitter(Some(42)), pause_jitter(Some(42)));
}

/// Requests read exactly, output tokens rounded to the nearest thousand:
/// 1,200 RPM and 24,000 OTPM over buckets of 5 s (100 requests, 2,000
/// tokens). The requests view shows their bucket's horizon; the output
/// view alone proves only 1,499 (at least 500 left, 2.5 s of refill to
/// full) and allows up to 2,500.
fn horizon_views(c: &mut Controller, target: &Target, t: Now) {
    let (cl, d) = respond(
        200,
        &[
            ("anthropic-ratelimit-requests-limit", "1200"),
            ("anthropic-ratelimit-requests-remaining", "59"),
            (
                "anthropic-ratelimit-requests-reset",
                "2026-11-29T12:00:02.001Z",
            ),
            ("anthropic-ratelimit-output-tokens-limit", "24000"),
            ("anthropic-ratelimit-output-tokens-remaining", "1000"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2026-11-29T12:00:02.500Z",
            ),
        ],
        OK_BODY,
        t,
    );
    c.observe(&Observed::new(target.scope, cl.clone(), d), t);
}

fn horizon_controller(learn: bool) -> (Controller, Target) {
    let mut c = Controller::new({
        let mut config = Config::default();
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        config.learn_margins = learn;
        config.seed = Some(1);
        config
    });
    let target = c.target("k", "claude-sonnet-4-5");
    (c, target)
}

#[test]
fn a_rounded_capacity_takes_the_horizon_its_exact_sibling_shows() {
    let t = now_at(0);
    let (mut off, target) = horizon_controller(false);
    horizon_views(&mut off, &target, t);
    let (mut on, target) = horizon_controller(true);
    horizon_views(&mut on, &target, t);
    let [requests, _, output_off, _] = off.snapshot(target.scope, t).unwrap().capacities;
    let output_on = on.snapshot(target.scope, t).unwrap().capacities[2];
    // What the rounded view proves, alone (the reset's millisecond of
    // precision taken in the server's favour: 1,499.6).
    assert_eq!(output_off, Some(1_499));
    // The requests' horizon: 59 left + 2.001 s at 20/s (+ the request
    // itself) ≈ 100 of 1,200 a minute, 5 s; the output bucket is taken at
    // the same 5 s of its 24,000 a minute, inside what its view allows.
    let requests = requests.unwrap();
    assert!((99..=101).contains(&requests), "{requests}");
    let output_on = output_on.unwrap();
    assert!((1_950..=2_020).contains(&output_on), "{output_on}");
}

#[test]
fn a_sibling_horizon_never_passes_what_the_views_allow() {
    // A second output view: 0 left (under 500), full in 3.5 s: the
    // bucket holds less than 500 + 1,400 = 1,900. The horizon's 2,000 is
    // above that: the capacity stops below the bracket's top.
    let t = now_at(0);
    let (mut c, target) = horizon_controller(true);
    horizon_views(&mut c, &target, t);
    let later = now_at(1_000);
    let (cl, d) = respond(
        200,
        &[
            ("anthropic-ratelimit-output-tokens-limit", "24000"),
            ("anthropic-ratelimit-output-tokens-remaining", "0"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2026-11-29T12:00:04.500Z",
            ),
        ],
        OK_BODY,
        later,
    );
    c.observe(&Observed::new(target.scope, cl.clone(), d), later);
    let output = c.snapshot(target.scope, later).unwrap().capacities[2].unwrap();
    assert!(output < 1_900, "{output}");
    assert!(output >= 1_500, "{output}");
}

#[test]
fn a_429_on_a_sibling_horizon_takes_the_hypothesis_back() {
    // The output bucket really holds 4 s (1,600 tokens: the view's 1,000
    // left is 600, full in 2.5 s), not the requests' 5 s. The hypothesis
    // sizes it at ~1,980; a 1,700-token request the model has room for is
    // answered 429 on output tokens.
    let t = now_at(0);
    let (mut c, target) = horizon_controller(true);
    horizon_views(&mut c, &target, t);
    let full = now_at(10_000);
    assert!(c.snapshot(target.scope, full).unwrap().capacities[2].unwrap() > 1_900);
    let mut req = AdmitRequest::new(target);
    req.max_tokens = Some(1_700);
    req.input_estimate = Some(10);
    let r = c.admit(&req, full).go().expect("the model has room");
    let body = r#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your organization's rate limit of 24,000 output tokens per minute."}}"#;
    let (cl, d) = respond(429, &[("retry-after", "1")], body, full);
    c.observe(
        &Observed::new(r.sent().scope(), cl.clone(), d).of_sent(r.sent()),
        full,
    );
    c.release(r, full);
    let after = c.snapshot(target.scope, full).unwrap();
    assert!(after.capacities[2].unwrap() <= 1_700, "{after:?}");
    assert_eq!(after.surprises[2], 1);
    // The same views again: the hypothesis stays under what the 429
    // proved while the learned margin lasts.
    let later = now_at(11_000);
    horizon_views(&mut c, &target, later);
    let cap = c.snapshot(target.scope, later).unwrap().capacities[2].unwrap();
    assert!(cap <= 1_700, "{cap}");
}

#[test]
fn a_429_on_a_hypothesis_takes_it_back_but_leaves_the_proof() {
    // A small request answered 429 on a full bucket: the model was over
    // by nearly the whole bucket, which a level (a late timer, another
    // client) explains as well as a capacity. The hypothesis goes; what
    // the views proved stands. Cutting the proof too made one 429 from a
    // late timer cost a quarter of a 5 s bucket's goodput for the rest of
    // a run (`cold-key-5s --real` on a loaded machine: 0.72 of the limit).
    let t = now_at(0);
    let (mut proof, target) = horizon_controller(false);
    horizon_views(&mut proof, &target, t);
    let full = now_at(10_000);
    let proven = proof.snapshot(target.scope, full).unwrap().capacities[2].unwrap();
    let (mut c, _) = horizon_controller(true);
    horizon_views(&mut c, &target, t);
    assert!(c.snapshot(target.scope, full).unwrap().capacities[2].unwrap() > proven);
    let mut req = AdmitRequest::new(target);
    req.max_tokens = Some(300);
    req.input_estimate = Some(10);
    let r = c.admit(&req, full).go().expect("the model has room");
    let body = r#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your organization's rate limit of 24,000 output tokens per minute."}}"#;
    let (cl, d) = respond(429, &[("retry-after", "1")], body, full);
    c.observe(
        &Observed::new(r.sent().scope(), cl.clone(), d.clone()).of_sent(r.sent()),
        full,
    );
    c.release(r, full);
    let after = c.snapshot(target.scope, full).unwrap();
    assert_eq!(after.surprises[2], 1);
    assert_eq!(after.capacities[2], Some(proven), "{after:?}");
    // With no hypothesis above it, a second such 429 cuts the proof: the
    // headers may be what is wrong.
    let later = now_at(20_000);
    let r = c.admit(&req, later).go().expect("the model has room");
    c.observe(
        &Observed::new(r.sent().scope(), cl.clone(), d).of_sent(r.sent()),
        later,
    );
    c.release(r, later);
    let cut = c.snapshot(target.scope, later).unwrap().capacities[2].unwrap();
    assert!(cut < proven, "{cut} vs {proven}");
}
