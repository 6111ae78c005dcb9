//! # ratewise-streaming
//!
//! Streamed LLM responses, read without losing track of money or of what the
//! caller already saw.
//!
//! A failure before a stream starts is an ordinary HTTP error that the layer
//! may retry; once bytes reached the caller, replaying the request would
//! duplicate output and cost. This crate draws that line (the *commit
//! point*) and reports how a stream ended:
//!
//! - [`sse`]: a sans-IO, incremental Server-Sent Events decoder (bytes in,
//!   events out, any chunking) with bounded line and event sizes.
//! - [`interpret`]: Anthropic and OpenAI event interpreters that turn SSE
//!   events into typed [`StreamEvent`]s (text, usage, errors, the end).
//! - [`commit`]: the commit-point policy ([`CommitPoint`]).
//! - [`outcome`]: how a stream ended ([`StreamOutcome`]).
//! - [`tracker`]: [`StreamTracker`], the sans-IO seam that a metered body
//!   drives on every data frame without owning the body.
//! - [`body`]: [`SseStream`], an adapter from an `http_body::Body` (or a
//!   byte stream) to a `futures::Stream` of typed events.
//!
//! ```
//! use ratewise_core::Provider;
//! use ratewise_streaming::{StreamOutcome, StreamTracker, TrackerConfig};
//!
//! let mut tracker = StreamTracker::new(Provider::Anthropic, TrackerConfig::default());
//! tracker.observe(b"event: error\ndata: {\"type\":\"error\",\"error\":").unwrap();
//! tracker.observe(b"{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n").unwrap();
//! match tracker.outcome(true) {
//!     StreamOutcome::MidStream { cause, committed, content_delivered, .. } => {
//!         assert_eq!(cause, ratewise_core::Cause::Overloaded);
//!         assert!(committed); // the default commit point is the first byte
//!         assert!(!content_delivered);
//!     }
//!     other => panic!("{other:?}"),
//! }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod body;
pub mod commit;
pub mod interpret;
pub mod outcome;
pub mod sse;
pub mod tracker;

pub use body::{ByteStreamBody, SseStream, StreamError, StreamItem, WithOutcome};
pub use commit::{CommitPoint, CommitState};
pub use interpret::{InBandError, Interpreter, StreamEvent};
pub use outcome::{cut_stream_usage, InterruptReason, StreamOutcome, BYTES_PER_TOKEN};
pub use sse::{is_event_stream, SseDecoder, SseError, SseEvent, SseLimits};
pub use tracker::{StreamTracker, TrackerConfig};
