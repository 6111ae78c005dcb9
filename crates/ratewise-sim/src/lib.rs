//! # ratewise-sim
//!
//! A deterministic discrete-event simulation of an application sending a
//! workload to a rate-limited LLM provider, with four client strategies
//! side by side: `ratewise` (the default policy), `sdk-naive`,
//! `backoff-only` and `rpm-only`, and a yardstick, `oracle`, that reads
//! the provider's true state and sends each job the first instant it
//! fits (the best any client could do; [`targets`] measures ratewise's
//! goodput against it). It is the engine of `ratewise simulate`.
//!
//! * The provider is the mock's pure [`ProviderModel`](ratewise_mock::model::ProviderModel)
//!   (continuous buckets holding the scenario's `capacity_seconds` of
//!   refill, output charged from `max_tokens` then corrected, rejected
//!   requests counted when the scenario says so, acceleration limit, spend
//!   cap, injected faults), and every answer is
//!   rendered by the mock's renderer into the status, headers and body the
//!   mock server sends. So the simulated provider follows the mock's rules,
//!   and clients read real responses.
//! * The `ratewise` strategy reads them with the real
//!   `classify_response` → `decide` → admission `Controller` path, told the
//!   limits only when the scenario sets `limits.configured` (else it learns
//!   them from the headers, or, where the scenario's provider is `silent`
//!   and sends none, from its 429s).
//! * Time is virtual: an hour of traffic takes milliseconds, and a run is a
//!   pure function of the scenario (its seed included).
//! * Jobs may carry workloads (a level, a flow, a weight: a scenario's
//!   `groups`), and the `ratewise` strategy and the oracle order their
//!   waiting jobs with the core's queue discipline; the tenants family
//!   ([`TENANTS`]) and its [`tenants`] figures measure it.
//!
//! ```
//! use ratewise_sim::{simulate, Scenario, Strategy};
//! let mut scenario = Scenario::default_scenario();
//! scenario.jobs.count = 30; // keep the doc test quick
//! let report = simulate(&scenario, Strategy::Ratewise, &mut |_done, _total| {});
//! assert_eq!(report.jobs_lost, 0);
//! assert_eq!(report.jobs_total, 30);
//! println!("{}", serde_json::to_string(&report).unwrap());
//! ```
//!
//! Modules: [`scenario`] (files and their fields), [`workload`] (the jobs),
//! [`provider`] (the simulated provider), [`engine`] (the event loop),
//! [`strategy`] (the clients), [`metrics`] (definitions of every figure),
//! [`table`] and [`plot`] (output), [`targets`] (the claims a shipped
//! scenario must meet), [`tenants`] (per-flow and per-level figures).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod engine;
pub mod matrix;
pub mod metrics;
pub mod plot;
pub mod provider;
#[cfg(test)]
mod readme;
pub mod scenario;
pub mod strategy;
pub mod table;
pub mod targets;
pub mod tenants;
pub mod workload;

pub use engine::Terminal;
pub use metrics::Report;
pub use scenario::{Scenario, ScenarioError, DEFAULT_SCENARIO, SHIPPED, TENANTS};
pub use strategy::{simulate, Strategy};
