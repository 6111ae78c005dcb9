//! `ratewise`: the default policy, run on the real core.
//!
//! Every answer the simulated provider renders (status, headers, body) goes
//! through `classify_response` (or `classify_transport` for a reset), then
//! `decide` with `Policy::default()`, then into the admission
//! [`Controller`] as the tower layer does: usage settles the reservation
//! (an error releases it, an unknown outcome holds it), and
//! `Controller::observe` syncs the buckets to the rate-limit headers,
//! pauses the bucket on a hinted 429, cuts the ramp on an acceleration
//! 429, stops the key on money and applies the retry budget. Sends go out
//! only when `Controller::admit` says `Go`.
//!
//! The controller is configured as a user configures it: with the
//! scenario's limits when `limits.configured` is set (a user who entered
//! their tier's limits), else with none ([`Limits::NONE`]: it learns them
//! from the provider's rate-limit headers, as a user who configured
//! nothing); a warm start when the scenario's key is warm; everything else
//! is `Config::default()`.
//!
//! Jobs wait for admission oldest first (earliest deadline first, since
//! every job has the same deadline budget).

use super::rng_for;
use crate::engine::{Client, Sim, Terminal};
use crate::provider::{Answered, Delivery, SimProvider};
use crate::scenario::Scenario;
use http::StatusCode;
use ratewise_core::admit::{
    Admission, AdmitRequest, Config, Controller, Limits, RampConfig, Reservation, Target,
};
use ratewise_core::classify::{
    classify_response, classify_transport, Classification, ResponseView, TransportFailure,
};
use ratewise_core::decide::{decide, JobState, Policy};
use ratewise_core::parse::body::parse_usage;
use ratewise_core::{Action, Cause, Instant, Now, Provider, Usage};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, SystemTime};

/// A stop that lifts later than this is treated as "until a human
/// resumes": the jobs are kept (stopped) and the run ends for them.
pub const LONG_STOP: Duration = Duration::from_secs(3600);

#[derive(Debug, Default)]
struct JobSt {
    retry: bool,
    res: Option<Reservation>,
}

/// The strategy's state.
#[derive(Debug)]
pub struct Ratewise {
    provider: Provider,
    controller: Controller,
    target: Target,
    policy: Policy,
    rng: fastrand::Rng,
    deadline: Option<Duration>,
    jobs: Vec<JobSt>,
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
    Config {
        limits,
        seed: Some(scenario.seed),
        ramp: RampConfig {
            warm_start: scenario.warm,
            ..RampConfig::default()
        },
        ..Config::default()
    }
}

/// `Policy::default()` with the expected attempt time a user sets for
/// their model: the slowest answer of the scenario (`base_ms` plus
/// `max_tokens` at `per_output_token_ms`), so that a job is not admitted
/// when its answer would come after its deadline.
pub fn policy(scenario: &Scenario) -> Policy {
    let worst_ms = scenario.latency.base_ms as f64
        + scenario.jobs.max_tokens as f64 * scenario.latency.per_output_token_ms;
    Policy {
        expected_attempt_time: Duration::from_secs_f64(worst_ms.min(86_400_000.0) / 1e3),
        ..Policy::default()
    }
}

fn now_of(t: Instant) -> Now {
    Now::new(t, SimProvider::wall(t))
}

impl Ratewise {
    /// A client for `scenario`.
    pub fn new(scenario: &Scenario) -> Self {
        let mut controller = Controller::new(controller_config(scenario));
        let target = controller.target(crate::provider::KEY, scenario.model_name());
        Ratewise {
            provider: scenario.provider,
            controller,
            target,
            policy: policy(scenario),
            rng: rng_for(scenario, 0x7a7e),
            deadline: scenario.deadline_ms.map(Duration::from_millis),
            jobs: (0..scenario.jobs.count).map(|_| JobSt::default()).collect(),
            ready: BinaryHeap::new(),
            stopped: false,
        }
    }

    /// Admits the oldest waiting jobs while the controller says `Go`.
    fn dispatch(&mut self, sim: &mut Sim) {
        let now = now_of(sim.now());
        while let Some(&Reverse((arrival, id))) = self.ready.peek() {
            if self.stopped {
                self.ready.pop();
                sim.finish(id, Terminal::Stopped);
                continue;
            }
            let job = *sim.job(id);
            let req = AdmitRequest {
                target: self.target,
                input_estimate: Some(job.input_tokens),
                body_bytes: 0,
                max_tokens: Some(job.max_tokens),
                is_retry: self.jobs[id as usize].retry,
                deadline: self
                    .deadline
                    .map(|d| arrival + d.saturating_sub(self.policy.expected_attempt_time)),
            };
            match self.controller.admit(&req, now) {
                Admission::Go(res) => {
                    self.ready.pop();
                    self.jobs[id as usize].res = Some(res);
                    sim.send(id);
                }
                Admission::Wait { until, .. } => {
                    sim.wake(until);
                    return;
                }
                Admission::Stopped { until, .. } => {
                    let lifts = until.map(|u| now.instant_at(u));
                    match lifts {
                        Some(at) if at <= now.instant + LONG_STOP => {
                            sim.wake(at);
                            return;
                        }
                        _ => {
                            // Kept for a human: every waiting job is stopped.
                            self.stopped = true;
                        }
                    }
                }
                Admission::Refused { .. } => {
                    self.ready.pop();
                    sim.finish(id, Terminal::GivenUp);
                }
            }
        }
    }

    fn enqueue(&mut self, id: u32, sim: &mut Sim) {
        let arrival = sim.job(id).arrival;
        self.ready.push(Reverse((arrival, id)));
        self.dispatch(sim);
    }
}

/// Settles, releases or holds the reservation of one answered send, as
/// the tower layer does: a success settles with its usage, an error
/// response releases (the provider charged nothing), a send with no answer
/// is held as unknown with its worst case.
fn account(
    controller: &mut Controller,
    res: Reservation,
    c: &Classification,
    usage: Option<Usage>,
    now: Now,
) {
    match c.cause {
        Cause::Success => {
            let usage = usage.unwrap_or(Usage {
                input_tokens: res.amounts().input,
                output_tokens: res.amounts().output,
                ..Usage::default()
            });
            controller.settle(res, &usage, now);
        }
        Cause::OutcomeUnknown => controller.hold_unknown(&res, now),
        _ => controller.release(res, now),
    }
}

impl Client for Ratewise {
    fn on_start(&mut self, job: u32, sim: &mut Sim) {
        self.enqueue(job, sim);
    }

    fn on_answer(&mut self, id: u32, a: &Answered, sim: &mut Sim) {
        let now = now_of(sim.now());
        let wall: SystemTime = now.wall;
        let (c, usage) = match &a.delivery {
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
                let usage = (*status == StatusCode::OK)
                    .then(|| parse_usage(body))
                    .flatten();
                (classify_response(self.provider, &view, wall), usage)
            }
            Delivery::Reset => (
                classify_transport(self.provider, TransportFailure::ResetAfterSend),
                None,
            ),
        };
        let job = *sim.job(id);
        let state = JobState::new(sim.attempts(id), job.arrival, self.deadline);
        let res = self.jobs[id as usize].res.take();
        let sent = res.as_ref().map(Reservation::sent);
        if let Some(res) = res {
            account(&mut self.controller, res, &c, usage, now);
        }
        let decision = decide(&self.policy, &state, &c, now, &mut self.rng);
        // Header sync (read against the admission), pauses, ramp cuts,
        // stops, and the retry budget.
        let decision = match &sent {
            Some(sent) => self.controller.observe_sent(sent, &c, decision, now),
            None => self
                .controller
                .observe(self.target.scope, &c, decision, now),
        };
        match decision.action {
            Action::Done => sim.finish(id, Terminal::Done),
            Action::Retry { delay } => {
                self.jobs[id as usize].retry = true;
                sim.timer(id, now.instant + delay);
            }
            Action::Defer { not_before, .. } => {
                self.jobs[id as usize].retry = true;
                sim.timer(id, not_before);
            }
            Action::StopQueue { .. } => sim.finish(id, Terminal::Stopped),
            Action::Fail | Action::Inspect => sim.finish(id, Terminal::Failed),
            Action::GiveUp { .. } => sim.finish(id, Terminal::GivenUp),
            Action::HoldUnknown => sim.finish(id, Terminal::HeldUnknown),
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
