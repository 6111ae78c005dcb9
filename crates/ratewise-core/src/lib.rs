//! # ratewise-core
//!
//! The sans-IO heart of ratewise: bytes in, decisions out. It reads a
//! provider's whole response — structured error code first, headers second,
//! status last — classifies it into a cause and a scope, and decides what to
//! do next under a policy, given an explicit `now` and a seedable random
//! source. No clock reads, sleeps, sockets, threads or async live here.
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
//! of one attempt; [`case`] evaluates the decision-case fixtures.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod admit;
pub mod case;
pub mod classify;
pub mod decide;
pub mod decision;
pub mod explain;
pub mod job;
pub mod note;
pub mod parse;
pub mod record;
pub mod time;
pub mod usage;
pub mod vocab;

pub use decision::{Action, Decision};
pub use note::Note;
pub use time::{Instant, Now};
pub use usage::Usage;
pub use vocab::{ActionKind, Cause, Dimension, GiveUpReason, Provider, Scope};
