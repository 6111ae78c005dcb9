//! [`MeteredBody`]: a success body passed through untouched, metered on
//! the way.
//!
//! A JSON body is copied into a bounded side buffer as it passes; when it
//! ends, its `usage` is parsed and the reservation settled to the actual
//! counts. A `text/event-stream` body drives a
//! [`StreamTracker`]: it settles from the streamed usage and reports a
//! mid-stream failure to the shared state. Committed streams are never
//! replayed. A body dropped before its end settles what it must: the
//! usage seen so far, or the reservation's estimate when none was seen
//! (the provider may have generated and billed the answer).

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

use crate::clock::Clock;
use crate::state::State;

/// What the body's end said about cost and completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Metered {
    /// A JSON (or any non-stream) body ended; `usage` when it reported one.
    Body {
        /// The parsed `usage`.
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

struct Meter {
    ctx: Option<MeterCtx>,
    kind: MeterKind,
    result: Option<Metered>,
}

impl Meter {
    fn observe(&mut self, data: &[u8]) {
        if self.result.is_some() {
            return;
        }
        match &mut self.kind {
            MeterKind::Json {
                buf,
                limit,
                overflow,
            } => {
                if !*overflow {
                    if buf.len() + data.len() > *limit {
                        *overflow = true;
                        buf.clear();
                    } else {
                        buf.extend_from_slice(data);
                    }
                }
            }
            MeterKind::Stream(t) => {
                // A decode error is kept in the outcome; bytes still pass.
                let _ = t.observe(data);
            }
        }
    }

    fn finish(&mut self, ended_cleanly: bool) {
        if self.result.is_some() {
            return;
        }
        let result = match &self.kind {
            MeterKind::Json { buf, overflow, .. } => Metered::Body {
                usage: if ended_cleanly && !*overflow {
                    parse_usage(buf)
                } else {
                    None
                },
                complete: ended_cleanly,
            },
            MeterKind::Stream(t) => Metered::Stream(t.outcome(ended_cleanly)),
        };
        if let Some(ctx) = self.ctx.take() {
            settle(ctx, &result);
        }
        self.result = Some(result);
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        self.finish(false);
    }
}

fn settle(ctx: MeterCtx, result: &Metered) {
    let now = ctx.clock.now();
    let amounts = ctx.reservation.amounts();
    let estimate = Usage {
        input_tokens: amounts.input,
        output_tokens: amounts.output,
        ..Usage::default()
    };
    let usage = result.usage().unwrap_or(estimate);
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
            output_tokens = usage.output_tokens, "settled");
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
        meter: Meter,
    }
}

impl<B> MeteredBody<B> {
    pub(crate) fn new(
        inner: B,
        ctx: MeterCtx,
        kind: MeterKind,
        held: VecDeque<Frame<Bytes>>,
        ended: Option<bool>,
    ) -> Self {
        MeteredBody {
            inner,
            held,
            ended,
            meter: Meter {
                ctx: Some(ctx),
                kind,
                result: None,
            },
        }
    }

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
        matches!(self.meter.kind, MeterKind::Stream(_))
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
    /// point are lost; the reservation is settled as for a dropped body.
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
        let this = self.project();
        if let Some(frame) = this.held.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        if let Some(cleanly) = *this.ended {
            this.meter.finish(cleanly);
            return Poll::Ready(None);
        }
        match ready!(this.inner.poll_frame(cx)) {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    this.meter.observe(data);
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
