//! The waiting jobs of a client that orders them with the core's queue
//! discipline ([`ratewise_core::admit::fair::Discipline`]), as the tower
//! layer's queue does: whose turn it is to ask (the higher level first, a
//! lower level keeping its minimum share; flows of a level by cost,
//! weighted; oldest first within a flow), the flow charged its admission's
//! dominant cost and corrected when that admission settles.
//!
//! A job's place is its arrival, ties broken by its id, and it keeps it
//! across its retries. Its workload is its group's (the scenario's `jobs`
//! or one of its `groups`): level, flow and weight. With one level and
//! one flow (every scenario without `groups`), the discipline is a FIFO
//! by (arrival, id): exactly the order the strategies kept before it.

use crate::scenario::Scenario;
use crate::workload::Job;
use ratewise_core::admit::fair::{Charged, Cost, Discipline, Levels, Place, Workload};
use ratewise_core::Instant;

/// How a client orders its waiting jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueOrder {
    /// The discipline over each job's workload (level, flow, weight): what
    /// the tower layer does.
    #[default]
    Discipline,
    /// Every job one level and one flow: first come, first served (the
    /// queue before issue #49; kept to show the tenants targets fail
    /// without the discipline).
    Fifo,
}

/// Jobs waiting, in the discipline's order.
#[derive(Debug)]
pub struct FairQueue {
    discipline: Discipline,
    /// Each job group's workload.
    workloads: Vec<Workload>,
}

/// A job's place: its arrival, ties broken by its id.
pub fn place(job: &Job) -> Place {
    Place {
        arrived: job.arrival,
        seq: u64::from(job.id),
    }
}

impl FairQueue {
    /// An empty queue for `scenario`'s job groups, ordered by `order`.
    pub fn new(scenario: &Scenario, order: QueueOrder) -> Self {
        let levels = Levels::default();
        let workloads = scenario
            .job_groups()
            .map(|g| match order {
                QueueOrder::Discipline => {
                    let level = levels.level_or_default(Some(g.level_name()));
                    Workload::new(level, g.flow_name()).weight(g.weight)
                }
                QueueOrder::Fifo => Workload::new(levels.default_level(), "fifo"),
            })
            .collect();
        FairQueue {
            discipline: Discipline::new(levels),
            workloads,
        }
    }

    /// Whether the order depends on costs: more than one (level, flow)
    /// among the groups. Without, the queue is a FIFO, and a driver need
    /// not cost its admissions.
    pub fn orders(&self) -> bool {
        self.workloads.iter().any(|w| *w != self.workloads[0])
    }

    /// `job` waits (again, after a retry: at its own place).
    pub fn join(&mut self, job: &Job) {
        let w = &self.workloads[usize::from(job.group).min(self.workloads.len() - 1)];
        self.discipline.join(place(job), w);
    }

    /// The id of the job whose turn it is.
    pub fn head(&self) -> Option<u32> {
        self.discipline.head().map(|p| p.seq as u32)
    }

    /// Whether no job waits.
    pub fn is_empty(&self) -> bool {
        self.discipline.is_empty()
    }

    /// `job` leaves without being admitted.
    pub fn leave(&mut self, job: &Job) {
        self.discipline.leave(place(job));
    }

    /// `job` was admitted at `now` at `cost`: it leaves, its flow charged.
    pub fn admitted(&mut self, job: &Job, cost: Cost, now: Instant) -> Option<Charged> {
        self.discipline.admitted(place(job), cost, now)
    }

    /// An admission charged `charged` settled at `now` costing `actual`.
    pub fn settled(&mut self, charged: &Charged, actual: Cost, now: Instant) {
        self.discipline.settled(charged, actual, now);
    }
}
