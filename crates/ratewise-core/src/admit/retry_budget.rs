//! Queue-wide retry budget: retries may not exceed a ratio of first
//! attempts over a sliding window.
//!
//! In the spirit of gRPC retry throttling and tower's `TpsBudget`, but
//! sans-IO: the window is `slots` equal slots of time; a retry is allowed
//! when `retries < min_retries + ratio · first_attempts` counted over the
//! current and previous slots (the window). `min_retries` lets a quiet queue
//! still retry a little.

use crate::time::Instant;
use std::time::Duration;

/// Number of slots in the window.
pub(crate) const SLOTS: usize = 10;

/// Retry budget parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryBudgetConfig {
    /// Length of the sliding window (default 10 s).
    pub window: Duration,
    /// Retries allowed per first attempt, per-mille (default 200 = 20 %).
    pub ratio_permille: u32,
    /// Retries always allowed within a window (default 10).
    pub min_retries: u32,
}

impl Default for RetryBudgetConfig {
    fn default() -> Self {
        RetryBudgetConfig {
            window: Duration::from_secs(10),
            ratio_permille: 200,
            min_retries: 10,
        }
    }
}

/// The budget's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RetryBudget {
    cfg: RetryBudgetConfig,
    slot_ns: u128,
    current: u128,
    /// `current % SLOTS`.
    current_index: usize,
    /// Start of the slot after `current`: the fast path skips the division.
    next_slot_at: Instant,
    firsts: [u64; SLOTS],
    retries: [u64; SLOTS],
    sum_firsts: u64,
    sum_retries: u64,
}

impl RetryBudget {
    /// An empty budget.
    pub(crate) fn new(cfg: RetryBudgetConfig) -> Self {
        RetryBudget {
            cfg,
            slot_ns: (cfg.window.as_nanos() / SLOTS as u128).max(1),
            current: 0,
            current_index: 0,
            next_slot_at: Instant::ZERO,
            firsts: [0; SLOTS],
            retries: [0; SLOTS],
            sum_firsts: 0,
            sum_retries: 0,
        }
    }

    /// The slot index of an instant (absolute).
    pub(crate) fn slot_of(&self, now: Instant) -> u128 {
        now.since_origin().as_nanos() / self.slot_ns
    }

    #[inline]
    fn advance(&mut self, now: Instant) {
        if now < self.next_slot_at {
            return;
        }
        let slot = self.slot_of(now);
        self.next_slot_at = Instant::from_origin(super::bucket::duration_from_nanos(
            (slot + 1).saturating_mul(self.slot_ns),
        ));
        if slot <= self.current {
            return;
        }
        let steps = (slot - self.current).min(SLOTS as u128) as usize;
        for k in 1..=steps {
            let i = ((self.current + k as u128) % SLOTS as u128) as usize;
            self.sum_firsts -= self.firsts[i];
            self.sum_retries -= self.retries[i];
            self.firsts[i] = 0;
            self.retries[i] = 0;
        }
        self.current = slot;
        self.current_index = (slot % SLOTS as u128) as usize;
    }

    /// (first attempts, retries) in the window ending at `now`.
    pub(crate) fn counts(&mut self, now: Instant) -> (u64, u64) {
        self.advance(now);
        (self.sum_firsts, self.sum_retries)
    }

    /// Whether one more retry fits.
    pub(crate) fn can_retry(&mut self, now: Instant) -> bool {
        self.advance(now);
        let allowed = u128::from(self.cfg.min_retries) * 1000
            + u128::from(self.sum_firsts) * u128::from(self.cfg.ratio_permille);
        u128::from(self.sum_retries + 1) * 1000 <= allowed
    }

    /// Records a first attempt.
    #[inline]
    pub(crate) fn record_first(&mut self, now: Instant) {
        self.advance(now);
        let i = self.current_index;
        self.firsts[i] += 1;
        self.sum_firsts += 1;
    }

    /// Records a retry.
    pub(crate) fn record_retry(&mut self, now: Instant) {
        self.advance(now);
        let i = self.current_index;
        self.retries[i] += 1;
        self.sum_retries += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_and_floor() {
        let mut b = RetryBudget::new(RetryBudgetConfig {
            window: Duration::from_secs(10),
            ratio_permille: 500,
            min_retries: 1,
        });
        let t = Instant::ZERO;
        for _ in 0..4 {
            b.record_first(t);
        }
        // 1 + 0.5 × 4 = 3 retries.
        for _ in 0..3 {
            assert!(b.can_retry(t));
            b.record_retry(t);
        }
        assert!(!b.can_retry(t));
        // The window slides: after 10 s everything has expired.
        assert!(b.can_retry(Instant::from_millis(10_000)));
        assert_eq!(b.counts(Instant::from_millis(10_000)), (0, 0));
    }
}
