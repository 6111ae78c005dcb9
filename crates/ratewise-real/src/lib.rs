//! # ratewise-real
//!
//! `ratewise simulate --real`: a scenario run end to end, the same
//! scenario the simulation runs in virtual time, so the two can be
//! compared figure by figure.
//!
//! * The provider is the mock server ([`ratewise_mock::MockServer`]) on
//!   127.0.0.1, configured from the scenario exactly as the simulation
//!   configures its provider model, on a time scale where one provider
//!   minute lasts [`RealOptions::seconds_per_minute`] real seconds.
//! * The client is `RetryLayer` (the simulation's `ratewise` strategy
//!   configuration) → [`hints::ProviderTimeLayer`] → hyper-util's legacy
//!   client, on a [`ScaledClock`] in provider time.
//! * The figures come from the simulation's own `Recorder`
//!   ([`ratewise_sim::metrics`]), so both runs are measured by one
//!   definition; [`agree`] states the tolerances within which they must
//!   agree.
//!
//! Only the `ratewise` strategy has a real mode; the other strategies are
//! simulated only.
//!
//! Why a crate of its own: the simulation stays a pure, synchronous,
//! dependency-light library (no tokio, hyper or tower); this crate holds
//! everything with IO.
//!
//! ```no_run
//! use ratewise_real::{agree, run_real, RealOptions};
//! use ratewise_sim::{simulate, Scenario, Strategy};
//! let mut scenario = Scenario::default_scenario();
//! scenario.jobs.count = 100;
//! let virt = simulate(&scenario, Strategy::Ratewise, &mut |_, _| {});
//! let real = run_real(&scenario, &RealOptions::default(), &mut |_, _| {}).unwrap();
//! for c in agree::compare(&virt, &real.report) {
//!     println!("{c}");
//! }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod agree;
pub mod clock;
mod events;
pub mod hints;
mod job;
pub mod run;

pub use clock::ScaledClock;
pub use run::{run_real, RealError, RealOptions, RealRun, MIN_BUCKET_REAL, STRATEGY};
