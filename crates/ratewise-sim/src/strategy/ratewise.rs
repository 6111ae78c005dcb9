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
//! Jobs wait for admission oldest first (earliest deadline first, since
//! every job has the same deadline budget).

use super::rng_for;
use crate::engine::{Client, Sim, Terminal};
use crate::provider::{Answered, Delivery, SimProvider};
use crate::scenario::{Scenario, REPLICA_SHARE_PERMILLE};
use http::StatusCode;
use ratewise_core::admit::store_kit::StoreHooks;
use ratewise_core::admit::{Config, Controller, Limits, RampConfig, Shared, Target};
use ratewise_core::classify::{
    classify_response, classify_transport, ResponseView, TransportFailure,
};
use ratewise_core::decide::Policy;
use ratewise_core::job::{Job, JobSpec, Step};
use ratewise_core::parse::body::parse_usage;
use ratewise_core::{Action, Instant, Now, Provider};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, SystemTime};

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
}

/// One process: its own store (no peers seen) and its own queue.
#[derive(Debug)]
struct Replica {
    store: Shared,
    target: Target,
    ready: BinaryHeap<Reverse<(Instant, u32)>>,
    stopped: bool,
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
                    ready: BinaryHeap::new(),
                    stopped: false,
                }
            })
            .collect();
        Ratewise {
            provider: scenario.provider,
            replicas,
            policy: policy(scenario),
            rng: rng_for(scenario, 0x7a7e),
            deadline: scenario.deadline_ms.map(Duration::from_millis),
            jobs: (0..scenario.jobs.count).map(|_| None).collect(),
        }
    }

    fn replica_of(&self, id: u32) -> usize {
        id as usize % self.replicas.len()
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
        let rep = &mut self.replicas[r];
        while let Some(&Reverse((arrival, id))) = rep.ready.peek() {
            if rep.stopped {
                rep.ready.pop();
                sim.finish(id, Terminal::Stopped);
                continue;
            }
            let job = *sim.job(id);
            let (target, deadline, policy) = (rep.target, self.deadline, &self.policy);
            let m = self.jobs[id as usize].get_or_insert_with(|| {
                let mut spec = JobSpec::new(target, arrival);
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
                    rep.ready.pop();
                    m.sending();
                    sim.send(id);
                }
                Step::Wait { until, .. } => {
                    sim.wake(until);
                    return;
                }
                // Never while a job is in the ready queue.
                Step::Admit(_) | Step::Pending => {
                    rep.ready.pop();
                }
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
                        rep.ready.pop();
                        sim.finish(id, Terminal::GivenUp);
                    }
                },
            }
        }
    }

    fn enqueue(&mut self, id: u32, sim: &mut Sim) {
        let arrival = sim.job(id).arrival;
        let r = self.replica_of(id);
        self.replicas[r].ready.push(Reverse((arrival, id)));
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
        let store = &self.replicas[self.replica_of(id)].store;
        let Some(m) = self.jobs[id as usize].as_mut() else {
            return;
        };
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
                let update = m.answered(&self.policy, &c, usage.as_ref(), &mut self.rng, now);
                let d = m.applied(store.apply(update, now), now);
                // A success without usage: its end settles at the estimate.
                let end = ratewise_core::job::BodyEnd::Complete { usage: None };
                if let Some(update) = m.body_end(end) {
                    store.apply(update, now);
                }
                d
            }
            Delivery::Reset => {
                let c = classify_transport(self.provider, TransportFailure::ResetAfterSend);
                let update = m.failed(&self.policy, &c, true, &mut self.rng, now);
                m.applied(store.apply(update, now), now)
            }
        };
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
