//! [`StreamTracker`]: the sans-IO seam between a body and the accounting.
//!
//! The tracker owns no body and does no IO. Whoever forwards the stream (the
//! tower layer's metered body, or [`SseStream`](crate::SseStream)) feeds it
//! every data frame and asks for the [`StreamOutcome`] at the end:
//!
//! 1. On each data frame, call [`observe`](StreamTracker::observe) (or
//!    [`push`](StreamTracker::push) to also get the typed events). Under
//!    [`CommitPoint::FirstContent`], hold the frame back while
//!    [`committed`](StreamTracker::committed) is `false` and release
//!    everything held once it turns `true`; under the default
//!    [`CommitPoint::FirstByte`], forward frames at once.
//! 2. Optionally stop early once [`is_terminal`](StreamTracker::is_terminal)
//!    (an end or error event arrived): the outcome will not change.
//! 3. When the body ends, call [`outcome(true)`](StreamTracker::outcome);
//!    when it fails, [`outcome(false)`](StreamTracker::outcome). Settle the
//!    reservation from [`StreamOutcome::usage`]; report `mid_stream` and
//!    `interrupted` to the controller; replay only if
//!    [`StreamOutcome::replayable`].
//!
//! The hot path allocates only the events themselves: SSE events are
//! decoded into a reused buffer and each is interpreted once.
//!
//! A metered body under [`CommitPoint::FirstContent`], in outline (the
//! hold-back buffer needs its own bound; past it, release and commit):
//!
//! ```
//! use ratewise_core::Provider;
//! use ratewise_streaming::{CommitPoint, StreamTracker, TrackerConfig};
//!
//! let mut config = TrackerConfig::default();
//! config.commit_point = CommitPoint::FirstContent;
//! let mut tracker = StreamTracker::new(Provider::Anthropic, config);
//! let mut held: Vec<&[u8]> = Vec::new();
//! let mut released: Vec<&[u8]> = Vec::new();
//! let frames: [&[u8]; 2] = [
//!     b"event: ping\ndata: {\"type\":\"ping\"}\n\n",
//!     b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n",
//! ];
//! for frame in frames {
//!     let _ = tracker.observe(frame); // a decode error shows in the outcome
//!     held.push(frame);
//!     if tracker.committed() {
//!         released.append(&mut held); // forward everything held, in order
//!     }
//!     if tracker.is_terminal() {
//!         break;
//!     }
//! }
//! let outcome = tracker.outcome(true);
//! assert!(released.is_empty());
//! assert!(outcome.replayable()); // drop `held`, retry per the cause (overloaded)
//! ```

use ratewise_core::{Provider, Usage};

use crate::commit::{CommitPoint, CommitState};
use crate::interpret::{InBandError, Interpreter, StreamEvent};
use crate::outcome::{InterruptReason, StreamOutcome};
use crate::sse::{SseDecoder, SseError, SseEvent, SseLimits};

/// How a tracker reads a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TrackerConfig {
    /// When the stream commits.
    pub commit_point: CommitPoint,
    /// The decoder's size bounds.
    pub limits: SseLimits,
}

#[derive(Debug, Clone)]
enum Terminal {
    Done,
    Error {
        error: InBandError,
        committed: bool,
        content_delivered: bool,
        events_delivered: u64,
        usage_so_far: Option<Usage>,
        delivered_text_bytes: Option<u64>,
    },
}

/// Decoder + interpreter + commit state + end detection for one stream.
#[derive(Debug, Clone)]
pub struct StreamTracker {
    decoder: SseDecoder,
    interpreter: Interpreter,
    commit: CommitState,
    events_delivered: u64,
    bytes: u64,
    terminal: Option<Terminal>,
    decode_error: Option<SseError>,
    scratch: Vec<SseEvent>,
}

impl StreamTracker {
    /// A tracker for one stream from `provider`.
    pub fn new(provider: Provider, config: TrackerConfig) -> Self {
        StreamTracker {
            decoder: SseDecoder::with_limits(config.limits),
            interpreter: Interpreter::new(provider),
            commit: CommitState::new(config.commit_point),
            events_delivered: 0,
            bytes: 0,
            terminal: None,
            decode_error: None,
            scratch: Vec::new(),
        }
    }

    /// Feeds a data frame, appending the typed events it completed to
    /// `out`. After a decode error the tracker ignores further bytes and
    /// returns the same error.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<StreamEvent>) -> Result<(), SseError> {
        self.feed(chunk, |ev| out.push(ev))
    }

    /// Feeds a data frame, keeping only the accounting (usage, commit,
    /// end): what a metered body needs.
    pub fn observe(&mut self, chunk: &[u8]) -> Result<(), SseError> {
        self.feed(chunk, drop)
    }

    fn feed(&mut self, chunk: &[u8], mut sink: impl FnMut(StreamEvent)) -> Result<(), SseError> {
        if let Some(err) = self.decode_error {
            return Err(err);
        }
        self.bytes = self.bytes.saturating_add(chunk.len() as u64);
        self.commit.on_bytes(chunk.len());
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = self.decoder.push_into(chunk, &mut scratch);
        for sse in scratch.drain(..) {
            let event = self.interpreter.interpret(sse);
            self.record(&event);
            sink(event);
        }
        self.scratch = scratch;
        if let Err(err) = result {
            self.decode_error = Some(err);
        }
        result
    }

    fn record(&mut self, event: &StreamEvent) {
        if self.terminal.is_none() {
            match event {
                StreamEvent::Done { .. } => self.terminal = Some(Terminal::Done),
                StreamEvent::Error(error) => {
                    self.terminal = Some(Terminal::Error {
                        error: error.clone(),
                        committed: self.commit.committed(),
                        content_delivered: self.commit.content_delivered(),
                        events_delivered: self.events_delivered,
                        usage_so_far: self.interpreter.usage(),
                        delivered_text_bytes: self.interpreter.delivered_text_bytes(),
                    })
                }
                _ => {}
            }
        }
        self.commit.on_event(event);
        self.events_delivered += 1;
    }

    /// Whether bytes reached (or may now be released to) the caller.
    pub fn committed(&self) -> bool {
        self.commit.committed()
    }

    /// Whether any content event was seen.
    pub fn content_delivered(&self) -> bool {
        self.commit.content_delivered()
    }

    /// Typed events interpreted so far.
    pub fn events_delivered(&self) -> u64 {
        self.events_delivered
    }

    /// Bytes fed so far.
    pub fn bytes_seen(&self) -> u64 {
        self.bytes
    }

    /// Bytes of generated content seen so far
    /// ([`Interpreter::delivered_text_bytes`]).
    pub fn delivered_text_bytes(&self) -> Option<u64> {
        self.interpreter.delivered_text_bytes()
    }

    /// The usage reported so far.
    pub fn usage_so_far(&self) -> Option<Usage> {
        self.interpreter.usage()
    }

    /// The commit-point policy in force.
    pub fn commit_point(&self) -> CommitPoint {
        self.commit.point()
    }

    /// Whether an end or in-band error event arrived: the outcome is fixed.
    pub fn is_terminal(&self) -> bool {
        self.terminal.is_some()
    }

    /// How the stream ended, given whether the body ended cleanly (`true`)
    /// or with an error (`false`). The first end or error event decides;
    /// a body failure after `message_stop` still means `completed`.
    pub fn outcome(&self, ended_cleanly: bool) -> StreamOutcome {
        match &self.terminal {
            Some(Terminal::Done) => StreamOutcome::Completed {
                usage: self.interpreter.usage(),
            },
            Some(Terminal::Error {
                error,
                committed,
                content_delivered,
                events_delivered,
                usage_so_far,
                delivered_text_bytes,
            }) => StreamOutcome::MidStream {
                cause: error.cause,
                error: error.clone(),
                committed: *committed,
                content_delivered: *content_delivered,
                events_delivered: *events_delivered,
                usage_so_far: *usage_so_far,
                delivered_text_bytes: *delivered_text_bytes,
            },
            None => {
                let reason = match (self.decode_error, ended_cleanly) {
                    (Some(err), _) => InterruptReason::Decode(err),
                    (None, false) => InterruptReason::BodyError,
                    (None, true) if self.interpreter.provider() == Provider::Generic => {
                        // No provider end event to wait for.
                        return StreamOutcome::Completed {
                            usage: self.interpreter.usage(),
                        };
                    }
                    (None, true) => InterruptReason::EndedEarly,
                };
                StreamOutcome::Interrupted {
                    reason,
                    committed: self.commit.committed(),
                    content_delivered: self.commit.content_delivered(),
                    events_delivered: self.events_delivered,
                    usage_so_far: self.interpreter.usage(),
                    delivered_text_bytes: self.interpreter.delivered_text_bytes(),
                }
            }
        }
    }
}
