//! The others on a key that this process cannot see: a teammate's
//! notebook, another service, a client outside the shared store. They
//! leave no 429 of theirs and no record, only a bucket that refills more
//! slowly than its stated limit. This process reads that drain from the
//! provider's `*-remaining` beside its own charges, and paces at the
//! stated limit less what the others take.
//!
//! Between two views of the bucket (each taken when the server took one
//! of this process's sends: after that send's charge when it was
//! admitted, without it when it was answered 429 or another error, as
//! `Controller::sync_view` takes an error answer's view) the bucket refilled at
//! its limit and lost what everyone charged: what it lost beyond this
//! process's own charges (net of what the provider gave back) is what the
//! others took. That holds only while the bucket never filled in between
//! (a full bucket stops refilling, and then the others' takes are not
//! seen), which is known when either
//!
//! * it could not have: the first view's level plus a whole refill at the
//!   limit and all that was given back of this process's reservations in
//!   between (unused `max_tokens`) stays under the capacity; or
//! * nothing of this process's was charged between the two sends and the
//!   bucket was not full before the second send's own charge: the level
//!   only rose in between, so it never reached the top;
//!
//! and only while the first view showed a level: a request as large as
//! the bucket leaves a debt, shown as nothing left, and the refill that
//! pays it back is nobody's take.
//!
//! The 429s' views are what reach the short buckets (one or two seconds
//! of refill): there a success's view is mostly of a bucket that filled
//! in between, while two 429s a short wait apart show a bucket short of
//! a request at both ends. Read from both, with the debt rule, a 2 s bucket that
//! another client drains by a third is paced at what it leaves (`ratewise
//! simulate --matrix --sample 300`, seeds 5, 11, 23: five cells with
//! another client held that missed, one 29 % → 0.8 % answered 429, and
//! none newly missed); without the debt rule and the rounding's (below)
//! lone keys were cut by phantoms (nine cells 0.94–0.99 → 0.75–0.89 of
//! the oracle's goodput).
//! A deep bucket (from [`DEEP`], a minute's as Anthropic and OpenAI
//! document) is not cut: each view corrects it well before the others'
//! takes add up to a 429, and a cut there only loses goodput. Between, where
//! a view arrives late (a 10 s answer into a 10 s bucket) and the others
//! took a third of the refill meanwhile, the cut is what keeps the next
//! send from a 429 (seed 5: 2.4 % → 0.8 % answered 429, one 15.2 % → 0).
//!
//! Over a window of a few seconds the others' takes per minute are what
//! the stated limit is cut by (halfway to each new window's measure once
//! one is held); a view of a bucket nearly full after this process's
//! charge halves it (the others are quieter than feared, or gone).
//!
//! A process cut off from its peers uses its [`Share`](super::Share)
//! instead, which measures the same drain against its share of the key.

use super::{Belief, Believed, BucketView, Change, Sample, Sureness};
use crate::time::Instant;
use std::time::Duration;

/// The shortest window the others' takes are summed over: several views,
/// so one late answer or one rounding does not move the pace.
const WINDOW: Duration = Duration::from_secs(4);

/// A bucket holding this much refill or more is deep enough that each
/// view's correction of the credit keeps this process right between
/// views; it is not cut by the others' takes.
const DEEP: Duration = Duration::from_secs(30);

/// A bucket holding less refill than this is not measured: under the
/// shortest bucket documented (a second's), it fills and empties between
/// any two views.
const SHALLOW: Duration = Duration::from_millis(900);

/// A rounded `remaining` is read only on a bucket holding at least this
/// many of its steps: on a bucket of one or two steps, a rounding of half
/// a step at each end of an interval is as large as what the others take
/// in it. The lone shipped `cold-key-5s` read such noise as takes and
/// fell from 0.968 to 0.858 of the limit, `short-buckets-10s` from 0.997
/// to 0.986, where only the top of each view's range is used to choose
/// the intervals (below).
const COARSE_TIMES: u64 = 5;

/// Views a window holds at least.
const WINDOW_VIEWS: u32 = 3;

/// The refill a window spans is at least this many times the error of an
/// exact remaining (one unit): a window of a few requests' refill measures
/// a requests bucket (twenty, as [`Share`](super::Share) asks, left most
/// 10 s buckets of the matrix unmeasured within their run: seed 5, 5 cells
/// with another client held that missed, 8 at three times).
const SPREAD_TIMES: f64 = 3.0;

/// The refill a window spans is at least this many times the error of a
/// rounded remaining (a nearest-thousand one's thousand: 20,000 units).
/// Only a window's two ends carry the rounding (the views between
/// telescope), so its error is one spread over its span: at three times,
/// lone keys with rounded token headers read a third of the limit of noise
/// and lost up to 2 % of their goodput to phantom takes (the shipped
/// `short-buckets-10s` 0.997 → 0.984 of the limit, `anthropic-tier1`
/// 0.998 → 0.982).
const ROUNDED_SPREAD_TIMES: f64 = 20.0;

/// At most this share of a stated limit is believed taken by others: the
/// process keeps a tenth of the limit to learn from however loud they are.
const MOST: f64 = 0.9;

/// A change under this share of the limit is not applied (the buckets
/// are not rebuilt for noise), nor is a drain under it believed at all.
const STEP: f64 = 0.02;

/// A view of the bucket at least this full (tenths of its capacity) is
/// "full".
const FULL_TENTHS: u64 = 9;

/// What the others on the key are believed to take (see the module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Others {
    /// The others' takes believed, units per minute: the running mean of
    /// the windows' measures, signed (noise averages out; see `viewed`).
    rate: f64,
    /// What the limit is cut by (`rate` once it moved by a [`STEP`]).
    applied: u64,
    /// The last view: when, what it showed left, this process's charges.
    last: Option<(Instant, u64, u32)>,
    /// Whether the last view may hide a debt (see `viewed`).
    last_debt: bool,
    /// The fullest the bucket was shown, before a send's own charge.
    top: u64,
    /// The open window: the others' takes summed, the time spanned, views.
    took: f64,
    span: Duration,
    views: u32,
}

impl Others {
    /// A stated `limit` less what the others take, never under a tenth
    /// of it.
    pub(crate) fn of(&self, limit: u64) -> u64 {
        if self.applied == 0 {
            return limit;
        }
        limit.saturating_sub(self.applied).max(limit / 10).max(1)
    }

    fn viewed(&mut self, v: BucketView) -> Change {
        let BucketView {
            remaining,
            spread,
            capacity,
            limit,
            charged,
            own,
            at,
            ..
        } = v;
        // The capacity as the bucket has shown it, at most: one taken too
        // large would count a full bucket's idle refill as the others'
        // takes (a spill the views cannot see), so a key never shown near
        // full is not read until it is (conservative: a `reset` read at
        // the whole limit, the provider's promise, proves the true one).
        // An empty view after a take as large as the bucket may be a
        // debt's (see `debt` below): it proves no level.
        if remaining >= spread || capacity == 0 || own < capacity {
            self.top = self.top.max(remaining.saturating_add(own));
        }
        let capacity = match capacity {
            0 => self.top,
            c => c.min(self.top),
        };
        if limit == 0 || capacity == 0 {
            return Change::NOTHING;
        }
        let depth = capacity as f64 * 60.0 / limit as f64;
        let coarse = spread > 1 && capacity < spread.saturating_mul(COARSE_TIMES);
        if depth >= DEEP.as_secs_f64() || depth < SHALLOW.as_secs_f64() || coarse {
            // Too deep to need it, or too shallow or too coarsely shown to
            // read it (see `DEEP`, `SHALLOW`, `COARSE_TIMES`): no cut.
            self.rate = 0.0;
            return self.apply(limit as f64);
        }
        let full = |r: u64| r.saturating_mul(10) >= capacity.saturating_mul(FULL_TENTHS);
        // A request as large as the bucket is admitted by a full one and
        // leaves a debt, which the provider shows as nothing left: the
        // view is no level, and the refill that pays the debt back would
        // read as the others' takes (lone keys on one-second buckets with
        // requests larger than the bucket lost up to a fifth of their
        // goodput to it).
        let debt = remaining < spread && own >= capacity;
        let first = self.last.is_none();
        let Some((t0, r0, c0)) = v.after(&mut self.last) else {
            if first {
                self.last_debt = debt;
            }
            return Change::NOTHING;
        };
        if std::mem::replace(&mut self.last_debt, debt) {
            return Change::NOTHING;
        }
        if full(remaining) {
            // Room to spare after this process's own charge: nothing to
            // measure, and whatever the others take, it is less than feared.
            self.restart_window();
            if self.rate > 0.0 {
                self.rate /= 2.0;
                return self.apply(limit as f64);
            }
            return Change::NOTHING;
        }
        let dt = at.saturating_duration_since(t0);
        let refill = limit as f64 * dt.as_secs_f64() / 60.0;
        let mine = f64::from(charged.wrapping_sub(c0) as i32);
        let between = mine - own as f64;
        // What it gave back of this process's reservations in between
        // (unused `max_tokens`) raised the level as a refill does.
        let given_back = (-between).max(0.0);
        // Whether an interval is read depends on the levels shown, so a
        // rounded one is taken at the top of its range: read at its
        // middle, the rounding would choose the intervals whose end reads
        // low, and so the takes high (a lone key rounded to thousands on
        // a bucket of 1,700 read up to 1,700 an interval taken by nobody:
        // 0.98 → 0.85 of the oracle's goodput).
        let high = |r: u64| r.saturating_add(spread / 2);
        let never_full = (high(r0) as f64) + refill + given_back < capacity as f64
            || (between.abs() < 1.0 && !full(high(remaining).saturating_add(own)));
        if !never_full {
            return Change::NOTHING;
        }
        self.took += r0 as f64 + refill - remaining as f64 - mine;
        self.span += dt;
        self.views += 1;
        let spanned = limit as f64 * self.span.as_secs_f64() / 60.0;
        let times = if spread > 1 {
            ROUNDED_SPREAD_TIMES
        } else {
            SPREAD_TIMES
        };
        if self.span < WINDOW || self.views < WINDOW_VIEWS || spanned < spread as f64 * times {
            return Change::NOTHING;
        }
        // Signed: a window's rounding error is as likely under as over,
        // and only their average is the others' takes (clipping each
        // window at zero would read a lone key's noise as a drain).
        let per_min = self.took * 60.0 / self.span.as_secs_f64();
        self.restart_window();
        let most = limit as f64 * MOST;
        self.rate = ((self.rate + per_min) / 2.0).clamp(-most, most);
        self.apply(limit as f64)
    }

    /// Opens a new window of views.
    fn restart_window(&mut self) {
        self.took = 0.0;
        self.span = Duration::ZERO;
        self.views = 0;
    }

    /// Cuts the limit by the measured takes once they moved by a step.
    fn apply(&mut self, limit: f64) -> Change {
        let next = if self.rate < limit * STEP {
            0
        } else {
            self.rate.round() as u64
        };
        if next == self.applied
            || (next != 0 && (next as f64 - self.applied as f64).abs() < limit * STEP)
        {
            return Change::NOTHING;
        }
        self.applied = next;
        Change::MOVED
    }
}

impl Belief for Others {
    /// Only a view of the bucket says anything of the others.
    fn observe(&mut self, sample: &Sample) -> Change {
        match *sample {
            Sample::Seen(v) => self.viewed(v),
            _ => Change::NOTHING,
        }
    }

    /// The others' takes, as a rate: what the stated limit is cut by.
    fn believed(&self, _t: Instant) -> Option<Believed> {
        (self.applied > 0).then_some(Believed {
            limit: self.applied,
            capacity: None,
            sure: Sureness::Stated,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: u64 = 600;

    /// Views of a bucket of `capacity` refilling at 600 a minute (10 a
    /// second), one a second, full at the start: each second the others
    /// take `others`, and this process 12 for six seconds (the bucket
    /// drains from full) then what keeps the level steady (`10 - others`);
    /// returns the limit believed after `seconds`.
    fn believed_after(capacity: u64, others: u64, seconds: u64) -> u64 {
        let mut o = Others::default();
        let mut level = capacity as i64;
        let mut charged: u32 = 0;
        for sec in 0..seconds {
            if sec > 0 {
                level = (level + 10).min(capacity as i64);
                level -= others as i64;
            }
            let mine = if sec < 6 { 12 } else { 10 - others };
            level -= mine as i64;
            charged = charged.wrapping_add(mine as u32);
            let view = BucketView {
                remaining: level.max(0) as u64,
                spread: 1,
                capacity,
                limit: LIMIT,
                charged,
                own: mine,
                at: Instant::ZERO + Duration::from_secs(sec),
                permille: 1000,
            };
            o.observe(&Sample::Seen(view));
        }
        o.of(LIMIT)
    }

    #[test]
    fn another_client_taking_a_third_of_a_ten_second_bucket_cuts_the_limit_by_its_takes() {
        // 3 a second of 10 is 180 a minute: the running mean of the
        // windows' measures reaches it within a step (2 % of the limit).
        let believed = believed_after(100, 3, 40);
        assert!((408..=432).contains(&believed), "{believed}");
    }

    #[test]
    fn a_lone_key_whose_remaining_is_rounded_reads_no_takes_from_the_rounding() {
        // 60,000 tokens a minute (1,000 a second) into a 10 s bucket,
        // remaining to the nearest thousand; this process alone charges
        // 1,100 a second, so the level falls by 100 a second.
        let mut o = Others::default();
        let mut level: i64 = 10_000;
        for sec in 0..90u64 {
            if sec > 0 {
                level = (level + 1_000).min(10_000);
            }
            level -= 1_100;
            let rounded = ((level.max(0) + 500) / 1_000 * 1_000) as u64;
            o.observe(&Sample::Seen(BucketView {
                remaining: rounded,
                spread: 1_000,
                capacity: 10_000,
                limit: 60_000,
                charged: (1_100 * (sec + 1)) as u32,
                own: 1_100,
                at: Instant::ZERO + Duration::from_secs(sec),
                permille: 1000,
            }));
            assert_eq!(o.of(60_000), 60_000, "cut at {sec} s");
        }
    }

    #[test]
    fn a_lone_process_is_not_cut() {
        assert_eq!(believed_after(100, 0, 12), LIMIT);
    }

    #[test]
    fn a_bucket_of_a_few_seconds_is_measured_too() {
        // Four seconds of refill, drained by the others at 3 a second:
        // cut by about their 180 a minute.
        let believed = believed_after(40, 3, 40);
        assert!((400..=440).contains(&believed), "{believed}");
    }

    /// A view of a one-second bucket of 60,000 tokens a minute.
    fn second(remaining: u64, charged: u64, own: u64, at_ms: u64) -> Sample {
        Sample::Seen(BucketView {
            remaining,
            spread: 1,
            capacity: 1_000,
            limit: 60_000,
            charged: charged as u32,
            own,
            at: Instant::ZERO + Duration::from_millis(at_ms),
            permille: 1000,
        })
    }

    #[test]
    fn the_refill_that_pays_a_debt_back_is_nobodys_take() {
        // A lone key: a request of 1,500 (more than the bucket's 1,000) is
        // admitted by a full bucket and leaves a debt of 500, shown as 0;
        // one of 800 goes when the bucket holds 800 again, 1.3 s later,
        // and leaves 0; the next large one a second later, when it is full.
        // The first send, of 400, showed the bucket full.
        let mut o = Others::default();
        o.observe(&second(600, 400, 400, 0));
        let (mut t, mut charged) = (400u64, 400u64);
        for _ in 0..40 {
            charged += 1_500;
            o.observe(&second(0, charged, 1_500, t));
            t += 1_300;
            charged += 800;
            o.observe(&second(0, charged, 800, t));
            t += 1_000;
        }
        assert_eq!(o.of(60_000), 60_000);
    }

    #[test]
    fn a_429s_view_reads_the_others_on_a_short_bucket() {
        // The same bucket, which another client drains by 300 a second:
        // this process's sends of 700 are answered 429 (a view without
        // their charge) every other time.
        let mut o = Others::default();
        let mut level: f64 = 1_000.0;
        let mut charged = 0u64;
        for k in 0..60u64 {
            // Half a second apart: 500 refilled, 150 of it taken.
            if k > 0 {
                level = (level + 350.0).min(1_000.0);
            }
            let admitted = level >= 700.0;
            charged += 700;
            let own = if admitted {
                level -= 700.0;
                700
            } else {
                // Not charged: neither by the provider nor, in the view,
                // by this process.
                charged -= 700;
                0
            };
            o.observe(&second(level as u64, charged, own, k * 500));
        }
        // 18,000 a minute taken: the limit is cut to about 42,000.
        let believed = o.of(60_000);
        assert!((38_000..=46_000).contains(&believed), "{believed}");
    }

    #[test]
    fn a_bucket_of_a_minute_is_not_cut() {
        // Each view corrects the credit long before the others' takes add
        // up to a 429.
        assert_eq!(believed_after(600, 3, 12), LIMIT);
    }
}
