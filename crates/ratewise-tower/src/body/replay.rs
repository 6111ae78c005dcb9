//! Request bodies that can be sent more than once.
//!
//! The layer buffers a request body once (up to a bound; a larger body is
//! a clear error before anything is sent) into [`Bytes`], and rebuilds the
//! body for each attempt from a clone of those bytes — a reference-count
//! increment, never a copy. Bodies that already hold [`Bytes`] (`Full`)
//! are not copied when buffered either: their single chunk is kept as is.

use bytes::{Buf, Bytes, BytesMut};
use http_body::Body;
use http_body_util::combinators::{BoxBody, UnsyncBoxBody};
use http_body_util::{BodyExt, Empty, Full};
use std::convert::Infallible;
use std::future::Future;

use crate::error::BoxError;

/// Why a body could not be buffered.
#[derive(Debug)]
#[non_exhaustive]
pub enum BufferError {
    /// Larger than the bound.
    TooLarge,
    /// The body failed.
    Body(BoxError),
}

/// A request body the layer can buffer once and rebuild per attempt.
///
/// Implemented for `Full<Bytes>`, `Empty<Bytes>`, `String` and the boxed
/// bodies of `http-body-util`. To use another body type, convert it first
/// (e.g. an axum/hyper `Incoming` into `BoxBody` with `BodyExt::boxed`).
pub trait ReplayBody: Body + Sized + Send + 'static {
    /// Reads the whole body, failing once it exceeds `limit` bytes.
    fn buffer(self, limit: usize) -> impl Future<Output = Result<Bytes, BufferError>> + Send;
    /// Builds a body that yields `bytes`.
    fn replay(bytes: Bytes) -> Self;
}

/// Reads a body whole, up to `limit` bytes, keeping a single chunk as is.
pub(crate) async fn collect_bounded<B>(body: B, limit: usize) -> Result<Bytes, BufferError>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    if body.size_hint().lower() > limit as u64 {
        return Err(BufferError::TooLarge);
    }
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut rest = BytesMut::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BufferError::Body(e.into()))?;
        let Ok(mut data) = frame.into_data() else {
            continue; // trailers are not replayed
        };
        let n = data.remaining();
        total = total.saturating_add(n);
        if total > limit {
            return Err(BufferError::TooLarge);
        }
        let chunk = data.copy_to_bytes(n);
        match first.take() {
            None if rest.is_empty() => first = Some(chunk),
            Some(f) => {
                rest.extend_from_slice(&f);
                rest.extend_from_slice(&chunk);
            }
            None => rest.extend_from_slice(&chunk),
        }
    }
    Ok(first.unwrap_or_else(|| rest.freeze()))
}

impl ReplayBody for Full<Bytes> {
    fn buffer(self, limit: usize) -> impl Future<Output = Result<Bytes, BufferError>> + Send {
        collect_bounded(self, limit)
    }
    fn replay(bytes: Bytes) -> Self {
        Full::new(bytes)
    }
}

impl ReplayBody for Empty<Bytes> {
    fn buffer(self, _limit: usize) -> impl Future<Output = Result<Bytes, BufferError>> + Send {
        std::future::ready(Ok(Bytes::new()))
    }
    fn replay(_bytes: Bytes) -> Self {
        Empty::new()
    }
}

impl ReplayBody for String {
    fn buffer(self, limit: usize) -> impl Future<Output = Result<Bytes, BufferError>> + Send {
        std::future::ready(if self.len() > limit {
            Err(BufferError::TooLarge)
        } else {
            Ok(Bytes::from(self))
        })
    }
    fn replay(bytes: Bytes) -> Self {
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl<E> ReplayBody for BoxBody<Bytes, E>
where
    E: Into<BoxError> + 'static,
{
    fn buffer(self, limit: usize) -> impl Future<Output = Result<Bytes, BufferError>> + Send {
        collect_bounded(self, limit)
    }
    fn replay(bytes: Bytes) -> Self {
        Full::new(bytes)
            .map_err(|never: Infallible| match never {})
            .boxed()
    }
}

impl<E> ReplayBody for UnsyncBoxBody<Bytes, E>
where
    E: Into<BoxError> + 'static,
{
    fn buffer(self, limit: usize) -> impl Future<Output = Result<Bytes, BufferError>> + Send {
        collect_bounded(self, limit)
    }
    fn replay(bytes: Bytes) -> Self {
        Full::new(bytes)
            .map_err(|never: Infallible| match never {})
            .boxed_unsync()
    }
}

/// Reads at most `limit` bytes of a response body (an error answer, for
/// classification). Stops at the bound or at a body error, keeping what
/// arrived; the rest is dropped with the body.
pub(crate) async fn read_prefix<B>(body: B, limit: usize) -> Bytes
where
    B: Body,
{
    let mut body = std::pin::pin!(body);
    let mut buf = BytesMut::new();
    while buf.len() < limit {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(mut data) = frame.into_data() {
                    while data.has_remaining() && buf.len() < limit {
                        let chunk = data.chunk();
                        let take = chunk.len().min(limit - buf.len());
                        buf.extend_from_slice(&chunk[..take]);
                        data.advance(take);
                    }
                }
            }
            _ => break,
        }
    }
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn full_keeps_its_bytes_without_copying() {
        let original = Bytes::from_static(b"{\"model\":\"m\"}");
        let got = Full::new(original.clone()).buffer(1024).await.unwrap();
        assert_eq!(got.as_ptr(), original.as_ptr());
    }

    #[tokio::test]
    async fn too_large_is_refused() {
        let body = Full::new(Bytes::from(vec![0u8; 100]));
        assert!(matches!(body.buffer(10).await, Err(BufferError::TooLarge)));
        assert!(matches!(
            "x".repeat(11).buffer(10).await,
            Err(BufferError::TooLarge)
        ));
    }

    #[tokio::test]
    async fn prefix_is_bounded() {
        let body = Full::new(Bytes::from(vec![7u8; 100]));
        assert_eq!(read_prefix(body, 10).await.len(), 10);
    }
}
