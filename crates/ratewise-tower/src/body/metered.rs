//! [`MeteredBody`]: a success body passed through untouched, metered on
//! the way.
//!
//! A JSON body is copied into a bounded side buffer as it passes; when it
//! ends, its `usage` is parsed and the reservation settled to the actual
//! counts. A `text/event-stream` body drives a
//! [`StreamTracker`]: it settles from the streamed usage and reports a
//! mid-stream failure to the shared state. Committed streams are never
//! replayed.
//!
//! **The end is the last byte**, not the consumer's last poll: a server
//! (hyper, axum) stops polling once the body says it has ended
//! (`is_end_stream()`, or the exact size hint of a `Content-Length` body
//! reached) and drops it without seeing `None`. So the meter finishes as
//! soon as the inner body has nothing more — after the frame that brought
//! its last byte — as well as on `None`, an error or drop; whichever comes
//! first settles, exactly once. `is_end_stream()` and `size_hint()` forward
//! the inner body's, so the consumer frames the body as before.
//!
//! **Compressed bodies** (`Content-Encoding: gzip`, `deflate` — zlib or
//! raw — or `br`) pass through still compressed; the meter reads a decoded
//! copy made on the side, bounded by
//! [`Config::max_decoded_body`](crate::Config::max_decoded_body) (and, for
//! JSON, by [`Config::max_metered_body`](crate::Config::max_metered_body)).
//! A body that cannot be decoded (garbage, an unknown or stacked coding,
//! over the bound — a decompression bomb) or whose compressed stream is
//! truncated gives up metering: the reservation settles at its estimate.
//!
//! A body dropped before its end settles what it must: the usage seen so
//! far, or the reservation's estimate when none was seen (the provider may
//! have generated and billed the answer).

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use ratewise_core::admit::{Reservation, Target};
use ratewise_core::classify::{BodyReading, Classification, Evidence, Hints};
use ratewise_core::parse::body::parse_usage;
use ratewise_core::{Action, Cause, Decision, Provider, Usage};
use ratewise_streaming::{StreamOutcome, StreamTracker};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use super::decode::{Coding, Decoder};
use crate::clock::Clock;
use crate::state::State;

/// What the body's end said about cost and completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Metered {
    /// A JSON (or any non-stream) body ended; `usage` when it reported one.
    Body {
        /// The parsed `usage`; `None` when the body had none, or it could
        /// not be read (past the bound, undecodable, not whole).
        usage: Option<Usage>,
        /// Whether the body reached its end (false: dropped or failed).
        complete: bool,
    },
    /// A stream ended.
    Stream(StreamOutcome),
}

impl Metered {
    /// The usage reported (final or so far).
    pub fn usage(&self) -> Option<Usage> {
        match self {
            Metered::Body { usage, .. } => *usage,
            Metered::Stream(o) => o.usage(),
        }
    }

    /// The stream's outcome, for streams.
    pub fn stream(&self) -> Option<&StreamOutcome> {
        match self {
            Metered::Stream(o) => Some(o),
            Metered::Body { .. } => None,
        }
    }
}

/// Everything a body needs to settle its reservation.
pub(crate) struct MeterCtx {
    pub state: Arc<dyn State>,
    pub clock: Arc<dyn Clock>,
    pub reservation: Reservation,
    pub target: Target,
    pub provider: Provider,
    pub job_id: String,
    pub attempt: u32,
}

pub(crate) enum MeterKind {
    Json {
        buf: BytesMut,
        limit: usize,
        overflow: bool,
    },
    Stream(Box<StreamTracker>),
}

impl MeterKind {
    /// Takes (decoded) body bytes; `false` once it wants no more.
    fn take(&mut self, data: &[u8]) -> bool {
        match self {
            MeterKind::Json {
                buf,
                limit,
                overflow,
            } => {
                if *overflow {
                    return false;
                }
                if buf.len().saturating_add(data.len()) > *limit {
                    *overflow = true;
                    *buf = BytesMut::new();
                    return false;
                }
                buf.extend_from_slice(data);
                true
            }
            MeterKind::Stream(t) => {
                // A decode error is kept in the outcome; bytes still pass.
                let _ = t.observe(data);
                true
            }
        }
    }
}

/// What the meter reads: the body's bytes, or a decoded copy of them when
/// the body is compressed.
pub(crate) struct Side {
    kind: MeterKind,
    decoder: Option<Box<Decoder>>,
    /// Metering gave up (an undecodable coding or body, or over a bound):
    /// the reservation settles at its estimate.
    gave_up: bool,
}

impl Side {
    /// Reads a body of `coding`, decoding at most `max_decoded` bytes.
    pub(crate) fn new(kind: MeterKind, coding: Coding, max_decoded: usize) -> Self {
        let gave_up = coding == Coding::Unsupported;
        if gave_up {
            tracing::debug!("content coding not decoded: usage settles at the estimate");
        }
        Side {
            kind,
            decoder: Decoder::new(coding, max_decoded).map(Box::new),
            gave_up,
        }
    }

    /// Reads one data frame of the body as it passes.
    pub(crate) fn observe(&mut self, data: &[u8]) {
        if self.gave_up {
            return;
        }
        let kind = &mut self.kind;
        match &mut self.decoder {
            None => {
                kind.take(data);
            }
            Some(d) => {
                if let Err(why) = d.feed(data, &mut |b| kind.take(b)) {
                    self.gave_up = true;
                    tracing::debug!(
                        reason = why.as_str(),
                        "compressed body: metering gave up, usage settles at the estimate"
                    );
                }
            }
        }
    }

    /// The stream tracker, for a stream.
    pub(crate) fn tracker(&self) -> Option<&StreamTracker> {
        match &self.kind {
            MeterKind::Stream(t) => Some(t),
            MeterKind::Json { .. } => None,
        }
    }
}

struct Meter {
    ctx: Option<MeterCtx>,
    side: Side,
    result: Option<Metered>,
}

impl Meter {
    fn observe(&mut self, data: &[u8]) {
        if self.result.is_none() {
            self.side.observe(data);
        }
    }

    /// Settles, once: later calls do nothing.
    fn finish(&mut self, ended_cleanly: bool) {
        if self.result.is_some() {
            return;
        }
        let side = &mut self.side;
        // A compressed body is whole only if its compressed stream ended.
        let decoded = side.decoder.as_ref().is_none_or(|d| d.finished()) && !side.gave_up;
        let result = match &side.kind {
            MeterKind::Json { buf, overflow, .. } => Metered::Body {
                usage: if ended_cleanly && decoded && !*overflow {
                    parse_usage(buf)
                } else {
                    None
                },
                complete: ended_cleanly,
            },
            MeterKind::Stream(t) => Metered::Stream(t.outcome(ended_cleanly && decoded)),
        };
        // A stream read to its end event is trusted even if the bytes after
        // it did not decode; anything else metering gave up on settles at
        // the estimate.
        let usage = match (&result, side.gave_up) {
            (Metered::Stream(StreamOutcome::Completed { .. }), _) | (_, false) => result.usage(),
            _ => None,
        };
        // Nothing more is read: free the side copy now.
        side.decoder = None;
        if let MeterKind::Json { buf, .. } = &mut side.kind {
            *buf = BytesMut::new();
        }
        if let Some(ctx) = self.ctx.take() {
            settle(ctx, &result, usage);
        }
        self.result = Some(result);
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        self.finish(false);
    }
}

/// Settles `ctx`'s reservation to `usage`, or to its estimate without one.
fn settle(ctx: MeterCtx, result: &Metered, usage: Option<Usage>) {
    let now = ctx.clock.now();
    let amounts = ctx.reservation.amounts();
    let estimate = Usage {
        input_tokens: amounts.input,
        output_tokens: amounts.output,
        ..Usage::default()
    };
    let at_estimate = usage.is_none();
    let usage = usage.unwrap_or(estimate);
    let MeterCtx {
        state,
        clock: _,
        reservation,
        target,
        provider,
        job_id,
        attempt,
    } = ctx;
    state.settle(reservation, &usage, now);
    let ctx = Report {
        state,
        target,
        provider,
        job_id,
        attempt,
    };
    if let Metered::Stream(outcome) = result {
        report_stream(&ctx, outcome, now);
    } else {
        tracing::debug!(job_id = %ctx.job_id, attempt = ctx.attempt, input_tokens = usage.input_tokens,
            output_tokens = usage.output_tokens, at_estimate, "settled");
    }
}

/// A failed stream is reported to the shared state with the in-band
/// cause (an overload mid-stream counts like a 529), and as `mid_stream`
/// / `interrupted` in the trace. It is never replayed.
struct Report {
    state: Arc<dyn State>,
    target: Target,
    provider: Provider,
    job_id: String,
    attempt: u32,
}

fn report_stream(ctx: &Report, outcome: &StreamOutcome, now: ratewise_core::Now) {
    let usage = outcome.usage();
    match outcome {
        StreamOutcome::Completed { .. } => {
            tracing::info!(job_id = %ctx.job_id, attempt = ctx.attempt, outcome = "completed",
                output_tokens = usage.map(|u| u.output_tokens), "stream ended");
        }
        StreamOutcome::MidStream {
            cause,
            error,
            committed,
            ..
        } => {
            let c = in_band_classification(
                ctx.provider,
                *cause,
                error.error_type.clone(),
                error.code.clone(),
            );
            let d = Decision::new(Action::Inspect)
                .with_note("committed stream: never replayed automatically");
            let _ = ctx.state.observe(ctx.target.scope, &c, d, now);
            tracing::warn!(job_id = %ctx.job_id, attempt = ctx.attempt, outcome = "mid_stream",
                cause = cause.as_str(), committed, output_tokens = usage.map(|u| u.output_tokens),
                "stream failed");
        }
        StreamOutcome::Interrupted { committed, .. } => {
            tracing::warn!(job_id = %ctx.job_id, attempt = ctx.attempt, outcome = "interrupted",
                committed, output_tokens = usage.map(|u| u.output_tokens), "stream interrupted");
        }
    }
}

/// The classification of an error that arrived inside a 200 stream.
pub(crate) fn in_band_classification(
    provider: Provider,
    cause: Cause,
    error_type: Option<String>,
    code: Option<String>,
) -> Classification {
    Classification {
        provider,
        status: Some(200),
        transport: None,
        cause,
        scope: Classification::default_scope(cause),
        dimension: None,
        hints: Hints::default(),
        evidence: Evidence {
            request_id: None,
            error_type,
            error_code: code,
            message: None,
            body: BodyReading::Structured,
            notes: vec!["error event inside the stream".into()],
        },
    }
}

pin_project! {
    /// A success body: the inner body's frames, untouched, while the layer
    /// meters usage. See the [module docs](self).
    pub struct MeteredBody<B> {
        #[pin]
        inner: B,
        held: VecDeque<Frame<Bytes>>,
        ended: Option<bool>,
        // Data bytes the inner body has left, when its size was exact.
        remaining: Option<u64>,
        meter: Meter,
    }
}

/// Whether `inner` has no more data: it says so, or its exact size is used up.
fn drained<B: Body>(inner: &B, remaining: Option<u64>) -> bool {
    remaining == Some(0) || inner.is_end_stream() || inner.size_hint().exact() == Some(0)
}

impl<B: Body<Data = Bytes>> MeteredBody<B> {
    /// Meters `inner`, after the frames `held` back already read from it
    /// (`ended`: `Some(cleanly)` when it already ended). A body with
    /// nothing left settles at once.
    pub(crate) fn new(
        inner: B,
        ctx: MeterCtx,
        side: Side,
        held: VecDeque<Frame<Bytes>>,
        ended: Option<bool>,
    ) -> Self {
        let remaining = inner.size_hint().exact();
        let mut body = MeteredBody {
            inner,
            held,
            ended,
            remaining,
            meter: Meter {
                ctx: Some(ctx),
                side,
                result: None,
            },
        };
        if body.held.is_empty() {
            match body.ended {
                Some(cleanly) => body.meter.finish(cleanly),
                None if drained(&body.inner, body.remaining) => body.meter.finish(true),
                None => {}
            }
        }
        body
    }
}

impl<B> MeteredBody<B> {
    /// How the body ended, once it has: usage and (for streams) the
    /// [`StreamOutcome`]. `None` while it is still flowing.
    pub fn metered(&self) -> Option<&Metered> {
        self.meter.result.as_ref()
    }

    /// The stream's outcome, once a `text/event-stream` body ended.
    pub fn stream_outcome(&self) -> Option<&StreamOutcome> {
        self.metered().and_then(Metered::stream)
    }

    /// Whether this body is metered as an event stream.
    pub fn is_stream(&self) -> bool {
        self.meter.side.tracker().is_some()
    }

    /// The inner body.
    pub fn get_ref(&self) -> &B {
        &self.inner
    }

    /// The inner body, mutably (reading from it bypasses the meter).
    pub fn get_mut(&mut self) -> &mut B {
        &mut self.inner
    }

    /// The inner body. Frames held back under the first-content commit
    /// point are lost; the reservation is settled as for a dropped body
    /// (unless the body had already ended).
    pub fn into_inner(self) -> B {
        self.inner
    }
}

impl<B> std::fmt::Debug for MeteredBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeteredBody")
            .field("stream", &self.is_stream())
            .field("held", &self.held.len())
            .field("metered", &self.meter.result)
            .finish()
    }
}

impl<B> Body for MeteredBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        if let Some(frame) = this.held.pop_front() {
            if this.held.is_empty() {
                // The last held frame: the body may have nothing after it.
                match *this.ended {
                    Some(cleanly) => this.meter.finish(cleanly),
                    None if drained(this.inner.as_ref().get_ref(), *this.remaining) => {
                        this.meter.finish(true);
                    }
                    None => {}
                }
            }
            return Poll::Ready(Some(Ok(frame)));
        }
        if let Some(cleanly) = *this.ended {
            this.meter.finish(cleanly);
            return Poll::Ready(None);
        }
        match ready!(this.inner.as_mut().poll_frame(cx)) {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    this.meter.observe(data);
                    if let Some(left) = this.remaining.as_mut() {
                        *left = left.saturating_sub(data.len() as u64);
                    }
                }
                // The consumer may stop polling after this frame: settle on
                // the last byte, not on `None`.
                if drained(this.inner.as_ref().get_ref(), *this.remaining) {
                    this.meter.finish(true);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(e)) => {
                *this.ended = Some(false);
                this.meter.finish(false);
                Poll::Ready(Some(Err(e)))
            }
            None => {
                *this.ended = Some(true);
                this.meter.finish(true);
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_empty() && (self.ended.is_some() || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let held: u64 = self
            .held
            .iter()
            .filter_map(|f| f.data_ref().map(|d| d.len() as u64))
            .sum();
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(held));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(held));
        }
        hint
    }
}
