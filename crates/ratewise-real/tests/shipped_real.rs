//! Every shipped scenario (`ratewise_sim::SHIPPED`: ratewise-sim's
//! `scenarios/*.json`) runs end to end and agrees with its simulation
//! within the tolerances of `ratewise_real::agree`, at a reduced size so
//! the suite stays short.
//!
//! `tests/real.rs` covers `burst-mixed`, `spend-cap` and
//! `generous-max-tokens`; this file covers the others and fails when a
//! shipped scenario is covered by neither.
//!
//! Figures left out of a comparison are named in each test, with what
//! was measured and the floor that still holds them: on a clock where a
//! bucket spans a few hundred real milliseconds, a timer late on a loaded
//! 2-core machine is a visible share of the bucket (goodput, a stray 429),
//! which is noise, not what the comparison is about.
//!
//! Time scale: slower than `ratewise simulate --real`'s default
//! (`RealOptions::scale_for`) by the factor in [`HERE`], more for the
//! shortest buckets, to leave a loaded machine slack as `tests/real.rs`
//! does. Nothing asserts on wall-clock speed; `max_real` only bounds a
//! broken run.

mod common;

use ratewise_real::{agree, run_real, RealOptions};
use ratewise_sim::{simulate, Scenario, Strategy, SHIPPED};
use std::time::Duration;

/// Shipped scenarios whose agreement `tests/real.rs` checks.
const IN_REAL_RS: &[&str] = &[
    "burst-mixed.json",
    "spend-cap.json",
    "generous-max-tokens.json",
];

/// Shipped scenarios checked here: the number of jobs they run, and how
/// many times slower than `RealOptions::scale_for` their clock runs.
const HERE: &[(&str, u64, f64)] = &[
    ("cold-start.json", 200, 6.0),
    // 300 jobs, not 150: which jobs exhaust their attempts on 529s is drawn
    // by the simulator's generator in one run and the mock's in the other,
    // and each such job was 0.7 % of the goodput at 150 jobs (measured:
    // 0.985 virtual, 0.943-0.956 real at 6x and 12x; 0.994 and 0.988 at
    // 300 jobs).
    ("overload-storm.json", 300, 6.0),
    ("short-buckets-10s.json", 100, 12.0),
    // Enough jobs that one stray 429 stays under 1 % of the sends.
    ("short-buckets-2s.json", 200, 4.0),
    // Issue #24's scenarios: short buckets, rounded headers, biases.
    ("cold-key-5s.json", 200, 24.0),
    ("anthropic-tier1.json", 60, 6.0),
    ("bias-remaining-high.json", 100, 6.0),
    ("bias-capacity-short.json", 100, 6.0),
    ("bias-second-client.json", 150, 6.0),
    // Issue #35's silent providers (no rate-limit headers; OpenAI's wait
    // only in the message, which `hints` brings into provider time):
    // sized like `anthropic-tier1` and `short-buckets-2s`.
    ("silent-anthropic.json", 60, 6.0),
    ("silent-openai.json", 200, 6.0),
];

#[test]
fn every_shipped_scenario_has_a_real_agreement_test() {
    for (name, _) in SHIPPED {
        assert!(
            IN_REAL_RS.contains(name) || HERE.iter().any(|(n, _, _)| n == name),
            "{name}: no --real agreement test"
        );
    }
}

fn reduced(name: &str) -> (Scenario, f64) {
    let text = SHIPPED.iter().find(|(n, _)| *n == name).unwrap().1;
    let mut s = Scenario::from_json(text).unwrap();
    let (_, jobs, slower) = HERE.iter().find(|(n, _, _)| *n == name).unwrap();
    s.jobs.count = *jobs;
    (s, *slower)
}

/// Runs `name` in virtual time and end to end; asserts the two agree on
/// every figure but those named in `except`, and returns both reports
/// (virtual, real).
fn agrees(name: &str, except: &[&str]) -> (ratewise_sim::Report, ratewise_sim::Report) {
    // One real run at a time: two on a 2-core machine skew each other's
    // clocks (timers fire late, answers come late), which is noise, not
    // what the comparison is about.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (scenario, slower) = reduced(name);
    let options = RealOptions {
        seconds_per_minute: RealOptions::scale_for(&scenario) * slower,
        max_real: Duration::from_secs(300),
    };
    let virt = simulate(&scenario, Strategy::Ratewise, &mut |_, _| {});
    let real = run_real(&scenario, &options, &mut |_, _| {}).unwrap();
    let checks = agree::compare(&virt, &real.report);
    eprintln!(
        "{name} ({} jobs): real run took {:?}; 429s: {} real ({} acceleration), {} virtual\n{}",
        scenario.jobs.count,
        real.real_elapsed,
        real.report.sends_429,
        real.report.sends_429_acceleration,
        virt.sends_429,
        agree::table(&checks)
    );
    assert_eq!(
        real.unmatched_sends, 0,
        "every send of the layer reached the mock"
    );
    assert_eq!(real.report.jobs_total, scenario.jobs.count);
    assert!(
        common::agrees_but_for(&checks, except),
        "{name}\n{}",
        agree::table(&checks)
    );
    (virt, real.report)
}

#[test]
fn cold_start_agrees_without_acceleration_429s() {
    let (virt, real) = agrees("cold-start.json", &[]);
    for r in [&virt, &real] {
        assert_eq!(r.sends_429_acceleration, 0, "{}", r.strategy);
    }
}

#[test]
fn overload_storm_agrees() {
    agrees("overload-storm.json", &[]);
}

#[test]
fn short_buckets_10s_agrees() {
    agrees("short-buckets-10s.json", &[]);
}

#[test]
fn short_buckets_2s_agrees_but_for_the_429_share_and_goodput() {
    // 2 s buckets over loopback, on a clock where they span a few hundred
    // real milliseconds: timer lateness is a visible share of a bucket.
    // Measured 2026-12-01 at half this test's scale: virtual 0.987 of the
    // limit and no 429; real 0.937–0.965 with 0.5–1.5 % of sends answered
    // 429 on an idle machine, 0.899 and 4.3 % with three builds running
    // beside it. Hence the slower clock, and floors for a collapse.
    let (virt, real) = agrees("short-buckets-2s.json", &["share_429", "goodput_ratio"]);
    assert_eq!(virt.sends_429, 0);
    // Stated above: a few, not a storm.
    assert!(
        real.sends_429 * 20 <= real.sends,
        "{} of {} sends answered 429",
        real.sends_429,
        real.sends
    );
    assert!(real.goodput_ratio >= 0.85, "{}", real.goodput_ratio);
}

#[test]
fn cold_key_5s_agrees_but_for_goodput() {
    // 5 s buckets, a fifth of which is the slack a late timer eats on a
    // loaded machine. Measured 2026-12-01 at this scale, three builds
    // running beside it: virtual 0.968 of the limit, real 0.955, no 429.
    // A late timer can still cost one 429: CI measured 0.726 after one,
    // when a first surprise taught all the model was over; it now teaches
    // a step (`cold_key_5s_one_unforeseen_429_costs_little` in the
    // simulator: ≥ 0.9 after one). The floor catches a collapse (the issue
    // measured 0.53 before #24), not the machine's load.
    let (_, real) = agrees("cold-key-5s.json", &["goodput_ratio"]);
    assert!(real.goodput_ratio >= 0.75, "{}", real.goodput_ratio);
}

#[test]
fn anthropic_tier1_agrees() {
    agrees("anthropic-tier1.json", &[]);
}

/// Headers that mislead, end to end: the mock renders the same biases
/// over loopback, and the layer learns from the same 429s.
#[test]
fn biased_headers_agree() {
    agrees("bias-capacity-short.json", &[]);
}

/// Headers 400 tokens high on a 2,000-token bucket, end to end. A first
/// 429 teaches a margin of an eighth of the bucket (250: it may be a
/// one-off), below this steady bias, which the next 429 doubles; on the
/// real clock a late timer adds to the bias in between, so the real run
/// meets a 429 or two more than the virtual one before the margin covers
/// it. Measured 2026-12-02 at this size: virtual 1 of 101 sends answered
/// 429, real 2–3 of 102–103 (four runs), goodput 0.991 and 0.978.
#[test]
fn remaining_high_agrees_but_for_the_429_share() {
    let (_, real) = agrees("bias-remaining-high.json", &["share_429"]);
    assert!(
        real.sends_429 * 20 <= real.sends,
        "{} of {} sends answered 429",
        real.sends_429,
        real.sends
    );
}

/// A second client taking 30 % of the key, end to end: the layer sees it
/// only in the headers, and on the real clock it drifts further between
/// two answers than in virtual time. Measured 2026-12-01: virtual 2.6 % of
/// sends answered 429, real 3.2–6.3 %, goodput 0.709 and 0.667–0.707.
#[test]
fn a_second_client_agrees_but_for_the_429_share() {
    let (_, real) = agrees("bias-second-client.json", &["share_429", "goodput_ratio"]);
    assert!(
        real.sends_429 * 100 <= real.sends * 8,
        "{} of {} sends answered 429",
        real.sends_429,
        real.sends
    );
    assert!(real.goodput_ratio >= 0.64, "{}", real.goodput_ratio);
}

/// Issue #35: a provider that states no limits, end to end. The mock
/// renders the same silent answers over loopback (no rate-limit header, a
/// 429 with `retry-after` only), and the layer learns from the same 429s.
/// The estimate is learned from when 429s arrive and how fast requests
/// went lately, which the real clock spreads differently from virtual time,
/// so the 429 share and the goodput are bounded on their own. Measured
/// 2026-12-03 at this size (60 jobs): virtual 4.8 % of sends answered 429,
/// real 6.3 %; goodput 0.993 and 0.922.
#[test]
fn silent_anthropic_agrees_but_for_the_429_share_and_goodput() {
    let (_, real) = agrees("silent-anthropic.json", &["share_429", "goodput_ratio"]);
    assert!(
        real.sends_429 * 100 <= real.sends * 10,
        "{} of {} sends answered 429",
        real.sends_429,
        real.sends
    );
    assert!(real.goodput_ratio >= 0.85, "{}", real.goodput_ratio);
}

/// Issue #35, OpenAI-like: no `retry-after` either, the wait only in the
/// 429's message, read by the layer in provider time. The 429 share and
/// the goodput are bounded on their own, as for `silent-anthropic`: the
/// estimate is learned from when 429s arrive, and a 10 s bucket spans
/// under a real second here, so a late timer is a visible share of it.
/// Measured 2026-12-07 at this size: virtual 2 of 202 sends answered 429
/// and goodput 0.927; real 2–4 of 202–204 and 0.898–0.906 (six runs, three
/// beside two busy loops), and 6 of 206 in one CI run, which failed the
/// shared ±1 % tolerance.
#[test]
fn silent_openai_agrees_but_for_the_429_share_and_goodput() {
    let (_, real) = agrees("silent-openai.json", &["share_429", "goodput_ratio"]);
    assert!(
        real.sends_429 * 20 <= real.sends,
        "{} of {} sends answered 429",
        real.sends_429,
        real.sends
    );
    assert!(real.goodput_ratio >= 0.8, "{}", real.goodput_ratio);
}
