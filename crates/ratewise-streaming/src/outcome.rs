//! How a stream ended.

use ratewise_core::{Cause, Usage};

use crate::interpret::InBandError;
use crate::sse::SseError;

/// Why a stream ended without a terminal event.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InterruptReason {
    /// The body ended cleanly before the provider's end event.
    EndedEarly,
    /// The body failed (connection reset, timeout, ..).
    BodyError,
    /// The bytes broke the decoder's limits.
    Decode(SseError),
}

/// The end of a stream, as the layer must account for it.
///
/// `usage` / `usage_so_far` is the provider's own count (cumulative), or
/// `None` when the stream reported none (e.g. OpenAI Chat without
/// `stream_options.include_usage`); then the caller keeps its estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamOutcome {
    /// The provider's end event arrived (`message_stop`, `[DONE]`,
    /// `response.completed`), or a generic stream ended cleanly.
    Completed {
        /// The final usage.
        usage: Option<Usage>,
    },
    /// The provider reported an error inside the stream.
    MidStream {
        /// The in-band error's cause (core vocabulary: an in-stream
        /// `overloaded_error` is `overloaded`). A layer reports a committed
        /// failure as [`Cause::MidStream`] and keeps this as the detail.
        cause: Cause,
        /// The error as the provider sent it.
        error: InBandError,
        /// Whether bytes had reached the caller when the error arrived. If
        /// `false` (only possible under `CommitPoint::FirstContent`) the
        /// request may be retried transparently.
        committed: bool,
        /// Whether any content had been interpreted before the error.
        content_delivered: bool,
        /// Typed events before the error (one per SSE event).
        events_delivered: u64,
        /// The usage reported before the error.
        usage_so_far: Option<Usage>,
    },
    /// The body ended early or failed, without an end event or an error.
    Interrupted {
        /// What ended it.
        reason: InterruptReason,
        /// Whether bytes had reached the caller.
        committed: bool,
        /// Whether any content had been interpreted.
        content_delivered: bool,
        /// Typed events delivered.
        events_delivered: u64,
        /// The usage reported so far.
        usage_so_far: Option<Usage>,
    },
}

impl StreamOutcome {
    /// The vocabulary word: `completed`, `mid_stream` or `interrupted`.
    pub fn as_str(&self) -> &'static str {
        match self {
            StreamOutcome::Completed { .. } => "completed",
            StreamOutcome::MidStream { .. } => "mid_stream",
            StreamOutcome::Interrupted { .. } => "interrupted",
        }
    }

    /// The final usage, or the usage so far.
    pub fn usage(&self) -> Option<Usage> {
        match self {
            StreamOutcome::Completed { usage } => *usage,
            StreamOutcome::MidStream { usage_so_far, .. }
            | StreamOutcome::Interrupted { usage_so_far, .. } => *usage_so_far,
        }
    }

    /// The in-band error's cause, for `mid_stream`.
    pub fn cause(&self) -> Option<Cause> {
        match self {
            StreamOutcome::MidStream { cause, .. } => Some(*cause),
            _ => None,
        }
    }

    /// Whether the caller saw bytes. A completed stream always did.
    pub fn committed(&self) -> bool {
        match self {
            StreamOutcome::Completed { .. } => true,
            StreamOutcome::MidStream { committed, .. }
            | StreamOutcome::Interrupted { committed, .. } => *committed,
        }
    }

    /// Whether content was delivered (`None` for a completed stream, where
    /// it does not matter).
    pub fn content_delivered(&self) -> Option<bool> {
        match self {
            StreamOutcome::Completed { .. } => None,
            StreamOutcome::MidStream {
                content_delivered, ..
            }
            | StreamOutcome::Interrupted {
                content_delivered, ..
            } => Some(*content_delivered),
        }
    }

    /// A failed stream that the caller never saw: the layer may send the
    /// request again (subject to its normal policy for the cause). A
    /// committed stream is never replayable.
    pub fn replayable(&self) -> bool {
        !matches!(self, StreamOutcome::Completed { .. }) && !self.committed()
    }
}
