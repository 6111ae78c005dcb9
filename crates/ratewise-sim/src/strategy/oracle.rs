//! `oracle`: the best any client could do, the yardstick `--check`
//! measures ratewise against.
//!
//! The oracle reads the provider model's true state (its buckets and its
//! acceleration ramp, through [`SimProvider::admission_at`]) and
//! sends the oldest waiting job the first instant every dimension would
//! admit it. No real client can see that state: it only has the answers'
//! headers, rounded, late and incomplete. So the oracle never gets a 429
//! from a rate limit, and what it achieves on a scenario is what the
//! provider's own rules allow — where `max_tokens` reservations fill the
//! output bucket, say, the oracle is held back too, and comparing with it
//! (rather than with the limit) charges ratewise only for what a client
//! could have avoided.
//!
//! Everything else is what the other strategies get, so the comparison is
//! fair:
//!
//! * the same jobs, the same `workers` (at most that many jobs active),
//!   the same provider with the same injected faults (overloads, resets
//!   after send, the spend cap);
//! * the same order as ratewise's queue: the core's queue discipline
//!   ([`super::queue`]) over each job's level, flow and weight — the
//!   higher level first with a lower level keeping its minimum share,
//!   flows of a level by cost, oldest first within a flow; with one level
//!   and one flow (every scenario without `groups`), arrival order. The
//!   oracle charges a flow the true cost of its send (its dominant share
//!   of the provider's true limits: input and `max_tokens`, as the
//!   provider charges at admission) and corrects it to what the answer
//!   used, so on a tenants scenario it is the yardstick of the ordering
//!   rules applied with no estimation error. The head that does not fit
//!   yet holds the ones behind it (no reordering to fill gaps, which
//!   ratewise does not do either). Across processes
//!   (`replicas`) the oracle is one client: it applies the rules to the
//!   whole key, the best the key allows;
//! * every answer other than a success is decided as ratewise decides it:
//!   the real `classify_response` (or `classify_transport` for a reset)
//!   and `decide` under the same [`policy`] — the same attempt budget and
//!   backoff for an overload, a reset held as `outcome_unknown`, a money
//!   answer stopping the queue. A retry goes back to the waiting jobs in
//!   its arrival order and is sent at the first instant it fits.
//! * money: the oracle also sees when the provider would answer every send
//!   for money (the spend cap reached by answers that completed), and
//!   stops then, keeping its jobs (`stopped`) without knocking: it never
//!   gets a money answer (a send admitted before the cap was reached is
//!   answered normally).
//!
//! Kept simple on purpose (a yardstick, not a second client to tune):
//! there is no queue-wide retry budget, a stop of the queue lasts to the
//! end of the run (every job not sent is kept, `stopped`), and a job is
//! sent whenever it fits, its deadline passed or not (no shipped scenario
//! waits that long; a decision after an answer does respect the deadline,
//! through `decide`).

use super::queue::{FairQueue, QueueOrder};
use super::ratewise::policy;
use super::rng_for;
use crate::engine::{Client, Sim, Terminal};
use crate::provider::Verdict;
use crate::provider::{Answered, Delivery, SimProvider};
use crate::scenario::Scenario;
use ratewise_core::admit::fair::{Charged, Cost};
use ratewise_core::admit::{Amounts, Limits};
use ratewise_core::classify::{
    classify_response, classify_transport, ResponseView, TransportFailure,
};
use ratewise_core::decide::{decide, JobState, Policy};
use ratewise_core::{Action, Now, Provider};
use std::time::Duration;

/// The strategy's state.
#[derive(Debug)]
pub struct Oracle {
    provider: Provider,
    policy: Policy,
    rng: fastrand::Rng,
    deadline: Option<Duration>,
    /// Jobs waiting to be sent, in the discipline's order.
    queue: FairQueue,
    /// The provider's true limits: what a send costs.
    limits: Limits,
    /// Each job's charge since its send, to correct at its answer.
    charged: Vec<Option<Charged>>,
    /// A money answer (or any stop) came: nothing more is sent.
    stopped: bool,
}

impl Oracle {
    /// A client for `scenario`.
    pub fn new(scenario: &Scenario) -> Self {
        Oracle {
            provider: scenario.provider,
            policy: policy(scenario),
            rng: rng_for(scenario, 0x0ac1e),
            deadline: scenario.deadline_ms.map(Duration::from_millis),
            queue: FairQueue::new(scenario, QueueOrder::Discipline),
            limits: scenario.limits.to_core(),
            charged: (0..scenario.total_jobs()).map(|_| None).collect(),
            stopped: false,
        }
    }

    /// Sends the oldest waiting jobs while the provider would admit them,
    /// and asks to be woken the instant it would admit the next one.
    fn dispatch(&mut self, sim: &mut Sim) {
        while let Some(id) = self.queue.head() {
            let job = *sim.job(id);
            // Money answers charge no bucket, so pacing would not hold
            // them back; the true state says when they would come.
            self.stopped |= sim.refuses_for_money();
            if self.stopped {
                self.queue.leave(&job);
                sim.finish(id, Terminal::Stopped);
                continue;
            }
            let at = sim.admission_at(id);
            if at > sim.now() {
                // An answer in between may free room sooner: every answer
                // dispatches again.
                sim.wake(at);
                return;
            }
            // What the provider charges at admission: input and
            // `max_tokens`.
            let held = Amounts {
                requests: 1,
                input: job.input_tokens,
                output: job.max_tokens,
            };
            let cost = Cost::dominant(&held, &self.limits);
            self.charged[id as usize] = self.queue.admitted(&job, cost, sim.now());
            sim.send(id);
        }
    }

    fn enqueue(&mut self, id: u32, sim: &mut Sim) {
        let job = *sim.job(id);
        self.queue.join(&job);
        self.dispatch(sim);
    }

    /// Corrects the charge of job `id`'s send to what its answer used:
    /// the input and actual output of a success, one request otherwise.
    fn settle(&mut self, id: u32, a: &Answered, sim: &Sim) {
        let Some(charged) = self.charged[id as usize].take() else {
            return;
        };
        let job = sim.job(id);
        let used = if a.verdict == Verdict::Success {
            Amounts {
                requests: 1,
                input: job.input_tokens,
                output: job.output_tokens,
            }
        } else {
            Amounts {
                requests: 1,
                input: 0,
                output: 0,
            }
        };
        let actual = Cost::dominant(&used, &self.limits);
        self.queue.settled(&charged, actual, sim.now());
    }
}

impl Client for Oracle {
    fn on_start(&mut self, job: u32, sim: &mut Sim) {
        self.enqueue(job, sim);
    }

    fn on_answer(&mut self, id: u32, a: &Answered, sim: &mut Sim) {
        self.settle(id, a, sim);
        let now = Now::new(sim.now(), SimProvider::wall(sim.now()));
        let c = match &a.delivery {
            Delivery::Response {
                status,
                headers,
                body,
            } => classify_response(
                self.provider,
                &ResponseView {
                    status: *status,
                    headers,
                    body,
                },
                now.wall,
            ),
            Delivery::Reset => classify_transport(self.provider, TransportFailure::ResetAfterSend),
        };
        let job = JobState::new(sim.attempts(id), sim.job(id).arrival, self.deadline);
        let action = decide(&self.policy, &job, &c, now, &mut self.rng).action;
        match action {
            Action::Retry { delay } => sim.timer(id, now.instant + delay),
            Action::Defer { not_before, .. } => sim.timer(id, not_before),
            ref ends => {
                if let Some(how) = super::ending(ends) {
                    self.stopped |= how == Terminal::Stopped;
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

#[cfg(test)]
mod tests {
    use crate::provider::Verdict;
    use crate::{simulate, Scenario, Strategy};

    /// Send times (ms) and verdicts of the oracle on `json`.
    fn sends(json: &str) -> Vec<(u64, Verdict)> {
        let s = Scenario::from_json(json).unwrap();
        let r = simulate(&s, Strategy::Oracle, &mut |_, _| {});
        assert_eq!(r.jobs_done, r.jobs_total);
        r.timeline.iter().map(|x| (x.t_ms, x.verdict)).collect()
    }

    #[test]
    fn sends_exactly_when_the_bucket_allows() {
        // 60 RPM held over 2 s: a full bucket of 2 requests, then one
        // request a second. Ten jobs at once: two at 0 s, then one each
        // second, every one admitted.
        let got = sends(
            r#"{"seed": 1,
                "limits": {"requests_per_min": 60, "capacity_seconds": 2},
                "jobs": {"count": 10, "arrival": "burst", "input_tokens": [10, 10],
                         "max_tokens": 10, "output_tokens": [5, 5]}}"#,
        );
        let want: Vec<(u64, Verdict)> = [0, 0, 1, 2, 3, 4, 5, 6, 7, 8]
            .into_iter()
            .map(|s| (s * 1000, Verdict::Success))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn waits_out_the_acceleration_window_on_a_cold_key() {
        // A cold key: the acceleration limit lets 5 requests through in the
        // first 10 s, though the requests bucket holds 60; the rest go the
        // instant the window ends, none refused.
        let got = sends(
            r#"{"seed": 1, "warm": false,
                "limits": {"requests_per_min": 60},
                "jobs": {"count": 10, "arrival": "burst", "input_tokens": [10, 10],
                         "max_tokens": 10, "output_tokens": [5, 5]},
                "faults": {"acceleration": true}}"#,
        );
        let want: Vec<(u64, Verdict)> = [0, 0, 0, 0, 0, 10, 10, 10, 10, 10]
            .into_iter()
            .map(|s| (s * 1000, Verdict::Success))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn reads_the_true_state_under_every_bias() {
        // 60 RPM over 2 s, a bucket 50 % smaller than its headers imply
        // (1 request, not 2) and a second client taking 50 % of the refill:
        // the key really gets one request at 0 s, then one every 2 s. The
        // headers say otherwise; the oracle is never refused.
        let got = sends(
            r#"{"seed": 1,
                "limits": {"requests_per_min": 60, "capacity_seconds": 2},
                "jobs": {"count": 5, "arrival": "burst", "input_tokens": [10, 10],
                         "max_tokens": 10, "output_tokens": [5, 5]},
                "bias": {"remaining_tokens_high": 400, "capacity_shortfall": 0.5,
                         "other_client_share": 0.5}}"#,
        );
        let want: Vec<(u64, Verdict)> = [0, 2, 4, 6, 8]
            .into_iter()
            .map(|s| (s * 1000, Verdict::Success))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn stops_before_the_spend_cap_answers() {
        // The cap is reached by answers that completed: the oracle sends
        // nothing after, and keeps the rest of the jobs.
        let s = Scenario::from_json(
            r#"{"seed": 2,
                "limits": {"requests_per_min": 60},
                "jobs": {"count": 50, "arrival": "burst", "input_tokens": [100, 100],
                         "max_tokens": 100, "output_tokens": [100, 100]},
                "faults": {"spend_cap_after_tokens": 2000}, "workers": 4}"#,
        )
        .unwrap();
        let r = simulate(&s, Strategy::Oracle, &mut |_, _| {});
        assert_eq!(r.sends_429, 0);
        assert!(r.jobs_stopped > 0 && r.jobs_done >= 10, "{r:?}");
        assert_eq!(r.jobs_done + r.jobs_stopped, r.jobs_total);
        assert_eq!(r.sends, r.jobs_done);
    }
}
