//! `backoff-only` and `rpm-only`: one generic retry layer.
//!
//! The layer makes up to [`MAX_ATTEMPTS`] sends per job. It retries 408,
//! 409, 429, 5xx and connection errors; it waits exactly the server's
//! `retry-after` when there is one, else full-jitter exponential backoff:
//! uniform in `[0, min(CAP, BASE · 2^(n−1))]` after the n-th send.
//! `rpm-only` adds what a single-bucket limiter gives: every send (first
//! or retry) waits for a slot of a requests-per-minute pacer running at
//! the configured RPM (one request every `60 / RPM` s, no burst). It knows
//! nothing of tokens.

use super::{header_wait, retryable_status, rng_for};
use crate::engine::{Client, Sim, Terminal};
use crate::provider::{Answered, Delivery, SimProvider};
use crate::scenario::Scenario;
use ratewise_core::Instant;
use std::collections::VecDeque;
use std::time::Duration;

/// Sends per job, the first included.
pub const MAX_ATTEMPTS: u32 = 5;
/// First backoff window.
pub const BASE: Duration = Duration::from_secs(1);
/// Largest backoff window.
pub const CAP: Duration = Duration::from_secs(60);

/// The strategy's state.
#[derive(Debug)]
pub struct Backoff {
    rng: fastrand::Rng,
    /// `Some(interval)` for `rpm-only`.
    pace: Option<Duration>,
    next_slot: Instant,
    ready: VecDeque<u32>,
}

impl Backoff {
    /// A client for `scenario`; `rpm` adds the requests-per-minute pacer.
    pub fn new(scenario: &Scenario, rpm: bool) -> Self {
        let pace = if rpm {
            scenario
                .limits
                .requests_per_min
                .map(|r| Duration::from_secs_f64(60.0 / r as f64))
        } else {
            None
        };
        Backoff {
            rng: rng_for(scenario, if rpm { 0x59a } else { 0xb0f }),
            pace,
            next_slot: Instant::ZERO,
            ready: VecDeque::new(),
        }
    }

    fn go(&mut self, job: u32, sim: &mut Sim) {
        if self.pace.is_none() {
            sim.send(job);
            return;
        }
        self.ready.push_back(job);
        self.pump(sim);
    }

    fn pump(&mut self, sim: &mut Sim) {
        let Some(interval) = self.pace else {
            return;
        };
        let now = sim.now();
        while !self.ready.is_empty() {
            if self.next_slot > now {
                sim.wake(self.next_slot);
                return;
            }
            let job = self.ready.pop_front().expect("not empty");
            self.next_slot = now.max(self.next_slot) + interval;
            sim.send(job);
        }
    }
}

impl Client for Backoff {
    fn on_start(&mut self, job: u32, sim: &mut Sim) {
        self.go(job, sim);
    }

    fn on_answer(&mut self, job: u32, a: &Answered, sim: &mut Sim) {
        let now = sim.now();
        let (retry, hint) = match &a.delivery {
            Delivery::Response { status, .. } if status.is_success() => {
                sim.finish(job, Terminal::Done);
                return;
            }
            Delivery::Response {
                status, headers, ..
            } => (
                retryable_status(status.as_u16()),
                header_wait(headers, SimProvider::wall(now)),
            ),
            Delivery::Reset => (true, None),
        };
        if !retry {
            sim.finish(job, Terminal::Failed);
            return;
        }
        let n = sim.attempts(job);
        if n >= MAX_ATTEMPTS {
            sim.finish(job, Terminal::GivenUp);
            return;
        }
        let delay = hint.unwrap_or_else(|| {
            let window = BASE
                .saturating_mul(1u32 << (n - 1).min(20))
                .min(CAP)
                .as_secs_f64();
            Duration::from_secs_f64(window * self.rng.f64())
        });
        sim.timer(job, now + delay);
    }

    fn on_timer(&mut self, job: u32, sim: &mut Sim) {
        self.go(job, sim);
    }

    fn on_wake(&mut self, sim: &mut Sim) {
        self.pump(sim);
    }
}
