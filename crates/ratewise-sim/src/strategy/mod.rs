//! The client strategies compared by a run.
//!
//! * [`ratewise`] — the default policy of `ratewise-core`: admission
//!   control (shared buckets, ramp, pauses, stops) and the decision table,
//!   reading each rendered response with the same `classify` → `decide` →
//!   controller path users run.
//! * [`sdk_naive`] — what the official SDKs do inside an application loop.
//! * [`backoff`] — one retry layer with full-jitter backoff, with or
//!   without a requests-per-minute limiter (`backoff-only`, `rpm-only`).
//! * [`oracle`] — not a client anyone can build: it reads the provider's
//!   true state and sends each job the first instant it fits. It is the
//!   yardstick the targets measure ratewise's goodput against, so it is
//!   not in [`Strategy::ALL`] (the table `ratewise simulate` prints by
//!   default) but in [`Strategy::WITH_ORACLE`].

pub mod backoff;
pub mod oracle;
pub mod queue;
pub mod ratewise;
pub mod sdk_naive;

use crate::engine::{run, Client};
use crate::metrics::Report;
use crate::scenario::Scenario;
use http::HeaderMap;
use ratewise_core::parse::retry_after::RetryHeaders;
use std::time::Duration;

/// A strategy by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// ratewise's default policy.
    Ratewise,
    /// SDK retries inside an application retry loop.
    SdkNaive,
    /// One full-jitter retry layer, no admission control.
    BackoffOnly,
    /// A requests-per-minute limiter plus the retry layer.
    RpmOnly,
    /// Sees the provider's true state: the best any client could do.
    Oracle,
}

impl Strategy {
    /// Every strategy, ratewise first.
    pub const ALL: [Strategy; 4] = [
        Strategy::Ratewise,
        Strategy::SdkNaive,
        Strategy::BackoffOnly,
        Strategy::RpmOnly,
    ];

    /// [`Strategy::ALL`] and the [`Strategy::Oracle`] last: what
    /// [`crate::targets::check`] compares. The oracle is kept out of
    /// `ALL` because `ALL` is the default table (the README's demo and its
    /// table of shipped scenarios are that table, checked by a test).
    pub const WITH_ORACLE: [Strategy; 5] = [
        Strategy::Ratewise,
        Strategy::SdkNaive,
        Strategy::BackoffOnly,
        Strategy::RpmOnly,
        Strategy::Oracle,
    ];

    /// The CLI name.
    pub const fn name(self) -> &'static str {
        match self {
            Strategy::Ratewise => "ratewise",
            Strategy::SdkNaive => "sdk-naive",
            Strategy::BackoffOnly => "backoff-only",
            Strategy::RpmOnly => "rpm-only",
            Strategy::Oracle => "oracle",
        }
    }

    /// Reads a CLI name (the oracle's included).
    pub fn from_name(name: &str) -> Option<Strategy> {
        Strategy::WITH_ORACLE.into_iter().find(|s| s.name() == name)
    }

    fn client(self, scenario: &Scenario) -> Box<dyn Client> {
        match self {
            Strategy::Ratewise => Box::new(ratewise::Ratewise::new(scenario)),
            Strategy::SdkNaive => Box::new(sdk_naive::SdkNaive::new(scenario)),
            Strategy::BackoffOnly => Box::new(backoff::Backoff::new(scenario, false)),
            Strategy::RpmOnly => Box::new(backoff::Backoff::new(scenario, true)),
            Strategy::Oracle => Box::new(oracle::Oracle::new(scenario)),
        }
    }
}

/// Simulates `strategy` on `scenario` in virtual time.
///
/// ```
/// use ratewise_sim::{simulate, Scenario, Strategy};
/// let mut s = Scenario::default_scenario();
/// s.jobs.count = 20;
/// let r = simulate(&s, Strategy::Ratewise, &mut |_, _| {});
/// assert_eq!(r.jobs_lost, 0);
/// assert_eq!(r, simulate(&s, Strategy::Ratewise, &mut |_, _| {}));
/// ```
pub fn simulate(
    scenario: &Scenario,
    strategy: Strategy,
    progress: &mut dyn FnMut(u64, u64),
) -> Report {
    let mut client = strategy.client(scenario);
    run(scenario, strategy.name(), client.as_mut(), progress)
}

/// The server's wait hint as an SDK reads it: `retry-after-ms`, then
/// `retry-after` (seconds or an HTTP-date).
pub(crate) fn header_wait(headers: &HeaderMap, wall: std::time::SystemTime) -> Option<Duration> {
    RetryHeaders::from_headers(headers, wall)
        .best()
        .map(|(_, d)| d)
}

/// Statuses the SDKs and generic retry layers retry.
pub(crate) fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || status >= 500
}

/// A seeded generator per strategy, so that strategies do not share a
/// random stream (adding one never changes another's run).
pub(crate) fn rng_for(scenario: &Scenario, salt: u64) -> fastrand::Rng {
    fastrand::Rng::with_seed(scenario.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt)
}

/// How a decision that ends a job ends it in the simulation (`None`: a
/// retry or a defer, which wait and send again). Shared by the clients that
/// follow the core's decisions, so they end jobs alike.
pub(crate) fn ending(action: &ratewise_core::Action) -> Option<crate::engine::Terminal> {
    use crate::engine::Terminal;
    use ratewise_core::Action;
    match action {
        Action::Retry { .. } | Action::Defer { .. } => None,
        Action::Done => Some(Terminal::Done),
        Action::StopQueue { .. } => Some(Terminal::Stopped),
        Action::GiveUp { .. } => Some(Terminal::GivenUp),
        Action::HoldUnknown => Some(Terminal::HeldUnknown),
        // Fail, Inspect, and an action added later: the job stops, as
        // `Inspect` does.
        _ => Some(Terminal::Failed),
    }
}
