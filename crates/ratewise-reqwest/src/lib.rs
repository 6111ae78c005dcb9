//! # ratewise-reqwest
//!
//! ratewise for the Rust clients that call LLM APIs through `reqwest`:
//!
//! * [`RatewiseMiddleware`], a `reqwest_middleware::Middleware`;
//! * `OpenAiLayer` (feature `async-openai`), async-openai's tower service
//!   layer for `Client::with_http_service`;
//! * rig (feature `rig`): rig's provider clients take a
//!   `reqwest_middleware::ClientWithMiddleware` through rig-reqwest's
//!   `ReqwestMiddlewareClient`, so the middleware is the integration
//!   (rig-agent's agents over it).
//!
//! Each call is one job of a [`RetryLayer`](ratewise_tower::RetryLayer):
//! the same store (in memory or Redis), key fingerprinting and policy as
//! the tower layer and the proxy.
//!
//! Supported versions: reqwest 0.13, reqwest-middleware 0.5,
//! async-openai 0.43, rig-core / rig-reqwest / rig-agent 0.44.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod job;
mod middleware;
#[cfg(feature = "async-openai")]
mod openai;

/// The async-openai this crate is built against.
#[cfg(feature = "async-openai")]
pub use async_openai;
pub use job::{Outcome, ACTION_HEADER};
pub use middleware::RatewiseMiddleware;
#[cfg(feature = "async-openai")]
pub use openai::{OpenAiLayer, OpenAiService};
pub use ratewise_tower;
/// The reqwest and reqwest-middleware this crate is built against.
pub use {reqwest, reqwest_middleware};
/// The rig crates this crate is built against.
#[cfg(feature = "rig")]
pub use {rig_agent, rig_core, rig_reqwest};

/// The `ratewise_tower::Error` inside a `reqwest_middleware::Error` that
/// ended with no answer to give — deferred or past the deadline before a
/// send, or a key stopped by an answer this middleware never saw (another
/// process's, through a shared store): its decision, its attempts. A key
/// stopped by an answer it did see is `Ok` with that answer again.
pub fn ratewise_error(error: &reqwest_middleware::Error) -> Option<&ratewise_tower::Error> {
    match error {
        reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<ratewise_tower::Error>(),
        reqwest_middleware::Error::Reqwest(_) => None,
    }
}

/// The `ratewise_tower::Error` inside an `OpenAIError` from
/// [`OpenAiLayer`] for a job that ended with no answer to give.
#[cfg(feature = "async-openai")]
pub fn openai_ratewise_error(
    error: &async_openai::error::OpenAIError,
) -> Option<&ratewise_tower::Error> {
    match error {
        async_openai::error::OpenAIError::Boxed(e) => e.downcast_ref::<ratewise_tower::Error>(),
        _ => None,
    }
}
