//! One test per rule of the discipline.

use super::*;
use crate::time::Instant;
use std::time::Duration;

fn at(seq: u64) -> Place {
    Place {
        arrived: Instant::from_millis(seq),
        seq,
    }
}

fn levels() -> (Levels, LevelId, LevelId, LevelId) {
    let l = Levels::default();
    let (i, d, b) = (
        l.level("interactive").unwrap(),
        l.level("default").unwrap(),
        l.level("bulk").unwrap(),
    );
    (l, i, d, b)
}

/// Admits the head `n` times, each at `cost(flow)`, and returns the flows
/// in admission order.
fn drain(d: &mut Discipline, n: usize, cost: impl Fn(&str) -> u64, flows: &HashMap) -> Vec<String> {
    let mut order = Vec::new();
    for _ in 0..n {
        let Some(h) = d.head() else { break };
        let flow = flows.get(&h).unwrap().clone();
        d.admitted(h, Cost(cost(&flow)), Instant::ZERO).unwrap();
        order.push(flow);
    }
    order
}

type HashMap = std::collections::HashMap<Place, String>;

#[test]
fn one_level_one_flow_is_a_fifo_by_place() {
    let (l, _, def, _) = levels();
    let mut d = Discipline::new(l);
    let w = Workload::new(def, "k");
    d.join(at(20), &w);
    d.join(at(10), &w);
    d.join(at(30), &w);
    // A retry keeps its (earlier) place: it goes before later arrivals.
    d.join(at(5), &w);
    assert_eq!(d.ahead(at(30)), 3);
    assert_eq!(d.ahead(at(5)), 0);
    let mut order = Vec::new();
    while let Some(h) = d.head() {
        d.admitted(h, Cost(7), Instant::ZERO);
        order.push(h.seq);
    }
    assert_eq!(order, [5, 10, 20, 30]);
    assert!(d.is_empty());
}

#[test]
fn an_interactive_job_passes_queued_bulk_jobs() {
    let (l, i, _, b) = levels();
    let mut d = Discipline::new(l);
    for s in 0..20 {
        d.join(at(s), &Workload::new(b, "batch"));
    }
    assert_eq!(d.head(), Some(at(0)));
    d.join(at(100), &Workload::new(i, "chat"));
    assert_eq!(d.head(), Some(at(100)), "the interactive job is next");
    assert_eq!(d.ahead(at(100)), 0);
    assert_eq!(
        d.ahead(at(0)),
        1,
        "bulk jobs count the interactive one ahead"
    );
    assert!(d.admitted(at(100), Cost(10), Instant::ZERO).is_some());
    assert_eq!(d.head(), Some(at(0)));
}

#[test]
fn flows_of_a_level_share_by_cost_over_weight() {
    let (l, _, def, _) = levels();
    let mut d = Discipline::new(l);
    let mut flows = HashMap::new();
    // `big` asks 3 units a job, `small` 1: equal weights give equal cost,
    // so three small jobs go for each big one.
    for s in 0..40 {
        let f = if s % 2 == 0 { "big" } else { "small" };
        d.join(at(s), &Workload::new(def, f));
        flows.insert(at(s), f.to_owned());
    }
    let order = drain(&mut d, 24, |f| if f == "big" { 3 } else { 1 }, &flows);
    let big = order.iter().filter(|f| *f == "big").count();
    assert_eq!(big, 6, "{order:?}");
    // Weight 3 for `big` evens the counts instead: equal cost over weight.
    let (l, _, def, _) = levels();
    let mut d = Discipline::new(l);
    for s in 0..40 {
        let f = if s % 2 == 0 { "big" } else { "small" };
        let w = Workload::new(def, f).weight(if f == "big" { 3 } else { 1 });
        d.join(at(s), &w);
    }
    let order = drain(&mut d, 20, |f| if f == "big" { 3 } else { 1 }, &flows);
    assert_eq!(
        order.iter().filter(|f| *f == "big").count(),
        10,
        "{order:?}"
    );
}

#[test]
fn an_idle_flow_banks_no_credit() {
    let (l, _, def, _) = levels();
    let mut d = Discipline::new(l);
    let mut flows = HashMap::new();
    // `a` is alone for 50 admissions: it gets them all (work-conserving).
    for s in 0..100 {
        d.join(at(s), &Workload::new(def, "a"));
        flows.insert(at(s), "a".to_owned());
    }
    let order = drain(&mut d, 50, |_| 1, &flows);
    assert!(order.iter().all(|f| f == "a"));
    // `b` arrives: it gets its fair half from now on, not 50 turns in a
    // row for the time it was idle.
    for s in 200..220 {
        d.join(at(s), &Workload::new(def, "b"));
        flows.insert(at(s), "b".to_owned());
    }
    let order = drain(&mut d, 10, |_| 1, &flows);
    let b = order.iter().filter(|f| *f == "b").count();
    assert!((4..=6).contains(&b), "{order:?}");
}

#[test]
fn a_lower_level_below_its_min_share_gets_the_turn() {
    let (l, i, _, b) = levels();
    let mut d = Discipline::new(l);
    let mut flows = HashMap::new();
    for s in 0..200 {
        let (lv, f) = if s % 2 == 0 {
            (i, "chat")
        } else {
            (b, "batch")
        };
        d.join(at(s), &Workload::new(lv, f));
        flows.insert(at(s), f.to_owned());
    }
    let order = drain(&mut d, 100, |_| 10, &flows);
    let bulk = order.iter().filter(|f| *f == "batch").count();
    // Interactive goes first, bulk keeps its 10 %.
    assert_eq!(order[0], "chat");
    assert!((9..=11).contains(&bulk), "bulk got {bulk} of 100");
    let shares = d.recent_shares();
    assert!((shares[2] - 0.10).abs() < 0.02, "{shares:?}");
    // With a zero minimum share, priority is strict.
    let (l, i, _, b) = levels();
    let mut d = Discipline::new(l.with_min_share("bulk", 0.0));
    for s in 0..200 {
        let lv = if s % 2 == 0 { i } else { b };
        d.join(at(s), &Workload::new(lv, flows[&at(s)].clone()));
    }
    let order = drain(&mut d, 100, |_| 10, &flows);
    assert!(order.iter().all(|f| f == "chat"));
}

#[test]
fn settling_corrects_the_flow_by_what_it_used() {
    let (l, _, def, _) = levels();
    let mut d = Discipline::new(l);
    for s in 0..10 {
        let f = if s % 2 == 0 { "a" } else { "b" };
        d.join(at(s), &Workload::new(def, f));
    }
    // `a` reserves 100 and uses 10; `b` reserves and uses 50.
    let ca = d.admitted(at(0), Cost(100), Instant::ZERO).unwrap();
    assert_eq!(ca.flow(), "a");
    assert_eq!(d.head(), Some(at(1)));
    let cb = d.admitted(at(1), Cost(50), Instant::ZERO).unwrap();
    // Uncorrected, `b` (finish 50) goes before `a` (finish 100).
    assert_eq!(d.head(), Some(at(3)));
    d.settled(&ca, Cost(10), Instant::ZERO);
    // Corrected to 10, `a` is behind in use: its turn.
    assert_eq!(d.head(), Some(at(2)));
    d.settled(&cb, Cost(50), Instant::ZERO);
    assert_eq!(d.head(), Some(at(2)));
}

#[test]
fn a_flow_below_its_floor_goes_first() {
    let (l, _, def, _) = levels();
    let mut d = Discipline::new(l);
    let mut flows = HashMap::new();
    // `heavy` weighs 9 to `light`'s 1, but `light` keeps a 30 % floor.
    for s in 0..200 {
        let (f, w) = if s % 2 == 0 {
            (Workload::new(def, "heavy").weight(9), "heavy")
        } else {
            (Workload::new(def, "light").floor(0.3), "light")
        };
        d.join(at(s), &f);
        flows.insert(at(s), w.to_owned());
    }
    let order = drain(&mut d, 100, |_| 1, &flows);
    let light = order.iter().filter(|f| *f == "light").count();
    assert!((29..=31).contains(&light), "light got {light}");
}

#[test]
fn leaving_is_forgetting_and_unknown_places_charge_nothing() {
    let (l, _, def, _) = levels();
    let mut d = Discipline::new(l);
    d.join(at(1), &Workload::new(def, "a"));
    d.join(at(2), &Workload::new(def, "a"));
    assert!(d.leave(at(1)));
    assert!(!d.leave(at(1)));
    assert_eq!(d.head(), Some(at(2)));
    assert!(d.admitted(at(9), Cost(1), Instant::ZERO).is_none());
    // Joining twice keeps one entry.
    d.join(at(2), &Workload::new(def, "a"));
    assert_eq!(d.len(), 1);
    // A level from a larger set is the default level.
    let big = Levels::new((0..10).map(|i| i.to_string()));
    let far = big.level("9").unwrap();
    d.join(at(3), &Workload::new(far, "a"));
    assert_eq!(d.len(), 2);
}

#[test]
fn idle_flows_are_bounded_however_many_tenants() {
    let (l, _, def, _) = levels();
    let mut d = Discipline::new(l);
    for s in 0..(3 * MAX_IDLE_FLOWS as u64) {
        let p = at(s);
        d.join(p, &Workload::new(def, format!("tenant-{s}")));
        d.admitted(p, Cost(1_000), Instant::from_millis(s));
    }
    assert!(
        d.flows_tracked() <= MAX_IDLE_FLOWS + 1,
        "{}",
        d.flows_tracked()
    );
    // A long flow name is cut to a bound.
    let w = Workload::new(def, "é".repeat(1_000));
    assert!(w.flow.len() <= MAX_FLOW_NAME);
}

#[test]
fn shares_survive_long_runs_without_overflow() {
    let (l, i, _, b) = levels();
    let mut d = Discipline::new(l);
    let mut seq = 0;
    for day in 0..30u64 {
        for lv in [i, b] {
            seq += 1;
            d.join(at(seq), &Workload::new(lv, "f"));
        }
        let now = Instant::from_origin(Duration::from_secs(day * 86_400));
        while let Some(h) = d.head() {
            d.admitted(h, Cost(u64::MAX / 4), now);
        }
    }
    for s in d.recent_shares() {
        assert!(s.is_finite() && (0.0..=1.0).contains(&s));
    }
}

#[test]
fn a_level_back_from_idle_takes_its_share_without_a_burst() {
    let (l, i, _, b) = levels();
    let mut d = Discipline::new(l);
    let mut flows = HashMap::new();
    let mut seq = 0;
    let mut join = |d: &mut Discipline, lv, f: &str, flows: &mut HashMap| {
        seq += 1;
        d.join(at(seq), &Workload::new(lv, f));
        flows.insert(at(seq), f.to_owned());
    };
    for _ in 0..300 {
        join(&mut d, i, "chat", &mut flows);
    }
    // Interactive alone: every turn is its own.
    assert!(drain(&mut d, 100, |_| 10, &flows)
        .iter()
        .all(|f| f == "chat"));
    for _ in 0..50 {
        join(&mut d, b, "batch", &mut flows);
    }
    // Bulk comes back: one turn in ten or so from now on, not the ten
    // turns in a row its idle minute would have let it catch up.
    let order = drain(&mut d, 20, |_| 10, &flows);
    let run = order.split(|f| f == "chat").map(|r| r.len()).max().unwrap();
    let bulk = order.iter().filter(|f| *f == "batch").count();
    assert!(run <= 1, "{order:?}");
    assert!((1..=3).contains(&bulk), "{order:?}");
}

#[test]
fn a_correction_decays_as_its_charge_did() {
    let (l, i, _, b) = levels();
    let mut d = Discipline::new(l);
    d.join(at(1), &Workload::new(i, "chat"));
    d.join(at(2), &Workload::new(b, "batch"));
    let chat = d.admitted(at(1), Cost(100), Instant::ZERO).unwrap();
    let _ = d.admitted(at(2), Cost(100), Instant::ZERO).unwrap();
    // Settled a window later at half its charge: the shares are those of
    // 50 and 100 charged at the same instant, not a correction of 50
    // against a charge that has decayed since.
    d.settled(&chat, Cost(50), Instant::from_origin(DEFAULT_WINDOW));
    let s = d.recent_shares();
    assert!((s[0] - 1.0 / 3.0).abs() < 1e-9, "{s:?}");
}

#[test]
fn ahead_counts_higher_levels_only_as_far_as_the_minimum_share_lets_them() {
    let (l, i, _, b) = levels();
    let mut d = Discipline::new(l);
    for s in 0..100 {
        d.join(at(s), &Workload::new(i, "chat"));
    }
    d.join(at(200), &Workload::new(b, "batch"));
    d.join(at(201), &Workload::new(b, "batch"));
    // 10 %: nine interactive jobs per bulk job at most.
    assert_eq!(d.ahead(at(200)), 9);
    assert_eq!(d.ahead(at(201)), 1 + 18);
    // Without a minimum share, every higher job is ahead.
    let (l, i, _, b) = levels();
    let mut d = Discipline::new(l.with_min_share("bulk", 0.0));
    for s in 0..100 {
        d.join(at(s), &Workload::new(i, "chat"));
    }
    d.join(at(200), &Workload::new(b, "batch"));
    assert_eq!(d.ahead(at(200)), 100);
}

#[test]
fn the_top_waiting_level_is_what_a_process_publishes() {
    let (l, i, _, b) = levels();
    let mut d = Discipline::new(l);
    assert_eq!(d.top_waiting(), None, "nothing waits: no demand");
    d.join(at(0), &Workload::new(b, "batch"));
    assert_eq!(d.top_waiting(), Some(b));
    d.join(at(1), &Workload::new(i, "chat"));
    assert_eq!(d.top_waiting(), Some(i));
    d.admitted(at(1), Cost(1_000), Instant::ZERO).unwrap();
    assert_eq!(d.top_waiting(), Some(b), "the interactive job left");
}

#[test]
fn a_levels_use_of_the_limit_is_its_admitted_rate_over_the_window() {
    let (l, _, _, b) = levels();
    let mut d = Discipline::new(l);
    // A tenth of the limit a second's worth at a time: 1/600 of a
    // minute's limit each second, for ten minutes (many windows).
    let step = Cost(WHOLE_LIMIT / 600);
    let mut now = Instant::ZERO;
    for s in 0..600u64 {
        d.join(at(s), &Workload::new(b, "batch"));
        d.admitted(at(s), step, now).unwrap();
        now = now + Duration::from_secs(1);
    }
    let used = d.used_of_limit(b, now);
    assert!((used - 0.1).abs() < 0.01, "{used}");
    // Then nothing for five windows: it decays away.
    let later = now + Duration::from_secs(300);
    assert!(d.used_of_limit(b, later) < 0.001);
}
