//! Stop state: money and credentials stop a key until a known instant or
//! until a human calls `resume`.

use crate::time::Instant;
use crate::vocab::Cause;
use std::time::SystemTime;

/// Why and until when a key is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stop {
    /// What stopped it (`spend_cap`, `billing`, `user_limit`, `authentication`…).
    pub cause: Cause,
    /// Wall-clock end, when known (e.g. a monthly cap's reset).
    pub until: Option<SystemTime>,
    /// The same end on the monotonic clock.
    pub until_instant: Option<Instant>,
}

impl Stop {
    /// Whether the stop has lifted by itself at `now`.
    pub(crate) fn expired(&self, now: Instant) -> bool {
        matches!(self.until_instant, Some(t) if now >= t)
    }

    /// Merges a second stop into this one: the later (or open-ended) end
    /// wins, so a billing stop is never shortened by a spend-cap reset.
    pub(crate) fn merge(&mut self, other: Stop) {
        match (self.until_instant, other.until_instant) {
            (None, _) => {}
            (Some(_), None) => *self = other,
            (Some(a), Some(b)) if b > a => *self = other,
            _ => {}
        }
    }
}
