//! # ratewise-core
//!
//! The sans-IO heart of ratewise: bytes in, decisions out. No clock reads,
//! sleeps, sockets, threads or async live here; time comes in as an
//! argument and randomness from a seedable source.
//!
//! ## The contract: one job, one state machine
//!
//! A job — one request an application wants answered — is a [`job::Job`].
//! The driver (the tower layer, the simulator, your own middleware) loops:
//!
//! 1. [`Job::next`](job::Job::next) says what to do: `Admit` (ask the
//!    store for a reservation and hand its answer to
//!    [`admission`](job::Job::admission), which says `Send`, `Wait` or
//!    `End`), `Send` attempt `n`, `Wait` until an instant (an admission
//!    wait or a retry's delay; ask again then, or when capacity comes
//!    back), `Pending` (a send, a body or a store update is in progress),
//!    or `End` with the decision that ended the job.
//! 2. The driver does it, and tells the machine what happened:
//!    [`sending`](job::Job::sending) when the request leaves,
//!    [`answered`](job::Job::answered) with the classified answer,
//!    [`failed`](job::Job::failed) on a transport failure,
//!    [`body_end`](job::Job::body_end) when a success's body ends,
//!    [`cancel`](job::Job::cancel) when its caller goes away. Each returns
//!    the [`admit::Update`] for the store — an answer's evidence and the
//!    end of its reservation, applied in one step — and an answer's
//!    amended decision comes back through [`applied`](job::Job::applied).
//!
//! The machine never touches the store itself: the [`admit::Store`] may
//! await (a store shared between processes does; the in-memory
//! [`admit::Shared`] answers at once), so the driver awaits it. The
//! machine makes every decision in one place (classify → decide under the
//! policy → the store's amendments) and ends the job's reservation exactly
//! once on every path. Follow one 429: the driver classifies it
//! ([`classify::classify_response`]), `answered` decides it
//! ([`decide::decide`]: never before the server's hint, jitter only added)
//! and returns the update; the store applies it
//! ([`admit::Controller::apply`]: the scope paused for every job, then the
//! reservation given back, so no waiter woken by the give-back misses the
//! pause); `applied` records the retry, and the next `next` says `Wait`
//! until its delay, then `Admit` again.
//!
//! The pieces below stay usable alone:
//!
//! ```
//! use http::{HeaderMap, StatusCode};
//! use ratewise_core::classify::{classify_response, ResponseView};
//! use ratewise_core::decide::{decide, JobState, Policy};
//! use ratewise_core::{Action, Cause, Instant, Now, Provider};
//! use std::time::{Duration, SystemTime};
//!
//! // A 429 from Anthropic: "wait 8 s", input tokens exhausted.
//! let mut headers = HeaderMap::new();
//! headers.insert("retry-after", "8".parse().unwrap());
//! headers.insert("anthropic-ratelimit-input-tokens-remaining", "0".parse().unwrap());
//! let body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
//! let response = ResponseView { status: StatusCode::TOO_MANY_REQUESTS, headers: &headers, body };
//!
//! let now = Now::new(Instant::ZERO, SystemTime::UNIX_EPOCH);
//! let classification = classify_response(Provider::Anthropic, &response, now.wall);
//! assert_eq!(classification.cause, Cause::RateLimited);
//!
//! let job = JobState::new(1, Instant::ZERO, None); // first send, no deadline
//! let mut rng = fastrand::Rng::with_seed(7);        // reproducible jitter
//! let decision = decide(&Policy::default(), &job, &classification, now, &mut rng);
//! match decision.action {
//!     // Never before the server's 8 s; jitter is only ever added.
//!     Action::Retry { delay } => assert!(delay >= Duration::from_secs(8)),
//!     other => panic!("unexpected {other:?}"),
//! }
//! ```
//!
//! Data flows one way: [`parse`] → [`classify`] → [`decide`] → (admission)
//! → the caller acts. [`record::AttemptRecord`] is the allow-listed evidence
//! of one attempt.
//!
//! Modules hidden from these docs are workspace-internal: used by
//! ratewise's own crates (the tower layer's multi-key `pool`, the record
//! kit of a store shared between processes in `admit::store_kit`, the
//! decision-case fixtures' evaluator `case` and `explain` behind the
//! `fixtures` feature, the fuzz targets' hooks), not part of the API and
//! not covered by semver. `tests/public_surface.rs` counts the rest.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod admit;
#[cfg(feature = "fixtures")]
#[doc(hidden)]
pub mod case;
pub mod classify;
pub mod decide;
mod decision;
#[cfg(feature = "fixtures")]
#[doc(hidden)]
pub mod explain;
pub mod job;
pub mod key;
mod note;
pub mod parse;
#[doc(hidden)]
pub mod pool;
pub mod record;
mod rng;
pub mod time;
mod usage;
mod vocab;

pub use decision::{Action, Decision, RetryBudgetState};
pub use note::Note;
pub use time::{Instant, Now};
pub use usage::Usage;
pub use vocab::{ActionKind, Cause, Dimension, GiveUpReason, Provider, Scope};
