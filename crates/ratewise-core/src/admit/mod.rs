//! Admission control: send at the pace the provider allows, so that 429s
//! rarely happen, and stop cleanly when money runs out.
//!
//! Sans-IO like the rest of the core: every operation takes the present as
//! an argument ([`Now`](crate::Now)), jitter comes from a seeded
//! `fastrand::Rng`, nothing sleeps or spawns.
//!
//! * [`bucket`] — continuously refilled token buckets, integer arithmetic.
//! * [`limits`] — per-minute limits, configured or learned from headers.
//! * [`model_class`] — which models share a bucket.
//! * [`estimate`] — input and output estimates before a send.
//! * [`reservation`] — reservations and the conservation ledger.
//! * [`ramp`], [`retry_budget`], [`spend`], [`stop`] — one idea each.
//! * [`controller`] — the [`Controller`] composing them per (key, class).
//! * [`shared`] — the `&self` seam ([`AdmissionState`]) a Redis-backed store
//!   implements with the same semantics, and its in-memory [`Shared`] (the
//!   controller behind a mutex).
//!
//! ```
//! use ratewise_core::admit::{Admission, AdmitRequest, Config, Controller, Limits};
//! use ratewise_core::{Instant, Now, Usage};
//! use std::time::{Duration, SystemTime};
//!
//! let mut c = Controller::new(Config {
//!     limits: Limits { requests: Some(60), output_tokens: Some(80_000), ..Limits::NONE },
//!     ..Config::default()
//! });
//! let target = c.target("team-a", "claude-sonnet-4-5");
//! let now = Now::new(Instant::ZERO, SystemTime::UNIX_EPOCH);
//! let mut req = AdmitRequest::new(target);
//! req.max_tokens = Some(1024);
//! let res = c.admit(&req, now).go().expect("cold start admits one");
//! // A second request waits: 60 RPM at the 10 % ramp start is one per 10 s.
//! match c.admit(&req, now) {
//!     Admission::Wait { until, .. } => assert_eq!(until, Instant::from_millis(10_000)),
//!     other => panic!("{other:?}"),
//! }
//! let usage = Usage { input_tokens: 12, output_tokens: 300, ..Usage::default() };
//! c.settle(res, &usage, now.after(Duration::from_millis(800)));
//! assert!(c.ledger().conserved());
//! ```

pub mod bucket;
pub mod controller;
pub mod estimate;
pub mod limits;
pub mod model_class;
pub mod ramp;
pub mod reservation;
pub mod retry_budget;
pub mod shared;
pub mod spend;
pub mod stop;

pub use controller::{
    Admission, AdmitRequest, Config, Controller, KeyLimits, PriceId, ScopeSnapshot, Target,
    WaitReason, EDGE_MARGIN, RESET_HORIZON, RESET_SLACK,
};
pub use estimate::{MaxTokens, OutputEstimator};
pub use limits::{Burst, Limits};
pub use model_class::ModelClasses;
pub use ramp::RampConfig;
pub use reservation::{Amounts, Ledger, Reservation, ReservationId, Sent};
pub use retry_budget::RetryBudgetConfig;
pub use shared::{AdmissionState, Guard, Shared};
pub use spend::{Price, PriceTable, SpendConfig};
pub use stop::Stop;

/// A (key, model class) scope, as resolved by [`Controller::target`] or
/// [`Controller::scope_of`]. Opaque: an index into its controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScopeId(pub(crate) u32);
