//! What waits in a layer's queues, and why: for a status page
//! ([`RetryLayer::queues`](crate::RetryLayer::queues)) — per scope, per
//! priority level and per flow, the jobs waiting, what each was admitted
//! lately as a share of the limit, and how long its jobs waited for
//! admission (p50 / p95 of the latest); and what the head of the queue
//! waits for (which bucket, until when).

use ratewise_core::admit::{ScopeId, WaitReason};
use std::collections::VecDeque;
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
    /// What it was admitted lately of each limit (requests, input
    /// tokens, output tokens, combined tokens: [`DIMENSIONS`]), as a
    /// share of it; a reservation counts as reserved until it settles.
    pub used_of_each_limit: [f64; 4],
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
    /// What it was admitted lately of each limit ([`DIMENSIONS`]).
    pub used_of_each_limit: [f64; 4],
    /// The admission wait of its latest jobs, median and 95th percentile.
    pub wait_p50: Option<Duration>,
    /// See [`wait_p50`](Self::wait_p50).
    pub wait_p95: Option<Duration>,
}

/// The dimensions of the key's limits, in the order the shares are kept:
/// requests, input tokens, output tokens, combined tokens.
pub const DIMENSIONS: [&str; 4] = ["requests", "input_tokens", "output_tokens", "tokens"];

/// How long admitted amounts count toward a share of the limits: they
/// decay with this time constant (the providers' own window).
const SHARE_WINDOW: Duration = Duration::from_secs(60);

/// What a scope's (level, flow) pairs were admitted lately, per limit:
/// amounts over the limit they count against, decayed over
/// [`SHARE_WINDOW`] — a steady tenth of a limit reads 0.1. A reservation
/// counts as reserved until it settles, then as used.
#[derive(Debug, Default)]
pub(crate) struct Shares {
    by: Pairs<([f64; 4], ratewise_core::Instant)>,
}

/// A value per (level, flow) pair, at most [`MAX_SAMPLED_FLOWS`] pairs:
/// past them, a new pair's value is kept under its level's `other`.
/// Searched in place, since there are few pairs and a lookup happens on
/// every admission: no hash, and no allocation but a new pair's name.
#[derive(Debug)]
struct Pairs<V> {
    entries: Vec<(usize, Box<str>, V)>,
}

impl<V> Default for Pairs<V> {
    fn default() -> Self {
        Pairs {
            entries: Vec::new(),
        }
    }
}

impl<V> Pairs<V> {
    fn position(&self, level: usize, flow: &str) -> Option<usize> {
        self.entries
            .iter()
            .position(|(l, f, _)| *l == level && **f == *flow)
    }

    /// The value of (`level`, `flow`), made by `new` when there is none.
    fn entry(&mut self, level: usize, flow: &str, new: impl FnOnce() -> V) -> &mut V {
        let i = match self.position(level, flow) {
            Some(i) => i,
            None => {
                let flow = if self.entries.len() >= MAX_SAMPLED_FLOWS {
                    "other"
                } else {
                    flow
                };
                match self.position(level, flow) {
                    Some(i) => i,
                    None => {
                        self.entries.push((level, Box::from(flow), new()));
                        self.entries.len() - 1
                    }
                }
            }
        };
        &mut self.entries[i].2
    }

    /// Every pair and its value.
    fn iter(&self) -> impl Iterator<Item = (usize, &str, &V)> {
        self.entries.iter().map(|(l, f, v)| (*l, &**f, v))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Each dimension's amount over its limit (`None` where there is none).
fn over_limits(amounts: [f64; 4], limits: &ratewise_core::admit::Limits) -> [Option<f64>; 4] {
    let l = [
        limits.requests,
        limits.input_tokens,
        limits.output_tokens,
        limits.tokens,
    ];
    std::array::from_fn(|i| l[i].filter(|&x| x > 0).map(|x| amounts[i] / x as f64))
}

/// A reservation's (or a usage's) amounts per dimension.
pub(crate) fn amounts_of(requests: u64, input: u64, output: u64) -> [f64; 4] {
    [
        requests as f64,
        input as f64,
        output as f64,
        input.saturating_add(output) as f64,
    ]
}

impl Shares {
    /// `level` and `flow` were admitted `amounts` (a reservation), or
    /// corrected by them (a settlement: what was used less what was
    /// reserved, possibly negative), against `limits`, at `now`.
    pub fn add(
        &mut self,
        level: usize,
        flow: &str,
        amounts: [f64; 4],
        limits: &ratewise_core::admit::Limits,
        now: ratewise_core::Instant,
    ) {
        let e = self.by.entry(level, flow, || ([0.0; 4], now));
        decay(e, now);
        for (i, v) in over_limits(amounts, limits).into_iter().enumerate() {
            if let Some(v) = v {
                e.0[i] = (e.0[i] + v).max(0.0);
            }
        }
    }

    /// `level`'s shares of each limit at `now` (`flow`: that flow's only).
    pub fn of(&self, level: usize, flow: Option<&str>, now: ratewise_core::Instant) -> [f64; 4] {
        let mut out = [0.0; 4];
        for (l, f, e) in self.by.iter() {
            if l != level || flow.is_some_and(|x| f != x) {
                continue;
            }
            let mut e = *e;
            decay(&mut e, now);
            for (o, x) in out.iter_mut().zip(e.0) {
                *o += x;
            }
        }
        // A steady rate r (of a limit a second) decays to r * window: as
        // a share of a minute's limit, times 60 s over the window.
        let per_minute = 60.0 / SHARE_WINDOW.as_secs_f64();
        out.map(|x| x * per_minute)
    }
}

fn decay(e: &mut ([f64; 4], ratewise_core::Instant), now: ratewise_core::Instant) {
    let dt = now.saturating_duration_since(e.1).as_secs_f64();
    if dt > 0.0 {
        let k = (-dt / SHARE_WINDOW.as_secs_f64()).exp();
        for x in &mut e.0 {
            *x *= k;
        }
        e.1 = now;
    }
}

/// The latest admission waits of a scope's (level, flow) pairs.
#[derive(Debug, Default)]
pub(crate) struct Waits {
    by: Pairs<VecDeque<Duration>>,
}

impl Waits {
    /// A job of `level` and `flow` was admitted after waiting `waited`.
    pub fn record(&mut self, level: usize, flow: &str, waited: Duration) {
        let q = self.by.entry(level, flow, VecDeque::new);
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
            .filter(|(l, f, _)| *l == level && flow.is_none_or(|x| *f == x))
            .flat_map(|(_, _, q)| q.iter().copied())
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
    use ratewise_core::admit::Limits;
    use ratewise_core::Instant;

    #[test]
    fn shares_of_each_limit_are_admitted_amounts_over_it_decayed() {
        let limits = Limits {
            requests: Some(60),
            input_tokens: Some(60_000),
            output_tokens: Some(6_000),
            ..Limits::NONE
        };
        let mut s = Shares::default();
        // A request a second for ten minutes, each 100 input and 50
        // output tokens: a sixtieth of the requests limit a second (1.0
        // a minute), 0.1 of the input limit, 0.5 of the output limit.
        let mut now = Instant::ZERO;
        for _ in 0..600 {
            s.add(2, "batch", amounts_of(1, 100, 50), &limits, now);
            now = now + Duration::from_secs(1);
        }
        let [r, i, o, t] = s.of(2, None, now);
        assert!((r - 1.0).abs() < 0.02, "{r}");
        assert!((i - 0.1).abs() < 0.005, "{i}");
        assert!((o - 0.5).abs() < 0.01, "{o}");
        assert_eq!(t, 0.0, "no combined limit");
        assert_eq!(s.of(0, None, now), [0.0; 4]);
        // A settlement's correction: what was reserved and not used.
        s.add(2, "batch", [0.0, 0.0, -6_000.0, 0.0], &limits, now);
        assert!(s.of(2, Some("batch"), now)[2] < o);
        // Nothing for five minutes: it decays away.
        let later = now + Duration::from_secs(300);
        assert!(s.of(2, None, later)[0] < 0.01);
    }

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
        assert!(w.by.iter().all(|(_, _, q)| q.len() <= SAMPLES));
    }
}
