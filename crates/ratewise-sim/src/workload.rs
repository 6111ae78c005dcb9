//! The jobs of a scenario: arrival times and sizes, drawn from its seed.
//!
//! The same scenario always yields the same jobs, and every strategy of a
//! run sees exactly these jobs.

use crate::scenario::{Arrival, Scenario};
use ratewise_core::Instant;
use std::time::Duration;

/// One unit of work: one request the application needs answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    /// 0-based index.
    pub id: u32,
    /// When the application hands it over (relative to the run's start).
    pub arrival: Instant,
    /// Its input tokens (what the provider charges and the client knows).
    pub input_tokens: u64,
    /// Its `max_tokens`.
    pub max_tokens: u64,
    /// The output a success produces (known only to the provider).
    pub output_tokens: u64,
    /// Its group: `0` for the scenario's `jobs`, `1..` for its `groups`
    /// in order (their level, flow, workers and process).
    pub group: u16,
}

/// Draws the jobs of `scenario`: `jobs` first, then each of its `groups`,
/// ids counting on across groups, from one seeded stream (a scenario
/// with no `groups` draws exactly what it drew before groups existed).
pub fn jobs(scenario: &Scenario) -> Vec<Job> {
    let mut rng = fastrand::Rng::with_seed(scenario.seed ^ 0x6a6f_6273);
    let mut out = Vec::new();
    for (group, spec) in scenario.job_groups().enumerate() {
        let left = crate::scenario::MAX_JOBS.saturating_sub(out.len() as u64);
        let count = spec.count.min(left) as u32;
        let start = Duration::from_millis(spec.start_ms);
        for i in 0..count {
            let offset = match spec.arrival {
                Arrival::Named(_) => Duration::ZERO,
                Arrival::Rate { per_sec } => {
                    Duration::try_from_secs_f64(f64::from(i) / per_sec).unwrap_or(Duration::MAX)
                }
            };
            let [ilo, ihi] = spec.input_tokens;
            let [olo, ohi] = spec.output_tokens;
            out.push(Job {
                id: out.len() as u32,
                arrival: Instant::from_origin(start.saturating_add(offset)),
                input_tokens: rng.u64(ilo..=ihi).max(1),
                max_tokens: spec.max_tokens,
                output_tokens: rng.u64(olo..=ohi).min(spec.max_tokens),
                group: group as u16,
            });
        }
    }
    out
}
