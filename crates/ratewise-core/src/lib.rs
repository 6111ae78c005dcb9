//! # ratewise-core
//!
//! The sans-IO heart of ratewise: bytes in, decisions out. It parses a
//! provider's response (status, headers, error body), classifies it into a
//! cause and a scope, and decides what to do next under a policy, given an
//! explicit `now` and a seedable random source. No clock reads, sleeps,
//! sockets, threads or async live here.
//!
//! Data flows one way: `parse` → `classify` → `decide` → (admission) → the
//! caller acts.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod case;
pub mod classify;
pub mod decide;
pub mod decision;
pub mod explain;
pub mod parse;
pub mod record;
pub mod time;
pub mod usage;
pub mod vocab;

pub use decision::{Action, Decision};
pub use time::{Instant, Now};
pub use usage::Usage;
pub use vocab::{ActionKind, Cause, Dimension, GiveUpReason, Provider, Scope};
