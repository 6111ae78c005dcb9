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
        /// Bytes of generated content before the error
        /// ([`Interpreter::delivered_text_bytes`](crate::Interpreter::delivered_text_bytes);
        /// `None` when the provider's events are not read).
        delivered_text_bytes: Option<u64>,
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
        /// Bytes of generated content delivered
        /// ([`Interpreter::delivered_text_bytes`](crate::Interpreter::delivered_text_bytes);
        /// `None` when the provider's events are not read).
        delivered_text_bytes: Option<u64>,
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

    /// Bytes of generated content delivered before a stream failed (`None`
    /// for a completed stream, whose usage is final, and for a provider
    /// whose events are not read).
    pub fn delivered_text_bytes(&self) -> Option<u64> {
        match self {
            StreamOutcome::Completed { .. } => None,
            StreamOutcome::MidStream {
                delivered_text_bytes,
                ..
            }
            | StreamOutcome::Interrupted {
                delivered_text_bytes,
                ..
            } => *delivered_text_bytes,
        }
    }

    /// What this stream costs, for settling its reservation: a completed
    /// stream its final usage; a stream that did not complete what it
    /// delivered ([`cut_stream_usage`]). `None` when nothing better than the
    /// reservation's estimate is known (a completed stream without usage,
    /// a failed one whose events were not read).
    pub fn charge(&self, max_tokens: Option<u64>, input_estimate: u64) -> Option<Usage> {
        match self {
            StreamOutcome::Completed { usage } => *usage,
            _ => self
                .delivered_text_bytes()
                .map(|bytes| cut_stream_usage(self.usage(), bytes, max_tokens, input_estimate)),
        }
    }

    /// A failed stream that the caller never saw: the layer may send the
    /// request again (subject to its normal policy for the cause). A
    /// committed stream is never replayable.
    pub fn replayable(&self) -> bool {
        !matches!(self, StreamOutcome::Completed { .. }) && !self.committed()
    }
}

/// Bytes of text per output token assumed for a cut stream: the usual rule
/// of thumb for English (the same one the input estimate uses).
pub const BYTES_PER_TOKEN: u64 = 4;

/// The usage to charge a stream that ended without its final usage (an
/// in-band error, a cut, a caller that left).
///
/// The provider bills what it generated, and the usage a stream reports
/// before its end lags behind it: Anthropic's `message_start` says 1 output
/// token, OpenAI Chat reports nothing until the last chunk. Charging that
/// undercounts; charging the reservation's `max_tokens` overcounts and holds
/// capacity other jobs could use. So the output is the larger of the
/// reported count and `⌈delivered_text_bytes / 4⌉`, the estimate capped at
/// the request's `max_tokens` (the provider never generates more; `None`
/// when the request set none). A reported count is never lowered: it is
/// the provider's own figure.
///
/// Input is what the stream reported (Anthropic's `message_start` carries
/// input and cache tokens), else `input_estimate` — the reservation's.
///
/// ```
/// use ratewise_core::Usage;
/// use ratewise_streaming::cut_stream_usage;
/// let so_far = Usage { input_tokens: 472, output_tokens: 1, ..Usage::default() };
/// let u = cut_stream_usage(Some(so_far), 400, Some(1024), 9);
/// assert_eq!((u.input_tokens, u.output_tokens), (472, 100));
/// ```
pub fn cut_stream_usage(
    usage_so_far: Option<Usage>,
    delivered_text_bytes: u64,
    max_tokens: Option<u64>,
    input_estimate: u64,
) -> Usage {
    let by_bytes = delivered_text_bytes.div_ceil(BYTES_PER_TOKEN);
    let by_bytes = max_tokens.map_or(by_bytes, |cap| by_bytes.min(cap));
    match usage_so_far {
        Some(u) => Usage {
            output_tokens: u.output_tokens.max(by_bytes),
            ..u
        },
        None => Usage {
            input_tokens: input_estimate,
            output_tokens: by_bytes,
            ..Usage::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reported(input: u64, output: u64) -> Option<Usage> {
        Some(Usage {
            input_tokens: input,
            output_tokens: output,
            cache_read_input_tokens: 7,
            ..Usage::default()
        })
    }

    #[test]
    fn reported_usage_wins_when_larger_than_bytes_over_four() {
        let u = cut_stream_usage(reported(30, 50), 80, Some(1024), 999);
        assert_eq!((u.input_tokens, u.output_tokens), (30, 50));
        assert_eq!(u.cache_read_input_tokens, 7, "reported cache tokens kept");
    }

    #[test]
    fn bytes_over_four_win_when_larger_rounded_up() {
        // Anthropic's message_start: 1 output token; 401 bytes arrived.
        let u = cut_stream_usage(reported(30, 1), 401, Some(1024), 999);
        assert_eq!((u.input_tokens, u.output_tokens), (30, 101));
        // OpenAI Chat: no usage before the end; input is the estimate.
        let u = cut_stream_usage(None, 8, Some(1024), 999);
        assert_eq!(
            u,
            Usage {
                input_tokens: 999,
                output_tokens: 2,
                ..Usage::default()
            }
        );
        assert_eq!(cut_stream_usage(None, 0, Some(1024), 5).output_tokens, 0);
    }

    #[test]
    fn the_estimate_is_capped_at_max_tokens() {
        assert_eq!(
            cut_stream_usage(None, 40_000, Some(256), 1).output_tokens,
            256
        );
        assert_eq!(
            cut_stream_usage(reported(1, 1), u64::MAX, Some(256), 1).output_tokens,
            256
        );
        // No max_tokens in the request: no cap.
        assert_eq!(
            cut_stream_usage(None, 40_000, None, 1).output_tokens,
            10_000
        );
        // The provider's own count is never lowered.
        assert_eq!(
            cut_stream_usage(reported(1, 300), 0, Some(256), 1).output_tokens,
            300
        );
    }

    #[test]
    fn charge_uses_the_final_usage_or_what_was_delivered() {
        let done = StreamOutcome::Completed {
            usage: reported(3, 4),
        };
        assert_eq!(done.charge(Some(100), 9), reported(3, 4));
        let cut = StreamOutcome::Interrupted {
            reason: InterruptReason::EndedEarly,
            committed: true,
            content_delivered: true,
            events_delivered: 5,
            usage_so_far: None,
            delivered_text_bytes: Some(40),
        };
        assert_eq!(
            cut.charge(Some(100), 9)
                .map(|u| (u.input_tokens, u.output_tokens)),
            Some((9, 10))
        );
        let unread = StreamOutcome::Interrupted {
            reason: InterruptReason::BodyError,
            committed: true,
            content_delivered: false,
            events_delivered: 5,
            usage_so_far: None,
            delivered_text_bytes: None,
        };
        assert_eq!(
            unread.charge(Some(100), 9),
            None,
            "unknown: the caller keeps its estimate"
        );
    }
}
