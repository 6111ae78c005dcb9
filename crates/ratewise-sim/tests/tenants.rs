//! The tenants family (issue #49): many workloads on one key, ordered by
//! the core's queue discipline in the `ratewise` strategy and in the
//! oracle (the same rules with the provider's true state). Each shipped
//! tenants scenario meets its targets; the targets fail without the
//! discipline.

use ratewise_sim::engine::run;
use ratewise_sim::strategy::queue::QueueOrder;
use ratewise_sim::strategy::ratewise::Ratewise;
use ratewise_sim::{simulate, targets, Report, Scenario, Strategy, TENANTS};

fn tenants(name: &str) -> Scenario {
    let text = TENANTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .expect("shipped");
    Scenario::from_json(text).expect("valid")
}

fn all(s: &Scenario) -> Vec<Report> {
    Strategy::WITH_ORACLE
        .iter()
        .map(|st| simulate(s, *st, &mut |_, _| {}))
        .collect()
}

fn find<'a>(reports: &'a [Report], name: &str) -> &'a Report {
    reports.iter().find(|r| r.strategy == name).expect("ran")
}

/// Every scenario of the family meets its targets (what `simulate
/// --check` checks), and the oracle its own tenants claims: it is the
/// yardstick, so a claim it misses is a claim no client could meet.
#[test]
fn every_tenants_scenario_meets_its_targets() {
    for (name, _) in TENANTS {
        let s = tenants(name);
        assert!(s.targets.is_some() && s.has_workloads(), "{name}");
        let reports = all(&s);
        let missed = targets::check(&s, &reports);
        assert!(
            missed.is_empty(),
            "{name}: {missed:?}\n{}",
            ratewise_sim::table::text_report(&s, &reports)
        );
        let oracle = find(&reports, "oracle");
        assert_eq!(oracle.sends_429, 0, "{name}");
        let oracle_missed = targets::tenants(&s, oracle);
        // The two-process scenario's claims are ratewise's (half the
        // oracle's goodput); the oracle is one client for the key.
        assert!(oracle_missed.is_empty(), "{name}: oracle {oracle_missed:?}");
        for r in [find(&reports, "ratewise"), oracle] {
            assert_eq!(r.jobs_done, r.jobs_total, "{name}: {}", r.strategy);
            assert!(!r.tenants.is_empty(), "{name}");
        }
    }
}

/// The targets can fail: the `ratewise` strategy with its queue first
/// come, first served (the discipline replaced by a FIFO) leaves the
/// interactive calls of tenants-levels behind the bulk job's 32 waiting
/// jobs, and misses their p95 wait of 2 s by far.
#[test]
fn fifo_ordering_misses_the_interactive_wait_target_of_tenants_levels() {
    let s = tenants("tenants/levels.json");
    let mut fifo = Ratewise::ordered(&s, QueueOrder::Fifo);
    let r = run(&s, "ratewise", &mut fifo, &mut |_, _| {});
    let missed = targets::tenants(&s, &r);
    assert!(
        missed.iter().any(|m| m.starts_with("interactive wait p95")),
        "{missed:?}"
    );
    let log = r.tenant_log.as_ref().expect("a tenants scenario");
    println!(
        "tenants-levels, FIFO: interactive wait p95 {:.3} s",
        log.wait_p95("interactive")
    );
    assert!(log.wait_p95("interactive") > 10.0, "{:?}", r.tenants);
    // The discipline meets it on the same run.
    let rw = simulate(&s, Strategy::Ratewise, &mut |_, _| {});
    assert!(targets::tenants(&s, &rw).is_empty());
    assert!(rw.tenant_log.unwrap().wait_p95("interactive") <= 2.0);
}

/// The weights target fails too without the discipline: a FIFO serves
/// the two flows of tenants-weights by arrival, not 2:1 by cost.
#[test]
fn fifo_ordering_misses_the_weights_of_tenants_weights() {
    let s = tenants("tenants/weights.json");
    let mut fifo = Ratewise::ordered(&s, QueueOrder::Fifo);
    let r = run(&s, "ratewise", &mut fifo, &mut |_, _| {});
    let missed = targets::tenants(&s, &r);
    assert!(
        missed.iter().any(|m| m.starts_with("a:b cost")),
        "{missed:?}"
    );
}

/// A scenario without `groups` runs as before: one level, one flow, no
/// tenants rows, and the discipline is a FIFO (the same report as a
/// FIFO-ordered client).
#[test]
fn one_level_and_flow_is_first_come_first_served() {
    let mut s = Scenario::default_scenario();
    s.jobs.count = 120;
    let rw = simulate(&s, Strategy::Ratewise, &mut |_, _| {});
    let mut fifo = Ratewise::ordered(&s, QueueOrder::Fifo);
    let r = run(&s, "ratewise", &mut fifo, &mut |_, _| {});
    assert_eq!(rw, r);
    assert!(rw.tenants.is_empty() && rw.tenant_log.is_none());
}

/// Jobs of a group named for a process go to that process; the family's
/// two-process scenario keeps the interactive calls in theirs.
#[test]
fn groups_carry_their_workloads_to_the_jobs() {
    let s = tenants("tenants/two-processes.json");
    let jobs = ratewise_sim::workload::jobs(&s);
    assert_eq!(jobs.len() as u64, s.total_jobs());
    assert_eq!(jobs.iter().filter(|j| j.group == 1).count(), 180);
    // Interactive calls every 2 s, after the bulk job's burst.
    let chat: Vec<_> = jobs.iter().filter(|j| j.group == 1).collect();
    assert_eq!(chat[1].arrival.since_origin().as_secs(), 2);
    assert!(jobs.windows(2).all(|w| w[1].id == w[0].id + 1));
}
