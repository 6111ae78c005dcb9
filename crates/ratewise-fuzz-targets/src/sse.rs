//! Target `sse_chunking`: a server-sent event stream cut at arbitrary
//! places, through the bare [`SseDecoder`] and through a [`StreamTracker`].
//!
//! The input is an [`SseControl`] (decoded with `arbitrary` from the first
//! [`SseControl::LEN`] bytes) followed by the stream bytes.
//!
//! Properties beyond "no panic":
//! - decoding is chunking-independent: the events, the first error, the
//!   last event id, the reconnection time and `finish()` are the same for
//!   the whole input at once, for random cuts and (for short inputs) for
//!   one byte at a time;
//! - the tracker's events, commit state, byte count and outcome (clean end
//!   and body error) are chunking-independent too;
//! - every event respects the decoder's size limits and every in-band error
//!   message is bounded.

use arbitrary::{Arbitrary, Unstructured};
use ratewise_core::Provider;
use ratewise_streaming::interpret::MAX_ERROR_MESSAGE_CHARS;
use ratewise_streaming::{
    CommitPoint, SseDecoder, SseError, SseEvent, SseLimits, StreamEvent, StreamOutcome,
    StreamTracker, TrackerConfig,
};

/// How the stream is read: who speaks, what commits, the limits, the cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub struct SseControl {
    /// Provider selector: `% 3` over Anthropic, OpenAI, generic.
    pub provider: u8,
    /// Commit at the first content event instead of the first byte.
    pub first_content: bool,
    /// 0: the default limits; otherwise tiny limits (`n * 4` bytes a line,
    /// `n * 16` an event) so the error paths are reached.
    pub limits: u8,
    /// Seed of the random cut positions.
    pub split_seed: u64,
    /// Largest chunk of the random cuts (0 means 1).
    pub max_chunk: u8,
}

impl SseControl {
    /// Bytes the control takes from the front of an input.
    pub const LEN: usize = 12;

    /// The bytes that `arbitrary` decodes back into `self` (the seed
    /// corpus is written with this; a test checks the round trip).
    pub fn to_bytes(self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[0] = self.provider;
        out[1] = u8::from(self.first_content);
        out[2] = self.limits;
        out[3..11].copy_from_slice(&self.split_seed.to_le_bytes());
        out[11] = self.max_chunk;
        out
    }

    fn provider(self) -> Provider {
        Provider::ALL[usize::from(self.provider) % Provider::ALL.len()]
    }

    fn limits(self) -> SseLimits {
        if self.limits == 0 {
            SseLimits::DEFAULT
        } else {
            SseLimits {
                max_line_len: usize::from(self.limits) * 4,
                max_event_len: usize::from(self.limits) * 16,
            }
        }
    }

    fn config(self) -> TrackerConfig {
        let mut config = TrackerConfig::default();
        config.commit_point = if self.first_content {
            CommitPoint::FirstContent
        } else {
            CommitPoint::FirstByte
        };
        config.limits = self.limits();
        config
    }
}

/// Splits an input into its control and the stream bytes.
pub fn split(data: &[u8]) -> Option<(SseControl, &[u8])> {
    let mut u = Unstructured::new(data);
    let control = SseControl::arbitrary(&mut u).ok()?;
    Some((control, u.take_rest()))
}

/// Random cut positions: chunks of 1..=max_chunk bytes.
pub fn random_chunks(bytes: &[u8], seed: u64, max_chunk: u8) -> Vec<&[u8]> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let max = usize::from(max_chunk.max(1));
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = rng.usize(1..=max).min(rest.len());
        let (head, tail) = rest.split_at(n);
        out.push(head);
        rest = tail;
    }
    out
}

/// What a decoder saw, compared across chunkings.
#[derive(Debug, PartialEq, Eq)]
struct Decoded {
    events: Vec<SseEvent>,
    error: Option<SseError>,
    last_event_id: String,
    retry: Option<u64>,
    pending: bool,
}

fn decode<'a>(limits: SseLimits, chunks: impl IntoIterator<Item = &'a [u8]>) -> Decoded {
    let mut decoder = SseDecoder::with_limits(limits);
    let mut events = Vec::new();
    let mut error = None;
    for chunk in chunks {
        if let Err(e) = decoder.push_into(chunk, &mut events) {
            error = Some(e);
            break;
        }
    }
    Decoded {
        events,
        error,
        last_event_id: decoder.last_event_id().to_owned(),
        retry: decoder.reconnection_time(),
        pending: decoder.finish(),
    }
}

/// What a tracker saw, compared across chunkings.
#[derive(Debug, PartialEq, Eq)]
struct Tracked {
    events: Vec<StreamEvent>,
    error: Option<SseError>,
    committed: bool,
    content_delivered: bool,
    events_delivered: u64,
    bytes: u64,
    clean: StreamOutcome,
    broken: StreamOutcome,
}

fn track<'a>(control: SseControl, chunks: impl IntoIterator<Item = &'a [u8]>) -> Tracked {
    let mut tracker = StreamTracker::new(control.provider(), control.config());
    let mut events = Vec::new();
    let mut error = None;
    for chunk in chunks {
        if let Err(e) = tracker.push(chunk, &mut events) {
            error = Some(e);
            break;
        }
    }
    Tracked {
        events,
        error,
        committed: tracker.committed(),
        content_delivered: tracker.content_delivered(),
        events_delivered: tracker.events_delivered(),
        bytes: tracker.bytes_seen(),
        clean: tracker.outcome(true),
        broken: tracker.outcome(false),
    }
}

/// Inputs up to this size are also fed one byte at a time.
const BYTEWISE_MAX: usize = 4096;

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let Some((control, stream)) = split(data) else {
        return;
    };
    let limits = control.limits();
    let chunks = random_chunks(stream, control.split_seed, control.max_chunk);

    let whole = decode(limits, [stream]);
    for e in &whole.events {
        // The limit covers what the decoder buffers: the data and an event
        // type the stream named. The default name `message` is supplied at
        // dispatch and is not counted (the campaign's first sse_chunking
        // crash was this property counting it; kept in fuzz/regressions).
        let named = if e.event == "message" {
            0
        } else {
            e.event.len()
        };
        assert!(e.data.len() + named <= limits.max_event_len);
    }
    let cut = decode(limits, chunks.iter().copied());
    assert_eq!(cut, whole, "random cuts changed the decoding");
    if stream.len() <= BYTEWISE_MAX {
        let bytewise = decode(limits, stream.chunks(1));
        assert_eq!(bytewise, whole, "byte-at-a-time changed the decoding");
    }

    let tracked = track(control, [stream]);
    assert_eq!(tracked.error, whole.error);
    assert_eq!(tracked.bytes, stream.len() as u64);
    assert_eq!(tracked.events.len(), whole.events.len());
    for event in &tracked.events {
        if let StreamEvent::Error(e) = event {
            if let Some(m) = &e.message {
                assert!(m.chars().count() <= MAX_ERROR_MESSAGE_CHARS);
            }
        }
    }
    let tracked_cut = track(control, chunks.iter().copied());
    if whole.error.is_none() {
        assert_eq!(tracked_cut, tracked, "random cuts changed the tracker");
    } else {
        // After a decode error the byte count depends on where the cut fell.
        assert_eq!(tracked_cut.events, tracked.events);
        assert_eq!(tracked_cut.error, tracked.error);
        assert_eq!(tracked_cut.clean, tracked.clean);
        assert_eq!(tracked_cut.broken, tracked.broken);
    }
}
