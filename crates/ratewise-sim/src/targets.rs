//! The claims the `ratewise` strategy must meet on a shipped scenario,
//! checked against the other strategies of the same run.
//!
//! * `goodput_ratio ≥ 0.95` on every scenario, and no more than
//!   [`GOODPUT_TOLERANCE`] below any other strategy's;
//! * on a cold start, no acceleration 429s;
//! * at most 1 % of sends answered 429;
//! * `sends_per_done_job ≤ 1.02 × 1 / (1 − fault_rate)`, and no more than
//!   any other strategy's (one that finished no job has none);
//! * at least as many jobs done as any other strategy;
//! * no send after a money answer; no lost job.
//!
//! Why a tolerance on goodput and not a strict win: a strategy that
//! hammers the provider keeps its bucket empty and so uses it to the last
//! token while it loses half its jobs; a careful client that keeps a
//! margin against a bucket of a few seconds trails it by a few thousandths
//! while finishing every job with no 429. The goodput claim is that
//! ratewise leaves no more than 1 % of the limit on the table; the other
//! claims say what that buys.

use crate::metrics::Report;
use crate::scenario::Scenario;

/// Goodput floor.
pub const MIN_GOODPUT: f64 = 0.95;
/// How far below another strategy's goodput ratewise's may be.
pub const GOODPUT_TOLERANCE: f64 = 0.01;
/// Largest share of sends answered 429.
pub const MAX_429_SHARE: f64 = 0.01;
/// Sends per done job over the unavoidable minimum.
pub const MAX_SENDS_FACTOR: f64 = 1.02;
/// Every claim `ratewise` (the first report named `ratewise`) misses on
/// this run; empty when all hold.
pub fn check(scenario: &Scenario, reports: &[Report]) -> Vec<String> {
    let mut miss = Vec::new();
    let Some(r) = reports.iter().find(|r| r.strategy == "ratewise") else {
        return vec!["no ratewise report".to_owned()];
    };
    if r.goodput_ratio < MIN_GOODPUT {
        miss.push(format!("goodput {:.3} < {MIN_GOODPUT}", r.goodput_ratio));
    }
    if !scenario.warm && r.sends_429_acceleration > 0 {
        miss.push(format!(
            "{} acceleration 429s on a cold start",
            r.sends_429_acceleration
        ));
    }
    if r.sends_429 as f64 > MAX_429_SHARE * r.sends as f64 {
        miss.push(format!("{} of {} sends answered 429", r.sends_429, r.sends));
    }
    let bound = MAX_SENDS_FACTOR * r.min_sends_per_done_job;
    if r.sends_per_done_job > bound {
        miss.push(format!(
            "sends per done job {:.4} > {bound:.4}",
            r.sends_per_done_job
        ));
    }
    if r.sends_after_stop > 0 {
        miss.push(format!("{} sends after a stop", r.sends_after_stop));
    }
    if r.jobs_lost > 0 {
        miss.push(format!("{} jobs lost", r.jobs_lost));
    }
    for o in reports.iter().filter(|o| o.strategy != "ratewise") {
        if r.goodput_ratio < o.goodput_ratio - GOODPUT_TOLERANCE {
            miss.push(format!(
                "goodput {:.4} more than {GOODPUT_TOLERANCE} below {}'s {:.4}",
                r.goodput_ratio, o.strategy, o.goodput_ratio
            ));
        }
        if o.jobs_done > 0 && r.sends_per_done_job > o.sends_per_done_job {
            miss.push(format!(
                "sends per done job {:.4} above {}'s {:.4}",
                r.sends_per_done_job, o.strategy, o.sends_per_done_job
            ));
        }
        if r.jobs_done < o.jobs_done {
            miss.push(format!(
                "{} jobs done, fewer than {}'s {}",
                r.jobs_done, o.strategy, o.jobs_done
            ));
        }
    }
    miss
}
