//! One job's sequence — admit, send, read, decide, account, wait — as a
//! sans-IO state machine, in the style of `quinn-proto`: the driver asks
//! what to do next ([`Job::next`]), does it, and tells the machine what
//! happened. The machine never sleeps, sends, reads a clock or touches the
//! store: what it needs from the [`Store`](crate::admit::Store) it hands
//! out as values ([`Step::Admit`], [`Update`]), and the driver awaits the
//! store and hands the answers back. The tower layer and the simulator
//! drive it; neither keeps a copy of the sequence.
//!
//! # The contract
//!
//! * [`next`](Job::next) answers one of: [`Step::Admit`] (ask the store
//!   to admit this request, then hand the answer to
//!   [`admission`](Job::admission), which answers `Send`, `Wait` or
//!   `End`), [`Step::Send`] (a reservation was granted: send attempt `n`
//!   now), [`Step::Wait`] (ask again at `until`, or earlier when capacity
//!   comes back: an admission wait or a retry's delay), [`Step::Pending`]
//!   (a send, a body or a store update is in progress: nothing to do until
//!   told), [`Step::End`] (the job is over, with the decision that ended
//!   it).
//! * Events are told with [`sending`](Job::sending) (the request is
//!   handed to the transport), [`connecting`](Job::connecting) and
//!   [`on_wire`](Job::on_wire) (for a transport that says so: the request
//!   waits for a connection; it reached one — see [`Sending`]),
//!   [`answered`](Job::answered) (the classified answer),
//!   [`failed`](Job::failed) (a transport failure), [`body_end`](Job::body_end)
//!   (a success's body ended) and [`cancel`](Job::cancel) (the caller went
//!   away). Each returns the [`Update`] the store must apply — the
//!   answer's evidence and the end of the reservation, in one step — and
//!   an answer's update comes back through [`applied`](Job::applied) with
//!   the store's notes and the retry budget's state.
//! * The machine owns the job's reservation, and every path ends it
//!   exactly once:
//!   - never sent (cancelled before [`sending`](Job::sending), or while
//!     the transport said the request still waited for a connection) →
//!     released;
//!   - an answer → its evidence (header sync, a pause, a stop, the retry
//!     budget) is applied *first*, in the same update: a success settles
//!     from its usage (at the body's end); an error answer gives its
//!     tokens back, and keeps the request unit charged where the provider
//!     counts rejected requests (OpenAI's 429s); a stream error before the
//!     commit point settles the usage it reported;
//!   - sent with no answer (a reset or timeout after the send, a
//!     cancellation of a send that may have reached the wire) → charged at its
//!     estimate, to the buckets and the spend budget at once and for good
//!     (the provider may have run and billed it); a decision to hold the
//!     job as `outcome_unknown` holds the *job* for its caller — nothing
//!     stays reserved.
//! * Decisions are made in one place: [`crate::decide::decide`] under the
//!   policy, with the store's retry budget as one of its inputs (a retry
//!   decided before the store answered is decided again against a spent
//!   budget — no random draw comes before that question, so the second
//!   decision costs the job's jitter nothing), plus the admission's own
//!   endings (a wait beyond the inline limit defers, a stop stops, a
//!   refusal gives up).
//!
//! ```
//! use ratewise_core::admit::{Config, Controller, Shared};
//! use ratewise_core::classify::{classify_response, ResponseView};
//! use ratewise_core::decide::Policy;
//! use ratewise_core::job::{BodyEnd, Job, JobSpec, Step};
//! use ratewise_core::{Action, Instant, Now, Provider, Usage};
//! use std::time::SystemTime;
//!
//! // The in-memory store answers synchronously; a driver over any other
//! // store awaits `Store::admit` and `Store::update` at the same places.
//! let mut config = Config::default();
//! config.seed = Some(1);
//! let store = Shared::new(Controller::new(config));
//! let policy = Policy::default();
//! let now = Now::new(Instant::ZERO, SystemTime::UNIX_EPOCH);
//! let target = store.target("team-a", "claude-sonnet-4-5");
//! let mut job = Job::new(JobSpec::new(target, now.instant), &policy);
//! let Step::Admit(req) = job.next(now) else { panic!() };
//! let Step::Send { attempt: 1 } = job.admission(store.admit(&req, now), &policy, now) else { panic!() };
//! job.sending();
//! // ... the request goes out; a 200 comes back ...
//! let headers = http::HeaderMap::new();
//! let view = ResponseView { status: http::StatusCode::OK, headers: &headers, body: b"" };
//! let c = classify_response(Provider::Anthropic, &view, now.wall);
//! let update = job.answered(&policy, &c, None, &mut fastrand::Rng::with_seed(7), now);
//! let d = job.applied(store.apply(update, now), now);
//! assert_eq!(d.action, Action::Done);
//! // The body is the caller's; its end settles the reservation.
//! let usage = Usage { input_tokens: 12, output_tokens: 40, ..Usage::default() };
//! if let Some(update) = job.body_end(BodyEnd::Complete { usage: Some(usage) }) {
//!     store.apply(update, now);
//! }
//! assert!(matches!(job.next(now), Step::End(_)));
//! assert!(store.ledger().is_clean());
//! ```

use crate::admit::{
    Admission, AdmitRequest, Applied, End, Observed, Reservation, Sent, Target, Update, WaitReason,
};
use crate::classify::Classification;
use crate::decide::{decide, paced, JobState, Policy, RandomSource};
use crate::decision::{Action, Decision, RetryBudgetState};
use crate::note::Note;
use crate::time::{Instant, Now};
use crate::usage::Usage;
use crate::vocab::Cause;
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
    /// Whether the answer streams (its first byte comes with the first
    /// token, not after the whole generation).
    pub streamed: bool,
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
            streamed: false,
        }
    }
}

/// How a delivered success's body ended, as its meter saw it: what
/// [`Job::body_end`] settles and reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyEnd {
    /// Read to its end: `usage` as the body reported it (`None`: it
    /// reported none; charged at the estimate).
    Complete {
        /// The reported usage.
        usage: Option<Usage>,
    },
    /// Ended early (dropped by its reader, a broken connection, an
    /// interrupted stream): `delivered` is what it is charged, when the
    /// meter could tell (a stream's output so far); else the estimate.
    Cut {
        /// What it is charged, when known.
        delivered: Option<Usage>,
    },
    /// A stream that failed in band after it reached its reader: the
    /// error event's cause, type and code.
    FailedInBand {
        /// The cause the stream tracker read.
        cause: Cause,
        /// The event's error type.
        error_type: Option<String>,
        /// The event's error code.
        code: Option<String>,
        /// What it is charged, when known.
        delivered: Option<Usage>,
    },
}

/// What the driver does next. Exhaustive on purpose: a new step is a
/// compile error in every driver, not a runtime fallback.
#[derive(Debug)]
pub enum Step {
    /// Ask the store to admit this request ([`Store::admit`](crate::admit::Store::admit)),
    /// and hand its answer to [`Job::admission`].
    Admit(AdmitRequest),
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
    /// A send, a body or a store update is in progress: nothing to do
    /// until the driver tells the machine what happened.
    Pending,
    /// The job is over.
    End(Ended),
}

/// What a [`Step::Wait`] waits for. Exhaustive, as [`Step`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitFor {
    /// Admission (a bucket, a pause, a probe, the spend budget).
    Admission(WaitReason),
    /// A retry's decided delay.
    Retry,
}

/// Where the job's send stands: whether it may have reached the provider.
/// The machine is its one owner ([`Job::send_state`]); drivers and the
/// views they publish (a tower layer's `Cancel`, a proxy's count of sends
/// on the wire) read it from here.
///
/// A send is [`HandedOver`](Sending::HandedOver) once
/// [`sending`](Job::sending) is told: a transport that says nothing more
/// may have put it on the wire at any moment after. A transport that can
/// tell the wait for a connection from the wire says so: it waits
/// ([`connecting`](Job::connecting): [`Connecting`](Sending::Connecting),
/// nothing reached the provider), then it reached one
/// ([`on_wire`](Job::on_wire): [`OnWire`](Sending::OnWire)). What ends the
/// reservation of a send stopped short of an answer (its caller left,
/// the driver withdrew it, the job was dropped) follows from it: released
/// where nothing reached the provider, charged at its estimate where it
/// may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sending {
    /// Nothing of the job is out: no send admitted, one admitted and not
    /// yet handed to the transport, or an answer that came back (between
    /// sends, or an error answer being applied).
    NotSent,
    /// Handed to a transport that waits for a connection and will say
    /// when the request reaches one: nothing reached the provider yet.
    Connecting,
    /// Handed to the transport, which does not say when it reaches the
    /// wire: it may have reached the provider.
    HandedOver,
    /// The request reached a connection (or its success's answer is
    /// being delivered): it may have reached the provider.
    OnWire,
}

impl Sending {
    /// Whether the request may have reached the provider: what a send
    /// stopped short of an answer is charged for.
    pub const fn may_have_reached(self) -> bool {
        matches!(self, Sending::HandedOver | Sending::OnWire)
    }
}

/// How a job ended.
#[derive(Debug)]
#[non_exhaustive]
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
    /// Asked the store for admission; waiting for its answer.
    Admitting,
    /// A reservation is held for a send (handed over or not).
    Sending,
    /// An answer's update is with the store; `delivering`: a success whose
    /// body the caller reads next.
    Applying {
        decision: Decision,
        delivering: bool,
        /// For a retry: the decision should the store say the retry budget
        /// is spent (`decide` against that state).
        if_budget_spent: Option<Box<Decision>>,
    },
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
    /// [`Policy::expected_attempt_time`]: the store's last moment to send
    /// counts the longer of it and the time it learned, not both.
    attempt_time: Duration,
    /// For a job with no deadline: the most it waits in line in total —
    /// admission waits, its turn in a driver's queue and retry delays
    /// together ([`Policy::max_inline_wait`]); `None` with a deadline.
    inline_limit: Option<Duration>,
    /// In-line waiting done in earlier waits (sends excluded).
    waited: Duration,
    /// When the current wait began (arrival; a retry's answer); `None`
    /// while a send is out, or after a [`requeue`](Job::requeue) until
    /// the next [`next`](Job::next).
    waiting_since: Option<Instant>,
    attempts: u32,
    /// Attempts answered by a rate signal the job waited out
    /// ([`paced`](crate::decide::paced)): not counted toward
    /// `max_attempts` or the retry budget.
    paced: u32,
    /// The last answer was such a signal: the next admission is a paced
    /// retry, outside the retry budget.
    last_paced: bool,
    state: State,
    reservation: Option<Reservation>,
    admitted: Option<Sent>,
    /// The send of the current attempt (see [`Sending`]): reset at each
    /// admission, read through [`send_state`](Job::send_state).
    sending: Sending,
    /// The provider of the success being delivered: what an in-band
    /// error at its body's end is classified for.
    delivering_for: Option<crate::vocab::Provider>,
    /// The caller went away ([`caller_left`](Job::caller_left)): no
    /// further send; a send in flight is finished and accounted.
    cancelled: bool,
    /// Events told out of turn (see [`strays`](Job::strays)).
    strays: u32,
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
            attempt_time: policy.expected_attempt_time,
            inline_limit: spec.deadline.is_none().then_some(policy.max_inline_wait),
            waited: Duration::ZERO,
            waiting_since: Some(spec.arrived),
            attempts: 0,
            paced: 0,
            last_paced: false,
            state: State::Ready { not_before: None },
            reservation: None,
            admitted: None,
            sending: Sending::NotSent,
            delivering_for: None,
            cancelled: false,
            strays: 0,
        }
    }

    /// Events told to the machine out of turn (an answer with no send in
    /// progress, a body end with no body delivered, a second
    /// [`sending`](Self::sending)...): each was ignored — the job stays as
    /// it was — logged at `debug` and counted here. A driver's tests
    /// assert it stays 0.
    pub fn strays(&self) -> u32 {
        self.strays
    }

    fn stray(&mut self, event: &'static str) {
        self.strays = self.strays.saturating_add(1);
        tracing::debug!(event, state = ?self.state, "job machine: stray event ignored");
    }

    /// What it is.
    pub fn spec(&self) -> &JobSpec {
        &self.spec
    }

    /// Sends made so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The instant admission must come by for an attempt to fit in the
    /// deadline (`None`: no deadline).
    pub fn admit_deadline(&self) -> Option<Instant> {
        self.admit_deadline
    }

    /// For a job with no deadline, the instant past which it would have
    /// waited in line longer than [`Policy::max_inline_wait`] in total —
    /// every admission wait, its turn behind other jobs and every retry
    /// delay since it arrived, counted together (sends are not waits).
    /// An admission or a retry that would send it later defers it instead.
    /// A driver that holds a job outside the machine (a queue) asks for
    /// admission by this instant at the latest. `None` for a job with a
    /// deadline (its deadline bounds its waits: see
    /// [`admit_deadline`](Self::admit_deadline)) and while a send is out.
    pub fn inline_by(&self) -> Option<Instant> {
        let limit = self.inline_limit?;
        let since = self.waiting_since?;
        let left = limit.saturating_sub(self.waited);
        Some(Instant::from_origin(
            since.since_origin().saturating_add(left),
        ))
    }

    /// Whether being sent at `at` would take this job past its in-line
    /// limit; the total it would then have waited, when so.
    fn past_inline(&self, at: Instant) -> Option<Duration> {
        let by = self.inline_by()?;
        let since = self.waiting_since?;
        (at > by).then(|| {
            self.waited
                .saturating_add(at.saturating_duration_since(since))
        })
    }

    /// A deferral to `not_before`: it would have waited `total` in line.
    fn deferred(&self, total: Duration, not_before: Instant, now: Now) -> Decision {
        Decision::new(Action::Defer {
            until: now.wall_at(not_before),
            not_before,
        })
        .with_note(Note::Deferred {
            wait: total,
            limit: self.inline_limit.unwrap_or_default(),
        })
    }

    /// Sends that count toward the policy's `max_attempts`: those not
    /// answered by a rate signal the job waited out ([`paced`]).
    pub fn counted_attempts(&self) -> u32 {
        self.job_state().counted_attempts()
    }

    /// The decision the job ended with, once it has ended.
    pub fn ended(&self) -> Option<&Decision> {
        match &self.state {
            State::Ended { decision, .. } => Some(decision),
            _ => None,
        }
    }

    /// Between sends only (nothing reserved, nothing asked): the next
    /// admission goes to `target` instead — a [pool](crate::pool)'s other
    /// member — not before `not_before`, which replaces a retry's delay
    /// (that delay was the answering member's). Everything else carries
    /// over: the attempts, the deadline, whether the last answer was
    /// paced. Returns whether the job was between sends.
    pub(crate) fn retarget(&mut self, target: Target, not_before: Option<Instant>) -> bool {
        if !matches!(self.state, State::Ready { .. }) || self.cancelled {
            return false;
        }
        self.spec.target = target;
        self.state = State::Ready { not_before };
        true
    }

    /// What to do next (see [`Step`]).
    pub fn next(&mut self, now: Now) -> Step {
        if self.cancelled && matches!(self.state, State::Ready { .. }) {
            self.end(caller_left_decision());
        }
        if let State::Ready { not_before } = self.state {
            if self.waiting_since.is_none() {
                // Back from a requeue: a new wait in line starts now.
                self.waiting_since = Some(not_before.map_or(now.instant, |t| t.max(now.instant)));
            }
        }
        match &mut self.state {
            State::Admitting | State::Sending | State::Applying { .. } | State::Delivering => {
                return Step::Pending
            }
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
        self.state = State::Admitting;
        Step::Admit(self.admit_request())
    }

    /// The request the next [`Step::Admit`] will ask with, without asking:
    /// for a store's [`predict`](crate::admit::Store::predict) while the
    /// job waits behind others.
    pub fn admit_request(&self) -> AdmitRequest {
        AdmitRequest {
            target: self.spec.target,
            input_estimate: self.spec.input_estimate,
            body_bytes: self.spec.body_bytes,
            max_tokens: self.spec.max_tokens,
            is_retry: self.attempts > 0,
            paced: self.last_paced,
            deadline: self.spec.deadline.map(|d| self.spec.arrived + d),
            attempt_time: self.attempt_time,
            streamed: self.spec.streamed,
        }
    }

    /// A store's prediction for this job while it waits behind others
    /// ([`admit_request`](Self::admit_request)): a refusal — it cannot be
    /// sent before its deadline — ends it at once, nothing sent, as a
    /// refused admission does (`Some(Step::End)`); anything else changes
    /// nothing (`None`): the job waits for its turn.
    pub fn predicted(&mut self, answer: Admission, now: Now) -> Option<Step> {
        match answer {
            Admission::Refused { reason, earliest }
                if matches!(self.state, State::Ready { .. }) =>
            {
                Some(self.end_at_admission(refused(reason, earliest, now)))
            }
            _ => None,
        }
    }

    /// The store's answer to the [`Step::Admit`] just asked: `Send` with
    /// the granted reservation, `Wait` (ask [`next`](Self::next) again
    /// then), or `End` (stopped; refused — for a deadline, with a
    /// [`Note::TooLate`] saying when it could have gone; or, for a job with
    /// no deadline, a wait past the inline limit: deferred). Call it only with the answer to the machine's own
    /// [`Step::Admit`]: an answer it did not ask for is ignored
    /// ([`Step::Pending`]), and a reservation in it is left to the store's
    /// lease.
    pub fn admission(&mut self, answer: Admission, policy: &Policy, now: Now) -> Step {
        // The in-line limit is the one `new` was given.
        let _ = policy;
        if !matches!(self.state, State::Admitting) {
            self.stray("admission");
            return Step::Pending;
        }
        self.state = State::Ready { not_before: None };
        match answer {
            Admission::Go(res) if self.cancelled => {
                // The caller left while it was asked: nothing is sent. The
                // reservation stays with the machine until `cancel` (a
                // driver's drop) gives it back.
                self.reservation = Some(res);
                self.end_at_admission(caller_left_decision())
            }
            Admission::Go(res) => {
                if let Some(since) = self.waiting_since.take() {
                    let waited = now.instant.saturating_duration_since(since);
                    self.waited = self.waited.saturating_add(waited);
                }
                self.admitted = Some(res.sent());
                self.reservation = Some(res);
                self.sending = Sending::NotSent;
                self.attempts += 1;
                self.state = State::Sending;
                Step::Send {
                    attempt: self.attempts,
                }
            }
            Admission::Wait { until, reason } => {
                // A job with a deadline waits as long as its caller will:
                // the store refuses it when admission would come past its
                // last moment to send. The inline limit bounds only jobs
                // with no deadline, and bounds all their waits together.
                if let Some(total) = self.past_inline(until) {
                    let wait = until.saturating_duration_since(now.instant);
                    let d = self.deferred(total, until, now).with_note(format!(
                        "admission wait {wait:?}: past the inline limit in total"
                    ));
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
            Admission::Refused { reason, earliest } => {
                self.end_at_admission(refused(reason, earliest, now))
            }
            Admission::UnknownScope => {
                let d = Decision::new(Action::Inspect).with_note(
                    "the store does not know this job's scope (a target from another store?): nothing sent",
                );
                self.end_at_admission(d)
            }
        }
    }

    /// Ends a job before its next admission with `decision` (load
    /// shedding, a driver's queue closing). Nothing is held between
    /// sends, so nothing is given back.
    fn end_before_admission(&mut self, decision: Decision) -> Step {
        if matches!(self.state, State::Ready { .. }) {
            self.end_at_admission(decision)
        } else {
            Step::Pending
        }
    }

    /// Load shedding: whether this job, joining its scope's queue with
    /// `ahead` jobs already waiting before it, is turned away
    /// ([`shed`](Self::shed)). Only a job with no deadline is, and only
    /// past `max_waiting`: a job whose caller waits is bounded by its
    /// deadline (it ends when it cannot be sent in time), never turned
    /// away while it could still go.
    pub fn sheds(&self, ahead: usize, max_waiting: Option<usize>) -> bool {
        self.admit_deadline.is_none()
            && matches!(self.state, State::Ready { .. })
            && max_waiting.is_some_and(|max| ahead >= max)
    }

    /// Ends a job [`sheds`](Self::sheds) turned away: `defer`, nothing
    /// sent, not before the `ahead` jobs queued before it could drain at
    /// the scope's request rate (`requests_per_minute`, when one is
    /// known; else one throttle backoff each).
    pub fn shed(
        &mut self,
        ahead: usize,
        requests_per_minute: Option<u64>,
        policy: &Policy,
        now: Now,
    ) -> Step {
        let per_request = requests_per_minute
            .filter(|rpm| *rpm > 0)
            .map(|rpm| Duration::from_secs(60) / u32::try_from(rpm).unwrap_or(u32::MAX))
            .unwrap_or(policy.backoff.throttle_base);
        let drain = per_request.saturating_mul(u32::try_from(ahead).unwrap_or(u32::MAX));
        let d = Decision::new(Action::Defer {
            until: now.after(drain).wall,
            not_before: now.instant + drain,
        })
        .with_note(format!(
            "load shed: {ahead} jobs already wait for this scope (max_waiting)"
        ));
        self.end_before_admission(d)
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
    /// reach the provider, so a cancellation charges it — unless the
    /// transport says it is still waiting for a connection
    /// ([`connecting`](Self::connecting)).
    pub fn sending(&mut self) {
        if matches!(self.state, State::Sending) && self.sending == Sending::NotSent {
            self.sending = Sending::HandedOver;
        } else {
            self.stray("sending");
        }
    }

    /// The transport that took the send waits for a connection, and will
    /// say when the request reaches one ([`on_wire`](Self::on_wire)):
    /// until then nothing reached the provider, and a cancellation
    /// releases the reservation. Told only of a send handed over
    /// ([`sending`](Self::sending)) and not yet on the wire; a driver
    /// tells it only once the transport can no longer put the request on
    /// the wire behind its back (it decided the wait against the
    /// cancellation, or reports the wire before acting on it).
    pub fn connecting(&mut self) {
        if matches!(self.state, State::Sending) && self.sending == Sending::HandedOver {
            self.sending = Sending::Connecting;
        } else {
            self.stray("connecting");
        }
    }

    /// The request reached a connection: it may reach the provider now,
    /// so a cancellation charges it. Told of a send handed over
    /// ([`sending`](Self::sending)), waiting for a connection or not;
    /// anything else is stray.
    pub fn on_wire(&mut self) {
        if matches!(self.state, State::Sending)
            && matches!(self.sending, Sending::HandedOver | Sending::Connecting)
        {
            self.sending = Sending::OnWire;
        } else {
            self.stray("on_wire");
        }
    }

    /// Where the job's send stands (see [`Sending`]): the current
    /// attempt's while it is out, [`Sending::OnWire`] while a success's
    /// answer is delivered, else [`Sending::NotSent`].
    pub fn send_state(&self) -> Sending {
        match self.state {
            State::Sending => self.sending,
            State::Applying {
                delivering: true, ..
            }
            | State::Delivering => Sending::OnWire,
            _ => Sending::NotSent,
        }
    }

    /// The caller went away (a proxy's client disconnected, a run was
    /// stopped): a driver's cancellation. Nothing more is sent for the job.
    ///
    /// * Between sends (waiting for admission or a retry's delay,
    ///   admitted but not yet handed to the transport, or handed to one
    ///   still waiting for a connection — [`Sending::Connecting`]) it ends now,
    ///   `give_up` for [`GiveUpReason::Cancelled`](crate::vocab::GiveUpReason::Cancelled),
    ///   and a reservation it holds is released: the update for the store
    ///   is returned.
    /// * A send in progress is finished: its answer is applied like any
    ///   other (its evidence, its settlement), and the job then ends
    ///   instead of retrying ([`applied`](Self::applied) says so).
    /// * A body being delivered is its reader's: its end settles it.
    ///
    /// Telling it twice changes nothing.
    pub fn caller_left(&mut self) -> Option<Update> {
        self.cancelled = true;
        match self.state {
            State::Ready { .. } => {
                self.end(caller_left_decision());
                None
            }
            State::Sending if !self.sending.may_have_reached() => {
                let end = self
                    .reservation
                    .take()
                    .map(|reservation| End::Release { reservation });
                self.end(caller_left_decision());
                end.map(Update::ending)
            }
            _ => None,
        }
    }

    /// The driver will not go on with this job, for a reason of its own
    /// that no answer gave (its journal could not record the attempt
    /// about to be sent; a step it cannot take): the job ends `inspect`,
    /// `why` in its note, and nothing more is sent. A reservation whose
    /// request reached nothing (not handed to the transport, or waiting
    /// for a connection) is released; one that may have (a send on the
    /// wire, a body being delivered) is charged at its estimate, as a
    /// cancellation is.
    /// Returns the update for the store; told after the job ended it is
    /// stray.
    pub fn withdraw(&mut self, why: &str) -> Option<Update> {
        if matches!(self.state, State::Ended { .. }) {
            self.stray("withdraw");
            return None;
        }
        let end = self.take_end();
        self.end(Decision::new(Action::Inspect).with_note(why.to_owned()));
        end.map(Update::ending)
    }

    /// The answer to the send in progress, classified. `usage`: what the
    /// answer reported when its body was read already (a simulator, a
    /// stream that failed before its commit point); for a success whose
    /// body is still to be read, `None` — its end settles
    /// ([`body_end`](Self::body_end), told by whatever meters the body).
    ///
    /// Returns the update for the store; its answer goes to
    /// [`applied`](Self::applied).
    pub fn answered<R: RandomSource>(
        &mut self,
        policy: &Policy,
        c: &Classification,
        usage: Option<&Usage>,
        rng: &mut R,
        now: Now,
    ) -> Update {
        if !matches!(self.state, State::Sending) {
            self.stray("answered");
            return nothing();
        }
        if c.cause == Cause::Success {
            self.delivering_for = Some(c.provider);
            let observed = self.observed(c, Decision::new(Action::Done));
            let end = match usage {
                Some(u) => self.reservation.take().map(|reservation| End::Settle {
                    reservation,
                    usage: *u,
                }),
                None => None,
            };
            self.state = State::Applying {
                decision: observed.decision.clone(),
                delivering: usage.is_none(),
                if_budget_spent: None,
            };
            return Update::answer(observed, end);
        }
        let d = self.inline_bounded(decide(policy, &self.job_state(), c, now, rng), now);
        self.note_paced(c, &d);
        let if_budget_spent = self.if_budget_spent(policy, c, &d, now, rng);
        let observed = self.observed(c, d);
        let end = self.reservation.take().map(|reservation| match usage {
            Some(u) => End::Settle {
                reservation,
                usage: *u,
            },
            None if rejected_request_counts(c) => End::Settle {
                reservation,
                usage: Usage::default(),
            },
            None => End::Release { reservation },
        });
        self.state = State::Applying {
            decision: observed.decision.clone(),
            delivering: false,
            if_budget_spent,
        };
        Update::answer(observed, end)
    }

    /// The send in progress failed in transport (`c` is its
    /// classification, `maybe_sent` whether the request may have reached
    /// the provider; a send timeout is such a failure). It is charged at
    /// its estimate when it may have, and its request may have reached
    /// the wire ([`Sending::may_have_reached`]); else released. Returns the update
    /// for the store; its answer goes to [`applied`](Self::applied).
    pub fn failed<R: RandomSource>(
        &mut self,
        policy: &Policy,
        c: &Classification,
        maybe_sent: bool,
        rng: &mut R,
        now: Now,
    ) -> Update {
        if !matches!(self.state, State::Sending) {
            self.stray("failed");
            return nothing();
        }
        let d = self.inline_bounded(decide(policy, &self.job_state(), c, now, rng), now);
        self.note_paced(c, &d);
        let if_budget_spent = self.if_budget_spent(policy, c, &d, now, rng);
        let observed = self.observed(c, d);
        let reached = self.sending.may_have_reached();
        let end = self.reservation.take().map(|reservation| {
            if maybe_sent && reached {
                // Whether retried or held as unknown: charged at once.
                let usage = estimate(&reservation);
                End::Settle { reservation, usage }
            } else {
                End::Release { reservation }
            }
        });
        self.state = State::Applying {
            decision: observed.decision.clone(),
            delivering: false,
            if_budget_spent,
        };
        Update::answer(observed, end)
    }

    /// The store applied an answer's update: `applied` is its answer (the
    /// decision with the store's notes, and the retry budget's state;
    /// `None` keeps the machine's own decision). Returns the decision: a
    /// retry waits out its delay and asks admission again, a success's
    /// body is read next, anything else ends the job. A retry against a
    /// spent retry budget is decided again against it
    /// ([`crate::decide::decide`]: `give_up` `retry_budget`). A
    /// retry of a job whose caller left is not made: the decision returned
    /// is then `give_up` `cancelled`, with the retry it replaced in a note.
    pub fn applied(&mut self, applied: Option<Applied>, now: Now) -> Decision {
        if !matches!(self.state, State::Applying { .. }) {
            // Nothing was being applied: the state stays as it was.
            self.stray("applied");
            return applied.map_or_else(|| Decision::new(Action::Inspect), |a| a.decision);
        }
        let State::Applying {
            decision,
            delivering,
            if_budget_spent,
        } = std::mem::replace(&mut self.state, State::Ready { not_before: None })
        else {
            unreachable!("checked above")
        };
        let mut d = match applied {
            None => decision,
            Some(a) => match (a.retry_budget, if_budget_spent) {
                (RetryBudgetState::Spent, Some(spent)) => {
                    // The store's notes follow the machine's own.
                    let mut store_notes = a.decision.notes;
                    let store_notes =
                        store_notes.split_off(decision.notes.len().min(store_notes.len()));
                    let mut d = *spent;
                    d.notes.extend(store_notes);
                    d
                }
                _ => a.decision,
            },
        };
        if self.cancelled {
            if let Action::Retry { delay } = d.action {
                d = caller_left_decision()
                    .with_note(format!("a retry in {delay:?} was decided; not made"));
            }
        }
        if delivering {
            self.state = State::Delivering;
        } else {
            self.after(d.clone(), now);
        }
        d
    }

    /// A delivered success's body ended, as whatever meters it saw it
    /// (see [`BodyEnd`]): settled from the usage it reported or was
    /// charged, else at the reservation's estimate (the provider may have
    /// generated and billed the answer); a stream that failed in band is
    /// classified here ([`classify_in_band`](crate::classify::classify_in_band))
    /// and its evidence goes to the store in the same update, the job
    /// ending `inspect` (a committed stream is never replayed). Returns the
    /// update for the store. Told on every path — a body dropped by its
    /// reader too — exactly once; a second is stray.
    pub fn body_end(&mut self, end: BodyEnd) -> Option<Update> {
        if !matches!(self.state, State::Delivering) {
            self.stray("body_end");
            return None;
        }
        let (usage, failed) = match end {
            BodyEnd::Complete { usage } => (usage, None),
            BodyEnd::Cut { delivered } => (delivered, None),
            BodyEnd::FailedInBand {
                cause,
                error_type,
                code,
                delivered,
            } => (delivered, Some((cause, error_type, code))),
        };
        let settle = self.reservation.take().map(|reservation| {
            let usage = usage.unwrap_or_else(|| estimate(&reservation));
            End::Settle { reservation, usage }
        });
        let Some((cause, error_type, code)) = failed else {
            self.end(Decision::new(Action::Done));
            return settle.map(Update::ending);
        };
        let provider = self
            .delivering_for
            .unwrap_or(crate::vocab::Provider::Generic);
        let c = crate::classify::classify_in_band(provider, cause, error_type, code);
        let d = Decision::new(Action::Inspect)
            .with_note("committed stream: never replayed automatically");
        self.end(d.clone());
        Some(Update::answer(
            Observed::new(self.spec.target.scope, c, d),
            settle,
        ))
    }

    /// What the send in progress (or the body being delivered) is charged
    /// when it may have run and reported no usage: its reservation's
    /// amounts, as usage. The machine charges this itself at a body's end
    /// with no usage; a meter reads it to record what was charged.
    pub fn estimate(&self) -> Option<Usage> {
        self.reservation.as_ref().map(estimate)
    }

    /// The reservation the machine holds (granted, not yet ended): its id
    /// and amounts, for a driver that follows it to its end (the
    /// admission queue's discipline charges a flow at admission and
    /// corrects it when the same reservation settles).
    pub fn reservation(&self) -> Option<(crate::admit::ReservationId, crate::admit::Amounts)> {
        self.reservation.as_ref().map(|r| (r.id(), r.amounts()))
    }

    /// The job is dropped by its caller. A reservation whose request
    /// reached nothing ([`Sending::may_have_reached`]: not handed to the
    /// transport, or waiting for a connection) is released; one that may
    /// have is charged at its estimate (the provider may have run it).
    /// Returns the update for the store
    /// (from a `Drop`: [`Store::update_detached`](crate::admit::Store::update_detached));
    /// nothing stays outstanding once it is applied.
    pub fn cancel(&mut self) -> Option<Update> {
        let end = self.take_end();
        if !matches!(self.state, State::Ended { .. }) {
            self.cancelled = true;
            self.end(caller_left_decision());
        }
        end.map(Update::ending)
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
            // Handed back: a new wait in line starts when it is asked for
            // again (see `next`).
            self.waited = Duration::ZERO;
            self.waiting_since = None;
            self.state = State::Ready { not_before };
        }
        kept
    }

    /// The reservation's end when the job stops short of an answer:
    /// released if its request reached nothing, else charged at its
    /// estimate (the provider may have run it).
    fn take_end(&mut self) -> Option<End> {
        let reached = self.send_state().may_have_reached();
        self.reservation.take().map(|reservation| {
            if reached {
                let usage = estimate(&reservation);
                End::Settle { reservation, usage }
            } else {
                End::Release { reservation }
            }
        })
    }

    fn job_state(&self) -> JobState {
        JobState::new(self.attempts, self.spec.arrived, self.spec.deadline).with_paced(self.paced)
    }

    /// After an answer decided `d`: whether the job waits it out as a rate
    /// signal, not counted ([`paced`](crate::decide::paced)).
    fn note_paced(&mut self, c: &Classification, d: &Decision) {
        self.last_paced = matches!(d.action, Action::Retry { .. } | Action::Defer { .. })
            && paced(c, &self.job_state());
        if self.last_paced {
            self.paced = self.paced.saturating_add(1);
        }
    }

    /// For a retry (or a deferral) decided `d`: the decision against a
    /// spent retry budget, in case the store says so. `decide` asks about
    /// the budget before it draws a delay, so no random value is drawn.
    fn if_budget_spent<R: RandomSource>(
        &self,
        policy: &Policy,
        c: &Classification,
        d: &Decision,
        now: Now,
        rng: &mut R,
    ) -> Option<Box<Decision>> {
        // A paced retry is outside the budget: nothing to decide again
        // (and no random value drawn for a decision never used).
        let counted = !paced(c, &self.job_state());
        (counted && matches!(d.action, Action::Retry { .. } | Action::Defer { .. })).then(|| {
            let job = self.job_state().with_retry_budget(RetryBudgetState::Spent);
            Box::new(decide(policy, &job, c, now, rng))
        })
    }

    fn observed(&self, c: &Classification, d: Decision) -> Observed {
        let o = Observed::new(self.spec.target.scope, c.clone(), d);
        match self.admitted {
            Some(sent) if self.reservation.is_some() => o.of_sent(sent),
            _ => o,
        }
    }

    /// A retry `d` of a job with no deadline whose delay, added to the
    /// waits it already made in line, would pass the inline limit: a
    /// deferral to the same instant instead (`decide` bounds one delay;
    /// this bounds the job's waits together).
    fn inline_bounded(&self, d: Decision, now: Now) -> Decision {
        let Action::Retry { delay } = d.action else {
            return d;
        };
        let Some(limit) = self.inline_limit else {
            return d;
        };
        let total = self.waited.saturating_add(delay);
        if total <= limit {
            return d;
        }
        let later = now.after(delay);
        let mut deferred = Decision::new(Action::Defer {
            until: later.wall,
            not_before: later.instant,
        });
        deferred.notes = d.notes;
        deferred.with_note(Note::Deferred { wait: total, limit })
    }

    /// After an answer: a retry waits out its delay (never sent before
    /// it; admission may add its own wait), anything else ends.
    fn after(&mut self, d: Decision, now: Now) {
        match d.action {
            Action::Retry { delay } => {
                self.waiting_since = Some(now.instant);
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

/// An update that changes nothing: the answer to a stray event.
fn nothing() -> Update {
    Update {
        observed: None,
        end: None,
    }
}

/// How a job whose caller left ends.
fn caller_left_decision() -> Decision {
    Decision::new(Action::GiveUp {
        reason: crate::vocab::GiveUpReason::Cancelled,
    })
    .with_note("its caller left: nothing more is sent")
}

/// The decision for a refused admission; for a deadline, with when the job
/// could have gone.
fn refused(reason: crate::vocab::GiveUpReason, earliest: Option<Instant>, now: Now) -> Decision {
    let mut d = Decision::new(Action::GiveUp { reason })
        .with_note("admission refused: waiting cannot help");
    if let Some(at) = earliest {
        d = d.with_note(Note::TooLate {
            earliest: now.wall_at(at),
            wait: at.saturating_duration_since(now.instant),
        });
    }
    d
}

/// Whether the provider keeps a rejected request's request unit: OpenAI
/// documents that requests answered 429 still count against the
/// per-minute request limit ([`Profile::rejected_requests_count`]). Their
/// tokens are given back either way.
///
/// [`Profile::rejected_requests_count`]: crate::admit::Profile::rejected_requests_count
pub(crate) fn rejected_request_counts(c: &Classification) -> bool {
    crate::admit::Profile::of(c.provider).rejected_requests_count && c.status == Some(429)
}

/// A reservation's amounts as usage: what a send that may have run is
/// charged.
fn estimate(res: &Reservation) -> Usage {
    let a = res.amounts();
    Usage {
        input_tokens: a.input,
        output_tokens: a.output,
        ..Usage::default()
    }
}

#[cfg(test)]
mod tests {
    //! Where a send stands ([`Sending`]) and what each way of stopping it
    //! short of an answer ends its reservation with.

    use super::*;
    use crate::admit::{Config, Controller, Shared};
    use crate::classify::{classify_response, classify_transport, ResponseView, TransportFailure};
    use crate::vocab::{GiveUpReason, Provider};
    use std::time::SystemTime;

    fn now() -> Now {
        Now::new(Instant::ZERO, SystemTime::UNIX_EPOCH)
    }

    fn store() -> Shared {
        let config = Config {
            seed: Some(1),
            ramp: crate::admit::RampConfig {
                start: 1000,
                ..Default::default()
            },
            limits: crate::admit::Limits {
                requests: Some(6000),
                ..crate::admit::Limits::NONE
            },
            ..Config::default()
        };
        Shared::new(Controller::new(config))
    }

    /// A job admitted for its first send, not yet handed over.
    fn admitted(s: &Shared) -> Job {
        let policy = Policy::default();
        let mut spec = JobSpec::new(s.target("k", "claude-sonnet-4-5"), Instant::ZERO);
        spec.max_tokens = Some(100);
        spec.input_estimate = Some(50);
        let mut j = Job::new(spec, &policy);
        let Step::Admit(req) = j.next(now()) else {
            panic!("asks for admission")
        };
        let Step::Send { attempt: 1 } = j.admission(s.admit(&req, now()), &policy, now()) else {
            panic!("admitted at once")
        };
        assert_eq!(j.send_state(), Sending::NotSent);
        j
    }

    fn released(u: &Option<Update>) -> bool {
        matches!(
            u,
            Some(Update {
                end: Some(End::Release { .. }),
                ..
            })
        )
    }

    fn charged(u: &Option<Update>) -> bool {
        matches!(u, Some(Update { end: Some(End::Settle { usage, .. }), .. }) if usage.output_tokens == 100)
    }

    fn answer(status: u16) -> Classification {
        let headers = http::HeaderMap::new();
        let view = ResponseView {
            status: http::StatusCode::from_u16(status).unwrap(),
            headers: &headers,
            body: b"",
        };
        classify_response(Provider::Anthropic, &view, now().wall)
    }

    #[test]
    fn a_send_goes_not_sent_handed_over_connecting_on_wire() {
        let s = store();
        let mut j = admitted(&s);
        j.sending();
        assert_eq!(j.send_state(), Sending::HandedOver);
        j.connecting();
        assert_eq!(j.send_state(), Sending::Connecting);
        j.on_wire();
        assert_eq!(j.send_state(), Sending::OnWire);
        assert_eq!(j.strays(), 0);
        // A transport that does not say it waits goes straight on.
        let mut j = admitted(&s);
        j.sending();
        j.on_wire();
        assert_eq!(j.send_state(), Sending::OnWire);
        assert_eq!(j.strays(), 0);
    }

    #[test]
    fn wire_events_out_of_turn_are_stray_and_change_nothing() {
        let s = store();
        let mut j = admitted(&s);
        // Not handed over: neither is heard.
        j.connecting();
        j.on_wire();
        assert_eq!((j.send_state(), j.strays()), (Sending::NotSent, 2));
        j.sending();
        j.on_wire();
        // On the wire: it does not go back to waiting, nor on twice.
        j.connecting();
        j.on_wire();
        assert_eq!((j.send_state(), j.strays()), (Sending::OnWire, 4));
        // Between sends: an answer came back.
        let u = j.failed(
            &Policy::default(),
            &classify_transport(Provider::Anthropic, TransportFailure::ResetAfterSend),
            true,
            &mut fastrand::Rng::with_seed(1),
            now(),
        );
        s.apply(u, now());
        assert_eq!(j.send_state(), Sending::NotSent);
        j.on_wire();
        assert_eq!(j.strays(), 5);
    }

    #[test]
    fn a_caller_gone_while_its_send_waits_for_a_connection_releases_it_and_ends_the_job() {
        let s = store();
        let mut j = admitted(&s);
        j.sending();
        j.connecting();
        let u = j.caller_left();
        assert!(released(&u), "nothing reached the provider: {u:?}");
        s.apply(u.unwrap(), now());
        let Step::End(e) = j.next(now()) else {
            panic!("ended")
        };
        assert_eq!(
            e.decision.action,
            Action::GiveUp {
                reason: GiveUpReason::Cancelled
            }
        );
        assert_eq!(j.send_state(), Sending::NotSent);
        assert!(s.ledger().is_clean());
        assert_eq!(s.ledger().released.requests, 1);
    }

    #[test]
    fn a_caller_gone_once_the_send_is_on_the_wire_or_handed_to_a_silent_transport_finishes_it() {
        for on_wire in [false, true] {
            let s = store();
            let mut j = admitted(&s);
            j.sending();
            if on_wire {
                j.connecting();
                j.on_wire();
            }
            assert!(j.caller_left().is_none(), "the send finishes");
            assert!(matches!(j.next(now()), Step::Pending));
            // Dropped then: charged at its estimate.
            let u = j.cancel();
            assert!(charged(&u), "on_wire {on_wire}: {u:?}");
            s.apply(u.unwrap(), now());
            assert!(s.ledger().is_clean());
            assert_eq!(s.ledger().settled.requests, 1);
        }
    }

    #[test]
    fn a_dropped_or_withdrawn_job_is_charged_only_if_its_request_may_have_reached_the_wire() {
        type Stop = fn(&mut Job) -> Option<Update>;
        let stops: [(&str, Stop); 2] = [
            ("cancel", |j| j.cancel()),
            ("withdraw", |j| j.withdraw("a step it cannot take")),
        ];
        for (name, stop) in stops {
            let s = store();
            // Never handed over; waiting for a connection: released.
            let mut j = admitted(&s);
            assert!(released(&stop(&mut j)), "{name}: not handed over");
            let mut j = admitted(&s);
            j.sending();
            j.connecting();
            let u = stop(&mut j);
            assert!(released(&u), "{name}: connecting: {u:?}");
            // Handed to a silent transport; on the wire: charged.
            let mut j = admitted(&s);
            j.sending();
            let u = stop(&mut j);
            assert!(charged(&u), "{name}: handed over: {u:?}");
            let mut j = admitted(&s);
            j.sending();
            j.connecting();
            j.on_wire();
            let u = stop(&mut j);
            assert!(charged(&u), "{name}: on the wire: {u:?}");
        }
    }

    #[test]
    fn a_transport_failure_while_waiting_for_a_connection_is_released_whatever_it_says() {
        let s = store();
        let mut j = admitted(&s);
        j.sending();
        j.connecting();
        let c = classify_transport(Provider::Anthropic, TransportFailure::TimeoutAfterSend);
        let u = j.failed(
            &Policy::default(),
            &c,
            true,
            &mut fastrand::Rng::with_seed(1),
            now(),
        );
        assert!(matches!(u.end, Some(End::Release { .. })), "{u:?}");
        // Handed to a silent transport: charged, as before.
        let mut j = admitted(&s);
        j.sending();
        let u = j.failed(
            &Policy::default(),
            &c,
            true,
            &mut fastrand::Rng::with_seed(1),
            now(),
        );
        assert!(matches!(u.end, Some(End::Settle { .. })), "{u:?}");
    }

    #[test]
    fn a_success_is_on_the_wire_while_its_answer_is_delivered_an_error_answer_is_not() {
        let s = store();
        let policy = Policy::default();
        let mut j = admitted(&s);
        j.sending();
        let u = j.answered(
            &policy,
            &answer(200),
            None,
            &mut fastrand::Rng::with_seed(1),
            now(),
        );
        assert_eq!(j.send_state(), Sending::OnWire, "applying a success");
        j.applied(s.apply(u, now()), now());
        assert_eq!(j.send_state(), Sending::OnWire, "delivering");
        let end = j.body_end(BodyEnd::Complete { usage: None }).unwrap();
        s.apply(end, now());
        assert_eq!(j.send_state(), Sending::NotSent, "ended");
        let mut j = admitted(&s);
        j.sending();
        j.on_wire();
        let u = j.answered(
            &policy,
            &answer(400),
            None,
            &mut fastrand::Rng::with_seed(1),
            now(),
        );
        assert_eq!(j.send_state(), Sending::NotSent, "its answer came back");
        j.applied(s.apply(u, now()), now());
        assert!(s.ledger().is_clean());
    }

    #[test]
    fn a_retry_starts_not_sent_and_one_admitted_after_its_caller_left_is_released() {
        let s = store();
        let policy = Policy::default();
        let mut j = admitted(&s);
        j.sending();
        j.on_wire();
        let u = j.answered(
            &policy,
            &answer(529),
            None,
            &mut fastrand::Rng::with_seed(1),
            now(),
        );
        let d = j.applied(s.apply(u, now()), now());
        let Action::Retry { delay } = d.action else {
            panic!("{d:?}")
        };
        let later = now().after(delay);
        let Step::Admit(req) = j.next(later) else {
            panic!("asks again")
        };
        // The caller leaves while admission is asked: the retry's
        // reservation is never handed over; the first send's wire is
        // not its own.
        assert!(j.caller_left().is_none());
        let step = j.admission(s.admit(&req, later), &policy, later);
        assert!(matches!(step, Step::End(_)), "{step:?}");
        assert_eq!(j.send_state(), Sending::NotSent);
        let u = j.cancel();
        assert!(released(&u), "{u:?}");
        s.apply(u.unwrap(), later);
        assert!(s.ledger().is_clean());
    }
}
