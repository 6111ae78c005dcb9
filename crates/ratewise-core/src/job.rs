//! One job's sequence — admit, send, read, decide, account, wait — as a
//! sans-IO state machine, in the style of `quinn-proto`: the driver asks
//! what to do next ([`Job::next`]), does it, and tells the machine what
//! happened ([`Job::sending`], [`Job::answered`], [`Job::failed`],
//! [`Job::body_end`], [`Job::cancel`]). Time comes in as an argument; the
//! machine never sleeps, sends or reads a clock. The tower layer and the
//! simulator drive it; neither keeps a copy of the sequence.
//!
//! # The contract
//!
//! * [`next`](Job::next) answers one of: [`Step::Send`] (a reservation
//!   was granted: send attempt `n` now), [`Step::Wait`] (ask again at
//!   `until`, or earlier when capacity comes back: an admission wait or a
//!   retry's delay), [`Step::Pending`] (a send or a body is in progress:
//!   nothing to do until told), [`Step::End`] (the job is over, with the
//!   decision that ended it).
//! * The machine owns the job's reservation, and every path ends it
//!   exactly once:
//!   - never sent (the driver cancels before [`sending`](Job::sending)) →
//!     released;
//!   - an answer → its evidence (header sync, a pause, a stop, the retry
//!     budget) is applied to the store *first*, then the reservation ends:
//!     a success settles from its usage (at the body's end); an error
//!     answer gives its tokens back, and keeps the request unit charged
//!     where the provider counts rejected requests (OpenAI's 429s); a
//!     stream error before the commit point settles the usage it reported;
//!   - sent with no answer (a reset or timeout after the send, a
//!     cancellation after [`sending`](Job::sending)) → charged at its
//!     estimate, to the buckets and the spend budget at once and for good
//!     (the provider may have run and billed it); a decision to hold the
//!     job as `outcome_unknown` holds the *job* for its caller — nothing
//!     stays reserved.
//! * Decisions are made in one place: [`crate::decide::decide`]
//!   under the policy, amended by the store's
//!   [`observe_sent`](crate::admit::AdmissionState::observe_sent) (the
//!   retry budget), plus the admission's own endings (a wait beyond the
//!   inline limit defers, a stop stops, a refusal gives up).
//!
//! ```
//! use ratewise_core::admit::{AdmissionState, Config, Controller, Shared};
//! use ratewise_core::classify::{classify_response, ResponseView};
//! use ratewise_core::decide::Policy;
//! use ratewise_core::job::{Job, JobSpec, Step};
//! use ratewise_core::{Action, Instant, Now, Provider, Usage};
//! use std::time::SystemTime;
//!
//! let store = Shared::new(Controller::new(Config { seed: Some(1), ..Config::default() }));
//! let policy = Policy::default();
//! let now = Now::new(Instant::ZERO, SystemTime::UNIX_EPOCH);
//! let target = store.target("team-a", "claude-sonnet-4-5");
//! let mut job = Job::new(JobSpec::new(target, now.instant), &policy);
//! let Step::Send { attempt: 1 } = job.next(&store, &policy, now) else { panic!() };
//! job.sending();
//! // ... the request goes out; a 200 comes back ...
//! let headers = http::HeaderMap::new();
//! let view = ResponseView { status: http::StatusCode::OK, headers: &headers, body: b"" };
//! let c = classify_response(Provider::Anthropic, &view, now.wall);
//! let d = job.answered(&store, &policy, &c, None, &mut fastrand::Rng::with_seed(7), now);
//! assert_eq!(d.action, Action::Done);
//! // The body is the caller's; its end settles the reservation.
//! let usage = Usage { input_tokens: 12, output_tokens: 40, ..Usage::default() };
//! job.body_end(&store, Some(&usage), now);
//! assert!(matches!(job.next(&store, &policy, now), Step::End(_)));
//! assert!(store.ledger().conserved());
//! assert_eq!(store.ledger().outstanding.requests, 0);
//! ```

use crate::admit::{
    Admission, AdmissionState, AdmitRequest, Reservation, Sent, Target, WaitReason,
};
use crate::classify::Classification;
use crate::decide::{decide, JobState, Policy, RandomSource};
use crate::decision::{Action, Decision};
use crate::time::{Instant, Now};
use crate::usage::Usage;
use crate::vocab::{Cause, Provider};
use std::time::Duration;

/// What a job is: where it goes, when it arrived, how long it may take,
/// and what its request is expected to cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobSpec {
    /// The (key, model) it is sent to.
    pub target: Target,
    /// When it arrived: its deadline counts from here.
    pub arrived: Instant,
    /// Its whole budget from arrival (`None`: no deadline).
    pub deadline: Option<Duration>,
    /// An explicit input estimate (a `count_tokens` result).
    pub input_estimate: Option<u64>,
    /// The request body's size, for the byte heuristic.
    pub body_bytes: u64,
    /// The request's `max_tokens`.
    pub max_tokens: Option<u64>,
}

impl JobSpec {
    /// A job for `target` that arrived at `arrived`, with nothing else
    /// known.
    pub fn new(target: Target, arrived: Instant) -> Self {
        JobSpec {
            target,
            arrived,
            deadline: None,
            input_estimate: None,
            body_bytes: 0,
            max_tokens: None,
        }
    }
}

/// What the driver does next.
#[derive(Debug)]
pub enum Step {
    /// A reservation was granted: send attempt `attempt` (1-based) now.
    /// Call [`Job::sending`] when the request is handed to the transport.
    Send {
        /// The attempt number.
        attempt: u32,
    },
    /// Ask again at `until` (a driver may ask earlier, when capacity
    /// comes back).
    Wait {
        /// When to ask again.
        until: Instant,
        /// What is waited for.
        reason: WaitFor,
    },
    /// A send or a body is in progress: nothing to do until the driver
    /// tells the machine what happened.
    Pending,
    /// The job is over.
    End(Ended),
}

/// What a [`Step::Wait`] waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitFor {
    /// Admission (a bucket, a pause, a probe, the spend budget).
    Admission(WaitReason),
    /// A retry's decided delay.
    Retry,
}

/// How a job ended.
#[derive(Debug)]
pub struct Ended {
    /// The decision that ended it.
    pub decision: Decision,
    /// Sends made.
    pub attempts: u32,
    /// Whether it ended at admission (stopped, refused, deferred) rather
    /// than on an answer.
    pub at_admission: bool,
}

#[derive(Debug)]
enum State {
    /// Ready to ask for admission (from `not_before` on, for a retry).
    Ready { not_before: Option<Instant> },
    /// A reservation is held for a send (handed over or not).
    Sending,
    /// A success whose body the caller reads.
    Delivering,
    /// Over.
    Ended {
        decision: Decision,
        at_admission: bool,
    },
}

/// One job's state machine. See the [module docs](self) for the contract.
#[derive(Debug)]
pub struct Job {
    spec: JobSpec,
    /// Admission must come early enough for the attempt itself to fit.
    admit_deadline: Option<Instant>,
    attempts: u32,
    state: State,
    reservation: Option<Reservation>,
    admitted: Option<Sent>,
    handed_over: bool,
}

impl Job {
    /// A job that has not asked for anything yet.
    pub fn new(spec: JobSpec, policy: &Policy) -> Self {
        let admit_deadline = spec.deadline.map(|d| {
            Instant::from_origin(
                (spec.arrived + d)
                    .since_origin()
                    .saturating_sub(policy.expected_attempt_time),
            )
        });
        Job {
            spec,
            admit_deadline,
            attempts: 0,
            state: State::Ready { not_before: None },
            reservation: None,
            admitted: None,
            handed_over: false,
        }
    }

    /// What it is.
    pub fn spec(&self) -> &JobSpec {
        &self.spec
    }

    /// Sends made so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// What to do next (see [`Step`]). Asks the store for admission when
    /// the job is ready for a send.
    pub fn next<S: AdmissionState + ?Sized>(
        &mut self,
        store: &S,
        policy: &Policy,
        now: Now,
    ) -> Step {
        match &mut self.state {
            State::Sending | State::Delivering => return Step::Pending,
            State::Ended {
                decision,
                at_admission,
            } => {
                return Step::End(Ended {
                    decision: decision.clone(),
                    attempts: self.attempts,
                    at_admission: *at_admission,
                })
            }
            State::Ready {
                not_before: Some(t),
            } if now.instant < *t => {
                return Step::Wait {
                    until: *t,
                    reason: WaitFor::Retry,
                }
            }
            State::Ready { .. } => {}
        }
        let req = AdmitRequest {
            target: self.spec.target,
            input_estimate: self.spec.input_estimate,
            body_bytes: self.spec.body_bytes,
            max_tokens: self.spec.max_tokens,
            is_retry: self.attempts > 0,
            deadline: self.admit_deadline,
        };
        match store.admit(&req, now) {
            Admission::Go(res) => {
                self.admitted = Some(res.sent());
                self.reservation = Some(res);
                self.handed_over = false;
                self.attempts += 1;
                self.state = State::Sending;
                Step::Send {
                    attempt: self.attempts,
                }
            }
            Admission::Wait { until, reason } => {
                let wait = until.saturating_duration_since(now.instant);
                if wait > policy.max_inline_wait {
                    let d = Decision::new(Action::Defer {
                        until: now.after(wait).wall,
                        not_before: until,
                    })
                    .with_note(format!("admission wait {wait:?} exceeds the inline limit"));
                    self.end_at_admission(d)
                } else {
                    Step::Wait {
                        until,
                        reason: WaitFor::Admission(reason),
                    }
                }
            }
            Admission::Stopped { cause, until } => {
                let d = Decision::new(Action::StopQueue { until })
                    .with_note(format!("sending is stopped ({cause}): nothing sent"));
                self.end_at_admission(d)
            }
            Admission::Refused { reason } => {
                let d = Decision::new(Action::GiveUp { reason })
                    .with_note("admission refused: waiting cannot help");
                self.end_at_admission(d)
            }
        }
    }

    fn end_at_admission(&mut self, decision: Decision) -> Step {
        self.state = State::Ended {
            decision: decision.clone(),
            at_admission: true,
        };
        Step::End(Ended {
            decision,
            attempts: self.attempts,
            at_admission: true,
        })
    }

    /// The request is being handed to the transport: from here on it may
    /// reach the provider, so a cancellation charges it.
    pub fn sending(&mut self) {
        self.handed_over = true;
    }

    /// What the attempt's rate-limit headers are read against, while a
    /// send is in progress.
    pub fn admitted(&self) -> Option<&Sent> {
        self.admitted
            .as_ref()
            .filter(|_| self.reservation.is_some())
    }

    /// The answer to the send in progress, classified. `usage`: what the
    /// answer reported when its body was read already (a simulator, a
    /// stream that failed before its commit point); for a success whose
    /// body is still to be read, `None` — its end settles
    /// ([`body_end`](Self::body_end), or the metered body that
    /// [`take_reservation`](Self::take_reservation) hands it to).
    ///
    /// Returns the decision, amended by the store (the retry budget).
    pub fn answered<S: AdmissionState + ?Sized, R: RandomSource>(
        &mut self,
        store: &S,
        policy: &Policy,
        c: &Classification,
        usage: Option<&Usage>,
        rng: &mut R,
        now: Now,
    ) -> Decision {
        if c.cause == Cause::Success {
            let d = self.observe(store, c, Decision::new(Action::Done), now);
            match usage {
                Some(u) => {
                    if let Some(res) = self.reservation.take() {
                        store.settle(res, u, now);
                    }
                    self.end(d.clone());
                }
                None => self.state = State::Delivering,
            }
            return d;
        }
        let d = decide(policy, &self.job_state(), c, now, rng);
        // The evidence first: a waiter woken by the give-back below must
        // find the pause or the stop this answer reported.
        let d = self.observe(store, c, d, now);
        if let Some(res) = self.reservation.take() {
            match usage {
                Some(u) => store.settle(res, u, now),
                None if rejected_request_counts(c) => store.settle(res, &Usage::default(), now),
                None => store.release(res, now),
            }
        }
        self.after(d.clone(), now);
        d
    }

    /// The send in progress failed in transport (`c` is its
    /// classification, `maybe_sent` whether the request may have reached
    /// the provider). Returns the decision, amended by the store.
    pub fn failed<S: AdmissionState + ?Sized, R: RandomSource>(
        &mut self,
        store: &S,
        policy: &Policy,
        c: &Classification,
        maybe_sent: bool,
        rng: &mut R,
        now: Now,
    ) -> Decision {
        let d = decide(policy, &self.job_state(), c, now, rng);
        let d = self.observe(store, c, d, now);
        if let Some(res) = self.reservation.take() {
            if maybe_sent && self.handed_over {
                // Whether retried or held as unknown: charged at once.
                let worst = estimate(&res);
                store.settle(res, &worst, now);
            } else {
                store.release(res, now);
            }
        }
        self.after(d.clone(), now);
        d
    }

    /// A delivered success's body ended: settled from `usage`, or at the
    /// reservation's estimate when it reported none (the provider may
    /// have generated and billed the answer).
    pub fn body_end<S: AdmissionState + ?Sized>(
        &mut self,
        store: &S,
        usage: Option<&Usage>,
        now: Now,
    ) {
        if let Some(res) = self.reservation.take() {
            let usage = usage.copied().unwrap_or_else(|| estimate(&res));
            store.settle(res, &usage, now);
        }
        if matches!(self.state, State::Delivering) {
            self.end(Decision::new(Action::Done));
        }
    }

    /// A delivered success's reservation, for a metered body that settles
    /// it when the body ends (and must, on every path: its drop too). The
    /// job is over.
    pub fn take_reservation(&mut self) -> Option<Reservation> {
        let res = self.reservation.take();
        if matches!(self.state, State::Delivering) {
            self.end(Decision::new(Action::Done));
        }
        res
    }

    /// The job is dropped by its caller. A reservation not yet handed to
    /// the transport is released; one that was is charged at its estimate
    /// (the provider may have run it). Nothing stays outstanding.
    pub fn cancel<S: AdmissionState + ?Sized>(&mut self, store: &S, now: Now) {
        if let Some(res) = self.reservation.take() {
            if self.handed_over {
                let worst = estimate(&res);
                store.settle(res, &worst, now);
            } else {
                store.release(res, now);
            }
        }
        if !matches!(self.state, State::Ended { .. }) {
            let d = Decision::new(Action::GiveUp {
                reason: crate::vocab::GiveUpReason::Deadline,
            })
            .with_note("cancelled by its caller");
            self.end(d);
        }
    }

    /// Brings back a job that ended kept for later — deferred (a wait
    /// past the inline limit, a decided `defer`) or stopped (the key's
    /// stop) — to ask for admission again, not before `not_before`. Its
    /// attempts count on. Returns whether it was such a job; any other end
    /// is final.
    pub fn requeue(&mut self, not_before: Option<Instant>) -> bool {
        let kept = matches!(
            &self.state,
            State::Ended { decision, .. }
                if matches!(decision.action, Action::Defer { .. } | Action::StopQueue { .. })
        );
        if kept {
            self.state = State::Ready { not_before };
        }
        kept
    }

    /// Whether the machine still owns a reservation.
    pub fn holds_reservation(&self) -> bool {
        self.reservation.is_some()
    }

    fn job_state(&self) -> JobState {
        JobState::new(self.attempts, self.spec.arrived, self.spec.deadline)
    }

    fn observe<S: AdmissionState + ?Sized>(
        &self,
        store: &S,
        c: &Classification,
        d: Decision,
        now: Now,
    ) -> Decision {
        match &self.admitted {
            Some(sent) => store.observe_sent(sent, c, d, now),
            None => store.observe(self.spec.target.scope, c, d, now),
        }
    }

    /// After an answer: a retry waits out its delay (never sent before
    /// it; admission may add its own wait), anything else ends.
    fn after(&mut self, d: Decision, now: Now) {
        match d.action {
            Action::Retry { delay } => {
                self.state = State::Ready {
                    not_before: Some(now.instant + delay),
                };
            }
            _ => self.end(d),
        }
    }

    fn end(&mut self, decision: Decision) {
        self.state = State::Ended {
            decision,
            at_admission: false,
        };
    }
}

/// Whether the provider keeps a rejected request's request unit: OpenAI
/// documents that requests answered 429 still count against the
/// per-minute request limit. Their tokens are given back either way.
pub fn rejected_request_counts(c: &Classification) -> bool {
    c.provider == Provider::Openai && c.status == Some(429)
}

/// A reservation's amounts as usage: what a send that may have run is
/// charged.
pub fn estimate(res: &Reservation) -> Usage {
    let a = res.amounts();
    Usage {
        input_tokens: a.input,
        output_tokens: a.output,
        ..Usage::default()
    }
}
