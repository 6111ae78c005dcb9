//! The knobs of the default policy, and the job state a decision reads.

use crate::time::Instant;
use std::time::Duration;

/// Exponential backoff used when the server gave no hint.
///
/// Throttling causes (`rate_limited`, `acceleration_limited`) start from a
/// larger base than transient ones and never wait less than that base:
/// a bucket refills over seconds, and hammering it early only earns more
/// 429s. Transient failures (5xx, overload, connect) use **full jitter**
/// — a uniform wait in `[1 ms, min(cap, base·2^(n−1))]` — the scheme that
/// needed the fewest calls and least total work in AWS's published
/// simulation of contending clients ("Exponential Backoff And Jitter",
/// 2015): spreading retries over the whole window is what breaks up
/// synchronised waves. Throttling waits `base_t + U(0, min(cap, base_t·2^(n−1)))`:
/// full jitter above a floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Backoff {
    /// First window for transient failures.
    pub transient_base: Duration,
    /// First window (and floor) for throttling.
    pub throttle_base: Duration,
    /// Largest window.
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            transient_base: Duration::from_millis(500),
            throttle_base: Duration::from_secs(1),
            cap: Duration::from_secs(30),
        }
    }
}

/// Jitter added on top of a server's wait hint: uniform in
/// `[0, fixed + fraction·hint]`, the proportional part at most a
/// minute. Only ever added: the hint is a minimum.
/// With the defaults (1 s + 25 %) an 8 s `Retry-After` becomes 8–11 s, so
/// workers released by the same 429 spread out instead of stampeding; a
/// daily quota's reset 20 hours away is not moved by five more.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct HintJitter {
    /// Fixed part of the jitter window.
    pub fixed: Duration,
    /// Part of the window proportional to the hint (0.25 = 25 %).
    pub fraction: f64,
}

impl Default for HintJitter {
    fn default() -> Self {
        HintJitter {
            fixed: Duration::from_secs(1),
            fraction: 0.25,
        }
    }
}

/// The most the proportional part of [`HintJitter`] adds: a minute spreads
/// any number of waiting workers; hours more would only delay them.
pub(crate) const MAX_PROPORTIONAL_JITTER: Duration = Duration::from_secs(60);

impl HintJitter {
    /// The widest jitter for a hint.
    pub fn window(&self, hint: Duration) -> Duration {
        let fraction = if self.fraction.is_finite() && self.fraction > 0.0 {
            self.fraction.min(10.0)
        } else {
            0.0
        };
        let proportional = Duration::try_from_secs_f64(hint.as_secs_f64() * fraction)
            .unwrap_or(Duration::ZERO)
            .min(MAX_PROPORTIONAL_JITTER);
        self.fixed.saturating_add(proportional)
    }
}

/// What to do with a request that was sent and got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum UnknownOutcome {
    /// Hold it: worst-case cost stays reserved, no automatic retry (default).
    #[default]
    Hold,
    /// Retry it like a transient failure: for idempotent requests, or when
    /// a duplicate generation is cheaper than a lost one.
    Retry,
}

/// The policy a decision follows.
///
/// The default: 3 attempts; no deadline, so every job is bounded by the
/// in-line limit of 60 s in total ([`max_inline_wait`](Self::max_inline_wait))
/// and deferred past it; backoff 0.5 s (transient) / 1 s (throttling) up
/// to 30 s; 1 s + 25 % jitter above a server's wait; a send never cut;
/// a sent request with no answer held, not retried.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Policy {
    /// Sends per job, the first included.
    pub max_attempts: u32,
    /// Longest a job with **no deadline** waits in line, **in total**:
    /// every wait for admission (bucket room, a pause, a cold start's
    /// probe), its turn behind the jobs queued before it in a driver's
    /// queue, and every retry delay since it arrived, counted together
    /// (the sends themselves are not waits). A wait that would take it
    /// past the limit is not begun: the job is deferred (handed back,
    /// nothing sent by that wait, with the earliest time to send it again:
    /// `Action::Defer`'s `until`). A job with a deadline waits as long as
    /// its deadline allows — its caller is still waiting — and ends with
    /// `give_up(deadline)` only when it cannot be sent in time. Default:
    /// 60 s (and no [`default_deadline`](Self::default_deadline): a
    /// caller of the tower layer or the reqwest middleware with the
    /// default policy is held at most a minute in line).
    pub max_inline_wait: Duration,
    /// Backoff without a hint.
    pub backoff: Backoff,
    /// Jitter above a hint.
    pub hint_jitter: HintJitter,
    /// Time one attempt is expected to take; a retry whose earliest send
    /// plus this is past the deadline gives up.
    pub expected_attempt_time: Duration,
    /// Sent-but-unanswered policy.
    pub unknown_outcome: UnknownOutcome,
    /// Default deadline of a job from its arrival (`None`: no deadline).
    /// It gates admission and bounds every wait; it never cuts a send in
    /// flight (see `send_timeout`).
    pub default_deadline: Option<Duration>,
    /// How long a send may wait for its answer's head before the driver
    /// gives up on it (`None`, the default: a send in flight is never cut).
    /// A send cut this way may have reached the provider: its outcome is
    /// unknown (`TimeoutAfterSend`), decided under `unknown_outcome`, and
    /// its reservation is charged at its estimate.
    pub send_timeout: Option<Duration>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_attempts: 3,
            max_inline_wait: Duration::from_secs(60),
            backoff: Backoff::default(),
            hint_jitter: HintJitter::default(),
            expected_attempt_time: Duration::ZERO,
            unknown_outcome: UnknownOutcome::Hold,
            default_deadline: None,
            send_timeout: None,
        }
    }
}

/// The job a response belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobState {
    /// Sends made so far, including the one answered now.
    pub attempts: u32,
    /// When the job arrived: the deadline counts from here.
    pub arrived: Instant,
    /// Total budget from arrival; `None` = none.
    pub deadline: Option<Duration>,
    /// The queue's retry budget, as the store last saw it: a spent budget
    /// turns any retry into `give_up` `retry_budget`.
    pub retry_budget: crate::RetryBudgetState,
    /// Of `attempts`, those answered earlier by a rate signal the job
    /// waited out ([`paced`](crate::decide::paced)): they count toward
    /// neither `max_attempts` nor the retry budget.
    pub paced: u32,
}

impl JobState {
    /// A job that arrived at `arrived` and was sent `attempts` times.
    pub const fn new(attempts: u32, arrived: Instant, deadline: Option<Duration>) -> Self {
        JobState {
            attempts,
            arrived,
            deadline,
            retry_budget: crate::RetryBudgetState::Available,
            paced: 0,
        }
    }

    /// The same job, `paced` of whose attempts were answered by a rate
    /// signal it waited out (see [`paced`](Self::paced)).
    pub(crate) const fn with_paced(mut self, paced: u32) -> Self {
        self.paced = paced;
        self
    }

    /// Attempts that count toward `max_attempts`: those not answered by
    /// a rate signal the job waited out.
    pub const fn counted_attempts(&self) -> u32 {
        self.attempts.saturating_sub(self.paced)
    }

    /// The same job, deciding against the retry budget `state`.
    pub const fn with_retry_budget(mut self, state: crate::RetryBudgetState) -> Self {
        self.retry_budget = state;
        self
    }

    /// The instant past which an answer is useless.
    pub fn deadline_at(&self) -> Option<Instant> {
        self.deadline.map(|d| self.arrived + d)
    }
}
