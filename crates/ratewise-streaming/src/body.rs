//! [`SseStream`]: an `http_body::Body` (or a byte stream) as a
//! `futures::Stream` of typed events, ending in a [`StreamOutcome`].
//!
//! Items are `Ok(StreamEvent)` for every event, including an in-band
//! [`StreamEvent::Error`]; an `Err` is yielded once if the body fails or
//! the bytes break the decoder's limits, and then the stream ends. Once the
//! stream has returned `None` (or its `Err`), [`SseStream::outcome`] says
//! how it ended.
//!
//! ```
//! use futures::StreamExt;
//! use ratewise_core::Provider;
//! use ratewise_streaming::{SseStream, StreamEvent, StreamOutcome, TrackerConfig};
//!
//! # futures::executor::block_on(async {
//! let chunks: Vec<Result<&'static [u8], std::io::Error>> = vec![
//!     Ok(b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n"),
//!     Ok(b"data: [DONE]\n\n"),
//! ];
//! let mut stream = SseStream::from_stream(
//!     futures::stream::iter(chunks),
//!     Provider::Openai,
//!     TrackerConfig::default(),
//! );
//! let first = stream.next().await.unwrap().unwrap();
//! assert_eq!(first, StreamEvent::TextDelta { index: 0, text: "Hi".into() });
//! while stream.next().await.is_some() {}
//! assert_eq!(stream.outcome(), Some(&StreamOutcome::Completed { usage: None }));
//! # });
//! ```

use std::collections::VecDeque;
use std::error::Error as StdError;
use std::fmt;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Buf;
use futures::Stream;
use http_body::{Body, Frame};
use pin_project_lite::pin_project;
use ratewise_core::Provider;

use crate::interpret::StreamEvent;
use crate::outcome::StreamOutcome;
use crate::sse::SseError;
use crate::tracker::{StreamTracker, TrackerConfig};

/// A boxed body error.
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// Why an [`SseStream`] ended early.
#[derive(Debug)]
#[non_exhaustive]
pub enum StreamError {
    /// The body failed.
    Body(BoxError),
    /// The bytes broke the decoder's limits.
    Decode(SseError),
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamError::Body(e) => write!(f, "stream body failed: {e}"),
            StreamError::Decode(e) => write!(f, "stream unreadable: {e}"),
        }
    }
}

impl StdError for StreamError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            StreamError::Body(e) => Some(&**e),
            StreamError::Decode(e) => Some(e),
        }
    }
}

pin_project! {
    /// A typed event stream over a body. See the [module docs](self).
    pub struct SseStream<B> {
        #[pin]
        body: B,
        tracker: StreamTracker,
        pending: VecDeque<StreamEvent>,
        scratch: Vec<StreamEvent>,
        error: Option<StreamError>,
        outcome: Option<StreamOutcome>,
    }
}

impl<B> SseStream<B> {
    /// Reads `body` as a stream from `provider`.
    pub fn new(body: B, provider: Provider, config: TrackerConfig) -> Self {
        SseStream {
            body,
            tracker: StreamTracker::new(provider, config),
            pending: VecDeque::new(),
            scratch: Vec::new(),
            error: None,
            outcome: None,
        }
    }

    /// How the stream ended; `None` until the body ended or failed.
    pub fn outcome(&self) -> Option<&StreamOutcome> {
        self.outcome.as_ref()
    }

    /// The tracker (commit state, usage so far).
    pub fn tracker(&self) -> &StreamTracker {
        &self.tracker
    }

    /// The outcome, consuming the stream; `None` if it has not ended.
    pub fn into_outcome(self) -> Option<StreamOutcome> {
        self.outcome
    }

    /// The same stream with the outcome as its last item.
    pub fn with_outcome(self) -> WithOutcome<B> {
        WithOutcome {
            inner: self,
            done: false,
        }
    }
}

/// An item of [`WithOutcome`].
#[derive(Debug)]
#[non_exhaustive]
pub enum StreamItem {
    /// A typed event.
    Event(StreamEvent),
    /// The body failed or broke the decoder's limits; [`StreamItem::End`]
    /// follows.
    Failed(StreamError),
    /// How the stream ended: always the last item.
    End(StreamOutcome),
}

pin_project! {
    /// An [`SseStream`] whose last item is its [`StreamOutcome`].
    pub struct WithOutcome<B> {
        #[pin]
        inner: SseStream<B>,
        done: bool,
    }
}

impl<B> Stream for WithOutcome<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Item = StreamItem;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StreamItem>> {
        let mut this = self.project();
        if *this.done {
            return Poll::Ready(None);
        }
        match ready!(this.inner.as_mut().poll_next(cx)) {
            Some(Ok(event)) => Poll::Ready(Some(StreamItem::Event(event))),
            Some(Err(err)) => Poll::Ready(Some(StreamItem::Failed(err))),
            None => {
                *this.done = true;
                let outcome = this.inner.outcome().cloned();
                Poll::Ready(outcome.map(StreamItem::End))
            }
        }
    }
}

impl<S> SseStream<ByteStreamBody<S>> {
    /// Reads a stream of byte chunks (`Result<impl Buf, E>`).
    pub fn from_stream(stream: S, provider: Provider, config: TrackerConfig) -> Self {
        Self::new(ByteStreamBody { stream }, provider, config)
    }
}

impl<B> Stream for SseStream<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Item = Result<StreamEvent, StreamError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        loop {
            if let Some(event) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if let Some(err) = this.error.take() {
                return Poll::Ready(Some(Err(err)));
            }
            if this.outcome.is_some() {
                return Poll::Ready(None);
            }
            match ready!(this.body.as_mut().poll_frame(cx)) {
                None => *this.outcome = Some(this.tracker.outcome(true)),
                Some(Err(err)) => {
                    *this.outcome = Some(this.tracker.outcome(false));
                    *this.error = Some(StreamError::Body(err.into()));
                }
                Some(Ok(frame)) => {
                    let Ok(mut data) = frame.into_data() else {
                        continue; // trailers carry no events
                    };
                    let mut result = Ok(());
                    while data.has_remaining() && result.is_ok() {
                        let chunk = data.chunk();
                        let len = chunk.len();
                        result = this.tracker.push(chunk, this.scratch);
                        data.advance(len);
                    }
                    this.pending.extend(this.scratch.drain(..));
                    if let Err(err) = result {
                        *this.outcome = Some(this.tracker.outcome(false));
                        *this.error = Some(StreamError::Decode(err));
                    }
                }
            }
        }
    }
}

pin_project! {
    /// A stream of byte chunks seen as an `http_body::Body`.
    pub struct ByteStreamBody<S> {
        #[pin]
        stream: S,
    }
}

impl<S> ByteStreamBody<S> {
    /// Wraps a stream of `Result<impl Buf, E>`.
    pub fn new(stream: S) -> Self {
        ByteStreamBody { stream }
    }
}

impl<S, D, E> Body for ByteStreamBody<S>
where
    S: Stream<Item = Result<D, E>>,
    D: Buf,
{
    type Data = D;
    type Error = E;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<D>, E>>> {
        self.project()
            .stream
            .poll_next(cx)
            .map(|item| item.map(|r| r.map(Frame::data)))
    }
}
