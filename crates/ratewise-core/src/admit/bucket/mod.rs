//! Continuously refilled token bucket: pure integer arithmetic, no storage
//! policy, no clock.
//!
//! This module is the arithmetic alone (refill, levels, takes, debt,
//! waits), and `record` its shared form. It knows nothing of where its
//! limit came from nor of what the provider's answers say: what is
//! believed about the provider's bucket — the rate and capacity, its level
//! as the answers show it, the room 429s teach to keep free — lives in
//! `admit/belief/` and reaches a bucket only as numbers: a limit and
//! capacities ([`Bucket::set_limit`]), a change of the credit
//! ([`Bucket::add_credit`]), an amount kept free in a wait
//! ([`Bucket::wait_for`]).
//!
//! A bucket refills at `limit` units per minute, continuously: 60 per minute
//! means one unit every second, never 60 at the top of the minute. It keeps
//! two levels that refill from the same instant and are taken from together:
//!
//! * **credit** — the provider's own bucket as the client models it: it
//!   holds up to `credit` units (by default a minute of the limit, the
//!   capacity Anthropic and OpenAI document for their per-minute limits) and
//!   refills at exactly `limit`. Header sync corrects this level: it is what
//!   the server says is left.
//! * **pace** — the shaper that keeps sends smooth: it holds only `capacity`
//!   units (a few seconds of the limit) and refills at `limit · permille /
//!   1000`, where `permille` is the ramp-up factor, which may exceed 1000
//!   (the *peak*, see [`RampConfig::peak`](super::RampConfig::peak)).
//!
//! A take needs both. Over a long backlog the credit binds, so the rate is
//! the limit; but a full credit — an idle key's, which the provider also
//! holds — is spent at the peak pace over minutes instead of being left
//! unused (a single-level bucket small enough not to burst can never spend
//! it) or released at once (a single-level bucket as large as the
//! provider's bursts a minute of traffic).
//!
//! Levels are kept in *scaled units* — one unit is `60 · 10¹² ` scaled
//! units (nanoseconds per minute × 1000) — so that the refill of one
//! nanosecond at a rate factor of `permille`/1000 is exactly `limit ·
//! permille` scaled units. There is no rounding and no drift, whatever the
//! rate.
//!
//! The levels may go negative (debt): a settle that finds the actual usage
//! larger than the reservation charges the difference, and later takes wait
//! for the debt to refill.
//!
//! A take larger than a level's capacity would never fit; it goes when that
//! level is full and leaves a debt. So over any window `w` the bucket admits
//! at most `min(credit + L·w/1 min, capacity + L·(permille/1000)·w/1 min)`
//! plus `max(0, largest take − capacity)`: see [`Bucket::try_take`].

use crate::time::Instant;
use std::time::Duration;

mod record;

pub(crate) use record::{local_ns, unix_ns, BucketRecord};

/// Nanoseconds per minute.
pub(crate) const NS_PER_MIN: u128 = 60_000_000_000;
/// Scaled units per unit (token or request): ns/min × 1000 (per-mille rate).
pub(crate) const SCALE: i128 = (NS_PER_MIN * 1000) as i128;
/// Largest limit per minute a bucket accepts (10¹²): with it, every product
/// in the arithmetic fits an `i128` without overflow checks, so the hot path
/// needs no 128-bit multiplication with overflow (a slow library call).
pub(crate) const MAX_LIMIT: u64 = 1_000_000_000_000;

/// `amount` in scaled units: at most 2⁶⁴ × 2⁴⁶, far inside `i128`.
#[inline]
pub(crate) fn scaled(amount: u64) -> i128 {
    i128::from(amount) * SCALE
}

/// Added to a wait for the credit: the exact instant a request fits is the
/// edge of the provider's limit, and the provider's own arithmetic
/// (floating point, whole tokens, its clock) may be a hair behind ours
/// there; a send at the exact instant then gets a 429 for a rounding error.
/// A millisecond later the provider's bucket holds `limit / 60 000` more
/// units, which covers it. Nothing is lost: the credit is below its
/// capacity while a request waits for it, so that millisecond's refill is
/// kept.
/// (The pace is ours alone and gets no such millisecond: a full pace would lose it.)
pub(crate) const EDGE_MARGIN: Duration = Duration::from_millis(1);

/// Largest rate factor of the pace (×4): the ramp's peak is clamped here.
pub(crate) const MAX_PERMILLE: u32 = 4000;

/// One continuously refilled bucket: the provider's credit and the pace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bucket {
    limit: u64,
    capacity: u64,
    credit_capacity: u64,
    permille: u32,
    /// Effective pace capacity in scaled units (capacity × min(permille,
    /// 1000), at least 1 unit): a ramp below full rate shrinks the burst
    /// too; a peak above it only speeds the refill.
    cap_scaled: i128,
    /// Pace refill per nanosecond, in scaled units.
    rate: i128,
    /// Pace level.
    level: i128,
    /// Credit capacity in scaled units.
    credit_cap: i128,
    /// Credit level (the provider's bucket as modelled).
    credit: i128,
    /// Nanoseconds since the origin of the last refill (u64: 584 years).
    updated: u64,
}

/// An instant as nanoseconds since the origin.
#[inline]
pub(crate) fn ns(t: Instant) -> u64 {
    t.as_nanos()
}

impl Bucket {
    #[cfg(test)]
    /// A full bucket refilling `limit` units per minute (at least 1) whose
    /// pace holds up to `capacity` units (at least 1), at full rate, with a
    /// credit of one minute of the limit (the providers' bucket).
    pub(crate) fn new(limit: u64, capacity: u64, now: Instant) -> Self {
        Self::with_permille(limit, capacity, 1000, now)
    }

    #[cfg(test)]
    /// A full bucket whose pace rate is scaled by `permille`/1000 (clamped
    /// to 1..=[`MAX_PERMILLE`]; the pace capacity scales too while below
    /// 1000): the ramp-up factor. The credit holds a minute of the limit.
    pub(crate) fn with_permille(limit: u64, capacity: u64, permille: u32, now: Instant) -> Self {
        Self::with_credit(limit, capacity, limit, permille, now)
    }

    /// A full bucket with an explicit credit capacity (`credit` units, at
    /// least 1): what the provider's bucket holds.
    ///
    /// Example: the unit test `tests::example_with_credit`.
    pub(crate) fn with_credit(
        limit: u64,
        capacity: u64,
        credit: u64,
        permille: u32,
        now: Instant,
    ) -> Self {
        let mut b = Bucket {
            limit: limit.clamp(1, MAX_LIMIT),
            capacity: capacity.max(1),
            credit_capacity: credit.max(1),
            permille: permille.clamp(1, MAX_PERMILLE),
            cap_scaled: 0,
            rate: 0,
            level: 0,
            credit_cap: 0,
            credit: 0,
            updated: ns(now),
        };
        b.recompute();
        b.level = b.cap_scaled;
        b.credit = b.credit_cap;
        b
    }

    fn recompute(&mut self) {
        let p = self.permille.min(1000);
        let cap = (u128::from(self.capacity) * u128::from(p)).div_ceil(1000);
        self.cap_scaled = (cap.max(1) as i128) * SCALE;
        self.rate = i128::from(self.limit) * i128::from(self.permille);
        self.level = self.level.min(self.cap_scaled);
        self.credit_cap = scaled(self.credit_capacity);
        self.credit = self.credit.min(self.credit_cap);
    }

    /// Units per minute at full rate.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// Credit capacity: what the provider's bucket holds.
    pub(crate) fn credit_capacity(&self) -> u64 {
        self.credit_capacity
    }

    #[cfg(test)]
    /// Pace capacity at the current rate factor (at least 1).
    pub(crate) fn effective_capacity(&self) -> u64 {
        (self.cap_scaled / SCALE) as u64
    }

    /// Credit refill per nanosecond, in scaled units: the limit at full rate.
    #[inline]
    fn credit_rate(&self) -> i128 {
        i128::from(self.limit) * 1000
    }

    /// Adds the refill since the last update. Time that goes backwards is
    /// ignored (the caller's clock is monotonic by contract).
    #[inline]
    pub(crate) fn refill(&mut self, now: Instant) {
        let now = ns(now);
        if now > self.updated {
            // ≤ 2⁶⁴ ns × rate ≤ 2⁶⁴·2⁴⁰·2¹² < 2¹²⁰: no overflow.
            let dt = i128::from(now - self.updated);
            self.level = self
                .level
                .saturating_add(dt * self.rate)
                .min(self.cap_scaled);
            self.credit = self
                .credit
                .saturating_add(dt * self.credit_rate())
                .min(self.credit_cap);
            self.updated = now;
        }
    }

    /// Whole units a take could have now: the lower of the two levels
    /// (negative while in debt).
    pub(crate) fn level(&mut self, now: Instant) -> i64 {
        self.refill(now);
        units(self.level.min(self.credit))
    }

    /// Whole units of the provider's credit now, as modelled (negative
    /// while in debt).
    pub(crate) fn credit_level(&mut self, now: Instant) -> i64 {
        self.refill(now);
        units(self.credit)
    }

    /// When `amount` would fit, after a [`refill`](Self::refill) at `now`,
    /// with `keep_free` scaled units left in the credit beyond it: `None`
    /// when it fits now. An amount above a level's capacity fits once that
    /// level is full. A wait for the credit ends [`EDGE_MARGIN`] after the
    /// exact instant.
    #[cfg(test)]
    pub(crate) fn wait_for(&self, amount: u64, keep_free: i128, now: Instant) -> Option<Instant> {
        self.wait_for_paced(amount, amount, keep_free, now)
    }

    /// [`wait_for`](Self::wait_for) for a take that charges the credit
    /// `amount` but the pace only `paced` (see [`take_paced`](Self::take_paced)).
    #[inline]
    pub(crate) fn wait_for_paced(
        &self,
        amount: u64,
        paced: u64,
        keep_free: i128,
        now: Instant,
    ) -> Option<Instant> {
        let need_pace = scaled(paced).min(self.cap_scaled);
        let need_credit = self.credit_need(scaled(amount), keep_free);
        // After a refill at `now` the levels are current (`updated` never
        // lies ahead of the caller's clock: pauses are debts, not a moved
        // refill start).
        if self.level >= need_pace && self.credit >= need_credit {
            None
        } else {
            // A clock that went backwards refills from `updated`.
            let pace = ns_to_fill(need_pace - self.level, self.rate);
            let credit = match ns_to_fill(need_credit - self.credit, self.credit_rate()) {
                0 => 0,
                n => n + EDGE_MARGIN.as_nanos(),
            };
            let from = ns(now).max(self.updated);
            Some(Instant::from_origin(duration_from_nanos(
                u128::from(from) + pace.max(credit),
            )))
        }
    }

    /// When the provider's credit alone would hold `amount` (the credit
    /// half of [`wait_for`](Self::wait_for), [`EDGE_MARGIN`] included):
    /// the part of a wait that no ramp of the pace can shorten.
    pub(crate) fn credit_wait_for(
        &self,
        amount: u64,
        keep_free: i128,
        now: Instant,
    ) -> Option<Instant> {
        let need_credit = self.credit_need(scaled(amount), keep_free);
        if self.credit >= need_credit {
            return None;
        }
        let credit = ns_to_fill(need_credit - self.credit, self.credit_rate());
        let from = ns(now).max(self.updated);
        Some(Instant::from_origin(duration_from_nanos(
            u128::from(from) + credit + EDGE_MARGIN.as_nanos(),
        )))
    }

    /// What the credit must hold for a take of `want` scaled units with
    /// `keep_free` left beyond it, at most a full credit (a request larger
    /// than the bucket goes when it is full, as the providers admit it).
    fn credit_need(&self, want: i128, keep_free: i128) -> i128 {
        want.saturating_add(keep_free.max(0)).min(self.credit_cap)
    }

    /// Removes `amount` regardless of the levels (may leave a debt).
    #[inline]
    pub(crate) fn take(&mut self, amount: u64) {
        let a = scaled(amount);
        self.level = self.level.saturating_sub(a);
        self.credit = self.credit.saturating_sub(a);
    }

    /// Takes `amount` from the credit and only `paced` (at most `amount`)
    /// from the pace. The provider charges a request's whole `max_tokens`
    /// when it starts and gives back what went unused when it ends: the
    /// credit, which models the provider's bucket, holds all of it while the
    /// request runs; the pace, which shapes what is really spent, is charged
    /// what the request is expected to use. Charged the whole reservation,
    /// a pace of a few seconds held one request of 8,192 `max_tokens` at a
    /// time where the provider's bucket held nine.
    #[inline]
    pub(crate) fn take_paced(&mut self, amount: u64, paced: u64) {
        self.credit = self.credit.saturating_sub(scaled(amount));
        self.level = self.level.saturating_sub(scaled(paced.min(amount)));
    }

    /// Charges the pace alone `amount` more, after a refill at `now` (may
    /// leave a debt): before a reservation taken with
    /// [`take_paced`](Self::take_paced) ends, the pace is charged the part
    /// it did not take, so that the end's give-back or charge leaves both
    /// levels charged the actual usage. The refill comes first: unlike a
    /// give-back, a take does not commute with the clamp at the capacity
    /// (a pace full at its last refill would be credited the refill since).
    #[inline]
    pub(crate) fn take_pace(&mut self, amount: u64, now: Instant) {
        self.refill(now);
        self.level = self.level.saturating_sub(scaled(amount));
    }

    #[cfg(test)]
    /// Takes `amount` when it fits, else says when it will.
    ///
    /// Example: the unit test `tests::example_try_take`.
    pub(crate) fn try_take(&mut self, amount: u64, now: Instant) -> Result<(), Instant> {
        self.refill(now);
        match self.wait_for(amount, 0, now) {
            None => {
                self.take(amount);
                Ok(())
            }
            Some(at) => Err(at),
        }
    }

    /// Returns `amount` units (a release, or a reservation larger than the
    /// actual usage); no level exceeds its capacity.
    ///
    /// No refill is needed first: clamping at the capacity commutes with
    /// later non-negative additions (`min(c, min(c, l + p) + r) ==
    /// min(c, l + p + r)` for `r ≥ 0`), so a put-back may be applied before
    /// the refill it precedes in time. That keeps `settle` cheap.
    #[inline]
    pub(crate) fn put_back(&mut self, amount: u64, _now: Instant) {
        let a = scaled(amount);
        self.level = self.level.saturating_add(a).min(self.cap_scaled);
        self.credit = self.credit.saturating_add(a).min(self.credit_cap);
    }

    /// The credit level in scaled units, as of the last refill.
    pub(crate) fn credit_scaled(&self) -> i128 {
        self.credit
    }

    /// The credit capacity in scaled units.
    pub(crate) fn credit_cap_scaled(&self) -> i128 {
        self.credit_cap
    }

    /// How long the credit takes to refill from empty to full at the limit.
    pub(crate) fn credit_fill_time(&self) -> Duration {
        duration_from_nanos(ns_to_fill(self.credit_cap, self.credit_rate()))
    }

    /// Changes the credit alone by `delta` scaled units, after a refill at
    /// `now` (the pace keeps its level): never above its capacity, any
    /// depth below. Returns the change made.
    pub(crate) fn add_credit(&mut self, delta: i128, now: Instant) -> i128 {
        self.refill(now);
        let before = self.credit;
        self.credit = self.credit.saturating_add(delta).min(self.credit_cap);
        self.credit - before
    }

    /// Charges `amount` more units (actual usage above the reservation).
    pub(crate) fn charge(&mut self, amount: u64, now: Instant) {
        self.refill(now);
        self.take(amount);
    }

    /// Empties the bucket (keeps any debt) and holds its refill until
    /// `until`: the server said it is exhausted and when to come back, so
    /// the backlog is released at the refill rate from then on, not as a
    /// burst of what would have refilled during the pause. Both levels go
    /// into a debt that refills to zero at `until`.
    pub(crate) fn drain_until(&mut self, until: Instant, now: Instant) {
        self.hold_pace_until(until, now);
        let wait = i128::from(ns(until).saturating_sub(ns(now)));
        self.credit = self.credit.min(0) - wait * self.credit_rate();
    }

    /// Empties the pace until `until` (a debt that refills to zero then)
    /// and leaves the credit alone: for a 429 whose own headers already
    /// brought the credit to the server's view. The server keeps
    /// refilling through the pause, so a credit held too would fall behind
    /// it for good; the pace alone keeps the backlog from leaving in a
    /// burst when the pause ends.
    pub(crate) fn hold_pace_until(&mut self, until: Instant, now: Instant) {
        self.refill(now);
        let wait = i128::from(ns(until).saturating_sub(ns(now)));
        self.level = self.level.min(0) - wait * self.rate;
    }

    /// Changes the limit and capacities (learned from headers or
    /// configured), keeping the levels (clamped to the new capacities).
    pub(crate) fn set_limit(&mut self, limit: u64, capacity: u64, credit: u64, now: Instant) {
        self.refill(now);
        self.limit = limit.clamp(1, MAX_LIMIT);
        self.capacity = capacity.max(1);
        self.credit_capacity = credit.max(1);
        self.recompute();
    }

    /// Changes the credit capacity alone (what the provider's bucket is
    /// taken to hold), keeping the level: a capacity learned larger does
    /// not fill the credit (the server's view raises it, see
    /// [`refund`](Self::refund)); a smaller one clamps it.
    pub(crate) fn set_credit_capacity(&mut self, credit: u64, now: Instant) {
        self.refill(now);
        self.credit_capacity = credit.max(1);
        self.recompute();
    }

    /// Changes the pace factor (ramp-up), clamping the pace level to the
    /// new effective capacity so a cut never leaves a burst behind. The
    /// credit is the provider's and does not change.
    pub(crate) fn set_permille(&mut self, permille: u32, now: Instant) {
        self.refill(now);
        self.permille = permille.clamp(1, MAX_PERMILLE);
        self.recompute();
    }
}

/// Whole units of a scaled level, rounded down and clamped to `i64`.
pub(crate) fn units(level: i128) -> i64 {
    level
        .div_euclid(SCALE)
        .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Nanoseconds a level missing `missing` scaled units needs at `rate`.
#[inline]
pub(crate) fn ns_to_fill(missing: i128, rate: i128) -> u128 {
    if missing <= 0 {
        0
    } else {
        (missing as u128).div_ceil(rate.max(1) as u128)
    }
}

/// Converts nanoseconds to a `Duration`, saturating.
pub(crate) fn duration_from_nanos(ns: u128) -> Duration {
    let secs = ns / 1_000_000_000;
    if secs > u128::from(u64::MAX) {
        Duration::MAX
    } else {
        Duration::new(secs as u64, (ns % 1_000_000_000) as u32)
    }
}

/// The capacity of a bucket of `limit` per minute holding `burst` worth of
/// refill: `ceil(limit · burst / 1 min)`, at least 1.
pub(crate) fn capacity_for(limit: u64, burst: Duration) -> u64 {
    let cap = (u128::from(limit) * burst.as_nanos()).div_ceil(NS_PER_MIN);
    cap.clamp(1, u128::from(u64::MAX)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_with_credit() {
        use crate::admit::bucket::Bucket;
        use crate::Instant;
        use std::time::Duration;
        // 60 per minute, a pace of 2 at ×1.2, a credit of 60: the credit is
        // spent at 1.2 per second, never in a burst.
        let mut b = Bucket::with_credit(60, 2, 60, 1200, Instant::ZERO);
        assert!(b.try_take(2, Instant::ZERO).is_ok());
        let next = Instant::from_origin(Duration::from_nanos(833_333_334));
        assert_eq!(b.try_take(1, Instant::ZERO), Err(next));
        assert_eq!(b.credit_level(next), 58);
    }

    #[test]
    fn example_try_take() {
        use crate::admit::bucket::Bucket;
        use crate::Instant;
        // 60 per minute, capacity 1: one per second.
        let mut b = Bucket::new(60, 1, Instant::ZERO);
        assert!(b.try_take(1, Instant::ZERO).is_ok());
        assert_eq!(
            b.try_take(1, Instant::ZERO),
            Err(Instant::from_millis(1000))
        );
        assert!(b.try_take(1, Instant::from_millis(1000)).is_ok());
    }

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
    fn a_paced_take_charges_the_credit_whole_and_the_pace_its_part() {
        // 60 a minute, a pace of 10, a credit of 60.
        let mut b = Bucket::with_credit(60, 10, 60, 1000, ms(0));
        assert_eq!(b.wait_for_paced(40, 4, 0, ms(0)), None);
        b.take_paced(40, 4);
        assert_eq!(b.credit_level(ms(0)), 20);
        assert_eq!(b.level(ms(0)), 6, "the lower of pace 6 and credit 20");
        // The end: the pace is charged the rest, then 35 of the 40 come
        // back to both: each level is charged the 5 used.
        b.take_pace(36, ms(0));
        b.put_back(35, ms(0));
        assert_eq!(b.credit_level(ms(0)), 55);
        assert_eq!(b.level(ms(0)), 5);
    }

    #[test]
    fn the_pace_is_charged_the_rest_of_a_reservation_after_its_refill() {
        // 60 a minute, a pace of 10, a credit of 60; 4 of 40 paced.
        let mut b = Bucket::with_credit(60, 10, 60, 1000, ms(0));
        b.take_paced(40, 4);
        // 20 s later the pace is full again (10); the end charges it the
        // 36 it did not take, then gives 35 back: 9, the 1 used since.
        b.take_pace(36, ms(20_000));
        b.put_back(35, ms(20_000));
        assert_eq!(b.level(ms(20_000)), 9);
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
    fn the_peak_spends_the_credit_smoothly_then_the_limit_binds() {
        // 60 per minute, pace capacity 1 at ×1.5, credit 60 (full).
        let mut b = Bucket::with_credit(60, 1, 60, 1500, ms(0));
        let mut t = ms(0);
        let mut times = Vec::new();
        while times.len() < 300 {
            match b.try_take(1, t) {
                Ok(()) => times.push(t),
                Err(at) => t = at,
            }
        }
        // Never two within a pace interval (2/3 s): no burst.
        assert!(times
            .windows(2)
            .all(|w| w[1] - w[0] >= Duration::from_millis(666)));
        // The first minute takes 90 (1.5 per second), then the credit is
        // gone by about 2 min (60 credit / 0.5 extra per second) and the
        // rate is the limit.
        let in_first_minute = times.iter().filter(|t| **t < ms(60_000)).count();
        assert_eq!(in_first_minute, 90);
        let late: Vec<_> = times.iter().filter(|t| **t >= ms(180_000)).collect();
        assert!(late
            .windows(2)
            .all(|w| *w[1] - *w[0] >= Duration::from_millis(999)));
        // Over the whole run: at most the credit plus the limit.
        let last = *times.last().unwrap();
        assert!(times.len() as u64 <= 60 + last.since_origin().as_secs() + 1);
    }

    #[test]
    fn capacity_rounds_up() {
        assert_eq!(capacity_for(60, Duration::from_secs(1)), 1);
        assert_eq!(capacity_for(50, Duration::from_secs(1)), 1);
        assert_eq!(capacity_for(80_000, Duration::from_secs(1)), 1334);
        assert_eq!(capacity_for(0, Duration::from_secs(1)), 1);
    }
}
