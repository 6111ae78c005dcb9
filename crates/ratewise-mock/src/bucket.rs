//! A continuously refilled token bucket with a per-minute limit, in
//! provider time.
//!
//! The level refills at `limit / 60` per second up to `limit`. A request is
//! admitted only when every amount it needs is available; the level may go
//! below zero only when an end-of-request correction charges more than was
//! reserved (the provider's rule for output tokens).

use ratewise_core::Instant;
use std::time::Duration;

/// Longest wait a bucket reports (a limit of 0 never refills).
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// One per-minute bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    limit: u64,
    level: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket of `limit` per minute at `now`.
    pub fn per_minute(limit: u64, now: Instant) -> Self {
        Bucket {
            limit,
            level: limit as f64,
            at: now,
        }
    }

    /// The per-minute limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    fn per_sec(&self) -> f64 {
        self.limit as f64 / 60.0
    }

    fn refill(&mut self, now: Instant) {
        if now > self.at {
            let dt = (now - self.at).as_secs_f64();
            self.level = (self.level + dt * self.per_sec()).min(self.limit as f64);
            self.at = now;
        }
    }

    /// Whole units available at `now` (never negative).
    pub fn remaining(&mut self, now: Instant) -> u64 {
        self.refill(now);
        self.level.max(0.0).floor() as u64
    }

    /// Time until `amount` is available (an amount above the limit waits for
    /// a full bucket); zero when it already is.
    pub fn wait_for(&mut self, amount: u64, now: Instant) -> Duration {
        self.refill(now);
        if self.limit == 0 && amount > 0 {
            return MAX_WAIT;
        }
        let need = (amount.min(self.limit) as f64) - self.level;
        self.wait_secs(need)
    }

    /// Time until the bucket is full again.
    pub fn until_full(&mut self, now: Instant) -> Duration {
        self.refill(now);
        self.wait_secs(self.limit as f64 - self.level)
    }

    fn wait_secs(&self, need: f64) -> Duration {
        if need <= 0.0 {
            return Duration::ZERO;
        }
        if self.limit == 0 {
            return MAX_WAIT;
        }
        Duration::try_from_secs_f64(need / self.per_sec())
            .unwrap_or(MAX_WAIT)
            .min(MAX_WAIT)
    }

    /// Does `amount` fit now? (An amount above the limit never fits.)
    pub fn fits(&mut self, amount: u64, now: Instant) -> bool {
        self.refill(now);
        amount as f64 <= self.level
    }

    /// Takes `amount` (may drive the level negative).
    pub fn take(&mut self, amount: u64, now: Instant) {
        self.refill(now);
        self.level -= amount as f64;
    }

    /// Gives back `amount`, up to the limit.
    pub fn give_back(&mut self, amount: u64, now: Instant) {
        self.refill(now);
        self.level = (self.level + amount as f64).min(self.limit as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refills_continuously_per_minute() {
        let t0 = Instant::ZERO;
        let mut b = Bucket::per_minute(60, t0);
        b.take(60, t0);
        assert_eq!(b.remaining(t0), 0);
        assert_eq!(b.wait_for(1, t0), Duration::from_secs(1));
        let t30 = Instant::from_millis(30_000);
        assert_eq!(b.remaining(t30), 30);
        assert_eq!(b.until_full(t30), Duration::from_secs(30));
        assert_eq!(b.remaining(Instant::from_millis(600_000)), 60);
    }

    #[test]
    fn corrections_can_refund_or_overdraw() {
        let t0 = Instant::ZERO;
        let mut b = Bucket::per_minute(100, t0);
        b.take(100, t0);
        b.give_back(70, t0);
        assert_eq!(b.remaining(t0), 70);
        b.take(90, t0);
        assert_eq!(b.remaining(t0), 0);
        assert!(!b.fits(1, t0));
        let w = b.wait_for(1, t0).as_secs_f64(); // 21 units at 100/60 per s
        assert!((w - 12.6).abs() < 1e-6, "{w}");
        assert!(!Bucket::per_minute(10, t0).fits(11, t0));
        assert_eq!(Bucket::per_minute(0, t0).wait_for(1, t0), MAX_WAIT);
    }
}
