//! One call, one job: a `reqwest::Request` driven through ratewise's
//! [`RetryService`] by a send function of the integration (the rest of a
//! reqwest-middleware stack, an async-openai tower service).
//!
//! `RetryService<S>` needs an inner service that is `'static`, while the
//! integrations' senders borrow (a middleware's `Next<'_>` and its
//! extensions). The bridge: the inner service given to the layer only
//! hands each attempt over a channel, with a reply slot; the call's future
//! is polled together with a loop that serves the channel through the
//! borrowed sender. The layer keeps the whole job — admission, the one
//! send at a time, the decision, the wait, the reservation's end — and the
//! sender makes exactly one send per attempt it is handed.

use bytes::Bytes;
use futures::future::{select, Either};
use http_body_util::{BodyExt, Full};
use ratewise_core::admit::Stop;
use ratewise_core::record::AttemptRecord;
use ratewise_core::{Action, ActionKind, Cause, Decision};
use ratewise_tower::{Cancel, RetryLayer, RetryService};
use reqwest::ResponseBuilderExt;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::SystemTime;
use tokio::sync::{mpsc, oneshot};
use tower::{Service, ServiceExt};

pub use ratewise_tower::ACTION_HEADER;

/// What ratewise decided for a call, in the extensions of the response it
/// ended on: a caller reads why a `429` or a `402` came back without
/// parsing it again.
///
/// ```
/// # fn demo(response: reqwest::Response) {
/// if let Some(outcome) = response.extensions().get::<ratewise_reqwest::Outcome>() {
///     println!("{} after {} send(s)", outcome.action().as_str(), outcome.attempts().len());
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Outcome {
    decision: Decision,
    attempts: Vec<AttemptRecord>,
}

impl Outcome {
    /// The action that ended the job (`done` for a success).
    pub fn action(&self) -> ActionKind {
        self.decision.action.kind()
    }

    /// The decision that ended the job, with its notes.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Every send's evidence record, in order: its length is the number of
    /// sends the job made.
    pub fn attempts(&self) -> &[AttemptRecord] {
        &self.attempts
    }

    /// For a `defer` (or a `stop_queue` that lifts by itself): the earliest
    /// time to send the call again.
    pub fn until(&self) -> Option<SystemTime> {
        self.decision.action.until()
    }
}

/// How a job ended without an answer to hand back.
pub(crate) enum Ended<E> {
    /// The last send failed in transport: the sender's own error, kinds
    /// intact (`is_timeout()`, `is_connect()`). What ratewise decided about
    /// it is in the log (`attempt` event) and in nothing else: the error
    /// type is the sender's.
    Transport(E),
    /// Nothing to hand back: stopped, deferred or past the deadline before
    /// a send, the body refused, the caller gone. The error carries the
    /// decision.
    Ratewise(ratewise_tower::Error),
}

/// One attempt handed to the sender, with where its result goes.
struct Attempt<E> {
    request: http::Request<Full<Bytes>>,
    reply: oneshot::Sender<Result<http::Response<reqwest::Body>, BridgeError<E>>>,
}

/// What the bridge tells the layer about a send with no answer.
pub(crate) enum BridgeError<E> {
    /// The sender failed: its error, shared so that the caller gets it
    /// back whole once the layer is done classifying it.
    Transport(Arc<E>),
    /// The sender is gone (the call ended): nothing was sent.
    Gone,
    /// A streaming body asked for a second time: it cannot be replayed,
    /// so nothing was sent.
    StreamSpent,
}

impl<E> std::fmt::Debug for BridgeError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BridgeError::Transport(_) => "BridgeError::Transport",
            BridgeError::Gone => "BridgeError::Gone",
            BridgeError::StreamSpent => "BridgeError::StreamSpent",
        })
    }
}

impl<E: std::error::Error> std::fmt::Display for BridgeError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BridgeError::Transport(e) => write!(f, "send failed: {e}"),
            BridgeError::Gone => f.write_str("the call ended: not sent"),
            BridgeError::StreamSpent => {
                f.write_str("a streaming request body is sent once: not sent again")
            }
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for BridgeError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // The sender's error is the source, so the layer tells "never
        // sent" from "sent, no answer" from its chain (hyper-util's
        // connect errors, io kinds) exactly as for any tower client.
        match self {
            BridgeError::Transport(e) => Some(&**e),
            _ => None,
        }
    }
}

/// The `'static` inner service the layer sends through: each attempt goes
/// over the channel to the loop that owns the real sender.
struct Bridge<E> {
    tx: mpsc::UnboundedSender<Attempt<E>>,
}

impl<E> Clone for Bridge<E> {
    fn clone(&self) -> Self {
        Bridge {
            tx: self.tx.clone(),
        }
    }
}

type BridgeFuture<E> =
    Pin<Box<dyn Future<Output = Result<http::Response<reqwest::Body>, BridgeError<E>>> + Send>>;

impl<E: Send + Sync + 'static> Service<http::Request<Full<Bytes>>> for Bridge<E> {
    type Response = http::Response<reqwest::Body>;
    type Error = BridgeError<E>;
    type Future = BridgeFuture<E>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Full<Bytes>>) -> Self::Future {
        let (reply, rx) = oneshot::channel();
        let sent = self.tx.send(Attempt { request, reply }).is_ok();
        Box::pin(async move {
            if !sent {
                return Err(BridgeError::Gone);
            }
            rx.await.unwrap_or(Err(BridgeError::Gone))
        })
    }
}

/// Makes exactly one send of a request: the rest of a middleware stack,
/// an async-openai service.
pub(crate) trait Sender<E> {
    /// One send.
    fn send(&mut self, request: reqwest::Request) -> SendFuture<'_, E>;
}

/// The future of one send.
pub(crate) type SendFuture<'a, E> =
    Pin<Box<dyn Future<Output = Result<reqwest::Response, E>> + Send + 'a>>;

/// What the attempts of one call share with the loop that sends them.
struct Shared<E> {
    /// A streaming body: taken by the first send, never replayed.
    stream: Mutex<Option<reqwest::Body>>,
    /// The last transport error, given back to the caller whole.
    last_error: Mutex<Option<Arc<E>>>,
    /// The URL of the last answer (after redirects).
    url: Mutex<Option<reqwest::Url>>,
}

/// Runs one call as one job of `layer`; `send` makes exactly one send of
/// the request it is given.
///
/// The request body is read without being consumed: a body of bytes is
/// buffered once (the layer's estimate reads `model`, the output cap and
/// the messages from it) and replayed byte for byte on every attempt; a
/// streaming body has nothing to read, is sent once, and the job is
/// marked so that no retry follows that send ([`Cancel`]: the send is
/// finished and accounted, its outcome reported).
pub(crate) async fn run<E>(
    layer: &RetryLayer,
    stops: &Stops,
    mut request: reqwest::Request,
    mut extensions: http::Extensions,
    mut sender: impl Sender<E>,
) -> Result<reqwest::Response, Ended<E>>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let body = request.body_mut().take();
    let (bytes, stream) = match body {
        None => (Bytes::new(), None),
        Some(b) => match b.as_bytes() {
            Some(s) => (Bytes::copy_from_slice(s), None),
            None => (Bytes::new(), Some(b)),
        },
    };
    let once = stream.is_some().then(|| {
        let once = extensions
            .get::<Cancel>()
            .map(Cancel::child)
            .unwrap_or_default();
        extensions.insert(once.clone());
        once
    });
    let request_url = request.url().clone();
    // The request without its body: every attempt is a copy of it with
    // the headers the layer gives it and the body replayed.
    let template = request;
    let mut head = http::Request::builder()
        .method(template.method().clone())
        .version(template.version());
    match request_url.as_str().parse::<http::Uri>() {
        Ok(uri) => head = head.uri(uri),
        Err(e) => {
            // A URL reqwest accepted and http does not: sent as it is,
            // unpaced, rather than refused here.
            tracing::warn!(error = %e, "a request URL http cannot parse: sent without ratewise");
            let mut request = template;
            *request.body_mut() = stream.or_else(|| Some(reqwest::Body::from(bytes)));
            return sender.send(request).await.map_err(Ended::Transport);
        }
    }
    let mut http_request = match head.body(Full::new(bytes)) {
        Ok(r) => r,
        Err(_) => unreachable!("method, URI and version come from a valid request"),
    };
    *http_request.headers_mut() = template.headers().clone();
    *http_request.extensions_mut() = extensions;
    // Stop evidence is filed under the key the layer paces the call
    // under (Gemini's `?key=` included), asked of the layer itself.
    let key = layer.key_of(&http_request);

    let shared = Arc::new(Shared {
        stream: Mutex::new(stream),
        last_error: Mutex::new(None),
        url: Mutex::new(None),
    });
    let (tx, mut rx) = mpsc::unbounded_channel::<Attempt<E>>();
    let service = RetryService::new(Bridge { tx }, layer.clone());
    let call = service.oneshot(http_request);
    let serve = async {
        while let Some(attempt) = rx.recv().await {
            let Attempt { request, reply } = attempt;
            let outgoing = match attempt_request(&template, request, &shared, once.as_ref()).await {
                Ok(r) => r,
                Err(e) => {
                    let _ = reply.send(Err(e));
                    continue;
                }
            };
            let mut reply = reply;
            // A send the layer stopped waiting for (its send timeout) is
            // dropped here, not left running beside the next attempt.
            let sent = {
                let sending = sender.send(outgoing);
                let closed = std::pin::pin!(reply.closed());
                match select(sending, closed).await {
                    Either::Left((result, _)) => Some(result),
                    Either::Right(_) => None,
                }
            };
            let Some(result) = sent else { continue };
            let answer = match result {
                Ok(response) => {
                    let url = response.url().clone();
                    *lock(&shared.url) = Some(url.clone());
                    let response: http::Response<reqwest::Body> = response.into();
                    Ok(with_url(response, url))
                }
                Err(e) => {
                    let e = Arc::new(e);
                    *lock(&shared.last_error) = Some(e.clone());
                    Err(BridgeError::Transport(e))
                }
            };
            let _ = reply.send(answer);
        }
    };
    let result = {
        let call = std::pin::pin!(call);
        let serve = std::pin::pin!(serve);
        match select(call, serve).await {
            Either::Left((result, _)) => result,
            // The loop ends only when every sender of the channel is
            // gone, that is with the call: finish it.
            Either::Right(((), call)) => call.await,
        }
    };
    match result {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            let attempts = parts
                .extensions
                .remove::<ratewise_tower::Attempts>()
                .map(|a| a.0)
                .unwrap_or_default();
            let outcome = Outcome {
                decision: Decision::new(Action::Done),
                attempts,
            };
            parts.headers.insert(
                ACTION_HEADER,
                http::HeaderValue::from_static(ActionKind::Done.as_str()),
            );
            parts.extensions.insert(outcome);
            // The metered body settles the job's usage when it ends or is
            // dropped; reqwest's body wraps it, so reading the response
            // (text, json, chunks, a stream) reads through it.
            let body = reqwest::Body::wrap(SyncBody(Mutex::new(body)));
            Ok(reqwest::Response::from(http::Response::from_parts(
                parts, body,
            )))
        }
        Err(error) => {
            let url = lock(&shared.url).clone().unwrap_or(request_url);
            if let Some(response) = answered(&error, url.clone()) {
                if stopped_by_its_answer(&error) {
                    stops.keep(&key, &error, url);
                }
                return Ok(response);
            }
            // Found the key stopped before a send: the answer that
            // stopped it, as the proxy gives it, so the caller's client
            // raises the provider's own error again.
            if error.is_stop_queue() && !error.was_sent() {
                if let Some(response) = stops.answer(layer, &key, &error).await {
                    return Ok(response);
                }
            }
            let transport = std::error::Error::source(&error).is_some_and(|s| {
                s.downcast_ref::<BridgeError<E>>()
                    .is_some_and(|b| matches!(b, BridgeError::Transport(_)))
            });
            if transport {
                let last = lock(&shared.last_error).take();
                // The layer's error holds the only other handle (its
                // source): once it is gone the caller gets the sender's
                // error itself.
                if let Some(last) = last.filter(|l| Arc::strong_count(l) == 2) {
                    tracing::warn!(
                        job_id = error.job_id(),
                        action = error.action().map(|a| a.as_str()),
                        "job ended after a send with no answer: the transport error is returned"
                    );
                    drop(error);
                    if let Ok(e) = Arc::try_unwrap(last) {
                        return Err(Ended::Transport(e));
                    }
                    unreachable!("the layer's error held the only other handle");
                }
            }
            Err(Ended::Ratewise(error))
        }
    }
}

/// The `reqwest::Request` of one attempt: the template's method, version
/// and timeout, the layer's URL (the template's, or a pool member's) and
/// headers (the caller's plus
/// `x-ratewise-job` / `x-ratewise-attempt`), and the body: the bytes the
/// layer replays, or the streaming body, once.
async fn attempt_request<E>(
    template: &reqwest::Request,
    request: http::Request<Full<Bytes>>,
    shared: &Shared<E>,
    once: Option<&Cancel>,
) -> Result<reqwest::Request, BridgeError<E>> {
    let Some(mut outgoing) = template.try_clone() else {
        unreachable!("a request without a body clones")
    };
    let (parts, body) = request.into_parts();
    *outgoing.headers_mut() = parts.headers;
    // A pooled layer sends each attempt to its member's URL.
    let uri = parts.uri.to_string();
    if uri != outgoing.url().as_str() {
        if let Ok(url) = reqwest::Url::parse(&uri) {
            *outgoing.url_mut() = url;
        }
    }
    match once {
        Some(once) => {
            let Some(stream) = lock(&shared.stream).take() else {
                return Err(BridgeError::StreamSpent);
            };
            // Handed to the transport now: the send is finished and
            // accounted, and no retry follows it.
            once.cancel();
            *outgoing.body_mut() = Some(stream);
        }
        None => {
            let bytes = match body.collect().await {
                Ok(b) => b.to_bytes(),
                Err(never) => match never {},
            };
            *outgoing.body_mut() = Some(reqwest::Body::from(bytes));
        }
    }
    Ok(outgoing)
}

/// The answer a job ended on, when it ended on one: the provider's status,
/// headers and body as they came (the body read up to the layer's bound),
/// the URL, `x-ratewise-action` and the [`Outcome`].
fn answered(error: &ratewise_tower::Error, url: reqwest::Url) -> Option<reqwest::Response> {
    let status = error.status()?;
    let decision = error.decision()?.clone();
    let mut builder = http::Response::builder().status(status).url(url);
    if let Some(headers) = error.headers() {
        for (name, value) in headers {
            builder = builder.header(name, value);
        }
    }
    let action = decision.action.kind().as_str();
    let mut response = builder
        .body(reqwest::Body::from(
            error.body().cloned().unwrap_or_default(),
        ))
        .ok()?;
    response
        .headers_mut()
        .insert(ACTION_HEADER, http::HeaderValue::from_static(action));
    response.extensions_mut().insert(Outcome {
        decision,
        attempts: error.attempts().to_vec(),
    });
    Some(reqwest::Response::from(response))
}

/// The provider's answers that stopped a key, by key label: replayed to
/// the calls that find the key stopped. Clones share them.
///
/// Evidence beside the store's record, never a second flag: whether the
/// key is stopped, why and until when is the layer's store's word
/// ([`stop_in_store`]); a kept answer is given only for the stop the
/// store holds (same cause), and has no expiry of its own.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stops(Arc<Mutex<HashMap<String, Stored>>>);

/// One stopping answer, as it came.
#[derive(Debug, Clone)]
struct Stored {
    /// The cause the layer classified it with.
    cause: Cause,
    status: http::StatusCode,
    headers: http::HeaderMap,
    body: Bytes,
    url: reqwest::Url,
}

/// A key's stop, as the layer's store holds it — its typed cause and end —
/// with the provider's answer that stopped it when this middleware (or a
/// clone) received that answer. Another process's stop, through a shared
/// store, has no answer here.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StopEvidence {
    /// Why, as the store says (the core's cause).
    pub cause: Cause,
    /// When it lifts by itself, as the store says (`None`: when resumed).
    pub until: Option<SystemTime>,
    /// The provider's status of the answer that stopped it, when kept.
    pub status: Option<http::StatusCode>,
    /// That answer's body, when kept.
    pub body: Option<Bytes>,
}

/// `key`'s stop in the layer's store. A key's stop is the key's, not a
/// model class's: any scope of the key shows it, so the scope of no
/// model in particular is asked.
pub(crate) async fn stop_in_store(layer: &RetryLayer, key: &str) -> Option<Stop> {
    let state = layer.state();
    let target = state.target(key, "").await;
    state.snapshot(target.scope, layer.now()).await?.stopped
}

impl Stops {
    fn keep(&self, key: &str, error: &ratewise_tower::Error, url: reqwest::Url) {
        let (Some(status), Some(headers)) = (error.status(), error.headers()) else {
            return;
        };
        let Some(cause) = error.classification().map(|c| c.cause) else {
            return;
        };
        let stored = Stored {
            cause,
            status,
            headers: headers.clone(),
            body: error.body().cloned().unwrap_or_default(),
            url,
        };
        lock(&self.0).insert(key.to_owned(), stored);
    }

    fn stored(&self, key: &str) -> Option<Stored> {
        lock(&self.0).get(key).cloned()
    }

    /// `key`'s stop as the layer's store holds it, with the answer kept
    /// for it ([`StopEvidence`]); `None` when the store says the key is
    /// not stopped.
    pub(crate) async fn evidence(&self, layer: &RetryLayer, key: &str) -> Option<StopEvidence> {
        let stop = stop_in_store(layer, key).await?;
        let kept = self.stored(key).filter(|s| s.cause == stop.cause);
        Some(StopEvidence {
            cause: stop.cause,
            until: stop.until,
            status: kept.as_ref().map(|s| s.status),
            body: kept.map(|s| s.body),
        })
    }

    /// The kept answer of `key`'s stop, when the store still holds that
    /// stop (same cause), with this call's decision (`stop_queue`, no
    /// attempt).
    async fn answer(
        &self,
        layer: &RetryLayer,
        key: &str,
        error: &ratewise_tower::Error,
    ) -> Option<reqwest::Response> {
        let stored = self.stored(key)?;
        let stop = stop_in_store(layer, key).await?;
        if stop.cause != stored.cause {
            return None;
        }
        let decision = error.decision()?.clone();
        let mut response = http::Response::builder()
            .status(stored.status)
            .url(stored.url)
            .body(reqwest::Body::from(stored.body))
            .ok()?;
        *response.headers_mut() = stored.headers;
        // When it lifts is the store's word, not the kept answer's (which
        // may be an hour old, or another stop's of the same cause).
        ratewise_tower::set_retry_after(response.headers_mut(), stop.until, layer.now().wall);
        response.headers_mut().insert(
            ACTION_HEADER,
            http::HeaderValue::from_static(decision.action.kind().as_str()),
        );
        response.extensions_mut().insert(Outcome {
            decision,
            attempts: Vec::new(),
        });
        Some(reqwest::Response::from(response))
    }
}

/// Whether the job ended on its own last answer's stop (not at an
/// admission that found the key stopped, carrying an earlier answer).
fn stopped_by_its_answer(error: &ratewise_tower::Error) -> bool {
    error.is_stop_queue()
        && error.status().is_some()
        && error
            .attempts()
            .last()
            .is_some_and(|r| r.action == ActionKind::StopQueue)
}

/// Sets the response URL reqwest reads back when an `http::Response` is
/// turned into a `reqwest::Response` (lost in the round trip otherwise).
fn with_url<B>(response: http::Response<B>, url: reqwest::Url) -> http::Response<B> {
    let (mut parts, body) = response.into_parts();
    if let Ok(carrier) = http::Response::builder().url(url).body(()) {
        parts.extensions.extend(carrier.into_parts().0.extensions);
    }
    http::Response::from_parts(parts, body)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A body made `Sync` for `reqwest::Body::wrap`: polled through `&mut`,
/// so the mutex is never locked.
struct SyncBody<B>(Mutex<B>);

impl<B> http_body::Body for SyncBody<B>
where
    B: http_body::Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let inner = self
            .get_mut()
            .0
            .get_mut()
            .unwrap_or_else(|e| e.into_inner());
        Pin::new(inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        lock(&self.0).is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        lock(&self.0).size_hint()
    }
}
