//! # ratewise-mock
//!
//! A fault-injecting mock LLM provider that answers like the real APIs:
//! Anthropic `POST /v1/messages` and OpenAI `POST /v1/chat/completions`,
//! JSON and SSE, with the providers' headers, error bodies, rate limits,
//! acceleration limit, spend cap, billing errors and injected faults.
//!
//! * [`model`] — the pure provider model (`handle(meta, now) -> Answer`),
//!   reusable by a discrete-event simulator.
//! * [`render`] — pure rendering of answers into provider-shaped bytes.
//! * [`server`] — the hyper server: [`MockServer::start`] on an ephemeral
//!   loopback port, records of every request, runtime controls.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod bucket;
pub mod clock;
pub mod config;
pub mod faults;
pub mod model;
pub mod tokens;

pub use config::{Limits, MockConfig};
