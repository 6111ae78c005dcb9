//! A reservation ends once. A second settle or release of one that already
//! ended — the same event applied twice (`Controller::apply` takes it by
//! reference), or the reservation held again after such an event — is
//! refused: it charges nothing, gives nothing back and is counted in
//! `Ledger::refused_ends`. The one exception is the owner's end of a
//! reservation that ended without it (lease expired, disowned): its usage
//! was spent, so that settle charges it, once.

mod common;

use common::now_at;
use ratewise_core::admit::{
    AdmitRequest, Config, Controller, End, Limits, RampConfig, Reservation, Target, Update,
};
use ratewise_core::{Now, Usage};

fn controller() -> (Controller, Target) {
    let mut c = Controller::new({
        let mut config = Config::default();
        config.limits = Limits {
            requests: Some(600),
            input_tokens: Some(100_000),
            output_tokens: Some(20_000),
            ..Limits::NONE
        };
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

fn admit(c: &mut Controller, target: Target, now: Now) -> Reservation {
    let mut req = AdmitRequest::new(target);
    req.input_estimate = Some(1_000);
    req.max_tokens = Some(500);
    c.admit(&req, now).go().expect("room")
}

/// Ends `end`'s reservation through an event applied by reference, and
/// hands that same reservation back, as a second holder of the event (a
/// store that runs it again) has it. A reservation cannot be rebuilt from
/// its id outside the crate; this is the one way to hold an ended one.
fn end_and_keep(c: &mut Controller, end: End, now: Now) -> Reservation {
    let update = Update::ending(end);
    c.apply(&update, now);
    match update.end {
        Some(End::Settle { reservation, .. } | End::Release { reservation, .. }) => reservation,
        _ => unreachable!("an ending update"),
    }
}

fn usage() -> Usage {
    Usage {
        input_tokens: 800,
        output_tokens: 300,
        ..Usage::default()
    }
}

fn levels(c: &mut Controller, target: Target, now: Now) -> [Option<i64>; 4] {
    c.snapshot(target.scope, now).unwrap().levels
}

#[test]
fn a_settle_applied_twice_is_refused_and_charges_nothing() {
    let (mut c, target) = controller();
    let t = now_at(1_000);
    let r = admit(&mut c, target, t);
    let update = Update::ending(End::Settle {
        reservation: r,
        usage: usage(),
    });
    c.apply(&update, t);
    let once = c.ledger();
    let after_once = levels(&mut c, target, t);
    assert_eq!(once.charged.output, 300);
    assert!(once.is_clean(), "{once:?}");
    // The same event again: nothing more is charged, and it is counted.
    c.apply(&update, t);
    let twice = c.ledger();
    assert_eq!(twice.charged, once.charged, "charged twice: {twice:?}");
    assert_eq!(twice.settled, once.settled);
    assert_eq!(levels(&mut c, target, t), after_once, "the buckets moved");
    assert_eq!(twice.refused_ends, 1);
    assert!(!twice.is_clean(), "a refused end is not clean: {twice:?}");
    assert!(twice.all_ended());
}

#[test]
fn a_release_after_a_settle_gives_nothing_back_and_is_counted() {
    let (mut c, target) = controller();
    let t = now_at(1_000);
    let r = admit(&mut c, target, t);
    let copy = end_and_keep(
        &mut c,
        End::Settle {
            reservation: r,
            usage: usage(),
        },
        t,
    );
    let settled = c.ledger();
    let after = levels(&mut c, target, t);
    c.release(copy, t);
    let l = c.ledger();
    assert_eq!(
        levels(&mut c, target, t),
        after,
        "capacity given back twice"
    );
    assert_eq!(l.released, settled.released);
    assert_eq!(l.refused_ends, 1, "{l:?}");
}

#[test]
fn a_second_release_is_refused() {
    let (mut c, target) = controller();
    let t = now_at(1_000);
    let r = admit(&mut c, target, t);
    let copy = end_and_keep(&mut c, End::Release { reservation: r }, t);
    let after = levels(&mut c, target, t);
    c.release(copy, t);
    assert_eq!(levels(&mut c, target, t), after);
    assert_eq!(c.ledger().released.requests, 1);
    assert_eq!(c.ledger().refused_ends, 1);
}

#[test]
fn an_expired_reservations_late_settle_charges_once_and_a_second_is_refused() {
    let (mut c, target) = controller();
    let t = now_at(0);
    let r = admit(&mut c, target, t);
    let late = now_at(11 * 60_000);
    assert_eq!(c.expire(late), 1);
    let charged = c.ledger().charged;
    // The owner comes back after the lease: its usage was spent.
    let copy = end_and_keep(
        &mut c,
        End::Settle {
            reservation: r,
            usage: usage(),
        },
        late,
    );
    let l = c.ledger();
    assert_eq!(l.charged.output, charged.output + 300, "{l:?}");
    assert!(l.is_clean(), "the owner's late end is no second end: {l:?}");
    let after = levels(&mut c, target, late);
    c.settle(copy, &usage(), late);
    let l = c.ledger();
    assert_eq!(
        l.charged.output,
        charged.output + 300,
        "charged twice: {l:?}"
    );
    assert_eq!(levels(&mut c, target, late), after);
    assert_eq!(l.refused_ends, 1);
}

#[test]
fn an_owner_gone_for_a_lease_after_the_expiry_is_refused() {
    let (mut c, target) = controller();
    let r = admit(&mut c, target, now_at(0));
    assert_eq!(c.expire(now_at(11 * 60_000)), 1);
    // Another lease on: the orphan is forgotten.
    assert_eq!(c.expire(now_at(21 * 60_000)), 0);
    let charged = c.ledger().charged;
    c.settle(r, &usage(), now_at(21 * 60_000));
    let l = c.ledger();
    assert_eq!(l.charged, charged);
    assert_eq!(l.refused_ends, 1);
}
