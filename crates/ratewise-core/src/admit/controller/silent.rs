//! Estimates from 429s: what a 429 teaches about a dimension no header
//! states ([`SilentEstimate`](crate::admit::belief::SilentEstimate)), what admissions and
//! settles feed the estimate, and how its slow upward probe reaches the
//! buckets.
//!
//! Kept apart from `answers` (which decides which scopes an answer
//! pauses) and from `headers` (what stated limits teach): this file is the
//! one place where a silent provider's limits are believed.

use super::{
    index, share_of, silent_dimensions, Amounts, Belief, Classification, Controller, Instant,
    LimitSource, Now, Sample, ScopeId, ScopeState, Sent, SilentEstimate, DIMENSIONS,
};
use crate::admit::belief::{Share, Taught};
use crate::admit::Burst;
use std::time::Duration;

/// An estimate that moved by less than this share of the bucket's rate
/// (1/64) since the bucket was last set is left alone: the probe grows
/// continuously, the bucket follows it in steps.
const FOLLOW_STEP: u64 = 64;

impl Controller {
    /// A 429 on the request admitted as `sent`: for each dimension it is
    /// about — the one its body or message names, otherwise every one the
    /// provider meters ([`silent_dimensions`]) and the request charged —
    /// that no configured or stated limit covers, the estimate learns
    /// ([`SilentEstimate::throttled`](crate::admit::belief::SilentEstimate)), the bucket
    /// is rebuilt at it and emptied (the provider's bucket is empty: that
    /// is what a 429 says). Returns a note for the decision, when it
    /// taught anything.
    pub(super) fn learn_from_silence(
        &mut self,
        scope: ScopeId,
        sent: &Sent,
        c: &Classification,
        now: Now,
    ) -> Option<String> {
        let t = now.instant;
        // A wait past a minute is a quota's (a day's, a month's), not a
        // per-minute bucket's refill: it measures nothing here.
        if c.hints
            .wait
            .is_some_and(|h| h.wait > Duration::from_secs(60))
        {
            return None;
        }
        let (burst, share) = (self.cfg.burst, self.share_permille);
        let s = self.scopes.get_mut(scope.0 as usize)?;
        // Cut off from its peers, a process learns its share of a stated
        // limit from its own 429s too (`belief::effective`).
        let cut_off = share < 1000;
        let stated = s.beliefs.known();
        // A named dimension the provider does not meter (Anthropic's
        // "tokens" is the most restrictive of input and output, not a
        // bucket) is read as a 429 that names none.
        let metered = silent_dimensions(c.provider);
        let about = match c.dimension {
            Some(d) if metered[index(d)] => {
                let mut one = [false; 4];
                one[index(d)] = true;
                one
            }
            _ => metered,
        };
        let hint = c.hints.wait.map(|h| h.wait);
        let taught = s.believe(burst, share, t, |beliefs| {
            let mut taught = Vec::new();
            for (i, d) in DIMENSIONS.into_iter().enumerate() {
                let units = sent.amounts.by_index(i);
                if !about[i] || (stated.get(d).is_some() && !cut_off) || units == 0 {
                    continue;
                }
                if let (true, Some(l)) = (cut_off, stated.get(d)) {
                    if !beliefs.share[i].estimate.is_set() {
                        // Stated after the process was cut off: its share
                        // is where it starts (`share_changed` seeds the
                        // others), or what 429s taught before it was
                        // stated.
                        if beliefs.estimated[i].is_set() {
                            beliefs.share[i].estimate = beliefs.estimated[i].clone();
                        } else {
                            beliefs.share[i]
                                .estimate
                                .seed_keeping_window(share_of(l, share), t);
                        }
                    }
                }
                let sample = Sample::Throttled { units, hint, at: t };
                if let Some(how) = beliefs.estimate_mut(i, cut_off).observe(&sample).taught {
                    taught.push((i, how));
                }
            }
            let moved = !taught.is_empty();
            (taught, moved)
        });
        if taught.is_empty() {
            return None;
        }
        let mut parts = Vec::new();
        for (i, how) in taught {
            if let Some(b) = s.buckets[i].as_mut() {
                // Empty now; a hint's pause empties it until the hint.
                b.drain_until(t, t);
            }
            let how = match how {
                Taught::Cold => "a cold key's lower bound",
                Taught::Cut => "cut: too short a window to measure",
                _ => "measured between two 429s",
            };
            let rate = s.beliefs.estimate(i, cut_off).rate(t).unwrap_or(0);
            parts.push(format!("{} {rate}/min ({how})", DIMENSIONS[i].as_str()));
        }
        Some(format!(
            "admission: no stated limit; estimated from 429s: {}",
            parts.join(", ")
        ))
    }
}

/// Whether bucket `i` paces at a limit estimated from 429s (not stated,
/// not configured): its 429s teach the estimate, not a margin.
pub(super) fn estimated(s: &ScopeState, i: usize, share_permille: u32, t: Instant) -> bool {
    matches!(
        s.limits_at(t, share_permille)[i],
        Some((_, LimitSource::Estimated))
    )
}

/// Whether a bucket paces at a limit estimated from 429s that is still a
/// cold lower bound, climbing: the pace it sets now is not the pace it
/// will set, so a wait predicted at it says nothing.
pub(super) fn climbing(s: &ScopeState, share_permille: u32, t: Instant) -> bool {
    let cut_off = share_permille < 1000;
    (0..4).any(|i| {
        estimated(s, i, share_permille, t)
            && s.beliefs.estimate(i, cut_off).state() == Some(crate::admit::EstimateState::Cold)
    })
}

/// The process was cut off from its peers (`share_permille` below 1,000)
/// or rejoined them (1,000): cut off, each stated dimension's estimate
/// starts at the share (`seeded`) and learns from this process's own
/// 429s; rejoined, those estimates go — the shared record is the truth
/// again.
pub(super) fn share_changed(s: &mut ScopeState, share_permille: u32, t: Instant) {
    let stated = s.beliefs.known();
    for (i, d) in DIMENSIONS.into_iter().enumerate() {
        let Some(l) = stated.get(d) else { continue };
        let beliefs = &mut s.beliefs;
        beliefs.estimated[i] = SilentEstimate::default();
        beliefs.share[i] = if share_permille < 1000 {
            Share::seeded(l, share_permille, t)
        } else {
            Share::default()
        };
    }
}

/// An admission took `amounts` at `t`: the provider is taken to let them
/// through until an end says otherwise. The first opens each dimension's
/// cold window (the provider's bucket is taken to be full then).
pub(super) fn silent_took(s: &mut ScopeState, amounts: &Amounts, t: Instant) {
    for i in 0..4 {
        let sample = Sample::Admitted {
            units: amounts.by_index(i),
            at: t,
        };
        // Each estimate keeps its own window: feed both.
        let _ = s.beliefs.estimated[i].observe(&sample);
        let _ = s.beliefs.share[i].observe(&sample);
    }
}

/// A reservation admitted at `admitted_at` that took `reserved` ended at
/// `actual` (a release: nothing).
pub(super) fn silent_ended(
    s: &mut ScopeState,
    reserved: &Amounts,
    actual: &Amounts,
    admitted_at: Instant,
) {
    for i in 0..4 {
        let sample = Sample::Settled {
            delta: i128::from(actual.by_index(i)) - i128::from(reserved.by_index(i)),
            admitted_at,
        };
        let _ = s.beliefs.estimated[i].observe(&sample);
        let _ = s.beliefs.share[i].observe(&sample);
    }
}

/// Lets the buckets follow the estimates' probes: a bucket whose estimate
/// moved by a [`FOLLOW_STEP`] share or more is rebuilt at it (its level
/// kept).
pub(super) fn follow_estimates(s: &mut ScopeState, burst: Burst, share_permille: u32, t: Instant) {
    if !s.beliefs.any_estimate() {
        return;
    }
    let limits = s.limits_at(t, share_permille);
    let moved = (0..4).any(|i| match (&s.buckets[i], limits[i]) {
        (Some(b), Some((l, LimitSource::Estimated))) => {
            l.abs_diff(b.limit()) >= (b.limit() / FOLLOW_STEP).max(1)
        }
        (None, Some(_)) => true,
        _ => false,
    });
    s.believe(burst, share_permille, t, |_| ((), moved));
}
