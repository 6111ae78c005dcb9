//! The hyper server around the provider model.
//!
//! Routes:
//! * `POST /v1/messages` — Anthropic Messages (JSON or `"stream": true`).
//! * `POST /v1/chat/completions` — OpenAI Chat Completions (JSON or SSE,
//!   `stream_options.include_usage` adds the final usage chunk).
//! * `POST /v1beta/models/{model}:generateContent` and
//!   `POST /v1beta/models/{model}:streamGenerateContent` (`?alt=sse`:
//!   server-sent events; without it one JSON array) — Gemini, also under
//!   `/v1/models/`. The key is `x-goog-api-key` or the query's `key=`; a
//!   request without one gets Google's 403 `PERMISSION_DENIED`. Any other
//!   path under `/v1beta/` gets Google's 404 `NOT_FOUND`.
//! * `POST /openai/deployments/{deployment}/chat/completions?api-version=…`
//!   — Azure OpenAI, when [`MockConfig::flavor`] is `azure` (the model
//!   class is the deployment; the key is `api-key`, else a Bearer token).
//! * `POST /model/{modelId}/converse` — Amazon Bedrock `Converse` (JSON
//!   only): the key is a SigV4 `Authorization`'s access key id (its shape
//!   checked, its signature verified when
//!   [`BedrockConfig::sigv4_secrets`](crate::BedrockConfig::sigv4_secrets)
//!   knows the key) or a Bearer token; errors name their exception in
//!   `x-amzn-ErrorType`.
//! * `POST /v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict`
//!   and `:streamRawPredict` — Claude on Vertex AI: the Messages surface
//!   with the model in the path, `anthropic_version: vertex-2023-10-16` in
//!   the body and `Authorization: Bearer` only (none: Google's 401
//!   `UNAUTHENTICATED`); no rate-limit header.
//! * `GET /mock/records` — the records as JSON; `DELETE` clears them.
//! * `PUT /mock/faults` — replace the fault rules (JSON array of [`FaultRule`]).
//! * `PUT /mock/billing` — `true` / `false`: answer 402 to everything.
//! * `PUT /mock/spend-cap` — a number (USD) or `null`.
//! * `PUT /mock/acceleration` — an [`AccelerationConfig`] or `null`.
//! * `GET /mock/spend` — `{usd_direct, usd_batch, usd_total, batch_items,
//!   batches}`: what direct answers and batch items cost so far.
//! * `GET /mock/batches` — every batch ([`BatchSummary`]).
//! * Batch APIs ([`crate::batch`]): `POST /v1/files` (multipart,
//!   `purpose=batch`), `GET /v1/files/{id}`, `GET /v1/files/{id}/content`,
//!   `DELETE /v1/files/{id}`; `POST /v1/batches`, `GET /v1/batches`,
//!   `GET /v1/batches/{id}`, `POST /v1/batches/{id}/cancel`;
//!   `POST /v1/messages/batches`, `GET /v1/messages/batches`,
//!   `GET /v1/messages/batches/{id}`, `POST /v1/messages/batches/{id}/cancel`,
//!   `GET /v1/messages/batches/{id}/results`,
//!   `DELETE /v1/messages/batches/{id}`. Same keys as the direct routes;
//!   a create while billing is off or the spend cap is reached gets the
//!   direct path's money answer.
//!
//! The key is `x-api-key` (Anthropic) or `Authorization: Bearer …` (either
//! is accepted on both routes); a request without one gets 401.
//!
//! Answers on the API routes (and 404s) follow [`MockConfig::framing`] and,
//! with [`MockConfig::compression`], the request's `Accept-Encoding`; the
//! `/mock/` routes always answer with a `Content-Length` and uncompressed.

mod batch;
mod control;
mod queue;

use crate::batch::{BatchStore, BatchSummary, BatchTotals};
use crate::body::MockBody;
use crate::clock::{Clock, TimeScale};
use crate::config::{AccelerationConfig, Framing, MockConfig};
use crate::encoding::{self, Coding, StreamEncoder};
use crate::faults::{Fault, FaultRule};
use crate::flavor::Flavor;
use crate::io::ResettableStream;
use crate::model::{Outcome, ProviderModel, RequestMeta};
use crate::record::{RequestRecord, ATTEMPT_HEADER, JOB_HEADER};
use crate::render::flavor::{azure, deepseek};
use crate::render::{self, RenderCtx, Rendered};
use crate::request::{self, header_str};
use crate::tokens;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use ratewise_core::{Cause, Provider};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

/// A running mock provider. Dropping it stops it too (without waiting);
/// [`MockServer::shutdown`] also waits until every connection is closed.
#[derive(Debug)]
pub struct MockServer {
    addr: SocketAddr,
    state: Arc<State>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Drop for MockServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

#[derive(Debug)]
struct State {
    config: MockConfig,
    clock: Clock,
    model: Mutex<ProviderModel>,
    records: Mutex<Vec<RequestRecord>>,
    seq: AtomicU64,
    unrecorded: AtomicU64,
    /// DeepSeek's per-key concurrency slots.
    gates: queue::Gates,
    /// The batch APIs' files and batches (locked before `model`).
    batches: Mutex<BatchStore>,
    /// `http://ADDR` (Anthropic's `results_url`).
    base_url: String,
}

/// Returned by the service to make hyper drop the connection unanswered.
#[derive(Debug)]
struct ResetConnection;

impl std::fmt::Display for ResetConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection reset by fault injection")
    }
}

impl std::error::Error for ResetConnection {}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl MockServer {
    /// Starts a mock on an ephemeral port of 127.0.0.1.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let server = ratewise_mock::MockServer::start(Default::default()).await.unwrap();
    /// assert!(server.base_url().starts_with("http://127.0.0.1:"));
    /// server.shutdown().await;
    /// # }
    /// ```
    pub async fn start(config: MockConfig) -> std::io::Result<MockServer> {
        Self::bind(config, SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts a mock on `addr`.
    pub async fn bind(config: MockConfig, addr: SocketAddr) -> std::io::Result<MockServer> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let clock = Clock::start(TimeScale::new(config.seconds_per_minute));
        let state = Arc::new(State {
            batches: Mutex::new(BatchStore::new(&config, SystemTime::now())),
            base_url: format!("http://{addr}"),
            clock,
            model: Mutex::new(ProviderModel::new(&config)),
            records: Mutex::new(Vec::new()),
            seq: AtomicU64::new(0),
            unrecorded: AtomicU64::new(0),
            gates: queue::Gates::default(),
            config,
        });
        let (stop, stop_rx) = watch::channel(false);
        tokio::spawn(batch_ticker(state.clone(), stop.subscribe()));
        let task = tokio::spawn(accept_loop(listener, state.clone(), stop_rx));
        Ok(MockServer {
            addr,
            state,
            stop,
            task: Some(task),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` (the Anthropic SDK's `base_url`; OpenAI's is
    /// this plus `/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every API request received so far, in arrival order.
    pub fn records(&self) -> Vec<RequestRecord> {
        lock(&self.state.records).clone()
    }

    /// Forgets the records so far.
    pub fn clear_records(&self) {
        lock(&self.state.records).clear();
    }

    /// Requests received but not recorded because `max_records` was reached.
    pub fn unrecorded(&self) -> u64 {
        self.state.unrecorded.load(Ordering::Relaxed)
    }

    /// Replaces the fault rules from now on.
    pub fn set_faults(&self, rules: Vec<FaultRule>) {
        lock(&self.state.model).set_faults(rules);
    }

    /// Answers every request with 402 `billing_error` (or stops).
    pub fn set_billing_error(&self, on: bool) {
        lock(&self.state.model).set_billing_error(on);
    }

    /// Sets or removes the spend cap (USD).
    pub fn set_spend_cap(&self, cap_usd: Option<f64>) {
        lock(&self.state.model).set_spend_cap(cap_usd);
    }

    /// Sets or removes the acceleration limit.
    pub fn set_acceleration(&self, acceleration: Option<AccelerationConfig>) {
        lock(&self.state.model).set_acceleration(acceleration);
    }

    /// The most requests one key ever had in flight at once under
    /// DeepSeek's concurrency limit ([`CompatibleConfig::concurrency`](crate::CompatibleConfig::concurrency);
    /// 0 when there is none).
    pub fn peak_in_flight(&self) -> u64 {
        self.state.gates.peak()
    }

    /// Total spend so far, USD (direct answers and batch items).
    pub fn spend_usd(&self) -> f64 {
        self.advance_batches();
        lock(&self.state.model).spend_usd()
    }

    /// What the direct answers cost so far, USD ([`MockConfig::prices`]).
    pub fn usd_direct(&self) -> f64 {
        lock(&self.state.model).usd_direct()
    }

    /// What the batch items cost so far, USD (at
    /// [`BatchConfig::discount`](crate::BatchConfig::discount) of the
    /// direct price).
    pub fn usd_batch(&self) -> f64 {
        self.advance_batches();
        lock(&self.state.model).usd_batch()
    }

    /// Every batch of both providers (oldest first), as processed up to now.
    pub fn batches(&self) -> Vec<BatchSummary> {
        self.advance_batches();
        lock(&self.state.batches).summaries()
    }

    /// Batch items processed so far, by state, and batches created.
    pub fn batch_totals(&self) -> BatchTotals {
        self.advance_batches();
        lock(&self.state.batches).totals()
    }

    fn advance_batches(&self) {
        advance_batches(&self.state);
    }

    /// Runs `f` on the provider model (under its lock; keep it short).
    pub fn with_model<R>(&self, f: impl FnOnce(&mut ProviderModel) -> R) -> R {
        f(&mut lock(&self.state.model))
    }

    /// The time scale in use.
    pub fn time_scale(&self) -> TimeScale {
        self.state.clock.scale()
    }

    /// Stops accepting and drops every open connection.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

/// Processes the batches due by now (batches, then model, locked in that order).
fn advance_batches(state: &State) {
    let now = state.clock.now();
    let mut store = lock(&state.batches);
    if store.busy() {
        store.advance(now, &mut lock(&state.model));
    }
}

/// Processes batch items in the background, every 10 ms of real time.
async fn batch_ticker(state: Arc<State>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(10)) => advance_batches(&state),
            _ = stop.changed() => break,
        }
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>, mut stop: watch::Receiver<bool>) {
    // Dropping the set when the loop ends aborts every connection task.
    let mut conns = JoinSet::new();
    loop {
        while conns.try_join_next().is_some() {}
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => break,
        };
        let Ok((tcp, _peer)) = accepted else {
            // Out of file descriptors and the like: back off briefly.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (io, reset) = ResettableStream::new(tcp);
        let state = state.clone();
        conns.spawn(async move {
            let svc = service_fn(move |req| handle(state.clone(), reset.clone(), req));
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(io), svc)
                .await;
        });
    }
}

type Resp = Response<MockBody>;

/// Corrects a JSON success's output charge to its actual output when
/// dropped: after the generation latency, or when the client went away.
struct SettleOnDrop {
    state: Arc<State>,
    grant: crate::model::Grant,
}

impl Drop for SettleOnDrop {
    fn drop(&mut self) {
        let now = self.state.clock.now();
        lock(&self.state.model).settle(&self.grant, self.grant.output_tokens, now);
    }
}

async fn handle(
    state: Arc<State>,
    reset: Arc<AtomicBool>,
    req: Request<Incoming>,
) -> Result<Resp, ResetConnection> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let wire = Wire::of(&state.config, req.headers());
    let gemini = match method {
        Method::POST => request::gemini::route(&path, req.uri().query()),
        _ => None,
    };
    let bedrock = match method {
        Method::POST => request::bedrock::route(&path),
        _ => None,
    };
    let vertex = match method {
        Method::POST => request::vertex::route(&path),
        _ => None,
    };
    let deployment = match (&method, state.config.flavor) {
        (&Method::POST, Flavor::Azure) => request::azure_deployment(&path),
        _ => None,
    };
    let plain = |provider| ApiRoute {
        provider,
        gemini: None,
        deployment: None,
        vertex: None,
    };
    match (&method, path.as_str()) {
        (&Method::POST, "/v1/messages") => {
            api(state, reset, wire, plain(Provider::Anthropic), req).await
        }
        (&Method::POST, "/v1/chat/completions") => {
            api(state, reset, wire, plain(Provider::Openai), req).await
        }
        (_, _) if gemini.is_some() => {
            let route = ApiRoute {
                gemini,
                ..plain(Provider::Gemini)
            };
            api(state, reset, wire, route, req).await
        }
        (_, _) if vertex.is_some() => {
            let route = ApiRoute {
                vertex,
                ..plain(Provider::Anthropic)
            };
            api(state, reset, wire, route, req).await
        }
        (_, _) if bedrock.is_some() => {
            let route = ApiRoute {
                deployment: bedrock,
                ..plain(Provider::Bedrock)
            };
            api(state, reset, wire, route, req).await
        }
        (_, _) if deployment.is_some() => {
            let route = ApiRoute {
                deployment,
                ..plain(Provider::Openai)
            };
            api(state, reset, wire, route, req).await
        }
        (_, p) if p.starts_with("/mock/") => Ok(control::control(&state, &method, p, req).await),
        (m, p) if batch::route(m, p).is_some() => {
            let route = batch::route(m, p).expect("matched");
            Ok(batch::serve(&state, wire, route, req).await)
        }
        (_, p) => {
            let provider = if request::gemini::is_gemini_path(p) {
                Provider::Gemini
            } else if p.starts_with("/model/") {
                Provider::Bedrock
            } else if p.contains("/chat/") {
                Provider::Openai
            } else {
                Provider::Anthropic
            };
            let n = state.seq.fetch_add(1, Ordering::Relaxed) + 1;
            let ctx = RenderCtx::new(provider, "", state.config.seed, n, SystemTime::now());
            Ok(wire.respond(render::render_status_error(
                &ctx,
                404,
                &format!("Not found: {method} {p}"),
            )))
        }
    }
}

/// How one request's answers go on the wire: framing and content coding.
#[derive(Debug, Clone, Copy)]
struct Wire {
    framing: Framing,
    /// Compression is on (answers vary by `Accept-Encoding`).
    compression: bool,
    /// The coding negotiated for this request.
    coding: Option<Coding>,
}

impl Wire {
    fn of(config: &MockConfig, h: &HeaderMap) -> Wire {
        let coding = if config.compression {
            let accept: Vec<&str> = h
                .get_all(http::header::ACCEPT_ENCODING)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            Coding::negotiate(&accept.join(","))
        } else {
            None
        };
        Wire {
            framing: config.framing,
            compression: config.compression,
            coding,
        }
    }

    /// The coding headers to add to an answer.
    fn headers(&self, headers: &mut Vec<(&'static str, String)>) {
        if let Some(c) = self.coding {
            headers.push(("content-encoding", c.as_str().to_string()));
        }
        if self.compression {
            headers.push(("vary", "accept-encoding".to_string()));
        }
    }

    /// A whole (non-stream) answer, encoded and framed.
    fn respond(&self, r: Rendered) -> Resp {
        let mut headers = r.headers;
        self.headers(&mut headers);
        let body = match self.coding {
            Some(c) => encoding::compress(c, &r.body),
            None => r.body,
        };
        let body = match self.framing {
            Framing::ContentLength => MockBody::full(body),
            Framing::Chunked => MockBody::chunked(body),
        };
        build(r.status, &headers, body)
    }
}

fn build(status: u16, headers: &[(&'static str, String)], body: MockBody) -> Resp {
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in headers {
        if let Ok(v) = HeaderValue::from_str(value) {
            resp.headers_mut().append(HeaderName::from_static(name), v);
        }
    }
    resp
}

/// A partly filled record for one request.
fn base_record(state: &State, seq: u64, provider: Provider, h: &HeaderMap) -> RequestRecord {
    RequestRecord {
        seq,
        at_ms: state.clock.real_elapsed().as_millis() as u64,
        provider_ms: state.clock.now().since_origin().as_millis() as u64,
        provider,
        key: String::new(),
        model: String::new(),
        job: header_str(h, JOB_HEADER).map(|j| request::truncate(j, 128)),
        attempt: header_str(h, ATTEMPT_HEADER).and_then(|a| a.parse().ok()),
        stream: false,
        input_tokens: 0,
        max_tokens: 0,
        output_tokens: 0,
        status: None,
        cause: Cause::Unknown,
        dimension: None,
        fault: None,
        request_id: None,
        queued_ms: 0,
    }
}

fn push_record(state: &State, rec: RequestRecord) {
    let mut recs = lock(&state.records);
    if recs.len() < state.config.max_records {
        recs.push(rec);
    } else {
        state.unrecorded.fetch_add(1, Ordering::Relaxed);
    }
}

/// Rejects a request before the model sees it, and records that.
fn reject(
    state: &State,
    wire: Wire,
    mut rec: RequestRecord,
    ctx: &RenderCtx,
    status: u16,
    cause: Cause,
    msg: &str,
) -> Resp {
    rec.status = Some(status);
    rec.cause = cause;
    rec.request_id = Some(ctx.request_id.clone());
    push_record(state, rec);
    wire.respond(render::render_status_error(ctx, status, msg))
}

/// Which API surface a request came to.
struct ApiRoute {
    provider: Provider,
    /// Gemini's model and method.
    gemini: Option<request::gemini::GeminiRoute>,
    /// Azure's deployment (the OpenAI surface's other path), or Bedrock's
    /// model id.
    deployment: Option<String>,
    /// Claude on Vertex AI's project, region, model and method (the
    /// Anthropic surface's other path).
    vertex: Option<request::vertex::VertexRoute>,
}

/// Like [`reject`], with an answer rendered by the caller.
fn reject_rendered(
    state: &State,
    wire: Wire,
    mut rec: RequestRecord,
    ctx: &RenderCtx,
    cause: Cause,
    r: Rendered,
) -> Resp {
    rec.status = Some(r.status);
    rec.cause = cause;
    rec.request_id = Some(ctx.request_id.clone());
    push_record(state, rec);
    wire.respond(r)
}

async fn api(
    state: Arc<State>,
    reset: Arc<AtomicBool>,
    wire: Wire,
    route: ApiRoute,
    req: Request<Incoming>,
) -> Result<Resp, ResetConnection> {
    let ApiRoute {
        provider,
        gemini,
        deployment,
        vertex,
    } = route;
    let seq = state.seq.fetch_add(1, Ordering::Relaxed) + 1;
    let (parts, body) = req.into_parts();
    let h = &parts.headers;
    let mut rec = base_record(&state, seq, provider, h);
    let mut ctx = RenderCtx::new(provider, "", state.config.seed, seq, SystemTime::now());
    ctx.scale = state.clock.scale();
    ctx.tokens_per_delta = state.config.tokens_per_delta;
    ctx.silent = state.config.silent;
    ctx.sse = gemini.as_ref().is_none_or(|r| r.sse);
    // Vertex states no limits in headers (its quotas are Google Cloud's):
    // the same buckets, no `anthropic-ratelimit-*`.
    if vertex.is_some() && ctx.silent == crate::config::Silent::Off {
        ctx.silent = crate::config::Silent::RetryAfter;
    }
    if provider == Provider::Openai {
        ctx.flavor = state.config.flavor;
        ctx.upstream = state.config.compatible.upstream_provider.clone();
        if deployment.is_some() {
            ctx.api_version = request::api_version(parts.uri.query());
        }
    }

    // Read the whole request first: even a reset comes after the request.
    let body = match Limited::new(body, state.config.max_body_bytes)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return Ok(reject(
                    &state,
                    wire,
                    rec,
                    &ctx,
                    413,
                    Cause::RequestTooLarge,
                    "Request exceeds the maximum allowed number of bytes.",
                ));
            }
            return Err(ResetConnection);
        }
    };
    if provider == Provider::Bedrock {
        if let Err(failure) = request::bedrock::authenticate(
            parts.method.as_str(),
            parts.uri.path(),
            parts.uri.query().unwrap_or(""),
            h,
            &body,
            &state.config.bedrock.sigv4_secrets,
        ) {
            let r = render::bedrock::exception(
                &ctx,
                failure.status(),
                failure.kind(),
                failure.message(),
            );
            return Ok(reject_rendered(
                &state,
                wire,
                rec,
                &ctx,
                Cause::Authentication,
                r,
            ));
        }
    }
    let key = match &gemini {
        Some(_) => request::gemini::api_key(h, parts.uri.query()),
        None if vertex.is_some() => request::vertex::api_key(h),
        None if ctx.flavor == Flavor::Azure => request::azure_api_key(h),
        None if provider == Provider::Bedrock => request::bedrock::api_key(h),
        None => request::api_key(h),
    };
    let Some(key) = key else {
        if vertex.is_some() {
            let r = render::gemini::render_status_error(401, request::vertex::UNAUTHENTICATED);
            return Ok(reject_rendered(
                &state,
                wire,
                rec,
                &ctx,
                Cause::Authentication,
                r,
            ));
        }
        let (status, cause, msg) = match gemini {
            Some(_) => (403, Cause::Permission, "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API."),
            None => (401, Cause::Authentication, "x-api-key header is required"),
        };
        return Ok(reject(&state, wire, rec, &ctx, status, cause, msg));
    };
    rec.key = state
        .config
        .key_labels
        .get(key)
        .cloned()
        .unwrap_or_else(|| request::key_fingerprint(key));
    let parsed = match &gemini {
        Some(route) => request::gemini::parse(
            &body,
            h,
            route,
            state.config.gemini.default_max_output_tokens,
        ),
        None => match (&vertex, &deployment) {
            (Some(v), _) => request::vertex::parse(&body, h, v),
            (None, Some(m)) if provider == Provider::Bedrock => {
                request::bedrock::parse(&body, h, m)
            }
            (None, Some(d)) => request::parse_deployment_request(&body, h, d),
            (None, None) => request::parse_request(provider, &body, h),
        },
    };
    let parsed = match parsed {
        Ok(p) => p,
        Err(msg) => {
            return Ok(reject(
                &state,
                wire,
                rec,
                &ctx,
                400,
                Cause::InvalidRequest,
                &msg,
            ))
        }
    };
    let marker = state.config.compatible.content_filter_marker.as_deref();
    if ctx.flavor == Flavor::Azure
        && marker.is_some_and(|m| !m.is_empty() && contains(&body, m.as_bytes()))
    {
        ctx.model = parsed.model.clone();
        rec.model = parsed.model;
        let r = azure::content_filter(&ctx);
        return Ok(reject_rendered(
            &state,
            wire,
            rec,
            &ctx,
            Cause::InvalidRequest,
            r,
        ));
    }
    // A test's own range for this request (`x-mock-output-tokens: MIN-MAX`),
    // else the configured one.
    let range = tokens::range_header(h).unwrap_or(state.config.output_tokens);
    let output_tokens = tokens::output_tokens_for(
        state.config.seed,
        &body,
        range.min,
        range.max,
        parsed.max_tokens,
    );
    ctx.model = parsed.model.clone();
    ctx.include_usage = parsed.include_usage;
    rec.model = parsed.model.clone();
    rec.stream = parsed.stream;
    rec.input_tokens = parsed.input_tokens;
    rec.max_tokens = parsed.max_tokens;
    rec.output_tokens = output_tokens;
    let meta = RequestMeta {
        provider,
        key: rec.key.clone(),
        model: parsed.model,
        input_tokens: parsed.input_tokens,
        max_tokens: parsed.max_tokens,
        output_tokens,
        stream: parsed.stream,
    };
    let limit = state.config.compatible.concurrency;
    let slot = match (ctx.flavor, limit) {
        (Flavor::Deepseek, Some(limit)) => {
            match state
                .gates
                .try_enter(&meta.key, limit, state.config.max_keys)
            {
                queue::Entry::Entered(slot) => Some(slot),
                queue::Entry::Untracked => None,
                queue::Entry::Wait(_) if state.config.compatible.concurrency_refuses => {
                    let r = deepseek::concurrency_exceeded(&ctx);
                    return Ok(reject_rendered(
                        &state,
                        wire,
                        rec,
                        &ctx,
                        Cause::RateLimited,
                        r,
                    ));
                }
                queue::Entry::Wait(gate) => {
                    let cfg = &state.config.compatible;
                    let keepalive = Duration::from_millis(cfg.keepalive_ms.max(1));
                    let timeout = Duration::from_millis(cfg.queue_timeout_ms);
                    let arrived = std::time::Instant::now();
                    let first = keepalive.min(timeout);
                    match tokio::time::timeout(first, state.gates.enter(gate.clone())).await {
                        Ok(slot) => {
                            rec.queued_ms = arrived.elapsed().as_millis() as u64;
                            slot
                        }
                        Err(_) if timeout <= keepalive => {
                            // Nothing sent yet: DeepSeek's 503.
                            rec.queued_ms = arrived.elapsed().as_millis() as u64;
                            let r = deepseek::overloaded(&ctx);
                            return Ok(reject_rendered(
                                &state,
                                wire,
                                rec,
                                &ctx,
                                Cause::Overloaded,
                                r,
                            ));
                        }
                        Err(_) => {
                            let waiting = Waiting {
                                gate,
                                arrived,
                                keepalive,
                                timeout,
                            };
                            return Ok(queued(state, reset, ctx, rec, meta, waiting));
                        }
                    }
                }
            }
        }
        _ => None,
    };
    answer(state, reset, wire, ctx, rec, meta, slot).await
}

/// A request waiting for a concurrency slot.
struct Waiting {
    gate: Arc<queue::Gate>,
    arrived: std::time::Instant,
    keepalive: Duration,
    timeout: Duration,
}

/// DeepSeek's queue once the first keep-alive is due: a 200 whose body is
/// a keep-alive (a blank line, or `: keep-alive` in a stream) every
/// interval until a slot is free, then the answer's body (an error's too:
/// the status is already sent). Past the wait limit the body ends.
fn queued(
    state: Arc<State>,
    reset: Arc<AtomicBool>,
    ctx: RenderCtx,
    mut rec: RequestRecord,
    meta: RequestMeta,
    w: Waiting,
) -> Resp {
    let ka = deepseek::keepalive(meta.stream);
    let mut headers = if meta.stream {
        vec![
            (
                "content-type",
                "text/event-stream; charset=utf-8".to_string(),
            ),
            ("cache-control", "no-cache".to_string()),
        ]
    } else {
        vec![("content-type", "application/json".to_string())]
    };
    headers.push(render::id_header(&ctx));
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        // A wait limit past the clock's range: no limit.
        let deadline = w.arrived.checked_add(w.timeout);
        let st = state.clone();
        let enter = async move { st.gates.enter(w.gate).await };
        tokio::pin!(enter);
        let mut alive = tx.send(Bytes::from_static(ka.as_bytes())).await.is_ok();
        let slot = loop {
            let now = std::time::Instant::now();
            let left = deadline.map_or(w.keepalive, |d| d.saturating_duration_since(now));
            if !alive || left.is_zero() {
                break None;
            }
            tokio::select! {
                slot = &mut enter => break slot,
                _ = tokio::time::sleep(w.keepalive.min(left)) => {
                    if deadline.is_none_or(|d| std::time::Instant::now() < d) {
                        alive = tx.send(Bytes::from_static(ka.as_bytes())).await.is_ok();
                    }
                }
            }
        };
        rec.queued_ms = w.arrived.elapsed().as_millis() as u64;
        let Some(slot) = slot else {
            // The wait ran out (or the client left): the connection ends.
            rec.request_id = Some(ctx.request_id.clone());
            rec.cause = Cause::OutcomeUnknown;
            push_record(&state, rec);
            return;
        };
        // The headers are sent: the body goes as it is, uncompressed.
        let wire = Wire {
            framing: Framing::Chunked,
            compression: false,
            coding: None,
        };
        let Ok(resp) = answer(state, reset, wire, ctx, rec, meta, Some(slot)).await else {
            return;
        };
        let mut body = resp.into_body();
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                if tx.send(data).await.is_err() {
                    break;
                }
            }
        }
    });
    build(200, &headers, MockBody::Stream(rx))
}

/// Whether `hay` contains `needle`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Answers an admitted request (holding its concurrency `slot`, if any,
/// until the answer ends).
async fn answer(
    state: Arc<State>,
    reset: Arc<AtomicBool>,
    wire: Wire,
    mut ctx: RenderCtx,
    mut rec: RequestRecord,
    meta: RequestMeta,
    slot: Option<queue::Slot>,
) -> Result<Resp, ResetConnection> {
    let provider = meta.provider;
    let now = state.clock.now();
    let answer = {
        let mut model = lock(&state.model);
        let answer = model.handle(&meta, now);
        if matches!(ctx.flavor, Flavor::Groq | Flavor::Azure | Flavor::Mistral) {
            ctx.quotas = model.long_quotas(&meta, now);
        }
        // Gemini says the exact wait ("Please retry in 12.345s."): when
        // the request would first be admitted.
        if provider == Provider::Gemini && matches!(answer.outcome, Outcome::RateLimited { .. }) {
            ctx.wait = Some(model.admission_at(&meta, now) - now).filter(|w| !w.is_zero());
        }
        answer
    };

    // Record before answering: a test may read records as soon as it has a response.
    crate::record::describe(&mut rec, &answer, &ctx);
    push_record(&state, rec);

    if let Some(stall) = answer.stall {
        tokio::time::sleep(stall).await;
    }
    let latency = state.config.latency;
    if latency.first_byte_ms > 0 {
        tokio::time::sleep(Duration::from_millis(latency.first_byte_ms)).await;
    }
    let per_token = Duration::try_from_secs_f64(latency.per_output_token_ms.max(0.0) / 1000.0)
        .unwrap_or(Duration::ZERO);
    match &answer.outcome {
        Outcome::Fault(Fault::Reset) => {
            reset.store(true, Ordering::Release);
            Err(ResetConnection)
        }
        Outcome::Success(grant) if meta.stream => {
            let frames = render::stream_frames(
                &ctx,
                grant.input_tokens,
                grant.output_tokens,
                grant.reserved_output,
            );
            let (frames, tail) = match answer.stream_fault {
                Some(Fault::StreamCut { after_events }) => {
                    (frames[..after_events.min(frames.len())].to_vec(), None)
                }
                Some(Fault::StreamError { after_events } | Fault::ErrorInBody { after_events }) => {
                    let n = after_events.min(frames.len());
                    let in_body = matches!(answer.stream_fault, Some(Fault::ErrorInBody { .. }));
                    let tail = match provider {
                        Provider::Gemini => render::gemini::stream_error_frame(&ctx, n == 0),
                        // OpenRouter's error chunk, whatever the flavor.
                        Provider::Openai if in_body => {
                            render::flavor::openrouter::error_chunk(&ctx)
                        }
                        _ => render::stream_error_frame(&ctx),
                    };
                    (frames[..n].to_vec(), Some(tail))
                }
                _ => (frames, None),
            };
            let mut headers = render::stream_headers(&ctx, &answer.windows);
            wire.headers(&mut headers);
            let (tx, rx) = mpsc::channel::<Bytes>(16);
            let grant = grant.clone();
            let st = state.clone();
            // Compressed streams are flushed after every event.
            let mut encoder = wire.coding.map(StreamEncoder::new);
            let mut encode = move |bytes: Vec<u8>, last: bool| -> Bytes {
                match encoder.take() {
                    Some(mut e) => {
                        let mut out = e.push(&bytes);
                        if last {
                            out.extend_from_slice(&e.finish());
                        } else {
                            encoder = Some(e);
                        }
                        Bytes::from(out)
                    }
                    None => Bytes::from(bytes),
                }
            };
            tokio::spawn(async move {
                // In flight until the last frame is sent.
                let _slot = slot;
                let mut delivered = 0;
                let count = frames.len();
                for (i, f) in frames.into_iter().enumerate() {
                    if f.output_tokens > 0 && !per_token.is_zero() {
                        tokio::time::sleep(per_token.saturating_mul(f.output_tokens as u32)).await;
                    }
                    let last = tail.is_none() && i + 1 == count;
                    if tx.send(encode(f.bytes.into_bytes(), last)).await.is_err() {
                        break;
                    }
                    delivered += f.output_tokens;
                }
                if let Some(t) = tail {
                    let _ = tx.send(encode(t.into_bytes(), true)).await;
                } else if count == 0 {
                    let tail = encode(Vec::new(), true);
                    if !tail.is_empty() {
                        let _ = tx.send(tail).await;
                    }
                }
                lock(&st.model).settle(&grant, delivered, st.clock.now());
            });
            Ok(build(200, &headers, MockBody::Stream(rx)))
        }
        Outcome::Success(grant) => {
            // Settles when generation ends, even if the client hangs up first.
            let settle = SettleOnDrop {
                state: state.clone(),
                grant: grant.clone(),
            };
            if !per_token.is_zero() {
                tokio::time::sleep(
                    per_token.saturating_mul(grant.output_tokens.min(u32::MAX as u64) as u32),
                )
                .await;
            }
            drop(settle);
            drop(slot);
            Ok(wire.respond(render::render_answer(&ctx, &answer)))
        }
        _ => Ok(wire.respond(render::render_answer(&ctx, &answer))),
    }
}
