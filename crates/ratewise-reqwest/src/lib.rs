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
//! ## The default policy, as a caller sees it
//!
//! `RatewiseMiddleware::new(Policy::default())` gives every call **no
//! deadline** and an **in-line limit of 60 s in total**
//! ([`Policy::max_inline_wait`](ratewise_tower::Policy::max_inline_wait)):
//! `send().await` is held waiting — for admission (the key's pace, a pause
//! after a `429`, a cold start's first answer), for its turn behind the
//! calls sent before it, and for retry delays — at most 60 s altogether,
//! the sends themselves not counted. A wait that would pass that is not
//! begun: the call returns at once, deferred, with the earliest time to
//! send it again. Up to 3 sends per call. What `send().await` returns:
//!
//! | outcome | what the caller gets |
//! |---|---|
//! | success | `Ok(response)`, `x-ratewise-action: done` |
//! | deferred after an answer (the wait for a retry — a `429`'s `retry-after`, a backoff, admission — would pass the limit) | `Ok` with that answer, `x-ratewise-action: defer`; [`Outcome::until`] is the earliest time |
//! | deferred before any send (its turn would come past the limit) | `Err`; [`ratewise_error`]`(&e)` is [`is_defer`](ratewise_tower::Error::is_defer), [`until`](ratewise_tower::Error::until) the earliest time |
//! | stopped (spend cap, billing, credentials) | `Ok` with the answer that stopped the key, `x-ratewise-action: stop_queue`, nothing more sent until [`resume`](ratewise_tower::RetryLayer::resume) (another process's stop: `Err`, [`is_stop_queue`](ratewise_tower::Error::is_stop_queue)) |
//! | an error answer not retried or retried out (`400`, the last `429`) | `Ok` with that answer, `x-ratewise-action: fail` / `give_up` / ... |
//! | the last send failed in transport | `Err(reqwest_middleware::Error::Reqwest)`, kinds intact |
//!
//! A call that should wait longer carries a deadline
//! ([`Deadline`](ratewise_tower::Deadline) by `with_extension`, or
//! `RetryLayer::builder().deadline(..)` for all, through
//! [`RatewiseMiddleware::from_layer`]): it waits as long as its deadline
//! allows, is never deferred, and ends `give_up(deadline)` as soon as it
//! cannot be sent in time. A runnable example is at
//! [`RatewiseMiddleware::new`].
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
pub use job::{Outcome, StopEvidence, ACTION_HEADER};
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
