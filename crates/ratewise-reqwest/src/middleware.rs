//! [`RatewiseMiddleware`]: ratewise in a `reqwest_middleware` stack.

use ratewise_tower::{Policy, RetryLayer};
use reqwest_middleware::{Middleware, Next};

use crate::job::{self, Ended, SendFuture, Sender, Stops};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set in a call's extensions once the middleware has run it.
#[derive(Clone, Copy, Debug)]
struct Handled;

/// Set once a second retry owner above the middleware was warned about.
static SECOND_OWNER_SEEN: AtomicBool = AtomicBool::new(false);

/// A `reqwest_middleware::Middleware` that runs each call as one job of a
/// [`RetryLayer`]: admission before every send, every answer read whole
/// and decided, retries after the decided wait, the reservation settled
/// from the answer's usage when its body ends or is dropped.
///
/// The middlewares after it in the stack, and the client, make exactly
/// one send per attempt: put no retrying middleware (`reqwest-retry`)
/// after it or before it.
///
/// What the caller gets:
///
/// * the job ended on a provider's answer (a success, or an error answer
///   it did not retry: a spend cap, a `400`, the last `429`): `Ok` with
///   that answer unchanged, its URL kept, an `x-ratewise-action` header
///   ([`ACTION_HEADER`](crate::ACTION_HEADER)) and the [`Outcome`](crate::Outcome)
///   in its extensions;
/// * the last send failed in transport: the `reqwest_middleware::Error`
///   of the stack below, kinds intact (`is_timeout()`, `is_connect()`);
/// * the key is already stopped (a spend cap, billing, credentials): the
///   provider's answer that stopped it, kept by this middleware (clones
///   share it), at once, nothing sent — as `ratewise proxy` answers;
/// * no answer to give (a key stopped by an answer this middleware never
///   saw — another process's, through a shared store —, deferred or past
///   the deadline before a send, a body too large): `Err(reqwest_middleware::Error::Middleware)`
///   holding the `ratewise_tower::Error` with the decision
///   ([`ratewise_error`](crate::ratewise_error) finds it).
///
/// Request extensions the layer reads ([`JobId`](ratewise_tower::JobId),
/// [`Deadline`](ratewise_tower::Deadline), [`KeyLabel`](ratewise_tower::KeyLabel),
/// [`TokenEstimate`](ratewise_tower::TokenEstimate), [`Cancel`](ratewise_tower::Cancel),
/// [`Workload`](ratewise_tower::Workload)) are taken from the middleware's
/// extensions (`RequestBuilder::with_extension`). A call's
/// [`Workload`](ratewise_tower::Workload) names its priority level and
/// its flow (the tenant) in the key's admission queue: an interactive
/// call passes queued bulk ones, and tenants share the key's limits by
/// tokens, in proportion to their weights.
///
/// ```
/// use ratewise_reqwest::RatewiseMiddleware;
/// use ratewise_tower::{Policy, Workload};
/// use reqwest_middleware::ClientBuilder;
///
/// let client = ClientBuilder::new(reqwest::Client::new())
///     .with(RatewiseMiddleware::new(Policy::default()))
///     .build();
/// let request = client
///     .post("https://api.anthropic.com/v1/messages")
///     .with_extension(Workload::level("bulk").flow("tenant-7").weight(2));
/// # let _ = request;
/// ```
#[derive(Clone, Debug)]
pub struct RatewiseMiddleware {
    layer: RetryLayer,
    stops: Stops,
}

impl RatewiseMiddleware {
    /// A middleware with `policy` and every other setting at its default
    /// (see [`RetryLayer::new`]).
    ///
    /// With [`Policy::default()`] a call has no deadline and is held in
    /// line at most 60 s in total (admission waits, its turn behind other
    /// calls, retry delays); a longer wait is handed back at once as a
    /// deferral with its earliest time (see the
    /// [crate docs](crate#the-default-policy-as-a-caller-sees-it) for every
    /// outcome).
    ///
    /// ```
    /// use ratewise_reqwest::{Outcome, RatewiseMiddleware, ACTION_HEADER};
    /// use ratewise_tower::Policy;
    /// use reqwest_middleware::{ClientBuilder, Middleware, Next};
    /// use std::time::{Duration, SystemTime};
    ///
    /// // Stands in for the provider: asks for a two-minute pause.
    /// struct Busy;
    /// #[async_trait::async_trait]
    /// impl Middleware for Busy {
    ///     async fn handle(
    ///         &self,
    ///         _: reqwest::Request,
    ///         _: &mut http::Extensions,
    ///         _: Next<'_>,
    ///     ) -> reqwest_middleware::Result<reqwest::Response> {
    ///         let answer = http::Response::builder()
    ///             .status(429)
    ///             .header("retry-after", "120")
    ///             .body("{}")
    ///             .unwrap();
    ///         Ok(answer.into())
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let client = ClientBuilder::new(reqwest::Client::new())
    ///     .with(RatewiseMiddleware::new(Policy::default()))
    ///     .with(Busy)
    ///     .build();
    /// let response = client
    ///     .post("http://127.0.0.1:8080/v1/messages")
    ///     .body(r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[]}"#)
    ///     .send()
    ///     .await
    ///     .unwrap();
    /// // 120 s is past the 60 s in-line limit: the answer comes back at
    /// // once, deferred, with when to send the call again.
    /// assert_eq!(response.status(), 429);
    /// assert_eq!(response.headers()[ACTION_HEADER], "defer");
    /// let outcome = response.extensions().get::<Outcome>().unwrap();
    /// assert!(outcome.until().unwrap() >= SystemTime::now() + Duration::from_secs(119));
    /// # }
    /// ```
    pub fn new(policy: Policy) -> Self {
        Self::from_layer(RetryLayer::new(policy))
    }

    /// A middleware running its calls on `layer`: its limits, store
    /// (in memory or Redis), clock and journal, shared with every other
    /// user of the same layer.
    pub fn from_layer(layer: RetryLayer) -> Self {
        RatewiseMiddleware {
            layer,
            stops: Stops::default(),
        }
    }

    /// The layer (configuration, shared state, `resume`).
    pub fn layer(&self) -> &RetryLayer {
        &self.layer
    }

    /// Whether `key` (its label: a key's fingerprint as the layer files
    /// it, `fp-…`, or a group) is stopped, asked of the layer's store —
    /// the one owner of that fact, shared with every process on the same
    /// store — with the provider's answer that stopped it when this
    /// middleware (or a clone) received it. `None`: not stopped.
    pub async fn stop_evidence(&self, key: &str) -> Option<job::StopEvidence> {
        self.stops.evidence(&self.layer, key).await
    }
}

#[async_trait::async_trait]
impl Middleware for RatewiseMiddleware {
    async fn handle(
        &self,
        req: reqwest::Request,
        extensions: &mut http::Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let given = extensions.clone();
        // An outer retrier presents the same request (with the same
        // extensions) again: a second retry owner, named once.
        if extensions.get::<Handled>().is_some() {
            if !SECOND_OWNER_SEEN.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "a request came through RatewiseMiddleware twice: a second retry owner \
                     (reqwest-retry, a retry loop) is installed above it; its attempts \
                     multiply ratewise's"
                );
            }
        } else {
            extensions.insert(Handled);
        }
        let sender = NextSender { next, extensions };
        let ended = job::run(&self.layer, &self.stops, req, given, sender).await;
        match ended {
            Ok(response) => Ok(response),
            Err(Ended::Transport(e)) => Err(e),
            Err(Ended::Ratewise(e)) => Err(reqwest_middleware::Error::Middleware(e.into())),
        }
    }
}

/// The rest of the stack, one send per attempt, each with the call's
/// extensions.
struct NextSender<'a> {
    next: Next<'a>,
    extensions: &'a mut http::Extensions,
}

impl Sender<reqwest_middleware::Error> for NextSender<'_> {
    fn send(&mut self, request: reqwest::Request) -> SendFuture<'_, reqwest_middleware::Error> {
        self.next.clone().run(request, &mut *self.extensions)
    }
}
