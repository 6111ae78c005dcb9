//! A limit stated by the provider's rate-limit headers, and the capacity
//! of its bucket as the views bracket it: proven from below (`seen`: the
//! most the server has shown its bucket to hold), allowed from above
//! (`upper`), a hypothesis inside the bracket taken from a sibling bucket's
//! refill horizon (`guess`), and a ceiling a 429 the model did not expect
//! holds it under while the learned margin lasts (bias from surprises).
//!
//! Every value arrives already read through the provider's
//! [`Profile`](crate::admit::Profile) (rounding as documented): the header
//! sync (`controller/headers.rs`) turns one answer into a
//! [`Sample::Answer`] per dimension with [`capacity_evidence`] and
//! [`capacity_bound`]; this file only believes.

use super::{Belief, Believed, Change, Sample, Sureness};
use crate::admit::bucket::NS_PER_MIN;
use crate::time::Instant;
use crate::vocab::Dimension;
use std::time::Duration;

/// What the views show of one provider bucket's capacity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Capacity {
    /// The most the server has shown its bucket to hold (its largest
    /// `*-remaining`, plus the request itself where it was charged): a
    /// lower bound on the provider's capacity, which sizes the credit
    /// ([`Burst::credit_units`](crate::admit::Burst)).
    pub(crate) seen: u64,
    /// The least capacity the views allow as the most it can be (see
    /// [`capacity_bound`]): with `seen`, a bracket that rounded
    /// `remaining` values leave wide.
    pub(crate) upper: Option<u64>,
    /// A capacity above `seen` taken from a sibling bucket's horizon (see
    /// [`sibling_horizon`]): a hypothesis, recomputed at every view,
    /// always inside the bracket.
    pub(crate) guess: Option<u64>,
    /// A capacity cut by a surprise: header evidence above it is not
    /// believed while the bucket's learned margin lasts.
    pub(crate) ceiling: Option<u64>,
}

impl Capacity {
    /// The capacity a bucket is sized by: the proven one, or the
    /// hypothesis above it.
    pub(crate) fn taken(&self) -> u64 {
        self.guess.map_or(self.seen, |g| g.max(self.seen))
    }
}

/// A dimension's limit as the provider's headers state it, with its
/// bucket's capacity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Stated {
    /// The last `*-limit` read (units per minute).
    pub(crate) limit: Option<u64>,
    /// Its bucket's capacity as the views bracket it.
    pub(crate) capacity: Capacity,
}

impl Belief for Stated {
    /// An answer's view brackets the capacity and states the limit; a
    /// surprise cuts the capacity. Returns by how much the proven capacity
    /// grew (the credit may rise by as much on the server's word).
    fn observe(&mut self, sample: &Sample) -> Change {
        match *sample {
            Sample::Answer {
                limit,
                proven,
                allowed,
                margin_gone,
            } => {
                let mut change = Change::NOTHING;
                if let Some(l) = limit.filter(|l| *l > 0) {
                    if self.limit != Some(l) {
                        self.limit = Some(l);
                        change.moved = true;
                    }
                }
                let c = &mut self.capacity;
                if let Some(ub) = allowed {
                    c.upper = Some(c.upper.map_or(ub, |u| u.min(ub)));
                }
                if c.ceiling.is_some() && margin_gone {
                    // Calm long enough that the margin is gone: headers
                    // are believed again.
                    c.ceiling = None;
                }
                if let Some(seen) = proven.map(|e| c.ceiling.map_or(e, |x| e.min(x))) {
                    if seen > c.seen {
                        change.grew = seen - c.seen;
                        change.moved = true;
                        c.seen = seen;
                    }
                }
                if c.upper.is_some_and(|u| u < c.seen) {
                    // The views disagree: the capacity changed. Bracket anew.
                    c.upper = None;
                }
                change
            }
            Sample::Surprised { over, units, again } => self.surprised(over, units, again),
            _ => Change::NOTHING,
        }
    }

    fn believed(&self, _t: Instant) -> Option<Believed> {
        self.limit.map(|limit| Believed {
            limit,
            capacity: Some(self.capacity.taken()).filter(|c| *c > 0),
            sure: Sureness::Stated,
        })
    }
}

impl Stated {
    /// A 429 the model did not expect, `over` units above the provider's
    /// level on a send of `units`; `again`: a margin in force did not
    /// prevent it. A capacity hypothesis in use is taken back to what the
    /// headers proved. The proof itself is cut by all the model turned out
    /// to be over (never below the request) only on a surprise the margin
    /// in force did not prevent — one 429 may be a one-off — and it is
    /// held there while the margin lasts: headers that imply more than the
    /// provider holds would teach it again. A cut that was not needed (the
    /// level, not the capacity, was wrong) costs a smaller burst until the
    /// margin decays, never a 429.
    fn surprised(&mut self, over: u64, units: u64, again: bool) -> Change {
        let c = &mut self.capacity;
        let taken = c.taken();
        if taken == 0 {
            return Change::NOTHING;
        }
        let mut cut = taken.saturating_sub(over).max(units.min(taken));
        if taken > c.seen {
            // A hypothesis was in use: it goes, and the proof stands. Of
            // what the model was over, the guess explains all it can; the
            // rest is the level (a late timer, a send the model did not
            // see), which the margin already learns. A proof that is
            // itself wrong (headers biased high) meets the next 429 with no
            // guess above it, and is cut then.
            cut = cut.max(c.seen);
        } else if !again {
            // The first surprise on the proof: the margin answers it. One
            // 429 may be a one-off (another client's burst, a late timer);
            // cut, the capacity would be held down for as long as the
            // margin lasts — a simulated `cold-key-5s` with one burst early
            // in the run went from 0.93 to 0.69 of the limit. A second 429
            // before the margin is gone cuts it.
            cut = taken;
        }
        if cut >= taken {
            return Change::NOTHING;
        }
        // The ceiling holds the hypothesis (and the proof) down while the
        // margin lasts.
        c.seen = c.seen.min(cut);
        c.guess = None;
        c.ceiling = Some(cut);
        Change::MOVED
    }
}

/// What one view shows of the provider's bucket capacity, a lower bound:
///
/// * the server held at least the lowest level its `remaining` allows
///   (read through the provider's rounding: Anthropic's 12,000 is at least
///   11,500), plus the request itself in the requests bucket when the view
///   counts it (tokens are not added: what the server has charged for them
///   by then — an estimate from `max_tokens`, the input as it counts it —
///   is not known);
/// * with a reset and a level above zero (or `no_debt`: a level of zero may
///   be a debt), `remaining` plus the refill until the bucket is full again
///   (`until_full` already has the reset's uncertainty taken off in the
///   server's favour, which also covers clock skew and the upload time
///   between the admission and the server's view).
///
/// A low guess is cheap (a smaller burst, the same rate); a high one sends
/// into a 429, so nothing here rounds up.
pub(crate) fn capacity_evidence(
    remaining: Option<u64>,
    until_full: Option<Duration>,
    limit: Option<u64>,
    charged: bool,
    no_debt: bool,
    d: Dimension,
) -> Option<u64> {
    let r = remaining?;
    let own = u64::from(charged && d == Dimension::Requests);
    let refill = match (until_full, limit) {
        // A bucket that may be empty may be in debt (a request larger than
        // it was admitted on a full bucket): its reset counts the debt's
        // refill too, and says nothing of the capacity — unless the caller
        // knows there is no debt.
        (Some(_), Some(_)) if r == 0 && !no_debt => 0,
        (Some(u), Some(l)) => {
            let units = u128::from(l) * u.as_nanos() / NS_PER_MIN;
            u64::try_from(units).unwrap_or(u64::MAX)
        }
        _ => 0,
    };
    Some(r.saturating_add(own.max(refill)))
}

/// What one view shows of the provider's bucket capacity, an upper bound:
/// the highest level its `remaining` allows plus the refill until full,
/// with the reset read against the server (`until_full` had its
/// uncertainty taken off; twice `slack` puts it on the other side). Holds
/// in debt too: a level below zero is reported as zero. `None` without a
/// level, a reset and a limit.
pub(crate) fn capacity_bound(
    highest: Option<u64>,
    until_full: Option<Duration>,
    slack: Duration,
    limit: Option<u64>,
    charged: bool,
    d: Dimension,
) -> Option<u64> {
    let (h, u, l) = (highest?, until_full?, limit?);
    let own = u64::from(charged && d == Dimension::Requests);
    let u = u.saturating_add(slack.saturating_mul(2));
    let units = u128::from(l) * u.as_nanos() / NS_PER_MIN;
    let units = u64::try_from(units).unwrap_or(u64::MAX);
    Some(
        h.saturating_add(own)
            .saturating_add(units)
            .saturating_add(1),
    )
}

/// A bracket no wider than this share of its low end is narrow.
const NARROW_BRACKET: u64 = 32;

/// Capacities raised within their brackets to the refill horizon of a
/// sibling bucket known precisely (per bucket, where above the proof).
///
/// A rounded `remaining` can leave a capacity bracketed for as long as a
/// run lasts: with Anthropic's output tokens rounded to the nearest
/// thousand, `max_tokens` charged at the start, and requests sent as soon
/// as the model has room, every view lands in the same rounding step, and
/// a 1,667-token bucket stays learned as 1,499 (a tenth of the goodput of
/// a cold key on 5 s buckets). Its sibling buckets, read exactly (the
/// requests) or from varied charges (the input), show how many seconds of
/// refill the provider's buckets hold. Neither provider documents that a
/// key's buckets share one horizon; it is a hypothesis, so it is taken
/// only inside what the views allow (below the bracket's top), never above
/// a ceiling a surprise set, and the shortest horizon known is the one
/// used. Should the provider differ, the first 429 the model did not expect
/// cuts the capacity and holds it ([`Stated::surprised`]).
pub(crate) fn sibling_horizon(caps: [&Capacity; 4], limits: &[Option<u64>; 4]) -> [Option<u64>; 4] {
    let narrow = |i: usize| {
        let seen = caps[i].seen;
        seen > 0
            && caps[i]
                .upper
                .is_some_and(|u| u.saturating_sub(seen) <= seen / NARROW_BRACKET + 1)
    };
    // The shortest horizon among the narrow brackets, as (units, limit).
    let horizon = (0..4)
        .filter(|i| narrow(*i))
        .filter_map(|i| limits[i].map(|l| (caps[i].seen, l)))
        .min_by(|a, b| {
            (u128::from(a.0) * u128::from(b.1)).cmp(&(u128::from(b.0) * u128::from(a.1)))
        });
    let Some((units, per)) = horizon else {
        return [None; 4];
    };
    std::array::from_fn(|i| {
        if narrow(i) {
            return None;
        }
        let (limit, upper) = (limits[i]?, caps[i].upper?);
        let at = u128::from(limit) * u128::from(units) / u128::from(per);
        let at = u64::try_from(at)
            .unwrap_or(u64::MAX)
            .min(upper.saturating_sub(1));
        let at = caps[i].ceiling.map_or(at, |c| at.min(c));
        (at > caps[i].seen).then_some(at)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admit::belief::test_streams::{answer, anthropic_rounded_output, throttled};

    fn fed(stream: &[Sample]) -> Stated {
        let mut st = Stated::default();
        for x in stream {
            st.observe(x);
        }
        st
    }

    #[test]
    fn rounded_answers_bracket_the_capacity_and_state_the_limit() {
        let st = fed(&anthropic_rounded_output());
        assert_eq!(st.limit, Some(8_000));
        // Proven from below by the highest proof, allowed from above by
        // the lowest bound: the truth (667) is inside.
        assert_eq!(st.capacity.seen, 633);
        assert_eq!(st.capacity.upper, Some(700));
        let b = st.believed(Instant::ZERO).unwrap();
        assert_eq!(
            (b.limit, b.capacity, b.sure),
            (8_000, Some(633), Sureness::Stated)
        );
    }

    #[test]
    fn a_proof_above_the_bound_brackets_anew() {
        let mut st = fed(&anthropic_rounded_output());
        // The capacity was raised: a proof above the old top.
        let c = st.observe(&answer(None, Some(1_500), None));
        assert_eq!(c.grew, 867);
        assert!(c.moved);
        assert_eq!(st.capacity.upper, None);
        assert_eq!(st.limit, Some(8_000), "an answer without a limit keeps it");
    }

    #[test]
    fn a_second_surprise_cuts_the_proof_and_the_ceiling_holds_until_the_margin_is_gone() {
        let mut st = fed(&anthropic_rounded_output());
        // The first surprise on the proof: the margin answers it.
        let first = Sample::Surprised {
            over: 200,
            units: 100,
            again: false,
        };
        assert_eq!(st.observe(&first), Change::NOTHING);
        // A second while the margin is in force cuts by all it was over.
        let again = Sample::Surprised {
            over: 200,
            units: 100,
            again: true,
        };
        assert!(st.observe(&again).moved);
        assert_eq!(st.capacity.seen, 433);
        assert_eq!(st.capacity.ceiling, Some(433));
        // Header evidence above the ceiling is not believed...
        st.observe(&answer(None, Some(600), None));
        assert_eq!(st.capacity.seen, 433);
        // ...until the margin is gone.
        st.observe(&Sample::Answer {
            limit: None,
            proven: Some(600),
            allowed: None,
            margin_gone: true,
        });
        assert_eq!((st.capacity.seen, st.capacity.ceiling), (600, None));
    }

    #[test]
    fn a_hypothesis_goes_first_on_a_surprise() {
        let mut st = fed(&anthropic_rounded_output());
        st.capacity.guess = Some(690);
        assert_eq!(st.capacity.taken(), 690);
        let first = Sample::Surprised {
            over: 40,
            units: 100,
            again: false,
        };
        assert!(st.observe(&first).moved);
        // The guess goes, the proof stands, held under what it was over.
        assert_eq!(st.capacity.taken(), 633);
        assert_eq!(st.capacity.guess, None);
        assert_eq!(st.capacity.ceiling, Some(650));
        // 429s without a surprise teach a stated limit nothing.
        assert_eq!(
            st.observe(&throttled(100, None, Instant::ZERO)),
            Change::NOTHING
        );
    }

    #[test]
    fn a_sibling_read_exactly_lends_its_horizon_inside_the_bracket() {
        // Requests: 50 of 600/min proven exactly (a 5 s horizon); output
        // tokens bracketed [500, 1_700) at 8,000/min.
        let requests = Capacity {
            seen: 50,
            upper: Some(51),
            ..Capacity::default()
        };
        let output = Capacity {
            seen: 500,
            upper: Some(1_700),
            ..Capacity::default()
        };
        let none = Capacity::default();
        let limits = [Some(600), None, Some(8_000), None];
        let g = sibling_horizon([&requests, &none, &output, &none], &limits);
        assert_eq!(g, [None, None, Some(666), None]);
    }
}
