//! Continuously refilled token bucket: pure integer arithmetic, no storage
//! policy, no clock.
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

use super::profile::Rounding;
use crate::time::Instant;
use std::time::Duration;

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
fn scaled(amount: u64) -> i128 {
    i128::from(amount) * SCALE
}

/// A credit level saved when a request is sent ([`Bucket::mark`]), to
/// compare the server's view for that request with ([`Bucket::sync`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CreditMark(i64);

impl CreditMark {
    /// No mark (no bucket for the dimension).
    pub(crate) const NONE: CreditMark = CreditMark(i64::MIN);

    /// The mark, unless it is [`NONE`](Self::NONE).
    pub(crate) fn get(self) -> Option<CreditMark> {
        (self != Self::NONE).then_some(self)
    }

    /// The mark as if `units` more had been left: for a view that does not
    /// count the request itself (an error answer, which the server did not
    /// charge), the request's own amounts.
    pub(crate) fn plus(self, units: u64) -> CreditMark {
        CreditMark(self.0.saturating_add((scaled(units) >> MARK_SHIFT) as i64))
    }
}

/// Scaled units per mark unit, as a shift.
const MARK_SHIFT: u32 = 32;

/// What a response says about the server's bucket, as of when the server
/// took the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ServerView {
    /// `*-remaining`: whole units left, as the provider reports them (read
    /// through its [`Rounding`]).
    pub remaining: Option<u64>,
    /// `*-reset` with its limit: the bucket of `limit` units per minute is
    /// full again after this long.
    pub until_full: Option<(u64, Duration)>,
}

impl ServerView {
    /// The levels the view allows, in scaled units: `[lo, hi)`, and the
    /// level a credit above them is corrected `to`. A remaining is read
    /// through the provider's [`Rounding`]: exact, or — for a multiple of
    /// the rounding step — a range around it, corrected to the value
    /// reported (the middle of a nearest-thousand range: lowering to its
    /// bottom throws away half a step on every correction, a third of a
    /// 5 s bucket, and what is left over is what the learned margin is
    /// for). A reset implies one level: the bucket is full (`credit_cap`,
    /// the capacity as modelled) after `until_full` of refill at its limit.
    fn range(&self, rounding: Rounding, credit_cap: i128) -> Option<(i128, i128, i128)> {
        let mut range: Option<(i128, i128, i128)> = self.remaining.map(|r| {
            let (lo, hi) = rounding.range(r);
            (scaled(lo), scaled(hi), scaled(r.max(lo).min(hi - 1)))
        });
        if let Some((limit, until_full)) = self.until_full {
            let limit = limit.clamp(1, MAX_LIMIT);
            let until_ns = until_full.as_nanos().min(NS_PER_MIN);
            // limit · 1000 scaled units per ns at full rate; ≤ 2⁴⁰·2¹⁰·2³⁶.
            // Never below empty: a reset further away than the modelled
            // capacity refills says the capacity is larger, not a debt.
            let implied = (credit_cap - i128::from(limit) * 1000 * until_ns as i128).max(0);
            // Read like a whole-unit remaining: a credit that has refilled
            // to the implied level exactly is within the view.
            let (ilo, ihi) = (implied, implied + SCALE);
            range = Some(range.map_or((ilo, ihi, ilo), |(lo, hi, to)| {
                (lo.min(ilo), hi.min(ihi), to.min(ilo))
            }));
        }
        range
    }
}

/// Added to a wait for the credit: the exact instant a request fits is the
/// edge of the provider's limit, and the provider's own arithmetic
/// (floating point, whole tokens, its clock) may be a hair behind ours
/// there; a send at the exact instant then gets a 429 for a rounding error.
/// A millisecond later the provider's bucket holds `limit / 60 000` more
/// units, which covers it. Nothing is lost: the credit is below its
/// capacity while a request waits for it, so the margin's refill is kept.
/// (The pace is ours alone and gets no margin: a full pace would lose it.)
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
    /// Running total of corrections made to the credit on the server's
    /// word (lowerings negative, refunds positive): a view is read against
    /// the credit at its send plus the corrections made since, so one
    /// discrepancy is corrected once, however many answers report it.
    corrected: i128,
    /// The learned margin in scaled units, as of `margin_at`: kept free in
    /// the credit beyond every request's own amount, because 429s showed
    /// the model above the provider's level ([`surprise`](Self::surprise)).
    /// It halves every [`margin_half_life`](Self::margin_half_life) of calm.
    margin: i128,
    /// Nanoseconds since the origin when `margin` was last set.
    margin_at: u64,
    /// Nanoseconds since the origin of the last refill (u64: 584 years).
    updated: u64,
}

/// A learned margin halves after this many refills of the credit from
/// empty to full without a surprise: slow enough that a steady bias (a
/// provider reporting more than it holds) is not paid for again and again,
/// fast enough that one unlucky 429 is forgotten within minutes on a short
/// bucket.
pub(crate) const MARGIN_HALF_LIFE_FILLS: u32 = 20;

/// A learned margin halves after at least this long.
pub(crate) const MARGIN_MIN_HALF_LIFE: Duration = Duration::from_secs(60);

/// A learned margin grows by this share of the credit capacity per
/// surprise (1/8), or doubles, and is never more than half of it
/// ([`MARGIN_MAX_SHARE`]): both scale with the bucket, never a fixed amount
/// or a fixed second.
pub(crate) const MARGIN_STEP_SHARE: u64 = 8;

/// The largest margin, as a divisor of the credit capacity (a half).
pub(crate) const MARGIN_MAX_SHARE: u64 = 2;

/// An instant as nanoseconds since the origin.
#[inline]
fn ns(t: Instant) -> u64 {
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
            corrected: 0,
            margin: 0,
            margin_at: ns(now),
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
        // A margin is never more than half of the bucket it is kept in:
        // a capacity cut cuts it too (the same here and in a record read
        // back, so every process agrees).
        self.margin = self
            .margin
            .clamp(0, self.credit_cap / i128::from(MARGIN_MAX_SHARE));
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

    /// When `amount` would fit, after a [`refill`](Self::refill) at `now`:
    /// `None` when it fits now. An amount above a level's capacity fits
    /// once that level is full. A wait for the credit ends
    /// [`EDGE_MARGIN`] after the exact instant.
    #[inline]
    pub(crate) fn wait_for(&self, amount: u64, now: Instant) -> Option<Instant> {
        let want = scaled(amount);
        let need_pace = want.min(self.cap_scaled);
        let need_credit = self.credit_need(want, now);
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
    pub(crate) fn credit_wait_for(&self, amount: u64, now: Instant) -> Option<Instant> {
        let need_credit = self.credit_need(scaled(amount), now);
        if self.credit >= need_credit {
            return None;
        }
        let credit = ns_to_fill(need_credit - self.credit, self.credit_rate());
        let from = ns(now).max(self.updated);
        Some(Instant::from_origin(duration_from_nanos(
            u128::from(from) + credit + EDGE_MARGIN.as_nanos(),
        )))
    }

    /// What the credit must hold for a take of `want` scaled units: the
    /// amount and the learned margin, at most a full credit (a request
    /// larger than the bucket goes when it is full, as the providers admit
    /// it).
    fn credit_need(&self, want: i128, now: Instant) -> i128 {
        want.saturating_add(self.margin_scaled(ns(now)))
            .min(self.credit_cap)
    }

    /// How long a learned margin takes to halve: [`MARGIN_HALF_LIFE_FILLS`]
    /// refills of the credit, at least [`MARGIN_MIN_HALF_LIFE`].
    pub(crate) fn margin_half_life(&self) -> Duration {
        let fill = duration_from_nanos(ns_to_fill(self.credit_cap, self.credit_rate()));
        fill.saturating_mul(MARGIN_HALF_LIFE_FILLS)
            .max(MARGIN_MIN_HALF_LIFE)
    }

    fn margin_scaled(&self, now: u64) -> i128 {
        if self.margin <= 0 {
            return 0;
        }
        let calm = now.saturating_sub(self.margin_at);
        let half_life = self.margin_half_life().as_nanos().max(1) as f64;
        // Deterministic (the same inputs give the same margin on every
        // replica); below one unit it is gone.
        let m = (self.margin as f64) * (-(calm as f64) / half_life).exp2();
        if m < SCALE as f64 {
            0
        } else {
            m as i128
        }
    }

    /// The learned margin now, in whole units (the nearest: a margin is
    /// learned against a [`CreditMark`], a hair below the credit).
    pub(crate) fn margin(&self, now: Instant) -> u64 {
        u64::try_from((self.margin_scaled(ns(now)) + SCALE / 2) / SCALE).unwrap_or(0)
    }

    /// A 429 on this dimension for the request whose take left `mark` (the
    /// credit after it) and that needed `amount`: the provider's level was
    /// below `amount` when it took the request. When the credit then held
    /// `amount` or more, the model was wrong — a surprise — and the credit
    /// is lowered at once to the evidence, `amount − 1` at the send (as
    /// [`sync`](Self::sync) lowers it: a correction, views taken before it
    /// count it). The caller then grows the margin
    /// ([`learn_margin`](Self::learn_margin)) and cuts a capacity learned
    /// from headers by all the model turned out to be over: this, and what
    /// the 429's own headers lower it by after.
    ///
    /// Returns what the credit held before the take, in whole units, or
    /// `None` when it already held less than `amount` (no surprise: a
    /// request larger than the bucket, sent on a full credit, is one).
    ///
    /// Example: the unit test `tests::example_surprise`.
    pub(crate) fn surprise(&mut self, amount: u64, mark: CreditMark, now: Instant) -> Option<u64> {
        mark.get()?;
        self.refill(now);
        let want = scaled(amount);
        let before = self.credit_then(mark).saturating_add(want);
        if before < want.min(self.credit_cap) {
            return None;
        }
        let gap = before - (want - SCALE).max(0);
        self.credit = self.credit.saturating_sub(gap);
        self.corrected = self.corrected.saturating_sub(gap);
        Some(u64::try_from((before + SCALE / 2) / SCALE).unwrap_or(u64::MAX))
    }

    /// The running total of corrections, to measure what a sequence of
    /// them lowered the credit by ([`lowered_since`](Self::lowered_since)).
    pub(crate) fn corrected_total(&self) -> i128 {
        self.corrected
    }

    /// Whole units the credit was lowered by since `corrected_total` was
    /// `before` (rounded up; raises count against it).
    pub(crate) fn lowered_since(&self, before: i128) -> u64 {
        let down = (before - self.corrected).max(0);
        u64::try_from((down + SCALE - 1) / SCALE).unwrap_or(u64::MAX)
    }

    /// Grows the margin after a surprise by an eighth of the capacity
    /// ([`MARGIN_STEP_SHARE`]); a margin that did not prevent this surprise
    /// at least doubles; at most half the capacity.
    ///
    /// Not by all the model turned out to be over: one 429 is weak
    /// evidence of how wrong the model will be next time — a one-off
    /// (another client's burst, a late timer) says nothing of the level to
    /// come. A margin is kept free of every admission, so on a bucket
    /// barely larger than one request's charge (`max_tokens` 1,000 against
    /// 1,667 output tokens) a margin of all it was over (600 there) let one
    /// request in at a time until it decayed: the simulated `cold-key-5s`
    /// with one such 429 fell from 0.968 of the limit to 0.725, against
    /// 0.926 with the step (and 0.804 with a quarter). A bias that
    /// persists is still learned whole: each 429 it causes at least
    /// doubles the margin, so it is paid for a few times, not for the
    /// whole run.
    pub(crate) fn learn_margin(&mut self, now: Instant) {
        let t = ns(now);
        let step = (self.credit_cap / i128::from(MARGIN_STEP_SHARE)).max(SCALE);
        let max = self.credit_cap / i128::from(MARGIN_MAX_SHARE);
        let was = self.margin_scaled(t);
        self.margin = was.saturating_add(step).max(was.saturating_mul(2)).min(max);
        self.margin_at = t;
    }

    /// Removes `amount` regardless of the levels (may leave a debt).
    #[inline]
    pub(crate) fn take(&mut self, amount: u64) {
        let a = scaled(amount);
        self.level = self.level.saturating_sub(a);
        self.credit = self.credit.saturating_sub(a);
    }

    #[cfg(test)]
    /// Takes `amount` when it fits, else says when it will.
    ///
    /// Example: the unit test `tests::example_try_take`.
    pub(crate) fn try_take(&mut self, amount: u64, now: Instant) -> Result<(), Instant> {
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
    /// corrected the credit to the server's view. The server keeps
    /// refilling through the pause, so a credit held too would fall behind
    /// it for good; the pace alone keeps the backlog from leaving in a
    /// burst when the pause ends.
    pub(crate) fn hold_pace_until(&mut self, until: Instant, now: Instant) {
        self.refill(now);
        let wait = i128::from(ns(until).saturating_sub(ns(now)));
        self.level = self.level.min(0) - wait * self.rate;
    }

    #[cfg(test)]
    /// Header sync: the server says `remaining` units are left. When the
    /// local credit is above the highest level that value allows read
    /// through `rounding` (`remaining + 1` for an exact value), the server
    /// wins; otherwise nothing changes. The credit is never raised, so
    /// rounded values cannot make it oscillate. Returns whether the credit
    /// was lowered.
    ///
    /// The view is compared with the credit *now*; a view taken when the
    /// request was sent is better compared with the credit then:
    /// [`sync`](Self::sync) with a [`CreditMark`].
    pub(crate) fn sync_remaining(
        &mut self,
        remaining: u64,
        rounding: Rounding,
        now: Instant,
    ) -> bool {
        let view = ServerView {
            remaining: Some(remaining),
            until_full: None,
        };
        self.sync(&view, None, rounding, now)
    }

    #[cfg(test)]
    /// Header sync from a `-reset`: the server's bucket of `limit` units per
    /// minute is full again `until_full` from now, so — refilling at `limit`
    /// per minute up to the credit capacity `C` — it holds about `C −
    /// limit · until_full / 1 min` units now (for the minute-long credit of
    /// [`new`](Self::new), `limit · (1 min − until_full) / 1 min`). When that is
    /// lower than the local credit, it wins;
    /// like [`sync_remaining`](Self::sync_remaining) it never raises the
    /// credit. The credit then refills from there at the limit, so a
    /// request needing `n` units is not admitted before the server's line
    /// `limit − rate · (reset − t)` reaches `n`.
    ///
    /// Example: the unit test `tests::example_sync_reset`.
    pub(crate) fn sync_reset(&mut self, limit: u64, until_full: Duration, now: Instant) -> bool {
        let view = ServerView {
            remaining: None,
            until_full: Some((limit, until_full)),
        };
        self.sync(&view, None, Rounding::Exact, now)
    }

    /// The credit now, to compare a later server view with: take it right
    /// after a request's reservation, and pass it to [`sync`](Self::sync)
    /// with the view the server reports for that request.
    #[inline]
    pub(crate) fn mark(&self) -> CreditMark {
        // Net of corrections so far; scaled units / 2³²: a shift, a
        // resolution of 1/14 000 of a unit, a range of ±2⁴⁵ units.
        let m = (self.credit - self.corrected) >> MARK_SHIFT;
        CreditMark(m.clamp(i128::from(i64::MIN + 1), i128::from(i64::MAX)) as i64)
    }

    /// What the credit held after the take that left `mark` (corrections
    /// since counted), as a share of the credit capacity in per-mille:
    /// how loaded this bucket was at that send, to compare buckets when a
    /// 429 names no dimension.
    pub(crate) fn room_permille(&self, mark: CreditMark) -> i128 {
        self.credit_then(mark).saturating_mul(1000) / self.credit_cap.max(1)
    }

    /// The credit at `mark`, plus the corrections made since.
    fn credit_then(&self, mark: CreditMark) -> i128 {
        (i128::from(mark.0) << MARK_SHIFT) + self.corrected
    }

    /// Gives back `amount` the server showed it never charged (a held
    /// send): a correction, so views taken before it count it.
    pub(crate) fn refund(&mut self, amount: u64, now: Instant) {
        self.refill(now);
        let before = self.credit;
        self.put_back(amount, now);
        self.corrected += self.credit - before;
    }

    /// Raises the credit alone by `amount` (at most to its capacity): the
    /// server showed it holds more than modelled (a capacity learned
    /// larger). A correction, like [`refund`](Self::refund), but the pace
    /// is ours and keeps its level: learning that the provider's bucket is
    /// bigger does not make us send faster than our pace.
    pub(crate) fn raise_credit(&mut self, amount: u64, now: Instant) {
        self.refill(now);
        let before = self.credit;
        self.credit = self
            .credit
            .saturating_add(scaled(amount))
            .min(self.credit_cap);
        self.corrected += self.credit - before;
    }

    /// Header sync: corrects the credit to the server's view of its bucket.
    ///
    /// Without a `mark`, the view is compared with the credit now. With the
    /// [`mark`](Self::mark) taken when the request was sent, it is compared
    /// with the credit *then* — about when the server took its view — plus
    /// the corrections made since (so that a discrepancy several answers
    /// report is corrected once), and the credit is lowered by the
    /// difference. A response arrives a
    /// latency after its view was taken; meanwhile both buckets refilled
    /// and both were charged for the requests sent since, so a view
    /// compared with the credit now looks lower than it is by about
    /// `latency × rate`, and lowering to it wastes that much on every
    /// correction.
    ///
    /// The server wins only when the credit is above the highest level the
    /// view allows; then the credit goes down by the difference to the
    /// lowest level the view allows. The credit is never raised, so
    /// nothing oscillates. Returns whether it was lowered. The view allows:
    ///
    /// * from a remaining `r`: `[r, r + 1)` for an exact value; for a
    ///   multiple of the rounding step, what the provider's [`Rounding`]
    ///   allows (Anthropic's nearest thousand: `[r − 500, r + 500)`). Any
    ///   other value is exact, so a small difference is corrected rather
    ///   than kept: differences
    ///   the size of a second of refill otherwise pile up unseen, and a
    ///   client running at the edge of the limit gets 429s from them;
    /// * from a reset: the level it implies, already taken in the server's
    ///   favour for whole-second timestamps.
    ///
    /// Example: the unit test `tests::example_sync`.
    pub(crate) fn sync(
        &mut self,
        view: &ServerView,
        mark: Option<CreditMark>,
        rounding: Rounding,
        now: Instant,
    ) -> bool {
        let Some((lo, hi, to)) = view.range(rounding, self.credit_cap) else {
            return false;
        };
        self.refill(now);
        let then = match mark {
            Some(m) => self.credit_then(m),
            None => self.credit,
        };
        // The range is half-open: a remaining `r` allows less than `r + 1`.
        if then >= hi && then > to {
            debug_assert!(to >= lo);
            self.credit = self.credit.saturating_sub(then - to);
            self.corrected = self.corrected.saturating_sub(then - to);
            true
        } else {
            false
        }
    }

    /// How many whole units more than the credit at `mark` the server held
    /// when it took `view`: evidence that something counted in the credit
    /// then was never charged. The server held at least `lo` (the view's
    /// lowest level), so whole units `k` with `credit + k ≥ lo`: the
    /// smallest such `k`, rounded up (a remaining of 49 against a credit of
    /// 48.08 is one unit). `None` when the view says nothing.
    ///
    /// Example: the unit test `tests::example_surplus`.
    pub(crate) fn surplus(
        &self,
        view: &ServerView,
        mark: CreditMark,
        rounding: Rounding,
    ) -> Option<u64> {
        let (lo, _, _) = view.range(rounding, self.credit_cap)?;
        let then = self.credit_then(mark);
        let over = (lo - then).max(0);
        // Rounding up, less a mark's resolution: a mark is the credit
        // rounded down to 2³² scaled units.
        let units = ((over - (1 << MARK_SHIFT)).max(0) + SCALE - 1) / SCALE;
        Some(u64::try_from(units).unwrap_or(u64::MAX))
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

/// A bucket as a shared record holds it: its parameters and levels, its
/// refill time as Unix nanoseconds. Levels are scaled units as decimal
/// strings (JSON numbers lose 128-bit integers in many readers).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct BucketRecord {
    limit: u64,
    capacity: u64,
    credit_capacity: u64,
    permille: u32,
    level: String,
    credit: String,
    corrected: String,
    updated: i64,
    /// The learned margin (scaled units) as of `margin_at` (Unix ns).
    /// Record version 3; an older record has none.
    #[serde(default = "zero_string")]
    margin: String,
    #[serde(default)]
    margin_at: i64,
}

fn zero_string() -> String {
    "0".to_owned()
}

impl Bucket {
    /// The record of this bucket; `shift`: Unix nanoseconds of the origin.
    pub(crate) fn to_record(&self, shift: i128) -> BucketRecord {
        let unix = |t: u64| {
            (i128::from(t) + shift).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
        };
        let updated = unix(self.updated);
        BucketRecord {
            limit: self.limit,
            capacity: self.capacity,
            credit_capacity: self.credit_capacity,
            permille: self.permille,
            level: self.level.to_string(),
            credit: self.credit.to_string(),
            corrected: self.corrected.to_string(),
            updated,
            margin: self.margin.to_string(),
            margin_at: unix(self.margin_at),
        }
    }

    /// A bucket from its record (`None` when the record is malformed).
    pub(crate) fn from_record(r: &BucketRecord, shift: i128) -> Option<Bucket> {
        let local = |t: i64| u64::try_from((i128::from(t) - shift).max(0)).unwrap_or(u64::MAX);
        let updated = local(r.updated);
        let mut b = Bucket {
            limit: r.limit.clamp(1, MAX_LIMIT),
            capacity: r.capacity.max(1),
            credit_capacity: r.credit_capacity.max(1),
            permille: r.permille.clamp(1, MAX_PERMILLE),
            cap_scaled: 0,
            rate: 0,
            credit_cap: 0,
            level: r.level.parse().ok()?,
            credit: r.credit.parse().ok()?,
            corrected: r.corrected.parse().ok()?,
            margin: r.margin.parse().ok()?,
            margin_at: local(r.margin_at),
            updated,
        };
        // (Clamps the margin to what this controller would keep.)
        b.recompute();
        // A record is read from outside the process: a debt deeper than
        // ten minutes of refill is not something this controller ever
        // writes, and is cut to it rather than blocking the key for good.
        let floor = -(scaled(b.limit) * 10);
        b.level = b.level.max(floor);
        b.credit = b.credit.max(floor);
        Some(b)
    }
}

/// Whole units of a scaled level, rounded down and clamped to `i64`.
fn units(level: i128) -> i64 {
    level
        .div_euclid(SCALE)
        .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Nanoseconds a level missing `missing` scaled units needs at `rate`.
#[inline]
fn ns_to_fill(missing: i128, rate: i128) -> u128 {
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
    fn example_surprise() {
        use crate::admit::bucket::Bucket;
        use crate::Instant;
        // 60 000 a minute, a credit of 10 000 (a 10 s bucket).
        let mut b = Bucket::with_credit(60_000, 60_000, 10_000, 1000, Instant::ZERO);
        assert!(b.try_take(4_000, Instant::ZERO).is_ok());
        let mark = b.mark();
        // The provider held less than 4 000: we believed in 10 000.
        let before = b.corrected_total();
        assert_eq!(b.surprise(4_000, mark, Instant::ZERO), Some(10_000));
        assert_eq!(b.credit_level(Instant::ZERO), -1);
        let over = b.lowered_since(before);
        assert_eq!(over, 6_001);
        b.learn_margin(Instant::ZERO);
        // One surprise teaches an eighth of the capacity, not all it was
        // over: it may be a one-off.
        assert_eq!(b.margin(Instant::ZERO), 1_250);
        // Another before it decays at least doubles it, up to half the
        // capacity.
        b.learn_margin(Instant::ZERO);
        assert_eq!(b.margin(Instant::ZERO), 2_500);
        b.learn_margin(Instant::ZERO);
        assert_eq!(b.margin(Instant::ZERO), 5_000);
        b.learn_margin(Instant::ZERO);
        assert_eq!(b.margin(Instant::ZERO), 5_000);
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

    #[test]
    fn example_sync_reset() {
        use crate::admit::bucket::Bucket;
        use crate::Instant;
        use std::time::Duration;
        // 60 per minute, a pace of 10; the server is full in 57 s: 3 left.
        let mut b = Bucket::new(60, 10, Instant::ZERO);
        assert!(b.sync_reset(60, Duration::from_secs(57), Instant::ZERO));
        assert_eq!(b.level(Instant::ZERO), 3);
        // A reset further away than before can only lower it again; a nearer
        // one (more capacity) never raises it.
        assert!(!b.sync_reset(60, Duration::from_secs(1), Instant::ZERO));
        assert_eq!(b.level(Instant::ZERO), 3);
    }

    #[test]
    fn example_sync() {
        use crate::admit::bucket::{Bucket, ServerView};
        use crate::admit::profile::Rounding::Exact;
        use crate::Instant;
        // 60 per minute; a request is sent at 0 and answered 5 s later.
        let mut b = Bucket::new(60, 10, Instant::ZERO);
        assert!(b.try_take(1, Instant::ZERO).is_ok());
        let mark = b.mark(); // 59 in credit after the take
        let later = Instant::from_millis(5_000);
        let view = ServerView {
            remaining: Some(59),
            until_full: None,
        };
        // The server agreed then: nothing changes, though 59 < 60 now.
        assert!(!b.sync(&view, Some(mark), Exact, later));
        assert_eq!(b.credit_level(later), 60);
        // Another client had taken 20: the credit loses 20, not the refill.
        let view = ServerView {
            remaining: Some(39),
            until_full: None,
        };
        assert!(b.sync(&view, Some(mark), Exact, later));
        assert_eq!(b.credit_level(later), 40);
    }

    #[test]
    fn example_surplus() {
        use crate::admit::bucket::{Bucket, ServerView};
        use crate::admit::profile::Rounding::Exact;
        use crate::Instant;
        let mut b = Bucket::new(60, 10, Instant::ZERO);
        assert!(b.try_take(2, Instant::ZERO).is_ok());
        let mark = b.mark(); // 58
        let view = |r| ServerView {
            remaining: Some(r),
            until_full: None,
        };
        assert_eq!(b.surplus(&view(58), mark, Exact), Some(0));
        assert_eq!(b.surplus(&view(59), mark, Exact), Some(1));
        assert_eq!(b.surplus(&view(40), mark, Exact), Some(0));
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
    fn sync_only_lowers_and_reads_rounded_values_as_ranges() {
        let down = Rounding::Down(1000);
        let mut b = Bucket::new(600_000, 10_000, ms(0));
        // A multiple of 1 000 may be rounded down: up to 599 999 — the
        // credit of 600 000 is above it by one, so it goes.
        assert!(b.sync_remaining(599_000, down, ms(0)));
        assert_eq!(b.credit_level(ms(0)), 599_000);
        assert!(!b.sync_remaining(599_000, down, ms(0)));
        assert!(b.sync_remaining(5_000, down, ms(0)));
        assert_eq!(b.level(ms(0)), 5_000);
        // Higher views never raise it.
        assert!(!b.sync_remaining(5_999, down, ms(0)));
        assert!(!b.sync_remaining(8_000, down, ms(0)));
        // 4 000 may be anything up to 4 999: the credit of 5 000 is above.
        assert!(b.sync_remaining(4_000, down, ms(0)));
        assert_eq!(b.level(ms(0)), 4_000);
        // Anything else is exact: 3 950 lowers by 50.
        assert!(b.sync_remaining(3_950, down, ms(0)));
        assert_eq!(b.level(ms(0)), 3_950);
        // The same view again: the credit is inside [3 950, 3 951).
        assert!(!b.sync_remaining(3_950, down, ms(0)));
        assert_eq!(b.level(ms(0)), 3_950);
    }

    #[test]
    fn a_value_rounded_to_the_nearest_thousand_is_read_on_both_sides() {
        let nearest = Rounding::Nearest(1000);
        let mut b = Bucket::new(60_000, 60_000, ms(0));
        assert!(b.try_take(57_600, ms(0)).is_ok());
        // 2 400 left; the provider reports 2 000 (the truth in [1 500,
        // 2 500)): the model is inside, nothing changes.
        assert!(!b.sync_remaining(2_000, nearest, ms(0)));
        assert_eq!(b.credit_level(ms(0)), 2_400);
        // Read as rounded down the same 2 000 would have allowed up to
        // 2 999 and let a model 500 too high stand; read as nearest, 3 000
        // reported for a truth of 2 600 is no reason to raise anything.
        assert!(!b.sync_remaining(3_000, nearest, ms(0)));
        // A model above the range goes to the value reported (the middle
        // of the range: its bottom would throw half a step away).
        assert!(b.sync_remaining(1_000, nearest, ms(0)));
        assert_eq!(b.credit_level(ms(0)), 1_000);
        // Inside the range [500, 1 500) again: nothing changes.
        assert!(!b.sync_remaining(1_000, nearest, ms(0)));
        // 0 is [0, 500): never below empty.
        assert!(b.sync_remaining(0, nearest, ms(0)));
        assert_eq!(b.credit_level(ms(0)), 0);
    }

    #[test]
    fn a_mark_compares_the_view_with_the_credit_at_the_send() {
        // 60 000 per minute = 1 000 per second; a pace large enough.
        let mut b = Bucket::new(60_000, 60_000, ms(0));
        assert!(b.try_take(10_000, ms(0)).is_ok());
        let mark = b.mark();
        // The answer comes 2 s later: 2 000 refilled meanwhile.
        let view = ServerView {
            remaining: Some(50_000),
            until_full: None,
        };
        // Read against the credit now (52 000), the server's view looks
        // lower and would cost those 2 000; read against the send, it
        // agrees and nothing changes.
        let mut stale = b.clone();
        assert!(stale.sync(&view, None, Rounding::Down(1000), ms(2_000)));
        assert_eq!(stale.credit_level(ms(2_000)), 50_000);
        assert!(!b.sync(&view, Some(mark), Rounding::Down(1000), ms(2_000)));
        assert_eq!(b.credit_level(ms(2_000)), 52_000);
        // Another client had taken 3 210 before our request reached the
        // server: the credit loses 3 210, not the refill.
        let view = ServerView {
            remaining: Some(46_790),
            until_full: None,
        };
        assert!(b.sync(&view, Some(mark), Rounding::Down(1000), ms(2_000)));
        assert_eq!(b.credit_level(ms(2_000)), 48_790);
    }

    #[test]
    fn reset_implies_the_server_level_and_only_lowers() {
        // 30 000 per minute: 500 per second.
        let mut b = Bucket::new(30_000, 10_000, ms(0));
        // Full in 59 s: the server holds 500 now.
        assert!(b.sync_reset(30_000, Duration::from_secs(59), ms(0)));
        assert_eq!(b.level(ms(0)), 500);
        // 2 000 fit 3 s later, when the server's line reaches them.
        assert_eq!(b.try_take(2_000, ms(0)), Err(ms(3_000) + EDGE_MARGIN));
        // A reset a minute or more away: nothing left, never negative.
        let mut b = Bucket::new(60, 10, ms(0));
        assert!(b.sync_reset(60, Duration::from_secs(90), ms(0)));
        assert_eq!(b.level(ms(0)), 0);
        // A near reset implies more than the local level: nothing changes.
        let mut b = Bucket::new(60, 10, ms(0));
        assert!(b.try_take(8, ms(0)).is_ok());
        assert!(!b.sync_reset(60, Duration::from_secs(1), ms(0)));
        assert!(!b.sync_reset(60, Duration::ZERO, ms(0)));
        assert_eq!(b.level(ms(0)), 2);
        // A full server: nothing changes.
        let mut b = Bucket::new(30_000, 10_000, ms(0));
        assert!(!b.sync_reset(30_000, Duration::ZERO, ms(0)));
        assert_eq!(b.credit_level(ms(0)), 30_000);
        // The server's bucket holds 9 500 of its 30 000: the credit (not
        // the pace) follows it.
        assert!(b.sync_reset(30_000, Duration::from_secs(41), ms(0)));
        assert_eq!(b.credit_level(ms(0)), 9_500);
        assert_eq!(b.level(ms(0)), 9_500);
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
    fn sync_lowers_the_credit_only_and_a_cut_keeps_it() {
        let mut b = Bucket::with_credit(600, 50, 600, 1200, ms(0));
        assert!(b.sync_remaining(100, Rounding::Exact, ms(0)));
        assert_eq!(b.credit_level(ms(0)), 100);
        assert_eq!(b.level(ms(0)), 50);
        b.set_permille(100, ms(0));
        assert_eq!(b.effective_capacity(), 5);
        assert_eq!(b.credit_level(ms(0)), 100);
        assert_eq!(b.level(ms(0)), 5);
    }

    #[test]
    fn raising_the_credit_leaves_the_pace_alone() {
        // 60/min, pace 1, credit 1 then learned to be 10.
        let mut b = Bucket::with_credit(60, 1, 1, 1000, ms(0));
        assert!(b.try_take(1, ms(0)).is_ok());
        b.set_credit_capacity(10, ms(0));
        b.raise_credit(5, ms(0));
        assert_eq!(b.credit_level(ms(0)), 5);
        // The pace still holds the next send a second away.
        assert_eq!(b.try_take(1, ms(0)), Err(ms(1000)));
        let mut r = b.clone();
        r.refund(1, ms(0));
        assert!(
            r.try_take(1, ms(0)).is_ok(),
            "a refund gives the pace back too"
        );
    }

    #[test]
    fn capacity_rounds_up() {
        assert_eq!(capacity_for(60, Duration::from_secs(1)), 1);
        assert_eq!(capacity_for(50, Duration::from_secs(1)), 1);
        assert_eq!(capacity_for(80_000, Duration::from_secs(1)), 1334);
        assert_eq!(capacity_for(0, Duration::from_secs(1)), 1);
    }
}
