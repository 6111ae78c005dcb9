//! The per-job state machine: what it asks for next, and that every path
//! ends the job's reservation exactly once (nothing stays outstanding, a
//! send held as unknown included, and no end is refused as a second one).

mod common;

use common::{classify, now_at, DriveSync};
use ratewise_core::admit::{Config, Controller, End, Limits, RampConfig, Shared, WaitReason};
use ratewise_core::classify::{classify_transport, TransportFailure};
use ratewise_core::decide::Policy;
use ratewise_core::job::{BodyEnd, Job, JobSpec, Step, WaitFor};
use ratewise_core::{Action, Cause, GiveUpReason, Instant, Note, Provider, Usage};
use std::time::Duration;

fn store(limits: Limits) -> Shared {
    Shared::new(Controller::new({
        let mut config = Config::default();
        config.limits = limits;
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        config.seed = Some(1);
        config
    }))
}

fn roomy() -> Limits {
    Limits {
        requests: Some(6000),
        ..Limits::NONE
    }
}

fn job(s: &Shared, model: &str) -> Job {
    let mut spec = JobSpec::new(s.target("k", model), Instant::ZERO);
    spec.max_tokens = Some(100);
    spec.input_estimate = Some(50);
    spec.deadline = Some(Duration::from_secs(600));
    Job::new(spec, &Policy::default())
}

fn rng() -> fastrand::Rng {
    fastrand::Rng::with_seed(11)
}

const OK: &str = r#"{"type":"message","content":[],"usage":{"input_tokens":40,"output_tokens":7}}"#;
const RATE_LIMITED: &str = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;

/// Every reservation ended, none twice.
fn assert_clean(s: &Shared) {
    let l = s.ledger();
    assert!(l.is_clean(), "{l:?}");
}

#[test]
fn a_success_settles_from_the_usage_at_its_bodys_end() {
    let s = store(roomy());
    let policy = Policy::default();
    let mut j = job(&s, "claude-sonnet-4-5");
    let t = now_at(0);
    assert!(matches!(j.step(&s, &policy, t), Step::Send { attempt: 1 }));
    j.sending();
    assert!(matches!(j.step(&s, &policy, t), Step::Pending));
    let c = classify(Provider::Anthropic, 200, &[], "", t);
    let d = j.answer(&s, &policy, &c, None, &mut rng(), t);
    assert_eq!(d.action, Action::Done);
    assert!(j.estimate().is_some(), "the body's end settles it");
    let u = Usage {
        input_tokens: 40,
        output_tokens: 7,
        ..Usage::default()
    };
    j.end_body(&s, Some(&u), now_at(500));
    let Step::End(e) = j.step(&s, &policy, now_at(500)) else {
        panic!()
    };
    assert_eq!(
        (e.decision.action, e.attempts, e.at_admission),
        (Action::Done, 1, false)
    );
    assert_clean(&s);
    assert_eq!(s.ledger().charged.output, 7);
}

/// A driver that will not go on withdraws the job: the machine ends it
/// `inspect`; a reservation never handed over is released, one whose
/// body was being delivered is charged at its estimate; a second
/// withdrawal is stray.
#[test]
fn a_withdrawn_job_ends_for_inspection_and_its_reservation_with_it() {
    let s = store(roomy());
    let policy = Policy::default();
    let t = now_at(0);
    // Admitted, not handed over (its journal could not record it).
    let mut j = job(&s, "claude-sonnet-4-5");
    assert!(matches!(j.step(&s, &policy, t), Step::Send { attempt: 1 }));
    let u = j.withdraw("the journal could not record the attempt: nothing sent");
    s.apply(u.expect("the reservation ends"), t);
    let Step::End(e) = j.step(&s, &policy, t) else {
        panic!("withdrawn")
    };
    assert_eq!(e.decision.action, Action::Inspect);
    assert_eq!(s.ledger().released.requests, 1);
    assert!(j.withdraw("again").is_none(), "stray");
    assert_eq!(j.strays(), 1);
    // A success whose body is being delivered: charged at its estimate.
    let mut j = job(&s, "claude-sonnet-4-5");
    assert!(matches!(j.step(&s, &policy, t), Step::Send { .. }));
    j.sending();
    let c = classify(Provider::Anthropic, 200, &[], "", t);
    assert_eq!(
        j.answer(&s, &policy, &c, None, &mut rng(), t).action,
        Action::Done
    );
    s.apply(j.withdraw("a step it cannot take").expect("charged"), t);
    assert_eq!(
        s.ledger().charged.output,
        100,
        "max_tokens: it may have run"
    );
    assert_clean(&s);
}

/// The 429's evidence and its reservation's release travel in one update
/// (so a store applies them in one step, the evidence first), and once the
/// capacity is back the pause is already in force: another job arriving
/// at that instant waits for it instead of taking the capacity.
#[test]
fn a_429_gives_its_reservation_back_in_the_update_that_pauses_the_scope_then_retries_after_its_delay(
) {
    let s = store(roomy());
    let policy = Policy::default();
    let mut j = job(&s, "claude-sonnet-4-5");
    let t = now_at(0);
    assert!(matches!(j.step(&s, &policy, t), Step::Send { attempt: 1 }));
    j.sending();
    let c = classify(
        Provider::Anthropic,
        429,
        &[("retry-after", "3")],
        RATE_LIMITED,
        t,
    );
    let update = j.answered(&policy, &c, None, &mut rng(), t);
    assert!(
        update.observed.is_some(),
        "the 429's evidence is in the update"
    );
    assert!(
        matches!(update.end, Some(End::Release { .. })),
        "the same update gives the reservation back: {:?}",
        update.end
    );
    let d = j.applied(s.apply(update, t), t);
    let Action::Retry { delay } = d.action else {
        panic!("{d:?}")
    };
    assert!(delay >= Duration::from_secs(3));
    assert!(j.estimate().is_none());
    assert_eq!(s.ledger().released.requests, 1, "given back");
    // The capacity is back, and the pause with it: a newcomer waits.
    let mut other = job(&s, "claude-sonnet-4-5");
    match other.step(&s, &policy, t) {
        Step::Wait {
            reason: WaitFor::Admission(WaitReason::Paused),
            ..
        } => {}
        step => panic!("the newcomer took the given-back capacity: {step:?}"),
    }
    // The scope is paused for every job; this one waits out its delay.
    match j.step(&s, &policy, now_at(1_000)) {
        Step::Wait {
            until,
            reason: WaitFor::Retry,
        } => assert_eq!(until, t.instant + delay),
        other => panic!("{other:?}"),
    }
    let later = now_at(delay.as_millis() as u64 + 1_000);
    assert!(matches!(
        j.step(&s, &policy, later),
        Step::Send { attempt: 2 }
    ));
    j.sending();
    let ok = classify(Provider::Anthropic, 200, &[], OK, later);
    let u = Usage {
        input_tokens: 40,
        output_tokens: 7,
        ..Usage::default()
    };
    assert_eq!(
        j.answer(&s, &policy, &ok, Some(&u), &mut rng(), later)
            .action,
        Action::Done
    );
    assert_clean(&s);
    let l = s.ledger();
    assert_eq!((l.released.requests, l.settled.requests), (1, 1), "{l:?}");
}

#[test]
fn an_openai_429_keeps_its_request_unit_and_gives_its_tokens_back() {
    let s = store(roomy());
    let policy = Policy::default();
    let mut j = job(&s, "gpt-4o");
    let t = now_at(0);
    assert!(matches!(j.step(&s, &policy, t), Step::Send { .. }));
    j.sending();
    let body = r#"{"error":{"message":"Rate limit reached for gpt-4o on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 120ms.","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
    let c = classify(Provider::Openai, 429, &[], body, t);
    assert_eq!(c.cause, Cause::RateLimited);
    let _ = j.answer(&s, &policy, &c, None, &mut rng(), t);
    let l = s.ledger();
    assert!(l.is_clean(), "{l:?}");
    assert_eq!(
        (l.settled.requests, l.charged.requests),
        (1, 1),
        "the request counts: {l:?}"
    );
    assert_eq!(
        (l.charged.input, l.charged.output),
        (0, 0),
        "tokens given back: {l:?}"
    );
}

#[test]
fn a_send_with_no_answer_is_charged_at_once_and_the_job_held() {
    let s = store(roomy());
    let policy = Policy::default();
    let mut j = job(&s, "claude-sonnet-4-5");
    let t = now_at(0);
    assert!(matches!(j.step(&s, &policy, t), Step::Send { .. }));
    j.sending();
    let c = classify_transport(Provider::Anthropic, TransportFailure::ResetAfterSend);
    let d = j.fail(&s, &policy, &c, true, &mut rng(), t);
    assert_eq!(d.action, Action::HoldUnknown);
    let Step::End(e) = j.step(&s, &policy, t) else {
        panic!()
    };
    assert_eq!(e.decision.action, Action::HoldUnknown, "the job is held");
    // Its reservation is not: charged at its estimate, final.
    let l = s.ledger();
    assert_eq!((l.settled.requests, l.held.requests), (1, 0), "{l:?}");
    assert_eq!(
        l.charged.output, 100,
        "max_tokens: the provider may have billed it"
    );
    assert_clean(&s);
}

/// The retry budget's verdict comes out of `decide`: the store only says
/// the budget is spent, and the machine decides the retry again against
/// that state — `give_up` `retry_budget`, the reservation ended all the
/// same.
#[test]
fn a_retry_against_a_spent_retry_budget_gives_up() {
    let s = Shared::new(Controller::new({
        let mut config = Config::default();
        config.limits = roomy();
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        config.retry_budget = {
            let mut budget = ratewise_core::admit::RetryBudgetConfig::default();
            budget.min_retries = 0;
            budget.ratio_permille = 0;
            budget
        };
        config.seed = Some(1);
        config
    }));
    let policy = Policy::default();
    let mut j = job(&s, "claude-sonnet-4-5");
    let t = now_at(0);
    assert!(matches!(j.step(&s, &policy, t), Step::Send { .. }));
    let c = classify_transport(Provider::Anthropic, TransportFailure::ConnectRefused);
    let d = j.fail(&s, &policy, &c, false, &mut rng(), t);
    assert_eq!(
        d.action,
        Action::GiveUp {
            reason: GiveUpReason::RetryBudget
        },
        "{d:?}"
    );
    let said = |what: &str| d.notes.iter().any(|n| n.to_string().contains(what));
    assert!(said("retry budget is spent"), "decide's note: {d:?}");
    assert!(said("0 retries for 1 first attempts"), "the store's: {d:?}");
    assert!(matches!(j.step(&s, &policy, t), Step::End(_)), "it ended");
    assert_clean(&s);

    // `decide` itself, against a spent budget: no retry, and no random
    // value drawn for a delay it will not wait.
    let job = ratewise_core::decide::JobState::new(1, Instant::ZERO, None)
        .with_retry_budget(ratewise_core::RetryBudgetState::Spent);
    let mut no_draws = || -> u64 { panic!("a spent budget draws no delay") };
    let d = ratewise_core::decide::decide(&policy, &job, &c, t, &mut no_draws);
    assert_eq!(
        d.action,
        Action::GiveUp {
            reason: GiveUpReason::RetryBudget
        }
    );
}

/// Load shedding is the machine's: only a job with no deadline is turned
/// away, past the bound, deferred for as long as the queue ahead takes to
/// drain at the scope's request rate.
#[test]
fn only_a_job_with_no_deadline_is_shed_and_it_is_deferred_for_the_drain() {
    let s = store(roomy());
    let policy = Policy::default();
    let t = now_at(1_000);
    let waits = job(&s, "claude-sonnet-4-5"); // a 600 s deadline
    assert!(!waits.sheds(50, Some(3)), "its caller waits: never shed");
    let mut spec = JobSpec::new(s.target("k", "claude-sonnet-4-5"), Instant::ZERO);
    spec.max_tokens = Some(100);
    let mut j = Job::new(spec, &policy);
    assert!(!j.sheds(50, None), "no bound, no shedding");
    assert!(!j.sheds(2, Some(3)));
    assert!(j.sheds(3, Some(3)));
    let Step::End(e) = j.shed(3, Some(60), &policy, t) else {
        panic!("a shed job ends")
    };
    assert!(e.at_admission, "nothing sent");
    assert_eq!(
        e.decision.action,
        Action::Defer {
            until: t.after(Duration::from_secs(3)).wall,
            not_before: t.instant + Duration::from_secs(3),
        },
        "three ahead at one a second"
    );
    let mut spec = JobSpec::new(s.target("k", "claude-sonnet-4-5"), Instant::ZERO);
    spec.max_tokens = Some(100);
    let mut j = Job::new(spec, &policy);
    let Step::End(e) = j.shed(2, None, &policy, t) else {
        panic!("a shed job ends")
    };
    assert_eq!(
        e.decision.action,
        Action::Defer {
            until: t.after(policy.backoff.throttle_base * 2).wall,
            not_before: t.instant + policy.backoff.throttle_base * 2,
        },
        "no known rate: a throttle backoff each"
    );
    assert_clean(&s);
}

/// A target the store does not know (it came from another store) is its
/// own error: the job ends `inspect` at admission, nothing sent — not a
/// deadline it never had.
#[test]
fn a_scope_the_store_does_not_know_ends_the_job_for_inspection() {
    let other = store(roomy());
    let _ = other.target("a", "m");
    let _ = other.target("b", "m");
    let s = store(roomy());
    let policy = Policy::default();
    let mut j = job(&other, "claude-sonnet-4-5"); // the third scope of `other`
    let t = now_at(0);
    let Step::End(e) = j.step(&s, &policy, t) else {
        panic!("ends at admission")
    };
    assert!(e.at_admission);
    assert_eq!(e.decision.action, Action::Inspect);
    assert!(
        e.decision
            .notes
            .iter()
            .any(|n| n.to_string().contains("does not know this job's scope")),
        "{:?}",
        e.decision.notes
    );
    assert_eq!(
        s.ledger().settled.requests + s.ledger().released.requests,
        0
    );
}

#[test]
fn a_refused_connection_releases_and_retries() {
    let s = store(roomy());
    let policy = Policy::default();
    let mut j = job(&s, "claude-sonnet-4-5");
    let t = now_at(0);
    assert!(matches!(j.step(&s, &policy, t), Step::Send { .. }));
    let c = classify_transport(Provider::Anthropic, TransportFailure::ConnectRefused);
    let d = j.fail(&s, &policy, &c, false, &mut rng(), t);
    assert!(matches!(d.action, Action::Retry { .. }), "{d:?}");
    assert_eq!(s.ledger().released.requests, 1);
    assert_clean(&s);
}

#[test]
fn a_cancel_releases_before_the_send_and_charges_the_estimate_after() {
    let s = store(roomy());
    let policy = Policy::default();
    let t = now_at(0);
    let mut before = job(&s, "claude-sonnet-4-5");
    assert!(matches!(before.step(&s, &policy, t), Step::Send { .. }));
    before.drop_job(&s, t);
    assert_eq!(s.ledger().released.requests, 1);
    let mut after = job(&s, "claude-sonnet-4-5");
    assert!(matches!(after.step(&s, &policy, t), Step::Send { .. }));
    after.sending();
    after.drop_job(&s, t);
    let l = s.ledger();
    assert_eq!((l.settled.requests, l.charged.output), (1, 100), "{l:?}");
    assert_clean(&s);
    assert!(matches!(after.step(&s, &policy, t), Step::End(_)));
}

#[test]
fn admission_endings_come_from_the_machine() {
    let policy = Policy::default();
    let t = now_at(0);
    // A wait past the inline limit defers, with nothing reserved.
    let s = store(Limits {
        requests: Some(1),
        ..Limits::NONE
    });
    let mut a = job(&s, "m");
    assert!(matches!(a.step(&s, &policy, t), Step::Send { .. }));
    a.sending();
    a.end_body(&s, None, t);
    // With no deadline, a wait past the inline limit defers.
    let mut b = job(&s, "m");
    let mut spec = *b.spec();
    spec.deadline = None;
    b = Job::new(spec, &policy);
    match b.step(&s, &policy, t) {
        Step::End(e) => {
            assert!(e.at_admission);
            assert!(matches!(e.decision.action, Action::Defer { .. }), "{e:?}");
        }
        other => panic!("{other:?}"),
    }
    // A job whose caller waits 600 s waits for its turn, past the inline
    // limit (the next request unit comes in a minute).
    let mut waits = job(&s, "m");
    match waits.step(&s, &policy, t) {
        Step::Wait { until, .. } => assert!(until > t.instant + policy.max_inline_wait),
        other => panic!("{other:?}"),
    }
    // One whose deadline comes first ends at once, nothing sent, saying
    // when it could have gone.
    spec.deadline = Some(Duration::from_secs(10));
    let mut late = Job::new(spec, &policy);
    match late.step(&s, &policy, t) {
        Step::End(e) => {
            assert!(e.at_admission);
            assert_eq!(e.attempts, 0);
            assert!(
                matches!(
                    e.decision.action,
                    Action::GiveUp {
                        reason: GiveUpReason::Deadline
                    }
                ),
                "{e:?}"
            );
            assert!(
                e.decision.notes.iter().any(
                    |n| matches!(n, Note::TooLate { wait, .. } if *wait > Duration::from_secs(10))
                ),
                "{e:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // A stopped key ends the job at admission.
    let s = store(roomy());
    let mut c = job(&s, "m");
    s.lock()
        .stop(c.spec().target.scope, Cause::SpendCap, None, t);
    match c.step(&s, &policy, t) {
        Step::End(e) => assert!(matches!(e.decision.action, Action::StopQueue { .. })),
        other => panic!("{other:?}"),
    }
    assert_clean(&s);
}

#[test]
fn random_drivers_end_every_reservation_once() {
    // Many jobs on one store, driven through random answers, failures and
    // cancellations at random points: whatever happens, no end comes
    // twice and, once every job has ended, nothing is outstanding.
    for seed in 0..200u64 {
        let mut r = fastrand::Rng::with_seed(seed);
        let s = store(roomy());
        let policy = Policy::default();
        let mut jobs: Vec<Job> = (0..8).map(|_| job(&s, "claude-sonnet-4-5")).collect();
        let mut t = 0u64;
        for _ in 0..400 {
            t += r.u64(0..2_000);
            let now = now_at(t);
            let i = r.usize(0..jobs.len());
            let j = &mut jobs[i];
            match j.step(&s, &policy, now) {
                Step::Send { .. } => {
                    if r.bool() {
                        j.sending();
                    }
                    match r.u8(0..7) {
                        0 => j.drop_job(&s, now),
                        1 => {
                            let c = classify(Provider::Anthropic, 200, &[], "", now);
                            j.answer(&s, &policy, &c, None, &mut rng(), now);
                            if r.bool() {
                                let u = Usage {
                                    input_tokens: 3,
                                    output_tokens: 4,
                                    ..Usage::default()
                                };
                                j.end_body(&s, Some(&u), now);
                            } else if let Some(u) = j.body_end(BodyEnd::Cut {
                                delivered: Some(Usage::default()),
                            }) {
                                s.apply(u, now);
                            }
                        }
                        2 => {
                            let c = classify(
                                Provider::Anthropic,
                                429,
                                &[("retry-after", "1")],
                                RATE_LIMITED,
                                now,
                            );
                            j.answer(&s, &policy, &c, None, &mut rng(), now);
                        }
                        3 => {
                            let c = classify(
                                Provider::Anthropic,
                                529,
                                &[],
                                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                                now,
                            );
                            j.answer(&s, &policy, &c, None, &mut rng(), now);
                        }
                        4 => {
                            let c = classify_transport(
                                Provider::Anthropic,
                                TransportFailure::ResetAfterSend,
                            );
                            j.fail(&s, &policy, &c, true, &mut rng(), now);
                        }
                        5 => {
                            let c = classify_transport(
                                Provider::Anthropic,
                                TransportFailure::ConnectRefused,
                            );
                            j.fail(&s, &policy, &c, false, &mut rng(), now);
                        }
                        _ => {
                            let c = classify(
                                Provider::Anthropic,
                                400,
                                &[],
                                r#"{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}"#,
                                now,
                            );
                            j.answer(&s, &policy, &c, None, &mut rng(), now);
                        }
                    }
                }
                Step::End(_) => {
                    jobs[i] = job(&s, "claude-sonnet-4-5");
                }
                _ => {
                    if r.u8(0..10) == 0 {
                        j.drop_job(&s, now);
                    }
                }
            }
            let l = s.ledger();
            assert_eq!(l.refused_ends, 0, "seed {seed}: an end came twice: {l:?}");
        }
        let end = now_at(t + 1);
        for mut j in jobs {
            j.drop_job(&s, end);
            assert!(matches!(j.step(&s, &policy, end), Step::End(_)));
        }
        let l = s.ledger();
        assert!(l.is_clean(), "seed {seed}: {l:?}");
    }
}

#[test]
fn a_caller_gone_between_sends_ends_the_job_cancelled_and_releases_what_it_held() {
    let s = store(roomy());
    let policy = Policy::default();
    let t = now_at(0);
    // Admitted, not yet handed over: released, nothing sent.
    let mut j = job(&s, "claude-sonnet-4-5");
    assert!(matches!(j.step(&s, &policy, t), Step::Send { attempt: 1 }));
    let update = j.caller_left().expect("the reservation goes back");
    assert!(
        matches!(update.end, Some(End::Release { .. })),
        "{update:?}"
    );
    s.apply(update, t);
    let Step::End(e) = j.step(&s, &policy, t) else {
        panic!()
    };
    assert_eq!(
        e.decision.action,
        Action::GiveUp {
            reason: GiveUpReason::Cancelled
        }
    );
    // Told twice: nothing more.
    assert!(j.caller_left().is_none());
    assert_eq!(s.ledger().released.requests, 1);
    assert_clean(&s);
    assert_eq!(j.strays(), 0);
}

#[test]
fn a_caller_gone_during_the_send_finishes_it_and_makes_no_retry() {
    let s = store(roomy());
    let policy = Policy::default();
    let mut j = job(&s, "claude-sonnet-4-5");
    let t = now_at(0);
    assert!(matches!(j.step(&s, &policy, t), Step::Send { attempt: 1 }));
    j.sending();
    // The caller leaves while the request is on the wire: nothing changes
    // now; the answer is still applied.
    assert!(j.caller_left().is_none());
    assert!(matches!(j.step(&s, &policy, t), Step::Pending));
    let c = classify(
        Provider::Anthropic,
        429,
        &[("retry-after", "3")],
        RATE_LIMITED,
        t,
    );
    let d = j.answer(&s, &policy, &c, None, &mut rng(), t);
    assert_eq!(
        d.action,
        Action::GiveUp {
            reason: GiveUpReason::Cancelled
        },
        "the retry decided on the 429 is not made: {d:?}"
    );
    // Its evidence was applied: the scope is paused for the others.
    let mut other = job(&s, "claude-sonnet-4-5");
    assert!(matches!(
        other.step(&s, &policy, t),
        Step::Wait {
            reason: WaitFor::Admission(WaitReason::Paused),
            ..
        }
    ));
    let Step::End(e) = j.step(&s, &policy, now_at(10_000)) else {
        panic!("no second attempt")
    };
    assert_eq!(e.attempts, 1);
    assert_clean(&s);
}

#[test]
fn a_stray_event_leaves_the_job_as_it_was_and_is_counted() {
    let s = store(roomy());
    let policy = Policy::default();
    let mut j = job(&s, "claude-sonnet-4-5");
    let t = now_at(0);
    let ok = classify(Provider::Anthropic, 200, &[], OK, t);
    // Before any send: an answer, a failure, an applied update, a body
    // end, a hand-over — none belongs here.
    let u = j.answered(&policy, &ok, None, &mut rng(), t);
    assert!(u.observed.is_none() && u.end.is_none(), "{u:?}");
    let refused = classify_transport(Provider::Anthropic, TransportFailure::ConnectRefused);
    let u = j.failed(&policy, &refused, false, &mut rng(), t);
    assert!(u.observed.is_none() && u.end.is_none(), "{u:?}");
    let _ = j.applied(None, t);
    assert!(j.body_end(BodyEnd::Cut { delivered: None }).is_none());
    j.sending();
    assert_eq!(j.strays(), 5);
    // The job goes on as if nothing was told.
    assert!(matches!(j.step(&s, &policy, t), Step::Send { attempt: 1 }));
    j.sending();
    j.sending();
    assert_eq!(j.strays(), 6, "a second hand-over is stray too");
    let u = Usage {
        input_tokens: 40,
        output_tokens: 7,
        ..Usage::default()
    };
    assert_eq!(
        j.answer(&s, &policy, &ok, Some(&u), &mut rng(), t).action,
        Action::Done
    );
    // After its end: an answer changes nothing.
    let u2 = j.answered(&policy, &ok, None, &mut rng(), t);
    assert!(u2.end.is_none());
    let Step::End(e) = j.step(&s, &policy, t) else {
        panic!()
    };
    assert_eq!(e.decision.action, Action::Done);
    assert_eq!(j.strays(), 7);
    assert_clean(&s);
}

#[test]
fn a_body_end_is_told_to_the_machine_which_settles_and_classifies_an_in_band_failure() {
    let s = store(roomy());
    let policy = Policy::default();
    let mut j = job(&s, "claude-sonnet-4-5");
    let t = now_at(0);
    assert!(matches!(j.step(&s, &policy, t), Step::Send { attempt: 1 }));
    j.sending();
    let ok = classify(Provider::Anthropic, 200, &[], "", t);
    assert_eq!(
        j.answer(&s, &policy, &ok, None, &mut rng(), t).action,
        Action::Done
    );
    assert_eq!(j.estimate().map(|u| u.output_tokens), Some(100));
    // The stream reached its reader, then an overload event came in band.
    let delivered = Usage {
        input_tokens: 40,
        output_tokens: 12,
        ..Usage::default()
    };
    let update = j
        .body_end(BodyEnd::FailedInBand {
            cause: Cause::Overloaded,
            error_type: Some("overloaded_error".into()),
            code: None,
            delivered: Some(delivered),
        })
        .expect("the machine settles and reports");
    let observed = update.observed.as_ref().expect("the in-band evidence");
    assert_eq!(observed.classification.cause, Cause::Overloaded);
    assert_eq!(observed.classification.status, Some(200));
    assert_eq!(observed.decision.action, Action::Inspect, "never replayed");
    assert!(matches!(update.end, Some(End::Settle { usage, .. }) if usage == delivered));
    s.apply(update, t);
    let Step::End(e) = j.step(&s, &policy, t) else {
        panic!()
    };
    assert_eq!(e.decision.action, Action::Inspect);
    assert_eq!(s.ledger().charged.output, 12, "what it delivered");
    // Told twice: the second is stray.
    assert!(j.body_end(BodyEnd::Complete { usage: None }).is_none());
    assert_eq!(j.strays(), 1);
    assert_clean(&s);
}

/// A job with no deadline waits in line at most `max_inline_wait` in
/// total: two admission waits that each fit the limit, but not together,
/// defer at the second — to the instant admission named, nothing sent —
/// and a prediction of its turn past the limit defers it at once.
#[test]
fn the_inline_limit_bounds_a_jobs_waits_together_not_one_by_one() {
    let policy = Policy::default();
    assert_eq!(policy.max_inline_wait, Duration::from_secs(60));
    let s = store(roomy());
    let spec = JobSpec::new(s.target("k", "m"), Instant::ZERO);
    let mut j = Job::new(spec, &policy);
    assert_eq!(j.inline_by(), Some(Instant::from_millis(60_000)));
    let wait = |ms| ratewise_core::admit::Admission::Wait {
        until: Instant::from_millis(ms),
        reason: WaitReason::Queue,
    };

    // 40 s for admission: in line.
    assert!(matches!(j.next(now_at(0)), Step::Admit(_)));
    match j.admission(wait(40_000), &policy, now_at(0)) {
        Step::Wait { until, .. } => assert_eq!(until, Instant::from_millis(40_000)),
        other => panic!("{other:?}"),
    }
    // Asked again at 40 s, told 30 s more: 30 s alone fits the limit, but
    // 70 s in line in all does not.
    assert!(matches!(j.next(now_at(40_000)), Step::Admit(_)));
    match j.admission(wait(70_000), &policy, now_at(40_000)) {
        Step::End(e) => {
            assert!(e.at_admission);
            assert_eq!(e.attempts, 0);
            match e.decision.action {
                Action::Defer { not_before, until } => {
                    assert_eq!(not_before, Instant::from_millis(70_000));
                    assert_eq!(until, now_at(70_000).wall);
                }
                other => panic!("{other:?}"),
            }
            assert!(
                e.decision.notes.iter().any(|n| matches!(
                    n,
                    Note::Deferred { wait, limit }
                        if *wait == Duration::from_secs(70) && *limit == policy.max_inline_wait
                )),
                "{:?}",
                e.decision.notes
            );
        }
        other => panic!("{other:?}"),
    }

    // A retry's delay starts a new wait, counted with the earlier ones:
    // a job that waited 40 s in line, then sent, has 20 s left for it.
    let mut r = Job::new(spec, &policy);
    assert!(matches!(r.next(now_at(0)), Step::Admit(_)));
    assert!(matches!(
        r.admission(wait(40_000), &policy, now_at(0)),
        Step::Wait { .. }
    ));
    let Step::Admit(req) = r.next(now_at(40_000)) else {
        panic!()
    };
    let t = now_at(40_000);
    assert!(matches!(
        r.admission(s.admit(&req, t), &policy, t),
        Step::Send { attempt: 1 }
    ));
    assert_eq!(r.inline_by(), None, "a send is not a wait");
    r.sending();
    let t = now_at(45_000);
    let c = classify_transport(Provider::Anthropic, TransportFailure::ConnectRefused);
    let update = r.failed(&policy, &c, false, &mut rng(), t);
    let d = r.applied(s.apply(update, t), t);
    match d.action {
        // The backoff for a connect failure is well under 20 s: in line.
        Action::Retry { delay } => {
            assert!(delay <= Duration::from_secs(20), "{delay:?}");
            assert_eq!(r.inline_by(), Some(Instant::from_millis(65_000)));
        }
        other => panic!("{other:?}"),
    }

    // A job with a deadline is bounded by its deadline instead.
    let mut spec = spec;
    spec.deadline = Some(Duration::from_secs(600));
    let mut d = Job::new(spec, &policy);
    assert_eq!(d.inline_by(), None);
    assert!(matches!(d.next(now_at(0)), Step::Admit(_)));
    assert!(matches!(
        d.admission(wait(120_000), &policy, now_at(0)),
        Step::Wait { .. }
    ));
    assert_clean(&s);
}
