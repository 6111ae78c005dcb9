//! The pool's routing, driven with stated outlooks (what the store would
//! say about each member) and the real job machine.

use super::*;
use crate::admit::{Config, Controller};
use crate::classify::{classify_response, classify_transport, ResponseView, TransportFailure};
use crate::job::JobSpec;
use crate::vocab::Provider;
use std::time::SystemTime;

fn now_at(ms: u64) -> Now {
    let t = Instant::from_millis(ms);
    Now::new(t, SystemTime::UNIX_EPOCH + t.since_origin())
}

struct Fixture {
    ctl: Controller,
    pool: Pool,
    ids: Vec<MemberId>,
    policy: Policy,
}

fn fixture(members: Vec<Member>) -> Fixture {
    let config = Config {
        seed: Some(1),
        ..Config::default()
    };
    let mut pool = Pool::new(PoolConfig::default());
    let ids = members.into_iter().map(|m| pool.add(m)).collect();
    Fixture {
        ctl: Controller::new(config),
        pool,
        ids,
        policy: Policy::default(),
    }
}

impl Fixture {
    fn job(&mut self) -> (Route, Job) {
        let ctl = &mut self.ctl;
        let route = self
            .pool
            .route("model", |m, model| ctl.target(&m.key, model))
            .unwrap();
        let spec = JobSpec::new(route.target(route.member()).unwrap(), Instant::ZERO);
        (route, Job::new(spec, &self.policy))
    }
}

fn anthropic(key: &str) -> Member {
    Member::new("anthropic", Provider::Anthropic, key)
}

fn openai(key: &str) -> Member {
    Member::new("openai", Provider::Openai, key)
}

fn at(ms: u64) -> Outlook {
    Outlook::At(Instant::from_millis(ms))
}

fn human_stop() -> Outlook {
    Outlook::Stopped(Stop {
        cause: Cause::SpendCap,
        until: None,
        until_instant: None,
    })
}

fn classify(provider: Provider, status: u16, body: &str) -> Classification {
    let headers = http::HeaderMap::new();
    let view = ResponseView {
        status: http::StatusCode::from_u16(status).unwrap(),
        headers: &headers,
        body: body.as_bytes(),
    };
    classify_response(provider, &view, SystemTime::UNIX_EPOCH)
}

const OVERLOADED: &str =
    r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;

#[test]
fn an_empty_pool_routes_nothing() {
    let pool = Pool::new(PoolConfig::default());
    assert!(pool.route("m", |_, _| unreachable!()).is_none());
}

#[test]
fn each_member_is_resolved_under_its_own_model_name() {
    let mut f = fixture(vec![
        anthropic("a"),
        Member::new("bedrock", Provider::Bedrock, "b").model("model", "bedrock-model"),
    ]);
    let mut asked = Vec::new();
    let ctl = &mut f.ctl;
    let route = f
        .pool
        .route("model", |m, model| {
            asked.push((m.key.clone(), model.to_owned()));
            ctl.target(&m.key, model)
        })
        .unwrap();
    assert_eq!(
        asked,
        vec![
            ("a".to_owned(), "model".to_owned()),
            ("b".to_owned(), "bedrock-model".to_owned())
        ]
    );
    assert_ne!(route.target(f.ids[0]), route.target(f.ids[1]));
    assert_eq!(route.target(MemberId(9)), None);
}

#[test]
fn a_job_goes_to_the_member_that_can_admit_it_soonest() {
    let mut f = fixture(vec![anthropic("a"), openai("b"), anthropic("c")]);
    let (mut route, mut job) = f.job();
    let outlooks = [at(5_000), at(1_000), at(3_000)];
    let step = f
        .pool
        .next(&mut route, &mut job, &f.policy, now_at(0), |m, _| {
            outlooks[m.index()]
        });
    // Not round robin, not the first: the soonest, and the job asks then.
    assert_eq!(route.member(), f.ids[1]);
    assert_eq!(job.spec().target, route.target(f.ids[1]).unwrap());
    match step {
        Step::Wait { until, .. } => assert_eq!(until, Instant::from_millis(1_000)),
        other => panic!("{other:?}"),
    }
    // Asked again at 1 s, it asks admission of that member.
    let step = f
        .pool
        .next(&mut route, &mut job, &f.policy, now_at(1_000), |m, _| {
            [at(5_000), at(1_000), at(3_000)][m.index()]
        });
    match step {
        Step::Admit(req) => assert_eq!(req.target, route.target(f.ids[1]).unwrap()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_stopped_member_is_never_chosen_and_the_stop_sticks_for_the_job() {
    let mut f = fixture(vec![anthropic("a"), openai("b")]);
    let (mut route, mut job) = f.job();
    let step = f
        .pool
        .next(&mut route, &mut job, &f.policy, now_at(0), |m, _| {
            if m.index() == 0 {
                human_stop()
            } else {
                at(2_000)
            }
        });
    assert!(matches!(step, Step::Wait { .. }));
    assert_eq!(route.member(), f.ids[1]);
    // Later the first one looks free (a prediction that does not see a
    // class's stop): the job keeps away from what it met stopped.
    let step = f
        .pool
        .next(&mut route, &mut job, &f.policy, now_at(2_000), |_, _| at(0));
    assert!(matches!(step, Step::Admit(_)));
    assert_eq!(route.member(), f.ids[1]);
}

#[test]
fn a_stop_met_at_admission_sends_the_job_to_another_member_then_ends_it_when_all_are() {
    let mut f = fixture(vec![anthropic("a"), openai("b")]);
    let (mut route, mut job) = f.job();
    let now = now_at(0);
    let mut ends = 0;
    let mut asked = Vec::new();
    // Every member looks free to the prediction, and every admission says
    // stopped (model classes stopped, which predictions do not see).
    for _ in 0..10 {
        let step = f
            .pool
            .next(&mut route, &mut job, &f.policy, now, |_, _| at(0));
        let step = match step {
            Step::Admit(req) => {
                asked.push(req.target);
                let stopped = Admission::Stopped {
                    cause: Cause::Permission,
                    until: None,
                };
                f.pool
                    .admission(&mut route, &mut job, stopped, &f.policy, now)
            }
            other => other,
        };
        match step {
            Step::Wait { until, .. } => assert_eq!(until, now.instant),
            Step::End(end) => {
                assert_eq!(end.decision.action.kind(), crate::ActionKind::StopQueue);
                assert_eq!(end.attempts, 0);
                ends += 1;
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(ends, 1, "it ends, and does not loop");
    assert_eq!(
        asked,
        vec![
            route.target(f.ids[0]).unwrap(),
            route.target(f.ids[1]).unwrap()
        ]
    );
    let stopped = f.pool.stopped(&route).expect("every member met stopped");
    assert_eq!(stopped.members.len(), 2);
    assert!(stopped.members.iter().all(|m| m.cause == Cause::Permission));
}

#[test]
fn a_member_resumed_by_a_human_is_found_again_once_every_member_was_met_stopped() {
    let mut f = fixture(vec![anthropic("a"), openai("b")]);
    let (mut route, mut job) = f.job();
    let now = now_at(0);
    // Both stopped: the job stays on its member, and its admission says so.
    let step = f
        .pool
        .next(&mut route, &mut job, &f.policy, now, |_, _| human_stop());
    let Step::Admit(_) = step else {
        panic!("{step:?}")
    };
    let stopped = Admission::Stopped {
        cause: Cause::SpendCap,
        until: None,
    };
    let step = f
        .pool
        .admission(&mut route, &mut job, stopped, &f.policy, now);
    assert!(matches!(step, Step::End(_)));
    assert!(f.pool.stopped(&route).is_some());
    // A human resumes the second; the caller brings the job back.
    assert!(job.requeue(None));
    let resumed = |m: MemberId, _: &AdmitRequest| {
        if m.index() == 1 {
            at(0)
        } else {
            human_stop()
        }
    };
    let _ = f.pool.next(&mut route, &mut job, &f.policy, now, resumed);
    // The first look re-reads the store; the stop of the first member
    // ends the admission, and the job falls back to the resumed one.
    let step = f.pool.admission(
        &mut route,
        &mut job,
        Admission::Stopped {
            cause: Cause::SpendCap,
            until: None,
        },
        &f.policy,
        now,
    );
    assert!(matches!(step, Step::Wait { .. }), "{step:?}");
    let step = f.pool.next(&mut route, &mut job, &f.policy, now, resumed);
    assert!(matches!(step, Step::Admit(_)), "{step:?}");
    assert_eq!(route.member(), f.ids[1]);
}

/// Sends the job once on its current member and answers `c` (decided and
/// applied on the fixture's controller); returns the move.
fn send_and_answer(
    f: &mut Fixture,
    route: &mut Route,
    job: &mut Job,
    c: &Classification,
    now: Now,
) -> Move {
    let ctl = &mut f.ctl;
    let step = f
        .pool
        .next(route, job, &f.policy, now, |_, r| Outlook::of(ctl, r, now));
    let Step::Admit(req) = step else {
        panic!("{step:?}")
    };
    let answer = f.ctl.admit(&req, now);
    let step = f.pool.admission(route, job, answer, &f.policy, now);
    let Step::Send { .. } = step else {
        panic!("{step:?}")
    };
    job.sending();
    let mut rng = fastrand::Rng::with_seed(3);
    let update = if c.transport.is_some() {
        job.failed(&f.policy, c, true, &mut rng, now)
    } else {
        job.answered(&f.policy, c, None, &mut rng, now)
    };
    let d = job.applied(f.ctl.apply(&update, now), now);
    f.pool.answered(route, job, c, &d, &f.policy, now)
}

#[test]
fn an_overload_holds_its_upstream_and_the_retry_goes_to_another_at_once() {
    let mut f = fixture(vec![anthropic("a"), anthropic("a2"), openai("b")]);
    let (mut route, mut job) = f.job();
    let now = now_at(0);
    let c = classify(Provider::Anthropic, 529, OVERLOADED);
    assert_eq!(
        send_and_answer(&mut f, &mut route, &mut job, &c, now),
        Move::OtherUpstream
    );
    assert_eq!(route.attempts(), &[f.ids[0]]);
    assert!(f.pool.overload_held("anthropic", now.instant).is_some());
    let ctl = &mut f.ctl;
    let step = f.pool.next(&mut route, &mut job, &f.policy, now, |_, r| {
        Outlook::of(ctl, r, now)
    });
    // Not the other key of the same upstream: the other upstream, now.
    assert!(matches!(step, Step::Admit(_)), "{step:?}");
    assert_eq!(route.member(), f.ids[2]);
}

#[test]
fn an_overload_with_every_upstream_held_waits_out_the_jobs_own_delay() {
    let mut f = fixture(vec![anthropic("a"), anthropic("a2")]);
    let (mut route, mut job) = f.job();
    let now = now_at(0);
    let c = classify(Provider::Anthropic, 529, OVERLOADED);
    assert_eq!(
        send_and_answer(&mut f, &mut route, &mut job, &c, now),
        Move::Wait
    );
    let held = f.pool.overload_held("anthropic", now.instant).unwrap();
    let ctl = &mut f.ctl;
    let step = f.pool.next(&mut route, &mut job, &f.policy, now, |_, r| {
        Outlook::of(ctl, r, now)
    });
    match step {
        // The job's own backoff (at most the first window), not the
        // pool's hold: with nowhere else to go, it waits as alone.
        Step::Wait { until, .. } => {
            assert!(until > now.instant && until < held, "{until:?} vs {held:?}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_request_that_may_have_run_pins_its_job_to_the_member() {
    let mut f = fixture(vec![anthropic("a"), openai("b")]);
    f.policy.unknown_outcome = crate::decide::UnknownOutcome::Retry;
    let (mut route, mut job) = f.job();
    let now = now_at(0);
    let c = classify_transport(Provider::Anthropic, TransportFailure::TimeoutAfterSend);
    assert_eq!(
        send_and_answer(&mut f, &mut route, &mut job, &c, now),
        Move::Same
    );
    assert!(route.pinned());
    // However free the other member, the retry stays.
    let later = now_at(60_000);
    let step = f
        .pool
        .next(&mut route, &mut job, &f.policy, later, |_, _| at(0));
    assert!(matches!(step, Step::Admit(_)), "{step:?}");
    assert_eq!(route.member(), f.ids[0]);
}

#[test]
fn a_spend_cap_stops_the_member_and_the_job_goes_on_with_the_next_attempt() {
    let mut f = fixture(vec![openai("capped"), anthropic("b")]);
    let (mut route, mut job) = f.job();
    let now = now_at(0);
    let c = classify(
        Provider::Openai,
        429,
        r#"{"error":{"message":"q","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#,
    );
    assert_eq!(
        send_and_answer(&mut f, &mut route, &mut job, &c, now),
        Move::StopMember
    );
    // Brought back at once, the key stopped in the store.
    assert!(job.ended().is_none());
    let ctl = &mut f.ctl;
    let step = f.pool.next(&mut route, &mut job, &f.policy, now, |_, r| {
        Outlook::of(ctl, r, now)
    });
    let Step::Admit(req) = step else {
        panic!("{step:?}")
    };
    assert_eq!(req.target, route.target(f.ids[1]).unwrap());
    assert!(req.is_retry, "the fallback is the job's next attempt");
    assert!(f.pool.stopped(&route).is_none());
}
