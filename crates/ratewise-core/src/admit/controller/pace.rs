//! Pace and shares: the rate each scope's buckets are set to — the
//! effective limits (configured ∧ learned), the ramp's steps, and the
//! share of the limits this process paces at when cut off from its peers.
//!
//! Kept apart because every concern that changes a limit, a capacity, the
//! ramp or the share ends by rebuilding the buckets here, and the rebuild
//! must keep levels (no burst is created by a change of pace). The share
//! itself is set through the store seam
//! ([`StoreHooks::set_share`](crate::admit::store_kit::StoreHooks::set_share)).

use super::{
    capacity_for, index, share_of, Beliefs, Bucket, Burst, Instant, Level, LimitSource, RampConfig,
    ScopeState, DIMENSIONS,
};

/// Lets the ramp take the growth steps due by `t`, one at a time: the
/// buckets refill at each step's pace up to the step, then at the next
/// one's. Growth follows the clock, so the pace between two admissions is
/// what it was at each instant — the same pace [`ramped_wait`] predicts —
/// not the start fraction until someone asks.
pub(super) fn grow_ramp(s: &mut ScopeState, cfg: &RampConfig, t: Instant) {
    if s.ramp.permille() >= cfg.peak() {
        return;
    }
    if s.ramp.last_step().is_none() {
        // The first call starts the ramp's clock.
        s.ramp.calm(cfg, t);
        return;
    }
    for _ in 0..64 {
        match s.ramp.next_step(cfg) {
            Some(at) if at <= t => {
                s.ramp.calm(cfg, at);
                apply_ramp(s, at);
            }
            _ => return,
        }
    }
    // Past 64 steps the ramp is at its peak whatever remains.
    if s.ramp.calm(cfg, t) {
        apply_ramp(s, t);
    }
}

pub(super) fn apply_ramp(s: &mut ScopeState, t: Instant) {
    let p = s.ramp.permille();
    for b in s.buckets.iter_mut().flatten() {
        b.set_permille(p, t);
    }
}

pub(super) fn restart_ramp(s: &mut ScopeState, cfg: &RampConfig, t: Instant) {
    s.ramp.restart(cfg, t);
    apply_ramp(s, t);
}

impl ScopeState {
    /// Feeds this scope's beliefs through `f`, which says whether what
    /// they believe moved; when it did, the buckets are rebuilt from them,
    /// once. The one place buckets are rebuilt: every change of a belief
    /// (a sample, a record read back, a new share) reaches the buckets
    /// through here.
    pub(super) fn believe<R>(
        &mut self,
        burst: Burst,
        share_permille: u32,
        t: Instant,
        f: impl FnOnce(&mut Beliefs) -> (R, bool),
    ) -> R {
        let (r, moved) = f(&mut self.beliefs);
        if moved {
            // What it paces on is no longer (only) remembered.
            self.remembered = None;
            rebuild_buckets(self, burst, share_permille, t);
        }
        r
    }
}

/// Makes the buckets match the effective limits: new dimensions get a full
/// bucket (at the ramp factor), changed ones keep their level, dropped ones
/// go.
fn rebuild_buckets(s: &mut ScopeState, burst: Burst, share_permille: u32, t: Instant) {
    // The limits come with this process's share applied where it applies
    // (`belief::effective`).
    let eff = s.limits_at(t, share_permille);
    let p = s.ramp.permille();
    let share = |v: u64| share_of(v, share_permille);
    for d in DIMENSIONS {
        let i = index(d);
        let taken = s.capacity_taken(i);
        let seen = if taken == 0 { 0 } else { share(taken) };
        // A limit estimated from 429s has no `*-remaining` to size the
        // provider's bucket from: its credit holds `ESTIMATED_CREDIT` of
        // refill, so a request larger than a second's refill waits until
        // the provider has refilled all of it after the 429 that emptied
        // it, instead of leaving early on a debt.
        let estimated = matches!(eff[i], Some((_, LimitSource::Estimated)));
        let credit_of = |l: u64| {
            let c = burst.credit_units(l, seen);
            if estimated {
                c.max(capacity_for(l, ESTIMATED_CREDIT))
            } else {
                c
            }
        };
        let level = &mut s.levels[i];
        match (eff[i].map(|(l, _)| l), &mut s.buckets[i]) {
            (None, slot) => {
                *slot = None;
                *level = Level::default();
            }
            (Some(l), Some(b)) => {
                let credit = credit_of(l);
                if b.limit() != l {
                    b.set_limit(l, capacity_for(l, burst.of(d)), credit, t);
                } else if b.credit_capacity() != credit {
                    b.set_credit_capacity(credit, t);
                }
                level.fit(b);
            }
            (Some(l), slot) => {
                let pace = capacity_for(l, burst.of(d));
                let credit = credit_of(l);
                *slot = Some(Bucket::with_credit(l, pace, credit, p, t));
                *level = Level::default();
            }
        }
    }
}

/// The provider's bucket as modelled for a limit estimated from 429s: ten
/// seconds of refill (the shortest bucket the shipped scenarios and the
/// providers we know keep; a larger one only bursts more after idle time).
pub(super) const ESTIMATED_CREDIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The credit capacity of each bucket, for what a rebuild changed.
pub(super) fn credit_capacities(s: &ScopeState) -> [Option<u64>; 4] {
    std::array::from_fn(|i| s.buckets[i].as_ref().map(Bucket::credit_capacity))
}
