//! `sdk-naive`: the official SDKs' retries inside an application loop.
//!
//! Each SDK call makes up to 3 sends (2 retries). It retries when
//! `x-should-retry` says so, else on 408, 409, 429, 5xx and connection
//! errors. The wait honours `retry-after-ms` / `retry-after` when it is
//! above 0 and at most 60 s; otherwise it is `min(0.5 · 2^n, 8)` s times a
//! random factor in `[0.75, 1]`, n being the retries already made. Around
//! the call, the application loop makes 3 attempts with a fixed 2 s sleep
//! after a failure, catching every error. There is no admission control:
//! each worker sends as soon as it has a job.

use super::{header_wait, retryable_status, rng_for};
use crate::engine::{Client, Sim, Terminal};
use crate::provider::{Answered, Delivery, SimProvider};
use crate::scenario::Scenario;
use ratewise_core::parse::retry_after::X_SHOULD_RETRY;
use std::time::Duration;

const SDK_MAX_RETRIES: u32 = 2;
const OUTER_ATTEMPTS: u32 = 3;
const OUTER_SLEEP: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, Default)]
struct State {
    outer: u32,
    retries: u32,
}

/// The strategy's state.
#[derive(Debug)]
pub struct SdkNaive {
    jobs: Vec<State>,
    rng: fastrand::Rng,
}

impl SdkNaive {
    /// A client for `scenario`.
    pub fn new(scenario: &Scenario) -> Self {
        SdkNaive {
            jobs: vec![State::default(); scenario.total_jobs() as usize],
            rng: rng_for(scenario, 0x5d4),
        }
    }
}

impl Client for SdkNaive {
    fn on_start(&mut self, job: u32, sim: &mut Sim) {
        sim.send(job);
    }

    fn on_answer(&mut self, job: u32, a: &Answered, sim: &mut Sim) {
        let now = sim.now();
        let st = &mut self.jobs[job as usize];
        let (retry, wait) = match &a.delivery {
            Delivery::Response { status, .. } if status.is_success() => {
                sim.finish(job, Terminal::Done);
                return;
            }
            Delivery::Response {
                status, headers, ..
            } => {
                let should = match headers.get(X_SHOULD_RETRY).map(|v| v.as_bytes()) {
                    Some(b"true") => true,
                    Some(b"false") => false,
                    _ => retryable_status(status.as_u16()),
                };
                let hint = header_wait(headers, SimProvider::wall(now))
                    .filter(|d| !d.is_zero() && *d <= Duration::from_secs(60));
                (should, hint)
            }
            Delivery::Reset => (true, None),
        };
        if retry && st.retries < SDK_MAX_RETRIES {
            let delay = wait.unwrap_or_else(|| {
                let base = (0.5 * 2f64.powi(st.retries as i32)).min(8.0);
                Duration::from_secs_f64(base * (1.0 - 0.25 * self.rng.f64()))
            });
            st.retries += 1;
            sim.timer(job, now + delay);
            return;
        }
        st.outer += 1;
        if st.outer < OUTER_ATTEMPTS {
            st.retries = 0;
            sim.timer(job, now + OUTER_SLEEP);
        } else {
            sim.finish(
                job,
                if retry {
                    Terminal::GivenUp
                } else {
                    Terminal::Failed
                },
            );
        }
    }

    fn on_timer(&mut self, job: u32, sim: &mut Sim) {
        sim.send(job);
    }

    fn on_wake(&mut self, _sim: &mut Sim) {}
}
