//! Where the simulation is trusted: the headline figures of a virtual and
//! a real run of the same scenario, and the tolerance within which they
//! must agree.
//!
//! | figure | agreement required |
//! |---|---|
//! | `jobs_lost` | 0 in both |
//! | `jobs_done` | within ±2% of the jobs (at least ±5 jobs; ±5 more when the queue stopped) |
//! | `sends_per_done_job` | within ±0.05 |
//! | share of sends answered 429 | both ≤ 1%, or within ±0.01 of each other |
//! | `goodput_ratio` | within ±0.04 |
//! | `sends_after_stop` | 0 in both |
//!
//! The floor of ±5 jobs is for small runs, where a few resets or
//! overloads landing on other sends move `jobs_done`. When a spend cap
//! stops the queue, which of the jobs in flight got in under the cap
//! depends on timing, so 5 more are allowed (measured on a 150-job
//! spend-cap run: virtual 104, real 105–108, the real run keeping a few
//! more sends in flight).
//!
//! Not compared (shown for information): `makespan_s` and the latency
//! percentiles. They are sums of many waits, each of which the real run
//! overshoots by the timer's granularity and the scheduler's delay (about
//! a millisecond of real time, i.e. 60–120 ms of provider time at the
//! usual scales), and the injected faults land on different sends; their
//! differences measure the machine, not the policy. `jobs_done` and the
//! fault-driven counts differ for the same reason: the mock's fault dice
//! are drawn in arrival order, which timing reorders.

use ratewise_sim::Report;
use std::fmt;

/// One figure of both runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// Figure name (as in the JSON report).
    pub figure: &'static str,
    /// The simulation's value.
    pub virtual_value: f64,
    /// The real run's value.
    pub real_value: f64,
    /// The agreement rule, in words.
    pub tolerance: String,
    /// `Some(true)` agrees, `Some(false)` does not, `None` not compared.
    pub ok: Option<bool>,
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match self.ok {
            Some(true) => "agrees",
            Some(false) => "DISAGREES",
            None => "not compared",
        };
        write!(
            f,
            "{:<20} {:>10} {:>10}  {:<34} {}",
            self.figure,
            num(self.virtual_value),
            num(self.real_value),
            self.tolerance,
            verdict
        )
    }
}

fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e12 {
        format!("{x:.0}")
    } else {
        format!("{x:.4}")
    }
}

/// Share of sends answered 429 (0 when nothing was sent).
pub fn share_429(r: &Report) -> f64 {
    if r.sends == 0 {
        0.0
    } else {
        r.sends_429 as f64 / r.sends as f64
    }
}

/// Largest `jobs_done` difference allowed for a workload of `jobs`
/// (`stopped`: a stop ended the run).
pub fn done_tolerance(jobs: u64, stopped: bool) -> f64 {
    (0.02 * jobs as f64).max(5.0) + if stopped { 5.0 } else { 0.0 }
}

/// Compares the headline figures (see the [module](self) docs).
///
/// ```
/// use ratewise_sim::{simulate, Scenario, Strategy};
/// let mut s = Scenario::default_scenario();
/// s.jobs.count = 20;
/// let r = simulate(&s, Strategy::Ratewise, &mut |_, _| {});
/// assert!(ratewise_real::agree::agrees(&ratewise_real::agree::compare(&r, &r)));
/// ```
pub fn compare(virt: &Report, real: &Report) -> Vec<Check> {
    let c = |figure, v: f64, r: f64, tolerance: String, ok: Option<bool>| Check {
        figure,
        virtual_value: v,
        real_value: r,
        tolerance,
        ok,
    };
    let stopped = virt.jobs_stopped > 0 || real.jobs_stopped > 0;
    let done_tol = done_tolerance(virt.jobs_total, stopped);
    let (s_v, s_r) = (share_429(virt), share_429(real));
    vec![
        c(
            "jobs_lost",
            virt.jobs_lost as f64,
            real.jobs_lost as f64,
            "0 in both".into(),
            Some(virt.jobs_lost == 0 && real.jobs_lost == 0),
        ),
        c(
            "jobs_done",
            virt.jobs_done as f64,
            real.jobs_done as f64,
            if stopped {
                format!("within ±{done_tol:.0} (2%, ≥ 5; +5 stopped)")
            } else {
                format!("within ±{done_tol:.0} (2% of jobs, ≥ 5)")
            },
            Some((virt.jobs_done as f64 - real.jobs_done as f64).abs() <= done_tol),
        ),
        c(
            "sends_per_done_job",
            virt.sends_per_done_job,
            real.sends_per_done_job,
            "within ±0.05".into(),
            Some((virt.sends_per_done_job - real.sends_per_done_job).abs() <= 0.05 + 1e-9),
        ),
        c(
            "share_429",
            round4(s_v),
            round4(s_r),
            "both ≤ 0.01, or within ±0.01".into(),
            Some((s_v <= 0.01 && s_r <= 0.01) || (s_v - s_r).abs() <= 0.01),
        ),
        c(
            "goodput_ratio",
            virt.goodput_ratio,
            real.goodput_ratio,
            "within ±0.04".into(),
            Some((virt.goodput_ratio - real.goodput_ratio).abs() <= 0.04 + 1e-9),
        ),
        c(
            "sends_after_stop",
            virt.sends_after_stop as f64,
            real.sends_after_stop as f64,
            "0 in both".into(),
            Some(virt.sends_after_stop == 0 && real.sends_after_stop == 0),
        ),
        c(
            "makespan_s",
            virt.makespan_s,
            real.makespan_s,
            "timing noise: shown only".into(),
            None,
        ),
        c(
            "p50_latency_s",
            virt.p50_latency_s,
            real.p50_latency_s,
            "timing noise: shown only".into(),
            None,
        ),
    ]
}

/// True when every compared figure agrees.
pub fn agrees(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.ok != Some(false))
}

/// The comparison as a small table (header + one line per figure).
pub fn table(checks: &[Check]) -> String {
    let mut s = format!(
        "{:<20} {:>10} {:>10}  {:<34} {}\n",
        "figure", "virtual", "real", "tolerance", "verdict"
    );
    for c in checks {
        s.push_str(&c.to_string());
        s.push('\n');
    }
    s
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}
