//! Who a waiting job belongs to: its priority level and its flow, and the
//! place it keeps in its flow.

use super::levels::LevelId;
use crate::time::Instant;

/// A job's place in its queue: its arrival first, then a sequence number
/// the driver takes when the job first joins. A job keeps one place for
/// its whole life, so a retry keeps its arrival order within its (level,
/// flow) ahead of later arrivals (DESIGN principle 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Place {
    /// When the job arrived.
    pub arrived: Instant,
    /// Breaks ties among equal arrivals, in joining order.
    pub seq: u64,
}

/// The most a flow's weight counts: weights are ratios between a few
/// tenants, and a bound keeps one flow's virtual time from standing still.
pub const MAX_WEIGHT: u32 = 1_000_000;

/// The most bytes of a flow's name kept: a longer name is cut (at a
/// character boundary), so a caller's text never grows the queue's memory
/// beyond a bound per waiting job.
pub const MAX_FLOW_NAME: usize = 128;

/// What a job is to the queue discipline: its priority level, the flow
/// (the tenant) it is shared fairly within, the flow's weight, and the
/// flow's floor.
///
/// ```
/// use ratewise_core::admit::fair::{Levels, Workload};
///
/// let levels = Levels::default();
/// let w = Workload::new(levels.level("bulk").unwrap(), "tenant-a").weight(2);
/// assert_eq!(w.flow, "tenant-a");
/// assert_eq!(w.weight, 2);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// The job's priority level.
    pub level: LevelId,
    /// Its flow: jobs of one flow share their level's capacity as one
    /// tenant, oldest first among themselves.
    pub flow: String,
    /// The flow's weight within its level (`1..=MAX_WEIGHT`): a flow of
    /// weight 2 gets twice the cost of a flow of weight 1 while both
    /// wait.
    pub weight: u32,
    /// The flow's floor: the share of its level's admitted cost it keeps
    /// while it has work waiting, whatever the weights (`0`: none).
    pub floor: f64,
}

impl Workload {
    /// A job of `flow` at `level`, weight 1, no floor.
    pub fn new(level: LevelId, flow: impl Into<String>) -> Workload {
        let mut flow = flow.into();
        if flow.len() > MAX_FLOW_NAME {
            let mut cut = MAX_FLOW_NAME;
            while !flow.is_char_boundary(cut) {
                cut -= 1;
            }
            flow.truncate(cut);
        }
        Workload {
            level,
            flow,
            weight: 1,
            floor: 0.0,
        }
    }

    /// The same, with the flow's weight `w` (clamped to `1..=MAX_WEIGHT`).
    #[must_use]
    pub fn weight(mut self, w: u32) -> Workload {
        self.weight = w.clamp(1, MAX_WEIGHT);
        self
    }

    /// The same, with the flow's floor `share` of its level (clamped to
    /// `0..=1`).
    #[must_use]
    pub fn floor(mut self, share: f64) -> Workload {
        self.floor = if share.is_finite() {
            share.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self
    }
}
