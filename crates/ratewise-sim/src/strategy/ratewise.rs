//! `ratewise`: the default policy, run on the real core.
//!
//! Each job is the core's job machine ([`ratewise_core::job`]), the one
//! the tower layer drives: it asks the admission store, decides every
//! answer with `Policy` defaults, applies the answer's evidence (header
//! sync, pauses, ramp cuts, stops, the retry budget) and ends its
//! reservation. This driver only does what a driver does: it renders the
//! simulated provider's answer (status, headers, body) through
//! `classify_response` (or `classify_transport` for a reset), hands it to
//! the machine, and schedules what the machine asks for. Sends go out only
//! when the machine says `Send`.
//!
//! The store is configured as a user configures it: with the scenario's
//! limits when `limits.configured` is set (a user who entered their tier's
//! limits), else with none ([`Limits::NONE`]: it learns them from the
//! provider's rate-limit headers, as a user who configured nothing); a
//! warm start when the scenario's key is warm; everything else is
//! `Config::default()`.
//!
//! Jobs wait for admission in each process's queue, ordered by the core's
//! queue discipline as the tower layer's queue orders them
//! ([`super::queue`]): only the head asks; a job admitted charges its flow
//! its reservation's dominant share of the limits the store knows (read
//! again every [`LIMITS_EVERY`] admissions), corrected when that
//! reservation settles. With one level and one flow (every scenario
//! without `groups`) that is oldest first (earliest deadline first, since
//! every job has the same deadline budget). Each process orders only its
//! own queue: priorities do not cross processes (as in the tower layer,
//! whose queue is per process).

use super::queue::{FairQueue, QueueOrder};
use super::rng_for;
use crate::engine::{Client, Sim, Terminal};
use crate::provider::{Answered, Delivery, SimProvider};
use crate::scenario::{Scenario, REPLICA_SHARE_PERMILLE};
use http::StatusCode;
use ratewise_core::admit::fair::{Charged, Cost};
use ratewise_core::admit::store_kit::StoreHooks;
use ratewise_core::admit::{Amounts, End, ReservationId, Update};
use ratewise_core::admit::{Config, Controller, Limits, RampConfig, Shared, Target};
use ratewise_core::classify::{
    classify_response, classify_transport, ResponseView, TransportFailure,
};
use ratewise_core::decide::Policy;
use ratewise_core::job::{Job, JobSpec, Step};
use ratewise_core::parse::body::parse_usage;
use ratewise_core::Usage;
use ratewise_core::{Action, Instant, Now, Provider};
use std::time::{Duration, SystemTime};

/// Admissions between two reads of the store's limits for the cost the
/// discipline charges (the tower layer's `LIMITS_EVERY`).
pub const LIMITS_EVERY: u32 = 32;

/// A stop that lifts later than this is treated as "until a human
/// resumes": the jobs are kept (stopped) and the run ends for them.
pub const LONG_STOP: Duration = Duration::from_secs(3600);

/// The strategy's state.
#[derive(Debug)]
pub struct Ratewise {
    provider: Provider,
    /// One per process on the key ([`Scenario::replicas`]); job `i` is
    /// handled by replica `i % n`.
    replicas: Vec<Replica>,
    policy: Policy,
    rng: fastrand::Rng,
    deadline: Option<Duration>,
    /// Each job's machine, made when it first asks.
    jobs: Vec<Option<Job>>,
    /// Each job's admission, followed to its settlement: the reservation,
    /// where the discipline charged it, and the limits it was costed at.
    charged: Vec<Option<(ReservationId, Charged, Limits)>>,
    /// Each job group's process, if it names one.
    process: Vec<Option<u32>>,
    /// Each job's group.
    group: Vec<u16>,
}

/// One process: its own store (no peers seen) and its own queue.
#[derive(Debug)]
struct Replica {
    store: Shared,
    target: Target,
    queue: FairQueue,
    stopped: bool,
    /// The limits the store knew when last read, and admissions since.
    limits: Option<Limits>,
    since_limits: u32,
}

/// The controller configuration the `ratewise` strategy uses for a
/// scenario: the scenario's limits when `limits.configured` is set (what a
/// user configures for their tier), else [`Limits::NONE`] (learned from the
/// provider's headers), and, on a warm scenario,
/// [`RampConfig::warm_start`] (the user knows the key is busy: the run
/// continues steady traffic, so there is nothing to ramp from); everything
/// else, the burst included, is `Config::default()`.
///
/// ```
/// use ratewise_core::admit::Limits;
/// use ratewise_sim::strategy::ratewise::controller_config;
/// let mut s = ratewise_sim::Scenario::default_scenario();
/// s.limits.configured = false;
/// assert_eq!(controller_config(&s).limits, Limits::NONE);
/// s.limits.configured = true;
/// assert_eq!(controller_config(&s).limits.requests, s.limits.requests_per_min);
/// ```
pub fn controller_config(scenario: &Scenario) -> Config {
    let limits = if scenario.limits.configured {
        scenario.limits.to_core()
    } else {
        Limits::NONE
    };
    let mut ramp = RampConfig::default();
    ramp.warm_start = scenario.warm;
    let mut config = Config::default();
    config.limits = limits;
    config.seed = Some(scenario.seed);
    config.ramp = ramp;
    config.learn_margins = scenario.learn_margins;
    config
}

/// `Policy::default()` with the expected attempt time a user sets for
/// their model: a typical answer of the scenario (`base_ms` plus the mean
/// output at `per_output_token_ms`). The store counts the longer of it
/// and the answer time it learns, so a job is not admitted when its
/// answer would come after its deadline — and not refused for a worst
/// case (a whole `max_tokens` generated) that its answers never reach.
pub fn policy(scenario: &Scenario) -> Policy {
    let [lo, hi] = scenario.jobs.output_tokens;
    let mean_output =
        (lo.min(scenario.jobs.max_tokens) + hi.min(scenario.jobs.max_tokens)) as f64 / 2.0;
    let typical_ms =
        scenario.latency.base_ms as f64 + mean_output * scenario.latency.per_output_token_ms;
    let mut policy = Policy::default();
    policy.expected_attempt_time = Duration::from_secs_f64(typical_ms.min(86_400_000.0) / 1e3);
    policy
}

fn now_of(t: Instant) -> Now {
    Now::new(t, SimProvider::wall(t))
}

impl Ratewise {
    /// A client for `scenario`.
    pub fn new(scenario: &Scenario) -> Self {
        Ratewise::ordered(scenario, QueueOrder::Discipline)
    }

    /// A client for `scenario` whose processes order their waiting jobs
    /// by `order` ([`QueueOrder::Fifo`]: first come, first served, to
    /// compare with the discipline).
    pub fn ordered(scenario: &Scenario, order: QueueOrder) -> Self {
        let n = scenario.replicas.max(1);
        let replicas = (0..n)
            .map(|r| {
                let mut config = controller_config(scenario);
                config.seed = Some(scenario.seed.wrapping_add(u64::from(r)));
                let store = Shared::new(Controller::new(config));
                if n > 1 {
                    let now = now_of(Instant::ZERO);
                    store.lock().set_share(REPLICA_SHARE_PERMILLE, now);
                }
                let target = store.target(crate::provider::KEY, scenario.model_name());
                Replica {
                    store,
                    target,
                    queue: FairQueue::new(scenario, order),
                    stopped: false,
                    limits: None,
                    since_limits: 0,
                }
            })
            .collect();
        Ratewise {
            provider: scenario.provider,
            replicas,
            policy: policy(scenario),
            rng: rng_for(scenario, 0x7a7e),
            deadline: scenario.deadline_ms.map(Duration::from_millis),
            jobs: (0..scenario.total_jobs()).map(|_| None).collect(),
            charged: (0..scenario.total_jobs()).map(|_| None).collect(),
            process: scenario.job_groups().map(|g| g.process).collect(),
            group: crate::workload::jobs(scenario)
                .iter()
                .map(|j| j.group)
                .collect(),
        }
    }

    /// The process that runs job `id` of `group`: its group's `process`,
    /// else the processes in turn.
    fn replica_of(&self, id: u32, group: u16) -> usize {
        let n = self.replicas.len();
        match self.process.get(usize::from(group)).copied().flatten() {
            Some(p) => p as usize % n,
            None => id as usize % n,
        }
    }

    /// The job leaves its queue admitted: its flow is charged its
    /// reservation's dominant share of the limits the store knows, and
    /// the reservation is followed to its settlement.
    fn charge(&mut self, r: usize, id: u32, job: &crate::workload::Job, now: Now) {
        let rep = &mut self.replicas[r];
        if !rep.queue.orders() {
            // One level and one flow: nothing to share, the cost is moot
            // (and the store is not read: the run is as before the
            // discipline).
            rep.queue.admitted(job, Cost(1), now.instant);
            return;
        }
        if rep.limits.is_none() || rep.since_limits >= LIMITS_EVERY {
            if let Some(snap) = rep.store.snapshot(rep.target.scope, now) {
                rep.limits = Some(snap.limits);
                rep.since_limits = 0;
            }
        }
        rep.since_limits = rep.since_limits.saturating_add(1);
        let limits = rep.limits.unwrap_or(Limits::NONE);
        let held = self.jobs[id as usize].as_ref().and_then(Job::reservation);
        let amounts = held.map_or(
            Amounts {
                requests: 1,
                input: 0,
                output: 0,
            },
            |(_, a)| a,
        );
        let charged = rep
            .queue
            .admitted(job, Cost::dominant(&amounts, &limits), now.instant);
        if let (Some(charged), Some((res, _))) = (charged, held) {
            self.charged[id as usize] = Some((res, charged, limits));
        }
    }

    /// Applies `update` to job `id`'s store, correcting the discipline's
    /// charge when it ends the reservation the job was admitted with
    /// (settled at its usage; released: one request).
    fn apply(
        &mut self,
        id: u32,
        update: Update,
        now: Now,
    ) -> Option<ratewise_core::admit::Applied> {
        let r = self.replica_of(id, self.group_of(id));
        if let Some(end) = &update.end {
            let ends = end.reservation().id();
            let slot = &mut self.charged[id as usize];
            if slot.as_ref().is_some_and(|(res, _, _)| *res == ends) {
                if let Some((_, charged, limits)) = slot.take() {
                    let usage = match end {
                        End::Settle { usage, .. } => *usage,
                        // Released whole (and any end added later): one
                        // request, as the tower layer counts it.
                        _ => Usage::default(),
                    };
                    let actual = Cost::of_usage(&usage, &limits);
                    self.replicas[r]
                        .queue
                        .settled(&charged, actual, now.instant);
                }
            }
        }
        self.replicas[r].store.apply(update, now)
    }

    /// Job `id`'s machine (made when it first asked).
    fn machine(&mut self, id: u32) -> &mut Job {
        self.jobs[id as usize]
            .as_mut()
            .expect("a job answered has asked")
    }

    fn group_of(&self, id: u32) -> u16 {
        self.group[id as usize]
    }

    /// Lets each replica's oldest waiting jobs ask their machines while
    /// they say `Send`.
    fn dispatch(&mut self, sim: &mut Sim) {
        for r in 0..self.replicas.len() {
            self.dispatch_on(r, sim);
        }
    }

    fn dispatch_on(&mut self, r: usize, sim: &mut Sim) {
        let now = now_of(sim.now());
        while let Some(id) = self.replicas[r].queue.head() {
            let job = *sim.job(id);
            let rep = &mut self.replicas[r];
            if rep.stopped {
                rep.queue.leave(&job);
                sim.finish(id, Terminal::Stopped);
                continue;
            }
            let (target, deadline, policy) = (rep.target, self.deadline, &self.policy);
            let m = self.jobs[id as usize].get_or_insert_with(|| {
                let mut spec = JobSpec::new(target, job.arrival);
                spec.deadline = deadline;
                spec.input_estimate = Some(job.input_tokens);
                spec.max_tokens = Some(job.max_tokens);
                Job::new(spec, policy)
            });
            let step = match m.next(now) {
                // The in-memory store answers at once.
                Step::Admit(req) => m.admission(rep.store.admit(&req, now), policy, now),
                other => other,
            };
            match step {
                Step::Send { .. } => {
                    m.sending();
                    self.charge(r, id, &job, now);
                    sim.send(id);
                }
                Step::Wait { until, .. } => {
                    sim.wake(until);
                    return;
                }
                // Never while a job is in the queue.
                Step::Admit(_) | Step::Pending => rep.queue.leave(&job),
                Step::End(end) => match end.decision.action {
                    // A wait past the inline limit: the head waits on.
                    Action::Defer { not_before, .. } => {
                        m.requeue(None);
                        sim.wake(not_before);
                        return;
                    }
                    Action::StopQueue { until } => {
                        let lifts = until.map(|u| now.instant_at(u));
                        match lifts {
                            Some(at) if at <= now.instant + LONG_STOP => {
                                m.requeue(None);
                                sim.wake(at);
                                return;
                            }
                            // Kept for a human: every waiting job is stopped.
                            _ => rep.stopped = true,
                        }
                    }
                    _ => {
                        rep.queue.leave(&job);
                        sim.finish(id, Terminal::GivenUp);
                    }
                },
            }
        }
    }

    fn enqueue(&mut self, id: u32, sim: &mut Sim) {
        let job = *sim.job(id);
        let r = self.replica_of(id, job.group);
        self.replicas[r].queue.join(&job);
        self.dispatch_on(r, sim);
    }
}

impl Client for Ratewise {
    fn on_start(&mut self, job: u32, sim: &mut Sim) {
        self.enqueue(job, sim);
    }

    fn on_answer(&mut self, id: u32, a: &Answered, sim: &mut Sim) {
        let now = now_of(sim.now());
        let wall: SystemTime = now.wall;
        if self.jobs[id as usize].is_none() {
            return;
        }
        let decision = match &a.delivery {
            Delivery::Response {
                status,
                headers,
                body,
            } => {
                let view = ResponseView {
                    status: *status,
                    headers,
                    body,
                };
                let c = classify_response(self.provider, &view, wall);
                let usage = (*status == StatusCode::OK)
                    .then(|| parse_usage(body))
                    .flatten();
                let m = self.jobs[id as usize].as_mut().expect("it asked");
                let update = m.answered(&self.policy, &c, usage.as_ref(), &mut self.rng, now);
                let applied = self.apply(id, update, now);
                let m = self.machine(id);
                let d = m.applied(applied, now);
                // A success without usage: its end settles at the estimate.
                let end = ratewise_core::job::BodyEnd::Complete { usage: None };
                if let Some(update) = m.body_end(end) {
                    self.apply(id, update, now);
                }
                d
            }
            Delivery::Reset => {
                let c = classify_transport(self.provider, TransportFailure::ResetAfterSend);
                let m = self.jobs[id as usize].as_mut().expect("it asked");
                let update = m.failed(&self.policy, &c, true, &mut self.rng, now);
                let applied = self.apply(id, update, now);
                self.machine(id).applied(applied, now)
            }
        };
        let m = self.machine(id);
        match decision.action {
            Action::Retry { delay } => sim.timer(id, now.instant + delay),
            Action::Defer { not_before, .. } => {
                m.requeue(Some(not_before));
                sim.timer(id, not_before);
            }
            ref ends => {
                if let Some(how) = super::ending(ends) {
                    sim.finish(id, how);
                }
            }
        }
        self.dispatch(sim);
    }

    fn on_timer(&mut self, job: u32, sim: &mut Sim) {
        self.enqueue(job, sim);
    }

    fn on_wake(&mut self, sim: &mut Sim) {
        self.dispatch(sim);
    }
}
