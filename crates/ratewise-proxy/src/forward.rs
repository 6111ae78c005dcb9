//! The callers' side: every request is one job on the layer, forwarded to
//! its upstream, run inside its caller's handler.
//!
//! A caller that goes away costs the others nothing:
//!
//! * before its request was handed upstream, the job is dropped — the
//!   machine releases its reservation;
//! * after, the job moves to a task of its own, finishes that send (and
//!   makes no other), bounded by its deadline, and its body is read to the
//!   end, so its usage settles exactly and is recorded. The same holds for
//!   a caller that stops reading a body.

use crate::answer;
use crate::keys::caller_key;
use crate::upstream::{self, SentFlag, UpBody};
use crate::App;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::{StatusCode, Uri};
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use ratewise_core::Provider;
use ratewise_tower::{Deadline, JobId, KeyLabel};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::ServiceExt;

/// The header a caller sets to give its job a deadline, in milliseconds
/// from now.
pub const DEADLINE_HEADER: &str = "x-ratewise-deadline-ms";

/// How long a job may outlive its deadline: its last send's answer and
/// body, read in the background when its caller has left.
pub const JOB_SLACK: Duration = Duration::from_secs(60);

/// The longest deadline a caller may ask for.
pub const MAX_DEADLINE: Duration = Duration::from_secs(3600);

/// The key label of requests without a key.
pub const ANONYMOUS: &str = "anonymous";

/// Forwards one request as one job.
pub async fn forward(State(app): State<Arc<App>>, req: Request) -> Response {
    let n = app.metrics.jobs.fetch_add(1, Ordering::Relaxed) + 1;
    let (mut parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let Some(ui) = upstream::choose(&app.config.upstreams, &parts.headers, &path) else {
        return answer::shaped(
            Provider::Anthropic,
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "ratewise: x-ratewise-upstream names no configured upstream",
        );
    };
    let up = &app.config.upstreams[ui];
    let provider = up.provider.unwrap_or_else(|| guess_provider(&path));

    // The key: its fingerprint names the shared state; the key itself
    // stays in the request, for the upstream alone.
    let key = match caller_key(&parts.headers, provider) {
        Some(k) => app.keys.note(k),
        None => ANONYMOUS.to_owned(),
    };
    parts.extensions.insert(KeyLabel::new(&key));
    // Job ids unique across restarts, so the journal's attempts never
    // collide with an earlier run's.
    parts
        .extensions
        .insert(JobId::new(format!("{}-{n}", app.boot)));
    let mut deadline = app
        .config
        .layer
        .policy
        .default_deadline
        .unwrap_or(crate::config::DEFAULT_DEADLINE);
    if let Some(v) = parts.headers.remove(DEADLINE_HEADER) {
        match v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()) {
            Some(ms) if ms > 0 => {
                deadline = Duration::from_millis(ms).min(MAX_DEADLINE);
                parts.extensions.insert(Deadline(deadline));
            }
            _ => return answer::shaped(
                provider,
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "ratewise: x-ratewise-deadline-ms must be a positive whole number of milliseconds",
            ),
        }
    }
    parts.headers.remove("x-ratewise-upstream");
    parts.headers.remove(http::header::HOST);
    strip_hop_by_hop(&mut parts.headers);
    parts.uri = match format!("{}{path}", up.url).parse::<Uri>() {
        Ok(u) => u,
        Err(_) => {
            return answer::shaped(
                provider,
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "ratewise: the request path is not valid",
            )
        }
    };
    // The body, read whole before anything is reserved: bounded in size,
    // and in time, so a caller that trickles it ties up nothing but its
    // own connection.
    let limit = app.config.layer.max_request_body;
    let read = http_body_util::Limited::new(body, limit).collect();
    let bytes = match tokio::time::timeout(app.config.body_timeout, read).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return answer::shaped(
            provider,
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            "ratewise: the request body is larger than the proxy accepts (bounds.max_request_body)",
        ),
        Ok(Err(_)) => {
            return answer::shaped(
                provider,
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "ratewise: the request body could not be read",
            )
        }
        Err(_) => {
            return answer::shaped(
                provider,
                StatusCode::REQUEST_TIMEOUT,
                "timeout_error",
                "ratewise: the request body did not arrive in time",
            )
        }
    };
    let sent = SentFlag::waiting(app.metrics.clone());
    parts.extensions.insert(sent.clone());
    let body: UpBody = http_body_util::Full::new(bytes)
        .map_err(|never: std::convert::Infallible| -> axum::Error { match never {} })
        .boxed_unsync();
    let req = http::Request::from_parts(parts, body);

    let svc = app.services[ui].clone();
    // The job runs inside this handler; only when its caller goes away
    // after a send does it move to a task of its own (see `Job`).
    let mut job = Job {
        future: Some(Box::pin(svc.oneshot(req))),
        gauges: Some((
            crate::upstream::NoLongerWaiting(sent.clone()),
            crate::metrics::InFlight::enter(app.metrics.clone()),
        )),
        sent,
        metrics: app.metrics.clone(),
        bound: deadline.saturating_add(JOB_SLACK),
    };
    let result = match tokio::time::timeout(job.bound, job.run()).await {
        Ok(r) => Ok(r),
        Err(_) => Err(()),
    };
    job.finished();
    match result {
        Ok(Ok(mut resp)) => {
            strip_hop_by_hop(resp.headers_mut());
            resp.map(|b| Body::new(ReadToEnd::new(b, deadline)))
        }
        Ok(Err(e)) => {
            if e.is_stop_queue() {
                // Journaled and logged once, before the answer is kept.
                app.stopped(&key, &e);
            }
            if e.is_hold_unknown() {
                app.unknown_outcome(&e);
            }
            answer::for_error(&e, provider, &key, &app.stops)
        }
        // The job outlived its deadline and the slack after it.
        Err(()) => answer::shaped(
            provider,
            StatusCode::GATEWAY_TIMEOUT,
            "timeout_error",
            "ratewise: the job outlived its deadline and was cut",
        ),
    }
}

/// Removes the hop-by-hop headers (RFC 9110 §7.6.1), and those the
/// `Connection` header names: they describe one connection, not the
/// message, and are not forwarded.
fn strip_hop_by_hop(h: &mut http::HeaderMap) {
    let named: Vec<http::HeaderName> = h
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| http::HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ] {
        h.remove(n);
    }
}

/// Which provider's shape a caller of `path` expects, when the upstream
/// does not say: OpenAI's paths, else Anthropic's.
fn guess_provider(path: &str) -> Provider {
    let p = path.split('?').next().unwrap_or(path);
    if p.starts_with("/v1/chat/")
        || p.starts_with("/v1/responses")
        || p.starts_with("/v1/embeddings")
        || p.starts_with("/v1/completions")
    {
        Provider::Openai
    } else {
        Provider::Anthropic
    }
}

type JobFuture = std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = Result<
                    http::Response<ratewise_tower::MeteredBody<hyper::body::Incoming>>,
                    ratewise_tower::Error,
                >,
            > + Send,
    >,
>;

/// One job, polled by its caller's handler. Dropped before it finished
/// (the caller went away): a job not yet sent is dropped with it (the
/// machine releases its reservation); a sent one moves to a task of its
/// own, finishes its send (making no other: see [`SentFlag::cancel`]) and
/// reads its answer to the end, so its usage settles — bounded by the
/// job's deadline and slack. The gauges end with the job, however it ends.
struct Job {
    future: Option<JobFuture>,
    gauges: Option<(crate::upstream::NoLongerWaiting, crate::metrics::InFlight)>,
    sent: SentFlag,
    metrics: Arc<crate::metrics::Metrics>,
    bound: Duration,
}

impl Job {
    async fn run(
        &mut self,
    ) -> Result<
        http::Response<ratewise_tower::MeteredBody<hyper::body::Incoming>>,
        ratewise_tower::Error,
    > {
        match self.future.as_mut() {
            Some(f) => f.as_mut().await,
            None => std::future::pending().await,
        }
    }

    /// The job answered (or was cut): nothing runs on.
    fn finished(&mut self) {
        self.future = None;
        self.gauges = None;
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let Some(future) = self.future.take() else {
            return;
        };
        self.metrics.abandoned.fetch_add(1, Ordering::Relaxed);
        // One atomic step decides between "never sent" (dropped here:
        // released) and "sent" (finished in the background).
        if self.sent.cancel() {
            return;
        }
        let gauges = self.gauges.take();
        let bound = self.bound;
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _gauges = gauges;
                let _ = tokio::time::timeout(bound, async move {
                    if let Ok(resp) = future.await {
                        drain(resp.into_body()).await;
                    }
                })
                .await;
            });
        }
    }
}

async fn drain<B: http_body::Body + Unpin>(mut body: B) {
    while let Some(frame) = body.frame().await {
        if frame.is_err() {
            break;
        }
    }
}

/// A response body that, dropped before its end (the caller stopped
/// reading), is read to its end in the background, bounded by the job's
/// deadline: the metered body then settles the usage the provider reports.
struct ReadToEnd<B: http_body::Body + Send + Unpin + 'static> {
    inner: Option<B>,
    ended: bool,
    deadline: Duration,
}

impl<B: http_body::Body + Send + Unpin + 'static> ReadToEnd<B> {
    fn new(inner: B, deadline: Duration) -> Self {
        ReadToEnd {
            inner: Some(inner),
            ended: false,
            deadline,
        }
    }
}

impl<B> http_body::Body for ReadToEnd<B>
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.ended = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map(|b| b.size_hint())
            .unwrap_or_default()
    }
}

impl<B: http_body::Body + Send + Unpin + 'static> Drop for ReadToEnd<B> {
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        if self.ended || inner.is_end_stream() {
            return;
        }
        let deadline = self.deadline;
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = tokio::time::timeout(deadline, drain(inner)).await;
            });
        }
    }
}
