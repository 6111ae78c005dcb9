//! The others on a key that this process cannot see: a teammate's
//! notebook, another service, a client outside the shared store. They
//! leave no 429 of theirs and no record, only a bucket that refills more
//! slowly than its stated limit. This process reads that drain from the
//! provider's `*-remaining` beside its own charges, and paces at the
//! stated limit less what the others take.
//!
//! Between two views of the bucket (each taken when the server admitted
//! one of this process's sends, after that send's charge) the bucket
//! refilled at its limit and lost what everyone charged: what it lost
//! beyond this process's own charges (net of what the provider gave back)
//! is what the others took. That holds only while the bucket never
//! filled in between (a full bucket stops refilling, and then the others'
//! takes are not seen), which is known when either
//!
//! * it could not have: the first view's level plus a whole refill at the
//!   limit and all that was given back of this process's reservations in
//!   between (unused `max_tokens`) stays under the capacity; or
//! * nothing of this process's was charged between the two sends and the
//!   bucket was not full before the second send's own charge: the level
//!   only rose in between, so it never reached the top.
//!
//! Only a bucket holding between [`SHALLOW`] and [`DEEP`] of refill is
//! measured. A shallower one fills and empties between two views, so a
//! spill it hid reads as the others' takes: on lone keys with 1–2 s
//! buckets that phantom cut the limit (`ratewise simulate --matrix
//! --sample 300`, seeds 5 and 23: four lone 1 s cells 0.97–0.99 → 0.57–0.88
//! of the oracle's goodput, a 2 s one 0.92 → 0.88). A deeper one (a
//! minute, Anthropic's and OpenAI's documented size) is corrected by each
//! view well before the others' takes since it add up to a 429, and a cut
//! there only loses goodput. Between the two, where a view arrives late
//! (a 10 s answer into a 10 s bucket) and the others took a third of the
//! refill meanwhile, the cut is what keeps the next send from a 429: 8 of
//! the sample's cells with another client held that missed (seed 5: 2.4 %
//! → 0.8 % answered 429, one 15.2 % → 0).
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

/// A bucket holding less refill than this is not measured: it fills and
/// empties between two views, and the spill reads as the others' takes.
const SHALLOW: Duration = Duration::from_secs(5);

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
        self.top = self.top.max(remaining.saturating_add(own));
        let capacity = match capacity {
            0 => self.top,
            c => c.min(self.top),
        };
        if limit == 0 || capacity == 0 {
            return Change::NOTHING;
        }
        let depth = capacity as f64 * 60.0 / limit as f64;
        if depth >= DEEP.as_secs_f64() || depth < SHALLOW.as_secs_f64() {
            // Too deep to need it, or too shallow to read it (see
            // `DEEP`, `SHALLOW`): no cut.
            self.rate = 0.0;
            return self.apply(limit as f64);
        }
        let full = |r: u64| r.saturating_mul(10) >= capacity.saturating_mul(FULL_TENTHS);
        let Some((t0, r0, c0)) = v.after(&mut self.last) else {
            return Change::NOTHING;
        };
        if full(remaining) {
            // Room to spare after this process's own charge: nothing to
            // measure, and whatever the others take, it is less than feared.
            self.took = 0.0;
            self.span = Duration::ZERO;
            self.views = 0;
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
        let never_full = r0 as f64 + refill + given_back < capacity as f64
            || (between.abs() < 1.0 && !full(remaining.saturating_add(own)));
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
        self.took = 0.0;
        self.span = Duration::ZERO;
        self.views = 0;
        let most = limit as f64 * MOST;
        self.rate = ((self.rate + per_min) / 2.0).clamp(-most, most);
        self.apply(limit as f64)
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
    fn a_bucket_of_a_few_seconds_is_not_measured() {
        // Four seconds of refill: it fills and empties between views, and
        // a spill would read as the others' takes.
        assert_eq!(believed_after(40, 3, 8), LIMIT);
    }

    #[test]
    fn a_bucket_of_a_minute_is_not_cut() {
        // Each view corrects the credit long before the others' takes add
        // up to a 429.
        assert_eq!(believed_after(600, 3, 12), LIMIT);
    }
}
