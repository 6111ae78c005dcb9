//! Header sync read against the admission (`Controller::observe` of an admitted request):
//! a response's view was taken when the server received its request, so it
//! is compared with the credit then, not now; and a held (unknown) send the
//! server shows it never charged gets its bucket part back.

use ratewise_core::admit::{
    Admission, AdmitRequest, Burst, Config, Controller, Limits, RampConfig, Reservation, Target,
};
use ratewise_core::parse::ratelimit::{RateLimitSnapshot, Window};
use ratewise_core::{Instant, Now, Provider, Usage};
use std::time::Duration;

fn now_at(ms: u64) -> Now {
    let wall0 = ratewise_core::time::parse_rfc3339("2026-11-29T12:00:00Z").unwrap();
    Now::new(Instant::from_millis(ms), wall0 + Duration::from_millis(ms))
}

/// 60 000 input tokens per minute (1 000 per second), at full rate, with a
/// pace large enough that only the credit matters.
fn controller() -> (Controller, Target) {
    let mut c = Controller::new({
        let mut config = Config::default();
        config.limits = Limits {
            input_tokens: Some(60_000),
            ..Limits::NONE
        };
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        config.burst =
            Burst::uniform(Duration::from_secs(60)).with_known_credit(Duration::from_secs(60));
        config
    });
    let target = c.target("k", "claude-sonnet-4-5");
    (c, target)
}

fn admit(c: &mut Controller, target: Target, input: u64, ms: u64) -> Reservation {
    let mut req = AdmitRequest::new(target);
    req.input_estimate = Some(input);
    match c.admit(&req, now_at(ms)) {
        Admission::Go(r) => r,
        other => panic!("{other:?}"),
    }
}

fn view(remaining: u64) -> RateLimitSnapshot {
    RateLimitSnapshot {
        input_tokens: Window {
            limit: Some(60_000),
            remaining: Some(remaining),
            reset: None,
        },
        ..RateLimitSnapshot::default()
    }
}

fn credit(c: &mut Controller, target: Target, ms: u64) -> i64 {
    c.snapshot(target.scope, now_at(ms)).unwrap().credits[1].unwrap()
}

fn input(n: u64) -> Usage {
    Usage {
        input_tokens: n,
        ..Usage::default()
    }
}

#[test]
fn a_view_read_against_the_send_keeps_the_refill_of_the_latency() {
    let (mut a, target) = controller();
    let (mut b, _) = controller();
    let ra = admit(&mut a, target, 10_000, 0);
    let rb = admit(&mut b, target, 10_000, 0);
    let sent = ra.sent();
    // The answer comes 2 s later; the server had 50 000 left after taking
    // the request, as the client had.
    a.settle(ra, &input(10_000), now_at(2_000));
    b.settle(rb, &input(10_000), now_at(2_000));
    a.sync_headers_sent(
        &sent,
        true,
        &view(50_123),
        Provider::Anthropic,
        now_at(2_000),
    );
    b.sync_headers(
        target.scope,
        &view(50_123),
        Provider::Anthropic,
        now_at(2_000),
    );
    // Against the send: nothing to correct (the 123 are the server's).
    assert_eq!(credit(&mut a, target, 2_000), 52_000);
    // Against now: the 2 s of refill are lost.
    assert_eq!(credit(&mut b, target, 2_000), 50_123);
}

#[test]
fn another_clients_use_lowers_the_credit_by_that_much_only() {
    let (mut c, target) = controller();
    let r = admit(&mut c, target, 10_000, 0);
    let sent = r.sent();
    c.settle(r, &input(10_000), now_at(3_000));
    // Another process on the key had taken 7 777 before our request.
    c.sync_headers_sent(
        &sent,
        true,
        &view(42_223),
        Provider::Anthropic,
        now_at(3_000),
    );
    assert_eq!(credit(&mut c, target, 3_000), 53_000 - 7_777);
    // The same view again changes nothing more.
    c.sync_headers_sent(
        &sent,
        true,
        &view(42_223),
        Provider::Anthropic,
        now_at(3_000),
    );
    assert_eq!(credit(&mut c, target, 3_000), 53_000 - 7_777);
}

/// A (20 500, charged by the server) and H (4 000, held: the connection
/// was reset, and the server never saw it) at 0; B (2 000) at 1 s. The
/// server held 38 500 after B; the client's credit was 34 500.
fn held_and_later(server_charged_h: bool) -> (Controller, Target, Reservation, i64) {
    let (mut c, target) = controller();
    let a = admit(&mut c, target, 20_500, 0);
    let h = admit(&mut c, target, 4_000, 0);
    c.hold_unknown(&h, now_at(100));
    let b = admit(&mut c, target, 2_000, 1_000);
    let sent = b.sent();
    c.settle(a, &input(20_500), now_at(1_500));
    c.settle(b, &input(2_000), now_at(2_000));
    let remaining = if server_charged_h { 34_500 } else { 38_500 };
    c.sync_headers_sent(
        &sent,
        true,
        &view(remaining),
        Provider::Anthropic,
        now_at(2_000),
    );
    // The same evidence twice gives back nothing more.
    c.sync_headers_sent(
        &sent,
        true,
        &view(remaining),
        Provider::Anthropic,
        now_at(2_000),
    );
    let cr = credit(&mut c, target, 2_000);
    (c, target, h, cr)
}

#[test]
fn a_held_send_the_server_never_charged_gets_its_bucket_part_back_once() {
    let (mut c, target, h, cr) = held_and_later(false);
    // 34 500 + 1 000 of refill + the 4 000 held: the server's 39 500.
    assert_eq!(cr, 39_500);
    // Still held in the ledger (and the spend budget) until resolved.
    let l = c.ledger();
    assert_eq!(l.held.input, 4_000);
    // Resolving it as not sent gives nothing back twice.
    c.resolve_unknown(h, None, now_at(2_000));
    assert_eq!(credit(&mut c, target, 2_000), 39_500);
    let l = c.ledger();
    assert_eq!(l.held.input, 0);
    assert_eq!(l.released.input, 4_000);
    assert!(l.all_ended() && l.refused_ends == 0, "{l:?}");
}

#[test]
fn a_held_send_the_server_charged_keeps_its_worst_case() {
    let (mut c, target, h, cr) = held_and_later(true);
    assert_eq!(cr, 35_500);
    // Resolved with usage later: the bucket is charged the difference
    // only (3 000 used of 4 000 held).
    c.resolve_unknown(h, Some(&input(3_000)), now_at(2_000));
    assert_eq!(credit(&mut c, target, 2_000), 36_500);
    assert_eq!(c.ledger().refused_ends, 0, "{:?}", c.ledger());
}

#[test]
fn a_refunded_hold_resolved_with_usage_is_charged_in_full() {
    let (mut c, target, h, _) = held_and_later(false);
    // The server's word was wrong (or it charged later): the usage is
    // charged on top of the refunded credit.
    c.resolve_unknown(h, Some(&input(3_000)), now_at(2_000));
    assert_eq!(credit(&mut c, target, 2_000), 36_500);
    assert_eq!(c.ledger().refused_ends, 0, "{:?}", c.ledger());
}

#[test]
fn a_send_released_since_the_view_is_not_taken_for_a_refund() {
    let (mut c, target) = controller();
    let a = admit(&mut c, target, 20_500, 0);
    let h = admit(&mut c, target, 4_000, 0);
    c.hold_unknown(&h, now_at(100));
    // An overloaded send at 0.5 s: never charged, released at 0.6 s.
    let o = admit(&mut c, target, 3_000, 500);
    let b = admit(&mut c, target, 2_000, 1_000);
    let sent = b.sent();
    c.release(o, now_at(1_100));
    c.settle(a, &input(20_500), now_at(1_500));
    c.settle(b, &input(2_000), now_at(2_000));
    // The server charged H: its view is 3 000 above the credit at B's
    // admission only because of the overloaded send, released since.
    c.sync_headers_sent(
        &sent,
        true,
        &view(34_500),
        Provider::Anthropic,
        now_at(2_000),
    );
    assert_eq!(credit(&mut c, target, 2_000), 35_500);
    assert_eq!(c.ledger().held.input, 4_000);
}
