//! [`ResponseFuture`]: the future of one call (one job).

use http::Response;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::body::MeteredBody;
use crate::error::Error;

type BoxFuture<R> = Pin<Box<dyn Future<Output = Result<Response<MeteredBody<R>>, Error>> + Send>>;

pin_project! {
    /// The response future of [`RetryService`](crate::RetryService): all
    /// attempts of one job, the waits between them included.
    pub struct ResponseFuture<R> {
        #[pin]
        inner: BoxFuture<R>,
    }
}

impl<R> ResponseFuture<R> {
    pub(crate) fn new(inner: BoxFuture<R>) -> Self {
        ResponseFuture { inner }
    }
}

impl<R> Future for ResponseFuture<R> {
    type Output = Result<Response<MeteredBody<R>>, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx)
    }
}

impl<R> std::fmt::Debug for ResponseFuture<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
