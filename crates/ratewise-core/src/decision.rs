//! The outcome of reading one response: an [`Action`] and the notes behind it.

use crate::time::Instant;
use crate::vocab::{ActionKind, GiveUpReason};
use std::time::{Duration, SystemTime};

/// What to do next, with its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Success; reconcile usage.
    Done,
    /// Send again not before `delay` from now (hint plus added jitter, or
    /// backoff). Consumes an attempt when sent.
    Retry {
        /// The minimum wait before the next send.
        delay: Duration,
    },
    /// The wait is longer than the layer holds a job inline but fits the
    /// deadline: hand the job back. No attempt burned.
    Defer {
        /// Wall-clock time before which the job must not be sent again.
        until: SystemTime,
        /// The same moment on the monotonic clock.
        not_before: Instant,
    },
    /// Stop sending for the whole scope; keep jobs pending.
    StopQueue {
        /// When the stop lifts by itself (a monthly cap), or `None` until a
        /// human resumes.
        until: Option<SystemTime>,
    },
    /// Not retryable; the request or configuration must change.
    Fail,
    /// An unknown or malformed shape: no blind retry.
    Inspect,
    /// Retryable, but a bound is spent.
    GiveUp {
        /// Which bound.
        reason: GiveUpReason,
    },
    /// Sent, no answer: worst-case cost stays reserved, no automatic retry.
    HoldUnknown,
}

impl Action {
    /// The action's vocabulary word.
    pub const fn kind(&self) -> ActionKind {
        match self {
            Action::Done => ActionKind::Done,
            Action::Retry { .. } => ActionKind::Retry,
            Action::Defer { .. } => ActionKind::Defer,
            Action::StopQueue { .. } => ActionKind::StopQueue,
            Action::Fail => ActionKind::Fail,
            Action::Inspect => ActionKind::Inspect,
            Action::GiveUp { .. } => ActionKind::GiveUp,
            Action::HoldUnknown => ActionKind::HoldUnknown,
        }
    }

    /// The retry delay, for [`Action::Retry`].
    pub const fn delay(&self) -> Option<Duration> {
        match self {
            Action::Retry { delay } => Some(*delay),
            _ => None,
        }
    }

    /// The wall-clock `until` of a defer or a stop with a known end.
    pub const fn until(&self) -> Option<SystemTime> {
        match self {
            Action::Defer { until, .. } => Some(*until),
            Action::StopQueue { until } => *until,
            _ => None,
        }
    }

    /// The reason of a give-up.
    pub const fn reason(&self) -> Option<GiveUpReason> {
        match self {
            Action::GiveUp { reason } => Some(*reason),
            _ => None,
        }
    }
}

/// A decision: the action and the human-readable reasons behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// What to do next.
    pub action: Action,
    /// Why (`"retry-after: 8 s"`, `"jitter +412 ms"`), formatted on display.
    pub notes: Vec<crate::note::Note>,
}

impl Decision {
    /// A decision with no notes yet.
    pub fn new(action: Action) -> Self {
        Decision {
            action,
            notes: Vec::new(),
        }
    }

    /// Adds a note and returns the decision.
    pub(crate) fn with_note(mut self, note: impl Into<crate::note::Note>) -> Self {
        self.notes.push(note.into());
        self
    }
}

/// The queue-wide retry budget's state, an input to
/// [`decide`](crate::decide::decide): the store keeps the budget (retries may not
/// exceed a share of first attempts in a window, so an outage does not
/// turn into a retry storm), `decide` alone says what a spent one means.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RetryBudgetState {
    /// One more retry fits (the default: no budget known yet).
    #[default]
    Available,
    /// The budget is spent: no job retries until it refills.
    Spent,
}
