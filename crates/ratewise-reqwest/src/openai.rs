//! [`OpenAiLayer`]: ratewise as async-openai's tower service layer.

use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use futures::future::BoxFuture;
use ratewise_tower::{Policy, RetryLayer};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tower::{Service, ServiceExt};

use crate::job::{self, Ended, SendFuture, Sender, Stops};

/// ratewise for async-openai: a tower layer over any
/// `Service<HttpRequestFactory, Response = reqwest::Response>`
/// (async-openai's `ReqwestService`), installed with
/// `Client::with_http_service`, which replaces async-openai's own retry
/// layer: ratewise is then the one retry owner.
///
/// ```no_run
/// use async_openai::{config::OpenAIConfig, middleware::ReqwestService, Client};
/// use ratewise_reqwest::OpenAiLayer;
/// use ratewise_tower::Policy;
///
/// let service = tower::ServiceBuilder::new()
///     .layer(OpenAiLayer::new(Policy::default()))
///     .service(ReqwestService::new(reqwest::Client::new()));
/// let client = Client::with_config(OpenAIConfig::default()).with_http_service(service);
/// # let _ = client;
/// ```
///
/// The same rule as [`RatewiseMiddleware`](crate::RatewiseMiddleware):
/// a job that ended on the provider's answer returns it unchanged (so
/// async-openai raises `OpenAIError::ApiError` with the provider's code,
/// `insufficient_quota` for a spend cap), with `x-ratewise-action` and
/// the [`Outcome`](crate::Outcome) — and a call that finds its key
/// stopped gets the answer that stopped it again, nothing sent; a
/// transport failure returns the inner
/// service's `OpenAIError` as it was; a job that ended with no answer
/// (deferred or past its deadline before a send, or a key stopped by an
/// answer this layer never saw) returns
/// `OpenAIError::Boxed` holding the `ratewise_tower::Error` with the
/// decision ([`openai_ratewise_error`](crate::openai_ratewise_error)).
#[derive(Clone, Debug)]
pub struct OpenAiLayer {
    layer: RetryLayer,
    stops: Stops,
}

impl OpenAiLayer {
    /// A layer with `policy` and every other setting at its default.
    pub fn new(policy: Policy) -> Self {
        Self::from_layer(RetryLayer::new(policy))
    }

    /// A layer running its calls on `layer` (its limits, store, clock,
    /// journal), shared with every other user of it.
    pub fn from_layer(layer: RetryLayer) -> Self {
        OpenAiLayer {
            layer,
            stops: Stops::default(),
        }
    }

    /// The ratewise layer.
    pub fn layer(&self) -> &RetryLayer {
        &self.layer
    }
}

impl<S> tower::Layer<S> for OpenAiLayer {
    type Service = OpenAiService<S>;

    fn layer(&self, inner: S) -> OpenAiService<S> {
        OpenAiService {
            inner,
            layer: self.layer.clone(),
            stops: self.stops.clone(),
        }
    }
}

/// The service [`OpenAiLayer`] makes: each call one job.
#[derive(Clone, Debug)]
pub struct OpenAiService<S> {
    inner: S,
    layer: RetryLayer,
    stops: Stops,
}

impl<S> Service<HttpRequestFactory> for OpenAiService<S>
where
    S: Service<HttpRequestFactory, Response = reqwest::Response> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<OpenAIError>,
{
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future = BoxFuture<'static, Result<reqwest::Response, OpenAIError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), OpenAIError>> {
        // Each send waits for a clone of the inner service to be ready,
        // after admission: readiness before it would hold nothing.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, factory: HttpRequestFactory) -> Self::Future {
        let inner = self.inner.clone();
        let layer = self.layer.clone();
        let stops = self.stops.clone();
        Box::pin(async move {
            // Built once: its body is what every attempt replays.
            let request = factory.build().await?;
            let sender = FactorySender { inner };
            match job::run(&layer, &stops, request, http::Extensions::new(), sender).await {
                Ok(response) => Ok(response),
                Err(Ended::Transport(e)) => Err(e),
                Err(Ended::Ratewise(e)) => Err(OpenAIError::Boxed(Box::new(e))),
            }
        })
    }
}

/// Each attempt handed to the inner service as a factory of that one
/// request.
struct FactorySender<S> {
    inner: S,
}

/// Set once a factory was built twice below the layer: a second retry
/// owner is warned about once per process.
static SECOND_OWNER_SEEN: AtomicBool = AtomicBool::new(false);

impl<S> Sender<OpenAIError> for FactorySender<S>
where
    S: Service<HttpRequestFactory, Response = reqwest::Response> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<OpenAIError>,
{
    fn send(&mut self, request: reqwest::Request) -> SendFuture<'_, OpenAIError> {
        let inner = self.inner.clone();
        let slot = Arc::new(Mutex::new(Some(request)));
        let builds = Arc::new(AtomicU32::new(0));
        let factory = HttpRequestFactory::new(move || {
            let slot = slot.clone();
            let n = builds.fetch_add(1, Ordering::Relaxed);
            async move {
                if n > 0 && !SECOND_OWNER_SEEN.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "a request was built twice below ratewise: a second retry owner \
                         (async-openai's OpenAIRetryLayer, tower::retry) is installed under \
                         OpenAiLayer; every attempt of it multiplies ratewise's"
                    );
                }
                let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
                // A body of bytes clones; a streaming body is given once.
                match slot.as_ref().and_then(reqwest::Request::try_clone) {
                    Some(r) => Ok(r),
                    None => slot.take().ok_or_else(|| {
                        OpenAIError::InvalidArgument(
                            "a streaming request body is sent once: not sent again".into(),
                        )
                    }),
                }
            }
        });
        Box::pin(async move { inner.oneshot(factory).await.map_err(Into::into) })
    }
}
