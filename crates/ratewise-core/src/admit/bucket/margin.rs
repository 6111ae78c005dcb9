//! The learned margin: how much of the credit is kept free beyond each
//! request's own amount because 429s showed the model above the
//! provider's level (a surprise), and how it decays in calm.

use super::*;

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

impl Bucket {
    /// How long a learned margin takes to halve: [`MARGIN_HALF_LIFE_FILLS`]
    /// refills of the credit, at least [`MARGIN_MIN_HALF_LIFE`].
    pub(crate) fn margin_half_life(&self) -> Duration {
        let fill = duration_from_nanos(ns_to_fill(self.credit_cap, self.credit_rate()));
        fill.saturating_mul(MARGIN_HALF_LIFE_FILLS)
            .max(MARGIN_MIN_HALF_LIFE)
    }

    pub(super) fn margin_scaled(&self, now: u64) -> i128 {
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
}

#[cfg(test)]
mod tests {
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
}
