//! # ratewise-tower
//!
//! [`RetryLayer`]: the one retry owner for any HTTP client that is a
//! `tower::Service<http::Request<B>, Response = http::Response<R>>`
//! (hyper-util's client, an axum proxy's upstream, a `reqwest`-like
//! wrapper).
//!
//! Everything is at the crate root: the layer and its [`Builder`], the
//! request extensions ([`KeyLabel`], [`JobId`], [`Deadline`], [`Model`],
//! [`TokenEstimate`]) and the response's [`Attempts`], and the core's
//! [`Limits`], [`Policy`] and [`Provider`] — a user needs no
//! `ratewise_core` import.
//!
//! ```no_run
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use ratewise_tower::{Policy, RetryLayer};
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
//! let mut service = ServiceBuilder::new()
//!     .layer(RetryLayer::new(Policy::default()))
//!     .service(client);
//! let request = http::Request::post("http://127.0.0.1:8080/v1/messages")
//!     .header("content-type", "application/json")
//!     .body(Full::new(Bytes::from_static(br#"{"model":"claude-sonnet-4-5","max_tokens":256,"messages":[]}"#)))?;
//! match service.ready().await?.call(request).await {
//!     Ok(response) => { /* the body is metered: usage settles when it ends */ let _ = response; }
//!     Err(e) if e.is_defer() || e.is_stop_queue() => { /* keep the job, send it later */ }
//!     Err(e) => eprintln!("{e}"),
//! }
//! # Ok(()) }
//! ```
//!
//! ## The default policy, as a caller sees it
//!
//! `RetryLayer::new(Policy::default())` (and [`Builder`] unless told
//! otherwise) gives every call **no deadline** and an **in-line limit of
//! 60 s in total** ([`Policy::max_inline_wait`]): a call is held waiting
//! — for admission (bucket room, a pause after a `429`, a cold start's
//! first answer), for its turn behind the calls queued before it, and for
//! retry delays — at most 60 s altogether, sends not counted. A wait that
//! would take it past that is not begun: the call ends at once
//! [`Error::is_defer`], with the earliest time to send it again in
//! [`Error::until`], and nothing was sent for that wait. Up to 3 sends per
//! call; the last error answer then ends it (`give_up`, with the answer).
//!
//! What a call returns:
//!
//! * `Ok(response)` — a success, its body metered;
//! * `Err(e)` with `e.is_defer()` — held back rather than waited for:
//!   keep the job and send it again at `e.until()`;
//! * `Err(e)` with `e.is_stop_queue()` — the key is stopped (a spend cap,
//!   billing, credentials): nothing more goes out until
//!   [`RetryLayer::resume`] (or `until()`, when it lifts by itself);
//! * `Err(e)` otherwise — a failure (`is_fail`, `is_give_up`,
//!   `is_hold_unknown`, `is_inspect`, ...), with the decision, every
//!   attempt's record and the last response.
//!
//! A caller that would rather wait longer sets a deadline
//! ([`Deadline`] per call, [`Builder::deadline`] for all): a call with a
//! deadline waits as long as its deadline allows and is never deferred;
//! it ends `give_up(deadline)` as soon as it is known it cannot be sent
//! in time. A larger `max_inline_wait` raises the in-line limit instead.
//! A runnable example is at [`RetryLayer::new`].
//!
//! ## What one call does
//!
//! One call is one *job*: it gets an id ([`JobId`] or `job-N`), an arrival
//! time, a deadline ([`Deadline`] or the policy's default) and a key: its
//! [`KeyLabel`], else its credentials' fingerprint
//! ([`KeyLabel::from_credentials`]), else one `anonymous` scope. Its body is
//! buffered once (bounded: a larger body is [`Error::is_body_too_large`]
//! before anything is sent). Then, until the job ends:
//!
//! 1. **Admission** through the shared state: wait for room (spending
//!    deadline, not attempts), or end at once when the key is stopped
//!    (`stop_queue`, nothing sent) or the wait cannot fit
//!    (`give_up(deadline)` / `defer`).
//! 2. **One send** of the inner service. Nothing below the layer retries.
//! 3. **Read the answer whole**: an error answer's body is read up to a
//!    bound, classified (body code first, headers, status), decided; a
//!    transport failure is told apart: never sent (connect, DNS) or sent
//!    with no answer (reset, timeout) — see [`transport_failure`].
//! 4. **Act**: `retry` sleeps the decided delay and goes back to 1;
//!    `defer`, `stop_queue`, `fail`, `inspect`, `give_up` and
//!    `hold_unknown` end the call with an [`Error`] carrying the decision,
//!    the classification, every attempt's record and the final response.
//!
//! A success returns `http::Response<`[`MeteredBody`]`<R>>` with an
//! [`Attempts`] extension: the body passes through untouched and settles
//! the reservation from its `usage` when its last byte arrives (whether or
//! not the consumer polls past it); `text/event-stream` bodies are metered
//! by the streaming tracker and never replayed once committed. Compressed
//! bodies (`gzip`, `deflate`, `br`) are metered from a bounded decoded copy.
//!
//! ## A 429's path through the code
//!
//! The files a `429` crosses, in order, from [`RetryService`]'s `call` to the
//! next send (leaf readers and parsers in brackets). Every decision is the
//! core's; the driver only carries values between the store, the machine
//! and the wire.
//!
//! 1. `retry/service.rs` — `call` starts the job.
//! 2. `retry/run.rs` — the send, the answer's head, its error body read
//!    to a bound (`body/replay.rs`, `body/decode.rs`).
//! 3. core `classify/mod.rs` — `classify_response`: `rate_limited`, its
//!    scope, its wait hint and rate-limit view (`parse/*`).
//! 4. core `job.rs` — `Job::answered`: the decision and the update.
//! 5. core `decide/mod.rs` — `decide`: `retry` after the hint, with jitter
//!    (`decide/backoff.rs`).
//! 6. `wake.rs` — the update goes to the store; queue heads are woken
//!    after it.
//! 7. core `admit/shared.rs` — one lock for the whole update.
//! 8. core `admit/controller/answers.rs` — `Controller::apply`: what the
//!    429 proves (a surprise, the margin: `admit/bucket/margin.rs`), the
//!    pause for every job, the retry budget's state.
//! 9. core `admit/controller/headers.rs` — the answer's view syncs the
//!    buckets' credit (`admit/bucket/view.rs`).
//! 10. core `admit/controller/silent.rs` — where no header states a
//!     dimension's limit, the 429 teaches its estimate
//!     (`admit/silent.rs`); the bucket is rebuilt at it (`admit/belief.rs`
//!     says which belief wins, `admit/controller/pace.rs` rebuilds).
//! 11. core `admit/controller/accounting.rs` — the reservation's tokens
//!     back (the request unit kept where the provider counts it).
//! 12. core `job.rs` — `Job::applied`: the retry, against a spent budget
//!     decided again (a paced retry is not counted); `Job::next` after the
//!     delay.
//! 13. `queue.rs` — the job's turn among those waiting for the scope.
//! 14. core `admit/controller/admission.rs` — `Controller::admit`: after
//!     the pause, room in the buckets (`admit/bucket/mod.rs`, the
//!     arithmetic alone), a reservation: the next send (back in
//!     `retry/run.rs`).
//!
//! Thirteen files (`job.rs` and `retry/run.rs` twice), leaves in brackets aside.
//! A test (`tests/docs_paths.rs` of this crate) checks that every
//! file named here exists.
//!
//! ## Journal
//!
//! [`Builder::journal`] writes every attempt down before it is
//! sent and again when it is decided ([`Journal`]): after a crash, a start
//! without an end is an unknown outcome, never "not sent".
//!
//! ## Turn off retries below the layer
//!
//! Attempts of nested layers multiply. The inner client must make exactly
//! one attempt: hyper-util's legacy client does not retry requests (it
//! only retries on a pooled connection that was closed before the request
//! was written; `Client::builder(..).retry_canceled_requests(false)` turns
//! that off too). SDKs behind the proxy example: Anthropic's and OpenAI's
//! take `max_retries=0`; `reqwest` does not retry. Do not stack
//! `tower::retry` under or over this layer.
//!
//! ## Headers it adds
//!
//! With [`Config::job_headers`] (on by default) each send carries
//! `x-ratewise-job: <job id>` and `x-ratewise-attempt: <n>`. Nothing else
//! is added; no request header or body is ever logged.
//!
//! ## Tracing
//!
//! A span `ratewise_job` per call (`job_id`, `model`), an event per
//! attempt with the allow-listed evidence (`job_id`, `attempt`, `status`,
//! `transport`, `cause`, `action`, `delay_ms`, `reason`, `error_type`,
//! `request_id`, `hint_ms`), and an event when a stream ends.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod body;
mod builder;
mod cancel;
mod clock;
mod config;
mod error;
mod extensions;
mod job;
mod journal;
mod queue;
mod retry;
mod state;
mod transport;
mod wake;

pub mod pool;
pub use body::{BufferError, Metered, MeteredBody, ReplayBody};
pub use builder::{BuildError, Builder};
pub use cancel::{Cancel, Cancelled};
#[cfg(feature = "tokio")]
pub use clock::TokioClock;
pub use clock::{Clock, Sleep};
pub use config::{Config, ATTEMPT_HEADER, JOB_HEADER};
pub use error::{BoxError, Error};
pub use extensions::{Attempts, Deadline, JobId, KeyLabel, Model, TokenEstimate};
pub use journal::{written, Journal, Written};
pub use retry::{ResponseFuture, RetryLayer, RetryService};
pub use state::State;
pub use transport::transport_failure;

/// What a layer is told, re-exported so that a tower user writes
/// `ratewise_tower::Limits::per_minute().requests(50)` with no
/// `ratewise_core` import.
pub use ratewise_core::{admit::Limits, admit::SpendConfig, decide::Policy, Provider};

/// This crate's README snippet, compiled likewise.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct CrateReadmeSnippets;
