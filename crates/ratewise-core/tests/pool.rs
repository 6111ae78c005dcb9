//! A simulated pool of two or three members, driven with an explicit
//! `now` by a small discrete-event driver: each member is a key with its
//! own token buckets in one controller (one store, one queue-wide retry
//! budget), its answers scripted; jobs arrive on a schedule. Seeded and
//! reproducible. What #40's core part must show:
//!
//! * a job meeting 429s on every member attempts no more than its one
//!   retry allowance (its `max_attempts`, its deadline, the queue's retry
//!   budget), never one loop per member;
//! * a spend cap on one member: every later job goes to the other and
//!   nothing to the capped one; with every member capped the pool stops,
//!   with each member's evidence;
//! * one member answering 529 to everything: jobs go to the other, at
//!   most 1.1 attempts per job;
//! * a request that may have run is never re-sent to another member.

use http::{HeaderMap, StatusCode};
use ratewise_core::admit::{Config, Controller, Limits};
use ratewise_core::classify::{
    classify_response, classify_transport, Classification, ResponseView, TransportFailure,
};
use ratewise_core::decide::{Policy, UnknownOutcome};
use ratewise_core::job::{Job, JobSpec, Step};
use ratewise_core::pool::{Member, MemberId, Move, Outlook, Pool, PoolConfig, Route};
use ratewise_core::{
    Action, ActionKind, Cause, Decision, GiveUpReason, Instant, Now, Provider, Usage,
};
use std::time::{Duration, SystemTime};

/// What a member answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Script {
    /// 200, with usage.
    Ok,
    /// 429 with `retry-after` (seconds).
    RateLimited { retry_after: u64 },
    /// A spend cap (OpenAI `insufficient_quota`; Anthropic
    /// `enforced_spend_limit_reached`).
    SpendCap,
    /// 529 `overloaded_error` until this instant (ms), then 200.
    OverloadedUntil(u64),
    /// The connection resets after the request was written.
    ResetAfterSend,
}

fn now_at(t: Instant) -> Now {
    Now::new(t, SystemTime::UNIX_EPOCH + t.since_origin())
}

fn answer(provider: Provider, script: Script, t: Instant) -> Classification {
    let wall = now_at(t).wall;
    let mut headers = HeaderMap::new();
    let (status, body): (u16, String) = match (script, provider) {
        (Script::Ok, _) => (200, String::new()),
        (Script::OverloadedUntil(until), _) if t >= Instant::from_millis(until) => {
            (200, String::new())
        }
        (Script::RateLimited { retry_after }, Provider::Openai) => {
            headers.insert("retry-after", retry_after.to_string().parse().unwrap());
            (
                429,
                r#"{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#.into(),
            )
        }
        (Script::RateLimited { retry_after }, _) => {
            headers.insert("retry-after", retry_after.to_string().parse().unwrap());
            (
                429,
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your per-minute rate limit"},"request_id":"req_rl"}"#.into(),
            )
        }
        (Script::SpendCap, Provider::Openai) => (
            429,
            r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#.into(),
        ),
        (Script::SpendCap, _) => (
            429,
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"usage limits","details":{"error_code":"enforced_spend_limit_reached"}},"request_id":"req_cap"}"#.into(),
        ),
        (Script::OverloadedUntil(_), _) => (
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_529"}"#.into(),
        ),
        (Script::ResetAfterSend, _) => {
            return classify_transport(provider, TransportFailure::ResetAfterSend)
        }
    };
    let view = ResponseView {
        status: StatusCode::from_u16(status).unwrap(),
        headers: &headers,
        body: body.as_bytes(),
    };
    classify_response(provider, &view, wall)
}

/// One send, as the driver saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Send {
    job: usize,
    member: MemberId,
    at: Instant,
}

/// How one job ended.
#[derive(Debug, Clone)]
struct Outcome {
    arrived: Instant,
    ended: Instant,
    decision: Decision,
    attempts: u32,
    members: Vec<MemberId>,
    route: Route,
}

struct Active {
    id: usize,
    job: Job,
    route: Route,
    wake: Instant,
    in_flight: bool,
    /// A retry that stays with its member (or upstream): not before this.
    not_before: Option<Instant>,
}

/// The simulated pool: one controller (every member's key in it), the
/// pool, the scripts, a fixed latency.
struct Sim {
    ctl: Controller,
    pool: Pool,
    policy: Policy,
    scripts: Vec<Script>,
    /// The members' numbers, in the order they were given.
    ids: Vec<MemberId>,
    latency: Duration,
    rng: fastrand::Rng,
    sends: Vec<Send>,
    moves: Vec<(MemberId, Move)>,
    /// When each member's first stopping answer came back.
    stopped_at: Vec<Option<Instant>>,
    strays: u32,
    /// Retries that stayed with their member (or upstream) and were sent
    /// before their decided delay: must stay 0.
    early: u32,
}

impl Sim {
    fn new(seed: u64, members: Vec<(Member, Script)>, pool: PoolConfig) -> Sim {
        Sim::with(seed, members, pool, |_| {})
    }

    /// The same, the controller's configuration changed by `f` first.
    fn with(
        seed: u64,
        members: Vec<(Member, Script)>,
        pool: PoolConfig,
        f: impl FnOnce(&mut Config),
    ) -> Sim {
        let mut config = Config::default();
        config.seed = Some(seed);
        // Every member's key: 600 requests and 400,000 tokens a minute.
        config.limits = Limits {
            requests: Some(600),
            tokens: Some(400_000),
            ..Limits::NONE
        };
        f(&mut config);
        let mut p = Pool::new(pool);
        let mut scripts = Vec::new();
        let mut ids = Vec::new();
        for (m, s) in members {
            ids.push(p.add(m));
            scripts.push(s);
        }
        Sim {
            ctl: Controller::new(config),
            stopped_at: vec![None; scripts.len()],
            pool: p,
            policy: Policy::default(),
            scripts,
            ids,
            latency: Duration::from_millis(300),
            rng: fastrand::Rng::with_seed(seed),
            sends: Vec::new(),
            moves: Vec::new(),
            strays: 0,
            early: 0,
        }
    }

    /// Runs jobs arriving at `arrivals` (ms, with a deadline each) to
    /// their ends.
    fn run(&mut self, arrivals: &[(u64, Option<Duration>)]) -> Vec<Outcome> {
        let mut outcomes: Vec<Option<Outcome>> = vec![None; arrivals.len()];
        let mut active: Vec<Active> = Vec::new();
        let mut next_arrival = 0;
        loop {
            let arrival = arrivals
                .get(next_arrival)
                .map(|(ms, _)| Instant::from_millis(*ms));
            let soonest = active
                .iter()
                .enumerate()
                .min_by_key(|(_, a)| (a.wake, a.id))
                .map(|(i, a)| (i, a.wake));
            match (arrival, soonest) {
                (None, None) => break,
                (Some(t), s) if s.is_none_or(|(_, w)| t <= w) => {
                    let (_, deadline) = arrivals[next_arrival];
                    let route = self
                        .pool
                        .route("claude-sonnet-4-5", |m, model| {
                            self.ctl.target(&m.key, model)
                        })
                        .unwrap();
                    let mut spec = JobSpec::new(route.target(route.member()).unwrap(), t);
                    spec.deadline = deadline;
                    spec.max_tokens = Some(256);
                    spec.body_bytes = 400;
                    active.push(Active {
                        id: next_arrival,
                        job: Job::new(spec, &self.policy),
                        route,
                        wake: t,
                        in_flight: false,
                        not_before: None,
                    });
                    next_arrival += 1;
                }
                (_, Some((i, t))) => {
                    if let Some(decision) = self.drive(&mut active[i], t) {
                        let a = active.swap_remove(i);
                        self.strays += a.job.strays();
                        outcomes[a.id] = Some(Outcome {
                            arrived: a.job.spec().arrived,
                            ended: t,
                            attempts: a.job.attempts(),
                            members: a.route.attempts().to_vec(),
                            decision,
                            route: a.route,
                        });
                    }
                }
                (Some(_), None) => unreachable!(),
            }
        }
        outcomes.into_iter().map(Option::unwrap).collect()
    }

    /// One step of one job at `t`: its decision when it ended.
    fn drive(&mut self, a: &mut Active, t: Instant) -> Option<Decision> {
        let now = now_at(t);
        if a.in_flight {
            a.in_flight = false;
            let m = a.route.member();
            let member = self.pool.member(m).clone();
            let c = answer(member.provider, self.scripts[m.index()], t);
            let update = if c.transport.is_some() {
                a.job.failed(&self.policy, &c, true, &mut self.rng, now)
            } else {
                let usage = Usage {
                    input_tokens: 100,
                    output_tokens: 80,
                    ..Usage::default()
                };
                let usage = (c.cause == Cause::Success).then_some(usage);
                a.job
                    .answered(&self.policy, &c, usage.as_ref(), &mut self.rng, now)
            };
            let d = a.job.applied(self.ctl.apply(&update, now), now);
            if matches!(d.action, Action::StopQueue { .. }) && self.stopped_at[m.index()].is_none()
            {
                self.stopped_at[m.index()] = Some(t);
            }
            let mv = self
                .pool
                .answered(&mut a.route, &mut a.job, &c, &d, &self.policy, now);
            self.moves.push((m, mv));
            a.not_before = match (d.action, mv) {
                (Action::Retry { delay }, Move::Same | Move::Wait) => Some(t + delay),
                _ => None,
            };
            a.wake = t;
            return None;
        }
        let ctl = &mut self.ctl;
        let step = self
            .pool
            .next(&mut a.route, &mut a.job, &self.policy, now, |_, req| {
                Outlook::of(ctl, req, now)
            });
        let step = match step {
            Step::Admit(req) => {
                let answer = self.ctl.admit(&req, now);
                self.pool
                    .admission(&mut a.route, &mut a.job, answer, &self.policy, now)
            }
            other => other,
        };
        match step {
            Step::Send { .. } => {
                if a.not_before.take().is_some_and(|nb| t < nb) {
                    self.early += 1;
                }
                a.job.sending();
                self.sends.push(Send {
                    job: a.id,
                    member: a.route.member(),
                    at: t,
                });
                a.in_flight = true;
                a.wake = t + self.latency;
            }
            Step::Wait { until, .. } => a.wake = until.max(t + Duration::from_millis(1)),
            Step::End(end) => return Some(end.decision),
            Step::Pending | Step::Admit(_) => panic!("the driver finishes every step"),
        }
        None
    }
}

fn anthropic(key: &str) -> Member {
    Member::new("api.anthropic.com", Provider::Anthropic, key)
}

fn openai(key: &str) -> Member {
    Member::new("api.openai.com", Provider::Openai, key).model("claude-sonnet-4-5", "gpt-4.1")
}

/// `n` jobs, one every `gap_ms`, each with `deadline`.
fn every(n: usize, gap_ms: u64, deadline: Option<Duration>) -> Vec<(u64, Option<Duration>)> {
    (0..n as u64).map(|i| (i * gap_ms, deadline)).collect()
}

fn sends_to(sim: &Sim, m: MemberId) -> Vec<Send> {
    sim.sends
        .iter()
        .copied()
        .filter(|s| s.member == m)
        .collect()
}

fn retries(outcomes: &[Outcome]) -> u32 {
    outcomes.iter().map(|o| o.attempts.saturating_sub(1)).sum()
}

#[test]
fn a_job_meeting_429s_on_every_member_attempts_once_per_allowed_attempt_not_once_per_member() {
    let rl = Script::RateLimited { retry_after: 2 };
    let mut sim = Sim::new(
        7,
        vec![
            (anthropic("a"), rl),
            (anthropic("b"), rl),
            (openai("c"), rl),
        ],
        PoolConfig::default(),
    );
    let out = sim.run(&every(1, 0, None));
    let o = &out[0];
    // Each 429 pauses that member; the next attempt goes to the member
    // that can admit soonest — a fresh one — and the third 429 spends the
    // job's three attempts: one retry loop for the pool, not one per member.
    assert_eq!(o.attempts, sim.policy.max_attempts);
    assert_eq!(o.members, sim.ids, "one attempt per member, in order");
    assert_eq!(
        o.decision.action,
        Action::GiveUp {
            reason: GiveUpReason::Attempts
        }
    );
    // The queue's one retry budget saw one first attempt and two retries.
    assert_eq!(sim.ctl.retry_counts(now_at(o.ended)), (1, 2));
    assert_eq!(
        sim.moves.iter().map(|(_, m)| *m).collect::<Vec<_>>(),
        vec![Move::Soonest, Move::Soonest, Move::End]
    );
    assert_eq!((sim.strays, sim.early), (0, 0));
    assert!(sim.ctl.ledger().is_clean());
}

#[test]
fn jobs_meeting_429s_everywhere_share_the_queues_one_retry_budget() {
    let rl = Script::RateLimited { retry_after: 1 };
    // One budget window long enough to hold the whole run: 2 retries
    // always, and 20 % of first attempts.
    let mut sim = Sim::with(
        11,
        vec![
            (anthropic("a"), rl),
            (anthropic("b"), rl),
            (openai("c"), rl),
        ],
        PoolConfig::default(),
        |c| {
            c.retry_budget.window = Duration::from_secs(600);
            c.retry_budget.min_retries = 2;
        },
    );
    let n = 20;
    let out = sim.run(&every(n, 50, None));
    let first = sim.sends.first().unwrap().at;
    let last = sim.sends.last().unwrap().at;
    assert!(
        last.saturating_duration_since(first) < Duration::from_secs(540),
        "every send inside one retry-budget window ({:?})",
        last.saturating_duration_since(first)
    );
    for o in &out {
        assert!(o.attempts <= sim.policy.max_attempts, "{o:?}");
        assert!(
            matches!(
                o.decision.action.kind(),
                ActionKind::GiveUp | ActionKind::Defer
            ),
            "{o:?}"
        );
    }
    // 20 first attempts: at most 2 + 20 % × 20 retries, across all members.
    let allowed = 2 + n as u32 / 5;
    assert_eq!(sim.sends.len() as u32, n as u32 + retries(&out));
    assert!(retries(&out) <= allowed, "{} retries", retries(&out));
    assert!(
        out.iter().any(|o| o.decision.action
            == Action::GiveUp {
                reason: GiveUpReason::RetryBudget
            }),
        "the one budget ran out: a budget per member would have allowed three times as many"
    );
    assert_eq!((sim.strays, sim.early), (0, 0));
    assert!(sim.ctl.ledger().is_clean());
}

#[test]
fn a_job_with_a_deadline_waits_out_429s_across_members_within_its_one_deadline() {
    let rl = Script::RateLimited { retry_after: 2 };
    let mut sim = Sim::new(
        3,
        vec![(anthropic("a"), rl), (openai("b"), rl)],
        PoolConfig::default(),
    );
    let deadline = Duration::from_secs(20);
    let out = sim.run(&every(1, 0, Some(deadline)));
    let o = &out[0];
    // Hinted 429s are paced (not counted): only the deadline bounds the
    // job, and it is one deadline, counted from arrival, across members.
    assert_eq!(o.decision.action.kind(), ActionKind::GiveUp);
    assert!(o.ended <= o.arrived + deadline, "{o:?}");
    assert!(sim
        .sends
        .iter()
        .all(|s| s.at + sim.latency <= o.arrived + deadline));
    assert!(o.attempts > sim.policy.max_attempts, "paced, not counted");
    let members: std::collections::BTreeSet<_> = o.members.iter().collect();
    assert_eq!(members.len(), 2, "both members were tried: {:?}", o.members);
    assert!(sim.ctl.ledger().is_clean());
}

#[test]
fn a_spend_cap_on_one_member_sends_every_later_job_to_the_other() {
    let mut sim = Sim::new(
        5,
        vec![
            (openai("capped"), Script::SpendCap),
            (anthropic("b"), Script::Ok),
        ],
        PoolConfig::default(),
    );
    let out = sim.run(&every(50, 100, None));
    let (capped, other) = (sim.ids[0], sim.ids[1]);
    let cap_at = sim.stopped_at[0].expect("the cap was answered");
    // Nothing is sent to the capped member once its cap is known...
    let to_capped = sends_to(&sim, capped);
    assert!(to_capped.iter().all(|s| s.at < cap_at), "{to_capped:?}");
    // ... only what was already on its way then; every job is done by the other.
    assert!(to_capped.len() <= 2, "{to_capped:?}");
    for o in &out {
        assert_eq!(o.decision.action, Action::Done, "{o:?}");
        assert_eq!(o.members.last(), Some(&other));
        assert!(o.attempts <= 2);
    }
    assert!(out
        .iter()
        .filter(|o| o.arrived >= cap_at)
        .all(|o| o.members == [other]));
    // The pool is not stopped: one member is.
    assert!(out.iter().all(|o| sim.pool.stopped(&o.route).is_none()));
    assert!(sim.moves.contains(&(capped, Move::StopMember)));
    assert_eq!((sim.strays, sim.early), (0, 0));
    assert!(sim.ctl.ledger().is_clean());
}

#[test]
fn every_member_capped_stops_the_pool_with_each_members_evidence() {
    let mut sim = Sim::new(
        5,
        vec![
            (openai("a"), Script::SpendCap),
            (anthropic("b"), Script::SpendCap),
        ],
        PoolConfig::default(),
    );
    let out = sim.run(&every(10, 1_000, None));
    let first = &out[0];
    assert_eq!(first.members, sim.ids, "the first job tried both");
    assert_eq!(first.decision.action.kind(), ActionKind::StopQueue);
    let stopped = sim.pool.stopped(&first.route).expect("the pool is stopped");
    assert_eq!(stopped.members.len(), 2);
    let a = &stopped.members[0];
    assert_eq!(
        (a.member, a.cause, a.status),
        (sim.ids[0], Cause::SpendCap, Some(429))
    );
    assert_eq!(a.error_code.as_deref(), Some("insufficient_quota"));
    assert_eq!(a.until, None, "OpenAI's cap waits for a human");
    let b = &stopped.members[1];
    assert_eq!(
        (b.member, b.cause, b.status),
        (sim.ids[1], Cause::SpendCap, Some(429))
    );
    assert_eq!(b.request_id.as_deref(), Some("req_cap"));
    assert!(
        b.until.is_some(),
        "Anthropic's cap lifts on the 1st of next month"
    );
    assert_eq!(stopped.until(), b.until);
    // Every later job is stopped at admission: nothing more is sent.
    assert_eq!(sim.sends.len(), 2);
    for o in &out[1..] {
        assert_eq!(o.attempts, 0, "{o:?}");
        assert_eq!(o.decision.action.kind(), ActionKind::StopQueue);
        // Its evidence is the answers an earlier job met: one owner.
        let evidence = sim.pool.stopped(&o.route).expect("stopped");
        assert_eq!(evidence.members, stopped.members);
    }
    assert_eq!((sim.strays, sim.early), (0, 0));
    assert!(sim.ctl.ledger().is_clean());
}

#[test]
fn one_member_answering_529_to_everything_sends_jobs_to_the_other_at_most_1_1_attempts_each() {
    let mut sim = Sim::new(
        9,
        vec![
            (anthropic("a"), Script::OverloadedUntil(u64::MAX)),
            (openai("b"), Script::Ok),
        ],
        PoolConfig::default(),
    );
    let n = 200;
    let out = sim.run(&every(n, 100, None));
    let attempts: u32 = out.iter().map(|o| o.attempts).sum();
    assert!(out.iter().all(|o| o.decision.action == Action::Done));
    assert!(
        f64::from(attempts) <= 1.1 * n as f64,
        "{attempts} attempts for {n} jobs"
    );
    assert!(out.iter().all(|o| o.members.last() == Some(&sim.ids[1])));
    // Each 529 moved its job to the other upstream at once.
    assert!(sim
        .moves
        .iter()
        .filter(|(m, _)| *m == sim.ids[0])
        .all(|(_, mv)| *mv == Move::OtherUpstream));
    assert_eq!((sim.strays, sim.early), (0, 0));
    assert!(sim.ctl.ledger().is_clean());
}

#[test]
fn an_overload_with_no_other_upstream_waits_as_a_lone_job_would() {
    // Two keys of one upstream: its overload holds both, and the job
    // waits out its own delay instead of hopping between them.
    let busy = Script::OverloadedUntil(3_000);
    let mut sim = Sim::new(
        13,
        vec![(anthropic("a1"), busy), (anthropic("a2"), busy)],
        PoolConfig::default(),
    );
    let out = sim.run(&every(1, 0, Some(Duration::from_secs(60))));
    let o = &out[0];
    assert!(
        sim.moves.iter().any(|(_, m)| *m == Move::Wait),
        "{:?}",
        sim.moves
    );
    assert!(!sim.moves.iter().any(|(_, m)| *m == Move::OtherUpstream));
    // Every retry waited out its own decided delay, whichever key of the
    // upstream it went to.
    assert_eq!((sim.strays, sim.early), (0, 0));
    assert!(sim.sends.len() >= 2, "{:?}", sim.sends);
    assert!(o.attempts <= sim.policy.max_attempts);
}

#[test]
fn a_request_that_may_have_run_is_never_resent_to_another_member() {
    for (policy, expect) in [
        (UnknownOutcome::Hold, ActionKind::HoldUnknown),
        (UnknownOutcome::Retry, ActionKind::GiveUp),
    ] {
        let mut sim = Sim::new(
            17,
            vec![
                (anthropic("a"), Script::ResetAfterSend),
                (openai("b"), Script::Ok),
            ],
            PoolConfig::default(),
        );
        sim.policy.unknown_outcome = policy;
        let out = sim.run(&every(1, 0, None));
        let o = &out[0];
        assert_eq!(o.decision.action.kind(), expect, "{o:?}");
        assert!(o.route.pinned());
        assert!(o.members.iter().all(|m| *m == sim.ids[0]), "{o:?}");
        assert!(sends_to(&sim, sim.ids[1]).is_empty());
        assert!(sim.ctl.ledger().is_clean());
    }
}

#[test]
fn weights_share_the_sends_when_members_can_go_at_once() {
    let mut sim = Sim::new(
        21,
        vec![
            (anthropic("a").weight(3), Script::Ok),
            (openai("b"), Script::Ok),
        ],
        PoolConfig::default(),
    );
    // Far apart: every member's buckets have room for each job.
    let out = sim.run(&every(40, 2_000, None));
    assert!(out.iter().all(|o| o.decision.action == Action::Done));
    let a = sends_to(&sim, sim.ids[0]).len();
    let b = sends_to(&sim, sim.ids[1]).len();
    assert_eq!((a, b), (30, 10));
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let run = |seed| {
        let mut sim = Sim::new(
            seed,
            vec![
                (anthropic("a"), Script::RateLimited { retry_after: 1 }),
                (openai("b"), Script::Ok),
                (anthropic("c"), Script::OverloadedUntil(5_000)),
            ],
            PoolConfig::default(),
        );
        let out = sim.run(&every(60, 40, Some(Duration::from_secs(30))));
        let decisions: Vec<_> = out
            .iter()
            .map(|o| (o.decision.clone(), o.members.clone()))
            .collect();
        (sim.sends, decisions)
    };
    assert_eq!(run(42), run(42));
}
