//! Silent providers (DESIGN principle 17): limits estimated from 429s
//! alone, and rate signals paced rather than counted. Driven through the
//! job machine over the in-memory store in virtual time, against a
//! provider model that enforces its buckets and says nothing but 429s
//! with `retry-after`.

mod common;

use common::{classify, now_at, DriveSync};
use ratewise_core::admit::store_kit::Memory;
use ratewise_core::admit::{
    Config, Controller, LimitSource, RampConfig, RetryBudgetConfig, Shared,
};
use ratewise_core::decide::Policy;
use ratewise_core::job::{Job, JobSpec, Step};
use ratewise_core::{Action, GiveUpReason, Instant, Provider, Usage};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

const OK: &str =
    r#"{"type":"message","content":[],"usage":{"input_tokens":40,"output_tokens":20}}"#;
const TOO_MANY_REQUESTS: &str = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your per-minute rate limit"}}"#;
const TOO_MANY_INPUT_TOKENS: &str = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of input tokens has exceeded your per-minute rate limit"}}"#;
const UNNAMED: &str =
    r#"{"type":"error","error":{"type":"rate_limit_error","message":"Rate limited"}}"#;

fn store() -> Shared {
    let mut config = Config::default();
    config.ramp = {
        let mut ramp = RampConfig::default();
        ramp.start = 1000;
        ramp
    };
    config.seed = Some(3);
    Shared::new(Controller::new(config))
}

fn usage() -> Usage {
    Usage {
        input_tokens: 40,
        output_tokens: 20,
        ..Usage::default()
    }
}

fn job(s: &Shared, arrived: u64, deadline: Duration) -> Job {
    let mut spec = JobSpec::new(
        s.target("k", "claude-sonnet-4-5"),
        Instant::from_millis(arrived),
    );
    spec.max_tokens = Some(20);
    spec.input_estimate = Some(40);
    spec.deadline = Some(deadline);
    Job::new(spec, &Policy::default())
}

/// Steps `j` through its waits (the clock `t` following them) to its next
/// send; returns the attempt number. Any other step is a test failure.
fn send(j: &mut Job, s: &Shared, policy: &Policy, t: &mut u64) -> u32 {
    for _ in 0..10_000 {
        match j.step(s, policy, now_at(*t)) {
            Step::Send { attempt } => return attempt,
            Step::Wait { until, .. } => {
                *t = (*t + 1).max(until.since_origin().as_millis() as u64);
            }
            other => panic!("{other:?}"),
        }
    }
    panic!("no send after 10 000 waits, at {t} ms");
}

/// A provider's requests bucket, continuously refilled, in milliseconds.
struct Provider429 {
    /// Requests per minute, from `at` (ms) on: a limit may change mid-run.
    rates: Vec<(u64, f64)>,
    /// Capacity in seconds of refill.
    capacity_s: f64,
    level: f64,
    at: u64,
}

impl Provider429 {
    fn new(rpm: f64, capacity_s: f64) -> Self {
        Provider429 {
            rates: vec![(0, rpm)],
            capacity_s,
            level: rpm * capacity_s / 60.0,
            at: 0,
        }
    }

    fn rpm(&self, t: u64) -> f64 {
        self.rates
            .iter()
            .rev()
            .find(|(from, _)| *from <= t)
            .map_or(0.0, |r| r.1)
    }

    fn refill(&mut self, t: u64) {
        let rpm = self.rpm(t);
        let cap = rpm * self.capacity_s / 60.0;
        self.level = (self.level + rpm * (t - self.at) as f64 / 60_000.0).min(cap);
        self.at = t;
    }

    /// Takes one request, or says how long until one fits (whole seconds,
    /// rounded up, as `retry-after` is written).
    fn take(&mut self, t: u64) -> Result<(), u64> {
        self.refill(t);
        if self.level >= 1.0 {
            self.level -= 1.0;
            Ok(())
        } else {
            let secs = (1.0 - self.level) * 60.0 / self.rpm(t);
            Err(secs.ceil().max(1.0) as u64)
        }
    }
}

#[derive(Default, Debug)]
struct Run {
    done: u64,
    sends: u64,
    throttled: u64,
    gave_up: u64,
    /// (ms, estimated requests per minute in force) after each 429.
    estimates: Vec<(u64, u64)>,
    /// Completion instants.
    completed: Vec<u64>,
}

/// `workers` callers, each sending one job after another for `for_ms`,
/// answers after `latency_ms`.
fn run(
    p: &mut Provider429,
    workers: u64,
    latency_ms: u64,
    for_ms: u64,
    body: &str,
) -> (Shared, Run) {
    run_on(store(), p, workers, latency_ms, for_ms, body)
}

/// [`run`] on a store made beforehand (one that remembers, say).
fn run_on(
    s: Shared,
    p: &mut Provider429,
    workers: u64,
    latency_ms: u64,
    for_ms: u64,
    body: &str,
) -> (Shared, Run) {
    let policy = Policy::default();
    let mut rng = fastrand::Rng::with_seed(5);
    let mut out = Run::default();
    let mut jobs: Vec<Job> = (0..workers)
        .map(|_| job(&s, 0, Duration::from_secs(600)))
        .collect();
    // (wake-up ms, worker, an answer due: success)
    let mut events = BinaryHeap::new();
    for w in 0..workers as usize {
        events.push(Reverse((0u64, w, false)));
    }
    while let Some(Reverse((t, w, answer))) = events.pop() {
        let now = now_at(t);
        if answer {
            let ok = classify(Provider::Anthropic, 200, &[], OK, now);
            let d = jobs[w].answer(&s, &policy, &ok, Some(&usage()), &mut rng, now);
            assert_eq!(d.action, Action::Done);
        }
        loop {
            match jobs[w].step(&s, &policy, now) {
                Step::Send { .. } => {
                    jobs[w].sending();
                    out.sends += 1;
                    match p.take(t) {
                        Ok(()) => {
                            events.push(Reverse((t + latency_ms, w, true)));
                            break;
                        }
                        Err(secs) => {
                            out.throttled += 1;
                            let retry = secs.to_string();
                            let c = classify(
                                Provider::Anthropic,
                                429,
                                &[("retry-after", retry.as_str())],
                                body,
                                now,
                            );
                            jobs[w].answer(&s, &policy, &c, None, &mut rng, now);
                            let snap = s.snapshot(s.target("k", "claude-sonnet-4-5").scope, now);
                            if let Some(r) = snap.and_then(|x| x.limits.requests) {
                                out.estimates.push((t, r));
                            }
                        }
                    }
                }
                Step::Wait { until, .. } => {
                    let at = until.since_origin().as_millis() as u64;
                    events.push(Reverse((at.max(t + 1), w, false)));
                    break;
                }
                Step::End(e) => {
                    match e.decision.action {
                        Action::Done => {
                            out.done += 1;
                            out.completed.push(t);
                        }
                        _ => out.gave_up += 1,
                    }
                    if t >= for_ms {
                        break;
                    }
                    jobs[w] = job(&s, t, Duration::from_secs(600));
                }
                Step::Pending => unreachable!("the driver answers everything at once"),
                other => panic!("{other:?}"),
            }
        }
    }
    assert!(s.ledger().is_clean(), "{:?}", s.ledger());
    (s, out)
}

fn estimate_at(run: &Run, t: u64) -> Option<u64> {
    run.estimates
        .iter()
        .rev()
        .find(|(at, _)| *at <= t)
        .map(|e| e.1)
}

fn done_between(run: &Run, from: u64, to: u64) -> u64 {
    run.completed
        .iter()
        .filter(|t| **t >= from && **t < to)
        .count() as u64
}

#[test]
fn a_cold_start_converges_to_within_a_tenth_of_the_true_rate_and_holds_it() {
    // A minute's bucket (Anthropic documents it) and a 10 s one (short
    // buckets, as OpenAI-compatible hosts keep): the estimate starts from
    // a lower bound either way.
    for capacity_s in [60.0, 10.0] {
        let rpm = 120.0;
        let mut p = Provider429::new(rpm, capacity_s);
        let (s, r) = run(&mut p, 16, 1_500, 420_000, TOO_MANY_REQUESTS);
        let last = *r
            .estimates
            .last()
            .map(|(_, e)| e)
            .expect("a 429 taught an estimate");
        let snap = s
            .snapshot(s.target("k", "claude-sonnet-4-5").scope, now_at(420_000))
            .unwrap();
        assert_eq!(snap.sources[0], Some(LimitSource::Estimated), "{snap:?}");
        // Measured between two 429s, or a cold bound already at the limit
        // (capped by what the first window proved) that never met another.
        assert!(
            snap.estimates[0].is_some(),
            "capacity {capacity_s}: {:?}",
            r.estimates
        );
        let now = snap.limits.requests.unwrap() as f64;
        assert!(
            (0.9..=1.1).contains(&(now / rpm)),
            "capacity {capacity_s}: {now}/min at the end"
        );
        // Within a minute of work and a minute to settle, then held: every
        // estimate after 2 minutes is within 10 % of the truth.
        for (t, e) in r.estimates.iter().filter(|(t, _)| *t >= 120_000) {
            let ratio = *e as f64 / rpm;
            assert!(
                (0.9..=1.1).contains(&ratio),
                "capacity {capacity_s}: {e}/min at {t} ms; {:?}",
                r.estimates
            );
        }
        assert!(last > 0);
        eprintln!(
            "capacity {capacity_s} s: {} done, {} of {} sends answered 429, {} done from minute 2 to 7 (limit {}), estimates {:?}",
            r.done,
            r.throttled,
            r.sends,
            done_between(&r, 120_000, 420_000),
            rpm * 5.0,
            r.estimates
        );
        // Goodput from minute 2 on: ≥ 0.9 of the limit; 429s ≤ 3 % of sends.
        let done = done_between(&r, 120_000, 420_000) as f64;
        assert!(
            done >= 0.9 * rpm * 5.0,
            "capacity {capacity_s}: {done} done in 5 min, {r:?}"
        );
        let share = r.throttled as f64 / r.sends as f64;
        assert!(
            share <= 0.03,
            "capacity {capacity_s}: {} of {} sends throttled",
            r.throttled,
            r.sends
        );
        assert_eq!(r.gave_up, 0, "no job given up");
    }
}

#[test]
fn a_limit_raised_mid_run_is_found_again() {
    let mut p = Provider429::new(60.0, 60.0);
    p.rates.push((300_000, 180.0));
    let (_, r) = run(&mut p, 16, 1_000, 1_500_000, TOO_MANY_REQUESTS);
    let before = estimate_at(&r, 299_000).unwrap();
    assert!((54..=66).contains(&before), "{before}; {:?}", r.estimates);
    // A limit that stayed put is probed less and less often, so a raise
    // is found within minutes, not seconds: by 15 minutes after it the
    // estimate is within a tenth of it, and the last 5 minutes use it.
    let after = estimate_at(&r, 1_200_000).unwrap();
    assert!(
        (162..=198).contains(&after),
        "{after}/min after the raise; {:?}",
        r.estimates
    );
    let done = done_between(&r, 1_200_000, 1_500_000) as f64;
    assert!(done >= 0.9 * 180.0 * 5.0, "{done} done in the last 5 min");
}

#[test]
fn a_429_naming_one_dimension_does_not_throttle_the_others() {
    let mut p = Provider429::new(60.0, 60.0);
    let (s, r) = run(&mut p, 8, 1_000, 120_000, TOO_MANY_INPUT_TOKENS);
    assert!(r.throttled > 0);
    let snap = s
        .snapshot(s.target("k", "claude-sonnet-4-5").scope, now_at(120_000))
        .unwrap();
    assert_eq!(snap.sources[1], Some(LimitSource::Estimated), "{snap:?}");
    assert_eq!(snap.limits.requests, None, "{snap:?}");
    assert_eq!(snap.limits.output_tokens, None, "{snap:?}");
    assert_eq!(snap.estimates[0], None);
    assert_eq!(snap.estimates[2], None);
}

#[test]
fn an_unnamed_429_teaches_every_dimension_the_provider_meters() {
    let mut p = Provider429::new(60.0, 60.0);
    let (s, _) = run(&mut p, 8, 1_000, 60_000, UNNAMED);
    let snap = s
        .snapshot(s.target("k", "claude-sonnet-4-5").scope, now_at(60_000))
        .unwrap();
    // Anthropic meters requests, input and output apart: no combined
    // bucket is invented.
    assert_eq!(
        snap.sources,
        [
            Some(LimitSource::Estimated),
            Some(LimitSource::Estimated),
            Some(LimitSource::Estimated),
            None
        ],
        "{snap:?}"
    );
}

#[test]
fn an_estimate_never_replaces_a_stated_limit() {
    let s = store();
    let policy = Policy::default();
    let mut rng = fastrand::Rng::with_seed(1);
    let target = s.target("k", "claude-sonnet-4-5");
    // The provider states requests (50 a minute) and nothing about tokens.
    let stated = [
        ("anthropic-ratelimit-requests-limit", "50"),
        ("anthropic-ratelimit-requests-remaining", "49"),
        ("retry-after", "2"),
    ];
    let mut t = 0;
    // Ten answered, then 429s: the tokens the headers leave out have a
    // window to be measured over.
    for n in 0..14 {
        let mut j = job(&s, t, Duration::from_secs(600));
        send(&mut j, &s, &policy, &mut t);
        j.sending();
        if n < 10 {
            let ok = classify(Provider::Anthropic, 200, &stated[..2], OK, now_at(t));
            j.answer(&s, &policy, &ok, Some(&usage()), &mut rng, now_at(t));
        } else {
            let c = classify(Provider::Anthropic, 429, &stated, UNNAMED, now_at(t));
            j.answer(&s, &policy, &c, None, &mut rng, now_at(t));
            j.cancel();
        }
        t += 2_000;
    }
    let snap = s.snapshot(target.scope, now_at(t)).unwrap();
    assert_eq!(snap.limits.requests, Some(50), "{snap:?}");
    assert_eq!(snap.sources[0], Some(LimitSource::Stated));
    // The tokens the headers leave out are estimated.
    assert_eq!(snap.sources[1], Some(LimitSource::Estimated), "{snap:?}");
}

#[test]
fn a_rate_limited_job_with_a_ten_minute_deadline_survives_twenty_429s() {
    let s = store();
    let policy = Policy::default();
    assert_eq!(policy.max_attempts, 3, "the default counts three attempts");
    let mut rng = fastrand::Rng::with_seed(2);
    let mut j = job(&s, 0, Duration::from_secs(600));
    let mut t = 0u64;
    for n in 1..=21u32 {
        let attempt = send(&mut j, &s, &policy, &mut t);
        assert_eq!(attempt, n);
        j.sending();
        if n <= 20 {
            let c = classify(
                Provider::Anthropic,
                429,
                &[("retry-after", "5")],
                TOO_MANY_REQUESTS,
                now_at(t),
            );
            let d = j.answer(&s, &policy, &c, None, &mut rng, now_at(t));
            assert!(
                matches!(d.action, Action::Retry { .. }),
                "429 number {n}: {d:?}"
            );
        } else {
            let ok = classify(Provider::Anthropic, 200, &[], OK, now_at(t));
            let d = j.answer(&s, &policy, &ok, Some(&usage()), &mut rng, now_at(t));
            assert_eq!(d.action, Action::Done);
        }
    }
    assert!(t < 600_000, "all within the deadline: {t} ms");
    assert!(s.ledger().is_clean());
}

#[test]
fn a_429_without_a_hint_and_a_5xx_storm_are_still_counted() {
    let s = store();
    let policy = Policy::default();
    let mut rng = fastrand::Rng::with_seed(2);
    for (status, headers, body) in [
        (429, vec![], TOO_MANY_REQUESTS),
        (
            500,
            vec![],
            r#"{"type":"error","error":{"type":"api_error","message":"boom"}}"#,
        ),
    ] {
        let mut j = job(&s, 0, Duration::from_secs(600));
        let mut t = 0;
        let mut last = None;
        for _ in 0..10 {
            match loop {
                match j.step(&s, &policy, now_at(t)) {
                    Step::Wait { until, .. } => t = until.since_origin().as_millis() as u64,
                    other => break other,
                }
            } {
                Step::Send { .. } => {}
                Step::End(e) => {
                    last = Some(e);
                    break;
                }
                other => panic!("{other:?}"),
            }
            j.sending();
            let c = classify(Provider::Anthropic, status, &headers, body, now_at(t));
            j.answer(&s, &policy, &c, None, &mut rng, now_at(t));
        }
        let e = last.expect("ended");
        assert_eq!(e.attempts, 3, "{status}: {e:?}");
        assert_eq!(
            e.decision.action,
            Action::GiveUp {
                reason: GiveUpReason::Attempts
            }
        );
    }
}

#[test]
fn the_retry_budget_still_stops_a_5xx_storm_but_not_paced_429s() {
    let s = Shared::new(Controller::new({
        let mut config = Config::default();
        config.retry_budget = {
            let mut b = RetryBudgetConfig::default();
            b.min_retries = 0;
            b.ratio_permille = 0;
            b
        };
        config.seed = Some(1);
        config
    }));
    let policy = Policy::default();
    let mut rng = fastrand::Rng::with_seed(2);
    let boom = r#"{"type":"error","error":{"type":"api_error","message":"boom"}}"#;
    type Case<'a> = (u16, &'a [(&'a str, &'a str)], &'a str, bool);
    let cases: [Case; 2] = [
        (500, &[], boom, false),
        (429, &[("retry-after", "1")], TOO_MANY_REQUESTS, true),
    ];
    for (status, headers, body, retried) in cases {
        let mut j = job(&s, 0, Duration::from_secs(600));
        let mut t = 100_000;
        send(&mut j, &s, &policy, &mut t);
        j.sending();
        let c = classify(Provider::Anthropic, status, headers, body, now_at(t));
        let d = j.answer(&s, &policy, &c, None, &mut rng, now_at(t));
        if retried {
            assert!(matches!(d.action, Action::Retry { .. }), "{d:?}");
            // The paced retry is admitted though the budget allows none.
            let step = loop {
                match j.step(&s, &policy, now_at(t)) {
                    Step::Wait { until, .. } => t = until.since_origin().as_millis() as u64,
                    other => break other,
                }
            };
            assert!(matches!(step, Step::Send { attempt: 2 }), "{step:?}");
            j.cancel();
        } else {
            assert_eq!(
                d.action,
                Action::GiveUp {
                    reason: GiveUpReason::RetryBudget
                },
                "{d:?}"
            );
        }
    }
}

/// A process cut off from its peers (a shared store unreachable: a share
/// below the whole) starts at its share of a stated limit, then learns the
/// share it really gets from its own 429s — never above the stated limit —
/// and drops that estimate when it rejoins.
#[test]
fn a_process_cut_off_from_its_peers_learns_its_share_from_its_429s() {
    use ratewise_core::admit::store_kit::StoreHooks;
    let s = store();
    let policy = Policy::default();
    let mut rng = fastrand::Rng::with_seed(4);
    let target = s.target("k", "claude-sonnet-4-5");
    let stated = [
        ("anthropic-ratelimit-requests-limit", "600"),
        ("anthropic-ratelimit-requests-remaining", "590"),
    ];
    let mut t = 0;
    let mut answer = |s: &Shared, t: &mut u64, ok: bool| {
        let mut j = job(s, *t, Duration::from_secs(600));
        send(&mut j, s, &policy, t);
        j.sending();
        if ok {
            let c = classify(Provider::Anthropic, 200, &stated, OK, now_at(*t));
            j.answer(s, &policy, &c, Some(&usage()), &mut rng, now_at(*t));
        } else {
            let mut h = stated.to_vec();
            h[1].1 = "0";
            h.push(("retry-after", "1"));
            let c = classify(Provider::Anthropic, 429, &h, TOO_MANY_REQUESTS, now_at(*t));
            j.answer(s, &policy, &c, None, &mut rng, now_at(*t));
            j.cancel();
        }
        *t += 100;
    };
    answer(&s, &mut t, true);
    s.lock().set_share(500, now_at(t));
    let snap = s.snapshot(target.scope, now_at(t)).unwrap();
    let first = snap.limits.requests.unwrap();
    assert!(
        (290..=300).contains(&first),
        "half of 600 at first: {snap:?}"
    );
    for _ in 0..20 {
        answer(&s, &mut t, true);
    }
    answer(&s, &mut t, false);
    t += 2_000;
    for _ in 0..20 {
        answer(&s, &mut t, true);
    }
    answer(&s, &mut t, false);
    let snap = s.snapshot(target.scope, now_at(t)).unwrap();
    assert_eq!(snap.sources[0], Some(LimitSource::Estimated), "{snap:?}");
    assert!(snap.limits.requests.unwrap() <= 600, "{snap:?}");
    // Rejoined: the stated limit again.
    s.lock().set_share(1000, now_at(t));
    let snap = s.snapshot(target.scope, now_at(t)).unwrap();
    assert_eq!(snap.limits.requests, Some(600), "{snap:?}");
    assert_eq!(snap.sources[0], Some(LimitSource::Stated));
}

/// A process cut off before it heard any limit (Redis down at start)
/// learns the limit from its first answer: its first 429 measures the
/// share it got, not a cold key's lower bound from its own sends (a third
/// of the limit for one of three replicas); and when the provider later
/// shows its bucket half full or more (its peers went quiet), the share
/// climbs again instead of staying at what it got while they were busy.
#[test]
fn a_process_cut_off_before_its_first_answer_keeps_its_share_and_regains_the_rest() {
    use ratewise_core::admit::store_kit::StoreHooks;
    let s = store();
    let policy = Policy::default();
    let mut rng = fastrand::Rng::with_seed(4);
    let target = s.target("k", "claude-sonnet-4-5");
    s.lock().set_share(500, now_at(0));
    let mut t = 0;
    let mut answer = |s: &Shared, t: &mut u64, remaining: Option<&str>| {
        let mut j = job(s, *t, Duration::from_secs(600));
        send(&mut j, s, &policy, t);
        j.sending();
        let mut h = vec![("anthropic-ratelimit-requests-limit", "600")];
        match remaining {
            Some(r) => {
                h.push(("anthropic-ratelimit-requests-remaining", r));
                let c = classify(Provider::Anthropic, 200, &h, OK, now_at(*t));
                j.answer(s, &policy, &c, Some(&usage()), &mut rng, now_at(*t));
            }
            None => {
                h.push(("anthropic-ratelimit-requests-remaining", "0"));
                h.push(("retry-after", "1"));
                let c = classify(Provider::Anthropic, 429, &h, TOO_MANY_REQUESTS, now_at(*t));
                j.answer(s, &policy, &c, None, &mut rng, now_at(*t));
                j.cancel();
            }
        }
        *t += 50;
    };
    // Busy peers: the provider's bucket shows little left.
    for _ in 0..60 {
        answer(&s, &mut t, Some("5"));
    }
    answer(&s, &mut t, None);
    let snap = s.snapshot(target.scope, now_at(t)).unwrap();
    assert_eq!(snap.sources[0], Some(LimitSource::Estimated), "{snap:?}");
    let measured = snap.limits.requests.unwrap();
    assert!(
        (200..=300).contains(&measured),
        "about its share of 600 it got, not a cold bound: {measured} at {t} ms"
    );
    // Quiet peers: the provider's bucket shows itself nearly full.
    let from = t;
    while t < from + 30_000 {
        answer(&s, &mut t, Some("590"));
    }
    let snap = s.snapshot(target.scope, now_at(t)).unwrap();
    let regained = snap.limits.requests.unwrap();
    assert!(
        regained > measured * 3 / 2 && regained <= 600,
        "climbs back toward the whole, never past it: {measured} → {regained}"
    );
}

/// Gemini states no limits; its 429s name their quota. A per-day quota's
/// 429 waits for midnight Pacific and teaches no per-minute estimate; a
/// per-minute one states the limit of the dimension its quota names.
#[test]
fn a_gemini_per_day_quota_teaches_no_per_minute_estimate_and_a_per_minute_one_does() {
    const OK_GEMINI: &str =
        r#"{"candidates":[],"usageMetadata":{"promptTokenCount":40,"candidatesTokenCount":20}}"#;
    let quota = |id: &str, metric: &str| {
        format!(
            r#"{{"error":{{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED","details":[{{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{{"quotaMetric":"generativelanguage.googleapis.com/{metric}","quotaId":"{id}","quotaValue":"50"}}]}},{{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"20s"}}]}}}}"#
        )
    };
    let per_day = quota(
        "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
        "generate_content_free_tier_requests",
    );
    let per_minute = quota(
        "GenerateContentPaidTierInputTokensPerModelPerMinute",
        "generate_content_paid_tier_input_token_count",
    );
    let policy = Policy::default();
    let mut rng = fastrand::Rng::with_seed(4);
    // Jobs that may wait two days: the day's reset is a wait, not a
    // deadline missed.
    let mut answer = |s: &Shared, t: &mut u64, status: u16, body: &str| {
        let mut j = job(s, *t, Duration::from_secs(2 * 86_400));
        send(&mut j, s, &policy, t);
        j.sending();
        let c = classify(Provider::Gemini, status, &[], body, now_at(*t));
        let usage = (status == 200).then(usage);
        j.answer(s, &policy, &c, usage.as_ref(), &mut rng, now_at(*t));
        if status != 200 {
            j.cancel();
        }
        *t += 200;
    };
    for (quota, learned) in [
        (&per_day, [None; 4]),
        // A per-minute quota's `quotaValue` is the limit it states
        // (issue #47): paced at it, not estimated from 429s.
        (&per_minute, [None, Some(LimitSource::Stated), None, None]),
    ] {
        let s = store();
        let target = s.target("k", "claude-sonnet-4-5");
        let mut t = 0;
        for _ in 0..10 {
            answer(&s, &mut t, 200, OK_GEMINI);
        }
        answer(&s, &mut t, 429, quota);
        let snap = s.snapshot(target.scope, now_at(t)).unwrap();
        assert_eq!(snap.sources, learned, "{snap:?}");
        if learned[1].is_some() {
            assert_eq!(snap.limits.input_tokens, Some(50), "{snap:?}");
        }
        if learned[1].is_none() {
            // The model's bucket waits for the day's reset: a job that
            // cannot wait that long is answered at once.
            let mut j = job(&s, t, Duration::from_secs(600));
            assert!(matches!(j.step(&s, &policy, now_at(t)), Step::End(_)));
        }
    }
}

/// What a process learned of a silent key, remembered by the next one
/// (a restart, a new replica): `recall` of the first run's record.
fn remembered_after(age: Duration) -> (Shared, usize) {
    use ratewise_core::admit::store_kit::StoreHooks;
    let mut p = Provider429::new(120.0, 10.0);
    let (first, _) = run(&mut p, 16, 1_500, 300_000, TOO_MANY_REQUESTS);
    let end = now_at(300_000);
    let record = first.lock().export_key("k", end).expect("the key's record");
    assert_eq!(record.written_at(), Some(end.wall));
    // The record as a journal or Redis keeps it, read back as JSON.
    let json = serde_json::to_string(&record.beliefs_only().stamped(end.wall)).unwrap();
    let record: ratewise_core::admit::store_kit::KeyRecord = serde_json::from_str(&json).unwrap();
    let s = store();
    let _ = s.target("k", "claude-sonnet-4-5");
    let later = ratewise_core::Now::new(Instant::ZERO, end.wall + age);
    let n = s.lock().recall(&record, later);
    (s, n)
}

#[test]
fn a_restarted_process_starts_from_what_the_last_one_learned() {
    let rpm = 120.0;
    // Cold: the first minutes of a key nobody learned.
    let (_, cold) = run(
        &mut Provider429::new(rpm, 10.0),
        16,
        1_500,
        120_000,
        TOO_MANY_REQUESTS,
    );
    // Remembered, ten minutes after the last run ended.
    let (s, n) = remembered_after(Duration::from_secs(600));
    assert_eq!(n, 1, "one class recalled");
    let scope = s.target("k", "claude-sonnet-4-5").scope;
    let snap = s.snapshot(scope, now_at(0)).unwrap();
    assert_eq!(snap.sources[0], Some(LimitSource::Estimated), "{snap:?}");
    let r0 = snap.limits.requests.unwrap() as f64;
    assert!((0.85..=1.05).contains(&(r0 / rpm)), "{r0}/min recalled");
    assert!(snap.remembered.is_some(), "shown as remembered");
    let (_, warm) = run_on(
        s,
        &mut Provider429::new(rpm, 10.0),
        16,
        1_500,
        120_000,
        TOO_MANY_REQUESTS,
    );
    eprintln!(
        "first two minutes: cold {} done, {} of {} sends answered 429; remembered {} done, {} of {}",
        cold.done, cold.throttled, cold.sends, warm.done, warm.throttled, warm.sends
    );
    assert!(
        warm.throttled < cold.throttled,
        "cold {cold:?}\nwarm {warm:?}"
    );
    assert!(warm.done >= cold.done, "cold {cold:?}\nwarm {warm:?}");
}

#[test]
fn a_remembered_estimate_decays_past_an_hour_and_is_gone_past_nine() {
    use ratewise_core::admit::store_kit::{remembered_share, REMEMBER_FORGOTTEN, REMEMBER_TRUSTED};
    let rate = |age: Duration| {
        let (s, n) = remembered_after(age);
        let scope = s.target("k", "claude-sonnet-4-5").scope;
        let snap = s.snapshot(scope, now_at(0)).unwrap();
        (n, snap.limits.requests)
    };
    let (n, fresh) = rate(Duration::from_secs(60));
    assert_eq!(n, 1);
    let fresh = fresh.unwrap() as f64;
    let (_, two_hours) = rate(Duration::from_secs(2 * 3600));
    let two_hours = two_hours.unwrap() as f64;
    assert!(
        (two_hours / fresh - 0.5).abs() < 0.03,
        "{two_hours} vs {fresh}"
    );
    assert_eq!(remembered_share(REMEMBER_TRUSTED), Some(1.0));
    assert_eq!(
        remembered_share(REMEMBER_FORGOTTEN + Duration::from_secs(1)),
        None
    );
    let (n, gone) = rate(Duration::from_secs(10 * 3600));
    assert_eq!((n, gone), (0, None), "nothing recalled, nothing believed");
}

#[test]
fn forgetting_a_key_starts_it_cold_again() {
    let (s, _) = remembered_after(Duration::from_secs(60));
    let scope = s.target("k", "claude-sonnet-4-5").scope;
    assert!(s.lock().forget_beliefs("k", now_at(0)));
    let snap = s.snapshot(scope, now_at(0)).unwrap();
    assert_eq!(snap.limits.requests, None, "{snap:?}");
    assert_eq!(snap.remembered, None);
    assert!(!s.lock().forget_beliefs("nobody", now_at(0)));
}

#[test]
fn a_configured_limit_overrides_a_remembered_stated_one() {
    use ratewise_core::admit::store_kit::{KeyRecord, StoreHooks};
    use ratewise_core::admit::Limits;
    // A key whose headers stated 600 RPM, remembered by a process that
    // configures 100.
    let mut c = Controller::new(Config::default());
    let target = c.target("k", "claude-sonnet-4-5");
    let mut headers = http::HeaderMap::new();
    headers.insert(
        "anthropic-ratelimit-requests-limit",
        http::HeaderValue::from_static("600"),
    );
    let snap = ratewise_core::parse::ratelimit::RateLimitSnapshot::from_headers(
        &headers,
        Provider::Anthropic,
    );
    c.sync_headers(target.scope, &snap, Provider::Anthropic, now_at(0));
    let record: KeyRecord = c.export_key("k", now_at(0)).unwrap();
    let mut config = Config::default();
    config.limits = Limits {
        requests: Some(100),
        ..Limits::NONE
    };
    let mut d = Controller::new(config);
    let t = d.target("k", "claude-sonnet-4-5");
    assert_eq!(d.recall(&record, now_at(1_000)), 1);
    let snap = d.snapshot(t.scope, now_at(1_000)).unwrap();
    assert_eq!(snap.limits.requests, Some(100));
    assert_eq!(snap.sources[0], Some(LimitSource::Configured));
}

/// A queue is never refused on a cold lower bound: a silent key's first
/// 429 leaves an estimate far under the limit that climbs within seconds,
/// and a prediction at it (hundreds of jobs ahead, "in 698 s", past the
/// SDK's 10 minutes) turned 132 of 150 callers away at once through the
/// proxy (issue #47's `silent-output` shape). Once measured, a prediction
/// refuses as before.
#[test]
fn a_queue_is_not_refused_on_a_cold_estimate_that_is_still_climbing() {
    let mut p = Provider429::new(120.0, 10.0);
    // The first 429 comes 21 s in (a slow start into a 10 s bucket).
    let (s, r) = run(&mut p, 16, 1_500, 22_000, TOO_MANY_REQUESTS);
    assert!(!r.estimates.is_empty(), "a 429 taught an estimate: {r:?}");
    let t = now_at(22_000);
    let target = s.target("k", "claude-sonnet-4-5");
    let snap = s.snapshot(target.scope, t).unwrap();
    assert_eq!(
        snap.estimates[0],
        Some(ratewise_core::admit::EstimateState::Cold),
        "{snap:?}"
    );
    let mut req = ratewise_core::admit::AdmitRequest::new(target);
    req.input_estimate = Some(40);
    req.max_tokens = Some(20);
    req.deadline = Some(Instant::from_millis(22_000 + 600_000));
    // At the cold bound, 2,000 jobs ahead would take far past 10 minutes:
    // no prediction, the queue waits its turn.
    assert_eq!(s.lock().predict(&req, 2_000, t), None);
    // Measured, the same queue is refused at once.
    let mut p = Provider429::new(120.0, 10.0);
    let (s, r) = run(&mut p, 16, 1_500, 240_000, TOO_MANY_REQUESTS);
    let t = now_at(240_000);
    let snap = s.snapshot(target.scope, t).unwrap();
    assert_eq!(
        snap.estimates[0],
        Some(ratewise_core::admit::EstimateState::Measured),
        "{r:?}"
    );
    req.deadline = Some(Instant::from_millis(240_000 + 600_000));
    assert!(matches!(
        s.lock().predict(&req, 2_000, t),
        Some(ratewise_core::admit::Admission::Refused { .. })
    ));
}
