//! The share of a stated limit this process may spend when others spend
//! it too and it cannot see them: a process cut off from its peers (a
//! shared store unreachable) paces at its share of the key's stated limits
//! (`share_permille`), and learns the share it really gets from its own
//! 429s, as on a provider that states nothing — never above the stated
//! limit, and raised again when the provider's bucket shows itself at
//! least half full (the others sent less than feared).
//!
//! Where the provider's answers show its bucket (`*-remaining`), the
//! others' spending shows too, without a 429: between two views the
//! bucket refilled at its limit and lost what everyone charged, so what it
//! lost beyond this process's own charges is what the others spent
//! ([`Drain`]). Over a window of a few seconds that gives the key's whole
//! rate `T` beside this process's own `x`. Where `T` ran over the limit
//! and the bucket ended the window low (under a quarter full: over the
//! limit with a bank left is the bank being spent, as at a start), every
//! process's share is cut by the same factor `L / T` (at most halved in
//! one window); where `T` ran under, each gains the same amount (half the
//! room left, all of it where this process is nearly all of `T`). That is
//! AIMD: the cut brings the sum to the limit at once however many
//! processes there are — where "the limit less what the others spent"
//! overshoots by their number — and the equal raises carry the shares
//! toward even. A process sending less than its share for want of work
//! keeps its share; a bucket shown nearly full (the others quiet) raises
//! it back to its starting share at least.

use super::estimated::{SilentEstimate, AGREE, MEASURE_REQUESTS};
use super::{share_of, Belief, Believed, Change, Sample, Sureness};
use crate::time::Instant;
use std::time::Duration;

/// The shortest window a drain is measured over: a few answers' latency
/// (each view is of the bucket when the server took the request, this
/// process's charges are counted at the same instant, so what is in
/// flight cancels; the rounding of a remaining is spread over the window).
const DRAIN_WINDOW: Duration = Duration::from_secs(2);

/// One dimension's share of a stated limit, as this process learns it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Share {
    /// What this process's own 429s taught of its share (units per
    /// minute), seeded at its configured share of the stated limit.
    pub(crate) estimate: SilentEstimate,
    /// The bucket's drain between views, measuring the others.
    drain: Drain,
    /// The share it started at: what a bucket shown nearly full (the
    /// others quiet) raises it back to at least.
    floor: u64,
}

/// The provider's bucket between successive views (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Drain {
    /// The latest view: when, what it showed left, this process's charges.
    last: Option<(Instant, u64, u32)>,
    /// Over the window: units everyone charged, this process's, the time
    /// spanned, and views read.
    all: f64,
    own: f64,
    span: Duration,
    views: u64,
}

/// A success's view of the shared bucket ([`Sample::View`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BucketView {
    /// What the bucket held, whole units (a rounded value's middle).
    pub(crate) remaining: u64,
    /// How far off `remaining` may be (the width of the range its
    /// rounding allows; 1 for an exact value).
    pub(crate) spread: u64,
    /// The bucket's capacity as known (`0`: unknown).
    pub(crate) capacity: u64,
    /// The stated limit, units per minute.
    pub(crate) limit: u64,
    /// This process's running total of units charged on this dimension
    /// at the send (low 32 bits; differences wrap).
    pub(crate) charged: u32,
    /// What the send itself charged on this dimension (counted in
    /// `charged`).
    pub(crate) own: u64,
    /// When the server took the view (the request's admission).
    pub(crate) at: Instant,
    /// The share of the key this process paces at before it has learned
    /// one (per mille of the limit).
    pub(crate) permille: u32,
}

impl BucketView {
    /// The view before this one (when, what it showed left, this
    /// process's charges), and `last` moved on to this one: `None` for a
    /// first view, and for one older than the last (answers reordered),
    /// which says nothing new and leaves `last` alone.
    pub(crate) fn after(
        &self,
        last: &mut Option<(Instant, u64, u32)>,
    ) -> Option<(Instant, u64, u32)> {
        let this = (self.at, self.remaining, self.charged);
        match *last {
            None => {
                *last = Some(this);
                None
            }
            Some((t0, ..)) if self.at <= t0 => None,
            Some(before) => {
                *last = Some(this);
                Some(before)
            }
        }
    }
}

/// Share of the limit the processes' paces sum to below it (1 %): a drain
/// measures the whole key's rate, every unit through the bucket, where a
/// 429's window measures one process's ([`MARGIN`](super::estimated::MARGIN), 3 %); the level each
/// process syncs to the bucket's `remaining` keeps the rest from a 429.
/// On the simulator's three replicas of the `redis-down` shape, 3 % gave
/// 0.895–0.942 of the oracle and 1 % 0.903–0.951, with the same 0–1
/// answered 429 (seeds 1–12).
const DRAIN_MARGIN: f64 = 0.01;

/// A drain window spans at least this many times the error of one
/// remaining (a nearest-thousand one's thousand: 20,000 units of refill).
const SPREAD_TIMES: u64 = 20;

/// What one view of the shared bucket told.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Drained {
    /// Not enough yet.
    Nothing,
    /// The bucket is nearly full: the others are quiet.
    Quiet,
    /// Over the window just closed: this process's rate and everyone's,
    /// units per minute, and whether the bucket ended it low (under a
    /// quarter full).
    Rates { own: f64, all: f64, low: bool },
}

impl Drain {
    /// A view of a bucket of `capacity` refilling at `limit` per minute.
    /// A nearly full bucket starts the window again: its refill may have
    /// overflowed, and then the drain says nothing of the others.
    fn view(&mut self, v: BucketView) -> Drained {
        let BucketView {
            remaining,
            spread,
            capacity,
            limit,
            charged,
            at,
            ..
        } = v;
        let Some((t0, r0, c0)) = v.after(&mut self.last) else {
            return Drained::Nothing;
        };
        let full = |r: u64| capacity > 0 && r.saturating_mul(10) >= capacity.saturating_mul(9);
        // A bucket holding less than a window's refill may have filled
        // and overflowed between two views without either showing it.
        let short = (capacity as f64) < limit as f64 * DRAIN_WINDOW.as_secs_f64() / 60.0;
        if capacity == 0 || short || full(remaining) || full(r0) {
            *self = Drain {
                last: self.last,
                ..Drain::default()
            };
            return if capacity > 0 && full(remaining) {
                Drained::Quiet
            } else {
                Drained::Nothing
            };
        }
        let dt = at.saturating_duration_since(t0);
        let refill = limit as f64 * dt.as_secs_f64() / 60.0;
        self.all += r0 as f64 + refill - remaining as f64;
        self.own += f64::from(charged.wrapping_sub(c0) as i32);
        self.span += dt;
        self.views += 1;
        // Long enough to measure, and to spread the rounding of its two
        // ends thin: the refill it spanned is many times their error.
        let spanned = limit as f64 * self.span.as_secs_f64() / 60.0;
        if self.span < DRAIN_WINDOW
            || self.views < MEASURE_REQUESTS
            || spanned < (spread * SPREAD_TIMES) as f64
        {
            return Drained::Nothing;
        }
        let per_min = 60.0 / self.span.as_secs_f64();
        let (own, all) = (self.own * per_min, self.all.max(self.own) * per_min);
        *self = Drain {
            last: self.last,
            ..Drain::default()
        };
        let low = remaining.saturating_mul(4) < capacity;
        Drained::Rates { own, all, low }
    }
}

impl Share {
    /// A share starting at `permille` of `stated` at `t`, as if measured.
    pub(crate) fn seeded(stated: u64, permille: u32, t: Instant) -> Self {
        let floor = share_of(stated, permille);
        Share {
            estimate: SilentEstimate::seeded(floor, t),
            drain: Drain::default(),
            floor,
        }
    }

    /// The rate it allows of a stated limit `stated`, for a process pacing
    /// at `permille` of the key: what its 429s taught (never above the
    /// stated limit), else its share.
    pub(crate) fn of(&self, stated: u64, permille: u32, t: Instant) -> u64 {
        match self.estimate.rate(t) {
            Some(r) => r.min(stated),
            None => share_of(stated, permille),
        }
    }
}

impl Share {
    /// A view of the shared bucket (see the module docs): at the end of a
    /// window, the share is cut (the key over its limit with its bucket
    /// low), raised (under its limit) or kept; a bucket shown nearly full
    /// raises it to at least where it started.
    fn viewed(&mut self, v: BucketView) -> Change {
        let (limit, at) = (v.limit, v.at);
        // Before any 429 or drain taught a share: the configured one.
        let start = share_of(limit, v.permille);
        if self.floor == 0 {
            self.floor = start;
        }
        let held = Some(self.estimate.rate(at).unwrap_or(start));
        let next = match self.drain.view(v) {
            Drained::Nothing => return Change::NOTHING,
            Drained::Quiet => match held {
                // Well under where it started (a seeded rate reads a hair
                // under its seed): back there, and climbing from there as
                // a bucket at least half full lets it (`headroom`).
                Some(h) if (h as f64) < self.floor as f64 * (1.0 - AGREE / 4.0) => {
                    self.reseed(self.floor, at);
                    self.estimate.headroom(at);
                    return Change::MOVED;
                }
                _ => return Change::NOTHING,
            },
            Drained::Rates { own, all, low } => {
                if own <= 0.0 || all <= 0.0 || limit == 0 {
                    return Change::NOTHING;
                }
                let held = held.map_or(own, |r| r as f64);
                let pace = limit as f64 * (1.0 - DRAIN_MARGIN);
                // Half the room, or all of it where this process is
                // most of what the bucket lost (alone on the key now).
                // Over the limit while the bucket still holds a quarter or
                // more is the bank being spent (a full bucket at the start,
                // a lull's savings): cut only when it runs low.
                let next = if all > pace {
                    if !low {
                        return Change::NOTHING;
                    }
                    held * (pace / all).max(0.5)
                } else {
                    held + (pace - all) * if own >= all * 0.9 { 1.0 } else { 0.5 }
                };
                if (next - held).abs() <= held * AGREE / 10.0 {
                    return Change::NOTHING;
                }
                next
            }
        };
        let next = (next.round() as u64).clamp(1, limit.max(1));
        self.reseed(next, at);
        Change::MOVED
    }

    /// The estimate starts again at `rate` as if measured at `at`; the
    /// open drain window and the starting share stay.
    fn reseed(&mut self, rate: u64, at: Instant) {
        self.estimate = SilentEstimate::seeded(rate, at);
    }
}

impl Belief for Share {
    /// Admissions and ends are what this process let through; a 429 says
    /// its share ran dry; headroom says it may grow: the estimate's rules
    /// ([`SilentEstimate`]), started from the share.
    fn observe(&mut self, sample: &Sample) -> Change {
        match *sample {
            Sample::View(v) => self.viewed(v),
            _ => self.estimate.observe(sample),
        }
    }

    fn believed(&self, t: Instant) -> Option<Believed> {
        self.estimate.rate(t).map(|limit| Believed {
            limit,
            capacity: None,
            sure: Sureness::Share,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admit::belief::test_streams::{admitted, s, throttled};

    #[test]
    fn a_cut_off_process_starts_at_its_share_and_learns_what_it_gets() {
        // A third of a stated 600 RPM: 200.
        let mut sh = Share::seeded(600, 333, s(0.0));
        // Held just under the share, as a measurement is.
        let start = sh.of(600, 333, s(0.0));
        assert!((190..=199).contains(&start), "{start}");
        // It sends 3 a second and meets 429s 10 s apart: what it gets is
        // less than its share, and its 429s teach that.
        let mut t = 0.0;
        for _ in 0..2 {
            for _ in 0..30 {
                sh.observe(&admitted(1, s(t)));
                t += 1.0 / 3.0;
            }
            assert!(sh.observe(&throttled(1, None, s(t))).moved);
        }
        let r = sh.of(600, 333, s(t));
        assert!(r > 0 && r < start, "{r}");
        assert_eq!(sh.believed(s(t)).map(|b| b.sure), Some(Sureness::Share));
        // Never above the stated limit, whatever it probes to.
        assert!(sh.of(100, 333, s(t + 3600.0)) <= 100);
    }

    #[test]
    fn an_unseeded_share_is_the_configured_part() {
        let sh = Share::default();
        assert_eq!(sh.of(1000, 250, s(0.0)), 250);
        assert_eq!(sh.believed(s(0.0)), None);
    }

    /// A view of an exactly counted bucket (capacity `cap`, `limit` a
    /// minute) by a process at half the key.
    fn view(remaining: u64, cap: u64, limit: u64, charged: u32, at: f64) -> Sample {
        Sample::View(BucketView {
            remaining,
            spread: 1,
            capacity: cap,
            limit,
            charged,
            own: 0,
            at: s(at),
            permille: 500,
        })
    }

    /// Three processes cut off from each other share a bucket of 6,000 a
    /// minute (capacity 1,000), each starting at half the key (1.5 times
    /// the limit for the three), each sending single units as fast as its
    /// share allows and reading the bucket in every answer. Returns their
    /// shares after `secs`, and the units the provider refused.
    fn three_on_one_bucket(secs: f64, uneven: bool) -> ([u64; 3], u64) {
        let (limit, cap) = (6_000u64, 1_000u64);
        let mut shares: Vec<Share> = (0..3).map(|_| Share::default()).collect();
        let mut credit = [0.0f64; 3];
        let mut charged = [0u32; 3];
        let mut remaining = cap as f64;
        let mut refused = 0;
        let dt = 0.01;
        let mut t = 0.0;
        while t < secs {
            t += dt;
            remaining = (remaining + limit as f64 * dt / 60.0).min(cap as f64);
            for p in 0..3 {
                let mut rate = shares[p].of(limit, 500, s(t)) as f64;
                if uneven && p == 0 {
                    // One process with little work: a sixth of the key.
                    rate = rate.min(limit as f64 / 6.0);
                }
                credit[p] = (credit[p] + rate * dt / 60.0).min(20.0);
                while credit[p] >= 1.0 {
                    credit[p] -= 1.0;
                    if remaining < 1.0 {
                        refused += 1;
                        continue;
                    }
                    remaining -= 1.0;
                    charged[p] = charged[p].wrapping_add(1);
                    let v = view(remaining as u64, cap, limit, charged[p], t);
                    shares[p].observe(&v);
                }
            }
        }
        let at = s(t);
        (
            std::array::from_fn(|p| shares[p].of(limit, 500, at)),
            refused,
        )
    }

    #[test]
    fn processes_reading_one_bucket_settle_on_shares_summing_to_the_limit() {
        let (shares, refused) = three_on_one_bucket(60.0, false);
        let sum: u64 = shares.iter().sum();
        // Spent whole, less the margin, never over.
        assert!((5_400..=6_000).contains(&sum), "{shares:?}");
        // None starved: each keeps at least half of an even part (equal
        // raises move them toward even, slowly: a minute ends at about
        // 2,400 / 2,100 / 1,300 here).
        for x in shares {
            assert!(x >= 1_000, "{shares:?}");
        }
        // What the three sent over the limit at the start (1.5 times it)
        // is refused only until the first window has measured.
        let (_, later) = three_on_one_bucket(120.0, false);
        assert!(later <= refused + 50, "{refused} then {later}");
    }

    #[test]
    fn a_process_with_little_work_leaves_its_part_to_the_others() {
        let (shares, _) = three_on_one_bucket(60.0, true);
        // The two busy ones take what the quiet one leaves: more than a
        // third each.
        assert!(shares[1] > 2_200 && shares[2] > 2_200, "{shares:?}");
    }

    #[test]
    fn a_nearly_full_bucket_raises_a_cut_share_back_to_where_it_started() {
        let mut sh = Share::default();
        sh.observe(&view(100, 1_000, 6_000, 0, 0.0));
        // A 429 cut it well below half the key.
        for i in 0..20 {
            sh.observe(&admitted(1, s(f64::from(i) * 0.1)));
        }
        sh.observe(&throttled(1, None, s(2.0)));
        let cut = sh.of(6_000, 500, s(2.0));
        assert!(cut < 3_000, "{cut}");
        // The others went quiet: the bucket shows itself nearly full.
        assert!(sh.observe(&view(950, 1_000, 6_000, 1, 3.0)).moved);
        assert!(sh.of(6_000, 500, s(3.0)) >= 2_900);
    }

    #[test]
    fn a_rounded_remaining_is_read_over_a_window_long_enough_to_spread_it() {
        // Output tokens of 12,000 a minute read to the nearest thousand:
        // a window needs 20,000 tokens of refill (100 s) before it says
        // anything, however many views come.
        let mut sh = Share::default();
        let mut moved = false;
        for i in 0..120 {
            let t = f64::from(i) * 0.5;
            let v = Sample::View(BucketView {
                remaining: 1_000,
                spread: 1_000,
                capacity: 2_000,
                limit: 12_000,
                charged: i as u32 * 10,
                own: 10,
                at: s(t),
                permille: 500,
            });
            moved |= sh.observe(&v).moved;
        }
        assert!(!moved);
    }

    #[test]
    fn an_older_view_than_the_last_teaches_nothing() {
        let mut sh = Share::default();
        for i in 0..10 {
            sh.observe(&view(100, 1_000, 6_000, i * 10, f64::from(i)));
        }
        let before = sh.clone();
        assert!(!sh.observe(&view(0, 1_000, 6_000, 0, 1.5)).moved);
        assert_eq!(sh, before);
    }

    #[test]
    fn a_bucket_shorter_than_a_window_says_nothing_of_the_others() {
        // 6,000 a minute in a bucket of 100 (a second of refill): it may
        // fill and overflow between two views unseen.
        let mut sh = Share::default();
        let mut moved = false;
        for i in 0..100 {
            let t = f64::from(i) * 0.1;
            moved |= sh.observe(&view(10, 100, 6_000, i as u32, t)).moved;
        }
        assert!(!moved);
    }

    #[test]
    fn a_bank_being_spent_is_not_a_share_to_cut() {
        // 6,000 a minute, a bucket of 1,000: the bucket drops from 800 to
        // 400 over 4 s (everyone spent 400 + 400 of refill: 12,000 a
        // minute, twice the limit), but still holds more than a quarter.
        let mut sh = Share::default();
        let steps = [800, 700, 600, 500, 400];
        let mut moved = false;
        for (i, r) in steps.into_iter().enumerate() {
            moved |= sh
                .observe(&view(r, 1_000, 6_000, i as u32 * 50, i as f64))
                .moved;
        }
        assert!(!moved);
        // The same drain into a bucket under a quarter full is cut, at
        // most by half.
        let mut sh = Share::default();
        let before = sh.of(6_000, 500, s(0.0));
        for (i, r) in [600, 500, 400, 300, 200].into_iter().enumerate() {
            sh.observe(&view(r, 1_000, 6_000, i as u32 * 50, i as f64));
        }
        let after = sh.of(6_000, 500, s(4.0));
        assert!(
            after < before && after >= before / 2 - 1,
            "{before} -> {after}"
        );
    }
}
