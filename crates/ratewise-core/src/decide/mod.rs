//! Decision: a [`Classification`], the [`Policy`], the job's state, `now`
//! and a random source → a [`Decision`]. Never parses; never reads a clock.
//!
//! The order of questions follows the DESIGN: money and broken requests
//! first (no header overrides them), then the server's own "don't retry",
//! then the job's attempts, then the queue's retry budget, then its
//! deadline, then how long to wait.

mod backoff;
mod policy;

pub use crate::rng::{entropy_seed, RandomSource};
pub use backoff::MIN_DELAY;
use backoff::{backoff_delay, hinted_delay};
pub use policy::{Backoff, HintJitter, JobState, Policy, UnknownOutcome};

use crate::classify::Classification;
use crate::decision::{Action, Decision};
use crate::note::Note;
use crate::parse::FOREVER;
use crate::time::Now;
use crate::vocab::{Cause, GiveUpReason};
use crate::RetryBudgetState;
use std::time::Duration;

/// Decides what to do after one response or transport failure.
///
/// ```
/// use ratewise_core::classify::{classify_transport, TransportFailure};
/// use ratewise_core::decide::{decide, JobState, Policy};
/// use ratewise_core::{ActionKind, Instant, Now, Provider};
/// use std::time::SystemTime;
///
/// let c = classify_transport(Provider::Anthropic, TransportFailure::ResetAfterSend);
/// let now = Now::new(Instant::ZERO, SystemTime::UNIX_EPOCH);
/// let job = JobState::new(1, Instant::ZERO, None);
/// let d = decide(&Policy::default(), &job, &c, now, &mut fastrand::Rng::with_seed(1));
/// assert_eq!(d.action.kind(), ActionKind::HoldUnknown);
/// ```
pub fn decide(
    policy: &Policy,
    job: &JobState,
    c: &Classification,
    now: Now,
    rng: &mut impl RandomSource,
) -> Decision {
    let mut notes = Vec::new();
    for (source, reason) in &c.hints.rejected {
        notes.push(Note::RejectedHint {
            source: *source,
            reason: *reason,
        });
    }
    let action = match terminal_action(policy, c, &mut notes) {
        Some(action) => action,
        None => retry_action(policy, job, c, now, rng, &mut notes),
    };
    Decision { action, notes }
}

/// Actions that no hint, attempt count or deadline can change.
fn terminal_action(policy: &Policy, c: &Classification, notes: &mut Vec<Note>) -> Option<Action> {
    let action = match c.cause {
        Cause::Success => Action::Done,
        Cause::SpendCap | Cause::Billing | Cause::UserLimit | Cause::Authentication => {
            if c.hints.wait.is_some() {
                notes.push("money/credentials stop the queue: wait hint ignored".into());
            }
            notes.push(Note::StoppedUntil(c.hints.resume_at));
            Action::StopQueue {
                until: c.hints.resume_at,
            }
        }
        // A permission of one model class (Gemini's "limit: 0": the key's
        // tier has no quota for this model): that class is stopped, so
        // nothing more is sent for it; the key's other models go on.
        Cause::Permission if c.scope == crate::vocab::Scope::Bucket => {
            notes.push("no quota for this model on this key: its class stops".into());
            Action::StopQueue { until: None }
        }
        Cause::InvalidRequest | Cause::RequestTooLarge | Cause::NotFound | Cause::Permission => {
            notes.push("the request or configuration must change".into());
            Action::Fail
        }
        Cause::Unknown => {
            notes.push("unknown shape: inspect, no blind retry".into());
            Action::Inspect
        }
        Cause::MidStream => {
            notes.push("committed stream: never replayed automatically".into());
            Action::Inspect
        }
        Cause::OutcomeUnknown if policy.unknown_outcome == UnknownOutcome::Hold => {
            notes.push("sent, no answer: worst-case cost stays reserved".into());
            Action::HoldUnknown
        }
        _ => return None,
    };
    Some(action)
}

/// Whether an answer is a rate signal the job waits out without counting
/// it: a rate-limit, acceleration or overload answer that says when to
/// come back (`retry-after`, a `RetryInfo`, "try again in 1.4s"), for a
/// job with a deadline. Such a job is bounded by its deadline alone:
/// neither `max_attempts` nor the queue's retry budget gives it up while
/// the deadline allows the wait (a job that cannot be sent in time is
/// still answered at once). A job with no deadline keeps counting them:
/// nothing else would bound it. Retries without a rate signal (a 5xx with
/// no hint, a transport failure) are always counted.
///
/// ```
/// use http::{HeaderMap, StatusCode};
/// use ratewise_core::classify::{classify_response, ResponseView};
/// use ratewise_core::decide::{paced, JobState};
/// use ratewise_core::{Instant, Provider};
/// use std::time::{Duration, SystemTime};
///
/// let body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
/// let classify = |headers: &HeaderMap| {
///     let view = ResponseView { status: StatusCode::TOO_MANY_REQUESTS, headers, body };
///     classify_response(Provider::Anthropic, &view, SystemTime::UNIX_EPOCH)
/// };
/// let mut headers = HeaderMap::new();
/// let bare = classify(&headers);
/// headers.insert("retry-after", "2".parse().unwrap());
/// let hinted = classify(&headers);
///
/// let job = JobState::new(7, Instant::ZERO, Some(Duration::from_secs(600)));
/// assert!(paced(&hinted, &job));
/// assert!(!paced(&bare, &job)); // no hint: counted
/// assert!(!paced(&hinted, &JobState::new(7, Instant::ZERO, None))); // no deadline
/// ```
pub fn paced(c: &Classification, job: &JobState) -> bool {
    matches!(
        c.cause,
        Cause::RateLimited | Cause::AccelerationLimited | Cause::Overloaded
    ) && c.hints.wait.is_some_and(|h| h.wait < FOREVER)
        && job.deadline.is_some()
}

/// Retryable causes: attempts, server's say, deadline, then the wait.
fn retry_action(
    policy: &Policy,
    job: &JobState,
    c: &Classification,
    now: Now,
    rng: &mut impl RandomSource,
    notes: &mut Vec<Note>,
) -> Action {
    if c.hints.should_retry == Some(false) {
        notes.push("x-should-retry: false".into());
        return Action::GiveUp {
            reason: GiveUpReason::ServerDeclined,
        };
    }
    // A rate signal with a hint is paced, not counted (DESIGN principle
    // 17): the provider said when it will have room, and only the deadline
    // bounds how long the job's caller waits for it.
    let paced = paced(c, job);
    if paced {
        notes.push(
            "rate signal with a hint: paced, not counted toward attempts or the retry budget"
                .into(),
        );
    }
    if !paced && job.counted_attempts() >= policy.max_attempts {
        notes.push(Note::AttemptsSpent {
            attempts: job.attempts,
            max: policy.max_attempts,
        });
        return Action::GiveUp {
            reason: GiveUpReason::Attempts,
        };
    }
    // The queue's budget before any wait is drawn: a deferral is a retry
    // too (its job is sent again), and a spent budget decides no delay.
    if !paced && job.retry_budget == RetryBudgetState::Spent {
        notes.push("the queue's retry budget is spent: no retry".into());
        return Action::GiveUp {
            reason: GiveUpReason::RetryBudget,
        };
    }
    // Room left before the deadline for waiting, after the attempt itself.
    let room = job.deadline_at().map(|at| {
        at.saturating_duration_since(now.instant)
            .saturating_sub(policy.expected_attempt_time)
    });

    let delay = match c.hints.wait {
        Some(hint) => {
            notes.push(Note::Hint {
                source: hint.source,
                wait: hint.wait,
            });
            if hint.wait >= FOREVER || room.is_some_and(|r| hint.wait > r) {
                notes.push("the server's wait is longer than the job's deadline allows".into());
                return Action::GiveUp {
                    reason: GiveUpReason::Deadline,
                };
            }
            // The jitter is ours, not the provider's: it never turns a
            // wait that fits (the deadline's room, or without one the
            // inline limit) into one that does not. A precise 47.48 s
            // hint (Gemini's message) plus jitter past the inline 60 s
            // would defer a job the provider lets retry in 48.
            let inline = policy.max_inline_wait.checked_sub(hint.wait);
            let max_jitter = room.map_or(inline.unwrap_or(Duration::MAX), |r| r - hint.wait);
            let (delay, added) = hinted_delay(hint.wait, &policy.hint_jitter, max_jitter, rng);
            notes.push(Note::Jitter(added));
            if room.is_some_and(|r| delay > r) {
                notes.push("no room left before the deadline".into());
                return Action::GiveUp {
                    reason: GiveUpReason::Deadline,
                };
            }
            delay
        }
        None => {
            let throttling = c.cause.is_throttling();
            let (delay, window) = backoff_delay(&policy.backoff, throttling, job.attempts, rng);
            notes.push(Note::Backoff {
                throttling,
                attempt: job.attempts,
                window,
            });
            if room.is_some_and(|r| delay > r) {
                notes.push("the backoff is longer than the job's deadline allows".into());
                return Action::GiveUp {
                    reason: GiveUpReason::Deadline,
                };
            }
            delay
        }
    };

    // A job with a deadline waits inline as long as the deadline allows
    // (checked above): its caller is still there. Only a job with no
    // deadline is handed back past the inline limit.
    if room.is_none() && delay > policy.max_inline_wait {
        let later = now.after(delay);
        notes.push(Note::Deferred {
            wait: delay,
            limit: policy.max_inline_wait,
        });
        return Action::Defer {
            until: later.wall,
            not_before: later.instant,
        };
    }
    Action::Retry { delay }
}
