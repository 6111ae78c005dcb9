//! The provider's level as its answers show it, applied to a bucket's
//! credit: a mark of the credit at a send, the server's view of its bucket
//! (a `remaining` read through the provider's rounding, a `reset` with its
//! limit) and the corrections that follow — lowered to the evidence, never
//! raised except by a proven refund or a capacity learned larger — and the
//! margin 429s teach to keep free ([`Margin`]).
//!
//! A belief about a bucket, not its arithmetic: the bucket (`admit/bucket`)
//! refills, takes and waits; this module decides what its credit should
//! be told, and keeps the running total of what it was told so that one
//! discrepancy several answers report is corrected once.

use super::margin::Margin;
use crate::admit::bucket::{local_ns, scaled, unix_ns, Bucket, MAX_LIMIT, NS_PER_MIN, SCALE};
use crate::admit::profile::Rounding;
use crate::time::Instant;
use std::time::Duration;

/// A credit level saved when a request is sent ([`Level::mark`]), to
/// compare the server's view for that request with ([`Level::sync`]).
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

/// What is believed of one provider bucket's level beyond the bucket's
/// own arithmetic: the corrections made to its credit on the server's word
/// and the margin learned from surprises. Kept beside its bucket, and
/// reset with it when the bucket is dropped or made anew.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Level {
    /// Running total of corrections made to the credit on the server's
    /// word (lowerings negative, refunds positive): a view is read against
    /// the credit at its send plus the corrections made since, so one
    /// discrepancy is corrected once, however many answers report it.
    corrected: i128,
    /// Kept free in the credit beyond every request's own amount, because
    /// 429s showed the model above the provider's level
    /// ([`surprise`](Self::surprise)).
    margin: Margin,
}

/// A [`Level`] as a key's shared record holds it, beside its bucket's
/// record (the same JSON object: flattened there).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct LevelRecord {
    corrected: String,
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

impl Level {
    /// The record of this level; `shift`: Unix nanoseconds of the origin.
    pub(crate) fn to_record(self, shift: i128) -> LevelRecord {
        let (margin, at) = self.margin.parts();
        LevelRecord {
            corrected: self.corrected.to_string(),
            margin: margin.to_string(),
            margin_at: unix_ns(at, shift),
        }
    }

    /// A level from its record, for bucket `b` (its margin clamped to what
    /// this process would keep); `None` when the record is malformed.
    pub(crate) fn from_record(r: &LevelRecord, b: &Bucket, shift: i128) -> Option<Level> {
        let mut level = Level {
            corrected: r.corrected.parse().ok()?,
            margin: Margin::restored(r.margin.parse().ok()?, local_ns(r.margin_at, shift)),
        };
        level.fit(b);
        Some(level)
    }

    /// After `b`'s capacities changed: the margin is never more than half
    /// of the bucket it is kept in.
    pub(crate) fn fit(&mut self, b: &Bucket) {
        self.margin.clamp_to(b);
    }

    /// What the credit keeps free at `now` beyond a request's own amount,
    /// in scaled units: the learned margin.
    pub(crate) fn keep_free(&self, b: &Bucket, now: Instant) -> i128 {
        self.margin.scaled_at(b, now)
    }

    /// The learned margin at `now`, in whole units.
    pub(crate) fn margin(&self, b: &Bucket, now: Instant) -> u64 {
        self.margin.units(b, now)
    }

    /// The margin grows after a surprise ([`Margin::learn`]).
    pub(crate) fn learn_margin(&mut self, b: &Bucket, now: Instant) {
        self.margin.learn(b, now);
    }

    /// The credit now, to compare a later server view with: take it right
    /// after a request's reservation, and pass it to [`sync`](Self::sync)
    /// with the view the server reports for that request.
    #[inline]
    pub(crate) fn mark(&self, b: &Bucket) -> CreditMark {
        // Net of corrections so far; scaled units / 2³²: a shift, a
        // resolution of 1/14 000 of a unit, a range of ±2⁴⁵ units.
        let m = (b.credit_scaled() - self.corrected) >> MARK_SHIFT;
        CreditMark(m.clamp(i128::from(i64::MIN + 1), i128::from(i64::MAX)) as i64)
    }

    /// What the credit held after the take that left `mark` (corrections
    /// since counted), as a share of the credit capacity in per-mille:
    /// how loaded this bucket was at that send, to compare buckets when a
    /// 429 names no dimension.
    pub(crate) fn room_permille(&self, b: &Bucket, mark: CreditMark) -> i128 {
        self.credit_then(mark).saturating_mul(1000) / b.credit_cap_scaled().max(1)
    }

    /// The credit at `mark`, plus the corrections made since.
    fn credit_then(&self, mark: CreditMark) -> i128 {
        (i128::from(mark.0) << MARK_SHIFT) + self.corrected
    }

    /// Records a change of the credit made on the server's word.
    fn corrected_by(&mut self, delta: i128) {
        self.corrected = self.corrected.saturating_add(delta);
    }

    /// Gives back `amount` the server showed it never charged (a held
    /// send): a correction, so views taken before it count it.
    pub(crate) fn refund(&mut self, b: &mut Bucket, amount: u64, now: Instant) {
        b.refill(now);
        let before = b.credit_scaled();
        b.put_back(amount, now);
        self.corrected_by(b.credit_scaled() - before);
    }

    /// Raises the credit alone by `amount` (at most to its capacity): the
    /// server showed it holds more than modelled (a capacity learned
    /// larger). A correction, like [`refund`](Self::refund), but the pace
    /// is ours and keeps its level: learning that the provider's bucket is
    /// bigger does not make us send faster than our pace.
    pub(crate) fn raise_credit(&mut self, b: &mut Bucket, amount: u64, now: Instant) {
        let d = b.add_credit(scaled(amount), now);
        self.corrected_by(d);
    }

    /// Lowers the credit by `by` scaled units on the server's word.
    fn lower(&mut self, b: &mut Bucket, by: i128, now: Instant) {
        let d = b.add_credit(-by, now);
        self.corrected_by(d);
    }

    #[cfg(test)]
    /// Header sync against the credit now: the server says `remaining`
    /// units are left (see [`sync`](Self::sync)). Returns whether the
    /// credit was lowered.
    pub(crate) fn sync_remaining(
        &mut self,
        b: &mut Bucket,
        remaining: u64,
        rounding: Rounding,
        now: Instant,
    ) -> bool {
        let view = ServerView {
            remaining: Some(remaining),
            until_full: None,
        };
        self.sync(b, &view, None, rounding, now)
    }

    #[cfg(test)]
    /// Header sync from a `-reset`: the server's bucket of `limit` units per
    /// minute is full again `until_full` from now, so — refilling at `limit`
    /// per minute up to the credit capacity `C` — it holds about `C −
    /// limit · until_full / 1 min` units now. When that is lower than the
    /// local credit, it wins; it never raises the credit. The credit then
    /// refills from there at the limit, so a request needing `n` units is
    /// not admitted before the server's line `limit − rate · (reset − t)`
    /// reaches `n`.
    ///
    /// Example: the unit test `tests::example_sync_reset`.
    pub(crate) fn sync_reset(
        &mut self,
        b: &mut Bucket,
        limit: u64,
        until_full: Duration,
        now: Instant,
    ) -> bool {
        let view = ServerView {
            remaining: None,
            until_full: Some((limit, until_full)),
        };
        self.sync(b, &view, None, Rounding::Exact, now)
    }

    /// Header sync: corrects `b`'s credit to the server's view of its
    /// bucket.
    ///
    /// Without a `mark`, the view is compared with the credit now. With the
    /// [`mark`](Self::mark) taken when the request was sent, it is compared
    /// with the credit *then* — about when the server took its view — plus
    /// the corrections made since (so that a discrepancy several answers
    /// report is corrected once), and the credit is lowered by the
    /// difference. A response arrives a latency after its view was taken;
    /// meanwhile both buckets refilled and both were charged for the
    /// requests sent since, so a view compared with the credit now looks
    /// lower than it is by about `latency × rate`, and lowering to it
    /// wastes that much on every correction.
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
    ///   than kept: differences the size of a second of refill otherwise
    ///   pile up unseen, and a client running at the edge of the limit
    ///   gets 429s from them;
    /// * from a reset: the level it implies, already taken in the server's
    ///   favour for whole-second timestamps.
    ///
    /// Example: the unit test `tests::example_sync`.
    pub(crate) fn sync(
        &mut self,
        b: &mut Bucket,
        view: &ServerView,
        mark: Option<CreditMark>,
        rounding: Rounding,
        now: Instant,
    ) -> bool {
        let Some((lo, hi, to)) = view.range(rounding, b.credit_cap_scaled()) else {
            return false;
        };
        b.refill(now);
        let then = match mark {
            Some(m) => self.credit_then(m),
            None => b.credit_scaled(),
        };
        // The range is half-open: a remaining `r` allows less than `r + 1`.
        if then >= hi && then > to {
            debug_assert!(to >= lo);
            self.lower(b, then - to, now);
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
        b: &Bucket,
        view: &ServerView,
        mark: CreditMark,
        rounding: Rounding,
    ) -> Option<u64> {
        let (lo, _, _) = view.range(rounding, b.credit_cap_scaled())?;
        let then = self.credit_then(mark);
        let over = (lo - then).max(0);
        // Rounding up, less a mark's resolution: a mark is the credit
        // rounded down to 2³² scaled units.
        let units = ((over - (1 << MARK_SHIFT)).max(0) + SCALE - 1) / SCALE;
        Some(u64::try_from(units).unwrap_or(u64::MAX))
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
    pub(crate) fn surprise(
        &mut self,
        b: &mut Bucket,
        amount: u64,
        mark: CreditMark,
        now: Instant,
    ) -> Option<u64> {
        mark.get()?;
        b.refill(now);
        let want = scaled(amount);
        let before = self.credit_then(mark).saturating_add(want);
        if before < want.min(b.credit_cap_scaled()) {
            return None;
        }
        let gap = before - (want - SCALE).max(0);
        self.lower(b, gap, now);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admit::bucket::EDGE_MARGIN;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    #[test]
    fn example_sync_reset() {
        use crate::admit::belief::level::Level;
        use crate::admit::bucket::Bucket;
        use crate::Instant;
        use std::time::Duration;
        // 60 per minute, a pace of 10; the server is full in 57 s: 3 left.
        let mut b = Bucket::new(60, 10, Instant::ZERO);
        let mut l = Level::default();
        assert!(l.sync_reset(&mut b, 60, Duration::from_secs(57), Instant::ZERO));
        assert_eq!(b.level(Instant::ZERO), 3);
        // A reset further away than before can only lower it again; a nearer
        // one (more capacity) never raises it.
        assert!(!l.sync_reset(&mut b, 60, Duration::from_secs(1), Instant::ZERO));
        assert_eq!(b.level(Instant::ZERO), 3);
    }

    #[test]
    fn example_sync() {
        use crate::admit::belief::level::{Level, ServerView};
        use crate::admit::bucket::Bucket;
        use crate::admit::profile::Rounding::Exact;
        use crate::Instant;
        // 60 per minute; a request is sent at 0 and answered 5 s later.
        let mut b = Bucket::new(60, 10, Instant::ZERO);
        let mut l = Level::default();
        assert!(b.try_take(1, Instant::ZERO).is_ok());
        let mark = l.mark(&b); // 59 in credit after the take
        let later = Instant::from_millis(5_000);
        let view = ServerView {
            remaining: Some(59),
            until_full: None,
        };
        // The server agreed then: nothing changes, though 59 < 60 now.
        assert!(!l.sync(&mut b, &view, Some(mark), Exact, later));
        assert_eq!(b.credit_level(later), 60);
        // Another client had taken 20: the credit loses 20, not the refill.
        let view = ServerView {
            remaining: Some(39),
            until_full: None,
        };
        assert!(l.sync(&mut b, &view, Some(mark), Exact, later));
        assert_eq!(b.credit_level(later), 40);
    }

    #[test]
    fn example_surplus() {
        use crate::admit::belief::level::{Level, ServerView};
        use crate::admit::bucket::Bucket;
        use crate::admit::profile::Rounding::Exact;
        use crate::Instant;
        let mut b = Bucket::new(60, 10, Instant::ZERO);
        let l = Level::default();
        assert!(b.try_take(2, Instant::ZERO).is_ok());
        let mark = l.mark(&b); // 58
        let view = |r| ServerView {
            remaining: Some(r),
            until_full: None,
        };
        assert_eq!(l.surplus(&b, &view(58), mark, Exact), Some(0));
        assert_eq!(l.surplus(&b, &view(59), mark, Exact), Some(1));
        assert_eq!(l.surplus(&b, &view(40), mark, Exact), Some(0));
    }

    #[test]
    fn sync_only_lowers_and_reads_rounded_values_as_ranges() {
        let down = Rounding::Down(1000);
        let mut b = Bucket::new(600_000, 10_000, ms(0));
        let mut l = Level::default();
        // A multiple of 1 000 may be rounded down: up to 599 999 — the
        // credit of 600 000 is above it by one, so it goes.
        assert!(l.sync_remaining(&mut b, 599_000, down, ms(0)));
        assert_eq!(b.credit_level(ms(0)), 599_000);
        assert!(!l.sync_remaining(&mut b, 599_000, down, ms(0)));
        assert!(l.sync_remaining(&mut b, 5_000, down, ms(0)));
        assert_eq!(b.level(ms(0)), 5_000);
        // Higher views never raise it.
        assert!(!l.sync_remaining(&mut b, 5_999, down, ms(0)));
        assert!(!l.sync_remaining(&mut b, 8_000, down, ms(0)));
        // 4 000 may be anything up to 4 999: the credit of 5 000 is above.
        assert!(l.sync_remaining(&mut b, 4_000, down, ms(0)));
        assert_eq!(b.level(ms(0)), 4_000);
        // Anything else is exact: 3 950 lowers by 50.
        assert!(l.sync_remaining(&mut b, 3_950, down, ms(0)));
        assert_eq!(b.level(ms(0)), 3_950);
        // The same view again: the credit is inside [3 950, 3 951).
        assert!(!l.sync_remaining(&mut b, 3_950, down, ms(0)));
        assert_eq!(b.level(ms(0)), 3_950);
    }

    #[test]
    fn a_value_rounded_to_the_nearest_thousand_is_read_on_both_sides() {
        let nearest = Rounding::Nearest(1000);
        let mut b = Bucket::new(60_000, 60_000, ms(0));
        let mut l = Level::default();
        assert!(b.try_take(57_600, ms(0)).is_ok());
        // 2 400 left; the provider reports 2 000 (the truth in [1 500,
        // 2 500)): the model is inside, nothing changes.
        assert!(!l.sync_remaining(&mut b, 2_000, nearest, ms(0)));
        assert_eq!(b.credit_level(ms(0)), 2_400);
        // Read as rounded down the same 2 000 would have allowed up to
        // 2 999 and let a model 500 too high stand; read as nearest, 3 000
        // reported for a truth of 2 600 is no reason to raise anything.
        assert!(!l.sync_remaining(&mut b, 3_000, nearest, ms(0)));
        // A model above the range goes to the value reported (the middle
        // of the range: its bottom would throw half a step away).
        assert!(l.sync_remaining(&mut b, 1_000, nearest, ms(0)));
        assert_eq!(b.credit_level(ms(0)), 1_000);
        // Inside the range [500, 1 500) again: nothing changes.
        assert!(!l.sync_remaining(&mut b, 1_000, nearest, ms(0)));
        // 0 is [0, 500): never below empty.
        assert!(l.sync_remaining(&mut b, 0, nearest, ms(0)));
        assert_eq!(b.credit_level(ms(0)), 0);
    }

    #[test]
    fn a_mark_compares_the_view_with_the_credit_at_the_send() {
        // 60 000 per minute = 1 000 per second; a pace large enough.
        let mut b = Bucket::new(60_000, 60_000, ms(0));
        let mut l = Level::default();
        assert!(b.try_take(10_000, ms(0)).is_ok());
        let mark = l.mark(&b);
        // The answer comes 2 s later: 2 000 refilled meanwhile.
        let view = ServerView {
            remaining: Some(50_000),
            until_full: None,
        };
        // Read against the credit now (52 000), the server's view looks
        // lower and would cost those 2 000; read against the send, it
        // agrees and nothing changes.
        let (mut stale, mut ls) = (b.clone(), l);
        assert!(ls.sync(&mut stale, &view, None, Rounding::Down(1000), ms(2_000)));
        assert_eq!(stale.credit_level(ms(2_000)), 50_000);
        assert!(!l.sync(&mut b, &view, Some(mark), Rounding::Down(1000), ms(2_000)));
        assert_eq!(b.credit_level(ms(2_000)), 52_000);
        // Another client had taken 3 210 before our request reached the
        // server: the credit loses 3 210, not the refill.
        let view = ServerView {
            remaining: Some(46_790),
            until_full: None,
        };
        assert!(l.sync(&mut b, &view, Some(mark), Rounding::Down(1000), ms(2_000)));
        assert_eq!(b.credit_level(ms(2_000)), 48_790);
    }

    #[test]
    fn reset_implies_the_server_level_and_only_lowers() {
        // 30 000 per minute: 500 per second.
        let mut b = Bucket::new(30_000, 10_000, ms(0));
        let mut l = Level::default();
        // Full in 59 s: the server holds 500 now.
        assert!(l.sync_reset(&mut b, 30_000, Duration::from_secs(59), ms(0)));
        assert_eq!(b.level(ms(0)), 500);
        // 2 000 fit 3 s later, when the server's line reaches them.
        assert_eq!(b.try_take(2_000, ms(0)), Err(ms(3_000) + EDGE_MARGIN));
        // A reset a minute or more away: nothing left, never negative.
        let mut b = Bucket::new(60, 10, ms(0));
        let mut l = Level::default();
        assert!(l.sync_reset(&mut b, 60, Duration::from_secs(90), ms(0)));
        assert_eq!(b.level(ms(0)), 0);
        // A near reset implies more than the local level: nothing changes.
        let mut b = Bucket::new(60, 10, ms(0));
        let mut l = Level::default();
        assert!(b.try_take(8, ms(0)).is_ok());
        assert!(!l.sync_reset(&mut b, 60, Duration::from_secs(1), ms(0)));
        assert!(!l.sync_reset(&mut b, 60, Duration::ZERO, ms(0)));
        assert_eq!(b.level(ms(0)), 2);
        // A full server: nothing changes.
        let mut b = Bucket::new(30_000, 10_000, ms(0));
        let mut l = Level::default();
        assert!(!l.sync_reset(&mut b, 30_000, Duration::ZERO, ms(0)));
        assert_eq!(b.credit_level(ms(0)), 30_000);
        // The server's bucket holds 9 500 of its 30 000: the credit (not
        // the pace) follows it.
        assert!(l.sync_reset(&mut b, 30_000, Duration::from_secs(41), ms(0)));
        assert_eq!(b.credit_level(ms(0)), 9_500);
        assert_eq!(b.level(ms(0)), 9_500);
    }

    #[test]
    fn sync_lowers_the_credit_only_and_a_cut_keeps_it() {
        let mut b = Bucket::with_credit(600, 50, 600, 1200, ms(0));
        let mut l = Level::default();
        assert!(l.sync_remaining(&mut b, 100, Rounding::Exact, ms(0)));
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
        let mut l = Level::default();
        assert!(b.try_take(1, ms(0)).is_ok());
        b.set_credit_capacity(10, ms(0));
        l.raise_credit(&mut b, 5, ms(0));
        assert_eq!(b.credit_level(ms(0)), 5);
        // The pace still holds the next send a second away.
        assert_eq!(b.try_take(1, ms(0)), Err(ms(1000)));
        let (mut r, mut lr) = (b.clone(), l);
        lr.refund(&mut r, 1, ms(0));
        assert!(
            r.try_take(1, ms(0)).is_ok(),
            "a refund gives the pace back too"
        );
    }
}
