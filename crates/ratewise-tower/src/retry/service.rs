//! [`RetryService`]: the service half of the layer.

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use std::task::{Context, Poll};
use tower_service::Service;

use super::future::ResponseFuture;
use super::layer::RetryLayer;
use crate::body::{MeteredBody, ReplayBody};
use crate::error::{BoxError, Error};

/// Sends each request through admission, reads every answer whole and
/// retries only where the decision says so. See [`RetryLayer`].
///
/// `poll_ready` is the inner service's: the first attempt uses the service
/// that was polled ready; retries wait for a clone to become ready.
///
/// Bounds: the inner service is `Clone + Send + 'static` (a client handle,
/// as hyper-util's is); request bodies implement [`ReplayBody`]; response
/// bodies yield [`Bytes`] and are `Unpin` (hyper's `Incoming`, boxed
/// bodies), so a stream can be read up to its commit point.
#[derive(Clone, Debug)]
pub struct RetryService<S> {
    inner: S,
    layer: RetryLayer,
}

impl<S> RetryService<S> {
    /// Wraps `inner` under `layer`'s configuration and shared state.
    pub fn new(inner: S, layer: RetryLayer) -> Self {
        RetryService { inner, layer }
    }

    /// The layer (configuration, shared state, `resume`).
    pub fn layer(&self) -> &RetryLayer {
        &self.layer
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B, R> Service<Request<B>> for RetryService<S>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: ReplayBody,
    R: Body<Data = Bytes> + Send + Unpin + 'static,
{
    type Response = Response<MeteredBody<R>>;
    type Error = Error;
    type Future = ResponseFuture<R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        // An inner service that cannot become ready sent nothing: report
        // it as the transport failure it is, with no attempt recorded.
        self.inner
            .poll_ready(cx)
            .map_err(|e| super::run::not_ready(&self.layer.shared(), e.into()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The service polled ready goes to this call; a fresh clone stays.
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        let shared = self.layer.shared();
        // The job's deadline counts from here, not from the first poll.
        let arrived = shared.clock.now().instant;
        ResponseFuture::new(Box::pin(super::run::run(shared, ready, req, arrived)))
    }
}
