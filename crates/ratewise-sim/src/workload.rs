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
}

/// Draws the jobs of `scenario`.
pub fn jobs(scenario: &Scenario) -> Vec<Job> {
    let mut rng = fastrand::Rng::with_seed(scenario.seed ^ 0x6a6f_6273);
    let spec = &scenario.jobs;
    let count = spec.count.min(crate::scenario::MAX_JOBS) as u32;
    (0..count)
        .map(|id| {
            let arrival = match spec.arrival {
                Arrival::Named(_) => Instant::ZERO,
                Arrival::Rate { per_sec } => Instant::from_origin(
                    Duration::try_from_secs_f64(f64::from(id) / per_sec).unwrap_or(Duration::MAX),
                ),
            };
            let [ilo, ihi] = spec.input_tokens;
            let [olo, ohi] = spec.output_tokens;
            Job {
                id,
                arrival,
                input_tokens: rng.u64(ilo..=ihi).max(1),
                max_tokens: spec.max_tokens,
                output_tokens: rng.u64(olo..=ohi).min(spec.max_tokens),
            }
        })
        .collect()
}
