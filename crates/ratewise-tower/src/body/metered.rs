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
//! A JSON body dropped before its end settles at the reservation's
//! estimate: the provider may have generated and billed the whole answer.
//! A stream that does not complete — an in-band error, a cut, a body
//! error, a caller that drops it — settles what it delivered: the larger of
//! the usage reported so far and ⌈delivered text bytes / 4⌉, capped at the
//! request's `max_tokens`
//! ([`cut_stream_usage`](ratewise_streaming::cut_stream_usage)). Its
//! attempt is journaled again when it ends
//! ([`Journal::stream_ended`](crate::Journal::stream_ended)), as
//! `mid_stream` unless it completed.

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use ratewise_core::job::{BodyEnd, Job as JobMachine};
use ratewise_core::parse::body::parse_usage;
use ratewise_core::record::AttemptRecord;
use ratewise_core::{Cause, Usage};
use ratewise_streaming::{StreamOutcome, StreamTracker};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use super::decode::{Coding, Decoder};
use crate::clock::Clock;
use crate::journal::Journal;
use crate::state::State;

/// What the body's end said about cost and completion.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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

/// Everything a body needs to tell its job's machine how it ended.
pub(crate) struct MeterCtx {
    pub state: Arc<dyn State>,
    pub clock: Arc<dyn Clock>,
    /// The job's machine, delivering this body: its end is told to it
    /// ([`JobMachine::body_end`]), which settles and reports.
    pub job: JobMachine,
    pub job_id: String,
    pub attempt: u32,
    /// The request's `max_tokens` (or OpenAI's `max_completion_tokens` /
    /// `max_output_tokens`): a cut stream is never charged more. Carried
    /// because the reservation's output amount is whatever the pluggable
    /// estimator chose, not necessarily the request's cap.
    pub max_tokens: Option<u64>,
    /// For a stream: the journal and the attempt's record, reported again
    /// when the stream ends ([`Journal::stream_ended`]).
    pub stream_journal: Option<(Arc<dyn Journal>, AttemptRecord)>,
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
        // the estimate. A stream that did not complete is charged what it
        // delivered (`StreamOutcome::charge`), not its first event's count
        // nor the whole reservation.
        let usage = match (&result, side.gave_up) {
            (Metered::Stream(o @ StreamOutcome::Completed { .. }), _) => o.usage(),
            (Metered::Stream(o), false) => self.ctx.as_ref().and_then(|ctx| {
                let input = ctx.job.estimate().map_or(0, |u| u.input_tokens);
                o.charge(ctx.max_tokens, input)
            }),
            (_, false) => result.usage(),
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

/// Tells the job's machine how its body ended (see [`JobMachine::body_end`]):
/// it settles `usage` (its estimate without one) and reports a stream that
/// failed in band, in one update for the store.
fn settle(ctx: MeterCtx, result: &Metered, usage: Option<Usage>) {
    let now = ctx.clock.now();
    let MeterCtx {
        state,
        clock: _,
        mut job,
        job_id,
        attempt,
        max_tokens: _,
        stream_journal,
    } = ctx;
    let charged = usage.or_else(|| job.estimate()).unwrap_or_default();
    if let (Some((journal, mut record)), Metered::Stream(outcome)) = (stream_journal, result) {
        end_stream_record(&mut record, outcome, charged);
        journal.stream_ended(&record);
    }
    let end = match result {
        Metered::Stream(outcome) => stream_end(&job_id, attempt, outcome, usage),
        Metered::Body { complete, .. } => {
            tracing::debug!(job_id = %job_id, attempt, input_tokens = charged.input_tokens,
                output_tokens = charged.output_tokens, at_estimate = usage.is_none(), "settled");
            if *complete {
                BodyEnd::Complete { usage }
            } else {
                BodyEnd::Cut { delivered: usage }
            }
        }
    };
    // A body ends in `poll_frame` or a `Drop`: nothing here can await.
    if let Some(update) = job.body_end(end) {
        state.update_detached(update, now);
    }
}

/// The attempt's record as the stream ended: `success` only for a stream
/// that completed; any other ending is `mid_stream` (with the in-band
/// error's type and code when there was one). `usage` is what was charged.
fn end_stream_record(record: &mut AttemptRecord, outcome: &StreamOutcome, usage: Usage) {
    record.usage = Some(usage);
    match outcome {
        StreamOutcome::Completed { .. } => {}
        StreamOutcome::MidStream { error, .. } => {
            record.cause = Cause::MidStream;
            record.error_type.clone_from(&error.error_type);
            record.error_code.clone_from(&error.code);
        }
        _ => record.cause = Cause::MidStream,
    }
}

/// Traces how a stream ended, and says so to the machine: a failed stream
/// is reported with its in-band cause (an overload mid-stream counts like
/// a 529), classified by the machine; an interrupted one is cut. It is
/// never replayed. `usage`: what it is charged, when known.
fn stream_end(
    job_id: &str,
    attempt: u32,
    outcome: &StreamOutcome,
    usage: Option<Usage>,
) -> BodyEnd {
    let reported = outcome.usage();
    match outcome {
        StreamOutcome::Completed { .. } => {
            tracing::info!(
                job_id,
                attempt,
                outcome = "completed",
                output_tokens = reported.map(|u| u.output_tokens),
                "stream ended"
            );
            BodyEnd::Complete { usage }
        }
        StreamOutcome::MidStream {
            cause,
            error,
            committed,
            ..
        } => {
            tracing::warn!(
                job_id,
                attempt,
                outcome = "mid_stream",
                cause = cause.as_str(),
                committed,
                output_tokens = reported.map(|u| u.output_tokens),
                "stream failed"
            );
            BodyEnd::FailedInBand {
                cause: *cause,
                error_type: error.error_type.clone(),
                code: error.code.clone(),
                delivered: usage,
            }
        }
        StreamOutcome::Interrupted { committed, .. } => {
            tracing::warn!(
                job_id,
                attempt,
                outcome = "interrupted",
                committed,
                output_tokens = reported.map(|u| u.output_tokens),
                "stream interrupted"
            );
            BodyEnd::Cut { delivered: usage }
        }
        // An ending added later: logged, nothing learned from it (as an
        // interruption).
        _ => {
            tracing::warn!(
                job_id,
                attempt,
                outcome = outcome.as_str(),
                output_tokens = reported.map(|u| u.output_tokens),
                "stream ended"
            );
            BodyEnd::Cut { delivered: usage }
        }
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
        // Boxed: the meter is about a kilobyte, and the response that
        // carries this body is moved through every layer above it.
        meter: Box<Meter>,
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
            meter: Box::new(Meter {
                ctx: Some(ctx),
                side,
                result: None,
            }),
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

    /// The answer's `usage`, parsed once where its body ended — the same
    /// value the layer settled the reservation from (for a cut stream, the
    /// usage reported so far; the reservation is charged at least that).
    /// `None` while the body is still flowing, and when it reported none or
    /// metering gave up (a cut JSON body, one over
    /// [`Config::max_metered_body`](crate::Config::max_metered_body), a
    /// compressed body that did not decode).
    ///
    /// This is how the caller is handed the usage: read the body through
    /// this value (not [`into_inner`](Self::into_inner)) to its end, then
    /// ask. The body is the one owner of the parse, so the answer needs no
    /// second one, and there is no race: the value is set in the same poll
    /// that gives out the last byte.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http_body_util::{BodyExt, Full};
    /// use ratewise_tower::{Policy, RetryLayer};
    /// use tower::{Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let provider = tower::service_fn(|_: http::Request<Full<Bytes>>| async {
    ///     let body = br#"{"type":"message","usage":{"input_tokens":3,"cache_read_input_tokens":5,"output_tokens":4}}"#;
    ///     let answer = http::Response::builder()
    ///         .header("content-type", "application/json")
    ///         .body(Full::new(Bytes::from_static(body)))
    ///         .unwrap();
    ///     Ok::<_, std::convert::Infallible>(answer)
    /// });
    /// let service = RetryLayer::new(Policy::default()).layer(provider);
    /// let request = http::Request::post("http://127.0.0.1:8080/v1/messages")
    ///     .body(Full::new(Bytes::from_static(
    ///         br#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[]}"#,
    ///     )))
    ///     .unwrap();
    /// let mut body = service.oneshot(request).await.unwrap().into_body();
    /// assert_eq!(body.usage(), None, "not ended yet");
    /// let mut bytes = Vec::new();
    /// while let Some(frame) = body.frame().await {
    ///     bytes.extend_from_slice(frame.unwrap().data_ref().unwrap());
    /// }
    /// let usage = body.usage().unwrap();
    /// assert_eq!((usage.billed_input(), usage.output_tokens), (8, 4));
    /// # }
    /// ```
    pub fn usage(&self) -> Option<Usage> {
        self.metered().and_then(Metered::usage)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Sleep;
    use ratewise_core::admit::{self, Admission, Controller, Shared};
    use ratewise_core::{Instant, Now, Provider};
    use std::convert::Infallible;
    use std::io::Write;

    struct Fixed;

    impl Clock for Fixed {
        fn now(&self) -> Now {
            Now::new(Instant::ZERO, std::time::SystemTime::UNIX_EPOCH)
        }
        fn sleep_until(&self, _: Instant) -> Sleep {
            Box::pin(std::future::ready(()))
        }
    }

    /// A body of pieces that tells its end like hyper's `Incoming`: with
    /// `exact` (a `Content-Length` body) its size hint is the bytes left
    /// and it reports its end with the last piece; without (chunked), only
    /// `None` tells it.
    struct Pieces {
        pieces: VecDeque<Bytes>,
        exact: bool,
    }

    impl Pieces {
        fn new(bytes: &[u8], cuts: usize, exact: bool) -> Self {
            let step = bytes.len().div_ceil(cuts.max(1)).max(1);
            Pieces {
                pieces: bytes.chunks(step).map(Bytes::copy_from_slice).collect(),
                exact,
            }
        }
    }

    impl Body for Pieces {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Ready(self.pieces.pop_front().map(|b| Ok(Frame::data(b))))
        }

        fn is_end_stream(&self) -> bool {
            self.exact && self.pieces.is_empty()
        }

        fn size_hint(&self) -> SizeHint {
            if self.exact {
                SizeHint::with_exact(self.pieces.iter().map(|p| p.len() as u64).sum())
            } else {
                SizeHint::default()
            }
        }
    }

    const MAX_TOKENS: u64 = 100;
    const JSON: &[u8] = br#"{"type":"message","usage":{"input_tokens":3,"output_tokens":4}}"#;

    fn state() -> Arc<Shared> {
        // Known limits, at full rate: many bodies may be open at once (a
        // scope with no limit known would send one probe at a time, and
        // these bodies never observe an answer).
        let mut config = admit::Config::default();
        config.limits = admit::Limits {
            requests: Some(1_000_000),
            ..admit::Limits::NONE
        };
        config.ramp.start = 1000;
        Arc::new(Shared::new(Controller::new(config)))
    }

    /// A job's machine driven to the delivery of a success, as the layer
    /// hands it to the body.
    fn ctx(state: &Arc<Shared>) -> MeterCtx {
        use ratewise_core::job::{JobSpec, Step};
        let now = Fixed.now();
        let mut spec = JobSpec::new(state.target("key", "claude-sonnet-4-5"), now.instant);
        spec.max_tokens = Some(MAX_TOKENS);
        spec.input_estimate = Some(10);
        let policy = ratewise_core::decide::Policy::default();
        let mut job = JobMachine::new(spec, &policy);
        let Step::Admit(req) = job.next(now) else {
            panic!("asks for admission");
        };
        let answer = state.admit(&req, now);
        assert!(matches!(answer, Admission::Go(_)), "admitted at once");
        let Step::Send { .. } = job.admission(answer, &policy, now) else {
            panic!("sends");
        };
        job.sending();
        let headers = http::HeaderMap::new();
        let view = ratewise_core::classify::ResponseView {
            status: http::StatusCode::OK,
            headers: &headers,
            body: b"",
        };
        let c = ratewise_core::classify::classify_response(Provider::Anthropic, &view, now.wall);
        let update = job.answered(&policy, &c, None, &mut fastrand::Rng::with_seed(1), now);
        job.applied(state.apply(update, now), now);
        MeterCtx {
            state: state.clone(),
            clock: Arc::new(Fixed),
            job,
            job_id: "j".into(),
            attempt: 1,
            max_tokens: Some(MAX_TOKENS),
            stream_journal: None,
        }
    }

    fn json(coding: Coding, max_decoded: usize) -> Side {
        let kind = MeterKind::Json {
            buf: BytesMut::new(),
            limit: 4 << 20,
            overflow: false,
        };
        Side::new(kind, coding, max_decoded)
    }

    fn metered<B: Body<Data = Bytes>>(state: &Arc<Shared>, inner: B, side: Side) -> MeteredBody<B> {
        MeteredBody::new(inner, ctx(state), side, VecDeque::new(), None)
    }

    fn poll<B: Body<Data = Bytes> + Unpin>(body: &mut B) -> Option<Result<Frame<Bytes>, B::Error>> {
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        match Pin::new(body).poll_frame(&mut cx) {
            Poll::Ready(frame) => frame,
            Poll::Pending => panic!("test bodies are always ready"),
        }
    }

    /// Reads `body` the way hyper's server does: it stops polling once the
    /// body reports its end.
    fn serve<B: Body<Data = Bytes> + Unpin>(body: &mut B) -> Vec<u8> {
        let mut out = Vec::new();
        while !body.is_end_stream() {
            match poll(body) {
                Some(Ok(frame)) => out.extend_from_slice(frame.data_ref().map_or(&[][..], |d| d)),
                _ => break,
            }
        }
        out
    }

    /// (settled requests, charged output tokens, outstanding requests).
    fn settled(state: &Shared) -> (u64, u64, u64) {
        let ledger = state.lock().ledger();
        assert_eq!(ledger.refused_ends, 0, "an end came twice: {ledger:?}");
        (
            ledger.settled.requests,
            ledger.charged.output,
            ledger.outstanding.requests,
        )
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn a_content_length_body_settles_on_its_last_byte_exactly_once() {
        let st = state();
        let mut body = metered(
            &st,
            Pieces::new(JSON, 3, true),
            json(Coding::Identity, 1 << 20),
        );
        assert_eq!(settled(&st), (0, 0, 1));
        assert_eq!(serve(&mut body), JSON, "the bytes pass untouched");
        assert_eq!(
            body.metered(),
            Some(&Metered::Body {
                usage: Some(Usage {
                    input_tokens: 3,
                    output_tokens: 4,
                    ..Usage::default()
                }),
                complete: true,
            }),
            "settled without being polled to None"
        );
        assert_eq!(settled(&st), (1, 4, 0), "the actual output, not max_tokens");
        // Polling past the end, then dropping, settles nothing more.
        assert!(poll(&mut body).is_none());
        assert!(poll(&mut body).is_none());
        drop(body);
        assert_eq!(settled(&st), (1, 4, 0));
    }

    #[test]
    fn a_chunked_body_settles_on_none_and_only_then() {
        let st = state();
        let mut body = metered(
            &st,
            Pieces::new(JSON, 2, false),
            json(Coding::Identity, 1 << 20),
        );
        assert!(poll(&mut body).is_some());
        assert!(poll(&mut body).is_some());
        assert!(!body.is_end_stream(), "a chunked body's end is its None");
        assert_eq!(body.metered(), None);
        assert_eq!(settled(&st), (0, 0, 1));
        assert!(poll(&mut body).is_none());
        assert!(body.is_end_stream());
        assert_eq!(settled(&st), (1, 4, 0));
        drop(body);
        assert_eq!(settled(&st), (1, 4, 0));
    }

    #[test]
    fn a_body_dropped_midway_settles_at_the_estimate_once() {
        let st = state();
        let mut body = metered(
            &st,
            Pieces::new(JSON, 2, true),
            json(Coding::Identity, 1 << 20),
        );
        assert!(poll(&mut body).is_some());
        drop(body);
        assert_eq!(settled(&st), (1, MAX_TOKENS, 0));
    }

    #[test]
    fn an_empty_body_settles_at_once() {
        let st = state();
        let body = metered(
            &st,
            http_body_util::Empty::<Bytes>::new(),
            json(Coding::Identity, 1 << 20),
        );
        assert!(body.is_end_stream(), "a server never polls it");
        assert_eq!(
            body.metered(),
            Some(&Metered::Body {
                usage: None,
                complete: true
            })
        );
        drop(body);
        assert_eq!(settled(&st), (1, MAX_TOKENS, 0));
    }

    #[test]
    fn size_hint_and_end_of_stream_forward_the_inner_body() {
        let st = state();
        let mut body = metered(
            &st,
            Pieces::new(JSON, 2, true),
            json(Coding::Identity, 1 << 20),
        );
        assert_eq!(body.size_hint().exact(), Some(JSON.len() as u64));
        assert!(!body.is_end_stream());
        let first = poll(&mut body).unwrap().unwrap().into_data().unwrap();
        assert_eq!(
            body.size_hint().exact(),
            Some((JSON.len() - first.len()) as u64)
        );
        assert!(poll(&mut body).is_some());
        assert_eq!(body.size_hint().exact(), Some(0));
        assert!(body.is_end_stream());

        // A chunked inner body: no size told, no end before None.
        let mut body = metered(
            &st,
            Pieces::new(JSON, 1, false),
            json(Coding::Identity, 1 << 20),
        );
        assert_eq!(body.size_hint().exact(), None);
        assert_eq!(body.size_hint().lower(), 0);
        assert!(poll(&mut body).is_some());
        assert!(!body.is_end_stream());

        // Frames held back count in the hint, and the end waits for them.
        let held: VecDeque<_> = [Frame::data(Bytes::from_static(b"held"))].into();
        let mut body = MeteredBody::new(
            Pieces::new(JSON, 1, true),
            ctx(&st),
            json(Coding::Identity, 1 << 20),
            held,
            None,
        );
        assert_eq!(body.size_hint().exact(), Some(JSON.len() as u64 + 4));
        assert_eq!(
            poll(&mut body).unwrap().unwrap().into_data().unwrap(),
            &b"held"[..]
        );
        assert!(!body.is_end_stream());
        assert!(poll(&mut body).is_some());
        assert!(body.is_end_stream());
    }

    #[test]
    fn held_frames_of_an_ended_stream_settle_with_the_last_of_them() {
        let st = state();
        let frames = [
            &b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n"[..],
            &b"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":4}}\n\n"[..],
            &b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"[..],
        ];
        let mut side = Side::new(
            MeterKind::Stream(Box::new(StreamTracker::new(
                Provider::Anthropic,
                Default::default(),
            ))),
            Coding::Identity,
            1 << 20,
        );
        let mut held = VecDeque::new();
        for f in frames {
            side.observe(f);
            held.push_back(Frame::data(Bytes::from_static(f)));
        }
        let mut body = MeteredBody::new(
            http_body_util::Empty::<Bytes>::new(),
            ctx(&st),
            side,
            held,
            Some(true),
        );
        assert!(!body.is_end_stream());
        assert_eq!(serve(&mut body).len(), frames.concat().len());
        assert!(matches!(
            body.stream_outcome(),
            Some(StreamOutcome::Completed { usage: Some(u) }) if u.output_tokens == 4
        ));
        assert_eq!(settled(&st), (1, 4, 0));
    }

    #[test]
    fn a_gzip_body_settles_from_its_decoded_usage_and_passes_compressed() {
        let st = state();
        let gz = gzip(JSON);
        for exact in [true, false] {
            let mut body = metered(&st, Pieces::new(&gz, 4, exact), json(Coding::Gzip, 1 << 20));
            let seen = serve(&mut body);
            if !exact {
                assert!(poll(&mut body).is_none());
            }
            assert_eq!(seen, gz, "the caller gets the compressed bytes");
            assert_eq!(
                body.metered()
                    .and_then(Metered::usage)
                    .map(|u| u.output_tokens),
                Some(4)
            );
        }
        assert_eq!(settled(&st), (2, 8, 0));
    }

    #[test]
    fn a_truncated_gzip_body_settles_at_the_estimate() {
        let st = state();
        let gz = gzip(JSON);
        // The JSON is whole but the trailer (CRC, size) is cut: not trusted.
        let cut = &gz[..gz.len() - 4];
        let mut body = metered(&st, Pieces::new(cut, 3, true), json(Coding::Gzip, 1 << 20));
        assert_eq!(serve(&mut body), cut);
        assert_eq!(
            body.metered(),
            Some(&Metered::Body {
                usage: None,
                complete: true
            })
        );
        assert_eq!(settled(&st), (1, MAX_TOKENS, 0));
    }

    #[test]
    fn garbage_declared_as_gzip_settles_at_the_estimate() {
        let st = state();
        let mut body = metered(&st, Pieces::new(JSON, 2, true), json(Coding::Gzip, 1 << 20));
        assert_eq!(serve(&mut body), JSON, "bytes still pass");
        assert!(body.meter.side.gave_up);
        assert_eq!(settled(&st), (1, MAX_TOKENS, 0));
    }

    #[test]
    fn a_gzip_bomb_is_capped_and_settles_at_the_estimate() {
        let st = state();
        // 16 MiB of JSON (usage first) in about 16 KiB of gzip.
        let mut doc = br#"{"usage":{"input_tokens":3,"output_tokens":4},"pad":""#.to_vec();
        doc.resize(16 << 20, b'0');
        doc.extend_from_slice(b"\"}");
        let bomb = gzip(&doc);
        assert!(bomb.len() < 64 << 10);
        let cap = 256 << 10;
        let mut body = metered(&st, Pieces::new(&bomb, 8, true), json(Coding::Gzip, cap));
        let first = poll(&mut body).unwrap().unwrap().into_data().unwrap();
        assert_eq!(first.len(), bomb.len().div_ceil(8), "bytes pass untouched");
        assert!(
            body.meter.side.gave_up,
            "one frame already decodes past the cap"
        );
        let decoded = body.meter.side.decoder.as_ref().map_or(0, |d| d.decoded());
        assert!(
            decoded <= (cap + super::super::decode::OUT_CHUNK) as u64,
            "{decoded}"
        );
        if let MeterKind::Json { buf, .. } = &body.meter.side.kind {
            assert!(buf.len() <= cap, "the side copy never grows past the cap");
        }
        let rest = serve(&mut body);
        assert_eq!(first.len() + rest.len(), bomb.len());
        assert_eq!(body.metered().and_then(Metered::usage), None);
        assert_eq!(
            settled(&st),
            (1, MAX_TOKENS, 0),
            "the estimate, not the bomb's 4"
        );
    }

    #[test]
    fn an_unsupported_coding_settles_at_the_estimate() {
        let st = state();
        let mut body = metered(
            &st,
            Pieces::new(JSON, 1, true),
            json(Coding::Unsupported, 1 << 20),
        );
        serve(&mut body);
        assert_eq!(settled(&st), (1, MAX_TOKENS, 0));
    }

    fn stream(provider: Provider) -> Side {
        let tracker = StreamTracker::new(provider, Default::default());
        Side::new(
            MeterKind::Stream(Box::new(tracker)),
            Coding::Identity,
            1 << 20,
        )
    }

    #[test]
    fn a_cut_stream_settles_what_it_delivered_not_its_first_count() {
        let st = state();
        // 80 bytes of text after message_start's 1 output token, then the
        // body ends without message_stop.
        let text = "x".repeat(80);
        let cut = format!(
            "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"usage\":{{\"input_tokens\":3,\"output_tokens\":1}}}}}}\n\n\
             event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}}}}\n\n"
        );
        let mut body = metered(
            &st,
            Pieces::new(cut.as_bytes(), 3, false),
            stream(Provider::Anthropic),
        );
        serve(&mut body);
        assert!(poll(&mut body).is_none());
        assert_eq!(settled(&st), (1, 20, 0), "⌈80 / 4⌉, not 1");
        assert_eq!(st.lock().ledger().charged.input, 3, "input as reported");
    }

    #[test]
    fn a_stream_dropped_before_any_content_is_charged_no_output() {
        let st = state();
        let chat = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
        let mut body = metered(&st, Pieces::new(chat, 1, false), stream(Provider::Openai));
        assert!(poll(&mut body).is_some());
        drop(body);
        // Nothing generated reached anyone: output 0, input the estimate
        // (10), not max_tokens.
        assert_eq!(settled(&st), (1, 0, 0));
        assert_eq!(st.lock().ledger().charged.input, 10);
    }
}
