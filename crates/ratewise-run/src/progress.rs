//! What a run tells its driver, as typed [`Event`]s to an [`Observer`]:
//! the library prints nothing (`ratewise run` draws a bar or writes JSON
//! lines from them).
//!
//! The ETA: the requests and tokens still to send over the limits the
//! layer paces with (learned from the provider's headers or configured)
//! give, per dimension, the time those limits need; the jobs left over the
//! throughput seen in this run give another. A limit **binds** when the
//! time it needs is at least half the throughput's (the run goes about as
//! fast as that limit lets it): then it is `binding`, and the ETA is the
//! larger of the two. When no limit binds (limits far above what the run
//! reaches), `binding` is none and the ETA is the throughput's. A pool's
//! members' limits add up (each key's own, a stopped member's left out).

use crate::queue::Rates;
use crate::store::{Counts, StopCause, StopRecord};
use ratewise_core::admit::ScopeSnapshot;
use ratewise_core::Cause;
use serde::Serialize;
use std::time::Duration;

/// Something the run did that its driver may tell a person.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// A line of the input is not run.
    BadLine {
        /// 1-based line number.
        line: u64,
        /// Why.
        why: String,
    },
    /// Jobs were being sent when the last run ended: held as unknown.
    HeldFromLastRun(u64),
    /// `resume_stopped`: stopped jobs pending again.
    Resumed(u64),
    /// `retry_unknown`: held jobs to be sent once more (each may be paid
    /// twice).
    Released(u64),
    /// What an earlier run on this store learned of its keys (stated
    /// limits, capacities, estimates) is where this one starts: how many
    /// model classes were recalled.
    Remembered(usize),
    /// Expired jobs pending again: by `retry_expired`, or because this
    /// run's deadline is later than the one that expired them.
    Revived(u64),
    /// The input changed since the store was made: what was taken.
    InputEdited {
        /// Lines of a `custom_id` the store did not have.
        added: u64,
        /// Lines changed before their job was sent (replaced).
        edited: u64,
        /// Jobs whose line is gone and that were never sent (removed).
        withdrawn: u64,
    },
    /// The queue stopped (now, or in an earlier run and not resumed): the
    /// job whose answer stopped it, the cause ([`cause_in_words`]).
    Stopped(StopRecord),
    /// Once a second while the queue runs, and once at its end.
    Progress(Status),
    /// A batch of the batch path, each time it is polled.
    Batch(crate::batch::BatchStatus),
    /// The config file says something that is read but should be said
    /// otherwise (an old spelling of a `[limits]` word, and its word
    /// today): told once, before anything is sent.
    ConfigWarning(String),
    /// `--redis`: Redis did not answer at the start (why, in words: never
    /// the URL). The run goes on pacing at its share of the key's limits
    /// (one half unless Redis said more), and shares them again as soon
    /// as Redis answers.
    RedisUnavailable(String),
}

/// Told each [`Event`] of a run, on the run's threads: keep it short (a
/// bounded channel's `try_send`, a print).
pub trait Observer: Send + Sync {
    /// One event.
    fn event(&self, event: Event);
}

impl<F: Fn(Event) + Send + Sync> Observer for F {
    fn event(&self, event: Event) {
        self(event)
    }
}

/// An observer that drops every event.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ignore;

impl Observer for Ignore {
    fn event(&self, _event: Event) {}
}

/// A [`StopRecord`]'s cause in words: `spend_cap` is "the provider's spend
/// cap", `budget` "the run's token budget (--budget-tokens)".
pub fn cause_in_words(cause: StopCause) -> &'static str {
    match cause {
        StopCause::Provider(Cause::SpendCap) => "the provider's spend cap or quota was reached",
        StopCause::Provider(Cause::Billing) => {
            "the provider refused for billing (payment required)"
        }
        StopCause::Provider(Cause::UserLimit) => "a usage limit set on the account was reached",
        StopCause::Provider(Cause::Authentication) => "the API key was refused (authentication)",
        StopCause::Provider(Cause::Permission) => {
            "the API key may not use this model or feature (permission)"
        }
        StopCause::Budget => "the run's token budget (--budget-tokens) would be passed",
        StopCause::Provider(_) => "the provider's answer stops every send",
    }
}

/// One progress report.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Jobs done.
    pub done: u64,
    /// Jobs in the store.
    pub total: u64,
    /// Failed (the request must change).
    pub failed: u64,
    /// Expired before a send.
    pub expired: u64,
    /// Held: sent, outcome unknown.
    pub held: u64,
    /// Stopped.
    pub stopped: u64,
    /// Sends in this run.
    pub sends: u64,
    /// Of them, answered 429.
    pub answered_429: u64,
    /// Input tokens the provider reported in the last minute.
    pub input_tokens_per_min: u64,
    /// Output tokens the provider reported in the last minute.
    pub output_tokens_per_min: u64,
    /// The limits paced with (per minute), per scope: `key/class` →
    /// `{requests, input_tokens, output_tokens, tokens}`.
    pub limits: serde_json::Value,
    /// The limit that binds (`requests`, `input_tokens`, `output_tokens`,
    /// `tokens`): the one the run goes about as fast as; none when no
    /// limit binds (see the module's docs).
    pub binding: Option<&'static str>,
    /// Tokens charged to the budget.
    pub budget_spent: u64,
    /// Seconds left: from the binding limit, else from the throughput seen
    /// in this run; none before either is known.
    pub eta_s: Option<u64>,
    /// Seconds since the run began.
    pub elapsed_s: f64,
}

impl Status {
    /// The report of the queue's state; `ended_here` jobs ended in this
    /// run, in `elapsed`.
    #[allow(clippy::too_many_arguments)]
    pub fn from_parts(
        counts: &Counts,
        sends: u64,
        answered_429: u64,
        spent: u64,
        rates: &Rates,
        snapshots: &[ScopeSnapshot],
        elapsed: Duration,
        ended_here: u64,
    ) -> Status {
        let (i, o) = rates.last_minute();
        let mut limits = serde_json::Map::new();
        // Per key, the tightest known limit of each dimension over its
        // scopes; a pool's keys add up (a stopped key adds nothing).
        let mut per_key: std::collections::BTreeMap<&str, [Option<u64>; 4]> =
            std::collections::BTreeMap::new();
        for s in snapshots {
            let l = s.limits;
            limits.insert(
                format!("{}/{}", s.key, s.class),
                serde_json::json!({
                    "requests": l.requests, "input_tokens": l.input_tokens,
                    "output_tokens": l.output_tokens, "tokens": l.tokens,
                }),
            );
            if s.stopped.is_some() {
                continue;
            }
            let tightest = per_key.entry(s.key.as_str()).or_insert([None; 4]);
            for (slot, v) in
                tightest
                    .iter_mut()
                    .zip([l.requests, l.input_tokens, l.output_tokens, l.tokens])
            {
                if let Some(v) = v.filter(|v| *v > 0) {
                    *slot = Some(slot.map_or(v, |s| s.min(v)));
                }
            }
        }
        let mut tightest: [Option<u64>; 4] = [None; 4];
        for key in per_key.values() {
            for (sum, v) in tightest.iter_mut().zip(key) {
                if let Some(v) = v {
                    *sum = Some(sum.unwrap_or(0).saturating_add(*v));
                }
            }
        }
        let left_jobs = counts.pending + counts.sending;
        // Output: the caps scaled by how much of them answers used so far.
        let out_left = if rates.output_capped > 0 {
            (counts.remaining_output as f64 * rates.output_used as f64 / rates.output_capped as f64)
                as u64
        } else {
            counts.remaining_output
        };
        let needs = [
            ("requests", left_jobs),
            ("input_tokens", counts.remaining_input),
            ("output_tokens", out_left),
            ("tokens", counts.remaining_input + out_left),
        ];
        // Seconds each known limit needs for what is left; the largest.
        let mut by_limit: Option<(f64, &'static str)> = None;
        for ((name, need), limit) in needs.into_iter().zip(tightest) {
            if let Some(per_min) = limit {
                let seconds = need as f64 / per_min as f64 * 60.0;
                if by_limit.is_none_or(|(m, _)| seconds > m) {
                    by_limit = Some((seconds, name));
                }
            }
        }
        // Seconds at the throughput seen in this run.
        let secs = elapsed.as_secs_f64();
        let by_throughput =
            (ended_here > 0 && secs > 0.0).then(|| left_jobs as f64 / (ended_here as f64 / secs));
        let (eta, binding) = match (by_throughput, by_limit) {
            (Some(t), Some((l, name))) if l >= t / 2.0 => (Some(t.max(l)), Some(name)),
            (Some(t), _) => (Some(t), None),
            (None, Some((l, _))) => (Some(l), None),
            (None, None) => (None, None),
        };
        Status {
            done: counts.done,
            total: counts.total,
            failed: counts.failed,
            expired: counts.expired,
            held: counts.held,
            stopped: counts.stopped,
            sends,
            answered_429,
            input_tokens_per_min: i,
            output_tokens_per_min: o,
            limits: serde_json::Value::Object(limits),
            binding: if left_jobs == 0 { None } else { binding },
            budget_spent: spent,
            eta_s: if left_jobs == 0 {
                Some(0)
            } else {
                eta.map(|s| s.ceil() as u64)
            },
            elapsed_s: (elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
        }
    }
}
