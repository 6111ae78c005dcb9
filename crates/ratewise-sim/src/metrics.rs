//! What a run measured, and the exact definitions of every figure.
//!
//! * **jobs_\***: every job ends exactly once — `done`, `failed` (not
//!   retryable, or `inspect`), `given_up` (attempts, deadline or a budget
//!   spent), `held_unknown` (sent, no answer, not retried), `stopped` (kept
//!   unsent: the queue stopped for money). `jobs_lost` counts jobs with no
//!   end at all when the run finished (must be 0).
//! * **sends**: requests that reached the provider, first attempts and
//!   retries alike. `sends_429`: those answered 429 (rate limits,
//!   acceleration, and a spend cap answered 429). `sends_after_stop`: sends
//!   made after the client had received a money answer (spend cap or
//!   billing) — it knew, and sent anyway.
//! * **sends_per_done_job** = `sends / jobs_done`. With every send failing
//!   independently with probability `fault_rate` (overloads are retried,
//!   resets are held and not retried), no client can do better than
//!   `1 / (1 − fault_rate)` in expectation: each send succeeds with
//!   probability `1 − fault_rate`, whatever the retry policy.
//!   `min_sends_per_done_job` states it.
//! * **binding dimension**: the limited dimension with the highest demand
//!   over limit, demand being the whole workload's requests, input tokens,
//!   actual output tokens (or input + output for `tokens`).
//! * **goodput_ratio**: units of the binding dimension the provider
//!   admitted for successful sends, divided by the most any client could
//!   have got while work was waiting: what a greedy client (one that takes
//!   every unit the moment the bucket has it) gets, namely the bucket's
//!   level when work first waits (a provider's bucket starts full, holding
//!   `capacity_seconds` of the limit — a minute by default, so the first
//!   minute can admit up to twice the rate), plus `limit × waiting
//!   minutes`, plus for each later waiting interval the refill of the gap
//!   before it (at most a full bucket's worth). "Waiting" = at least one job
//!   has arrived, has not ended and is not in flight (queued, paced or
//!   backing off): while every outstanding job is being answered there is
//!   nothing a client could send, so the drain at the end of a run and the
//!   lulls of a client that keeps up are not held against it. 1.0 means
//!   the client used every unit the provider offered while it had work to
//!   send.
//! * **makespan_s**: first arrival to the last job's end.
//! * **latency**: a done job's answer time minus its arrival, p50 and p99
//!   (nearest rank).
//! * **spend_tokens**: input + output tokens of every success (what was
//!   billed).
//! * **tenants**: on a tenants scenario (job groups with levels and
//!   flows), per flow and per level: jobs, done, wait p50/p95 and cost
//!   share, defined in [`crate::tenants`].

use crate::engine::Terminal;
use crate::provider::{Answered, Verdict};
use crate::scenario::Scenario;
use crate::tenants::{TenantLog, TenantReport};
use crate::workload::Job;
use ratewise_core::{Dimension, Instant};
use serde::Serialize;

/// One send, for plots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendSample {
    /// Send time, ms since the run started.
    pub t_ms: u64,
    /// What the provider answered.
    pub verdict: Verdict,
}

/// The figures of one strategy on one scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Strategy name.
    pub strategy: String,
    /// Scenario name.
    pub scenario: String,
    /// Jobs in the workload.
    pub jobs_total: u64,
    /// Answered successfully.
    pub jobs_done: u64,
    /// Not retryable (or inspect).
    pub jobs_failed: u64,
    /// Retryable, bounds spent.
    pub jobs_given_up: u64,
    /// Sent, no answer, held.
    pub jobs_held_unknown: u64,
    /// Kept unsent: queue stopped.
    pub jobs_stopped: u64,
    /// No end at all (must be 0).
    pub jobs_lost: u64,
    /// Done, but after the job's deadline.
    pub jobs_late: u64,
    /// Requests sent.
    pub sends: u64,
    /// Sends answered 429.
    pub sends_429: u64,
    /// Sends answered 429 by the acceleration limit.
    pub sends_429_acceleration: u64,
    /// Sends after the tenth 429 (0 until then): how a client does once it
    /// has had ten chances to learn (the closed-loop claim).
    #[serde(default)]
    pub sends_after_tenth_429: u64,
    /// Of those, answered 429.
    #[serde(default)]
    pub sends_429_after_tenth: u64,
    /// Sends whose connection reset after sending.
    pub sends_reset: u64,
    /// Sends made after the client received a money answer.
    pub sends_after_stop: u64,
    /// `sends / jobs_done` (0 when nothing was done).
    pub sends_per_done_job: f64,
    /// Injected per-send fault probability (overloads + resets).
    pub fault_rate: f64,
    /// `1 / (1 − fault_rate)`.
    pub min_sends_per_done_job: f64,
    /// The binding dimension.
    pub binding_dimension: Dimension,
    /// Admitted binding units over the provider's allowance while waiting.
    pub goodput_ratio: f64,
    /// First arrival to last end, seconds.
    pub makespan_s: f64,
    /// Median latency of done jobs, seconds.
    pub p50_latency_s: f64,
    /// 99th percentile latency of done jobs, seconds.
    pub p99_latency_s: f64,
    /// Billed tokens.
    pub spend_tokens: u64,
    /// Every send, for plots (not serialised).
    #[serde(skip)]
    pub timeline: Vec<SendSample>,
    /// A tenants scenario's rows, per flow and per level (see
    /// [`crate::tenants`]); empty, and not serialised, on any other.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<TenantReport>,
    /// A tenants scenario's sends per group, for its targets (not
    /// serialised).
    #[serde(skip)]
    pub tenant_log: Option<TenantLog>,
}

/// Collects a run's measurements.
#[derive(Debug)]
pub struct Recorder {
    scenario: String,
    jobs_total: u64,
    fault_rate: f64,
    min_spdj: f64,
    binding: Dimension,
    binding_limit: u64,
    capacity_secs: f64,
    deadline_ms: Option<u64>,
    ends: [u64; 5],
    sends: u64,
    sends_429: u64,
    sends_after_tenth: u64,
    sends_429_after_tenth: u64,
    sends_accel: u64,
    sends_reset: u64,
    sends_after_stop: u64,
    money_seen: bool,
    admitted: u64,
    spend_tokens: u64,
    latencies: Vec<f64>,
    late: u64,
    open_since: Option<Instant>,
    waiting_secs: f64,
    credit: f64,
    closed_at: Option<Instant>,
    sent_since_check: bool,
    first_arrival: Option<Instant>,
    last_end: Instant,
    timeline: Vec<SendSample>,
    tenants: Option<TenantLog>,
}

/// Units the provider's bucket of `limit` per minute really holds when
/// full: `capacity_seconds` of the limit (a minute by default), less a
/// `bias.capacity_shortfall` (the same as [`crate::provider::SimProvider::level`]
/// of a bucket never used).
pub fn full_bucket(scenario: &Scenario, limit: u64) -> u64 {
    let real = 1.0 - scenario.bias.map_or(0.0, |b| b.capacity_shortfall);
    (limit as f64 * scenario.limits.capacity_seconds / 60.0 * real).floor() as u64
}

/// The binding dimension of a workload and its limit.
pub fn binding_dimension(scenario: &Scenario, jobs: &[Job]) -> (Dimension, u64) {
    let mut best = (Dimension::Requests, u64::MAX, -1.0f64);
    for d in [
        Dimension::Requests,
        Dimension::InputTokens,
        Dimension::OutputTokens,
        Dimension::Tokens,
    ] {
        let Some(limit) = scenario.limits.get(d) else {
            continue;
        };
        let demand: u64 = jobs.iter().map(|j| units(d, j)).sum();
        let ratio = demand as f64 / limit as f64;
        if ratio > best.2 {
            best = (d, limit, ratio);
        }
    }
    (best.0, best.1)
}

/// What one successful job charges to a dimension, after the output
/// correction.
pub fn units(d: Dimension, j: &Job) -> u64 {
    match d {
        Dimension::Requests => 1,
        Dimension::InputTokens => j.input_tokens,
        Dimension::OutputTokens => j.output_tokens,
        // `Tokens`, and any dimension added later: everything counts.
        _ => j.input_tokens + j.output_tokens,
    }
}

fn slot(t: Terminal) -> usize {
    match t {
        Terminal::Done => 0,
        Terminal::Failed => 1,
        Terminal::GivenUp => 2,
        Terminal::HeldUnknown => 3,
        Terminal::Stopped => 4,
    }
}

impl Recorder {
    /// A recorder for `jobs` of `scenario`.
    pub fn new(scenario: &Scenario, jobs: &[Job]) -> Self {
        let (binding, binding_limit) = binding_dimension(scenario, jobs);
        Recorder {
            scenario: scenario.name.clone(),
            jobs_total: jobs.len() as u64,
            fault_rate: scenario.fault_rate(),
            min_spdj: scenario.min_sends_per_done_job(),
            binding,
            binding_limit,
            capacity_secs: scenario.limits.capacity_seconds,
            deadline_ms: scenario.deadline_ms,
            ends: [0; 5],
            sends: 0,
            sends_429: 0,
            sends_after_tenth: 0,
            sends_429_after_tenth: 0,
            sends_accel: 0,
            sends_reset: 0,
            sends_after_stop: 0,
            money_seen: false,
            admitted: 0,
            spend_tokens: 0,
            latencies: Vec::with_capacity(jobs.len()),
            late: 0,
            open_since: None,
            waiting_secs: 0.0,
            credit: 0.0,
            closed_at: None,
            sent_since_check: false,
            first_arrival: jobs.iter().map(|j| j.arrival).min(),
            last_end: Instant::ZERO,
            timeline: Vec::new(),
            tenants: TenantLog::new(scenario, jobs),
        }
    }

    /// The binding dimension.
    pub fn binding(&self) -> Dimension {
        self.binding
    }

    /// Its per-minute limit.
    pub fn binding_limit(&self) -> u64 {
        self.binding_limit
    }

    /// A send and the provider's verdict.
    pub fn on_send(&mut self, job: &Job, a: &Answered, now: Instant) {
        self.sends += 1;
        self.sent_since_check = true;
        if self.money_seen {
            self.sends_after_stop += 1;
        }
        let after_tenth = self.sends_429 >= 10;
        if after_tenth {
            self.sends_after_tenth += 1;
        }
        if a.delivery.status() == Some(429) {
            self.sends_429 += 1;
            if after_tenth {
                self.sends_429_after_tenth += 1;
            }
        }
        match a.verdict {
            Verdict::SlowDown => self.sends_accel += 1,
            Verdict::Reset => self.sends_reset += 1,
            Verdict::Success => {
                self.admitted += units(self.binding, job);
                self.spend_tokens += job.input_tokens + job.output_tokens;
                if let Some(t) = &mut self.tenants {
                    t.on_success(job, now);
                }
            }
            _ => {}
        }
        // Bounded by the sends a run can make; a plot needs every one.
        self.timeline.push(SendSample {
            t_ms: u64::try_from(now.since_origin().as_millis()).unwrap_or(u64::MAX),
            verdict: a.verdict,
        });
    }

    /// A money answer reached the client.
    pub fn on_money_answer(&mut self) {
        self.money_seen = true;
    }

    /// A job ended.
    pub fn on_end(&mut self, job: &Job, how: Terminal, now: Instant) {
        self.ends[slot(how)] += 1;
        self.last_end = self.last_end.max(now);
        if how == Terminal::Done {
            let lat = now.saturating_duration_since(job.arrival);
            self.latencies.push(lat.as_secs_f64());
            if self
                .deadline_ms
                .is_some_and(|d| lat.as_millis() > u128::from(d))
            {
                self.late += 1;
            }
        }
    }

    /// True when no job is waiting.
    pub fn is_idle(&self) -> bool {
        self.open_since.is_none()
    }

    /// After each event: how many jobs are waiting (arrived, not ended,
    /// not in flight), and the binding bucket's level before the event.
    ///
    /// The allowance is what the greedy client — the one that takes every
    /// unit the moment it is available while work waits — would have got,
    /// and no client gets more (taking earlier never loses units to a
    /// bucket's cap): the real bucket level when the first waiting interval
    /// opens, the refill while work waits, and for each later interval the
    /// refill of the gap before it, capped at a full bucket (`limit ×
    /// capacity_seconds / 60`: the greedy client left the bucket empty when
    /// the previous interval closed).
    /// Crediting the real level at every opening would count a slow
    /// client's leftovers again and again.
    pub fn on_waiting(&mut self, waiting: u64, level: u64, now: Instant) {
        // A send is work that was waiting at that instant, even when the
        // job went out in the same event that made it ready.
        let sent = std::mem::take(&mut self.sent_since_check);
        match (waiting > 0, self.open_since) {
            (true, None) => {
                self.credit += self.opening_credit(level, now);
                self.open_since = Some(now);
            }
            (false, None) if sent => {
                self.credit += self.opening_credit(level, now);
                self.closed_at = Some(now);
            }
            (false, Some(since)) => {
                self.waiting_secs += now.saturating_duration_since(since).as_secs_f64();
                self.open_since = None;
                self.closed_at = Some(now);
            }
            _ => {}
        }
    }

    /// What the greedy client finds in the bucket when work starts waiting
    /// at `now`: the real level the first time, afterwards the refill since
    /// work last stopped waiting (at most a full bucket).
    fn opening_credit(&self, level: u64, now: Instant) -> f64 {
        let per_sec = self.binding_limit as f64 / 60.0;
        match self.closed_at {
            None => level as f64,
            Some(closed) => {
                let gap = now.saturating_duration_since(closed).as_secs_f64();
                (per_sec * gap).min(per_sec * self.capacity_secs)
            }
        }
    }

    /// The report.
    pub fn finish(mut self, strategy: &str, now: Instant) -> Report {
        if let Some(since) = self.open_since.take() {
            self.waiting_secs += now.saturating_duration_since(since).as_secs_f64();
        }
        let ended: u64 = self.ends.iter().sum();
        let done = self.ends[0];
        self.latencies.sort_by(f64::total_cmp);
        let pct = |p: f64| -> f64 {
            if self.latencies.is_empty() {
                return 0.0;
            }
            let rank = ((p * self.latencies.len() as f64).ceil() as usize).max(1);
            self.latencies[rank.min(self.latencies.len()) - 1]
        };
        let allowance = self.binding_limit as f64 / 60.0 * self.waiting_secs + self.credit;
        let first = self.first_arrival.unwrap_or(Instant::ZERO);
        Report {
            strategy: strategy.to_owned(),
            scenario: self.scenario.clone(),
            jobs_total: self.jobs_total,
            jobs_done: done,
            jobs_failed: self.ends[1],
            jobs_given_up: self.ends[2],
            jobs_held_unknown: self.ends[3],
            jobs_stopped: self.ends[4],
            jobs_lost: self.jobs_total - ended,
            jobs_late: self.late,
            sends: self.sends,
            sends_429: self.sends_429,
            sends_429_acceleration: self.sends_accel,
            sends_after_tenth_429: self.sends_after_tenth,
            sends_429_after_tenth: self.sends_429_after_tenth,
            sends_reset: self.sends_reset,
            sends_after_stop: self.sends_after_stop,
            sends_per_done_job: round4(if done == 0 {
                0.0
            } else {
                self.sends as f64 / done as f64
            }),
            fault_rate: round4(self.fault_rate),
            min_sends_per_done_job: round4(self.min_spdj),
            binding_dimension: self.binding,
            goodput_ratio: round4(if allowance > 0.0 {
                self.admitted as f64 / allowance
            } else {
                0.0
            }),
            makespan_s: round4(self.last_end.saturating_duration_since(first).as_secs_f64()),
            p50_latency_s: round4(pct(0.50)),
            p99_latency_s: round4(pct(0.99)),
            spend_tokens: self.spend_tokens,
            timeline: std::mem::take(&mut self.timeline),
            tenants: self.tenants.as_ref().map_or_else(Vec::new, TenantLog::rows),
            tenant_log: self.tenants.take(),
        }
    }
}

/// Rounds to 4 decimals: JSON stays short and byte-identical across runs.
fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Delivery;
    use std::time::Duration;

    fn ok() -> Answered {
        Answered {
            delivery: Delivery::Response {
                status: http::StatusCode::OK,
                headers: http::HeaderMap::new(),
                body: Vec::new(),
            },
            verdict: Verdict::Success,
            grant: None,
            latency: Duration::ZERO,
        }
    }

    /// A requests-bound recorder (60 per minute: one unit per second).
    fn recorder() -> (Recorder, Job) {
        recorder_with_capacity(60.0)
    }

    fn recorder_with_capacity(capacity_seconds: f64) -> (Recorder, Job) {
        let mut s = Scenario::default_scenario();
        s.limits.capacity_seconds = capacity_seconds;
        s.limits.requests_per_min = Some(60);
        s.limits.input_tokens_per_min = None;
        s.limits.output_tokens_per_min = None;
        s.limits.tokens_per_min = None;
        let job = Job {
            id: 0,
            arrival: Instant::ZERO,
            input_tokens: 10,
            max_tokens: 10,
            output_tokens: 10,
            group: 0,
        };
        let r = Recorder::new(&s, &[job]);
        assert_eq!((r.binding(), r.binding_limit()), (Dimension::Requests, 60));
        (r, job)
    }

    fn at(s: u64) -> Instant {
        Instant::from_millis(s * 1000)
    }

    #[test]
    fn leftovers_of_a_slow_client_are_credited_once() {
        let (mut r, job) = recorder();
        // Work waits for 10 s with a full bucket (60), twice, 100 s apart;
        // the client sends one request each time.
        r.on_waiting(1, 60, at(0));
        r.on_send(&job, &ok(), at(10));
        r.on_waiting(0, 0, at(10));
        r.on_waiting(1, 60, at(110));
        r.on_send(&job, &ok(), at(120));
        r.on_waiting(0, 0, at(120));
        let rep = r.finish("t", at(120));
        // Greedy: 60 + 10 the first time; min(60, 100) + 10 the second.
        assert_eq!(rep.goodput_ratio, round4(2.0 / 140.0));
    }

    #[test]
    fn a_full_bucket_is_the_real_one() {
        let mut s = Scenario::default_scenario();
        s.limits.capacity_seconds = 10.0;
        assert_eq!(full_bucket(&s, 12_000), 2_000);
        s.bias = Some(ratewise_mock::BiasConfig {
            capacity_shortfall: 0.2,
            ..Default::default()
        });
        assert_eq!(full_bucket(&s, 12_000), 1_600);
        // and the simulated provider agrees on a bucket never used
        let mut p = crate::provider::SimProvider::new(&s);
        let limit = s.limits.input_tokens_per_min.unwrap();
        assert_eq!(
            p.level(ratewise_core::Dimension::InputTokens, limit, Instant::ZERO),
            full_bucket(&s, limit)
        );
    }

    #[test]
    fn a_short_bucket_caps_the_credit_of_a_gap_at_its_capacity() {
        let (mut r, job) = recorder_with_capacity(10.0);
        // The same run as above against 10 s buckets: the provider's full
        // bucket holds 10, and a 100 s gap refills at most 10.
        r.on_waiting(1, 10, at(0));
        r.on_send(&job, &ok(), at(10));
        r.on_waiting(0, 0, at(10));
        r.on_waiting(1, 10, at(110));
        r.on_send(&job, &ok(), at(120));
        r.on_waiting(0, 0, at(120));
        let rep = r.finish("t", at(120));
        assert_eq!(rep.goodput_ratio, round4(2.0 / 40.0));
    }

    #[test]
    fn a_send_in_the_event_that_made_it_ready_is_waiting_work() {
        let (mut r, job) = recorder();
        r.on_waiting(1, 60, at(0));
        r.on_send(&job, &ok(), at(0));
        r.on_waiting(0, 0, at(0));
        // Answered and re-sent within one event 30 s later: no interval
        // opens, yet the 30 s of refill before it were on offer.
        r.on_send(&job, &ok(), at(30));
        r.on_waiting(0, 0, at(30));
        let rep = r.finish("t", at(30));
        assert_eq!(rep.goodput_ratio, round4(2.0 / 90.0));
    }

    #[test]
    fn in_flight_only_time_is_not_waiting() {
        let (mut r, job) = recorder();
        r.on_waiting(1, 0, at(0));
        r.on_send(&job, &ok(), at(1));
        // In flight from 1 s to 600 s: nothing to send, nothing owed.
        r.on_waiting(0, 0, at(1));
        let rep = r.finish("t", at(600));
        assert_eq!(rep.goodput_ratio, 1.0);
    }
}
