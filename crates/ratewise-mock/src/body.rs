//! The response body: a whole buffer, its pieces sent chunked, or SSE
//! frames fed by a task.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// A response body of the mock.
#[derive(Debug)]
pub enum MockBody {
    /// A complete body (sent with a `Content-Length`).
    Full(Option<Bytes>),
    /// A complete body sent chunked, one chunk per piece, its length untold.
    Chunks(VecDeque<Bytes>),
    /// A chunked body fed through a channel; ends when the sender is dropped.
    Stream(mpsc::Receiver<Bytes>),
}

impl MockBody {
    /// A complete body.
    pub fn full(b: impl Into<Bytes>) -> Self {
        MockBody::Full(Some(b.into()))
    }

    /// A complete body sent chunked, in two pieces (one when shorter than
    /// two bytes).
    pub fn chunked(b: impl Into<Bytes>) -> Self {
        let mut b: Bytes = b.into();
        let mut pieces = VecDeque::new();
        if b.len() >= 2 {
            pieces.push_back(b.split_to(b.len() / 2));
        }
        if !b.is_empty() {
            pieces.push_back(b);
        }
        MockBody::Chunks(pieces)
    }
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            MockBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            MockBody::Chunks(pieces) => Poll::Ready(pieces.pop_front().map(|b| Ok(Frame::data(b)))),
            MockBody::Stream(rx) => rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            MockBody::Full(b) => b.is_none(),
            MockBody::Chunks(pieces) => pieces.is_empty(),
            MockBody::Stream(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            MockBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            MockBody::Full(None) => SizeHint::with_exact(0),
            // No exact size: hyper sends these chunked.
            MockBody::Chunks(_) | MockBody::Stream(_) => SizeHint::default(),
        }
    }
}
