//! Target `classify_decide`: classification and decision end to end, from
//! an arbitrary provider profile, status, headers, body, clock, job state
//! and policy knobs.
//!
//! The input is a [`DecideControl`] (decoded with `arbitrary`) followed by
//! a response in the [`crate::wire`] text form (status line, header lines,
//! empty line, body).
//!
//! Properties beyond "no panic" (DESIGN.md's rules):
//! - money (`Cause::is_money`) and bad credentials stop the queue: never
//!   `Retry` or `Defer`, whatever `Retry-After` says;
//! - only retryable causes (or an unknown outcome under a retry policy)
//!   are retried or deferred, and never once `attempts >= max_attempts`;
//! - a retry waits at least the valid hint (`hints.wait`) and at least
//!   `MIN_DELAY` (never zero, even after `retry-after: 0`), never more than
//!   the inline limit; a deferral is past the inline limit and the hint;
//! - a retry or deferral leaves room for the attempt before the deadline;
//! - a 2xx is `Done`; the decision is reproducible from the same seed;
//! - evidence is bounded (message, request id, rejected lists, notes).

use crate::wire::read_response;
use arbitrary::{Arbitrary, Unstructured};
use ratewise_core::classify::{
    classify_response, classify_transport, detect_provider, Classification, ResponseView,
    TransportFailure,
};
use ratewise_core::decide::{decide, JobState, Policy, UnknownOutcome, MIN_DELAY};
use ratewise_core::explain::Explanation;
use ratewise_core::parse::body::MAX_MESSAGE_LEN;
use ratewise_core::parse::request_id::MAX_REQUEST_ID_LEN;
use ratewise_core::parse::FOREVER;
use ratewise_core::{Action, Cause, Decision, GiveUpReason, Instant, Now, Provider};
use std::time::{Duration, SystemTime};

/// Everything but the response: who answered, when, and the job's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub struct DecideControl {
    /// `% 4`: Anthropic, OpenAI, generic, or detected from the response.
    pub provider: u8,
    /// 1..=5: a transport failure (`TransportFailure::ALL[n - 1]`) instead
    /// of the response; anything else: the response.
    pub transport: u8,
    /// Wall clock, seconds since the Unix epoch.
    pub wall_secs: u32,
    /// Time since the job arrived, in milliseconds (the monotonic origin is
    /// the arrival, as in the decision-case fixtures).
    pub elapsed_ms: u32,
    /// Sends so far.
    pub attempts: u32,
    /// The job's deadline after arrival, in milliseconds.
    pub deadline_ms: Option<u32>,
    /// Overrides `Policy::max_attempts`.
    pub max_attempts: Option<u8>,
    /// Overrides `Policy::max_inline_wait`, in milliseconds.
    pub max_inline_wait_ms: Option<u32>,
    /// `Policy::expected_attempt_time`, in milliseconds.
    pub expected_attempt_ms: u16,
    /// `UnknownOutcome::Retry` instead of `Hold`.
    pub unknown_retry: bool,
    /// Seed of the jitter.
    pub rng_seed: u64,
}

impl DecideControl {
    /// The bytes that `arbitrary` decodes back into `self` (seeds are
    /// written with this; a test checks the round trip).
    pub fn to_bytes(self) -> Vec<u8> {
        let mut out = vec![self.provider, self.transport];
        out.extend_from_slice(&self.wall_secs.to_le_bytes());
        out.extend_from_slice(&self.elapsed_ms.to_le_bytes());
        out.extend_from_slice(&self.attempts.to_le_bytes());
        option(&mut out, self.deadline_ms.map(u32::to_le_bytes));
        option(&mut out, self.max_attempts.map(|n| [n]));
        option(&mut out, self.max_inline_wait_ms.map(u32::to_le_bytes));
        out.extend_from_slice(&self.expected_attempt_ms.to_le_bytes());
        out.push(u8::from(self.unknown_retry));
        out.extend_from_slice(&self.rng_seed.to_le_bytes());
        out
    }

    /// The policy these knobs describe.
    pub fn policy(&self) -> Policy {
        let mut policy = Policy::default();
        if let Some(n) = self.max_attempts {
            policy.max_attempts = u32::from(n);
        }
        if let Some(ms) = self.max_inline_wait_ms {
            policy.max_inline_wait = Duration::from_millis(u64::from(ms));
        }
        policy.expected_attempt_time = Duration::from_millis(u64::from(self.expected_attempt_ms));
        if self.unknown_retry {
            policy.unknown_outcome = UnknownOutcome::Retry;
        }
        policy
    }

    /// The job: arrived at the origin, `elapsed_ms` ago.
    pub fn job(&self) -> JobState {
        JobState::new(
            self.attempts,
            Instant::ZERO,
            self.deadline_ms
                .map(|ms| Duration::from_millis(u64::from(ms))),
        )
    }

    /// The caller's clocks.
    pub fn now(&self) -> Now {
        Now::new(
            Instant::from_millis(u64::from(self.elapsed_ms)),
            SystemTime::UNIX_EPOCH + Duration::from_secs(u64::from(self.wall_secs)),
        )
    }

    /// The transport failure, when the control selects one.
    pub fn transport_failure(&self) -> Option<TransportFailure> {
        let n = usize::from(self.transport);
        (1..=TransportFailure::ALL.len())
            .contains(&n)
            .then(|| TransportFailure::ALL[n - 1])
    }
}

fn option<const N: usize>(out: &mut Vec<u8>, value: Option<[u8; N]>) {
    match value {
        Some(bytes) => {
            out.push(1);
            out.extend_from_slice(&bytes);
        }
        None => out.push(0),
    }
}

/// Splits an input into its control and the response text.
pub fn split(data: &[u8]) -> Option<(DecideControl, &[u8])> {
    let mut u = Unstructured::new(data);
    let control = DecideControl::arbitrary(&mut u).ok()?;
    Some((control, u.take_rest()))
}

/// Known core bugs the fuzz target steps around, so a campaign keeps
/// looking for new ones; each would have an `#[ignore]`d failing test in
/// `tests/known_bugs.rs`. None at present: the one found
/// (`zero-retry-after-past-deadline`: `Retry-After: 0` past the deadline
/// was `Retry { delay: 0 }`) was fixed in ratewise-core by ff4e17c and is
/// now an ordinary regression input.
pub const KNOWN_BUGS: &[&str] = &[];

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let Some((control, text)) = split(data) else {
        return;
    };
    let response = read_response(text);
    let now = control.now();
    let view = ResponseView {
        status: response.status,
        headers: &response.headers,
        body: response.body,
    };
    // Every profile, and one more value for the detected one.
    let provider = Provider::ALL
        .get(usize::from(control.provider) % (Provider::ALL.len() + 1))
        .copied()
        .unwrap_or_else(|| detect_provider(&response.headers, response.body));
    let transport = control.transport_failure();
    let c = match transport {
        Some(t) => classify_transport(provider, t),
        None => classify_response(provider, &view, now.wall),
    };
    let policy = control.policy();
    let job = control.job();
    let mut rng = fastrand::Rng::with_seed(control.rng_seed);
    let d = decide(&policy, &job, &c, now, &mut rng);

    check_evidence(&c);
    check_decision(&policy, &job, now, &c, &d);
    if transport.is_none() && response.status.is_success() {
        assert_eq!(d.action, Action::Done);
    }
    let again = decide(
        &policy,
        &job,
        &c,
        now,
        &mut fastrand::Rng::with_seed(control.rng_seed),
    );
    assert_eq!(again, d, "same seed, same decision");
    let explanation = Explanation::new(&c, &d);
    serde_json::to_string(&explanation).expect("explanations serialise");
}

fn check_evidence(c: &Classification) {
    let e = &c.evidence;
    for s in [&e.error_type, &e.error_code, &e.message]
        .into_iter()
        .flatten()
    {
        assert!(s.len() <= MAX_MESSAGE_LEN);
    }
    if let Some(id) = &e.request_id {
        assert!(id.len() <= MAX_REQUEST_ID_LEN);
    }
    assert!(c.hints.rejected.len() <= 4, "{:?}", c.hints.rejected);
    assert!(c.hints.ratelimit.rejected.len() <= 32);
    assert!(e.notes.len() <= 16, "{:?}", e.notes);
    for note in &e.notes {
        let text = note.to_string();
        assert!(
            text.len() <= 2 * MAX_MESSAGE_LEN,
            "{} byte note",
            text.len()
        );
    }
}

fn check_decision(policy: &Policy, job: &JobState, now: Now, c: &Classification, d: &Decision) {
    let cause = c.cause;
    let sends_again = matches!(d.action, Action::Retry { .. } | Action::Defer { .. });
    if cause.is_money() || cause == Cause::Authentication {
        assert!(
            matches!(d.action, Action::StopQueue { .. }),
            "{cause} must stop the queue, got {:?}",
            d.action
        );
    }
    if sends_again {
        let unknown_retried =
            cause == Cause::OutcomeUnknown && policy.unknown_outcome == UnknownOutcome::Retry;
        assert!(cause.is_retryable() || unknown_retried, "{cause} retried");
        // A rate signal with a hint, for a job with a deadline, is paced,
        // not counted (`decide::paced`): only the deadline bounds it.
        assert!(
            job.counted_attempts() < policy.max_attempts || ratewise_core::decide::paced(c, job),
            "attempts spent but {:?}",
            d.action
        );
        assert_ne!(c.hints.should_retry, Some(false), "server declined");
    }
    if cause == Cause::OutcomeUnknown && policy.unknown_outcome == UnknownOutcome::Hold {
        assert_eq!(d.action, Action::HoldUnknown);
    }
    let hint = c.hints.wait.map(|h| h.wait);
    // Room for the attempt itself before the deadline.
    let latest_send = job
        .deadline_at()
        .map(|at| at.since_origin().checked_sub(policy.expected_attempt_time));
    let fits = |send_at: Duration| match latest_send {
        None => true,
        Some(None) => false,
        Some(Some(latest)) => send_at <= latest,
    };
    match d.action {
        Action::Retry { delay } => {
            // The inline limit bounds only jobs with no deadline: a job
            // whose caller waits retries inline as long as its deadline
            // allows (checked by `fits` below).
            assert!(
                job.deadline.is_some() || delay <= policy.max_inline_wait,
                "{delay:?} over the inline limit without a deadline"
            );
            if let Some(h) = hint {
                assert!(delay >= h, "retry {delay:?} shorter than the hint {h:?}");
            }
            // Never zero, not even after `retry-after: 0`.
            assert!(delay >= MIN_DELAY, "retry {delay:?} below the minimum");
            let send_at = now.instant.since_origin().saturating_add(delay);
            assert!(
                fits(send_at),
                "retry at {send_at:?} misses the deadline {latest_send:?}"
            );
        }
        Action::Defer { until, not_before } => {
            let wait = not_before - now.instant;
            assert!(job.deadline.is_none(), "a job with a deadline deferred");
            assert!(
                wait > policy.max_inline_wait,
                "deferred {wait:?} fits inline"
            );
            if let Some(h) = hint {
                assert!(wait >= h, "deferred {wait:?} shorter than the hint {h:?}");
            }
            assert!(fits(not_before.since_origin()), "defer past the deadline");
            if let Some(expected) = now.wall.checked_add(wait) {
                assert_eq!(until, expected);
            }
        }
        Action::GiveUp {
            reason: GiveUpReason::Deadline,
        } => {
            assert!(
                job.deadline.is_some() || hint.is_some_and(|h| h >= FOREVER),
                "deadline give-up without a deadline"
            );
        }
        Action::GiveUp {
            reason: GiveUpReason::Attempts,
        } => assert!(job.attempts >= policy.max_attempts),
        Action::GiveUp {
            reason: GiveUpReason::ServerDeclined,
        } => assert_eq!(c.hints.should_retry, Some(false)),
        Action::Done => assert_eq!(cause, Cause::Success),
        _ => {}
    }
}
