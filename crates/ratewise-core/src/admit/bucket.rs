//! Continuously refilled token bucket: pure integer arithmetic, no storage
//! policy, no clock.
//!
//! A bucket holds up to `capacity` units and refills at `limit` units per
//! minute, continuously: 60 per minute means one unit every second, never 60
//! at the top of the minute. The level is kept in *scaled units* — one unit
//! is `60 · 10¹² ` scaled units (nanoseconds per minute × 1000) — so that the
//! refill of one nanosecond at a rate factor of `permille`/1000 is exactly
//! `limit · permille` scaled units. There is no rounding and no drift,
//! whatever the rate.
//!
//! The level may go negative (debt): a settle that finds the actual usage
//! larger than the reservation charges the difference, and later takes wait
//! for the debt to refill.
//!
//! A take larger than the (effective) capacity would never fit; it goes when
//! the bucket is full and leaves a debt. So the burst over any window is at
//! most `capacity + (largest take − capacity)`: see [`Bucket::try_take`].

use crate::time::Instant;
use std::time::Duration;

/// Nanoseconds per minute.
pub const NS_PER_MIN: u128 = 60_000_000_000;
/// Scaled units per unit (token or request): ns/min × 1000 (per-mille rate).
pub const SCALE: i128 = (NS_PER_MIN * 1000) as i128;
/// Largest limit per minute a bucket accepts (10¹²): with it, every product
/// in the arithmetic fits an `i128` without overflow checks, so the hot path
/// needs no 128-bit multiplication with overflow (a slow library call).
pub const MAX_LIMIT: u64 = 1_000_000_000_000;

/// `amount` in scaled units: at most 2⁶⁴ × 2⁴⁶, far inside `i128`.
#[inline]
fn scaled(amount: u64) -> i128 {
    i128::from(amount) * SCALE
}

/// One continuously refilled bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    limit: u64,
    capacity: u64,
    permille: u32,
    /// Effective capacity in scaled units (capacity × permille, at least 1 unit).
    cap_scaled: i128,
    /// Refill per nanosecond, in scaled units.
    rate: i128,
    level: i128,
    /// Nanoseconds since the origin of the last refill (u64: 584 years).
    updated: u64,
}

/// An instant as nanoseconds since the origin, saturating (one multiply:
/// cheaper than `Duration` arithmetic on the hot path).
#[inline]
fn ns(t: Instant) -> u64 {
    let d = t.since_origin();
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}

impl Bucket {
    /// A full bucket refilling `limit` units per minute (at least 1) holding
    /// up to `capacity` units (at least 1), at full rate.
    pub fn new(limit: u64, capacity: u64, now: Instant) -> Self {
        Self::with_permille(limit, capacity, 1000, now)
    }

    /// A full bucket whose rate and capacity are scaled by `permille`/1000
    /// (clamped to 1..=1000): the ramp-up factor.
    pub fn with_permille(limit: u64, capacity: u64, permille: u32, now: Instant) -> Self {
        let mut b = Bucket {
            limit: limit.clamp(1, MAX_LIMIT),
            capacity: capacity.max(1),
            permille: permille.clamp(1, 1000),
            cap_scaled: 0,
            rate: 0,
            level: 0,
            updated: ns(now),
        };
        b.recompute();
        b.level = b.cap_scaled;
        b
    }

    fn recompute(&mut self) {
        let cap = (u128::from(self.capacity) * u128::from(self.permille)).div_ceil(1000);
        self.cap_scaled = (cap.max(1) as i128) * SCALE;
        self.rate = i128::from(self.limit) * i128::from(self.permille);
        if self.level > self.cap_scaled {
            self.level = self.cap_scaled;
        }
    }

    /// Units per minute at full rate.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Capacity at full rate.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The current rate factor in per-mille.
    pub fn permille(&self) -> u32 {
        self.permille
    }

    /// Capacity at the current rate factor (at least 1).
    pub fn effective_capacity(&self) -> u64 {
        (self.cap_scaled / SCALE) as u64
    }

    /// Adds the refill since the last update. Time that goes backwards is
    /// ignored (the caller's clock is monotonic by contract).
    #[inline]
    pub fn refill(&mut self, now: Instant) {
        let now = ns(now);
        if now > self.updated {
            // ≤ 2⁶⁴ ns × rate ≤ 2⁴⁰·1000 < 2¹²⁰: no overflow.
            let add = i128::from(now - self.updated) * self.rate;
            self.level = self.level.saturating_add(add).min(self.cap_scaled);
            self.updated = now;
        }
    }

    /// Whole units available now (negative while in debt).
    pub fn level(&mut self, now: Instant) -> i64 {
        self.refill(now);
        let units = self.level.div_euclid(SCALE);
        units.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// When `amount` would fit, after a [`refill`](Self::refill) at `now`:
    /// `None` when it fits now. An amount above the effective capacity fits
    /// once the bucket is full.
    #[inline]
    pub fn wait_for(&self, amount: u64, now: Instant) -> Option<Instant> {
        let need = scaled(amount).min(self.cap_scaled);
        if self.level >= need && ns(now) >= self.updated {
            None
        } else {
            // Refill starts at `updated`, which a pause may put in the future.
            let missing = need.saturating_sub(self.level).max(0) as u128;
            let wait_ns = missing.div_ceil(self.rate as u128);
            let from = ns(now).max(self.updated);
            Some(Instant::from_origin(duration_from_nanos(
                u128::from(from) + wait_ns,
            )))
        }
    }

    /// Removes `amount` regardless of the level (may leave a debt).
    #[inline]
    pub fn take(&mut self, amount: u64) {
        self.level = self.level.saturating_sub(scaled(amount));
    }

    /// Takes `amount` when it fits, else says when it will.
    ///
    /// ```
    /// use ratewise_core::admit::bucket::Bucket;
    /// use ratewise_core::Instant;
    /// // 60 per minute, capacity 1: one per second.
    /// let mut b = Bucket::new(60, 1, Instant::ZERO);
    /// assert!(b.try_take(1, Instant::ZERO).is_ok());
    /// assert_eq!(b.try_take(1, Instant::ZERO), Err(Instant::from_millis(1000)));
    /// assert!(b.try_take(1, Instant::from_millis(1000)).is_ok());
    /// ```
    pub fn try_take(&mut self, amount: u64, now: Instant) -> Result<(), Instant> {
        self.refill(now);
        match self.wait_for(amount, now) {
            None => {
                self.take(amount);
                Ok(())
            }
            Some(at) => Err(at),
        }
    }

    /// Returns `amount` units (a release, or a reservation larger than the
    /// actual usage); the level never exceeds the capacity.
    ///
    /// No refill is needed first: clamping at the capacity commutes with
    /// later non-negative additions (`min(c, min(c, l + p) + r) ==
    /// min(c, l + p + r)` for `r ≥ 0`), so a put-back may be applied before
    /// the refill it precedes in time. That keeps `settle` cheap.
    #[inline]
    pub fn put_back(&mut self, amount: u64, _now: Instant) {
        self.level = self
            .level
            .saturating_add(scaled(amount))
            .min(self.cap_scaled);
    }

    /// Charges `amount` more units (actual usage above the reservation).
    pub fn charge(&mut self, amount: u64, now: Instant) {
        self.refill(now);
        self.take(amount);
    }

    /// Empties the bucket (keeps any debt) and holds its refill until
    /// `until`: the server said it is exhausted and when to come back, so
    /// the backlog is released at the refill rate from then on, not as a
    /// burst of what would have refilled during the pause.
    pub fn drain_until(&mut self, until: Instant, now: Instant) {
        self.refill(now);
        self.level = self.level.min(0);
        if ns(until) > self.updated {
            self.updated = ns(until);
        }
    }

    /// Header sync: the server says `remaining` units are left. When that is
    /// lower than the local level by more than `dead_band` units, the
    /// server wins; otherwise nothing changes. The level is never raised, so
    /// values rounded to thousands cannot make it oscillate. Returns whether
    /// the level was lowered.
    pub fn sync_remaining(&mut self, remaining: u64, dead_band: u64, now: Instant) -> bool {
        self.lower_to(scaled(remaining), dead_band, now)
    }

    /// Header sync from a `-reset`: the server's bucket of `limit` units per
    /// minute is full again `until_full` from now, so — refilling at `limit`
    /// per minute — it holds about `limit · (1 min − until_full) / 1 min`
    /// units now (none when `until_full` is a minute or more). When that is
    /// lower than the local level by more than `dead_band` units, it wins;
    /// like [`sync_remaining`](Self::sync_remaining) it never raises the
    /// level. The local bucket then refills from there at its own rate (at
    /// most the server's), so a request needing `n` units is not admitted
    /// before the server's line `limit − rate · (reset − t)` reaches `n`.
    ///
    /// ```
    /// use ratewise_core::admit::bucket::Bucket;
    /// use ratewise_core::Instant;
    /// use std::time::Duration;
    /// // 60 per minute holding up to 10; the server is full in 57 s: 3 left.
    /// let mut b = Bucket::new(60, 10, Instant::ZERO);
    /// assert!(b.sync_reset(60, Duration::from_secs(57), 0, Instant::ZERO));
    /// assert_eq!(b.level(Instant::ZERO), 3);
    /// // A reset further away than before can only lower it again; a nearer
    /// // one (more capacity) never raises it.
    /// assert!(!b.sync_reset(60, Duration::from_secs(1), 0, Instant::ZERO));
    /// assert_eq!(b.level(Instant::ZERO), 3);
    /// ```
    pub fn sync_reset(
        &mut self,
        limit: u64,
        until_full: Duration,
        dead_band: u64,
        now: Instant,
    ) -> bool {
        let limit = limit.clamp(1, MAX_LIMIT);
        let left_ns = NS_PER_MIN.saturating_sub(until_full.as_nanos());
        // limit · 1000 scaled units per ns at full rate; ≤ 2⁴⁰·2¹⁰·2³⁶.
        let implied = i128::from(limit) * 1000 * left_ns as i128;
        self.lower_to(implied, dead_band, now)
    }

    fn lower_to(&mut self, target: i128, dead_band: u64, now: Instant) -> bool {
        self.refill(now);
        let band = scaled(dead_band);
        if self.level > target.saturating_add(band) {
            self.level = target;
            true
        } else {
            false
        }
    }

    /// Changes the limit and capacity (learned from headers or configured),
    /// keeping the level (clamped to the new capacity).
    pub fn set_limit(&mut self, limit: u64, capacity: u64, now: Instant) {
        self.refill(now);
        self.limit = limit.clamp(1, MAX_LIMIT);
        self.capacity = capacity.max(1);
        self.recompute();
    }

    /// Changes the rate factor (ramp-up), clamping the level to the new
    /// effective capacity so a cut never leaves a burst behind.
    pub fn set_permille(&mut self, permille: u32, now: Instant) {
        self.refill(now);
        self.permille = permille.clamp(1, 1000);
        self.recompute();
    }
}

/// Converts nanoseconds to a `Duration`, saturating.
pub fn duration_from_nanos(ns: u128) -> Duration {
    let secs = ns / 1_000_000_000;
    if secs > u128::from(u64::MAX) {
        Duration::MAX
    } else {
        Duration::new(secs as u64, (ns % 1_000_000_000) as u32)
    }
}

/// The capacity of a bucket of `limit` per minute holding `burst` worth of
/// refill: `ceil(limit · burst / 1 min)`, at least 1.
pub fn capacity_for(limit: u64, burst: Duration) -> u64 {
    let cap = (u128::from(limit) * burst.as_nanos()).div_ceil(NS_PER_MIN);
    cap.clamp(1, u128::from(u64::MAX)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    #[test]
    fn refill_is_continuous() {
        let mut b = Bucket::new(60_000, 1000, ms(0));
        assert!(b.try_take(1000, ms(0)).is_ok());
        // 60 000/min = 1 per ms.
        assert_eq!(b.level(ms(250)), 250);
        assert_eq!(b.try_take(500, ms(250)), Err(ms(500)));
    }

    #[test]
    fn oversized_take_waits_for_full_then_leaves_debt() {
        let mut b = Bucket::new(60, 10, ms(0));
        assert!(b.try_take(25, ms(0)).is_ok());
        assert_eq!(b.level(ms(0)), -15);
        // 25 s to refill to full (10 units from -15).
        assert_eq!(b.try_take(25, ms(0)), Err(ms(25_000)));
    }

    #[test]
    fn sync_only_lowers_and_respects_dead_band() {
        let mut b = Bucket::new(600_000, 10_000, ms(0));
        assert!(!b.sync_remaining(9_500, 1000, ms(0)));
        assert!(b.sync_remaining(5_000, 1000, ms(0)));
        assert_eq!(b.level(ms(0)), 5_000);
        assert!(!b.sync_remaining(5_999, 1000, ms(0)));
        assert!(!b.sync_remaining(4_100, 1000, ms(0)));
        assert_eq!(b.level(ms(0)), 5_000);
    }

    #[test]
    fn reset_implies_the_server_level_and_only_lowers() {
        // 30 000 per minute: 500 per second.
        let mut b = Bucket::new(30_000, 10_000, ms(0));
        // Full in 59 s: the server holds 500 now.
        assert!(b.sync_reset(30_000, Duration::from_secs(59), 0, ms(0)));
        assert_eq!(b.level(ms(0)), 500);
        // 2 000 fit 3 s later, when the server's line reaches them.
        assert_eq!(b.try_take(2_000, ms(0)), Err(ms(3_000)));
        // A reset a minute or more away: nothing left, never negative.
        let mut b = Bucket::new(60, 10, ms(0));
        assert!(b.sync_reset(60, Duration::from_secs(90), 0, ms(0)));
        assert_eq!(b.level(ms(0)), 0);
        // A near reset implies more than the local level: nothing changes.
        let mut b = Bucket::new(60, 10, ms(0));
        assert!(b.try_take(8, ms(0)).is_ok());
        assert!(!b.sync_reset(60, Duration::from_secs(1), 0, ms(0)));
        assert!(!b.sync_reset(60, Duration::ZERO, 0, ms(0)));
        assert_eq!(b.level(ms(0)), 2);
        // Within the dead band: nothing changes.
        let mut b = Bucket::new(30_000, 10_000, ms(0));
        assert!(!b.sync_reset(30_000, Duration::from_secs(41), 1_000, ms(0)));
        assert_eq!(b.level(ms(0)), 10_000);
    }

    #[test]
    fn ramp_scales_rate_and_capacity() {
        let mut b = Bucket::with_permille(60, 10, 100, ms(0));
        assert_eq!(b.effective_capacity(), 1);
        assert!(b.try_take(1, ms(0)).is_ok());
        // 10% of 60/min: one per 10 s.
        assert_eq!(b.try_take(1, ms(0)), Err(ms(10_000)));
        b.set_permille(1000, ms(0));
        assert_eq!(b.try_take(1, ms(0)), Err(ms(1_000)));
    }

    #[test]
    fn capacity_rounds_up() {
        assert_eq!(capacity_for(60, Duration::from_secs(1)), 1);
        assert_eq!(capacity_for(50, Duration::from_secs(1)), 1);
        assert_eq!(capacity_for(80_000, Duration::from_secs(1)), 1334);
        assert_eq!(capacity_for(0, Duration::from_secs(1)), 1);
    }
}
