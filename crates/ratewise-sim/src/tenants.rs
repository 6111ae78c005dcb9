//! The figures of a tenants scenario (issue #49): per level and per flow,
//! and the shares the queue discipline's rules promise.
//!
//! * **wait**: a done job's send that succeeded minus its arrival (the
//!   time it waited for its turn and for room, retries included; the
//!   answer's own latency is not in it), p50 and p95 (nearest rank), per
//!   flow (a job group) and per level (its groups together).
//! * **cost**: what a success used of the provider's true limits, as the
//!   discipline counts it: its dominant share (the largest of requests,
//!   input, output and combined tokens over their per-minute limits, in
//!   millionths of a limit). `cost_share` is a row's share of the cost of
//!   every success of the run.
//! * **while both wait**: from the later of two rows' first arrivals to
//!   the earlier of their last successful sends — the span in which both
//!   had work queued, so each took what the rules gave it. The flows'
//!   cost ratio and a level's minimum share are measured over it
//!   ([`TenantLog::ratio_while_both_wait`], [`TenantLog::share_while_all_wait`]).

use crate::scenario::Scenario;
use crate::workload::Job;
use ratewise_core::admit::fair::Cost;
use ratewise_core::admit::{Amounts, Limits};
use ratewise_core::Instant;
use serde::Serialize;

/// One row of a tenants report: a flow or a level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TenantReport {
    /// `"flow"` or `"level"`.
    pub kind: &'static str,
    /// The flow's or the level's name.
    pub name: String,
    /// The level (a flow's, or the level's own name).
    pub level: String,
    /// Jobs.
    pub jobs: u64,
    /// Of them, done.
    pub done: u64,
    /// Median wait of done jobs, seconds.
    pub wait_p50_s: f64,
    /// 95th percentile wait of done jobs, seconds.
    pub wait_p95_s: f64,
    /// Share of the cost of every success of the run.
    pub cost_share: f64,
}

/// What a run's sends did per job group, for the tenants figures.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TenantLog {
    /// Each group's (level, flow) names.
    pub groups: Vec<(String, String)>,
    /// Each group's jobs.
    pub jobs: Vec<u64>,
    /// Each group's first arrival, ms.
    pub first_arrival_ms: Vec<u64>,
    /// Every success: (ms, group, cost in millionths of a limit).
    pub sends: Vec<(u64, u16, u64)>,
    /// Each success's wait, seconds, per group.
    pub waits: Vec<Vec<f64>>,
    limits: Limits,
}

fn ms(t: Instant) -> u64 {
    u64::try_from(t.since_origin().as_millis()).unwrap_or(u64::MAX)
}

impl TenantLog {
    /// A log for `jobs` of `scenario`; `None` unless it is a tenants
    /// scenario ([`Scenario::has_workloads`]).
    pub fn new(scenario: &Scenario, jobs: &[Job]) -> Option<TenantLog> {
        if !scenario.has_workloads() {
            return None;
        }
        let groups: Vec<(String, String)> = scenario
            .job_groups()
            .map(|g| (g.level_name().to_owned(), g.flow_name().to_owned()))
            .collect();
        let n = groups.len();
        let mut log = TenantLog {
            groups,
            jobs: vec![0; n],
            first_arrival_ms: vec![u64::MAX; n],
            sends: Vec::new(),
            waits: vec![Vec::new(); n],
            limits: scenario.limits.to_core(),
        };
        for j in jobs {
            let g = usize::from(j.group);
            log.jobs[g] += 1;
            log.first_arrival_ms[g] = log.first_arrival_ms[g].min(ms(j.arrival));
        }
        Some(log)
    }

    /// A send of `job` at `now` succeeded.
    pub fn on_success(&mut self, job: &Job, now: Instant) {
        let used = Amounts {
            requests: 1,
            input: job.input_tokens,
            output: job.output_tokens,
        };
        let cost = Cost::dominant(&used, &self.limits).0;
        self.sends.push((ms(now), job.group, cost));
        let wait = now.saturating_duration_since(job.arrival).as_secs_f64();
        self.waits[usize::from(job.group)].push(wait);
    }

    /// The groups a name stands for: the flow of that name, else every
    /// group of the level of that name.
    pub fn groups_of(&self, name: &str) -> Vec<u16> {
        let flows: Vec<u16> = (0..self.groups.len() as u16)
            .filter(|g| self.groups[usize::from(*g)].1 == name)
            .collect();
        if !flows.is_empty() {
            return flows;
        }
        (0..self.groups.len() as u16)
            .filter(|g| self.groups[usize::from(*g)].0 == name)
            .collect()
    }

    /// The span (ms) in which every one of `sets` had work: from the
    /// latest first arrival to the earliest last success.
    fn span(&self, sets: &[Vec<u16>]) -> (u64, u64) {
        let mut from = 0u64;
        let mut to = u64::MAX;
        for set in sets {
            let first = set
                .iter()
                .map(|g| self.first_arrival_ms[usize::from(*g)])
                .min()
                .unwrap_or(u64::MAX);
            let last = self
                .sends
                .iter()
                .filter(|(_, g, _)| set.contains(g))
                .map(|(t, _, _)| *t)
                .max()
                .unwrap_or(0);
            from = from.max(first);
            to = to.min(last);
        }
        (from, to)
    }

    /// Cost of `set`'s successes sent within `[from, to)`.
    fn cost_in(&self, set: &[u16], (from, to): (u64, u64)) -> u64 {
        self.sends
            .iter()
            .filter(|(t, g, _)| *t >= from && *t < to && set.contains(g))
            .map(|(_, _, c)| *c)
            .sum()
    }

    /// `a`'s admitted cost over `b`'s while both wait (infinite when `b`
    /// got nothing then; `None`: no span with both, or neither got
    /// anything).
    pub fn ratio_while_both_wait(&self, a: &str, b: &str) -> Option<f64> {
        let (ga, gb) = (self.groups_of(a), self.groups_of(b));
        let span = self.span(&[ga.clone(), gb.clone()]);
        if span.0 >= span.1 {
            return None;
        }
        let (ca, cb) = (self.cost_in(&ga, span), self.cost_in(&gb, span));
        match (ca, cb) {
            (0, 0) => None,
            (_, 0) => Some(f64::INFINITY),
            _ => Some(ca as f64 / cb as f64),
        }
    }

    /// `level`'s share of the admitted cost while every level of the run
    /// waits (`None`: no such span).
    pub fn share_while_all_wait(&self, level: &str) -> Option<f64> {
        let levels = self.level_names();
        let sets: Vec<Vec<u16>> = levels.iter().map(|l| self.groups_of(l)).collect();
        let span = self.span(&sets);
        if span.0 >= span.1 {
            return None;
        }
        let all: Vec<u16> = (0..self.groups.len() as u16).collect();
        let total = self.cost_in(&all, span);
        let own = self.cost_in(&self.groups_of(level), span);
        (total > 0).then(|| own as f64 / total as f64)
    }

    /// The p95 wait (seconds) of the done jobs of `name` (a flow, else a
    /// level).
    pub fn wait_p95(&self, name: &str) -> f64 {
        let mut waits: Vec<f64> = self
            .groups_of(name)
            .iter()
            .flat_map(|g| self.waits[usize::from(*g)].iter().copied())
            .collect();
        waits.sort_by(f64::total_cmp);
        nearest_rank(&waits, 0.95)
    }

    fn level_names(&self) -> Vec<String> {
        let mut levels: Vec<String> = Vec::new();
        for (l, _) in &self.groups {
            if !levels.contains(l) {
                levels.push(l.clone());
            }
        }
        levels
    }

    /// The rows: each flow, then each level with more than one flow.
    pub fn rows(&self) -> Vec<TenantReport> {
        let total: u64 = self.sends.iter().map(|(_, _, c)| *c).sum();
        let row = |kind, name: &str, level: &str, set: &[u16]| {
            let mut waits: Vec<f64> = set
                .iter()
                .flat_map(|g| self.waits[usize::from(*g)].iter().copied())
                .collect();
            waits.sort_by(f64::total_cmp);
            let cost: u64 = self.cost_in(set, (0, u64::MAX));
            TenantReport {
                kind,
                name: name.to_owned(),
                level: level.to_owned(),
                jobs: set.iter().map(|g| self.jobs[usize::from(*g)]).sum(),
                done: waits.len() as u64,
                wait_p50_s: round4(nearest_rank(&waits, 0.50)),
                wait_p95_s: round4(nearest_rank(&waits, 0.95)),
                cost_share: round4(if total > 0 {
                    cost as f64 / total as f64
                } else {
                    0.0
                }),
            }
        };
        let mut rows: Vec<TenantReport> = (0..self.groups.len() as u16)
            .map(|g| {
                let (level, flow) = &self.groups[usize::from(g)];
                row("flow", flow, level, &[g])
            })
            .collect();
        for level in self.level_names() {
            let set: Vec<u16> = (0..self.groups.len() as u16)
                .filter(|g| self.groups[usize::from(*g)].0 == level)
                .collect();
            if set.len() > 1 {
                rows.push(row("level", &level, &level, &set));
            }
        }
        rows
    }
}

/// The `p` quantile of sorted `xs` by nearest rank (0 when empty).
fn nearest_rank(xs: &[f64], p: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let rank = ((p * xs.len() as f64).ceil() as usize).max(1);
    xs[rank.min(xs.len()) - 1]
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}
