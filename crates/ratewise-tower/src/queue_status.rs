//! What waits in a layer's queues, and why: for a status page
//! ([`RetryLayer::queues`](crate::RetryLayer::queues)) — per scope, per
//! priority level and per flow, the jobs waiting, what each was admitted
//! lately as a share of the limit, and how long its jobs waited for
//! admission (p50 / p95 of the latest); and what the head of the queue
//! waits for (which bucket, until when).

use ratewise_core::admit::{ScopeId, WaitReason};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// Admission waits kept per (level, flow): the latest, for the quantiles.
const SAMPLES: usize = 256;

/// (Level, flow) pairs whose waits are kept per scope; past it, the waits
/// of new flows are kept under the flow `other`.
const MAX_SAMPLED_FLOWS: usize = 64;

/// One scope's queue.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueStatus {
    /// The scope (key × model class).
    pub scope: ScopeId,
    /// What the head of the queue waits for, and for how much longer
    /// (`None`: it is not waiting on admission now).
    pub head_waits: Option<(WaitReason, Duration)>,
    /// Each priority level, highest first.
    pub levels: Vec<LevelStatus>,
}

/// One priority level of a scope's queue.
#[derive(Debug, Clone, PartialEq)]
pub struct LevelStatus {
    /// Its name.
    pub level: String,
    /// Its jobs waiting.
    pub waiting: usize,
    /// What it was admitted over the last minute or so (decayed), as a
    /// share of the limit that binds (each job's dominant share).
    pub used_of_limit: f64,
    /// The admission wait of its latest jobs, median and 95th percentile
    /// (from arrival to admission; `None`: none admitted yet).
    pub wait_p50: Option<Duration>,
    /// See [`wait_p50`](Self::wait_p50).
    pub wait_p95: Option<Duration>,
    /// Its flows that wait or were admitted lately, those waiting first.
    pub flows: Vec<FlowStatus>,
}

/// One flow (tenant) of a level.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowStatus {
    /// Its name.
    pub flow: String,
    /// Its jobs waiting.
    pub waiting: usize,
    /// How long its oldest waiting job has waited.
    pub oldest_wait: Option<Duration>,
    /// Its weight within its level.
    pub weight: u32,
    /// What it was admitted lately, as a share of the limit.
    pub used_of_limit: f64,
    /// The admission wait of its latest jobs, median and 95th percentile.
    pub wait_p50: Option<Duration>,
    /// See [`wait_p50`](Self::wait_p50).
    pub wait_p95: Option<Duration>,
}

/// The latest admission waits of a scope's (level, flow) pairs.
#[derive(Debug, Default)]
pub(crate) struct Waits {
    by: HashMap<(usize, Box<str>), VecDeque<Duration>>,
}

impl Waits {
    /// A job of `level` and `flow` was admitted after waiting `waited`.
    pub fn record(&mut self, level: usize, flow: &str, waited: Duration) {
        let key =
            if self.by.len() >= MAX_SAMPLED_FLOWS && !self.by.contains_key(&(level, flow.into())) {
                (level, Box::from("other"))
            } else {
                (level, Box::from(flow))
            };
        let q = self.by.entry(key).or_default();
        if q.len() == SAMPLES {
            q.pop_front();
        }
        q.push_back(waited);
    }

    /// The median and 95th percentile of `level`'s waits (`flow`: of that
    /// flow's only).
    pub fn quantiles(
        &self,
        level: usize,
        flow: Option<&str>,
    ) -> (Option<Duration>, Option<Duration>) {
        let mut all: Vec<Duration> = self
            .by
            .iter()
            .filter(|((l, f), _)| *l == level && flow.is_none_or(|x| **f == *x))
            .flat_map(|(_, q)| q.iter().copied())
            .collect();
        if all.is_empty() {
            return (None, None);
        }
        all.sort();
        let at = |p: f64| all[((all.len() - 1) as f64 * p).round() as usize];
        (Some(at(0.5)), Some(at(0.95)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_of_the_latest_waits_per_level_and_flow() {
        let mut w = Waits::default();
        for ms in 1..=100 {
            w.record(2, "batch", Duration::from_millis(ms));
        }
        w.record(0, "chat", Duration::from_millis(7));
        let (p50, p95) = w.quantiles(2, None);
        assert_eq!(p50, Some(Duration::from_millis(51)));
        assert_eq!(p95, Some(Duration::from_millis(95)));
        assert_eq!(
            w.quantiles(0, Some("chat")).0,
            Some(Duration::from_millis(7))
        );
        assert_eq!(w.quantiles(1, None), (None, None));
        // Bounded: the latest SAMPLES per pair, MAX_SAMPLED_FLOWS pairs.
        for i in 0..1000 {
            w.record(2, &format!("tenant-{i}"), Duration::from_millis(1));
        }
        assert!(w.by.len() <= MAX_SAMPLED_FLOWS + 1);
        assert!(w.by.values().all(|q| q.len() <= SAMPLES));
    }
}
