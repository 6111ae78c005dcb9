//! The claims the `ratewise` strategy must meet on a shipped scenario,
//! checked against the other strategies of the same run.
//!
//! * `goodput_ratio ≥ 0.95` on a warm scenario; on a cold start, the best
//!   goodput of all strategies and no acceleration 429s.
//! * at most 1 % of sends answered 429;
//! * `sends_per_done_job ≤ 1.02 × 1 / (1 − fault_rate)`;
//! * no send after a money answer; no lost job;
//! * against every other strategy: better on goodput or on sends per done
//!   job, and not worse on the other — strictly, with no tolerance.

use crate::metrics::Report;
use crate::scenario::Scenario;

/// Goodput floor on warm scenarios.
pub const MIN_GOODPUT: f64 = 0.95;
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
    if scenario.warm && r.goodput_ratio < MIN_GOODPUT {
        miss.push(format!("goodput {:.3} < {MIN_GOODPUT}", r.goodput_ratio));
    }
    if !scenario.warm {
        for o in reports.iter().filter(|o| o.strategy != "ratewise") {
            if o.goodput_ratio > r.goodput_ratio {
                miss.push(format!(
                    "cold start: goodput {:.4} below {}'s {:.4}",
                    r.goodput_ratio, o.strategy, o.goodput_ratio
                ));
            }
        }
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
        let better_goodput = r.goodput_ratio > o.goodput_ratio;
        let better_sends = r.sends_per_done_job < o.sends_per_done_job || o.jobs_done == 0;
        let goodput_ok = r.goodput_ratio >= o.goodput_ratio;
        let sends_ok = r.sends_per_done_job <= o.sends_per_done_job || o.jobs_done == 0;
        let beats = (better_goodput && sends_ok) || (better_sends && goodput_ok);
        if !beats {
            miss.push(format!(
                "does not beat {}: goodput {:.4} vs {:.4}, sends/done {:.4} vs {:.4}",
                o.strategy,
                r.goodput_ratio,
                o.goodput_ratio,
                r.sends_per_done_job,
                o.sends_per_done_job
            ));
        }
    }
    miss
}
