//! What the provider's answers say about a bucket's credit: a mark of
//! the credit at a send, the server's view of its bucket (a `remaining`
//! read through the provider's rounding, a `reset` with its limit) and the
//! corrections that follow — lowered to the evidence, never raised except
//! by a proven refund.
//!
//! These are beliefs about the provider's level applied to the credit; the
//! arithmetic they act on (refill, take, debt) is the parent module's.

use super::*;
use crate::admit::profile::Rounding;

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

impl Bucket {
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
    pub(super) fn credit_then(&self, mark: CreditMark) -> i128 {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
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
}
