//! Every shipped scenario, full size: the ratewise strategy meets the
//! targets of the issue against the oracle and the other strategies of
//! the same run, and the oracle is what it claims to be (no 429, goodput
//! at least ratewise's). Behavioural properties of a deterministic
//! virtual-time run, not timing.

use ratewise_sim::{simulate, targets, Report, Scenario, Strategy, SHIPPED};

fn run(name: &str) -> (Scenario, Vec<Report>) {
    let text = SHIPPED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .expect("shipped");
    let s = Scenario::from_json(text).expect("valid");
    let reports = Strategy::WITH_ORACLE
        .iter()
        .map(|st| simulate(&s, *st, &mut |_, _| {}))
        .collect();
    (s, reports)
}

fn assert_targets(name: &str) -> Vec<Report> {
    let (s, reports) = run(name);
    assert_sound(name, &reports);
    assert_oracle(name, &reports);
    let missed = targets::check(&s, &reports);
    assert!(
        missed.is_empty(),
        "{name}: {missed:?}\n{}",
        ratewise_sim::table::table(&reports)
    );
    reports
}

/// The report of `strategy`.
fn find<'a>(reports: &'a [Report], strategy: &str) -> &'a Report {
    reports
        .iter()
        .find(|r| r.strategy == strategy)
        .expect("every strategy ran")
}

/// The oracle sees the provider's true state: it is never refused for a
/// rate limit (nor, as it also sees the spend cap, for money), and no
/// client of the same provider gets more of it than the oracle does.
fn assert_oracle(name: &str, reports: &[Report]) {
    let (oracle, rw) = (find(reports, "oracle"), find(reports, "ratewise"));
    assert_eq!(oracle.sends_429, 0, "{name}: the oracle got a 429");
    assert_eq!(oracle.sends_after_stop, 0, "{name}");
    assert!(
        oracle.goodput_ratio >= rw.goodput_ratio,
        "{name}: oracle goodput {} below ratewise's {}",
        oracle.goodput_ratio,
        rw.goodput_ratio
    );
    println!(
        "{name}: goodput ratewise {:.4}, oracle {:.4}, ratio {:.4}",
        rw.goodput_ratio,
        oracle.goodput_ratio,
        rw.goodput_ratio / oracle.goodput_ratio
    );
}

/// What holds for every strategy, whatever its figures.
fn assert_sound(name: &str, reports: &[Report]) {
    for r in reports {
        // The allowance is what a greedy client gets: nobody gets more.
        assert!(
            (0.0..=1.0).contains(&r.goodput_ratio),
            "{name}/{}: goodput {} outside [0, 1]",
            r.strategy,
            r.goodput_ratio
        );
        assert_eq!(
            r.jobs_lost, 0,
            "{name}/{}: every job ends exactly once",
            r.strategy
        );
        let ended =
            r.jobs_done + r.jobs_failed + r.jobs_given_up + r.jobs_held_unknown + r.jobs_stopped;
        assert_eq!(ended, r.jobs_total, "{name}/{}", r.strategy);
    }
}

/// Every scenario in `SHIPPED` has a test below.
const TESTED: &[&str] = &[
    "burst-mixed.json",
    "generous-max-tokens.json",
    "overload-storm.json",
    "spend-cap.json",
    "cold-start.json",
    "short-buckets-10s.json",
    "short-buckets-2s.json",
    "cold-key-5s.json",
    "anthropic-tier1.json",
    "bias-remaining-high.json",
    "bias-capacity-short.json",
    "bias-second-client.json",
    "silent-anthropic.json",
    "silent-openai.json",
];

#[test]
fn every_shipped_scenario_is_tested() {
    for (name, _) in SHIPPED {
        assert!(TESTED.contains(name), "{name} has no test in shipped.rs");
    }
}

#[test]
fn burst_mixed() {
    let r = assert_targets("burst-mixed.json");
    // Resets are held, not retried: ratewise holds exactly the resets.
    assert_eq!(r[0].jobs_held_unknown, r[0].sends_reset);
}

#[test]
fn generous_max_tokens() {
    // Requests bind here, and a smooth requests-per-minute pacer never
    // trips the output bucket at 50 RPM: rpm-only ties ratewise on sends
    // per done job, and ratewise is strictly ahead on goodput.
    let r = assert_targets("generous-max-tokens.json");
    let rpm = r.iter().find(|o| o.strategy == "rpm-only").unwrap();
    assert!(r[0].sends_per_done_job <= rpm.sends_per_done_job);
    assert!(r[0].goodput_ratio > rpm.goodput_ratio);
    // Without admission, max_tokens charged up front makes the provider
    // refuse; ratewise reserves it like the provider does.
    assert!(r[0].sends_429 * 100 <= r[0].sends);
    assert!(r
        .iter()
        .skip(1)
        .any(|o| o.sends_429 > 100 * r[0].sends_429.max(1)));
}

#[test]
fn overload_storm() {
    assert_targets("overload-storm.json");
}

#[test]
fn spend_cap() {
    let r = assert_targets("spend-cap.json");
    let rw = &r[0];
    assert_eq!(rw.sends_after_stop, 0);
    assert!(
        rw.jobs_stopped > 0,
        "jobs after the cap are kept, not failed"
    );
    assert_eq!(rw.jobs_failed + rw.jobs_given_up, 0);
    // Every other strategy keeps knocking after the cap answered.
    let naive = r.iter().find(|o| o.strategy == "sdk-naive").unwrap();
    assert!(naive.sends_429 > 100);
}

#[test]
fn cold_start() {
    let r = assert_targets("cold-start.json");
    assert_eq!(r[0].sends_429_acceleration, 0);
    assert!(r
        .iter()
        .filter(|o| !["ratewise", "rpm-only", "oracle"].contains(&o.strategy.as_str()))
        .all(|o| o.sends_429_acceleration > 0));
}

#[test]
fn short_buckets_10s() {
    // Anthropic-like limits over 10 s buckets, learned from the headers:
    // the allowance of a full bucket is 10 s of the limit.
    let (_, reports) = run("short-buckets-10s.json");
    assert_sound("short-buckets-10s.json", &reports);
    // A burst against a sixth of a minute's bucket: every client without
    // admission control is refused far more often than not.
    for o in reports
        .iter()
        .filter(|o| o.strategy != "ratewise" && o.strategy != "oracle")
    {
        assert!(o.sends_429 * 4 > o.sends, "{}: {}", o.strategy, o.sends_429);
    }
    assert_targets("short-buckets-10s.json");
}

#[test]
fn short_buckets_2s() {
    // OpenAI-like limits over 2 s buckets, learned from the headers, and
    // refused requests count against the request limit.
    let (_, reports) = run("short-buckets-2s.json");
    assert_sound("short-buckets-2s.json", &reports);
    // Retrying on every 429 digs the request bucket deeper: the SDK loop
    // and the backoff layer get almost nothing done.
    for o in reports
        .iter()
        .filter(|o| o.strategy == "sdk-naive" || o.strategy == "backoff-only")
    {
        assert!(
            o.jobs_done * 10 < o.jobs_total,
            "{}: {}",
            o.strategy,
            o.jobs_done
        );
    }
    assert_targets("short-buckets-2s.json");
}

#[test]
fn cold_key_5s() {
    // A cold key against 5 s buckets: max_tokens 1000 is 60 % of the
    // output bucket, and the acceleration limit holds the first burst.
    let r = assert_targets("cold-key-5s.json");
    let (rw, oracle) = (find(&r, "ratewise"), find(&r, "oracle"));
    assert!(
        rw.goodput_ratio >= 0.95 * oracle.goodput_ratio,
        "{}",
        rw.goodput_ratio
    );
    // What does it: Anthropic rounds the output bucket's `remaining` to the
    // nearest thousand, a third of this 1,667-token bucket, and the views
    // alone prove 1,499; the requests and input buckets show the 5 s
    // horizon, taken as the output bucket's inside what its views allow
    // (on with `learn_margins`, which corrects a wrong hypothesis).
    let (s, _) = run("cold-key-5s.json");
    let mut off = s.clone();
    off.learn_margins = false;
    let without = simulate(&off, Strategy::Ratewise, &mut |_, _| {});
    assert!(
        without.goodput_ratio + 0.05 < rw.goodput_ratio,
        "without the hypothesis {}, with it {}",
        without.goodput_ratio,
        rw.goodput_ratio
    );
    assert_eq!(rw.sends_429, 0);
    assert_eq!(
        r[0].sends_429_acceleration, 0,
        "no ramp 429 on a cold start"
    );
}

/// One 429 nobody could foresee — another client's burst takes 600
/// tokens once, on an output bucket barely larger than one request's
/// `max_tokens` — costs a retry and a short pause, not the rest of the
/// run. Measured 2026-12-02 with the burst before request 16, 40 and 85:
/// 0.908, 0.923 and 0.930 of the limit. When a first surprise taught a
/// margin of all the model was over and cut the capacity the headers
/// proved by as much, they were 0.690, 0.724 and 0.784: one request at a
/// time until the margin decayed. (A real run met the same after one late
/// timer: 0.726.)
#[test]
fn cold_key_5s_one_unforeseen_429_costs_little() {
    for at in [16, 40, 85] {
        let (mut s, _) = run("cold-key-5s.json");
        s.bias = Some(ratewise_mock::BiasConfig {
            burst_tokens: 600,
            burst_at_request: at,
            ..Default::default()
        });
        let rw = simulate(&s, Strategy::Ratewise, &mut |_, _| {});
        assert_eq!(rw.sends_429, 1, "burst before request {at}: met once");
        assert_eq!(rw.jobs_done, rw.jobs_total);
        assert!(
            rw.goodput_ratio >= 0.9,
            "burst before request {at}: {}",
            rw.goodput_ratio
        );
    }
}

#[test]
fn anthropic_tier1() {
    assert_targets("anthropic-tier1.json");
}

#[test]
fn bias_remaining_high() {
    // Headers reporting 400 tokens more than there are: the oracle,
    // which reads the truth, is never refused.
    assert_targets("bias-remaining-high.json");
}

#[test]
fn bias_capacity_short() {
    // Buckets 20 % smaller than their headers imply: a burst sized from
    // the headers overshoots; the oracle sizes it from the real bucket.
    let r = assert_targets("bias-capacity-short.json");
    let oracle = find(&r, "oracle");
    assert_eq!(oracle.jobs_done, oracle.jobs_total);
}

#[test]
fn bias_second_client() {
    // A second client takes 30 % of every limit: nobody gets more than
    // 70 % of the key's allowance, and the oracle gets all of that.
    let r = assert_targets("bias-second-client.json");
    let oracle = find(&r, "oracle");
    assert!(
        (0.69..=0.71).contains(&oracle.goodput_ratio),
        "{}",
        oracle.goodput_ratio
    );
    for o in &r {
        assert!(
            o.goodput_ratio <= 0.72,
            "{}: {}",
            o.strategy,
            o.goodput_ratio
        );
    }
}

/// Issue #35's silent scenarios: the targets, and every job done. A job
/// whose deadline (2 h here; the oracle needs minutes) allows the wait is
/// never given up for a 429 ("A 429 never ends a job its caller would
/// wait for"). Checked here besides the goodput bar because giving jobs up
/// shortens the run, and goodput is measured over the run: a client that
/// gives up most of its jobs in the first minute can still show 0.9 × the
/// oracle's.
fn assert_silent(name: &str, silent: ratewise_mock::Silent) {
    let (s, _) = run(name);
    assert_eq!(s.silent, silent, "{name}");
    assert!(s.deadline_ms.is_some(), "{name}: the deadline is the claim");
    let r = assert_targets(name);
    let (rw, oracle) = (find(&r, "ratewise"), find(&r, "oracle"));
    assert_eq!(oracle.jobs_done, oracle.jobs_total, "{name}: the oracle");
    assert_eq!(
        rw.jobs_done,
        rw.jobs_total,
        "{name}: every job done\n{}",
        ratewise_sim::table::table(&r)
    );
}

/// Issue #35: a provider that states no limits (no rate-limit header on
/// any answer), Anthropic-like with `retry-after` on its 429s. ratewise
/// learns the limits from its 429s alone and is held to the same goodput
/// bar as anywhere (0.9 × the oracle's) with at most 3 % of sends
/// answered 429 (`targets::MAX_429_SHARE_BIASED`).
#[test]
fn silent_anthropic() {
    assert_silent("silent-anthropic.json", ratewise_mock::Silent::RetryAfter);
}

/// Issue #35, OpenAI-like: no rate-limit header and no `retry-after`; a
/// 429's wait is only in its message ("Please try again in 1.2s.").
#[test]
fn silent_openai() {
    assert_silent("silent-openai.json", ratewise_mock::Silent::Message);
}

/// Learning from 429s the model did not expect costs next to nothing where
/// the model is right (≤ 0.02 of goodput on every shipped scenario without
/// a bias), and where the headers mislead it is what keeps the 429s down:
/// never more of them than without it, but for the capacity hypothesis it
/// enables (a sibling bucket's horizon), which may cost one 429, and a
/// first margin of an eighth of the bucket, which a steady bias larger
/// than that exceeds once more (`bias-remaining-high`, 400 tokens on a
/// 2,000-token bucket: 2 of 152 sends, for 0.991 of the limit either way).
/// A first 429 teaches no more than that because it may be a one-off
/// (`cold_key_5s_one_unforeseen_429_costs_little`).
#[test]
fn learning_costs_nothing_without_a_bias_and_pays_with_one() {
    for (name, text) in SHIPPED {
        let on = Scenario::from_json(text).expect("valid");
        let mut off = on.clone();
        off.learn_margins = false;
        let a = simulate(&on, Strategy::Ratewise, &mut |_, _| {});
        let b = simulate(&off, Strategy::Ratewise, &mut |_, _| {});
        if on.is_biased() {
            assert!(
                a.sends_429 <= b.sends_429.max(2),
                "{name}: learning on {} × 429, off {}",
                a.sends_429,
                b.sends_429
            );
        } else {
            assert!(
                a.goodput_ratio >= b.goodput_ratio - 0.02,
                "{name}: learning on {}, off {}",
                a.goodput_ratio,
                b.goodput_ratio
            );
        }
    }
}
