//! The callers' side: every request is one job on the layer, forwarded to
//! its upstream, run inside its caller's handler.
//!
//! A job waits as long as its caller will: its first-byte deadline is the
//! caller's own (`x-ratewise-deadline-ms`, else the timeout the official
//! SDKs send, else `policy.default_deadline_ms`; at most
//! `policy.max_deadline_ms`: see [`caller_deadline`]). Every answer, the
//! upstream's or the proxy's own, says the deadline its job was given in
//! `x-ratewise-deadline-ms` (milliseconds).
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
use crate::drain::Phase;
use crate::keys::caller_key;
use crate::route::PathApi;
use crate::upstream::{self, UpBody, WireWatch};
use crate::App;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::{StatusCode, Uri};
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use ratewise_core::Provider;
use ratewise_tower::{Deadline, JobId, KeyLabel, Model};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::ServiceExt;

/// The header a caller sets to give its job a deadline, in milliseconds
/// from now. It is not forwarded. Every answer the proxy gives carries it
/// too: the deadline the job was given, whatever its source.
pub const DEADLINE_HEADER: &str = "x-ratewise-deadline-ms";

/// [`DEADLINE_HEADER`] as a header name (set on every answer: a name
/// given as text is parsed, and copied, each time).
const DEADLINE_NAME: http::HeaderName = http::HeaderName::from_static(DEADLINE_HEADER);

/// The read timeout the official Python SDKs send on every request, in
/// seconds (forwarded as it is).
pub const STAINLESS_READ_TIMEOUT: &str = "x-stainless-read-timeout";

/// The timeout the official TypeScript SDKs (and anthropic-python on some
/// calls) send, in seconds; may be the literal `NOT_GIVEN` (forwarded as it
/// is).
pub const STAINLESS_TIMEOUT: &str = "x-stainless-timeout";

/// How long a job may outlive its deadline: its last send's answer and
/// body, read in the background when its caller has left.
pub const JOB_SLACK: Duration = Duration::from_secs(60);

/// The longest deadline a caller may ask for, unless the configuration
/// says otherwise (`policy.max_deadline_ms`).
pub const MAX_DEADLINE: Duration = crate::config::MAX_DEADLINE;

/// The longest header value read as a timeout: anything longer is junk.
const MAX_TIMEOUT_LEN: usize = 32;

/// Where a job's first-byte deadline came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeadlineSource {
    /// `x-ratewise-deadline-ms`, set by the caller for ratewise.
    Ratewise,
    /// `x-stainless-read-timeout`, the SDK's read timeout.
    StainlessReadTimeout,
    /// `x-stainless-timeout`, the SDK's timeout.
    StainlessTimeout,
    /// None of them (or only junk): `policy.default_deadline_ms`.
    Default,
}

impl DeadlineSource {
    /// The header it was read from, or `default`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadlineSource::Ratewise => DEADLINE_HEADER,
            DeadlineSource::StainlessReadTimeout => STAINLESS_READ_TIMEOUT,
            DeadlineSource::StainlessTimeout => STAINLESS_TIMEOUT,
            DeadlineSource::Default => "default",
        }
    }
}

/// The sources read, in order: header, and how many of its units make a
/// second.
// Names, not text: a lookup by text parses the name first.
const SOURCES: [(DeadlineSource, http::HeaderName, f64); 3] = [
    (DeadlineSource::Ratewise, DEADLINE_NAME, 1000.0),
    (
        DeadlineSource::StainlessReadTimeout,
        http::HeaderName::from_static(STAINLESS_READ_TIMEOUT),
        1.0,
    ),
    (
        DeadlineSource::StainlessTimeout,
        http::HeaderName::from_static(STAINLESS_TIMEOUT),
        1.0,
    ),
];

/// A job's first-byte deadline: as long as its caller will wait for the
/// answer to start, from the first source that holds a usable value —
///
/// 1. `x-ratewise-deadline-ms` (milliseconds);
/// 2. `x-stainless-read-timeout` (seconds, maybe fractional: `600`,
///    `600.0`);
/// 3. `x-stainless-timeout` (seconds);
/// 4. `default` —
///
/// capped at `max`. A value that is not a number, is ≤ 0, NaN or infinite,
/// is `NOT_GIVEN`, or is longer than 32 bytes is junk: the next source is
/// read. Pure: no clock, no logging (see [`ignored_deadline_headers`]).
///
/// What the official SDKs send (captured by
/// `tests/conformance/sdk_timeouts.py`, which asserts the deadline the
/// proxy derives; `—`: not sent):
///
/// | SDK (version tested) | call | timeout | `x-stainless-read-timeout` | `x-stainless-timeout` | deadline |
/// |---|---|---|---|---|---|
/// | anthropic-python 2.15.0 | `messages.create` | default (600 s) | `600` | `600` | 600 000 ms |
/// | anthropic-python 2.15.0 | `messages.create` | client `timeout=30` | `30` | `NOT_GIVEN` | 30 000 ms |
/// | anthropic-python 2.15.0 | `messages.create` | call `timeout=30` | `30` | `30` | 30 000 ms |
/// | anthropic-python 2.15.0 | `messages.create` | client `timeout=httpx.Timeout(100, read=50)` | `50` | `NOT_GIVEN` | 50 000 ms |
/// | anthropic-python 2.15.0 | `messages.create` | client `timeout=None` | — | `NOT_GIVEN` | default |
/// | anthropic-python 2.15.0 | `messages.create` | call `timeout=None` | — | `None` | default |
/// | openai-python 3.57.0 | `chat.completions.create` | default (600 s) | `600` | — | 600 000 ms |
/// | openai-python 3.57.0 | `chat.completions.create` | client `timeout=30` | `30` | — | 30 000 ms |
/// | openai-python 3.57.0 | `chat.completions.create` | call `timeout=30` | `30` | — | 30 000 ms |
/// | openai-python 3.57.0 | `chat.completions.create` | client `timeout=None` | — | — | default |
/// | openai-python 3.57.0 | `chat.completions.create` | call `timeout=None` | — | — | default |
///
/// The `httpx.Timeout` row was captured by hand with the same recording
/// upstream; the others are asserted by the script on every run.
///
/// The TypeScript SDKs send a numeric `x-stainless-timeout` in seconds
/// (as issue 23 reports; not captured by the test, which drives the Python
/// SDKs).
///
/// The `x-stainless-*` headers belong to the SDK: they go upstream as they
/// came. Only `x-ratewise-deadline-ms` is removed.
pub fn caller_deadline(
    headers: &http::HeaderMap,
    default: Duration,
    max: Duration,
) -> (Duration, DeadlineSource) {
    for (source, name, per_second) in SOURCES {
        if let Some(Ok(d)) = headers
            .get(&name)
            .map(|v| timeout_value(v, per_second, max))
        {
            return (d, source);
        }
    }
    (default.min(max), DeadlineSource::Default)
}

/// The timeout headers present but not usable (junk), each with why, for
/// a debug line.
pub fn ignored_deadline_headers(headers: &http::HeaderMap) -> Vec<(&'static str, &'static str)> {
    SOURCES
        .iter()
        .filter_map(|(source, name, per_second)| {
            let v = headers.get(name)?;
            timeout_value(v, *per_second, MAX_DEADLINE)
                .err()
                .map(|why| (source.as_str(), why.as_str()))
        })
        .collect()
}

/// Why a timeout header's value was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Junk {
    /// Longer than [`MAX_TIMEOUT_LEN`], or not text.
    Unreadable,
    /// Not a number (`NOT_GIVEN`, `soon`), NaN or infinite.
    NotANumber,
    /// Zero or negative.
    NotPositive,
}

impl Junk {
    fn as_str(self) -> &'static str {
        match self {
            Junk::Unreadable => "unreadable or too long",
            Junk::NotANumber => "not a finite number",
            Junk::NotPositive => "not more than 0",
        }
    }
}

/// One header's value as a duration of `1 / per_second` units, capped at
/// `max`.
fn timeout_value(v: &http::HeaderValue, per_second: f64, max: Duration) -> Result<Duration, Junk> {
    let text = v.to_str().map_err(|_| Junk::Unreadable)?.trim();
    if text.len() > MAX_TIMEOUT_LEN {
        return Err(Junk::Unreadable);
    }
    let n: f64 = text.parse().map_err(|_| Junk::NotANumber)?;
    if !n.is_finite() {
        return Err(Junk::NotANumber);
    }
    if n <= 0.0 {
        return Err(Junk::NotPositive);
    }
    let secs = n / per_second;
    if secs >= max.as_secs_f64() {
        return Ok(max);
    }
    // Below the cap, so representable; never shorter than a millisecond.
    Ok(Duration::try_from_secs_f64(secs)
        .unwrap_or(max)
        .max(Duration::from_millis(1))
        .min(max))
}

/// The key label of requests without a key.
pub const ANONYMOUS: &str = "anonymous";

/// Forwards one request as one job. Every answer says the job's deadline
/// in `x-ratewise-deadline-ms`.
pub async fn forward(State(app): State<Arc<App>>, req: Request) -> Response {
    let default = app
        .config
        .layer
        .policy
        .default_deadline
        .unwrap_or(crate::config::DEFAULT_DEADLINE);
    let (deadline, source) = caller_deadline(req.headers(), default, app.config.max_deadline);
    if tracing::enabled!(tracing::Level::DEBUG) {
        let ignored = ignored_deadline_headers(req.headers());
        if !ignored.is_empty() {
            tracing::debug!(
                ?ignored,
                "timeout headers that are not a positive number: ignored"
            );
        }
        tracing::debug!(
            deadline_ms = deadline.as_millis() as u64,
            source = source.as_str(),
            "job deadline"
        );
    }
    // Job ids unique across restarts, so the journal's attempts never
    // collide with an earlier run's — or the caller's own (see `jobs`).
    let n = app.metrics.jobs.fetch_add(1, Ordering::Relaxed) + 1;
    let entry = app.jobs.begin(
        crate::jobs::caller_job_id(req.headers()),
        format!("{}-{n}", app.boot),
    );
    // Boxed: the job's future is kilobytes, and this handler's future is
    // moved by value through the router's layers.
    let mut resp = Box::pin(job(app.clone(), req, deadline, &entry.id)).await;
    let h = resp.headers_mut();
    h.insert(
        DEADLINE_NAME,
        http::HeaderValue::from(deadline.as_millis() as u64),
    );
    if let Ok(v) = http::HeaderValue::from_str(&entry.id) {
        h.insert(crate::jobs::JOB_HEADER, v);
    }
    if app.drain.is_draining() {
        // The connection ends with this answer: the next request goes to
        // the proxy that replaces this one.
        h.insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    resp
}

/// The answer to a request the proxy will not send because it is shutting
/// down: a 503 in the provider's shape, with `retry-after` (the grace, at
/// least a second) and `connection: close`. Nothing was sent.
pub fn shutting_down(provider: Provider, grace: Duration) -> Response {
    let mut r = answer::shaped(
        provider,
        StatusCode::SERVICE_UNAVAILABLE,
        "api_error",
        "ratewise: the proxy is shutting down; the request was not sent, retry it",
    );
    r.headers_mut().insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from(grace.as_secs().max(1)),
    );
    r.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    r
}

/// The answer of a job whose send was still on the wire at the end of the
/// shutdown's grace: a 504 with `x-ratewise-action: hold_unknown` — it may
/// have been processed (and billed); do not resend it blindly.
fn cut_at_grace(provider: Provider) -> Response {
    let mut r = answer::shaped(
        provider,
        StatusCode::GATEWAY_TIMEOUT,
        "timeout_error",
        "ratewise: the proxy shut down while this request was with the provider; its outcome is unknown",
    );
    r.headers_mut().insert(
        answer::ACTION_HEADER,
        http::HeaderValue::from_static("hold_unknown"),
    );
    r
}

/// Where a job goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// The upstream of this index.
    Upstream(usize),
    /// The pool of this index.
    Pool(usize),
}

/// Why a request has nowhere to go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nowhere {
    /// No upstream, and its key selects no pool.
    NoPool,
    /// `x-ratewise-upstream` names no upstream.
    NoSuchUpstream,
}

impl Nowhere {
    /// The answer, in the shape of the caller's API.
    fn answer(self, api: &PathApi) -> Response {
        match self {
            Nowhere::NoPool => answer::shaped(
                match api {
                    PathApi::OpenaiCompatible => Provider::Openai,
                    _ => api.provider(),
                },
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "ratewise: this API key selects no pool of this proxy, and it has no upstream for other keys: send a pool's caller_key",
            ),
            Nowhere::NoSuchUpstream => answer::shaped(
                api.provider(),
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "ratewise: x-ratewise-upstream names no configured upstream",
            ),
        }
    }
}

/// Where a request goes: the pool whose `caller_key` its caller presents
/// (read as the path's provider reads it), else the upstream
/// [`upstream::choose`] picks. With no upstream, a key that selects no
/// pool has nowhere to go (a 401 in the provider's shape); nor has an
/// `x-ratewise-upstream` that names none (a 400).
fn via(
    app: &App,
    headers: &http::HeaderMap,
    path: &str,
    query: Option<&str>,
    api: &PathApi,
) -> Result<Via, Nowhere> {
    if !app.pools.is_empty() {
        let pool = caller_key(headers, query, Some(api.provider()))
            .and_then(|k| crate::pools::find(&app.pools, &crate::keys::fingerprint(&k)));
        if let Some(pi) = pool {
            return Ok(Via::Pool(pi));
        }
        if app.config.upstreams.is_empty() {
            return Err(Nowhere::NoPool);
        }
    }
    upstream::choose(&app.config.upstreams, headers, path)
        .map(Via::Upstream)
        .ok_or(Nowhere::NoSuchUpstream)
}

/// One request as one job with its deadline and id, in its phases: where
/// it goes ([`Route::of`]), its head made ready for upstream
/// ([`prepare_head`]), its body read whole ([`read_request_body`]), the
/// request built ([`ready_request`]), run ([`run_job`]), and answered
/// ([`answer_of`]). Each phase that turns the request away returns the
/// answer in the caller's API's shape.
async fn job(app: Arc<App>, req: Request, deadline: Duration, job_id: &str) -> Response {
    let (mut parts, body) = req.into_parts();
    let route = match Route::of(&app, &parts.uri, &parts.headers) {
        Ok(r) => r,
        Err(answer) => return answer,
    };
    route.log(&app);
    if app.drain.is_draining() {
        return shutting_down(route.shape, app.config.grace);
    }
    let key = match prepare_head(&app, &route, &mut parts, deadline, job_id) {
        Ok(k) => k,
        Err(answer) => return answer,
    };
    let (bytes, held) = match read_request_body(&app, body, &parts.headers, route.shape).await {
        Ok(b) => b,
        Err(answer) => return answer,
    };
    let ready = ready_request(&app, &route, parts, &key, job_id, bytes);
    let sent = ready.sent.clone();
    let result = run_job(&app, &route, ready, held, deadline).await;
    let result = match result {
        Ok(Ran::Answered(r)) => Ok(r),
        Ok(Ran::NotSent) => return shutting_down(route.shape, app.config.grace),
        Ok(Ran::Cut) => return cut_unknown(&app, &sent, job_id, route.shape),
        Err(Late) => Err(Late),
    };
    answer_of(&app, &route, &key, deadline, result).await
}

/// Where a job goes and in whose shape it is answered: read from its path
/// (and, for a pool, its caller's key) before anything else, since every
/// answer after — even a refusal — is in the caller's API's shape.
struct Route {
    /// The path and query, as the caller sent them.
    path: String,
    /// The path, read.
    api: PathApi,
    /// The upstream or pool it goes to.
    via: Via,
    /// Whose API the caller speaks: the upstream's provider, else the
    /// path's (see `route`); a pool's callers, the path's.
    provider: Provider,
    /// How the layer reads the answers: the upstream's provider, else each
    /// answer's own shape — but a Gemini path's answers are Gemini's (its
    /// streams are metered as Gemini's). A pool's layer reads each attempt
    /// as its member's provider's.
    reads: Option<Provider>,
    /// The shape of the proxy's own answers: the caller's API's — OpenAI's
    /// on Gemini's OpenAI-compatible paths (`/v1beta/openai/…`).
    shape: Provider,
}

impl Route {
    /// The route of a request to `uri` with these headers (a pool is
    /// selected by the caller's key in them); `Err`: the answer to a
    /// request that has nowhere to go ([`Nowhere`]).
    // The `Err` is the answer, returned once up the stack: its size does
    // not matter.
    #[allow(clippy::result_large_err)]
    fn of(app: &App, uri: &Uri, headers: &http::HeaderMap) -> Result<Route, Response> {
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        let api = PathApi::of(&path);
        let query = path.split_once('?').map(|(_, q)| q);
        // Where the job goes: the pool its caller's key selects, else an
        // upstream.
        let via = match via(app, headers, &path, query, &api) {
            Ok(v) => v,
            Err(nowhere) => return Err(nowhere.answer(&api)),
        };
        let provider = match via {
            Via::Upstream(ui) => app.config.upstreams[ui]
                .provider
                .unwrap_or_else(|| api.provider()),
            Via::Pool(_) => api.provider(),
        };
        let reads = match via {
            Via::Upstream(ui) => app.config.upstreams[ui]
                .provider
                .or((provider == Provider::Gemini).then_some(Provider::Gemini)),
            Via::Pool(_) => None,
        };
        let shape = match api {
            PathApi::OpenaiCompatible => Provider::Openai,
            _ => provider,
        };
        Ok(Route {
            path,
            api,
            via,
            provider,
            reads,
            shape,
        })
    }

    /// The query of the path, if any (where Gemini's `?key=` is).
    fn query(&self) -> Option<&str> {
        self.path.split_once('?').map(|(_, q)| q)
    }

    /// The debug line of a request: its path as logs may show it (a
    /// `key=` in its query redacted), where it goes, and its provider.
    fn log(&self, app: &App) {
        if tracing::enabled!(tracing::Level::DEBUG) {
            let to = match self.via {
                Via::Upstream(ui) => app.config.upstreams[ui].name.clone(),
                Via::Pool(pi) => app.pools[pi].label(),
            };
            tracing::debug!(
                path = %crate::keys::redacted_path(&self.path),
                upstream = %to,
                provider = self.provider.as_str(),
                "request"
            );
        }
    }
}

/// Makes the request's head ready for upstream, and returns the job's key
/// label. The key: its fingerprint names the shared state; the key itself
/// stays in the request (its header, or Gemini's `?key=`), for the
/// upstream alone. A pool's caller key is neither: it selected the pool,
/// each member's route removes it and sets the member's own, and the
/// members' keys are paced, each under its own fingerprint. Ratewise's
/// own headers, the host and the hop-by-hop headers are removed; the URI
/// becomes the upstream's. `Err`: a path that makes no valid URI (a 400).
// The `Err` is the answer, returned once up the stack: its size does not
// matter.
#[allow(clippy::result_large_err)]
fn prepare_head(
    app: &App,
    route: &Route,
    parts: &mut http::request::Parts,
    deadline: Duration,
    job_id: &str,
) -> Result<String, Response> {
    let key = match route.via {
        Via::Upstream(_) => match caller_key(&parts.headers, route.query(), Some(route.provider)) {
            Some(k) => app.keys.note(&k),
            None => ANONYMOUS.to_owned(),
        },
        Via::Pool(pi) => app.pools[pi].label(),
    };
    parts.extensions.insert(KeyLabel::new(&key));
    parts.extensions.insert(JobId::new(job_id));
    // Its level and flow (`[priority]`); the headers never go upstream.
    let pool = match route.via {
        Via::Pool(pi) => Some(&app.pools[pi].workload),
        Via::Upstream(_) => None,
    };
    parts.extensions.insert(crate::priority::workload(
        &mut parts.headers,
        &app.config.priority,
        &app.config.layer.levels,
        pool,
        &app.unknown_levels,
    ));
    // Read in `forward`; ratewise's alone, never forwarded.
    remove_present(&mut parts.headers, &NOT_FORWARDED);
    parts.extensions.insert(Deadline(deadline));
    strip_hop_by_hop(&mut parts.headers);
    // A pooled attempt's scheme and host are its member's (set by the
    // member's route): the caller's path on a placeholder until then.
    let base = match route.via {
        Via::Upstream(ui) => app.config.upstreams[ui].url.as_str(),
        Via::Pool(_) => "http://pool.invalid",
    };
    // Parsed in place (a `String` becomes the URI's bytes, not a copy).
    let mut uri = String::with_capacity(base.len() + route.path.len());
    uri.push_str(base);
    uri.push_str(&route.path);
    parts.uri = match Uri::try_from(uri) {
        Ok(u) => u,
        Err(_) => {
            return Err(answer::shaped(
                route.shape,
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "ratewise: the request path is not valid",
            ))
        }
    };
    Ok(key)
}

/// The body, read whole before anything is reserved: bounded in size, in
/// time (a caller that trickles it ties up nothing but its own
/// connection), and with every other body held, in memory
/// (`bounds.max_body_memory`). A drain ends the wait. With the bytes, the
/// permits holding their place; `Err`: the answer (see
/// [`BodyError::answer`]).
async fn read_request_body(
    app: &App,
    body: Body,
    headers: &http::HeaderMap,
    shape: Provider,
) -> Result<(Bytes, Vec<tokio::sync::OwnedSemaphorePermit>), Response> {
    let limit = app.config.layer.max_request_body;
    let by = tokio::time::Instant::now() + app.config.body_timeout;
    let read = read_body(&app.body_memory, body, limit, headers, by);
    let mut phase = app.drain.subscribe();
    let drained = async move {
        let _ = phase.wait_for(|p| *p != Phase::Serving).await;
    };
    let read = tokio::select! {
        r = read => r,
        _ = drained => return Err(shutting_down(shape, app.config.grace)),
    };
    read.map_err(|e| e.answer(shape, app.config.max_body_memory))
}

/// A request ready to go: the request itself, and what watches it on its
/// way (its sends on the wire, its cancellation).
struct Ready {
    req: http::Request<UpBody>,
    sent: WireWatch,
    cancel: ratewise_tower::Cancel,
}

/// The request built from its head and body, its job described for the
/// journal. The model: the path's (Gemini's model, Azure's deployment),
/// else the body's — what the journal's attempt lines say of the job. A
/// Gemini request's output cap and stream flag are read by the layer from
/// its path and body (`generationConfig.maxOutputTokens`): one reader of
/// Gemini requests, the layer's.
fn ready_request(
    app: &App,
    route: &Route,
    mut parts: http::request::Parts,
    key: &str,
    job_id: &str,
    bytes: Bytes,
) -> Ready {
    let path_model = route.api.model(route.provider).map(str::to_owned);
    if let Some(m) = &path_model {
        parts.extensions.insert(Model::new(m));
    }
    // The body read once: the layer takes its fields from here.
    let fields = ratewise_tower::BodyFields::read(&bytes);
    app.jobs
        .describe(job_id, key, path_model.or_else(|| fields.model.clone()));
    parts.extensions.insert(fields);
    // The job's cancellation: given when its caller leaves, and (through
    // its parent) when the proxy drains. It is also the view of its send
    // that the layer publishes, which the watch reads.
    let cancel = app.drain.cancel.child();
    parts.extensions.insert(cancel.clone());
    let sent = WireWatch::waiting(app.metrics.clone(), cancel.clone());
    parts.extensions.insert(sent.clone());
    let body: UpBody = http_body_util::Full::new(bytes)
        .map_err(|never: std::convert::Infallible| -> axum::Error { match never {} })
        .boxed_unsync();
    Ready {
        req: http::Request::from_parts(parts, body),
        sent,
        cancel,
    }
}

/// The job outlived its deadline and the slack after it.
struct Late;

/// Runs the request on its route's service, inside this handler; only
/// when its caller goes away after a send does it move to a task of its
/// own (see [`Job`]). Bounded by the deadline and [`JOB_SLACK`]
/// (`Err(Late)`). The body's memory is held until the job ends.
async fn run_job(
    app: &App,
    route: &Route,
    ready: Ready,
    held: Vec<tokio::sync::OwnedSemaphorePermit>,
    deadline: Duration,
) -> Result<Ran, Late> {
    let svc = match route.via {
        Via::Upstream(ui) => app.service(ui, route.reads),
        Via::Pool(pi) => app.pool_service(pi),
    };
    let mut job = Job {
        future: Some(Box::pin(svc.oneshot(ready.req))),
        gauges: Some((
            crate::upstream::NoLongerWaiting(ready.sent.clone()),
            crate::metrics::InFlight::enter(app.metrics.clone()),
        )),
        held,
        sent: ready.sent,
        cancel: ready.cancel,
        metrics: app.metrics.clone(),
        bound: deadline.saturating_add(JOB_SLACK),
    };
    let result = match tokio::time::timeout(job.bound, run_or_drain(app, &mut job)).await {
        Ok(r) => Ok(r),
        Err(_) => Err(Late),
    };
    job.finished();
    result
}

/// A job whose send was on the wire at the end of the grace: its attempt
/// is kept as an unknown outcome (journal, `/status`), and its caller
/// told so ([`cut_at_grace`]).
fn cut_unknown(app: &App, sent: &WireWatch, job_id: &str, shape: Provider) -> Response {
    let (attempt, started_ms) = sent.last_send();
    let ctx = app.jobs.context(job_id).unwrap_or_default();
    app.cut_unknown(crate::journal::Unknown::of(
        job_id.to_owned(),
        attempt,
        started_ms,
        ctx,
    ));
    cut_at_grace(shape)
}

/// What a job that ran answers its caller: the upstream's answer, its
/// body read to the end even if the caller leaves and cut at the end of a
/// shutdown's grace ([`streamed`]); else the layer's error
/// ([`error_answer`]); else a 504 for a job that outlived its deadline.
async fn answer_of(
    app: &Arc<App>,
    route: &Route,
    key: &str,
    deadline: Duration,
    result: Result<
        Result<
            http::Response<ratewise_tower::MeteredBody<hyper::body::Incoming>>,
            ratewise_tower::Error,
        >,
        Late,
    >,
) -> Response {
    match result {
        Ok(Ok(resp)) => streamed(app, resp, deadline, route.shape),
        // Refused a send because the proxy drains (its cancellation's
        // parent): nothing of it is on the wire.
        Ok(Err(e))
            if e.give_up_reason() == Some(ratewise_core::GiveUpReason::Cancelled)
                && app.drain.cancel.is_cancelled() =>
        {
            shutting_down(route.shape, app.config.grace)
        }
        // Boxed: a stop's path is long and rare; unboxed, every job's
        // future would be that much larger.
        Ok(Err(e)) => Box::pin(error_answer(app, route, key, &e)).await,
        Err(Late) => answer::shaped(
            route.shape,
            StatusCode::GATEWAY_TIMEOUT,
            "timeout_error",
            "ratewise: the job outlived its deadline and was cut",
        ),
    }
}

/// The upstream's answer as its caller gets it: hop-by-hop headers
/// removed, its body read to the end if the caller leaves
/// ([`ReadToEnd`]), and cut at the end of a shutdown's grace — a stream
/// then ending with the provider's `error` event ([`CutAtGrace`]).
fn streamed(
    app: &Arc<App>,
    mut resp: http::Response<ratewise_tower::MeteredBody<hyper::body::Incoming>>,
    deadline: Duration,
    shape: Provider,
) -> Response {
    strip_hop_by_hop(resp.headers_mut());
    let sse = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let phase = app.drain.subscribe();
    let app = app.clone();
    resp.map(|b| {
        Body::new(CutAtGrace {
            inner: ReadToEnd::new(b, deadline),
            cut: Some(Box::pin(async move {
                let mut phase = phase;
                if phase.wait_for(|p| *p == Phase::Cut).await.is_err() {
                    std::future::pending::<()>().await;
                }
            })),
            sse: sse.then_some(shape),
            app,
        })
    })
}

/// The answer to the layer's error: a stop is journaled and logged once,
/// before the answer is kept; an unknown outcome is kept; the answer
/// names where the job could not get to, for a 502 ([`reached`]).
async fn error_answer(app: &App, route: &Route, key: &str, e: &ratewise_tower::Error) -> Response {
    if e.is_stop_queue() {
        match route.via {
            // Journaled and logged once, before the answer is kept.
            Via::Upstream(_) => app.stopped(key, e).await,
            Via::Pool(_) => app.pool_stopped(key, e),
        }
    }
    if e.is_hold_unknown() {
        app.unknown_outcome(e);
    }
    let reached = reached(app, route.via, e);
    answer::for_error(
        e,
        route.shape,
        key,
        &app.stops,
        app.config.max_deadline,
        reached.as_deref(),
    )
}

/// Where the job went, for a 502 that says it could not get there: the
/// upstream's origin, or the pool member tried last.
fn reached(app: &App, via: Via, e: &ratewise_tower::Error) -> Option<String> {
    match via {
        Via::Upstream(ui) => Some(app.config.upstreams[ui].origin()),
        Via::Pool(_) => e
            .attempts()
            .last()
            .and_then(|a| a.member.as_deref())
            .map(member_address),
    }
}

/// A pool member's name as an answer may show it: `host:port#fp-…` (maybe
/// with a `user@`) is `host:port`, without a user or password.
fn member_address(member: &str) -> String {
    let before_fp = member.split('#').next().unwrap_or(member);
    before_fp.rsplit('@').next().unwrap_or(before_fp).to_owned()
}

/// Removes the hop-by-hop headers (RFC 9110 §7.6.1), and those the
/// `Connection` header names: they describe one connection, not the
/// message, and are not forwarded.
fn strip_hop_by_hop(h: &mut http::HeaderMap) {
    // Nothing allocated when there is no `Connection` header (nearly always).
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
    remove_present(h, &HOP_BY_HOP);
}

/// The hop-by-hop headers, never forwarded either way.
static HOP_BY_HOP: [http::HeaderName; 9] = [
    http::header::CONNECTION,
    http::HeaderName::from_static("keep-alive"),
    http::HeaderName::from_static("proxy-connection"),
    http::header::PROXY_AUTHENTICATE,
    http::header::PROXY_AUTHORIZATION,
    http::header::TE,
    http::header::TRAILER,
    http::header::TRANSFER_ENCODING,
    http::header::UPGRADE,
];

/// The headers a caller may send the proxy that are its own (read here,
/// never forwarded), and the caller's `host` (the upstream's is set).
static NOT_FORWARDED: [http::HeaderName; 4] = [
    DEADLINE_NAME,
    crate::jobs::JOB_HEADER,
    crate::upstream::UPSTREAM_HEADER,
    http::header::HOST,
];

/// Removes each header in `names` that `h` has. One walk over the
/// request's few headers finds them, and only those found are removed:
/// most requests have none, and each removal by name is a hash (a
/// removal by a `&str` name also parses it, and copies a custom one).
pub(crate) fn remove_present(h: &mut http::HeaderMap, names: &[http::HeaderName]) {
    let present: Vec<http::HeaderName> = h.keys().filter(|k| names.contains(k)).cloned().collect();
    for n in present {
        h.remove(n);
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
/// (the caller went away), its cancellation is given and it moves to a
/// task of its own, bounded by the job's deadline and slack: a job with
/// nothing on the wire ends there at once (the machine releases its
/// reservation; an attempt it had journaled as started is journaled as
/// ended, never sent); one whose send may have reached the provider
/// finishes it (making no other) and reads its answer to the end, so its
/// usage settles. The gauges end with the job, however it ends.
struct Job {
    future: Option<JobFuture>,
    gauges: Option<(crate::upstream::NoLongerWaiting, crate::metrics::InFlight)>,
    /// Its body's place in `bounds.max_body_memory`, held while the job
    /// may still send it.
    held: Vec<tokio::sync::OwnedSemaphorePermit>,
    sent: WireWatch,
    /// Its cancellation, given when its caller leaves.
    cancel: ratewise_tower::Cancel,
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
        self.held.clear();
        self.sent.ended();
    }
}

/// How a job ended in its caller's handler (a value passed once, on the
/// stack: its size does not matter).
#[allow(clippy::large_enum_variant)]
enum Ran {
    /// Its own answer (or the layer's error).
    Answered(
        Result<
            http::Response<ratewise_tower::MeteredBody<hyper::body::Incoming>>,
            ratewise_tower::Error,
        >,
    ),
    /// The proxy drains and the job had nothing on the wire: never sent,
    /// between attempts, or waiting for a connection (withdrawn); no
    /// further send will be made.
    NotSent,
    /// The grace ended with its send on the wire: outcome unknown.
    Cut,
}

/// Runs `job` to its end, unless the proxy drains. Then one answer
/// decides — its cancellation's, given in one step against the hand-over
/// of its send and against that send reaching the wire: a job with
/// nothing on the wire (never sent, between attempts, or waiting for a
/// connection) ends at once and is answered "not sent" ([`withdrawn`]);
/// one whose send may have reached the provider runs on until it ends or
/// the grace does ([`Ran::Cut`]). The job is polled before each look at
/// the drain, so an answer that is already there is given.
async fn run_or_drain(app: &App, job: &mut Job) -> Ran {
    let mut phase = app.drain.subscribe();
    let cancel = job.cancel.clone();
    loop {
        if let Poll::Ready(r) = futures::poll!(std::pin::pin!(job.run())) {
            return Ran::Answered(r);
        }
        let now = *phase.borrow_and_update();
        if now != Phase::Serving {
            match cancel.cancel() {
                ratewise_tower::Cancelled::NothingSent => {
                    return Box::pin(withdrawn(job, &mut phase)).await
                }
                ratewise_tower::Cancelled::AfterSend if now == Phase::Cut => return Ran::Cut,
                ratewise_tower::Cancelled::AfterSend => {}
            }
        }
        tokio::select! {
            biased;
            r = job.run() => return Ran::Answered(r),
            c = phase.changed() => {
                if c.is_err() {
                    // The proxy itself is gone: the job runs to its end.
                    return Ran::Answered(job.run().await);
                }
            }
        }
    }
}

/// A draining job whose cancellation found nothing on the wire: the layer
/// ends it at once (each of its waits races the cancellation, and a send
/// still waiting for a connection is withdrawn), giving its reservation
/// back and journaling the end of an attempt it had journaled as started,
/// so that no restart reads it as an unknown outcome. It is driven to that
/// end here and answered "not sent" — unless it ended with an answer of
/// its own that came back before the drain. Should the grace end first,
/// it is answered "not sent" then: nothing of it reached the wire, and
/// nothing will.
async fn withdrawn(job: &mut Job, phase: &mut tokio::sync::watch::Receiver<Phase>) -> Ran {
    let cut = async {
        if phase.wait_for(|p| *p == Phase::Cut).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        biased;
        r = job.run() => match r {
            Err(e) if e.give_up_reason() == Some(ratewise_core::GiveUpReason::Cancelled) => {
                Ran::NotSent
            }
            r => Ran::Answered(r),
        },
        _ = cut => Ran::NotSent,
    }
}

/// Why a request body was not read.
enum BodyError {
    /// Larger than `bounds.max_request_body`.
    TooLarge,
    /// The connection failed while sending it.
    Unreadable,
    /// Not all there by the body timeout.
    Late,
    /// No room in `bounds.max_body_memory` by the body timeout.
    NoMemory,
}

impl BodyError {
    /// The answer to a request whose body was not read, in `shape`: 413
    /// too large, 400 unreadable, 408 late, 503 with no room in
    /// `bounds.max_body_memory` (`max_body_memory`, said in a WARN line:
    /// the operator's bound was reached, not the caller's fault).
    fn answer(self, shape: Provider, max_body_memory: usize) -> Response {
        match self {
            BodyError::TooLarge => answer::shaped(
                shape,
                StatusCode::PAYLOAD_TOO_LARGE,
                "request_too_large",
                "ratewise: the request body is larger than the proxy accepts (bounds.max_request_body)",
            ),
            BodyError::Unreadable => answer::shaped(
                shape,
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "ratewise: the request body could not be read",
            ),
            BodyError::NoMemory => {
                tracing::warn!(
                    max_body_memory,
                    "request bodies held reached bounds.max_body_memory: a request waited the body timeout and was turned away"
                );
                answer::shaped(
                    shape,
                    StatusCode::SERVICE_UNAVAILABLE,
                    "overloaded_error",
                    "ratewise: the proxy holds as many request bodies as it may (bounds.max_body_memory); retry later",
                )
            }
            BodyError::Late => answer::shaped(
                shape,
                StatusCode::REQUEST_TIMEOUT,
                "timeout_error",
                "ratewise: the request body did not arrive in time",
            ),
        }
    }
}

/// Reads a request body whole, by `by`, holding its bytes' place in the
/// shared body memory: all of a declared `content-length` before reading,
/// else chunk by chunk as they arrive.
async fn read_body(
    memory: &Arc<tokio::sync::Semaphore>,
    mut body: axum::body::Body,
    limit: usize,
    headers: &http::HeaderMap,
    by: tokio::time::Instant,
) -> Result<(Bytes, Vec<tokio::sync::OwnedSemaphorePermit>), BodyError> {
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut held = Vec::new();
    let mut room = 0usize;
    // Whether the body ever waited for room: if it is late after that, the
    // wait made it late, and the answer says the bound was reached.
    let waited = std::sync::atomic::AtomicBool::new(false);
    let take = |n: usize| {
        let memory = memory.clone();
        let waited = &waited;
        async move {
            let n = u32::try_from(n).map_err(|_| BodyError::TooLarge)?;
            if let Ok(p) = memory.clone().try_acquire_many_owned(n) {
                return Ok(p);
            }
            waited.store(true, std::sync::atomic::Ordering::Relaxed);
            match tokio::time::timeout_at(by, memory.acquire_many_owned(n)).await {
                Ok(Ok(p)) => Ok(p),
                _ => Err(BodyError::NoMemory),
            }
        }
    };
    if let Some(n) = declared {
        held.push(take(n as usize).await?);
        room = n as usize;
    }
    let mut buf = bytes::BytesMut::with_capacity(room);
    loop {
        let frame = match tokio::time::timeout_at(by, body.frame()).await {
            Err(_) if waited.load(std::sync::atomic::Ordering::Relaxed) => {
                return Err(BodyError::NoMemory)
            }
            Err(_) => return Err(BodyError::Late),
            Ok(None) => break,
            Ok(Some(Err(_))) => return Err(BodyError::Unreadable),
            Ok(Some(Ok(f))) => f,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let total = buf.len() + data.len();
        if total > limit {
            return Err(BodyError::TooLarge);
        }
        if total > room {
            held.push(take(total - room).await?);
            room = total;
        }
        buf.extend_from_slice(&data);
    }
    Ok((buf.freeze(), held))
}

/// A successful answer's body, cut at the end of a shutdown's grace: a
/// stream then gets the provider's SSE `error` event and ends cleanly.
struct CutAtGrace<B> {
    inner: B,
    cut: Option<Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
    /// The provider whose `error` event ends a cut stream (`None`: not a
    /// stream).
    sse: Option<Provider>,
    app: Arc<App>,
}

impl<B> http_body::Body for CutAtGrace<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        let Some(cut) = this.cut.as_mut() else {
            return Poll::Ready(None);
        };
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if cut.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.cut = None;
        self.app.drain.note_cut();
        tracing::warn!("a streamed answer was cut at the end of the shutdown's grace");
        match self.sse {
            Some(provider) => Poll::Ready(Some(Ok(Frame::data(sse_error(provider))))),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.cut.is_none() || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        if self.cut.is_none() {
            return SizeHint::with_exact(0);
        }
        self.inner.size_hint()
    }
}

/// The `error` event that ends a stream cut by a shutdown, in the
/// provider's shape (after a blank line, so a half-written event before it
/// ends first).
fn sse_error(provider: Provider) -> Bytes {
    let message = "ratewise: the proxy shut down before the stream ended";
    let text = match provider.dialect() {
        Provider::Gemini => format!(
            "\n\ndata: {}\n\n",
            crate::answer::google_error(StatusCode::SERVICE_UNAVAILABLE, message)
        ),
        Provider::Openai => format!(
            "\n\ndata: {}\n\n",
            serde_json::json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}})
        ),
        _ => format!(
            "\n\nevent: error\ndata: {}\n\n",
            serde_json::json!({"type": "error", "error": {"type": "api_error", "message": message}})
        ),
    };
    Bytes::from(text)
}

impl Drop for Job {
    fn drop(&mut self) {
        let Some(future) = self.future.take() else {
            return;
        };
        self.metrics.abandoned.fetch_add(1, Ordering::Relaxed);
        // One atomic step decides between "nothing on the wire" (the job
        // ends at once, withdrawn) and "may have reached the provider"
        // (finished, with no further send). Either way the layer takes it
        // to its end, so what it journaled is closed.
        self.cancel.cancel();
        let gauges = self.gauges.take();
        let held = std::mem::take(&mut self.held);
        let bound = self.bound;
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _gauges = gauges;
                let _held = held;
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

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: Duration = Duration::from_secs(120);
    const MAX: Duration = Duration::from_secs(3600);

    #[test]
    fn a_pool_member_is_named_by_its_host_and_port_alone() {
        assert_eq!(member_address("api.example:443#fp-0123"), "api.example:443");
        assert_eq!(
            member_address("user:pw@api.example:443#fp-0123"),
            "api.example:443"
        );
        assert_eq!(member_address("api.example:443"), "api.example:443");
    }

    #[test]
    fn an_unread_body_is_answered_by_why() {
        for (e, status) in [
            (BodyError::TooLarge, StatusCode::PAYLOAD_TOO_LARGE),
            (BodyError::Unreadable, StatusCode::BAD_REQUEST),
            (BodyError::Late, StatusCode::REQUEST_TIMEOUT),
            (BodyError::NoMemory, StatusCode::SERVICE_UNAVAILABLE),
        ] {
            assert_eq!(e.answer(Provider::Anthropic, 1 << 20).status(), status);
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn of(pairs: &[(&str, &str)]) -> (Duration, DeadlineSource) {
        caller_deadline(&headers(pairs), DEFAULT, MAX)
    }

    const JUNK: [&str; 13] = [
        "soon",
        "NOT_GIVEN",
        "",
        "0",
        "0.0",
        "-5",
        "NaN",
        "nan",
        "inf",
        "-inf",
        "infinity",
        "1_000",
        "1111111111111111111111111111111111111111",
    ];

    #[test]
    fn nothing_sent_is_the_default() {
        assert_eq!(of(&[]), (DEFAULT, DeadlineSource::Default));
    }

    #[test]
    fn each_source_in_its_unit() {
        assert_eq!(
            of(&[("x-ratewise-deadline-ms", "1500")]),
            (Duration::from_millis(1500), DeadlineSource::Ratewise)
        );
        assert_eq!(
            of(&[("x-stainless-read-timeout", "600")]),
            (
                Duration::from_secs(600),
                DeadlineSource::StainlessReadTimeout
            )
        );
        assert_eq!(
            of(&[("x-stainless-read-timeout", "600.0")]),
            (
                Duration::from_secs(600),
                DeadlineSource::StainlessReadTimeout
            )
        );
        assert_eq!(
            of(&[("x-stainless-read-timeout", "2.5")]),
            (
                Duration::from_millis(2500),
                DeadlineSource::StainlessReadTimeout
            )
        );
        assert_eq!(
            of(&[("x-stainless-timeout", "30")]),
            (Duration::from_secs(30), DeadlineSource::StainlessTimeout)
        );
        assert_eq!(
            of(&[("x-stainless-timeout", " 45.5 ")]),
            (
                Duration::from_millis(45_500),
                DeadlineSource::StainlessTimeout
            )
        );
    }

    #[test]
    fn sources_are_read_in_order() {
        let all = [
            ("x-ratewise-deadline-ms", "1500"),
            ("x-stainless-read-timeout", "600"),
            ("x-stainless-timeout", "30"),
        ];
        assert_eq!(of(&all).1, DeadlineSource::Ratewise);
        assert_eq!(of(&all[1..]).1, DeadlineSource::StainlessReadTimeout);
        assert_eq!(of(&all[2..]).1, DeadlineSource::StainlessTimeout);
    }

    #[test]
    fn junk_falls_through_to_the_next_source() {
        for junk in JUNK {
            assert_eq!(
                of(&[
                    ("x-ratewise-deadline-ms", junk),
                    ("x-stainless-read-timeout", "600")
                ]),
                (
                    Duration::from_secs(600),
                    DeadlineSource::StainlessReadTimeout
                ),
                "{junk:?}"
            );
            assert_eq!(
                of(&[
                    ("x-stainless-read-timeout", junk),
                    ("x-stainless-timeout", "30")
                ]),
                (Duration::from_secs(30), DeadlineSource::StainlessTimeout),
                "{junk:?}"
            );
            assert_eq!(
                of(&[("x-stainless-timeout", junk)]),
                (DEFAULT, DeadlineSource::Default),
                "{junk:?}"
            );
            assert_eq!(
                of(&[
                    ("x-ratewise-deadline-ms", junk),
                    ("x-stainless-read-timeout", junk),
                    ("x-stainless-timeout", junk)
                ]),
                (DEFAULT, DeadlineSource::Default),
                "{junk:?}"
            );
        }
    }

    #[test]
    fn a_value_that_is_not_text_falls_through() {
        let mut h = http::HeaderMap::new();
        h.insert(
            "x-stainless-read-timeout",
            http::HeaderValue::from_bytes(b"6\xff0").unwrap(),
        );
        assert_eq!(
            caller_deadline(&h, DEFAULT, MAX),
            (DEFAULT, DeadlineSource::Default)
        );
        assert_eq!(
            ignored_deadline_headers(&h),
            vec![("x-stainless-read-timeout", "unreadable or too long")]
        );
    }

    #[test]
    fn junk_is_named_for_the_debug_line() {
        let h = headers(&[
            ("x-ratewise-deadline-ms", "soon"),
            ("x-stainless-read-timeout", "600"),
            ("x-stainless-timeout", "NOT_GIVEN"),
        ]);
        assert_eq!(
            ignored_deadline_headers(&h),
            vec![
                ("x-ratewise-deadline-ms", "not a finite number"),
                ("x-stainless-timeout", "not a finite number"),
            ]
        );
        let h = headers(&[("x-stainless-timeout", "-1")]);
        assert_eq!(
            ignored_deadline_headers(&h),
            vec![("x-stainless-timeout", "not more than 0")]
        );
        assert!(ignored_deadline_headers(&headers(&[("x-stainless-timeout", "5")])).is_empty());
    }

    #[test]
    fn everything_is_capped_at_the_maximum() {
        let max = Duration::from_secs(60);
        for pairs in [
            [("x-ratewise-deadline-ms", "60001")],
            [("x-stainless-read-timeout", "600")],
            [("x-stainless-timeout", "1e300")],
        ] {
            let (d, _) = caller_deadline(&headers(&pairs), DEFAULT, max);
            assert_eq!(d, max, "{pairs:?}");
        }
        // The default too.
        assert_eq!(
            caller_deadline(&headers(&[]), DEFAULT, max),
            (max, DeadlineSource::Default)
        );
        // Huge values never overflow.
        assert_eq!(
            of(&[("x-ratewise-deadline-ms", "18446744073709551615")]),
            (MAX, DeadlineSource::Ratewise)
        );
        // Below the cap, as given; never below a millisecond.
        assert_eq!(
            of(&[("x-stainless-timeout", "0.0000001")]),
            (Duration::from_millis(1), DeadlineSource::StainlessTimeout)
        );
    }
}
