//! Workspace-internal: used by ratewise's own crates; not part of the public API and not covered by semver.
//!
//! Users order their jobs with the tower layer's `Workload` extension and
//! its `Levels` (`ratewise_tower::{Workload, Levels}`); this is the
//! sans-IO discipline the layer's queue (and the simulator) drives.
//!
//! The admission queue's discipline: priority levels, flows shared fairly
//! by cost, floors (DESIGN principles 13 and 20).
//!
//! Many workloads share one key's limits. A driver (the tower layer's
//! queue, a simulator) keeps one [`Discipline`] per scope; each waiting
//! job joins it with its [`Workload`] (level and flow) and its [`Place`]
//! (arrival), and only the discipline's [`head`](Discipline::head) asks
//! the controller for admission. The driver tells it when a job is
//! [`admitted`](Discipline::admitted) (with the [`Cost`] of its
//! reservation) and when that reservation
//! [`settled`](Discipline::settled).
//!
//! * [`levels`](Levels) — ordered names, highest first, each lower level
//!   with a minimum share it keeps (default `interactive`, `default`,
//!   `bulk`; 10 %).
//! * [`cost`](Cost) — a job's dominant share of the key's limits.
//! * [`workload`](Workload) — a job's level, flow, weight and floor, and
//!   its [`Place`].
//! * [`discipline`](Discipline) — whose turn it is.
//!
//! Sans-IO like the rest of the core: no clock is read, `now` is passed
//! in, and the same calls always give the same turns.

mod cost;
mod discipline;
mod levels;
mod workload;

#[cfg(test)]
mod sim_tests;
#[cfg(test)]
mod tests;

pub use cost::{Cost, WHOLE_LIMIT};
pub use discipline::{Charged, Discipline, FlowView, LevelView, DEFAULT_WINDOW, MAX_IDLE_FLOWS};
pub use levels::{LevelId, Levels, DEFAULT_MIN_SHARE, MAX_LEVELS};
pub use workload::{Place, Workload, MAX_FLOW_NAME, MAX_WEIGHT};
