//! # ratewise
//!
//! Read every LLM API response whole and act on it: pace, retry, defer,
//! stop. This facade re-exports the member crates by feature:
//!
//! - [`core`] (always): the sans-IO parse → classify → decide pipeline.
//! - [`streaming`] (feature `streaming`, on by default): SSE decoding,
//!   provider stream interpreters, the commit point and stream outcomes.
//! - `tower` (feature `tower`): `RetryLayer` / `RetryService`, the one
//!   retry owner for any tower HTTP client service. The runnable examples
//!   (`cargo run --example batch --features tower`, `proxy`, `worker`)
//!   use it against the in-process mock provider.
//! - `reqwest` (feature `reqwest`; `async-openai`, `rig` for those
//!   clients): `RatewiseMiddleware` for reqwest-middleware, `OpenAiLayer`
//!   for async-openai, rig through its middleware client
//!   (`cargo run --example reqwest --features reqwest`, `async_openai`,
//!   `rig`).
//! - `redis` (feature `redis`): the admission store on Redis, so every
//!   process using a key shares its limits, pauses and stops.
//!
//! ```
//! use ratewise::core::classify::{classify_transport, TransportFailure};
//! use ratewise::core::{Cause, Provider};
//!
//! let c = classify_transport(Provider::Openai, TransportFailure::ResetAfterSend);
//! assert_eq!(c.cause, Cause::OutcomeUnknown); // sent, no answer: never silently retried
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub use ratewise_core as core;

#[cfg(feature = "streaming")]
pub use ratewise_streaming as streaming;

#[cfg(feature = "tower")]
pub use ratewise_tower as tower;

#[cfg(feature = "redis")]
pub use ratewise_redis as redis;

#[cfg(feature = "reqwest")]
pub use ratewise_reqwest as reqwest;

/// The workspace README's and the guides' Rust blocks, compiled and run as
/// doc tests by `cargo test --workspace --all-features`: what a newcomer
/// copies works. They need every client integration, hence the features.
#[cfg(all(
    doctest,
    feature = "tower",
    feature = "redis",
    feature = "async-openai",
    feature = "rig"
))]
mod guides {
    #[doc = include_str!("../README.md")]
    pub struct Readme;
    #[doc = include_str!("../docs/architecture.md")]
    pub struct Architecture;
    #[doc = include_str!("../docs/benchmarks.md")]
    pub struct Benchmarks;
    #[doc = include_str!("../docs/clients.md")]
    pub struct Clients;
    #[doc = include_str!("../docs/development.md")]
    pub struct Development;
    #[doc = include_str!("../docs/pacing.md")]
    pub struct Pacing;
    #[doc = include_str!("../docs/providers.md")]
    pub struct Providers;
    #[doc = include_str!("../docs/proxy.md")]
    pub struct Proxy;
    #[doc = include_str!("../docs/run.md")]
    pub struct Run;
}
