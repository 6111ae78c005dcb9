//! The discrete-event loop: one virtual clock, one event queue, one
//! provider and one client strategy.
//!
//! Events at the same instant run in the order they were scheduled, so a
//! run is a pure function of the scenario and the strategy. The engine
//! owns the jobs' bookkeeping (each job ends exactly once), the worker
//! pools (at most `workers` jobs active, as in an application; each job
//! group of a tenants scenario has a pool of its own), and every
//! measurement; strategies only decide when to send.

use crate::metrics::{Recorder, Report};
use crate::provider::{Answered, Delivery, SimProvider, Verdict};
use crate::scenario::Scenario;
use crate::workload::{jobs, Job};
use ratewise_core::Instant;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

/// Longest virtual time a run may last; jobs still open then are lost.
pub const HORIZON: Duration = Duration::from_secs(7 * 86_400);

/// How a job ended. Every job ends exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Terminal {
    /// Answered successfully.
    Done,
    /// Not retryable (or inspect): the request must change.
    Failed,
    /// Retryable, but attempts, deadline or a budget ran out.
    GivenUp,
    /// Sent, no answer: held as outcome unknown.
    HeldUnknown,
    /// Kept, not sent: the queue is stopped (money).
    Stopped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrive(u32),
    Answer(u32),
    Timer(u32),
    Wake,
}

/// A client strategy driven by the engine.
pub trait Client {
    /// A job got a worker and may be worked on now.
    fn on_start(&mut self, job: u32, sim: &mut Sim);
    /// The answer to the job's latest send arrived.
    fn on_answer(&mut self, job: u32, answer: &Answered, sim: &mut Sim);
    /// A timer the client set for `job` fired.
    fn on_timer(&mut self, job: u32, sim: &mut Sim);
    /// A wake-up the client asked for.
    fn on_wake(&mut self, sim: &mut Sim);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobPhase {
    NotArrived,
    Queued,
    Active,
    InFlight,
    Ended(Terminal),
}

/// The engine's state as a client sees it.
#[derive(Debug)]
pub struct Sim {
    now: Instant,
    seq: u64,
    queue: BinaryHeap<Reverse<(Instant, u64, Event)>>,
    jobs: Vec<Job>,
    phase: Vec<JobPhase>,
    attempts: Vec<u32>,
    in_flight: Vec<Option<Answered>>,
    /// Per job group: arrived jobs not started, oldest first; jobs
    /// started and not ended; and its worker pool's size.
    pending: Vec<VecDeque<u32>>,
    active: Vec<u32>,
    workers: Vec<u32>,
    provider: SimProvider,
    rec: Recorder,
    ended: u64,
    arrived: u64,
    /// Arrived, not ended, not in flight: waiting for something.
    open: u64,
    wake_at: Option<Instant>,
}

impl Sim {
    /// The present.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// A job.
    pub fn job(&self, id: u32) -> &Job {
        &self.jobs[id as usize]
    }

    /// Sends made for a job so far.
    pub fn attempts(&self, id: u32) -> u32 {
        self.attempts[id as usize]
    }

    /// True once the job has ended.
    pub fn has_ended(&self, id: u32) -> bool {
        matches!(self.phase[id as usize], JobPhase::Ended(_))
    }

    /// Starts queued jobs while their group's pool has a free worker,
    /// group by group.
    fn start_jobs(&mut self, client: &mut dyn Client) {
        for g in 0..self.pending.len() {
            while self.active[g] < self.workers[g] {
                let Some(id) = self.pending[g].pop_front() else {
                    break;
                };
                if self.phase[id as usize] != JobPhase::Queued {
                    continue;
                }
                self.phase[id as usize] = JobPhase::Active;
                self.active[g] += 1;
                client.on_start(id, self);
            }
        }
    }

    fn push(&mut self, at: Instant, ev: Event) {
        self.seq += 1;
        self.queue.push(Reverse((at.max(self.now), self.seq, ev)));
    }

    /// The first instant at or after now at which the provider would admit
    /// the job's request, read from its true state (see
    /// [`SimProvider::admission_at`]). For the `oracle` strategy only: the
    /// others see nothing but the answers they get.
    pub(crate) fn admission_at(&self, id: u32) -> Instant {
        self.provider
            .admission_at(&self.jobs[id as usize], self.now)
    }

    /// True once the provider would answer every send for money (its true
    /// state, see [`SimProvider::refuses_for_money`]). For the `oracle`
    /// strategy only.
    pub(crate) fn refuses_for_money(&self) -> bool {
        self.provider.refuses_for_money()
    }

    /// Sends the job's request now; its answer arrives after the latency.
    pub fn send(&mut self, id: u32) {
        let i = id as usize;
        if self.phase[i] != JobPhase::Active {
            return;
        }
        let job = self.jobs[i];
        let answered = self.provider.send(&job, self.now);
        self.attempts[i] += 1;
        self.rec.on_send(&job, &answered, self.now);
        let at = self.now + answered.latency;
        self.in_flight[i] = Some(answered);
        self.phase[i] = JobPhase::InFlight;
        self.open -= 1;
        self.push(at, Event::Answer(id));
    }

    /// Calls [`Client::on_timer`] for the job at `at`.
    pub fn timer(&mut self, id: u32, at: Instant) {
        self.push(at, Event::Timer(id));
    }

    /// Calls [`Client::on_wake`] at `at` (one pending wake-up at a time: an
    /// earlier request replaces a later one).
    pub fn wake(&mut self, at: Instant) {
        let at = at.max(self.now);
        if self.wake_at.is_some_and(|w| w <= at) {
            return;
        }
        self.wake_at = Some(at);
        self.push(at, Event::Wake);
    }

    /// Ends a job. A second end of the same job is ignored.
    pub fn finish(&mut self, id: u32, how: Terminal) {
        let i = id as usize;
        match self.phase[i] {
            JobPhase::Active | JobPhase::Queued => {}
            _ => return,
        }
        if self.phase[i] == JobPhase::Active {
            self.active[usize::from(self.jobs[i].group)] -= 1;
        }
        self.phase[i] = JobPhase::Ended(how);
        self.ended += 1;
        self.open -= 1;
        self.rec.on_end(&self.jobs[i], how, self.now);
    }

    /// Ends every job that has arrived and not started yet (a stopped
    /// queue keeps them) and returns how many.
    pub fn stop_pending(&mut self, how: Terminal) -> usize {
        let ids: Vec<u32> = self.pending.iter_mut().flat_map(|p| p.drain(..)).collect();
        for id in &ids {
            self.finish(*id, how);
        }
        ids.len()
    }
}

/// Runs `client` on `scenario`; `progress(ended, total)` is called as jobs
/// end.
pub fn run(
    scenario: &Scenario,
    strategy: &str,
    client: &mut dyn Client,
    progress: &mut dyn FnMut(u64, u64),
) -> Report {
    let jobs = jobs(scenario);
    let n = jobs.len();
    let mut sim = Sim {
        now: Instant::ZERO,
        seq: 0,
        queue: BinaryHeap::with_capacity(n + 16),
        phase: vec![JobPhase::NotArrived; n],
        attempts: vec![0; n],
        in_flight: vec![None; n],
        pending: scenario.job_groups().map(|_| VecDeque::new()).collect(),
        active: scenario.job_groups().map(|_| 0).collect(),
        workers: scenario
            .job_groups()
            .map(|g| g.workers.unwrap_or(scenario.workers))
            .collect(),
        provider: SimProvider::new(scenario),
        rec: Recorder::new(scenario, &jobs),
        ended: 0,
        arrived: 0,
        open: 0,
        wake_at: None,
        jobs,
    };
    for j in 0..n {
        let at = sim.jobs[j].arrival;
        sim.push(at, Event::Arrive(j as u32));
    }
    let horizon = Instant::from_origin(HORIZON);
    let mut last_ended = 0;
    while let Some(Reverse((at, _, ev))) = sim.queue.pop() {
        if at > horizon {
            break;
        }
        sim.now = at;
        // The binding bucket's level before this instant's sends: the
        // credit of a waiting interval this event may open.
        let level = if sim.rec.is_idle() {
            let (dim, limit) = (sim.rec.binding(), sim.rec.binding_limit());
            sim.provider.level(dim, limit, at)
        } else {
            0
        };
        match ev {
            Event::Arrive(id) => {
                sim.phase[id as usize] = JobPhase::Queued;
                let g = usize::from(sim.jobs[id as usize].group);
                sim.pending[g].push_back(id);
                sim.open += 1;
                sim.arrived += 1;
            }
            Event::Answer(id) => {
                let i = id as usize;
                if let Some(answered) = sim.in_flight[i].take() {
                    if let Some(g) = &answered.grant {
                        sim.provider.complete(g, at);
                    }
                    if answered.verdict == Verdict::Money {
                        sim.rec.on_money_answer();
                    }
                    sim.phase[i] = JobPhase::Active;
                    sim.open += 1;
                    client.on_answer(id, &answered, &mut sim);
                }
            }
            Event::Timer(id) => {
                if sim.phase[id as usize] == JobPhase::Active {
                    client.on_timer(id, &mut sim);
                }
            }
            Event::Wake => {
                if sim.wake_at == Some(at) {
                    sim.wake_at = None;
                }
                client.on_wake(&mut sim);
            }
        }
        sim.start_jobs(client);
        sim.rec.on_waiting(sim.open, level, sim.now);
        if sim.ended != last_ended {
            last_ended = sim.ended;
            progress(sim.ended, n as u64);
        }
        if sim.ended == n as u64 {
            break;
        }
    }
    sim.rec.finish(strategy, sim.now)
}

/// The answer a client reads: the delivery of the latest send.
pub fn delivery(a: &Answered) -> &Delivery {
    &a.delivery
}
