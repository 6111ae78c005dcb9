//! Admission control: send at the pace the provider allows, so that 429s
//! rarely happen, and stop cleanly when money runs out.
//!
//! Sans-IO like the rest of the core: every operation takes the present as
//! an argument ([`Now`](crate::Now)), jitter comes from a seeded
//! `fastrand::Rng`, nothing sleeps or spawns.
//!
//! * `bucket` — continuously refilled token buckets, integer arithmetic.
//! * [`Limits`] — per-minute limits, configured or learned from headers.
//! * [`ModelClasses`] — which models share a bucket.
//! * [`OutputEstimator`] and [`MaxTokens`] — input and output estimates
//!   before a send.
//! * [`Profile`] — what each provider documents about its signals, with
//!   the sources quoted.
//! * [`Reservation`] and [`Ledger`] — reservations and their ledger
//!   (every one ended, none ended twice).
//! * the ramp ([`RampConfig`]), the retry budget, the spend budget and
//!   stops ([`Stop`]) — one idea each.
//! * [`Controller`] — composing them per (key, class).
//! * [`fair`] — the admission queue's discipline: priority levels, flows
//!   shared fairly by cost, floors.
//! * [`Store`] — the seam where the shared state lives (async-capable, one
//!   step per job event), and its in-memory [`Shared`] (the controller
//!   behind a mutex); `store_kit` (workspace-internal), the one seam for a
//!   store that shares a controller's state between processes.
//!
//! ```
//! use ratewise_core::admit::{Admission, AdmitRequest, Config, Controller, Limits};
//! use ratewise_core::{Instant, Now, Usage};
//! use std::time::{Duration, SystemTime};
//!
//! let mut config = Config::default();
//! config.limits = Limits { requests: Some(60), output_tokens: Some(80_000), ..Limits::NONE };
//! let mut c = Controller::new(config);
//! let target = c.target("team-a", "claude-sonnet-4-5");
//! let now = Now::new(Instant::ZERO, SystemTime::UNIX_EPOCH);
//! let mut req = AdmitRequest::new(target);
//! req.max_tokens = Some(1024);
//! let res = c.admit(&req, now).go().expect("cold start admits one");
//! // A second request waits. 60 RPM at the 10 % ramp start would be one
//! // per 10 s, but the ramp grows every calm second, and the wait is
//! // predicted at the pace it will have when the request goes.
//! match c.admit(&req, now) {
//!     Admission::Wait { until, .. } => {
//!         assert!(until > Instant::ZERO && until < Instant::from_millis(10_000))
//!     }
//!     other => panic!("{other:?}"),
//! }
//! let usage = Usage { input_tokens: 12, output_tokens: 300, ..Usage::default() };
//! c.settle(res, &usage, now.after(Duration::from_millis(800)));
//! assert!(c.ledger().is_clean());
//! ```

mod belief;
mod bucket;
mod controller;
mod estimate;
#[doc(hidden)]
pub mod fair;
mod limits;
mod model_class;
mod profile;
mod ramp;
mod reservation;
mod retry_budget;
mod shared;
mod spend;
#[doc(hidden)]
pub mod spend_budget;
mod stop;
mod store;
#[doc(hidden)]
pub mod store_kit;
mod table;

use store_kit::record;

pub use belief::EstimateState;
pub use belief::LimitSource;
pub use controller::{
    Admission, AdmitRequest, Config, Controller, KeyLimits, ScopeSnapshot, Target, WaitReason,
};
pub use estimate::{input_from_bytes, MaxTokens, OutputEstimator};
pub use limits::{Burst, Limits};
pub use model_class::ModelClasses;
pub use profile::{Profile, Rounding};
pub use ramp::RampConfig;
pub use reservation::PriceId;
pub use reservation::{Amounts, Ledger, Reservation, ReservationId, Sent};
pub use retry_budget::RetryBudgetConfig;
pub use shared::Shared;
pub use spend::{Price, PriceTable, SpendConfig, SpendTotals};
pub use stop::Stop;
pub use store::{Applied, End, Observed, Store, StoreFuture, Update, DEMAND_FRESH};

/// A (key, model class) scope, as resolved by [`Controller::target`] or
/// [`Controller::scope_of`]: an index into its controller (or a store's
/// own numbering, for a [`Store`] that keeps its own scopes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScopeId(pub(crate) u32);
