//! Header sync: what an answer's rate-limit headers teach — limits,
//! capacities (bracketed between what the views prove and what they
//! allow) and the server's level, read against the credit at the send.
//!
//! Kept apart because it is the one place that reads the provider's view
//! of its own buckets, through the provider's [`Profile`] (rounding, reset
//! precision); everything it concludes is expressed as bucket corrections
//! the rest of the controller only consumes.

use super::{
    credit_capacities, headers_describe, index, Belief, Controller, Dimension, Duration, Instant,
    Limits, Now, Profile, Provider, RateLimitSnapshot, Reset, Rounding, Sample, ScopeId, Sent,
    ServerView, SystemTime, DIMENSIONS,
};
use crate::admit::belief::stated::{capacity_bound, capacity_evidence, sibling_horizon};
use crate::admit::belief::BucketView;

impl Controller {
    /// Header sync: learns `*-limit` values and lowers local credits to the
    /// server's view where it is lower (every value read as the provider
    /// documents it: its [`Profile`], e.g. Anthropic's token counts rounded
    /// to the nearest thousand). The server's
    /// view is the lower of
    ///
    /// * its `*-remaining`, and
    /// * what its `*-reset` implies: the bucket is full again at the reset
    ///   and refills at its limit per minute, so it holds about
    ///   `limit − limit/min · (reset − now)` now
    ///   (the bucket's reset sync).
    ///
    /// So with `remaining` below a request's need, the request waits until
    /// the server's line reaches its need; and a remaining rounded up to
    /// thousands is corrected by the reset. Neither ever raises a level, so
    /// nothing oscillates. A reset that has passed (or is "now"), or is
    /// further away than 65 s (more than a per-minute bucket
    /// needs to refill: a per-day limit, a wrong clock, garbage), is
    /// ignored; a whole-second reset is read in the server's favour by the
    /// second it may be off ([`Profile::reset_uncertainty`]).
    pub fn sync_headers(
        &mut self,
        scope: ScopeId,
        snap: &RateLimitSnapshot,
        provider: Provider,
        now: Now,
    ) {
        self.sync_view(scope, None, true, snap, provider, now);
    }

    /// Header sync for the response to the request admitted as `sent`:
    /// like [`sync_headers`](Self::sync_headers), but the server's view —
    /// taken when the server received the request — is compared with each
    /// bucket's credit at that admission rather than now
    /// (the bucket's view sync), and a reset instant is read from the admission's
    /// wall time. Compared with the credit now, a view looks lower than it
    /// is by the refill of the response's latency, and lowering to it
    /// wastes that much capacity on every correction. `charged`: whether
    /// the view counts the request itself (a success does; an error
    /// answer's view is of the bucket without it).
    ///
    /// Evidence that a held send was never charged gives its bucket part
    /// back (see the crate's admission docs).
    pub fn sync_headers_sent(
        &mut self,
        sent: &Sent,
        charged: bool,
        snap: &RateLimitSnapshot,
        provider: Provider,
        now: Now,
    ) {
        self.sync_view(sent.scope, Some(sent), charged, snap, provider, now);
    }

    pub(super) fn sync_view(
        &mut self,
        scope: ScopeId,
        sent: Option<&Sent>,
        charged: bool,
        snap: &RateLimitSnapshot,
        provider: Provider,
        now: Now,
    ) {
        let t = now.instant;
        let burst = self.cfg.burst;
        let share = self.share_permille;
        let profile = Profile::of(provider);
        let learn = self.cfg.learn_margins;
        let rounding = |d: Dimension| {
            if d == Dimension::Requests {
                Rounding::Exact
            } else {
                profile.token_remaining
            }
        };
        let Some(s) = self.scopes.get_mut(scope.0 as usize) else {
            return;
        };
        let learned = Limits::from_snapshot(snap, provider);
        let mut merged = s.beliefs.stated_limits();
        for d in DIMENSIONS {
            if let Some(v) = learned.get(d) {
                merged.set(d, Some(v));
            }
        }
        // A reset instant counts from when the server took its view.
        let view_wall = match sent {
            Some(x) => {
                let ago = t.saturating_duration_since(x.admitted_at);
                now.wall.checked_sub(ago).unwrap_or(now.wall)
            }
            None => now.wall,
        };
        // One sample per dimension: the limit stated, and for a dimension
        // the provider's headers describe, what the view proves and
        // allows of its bucket's capacity.
        let samples: [Sample; 4] = std::array::from_fn(|i| {
            let d = DIMENSIONS[i];
            if !headers_describe(d, provider) {
                return Sample::Answer {
                    limit: learned.get(d),
                    proven: None,
                    allowed: None,
                    margin_gone: false,
                };
            }
            let w = snap.window(d);
            let limit = w.limit.or_else(|| merged.get(d)).filter(|l| *l > 0);
            let until_full = w.reset.and_then(|r| reset_wait(r, view_wall, profile));
            let lowest = w.remaining.map(|r| rounding(d).range(r).0);
            // A level that may be zero may be a debt, unless the view is of
            // a success whose own charge there was smaller than the
            // capacity already known: the provider admitted it on a level
            // that held it, so it left no debt behind.
            let seen = s.beliefs.stated[i].capacity.seen;
            let no_debt = charged && sent.is_some_and(|x| x.amounts.by_index(i) < seen.max(1));
            let highest = w.remaining.map(|r| rounding(d).range(r).1 - 1);
            let slack = w
                .reset
                .map_or(Duration::ZERO, |r| profile.reset_uncertainty(r));
            let margin = s.buckets[i].as_ref().map(|b| s.levels[i].margin(b, t));
            Sample::Answer {
                limit: learned.get(d),
                proven: capacity_evidence(lowest, until_full, limit, charged, no_debt, d),
                allowed: capacity_bound(highest, until_full, slack, limit, charged, d),
                margin_gone: margin.is_none_or(|m| m == 0),
            }
        });
        let limits = std::array::from_fn(|i| {
            snap.window(DIMENSIONS[i])
                .limit
                .or_else(|| merged.get(DIMENSIONS[i]))
                .filter(|l| *l > 0)
        });
        let before = credit_capacities(s);
        let imported = s.imported;
        s.believe(burst, share, t, |beliefs| {
            let mut moved = false;
            for (i, sample) in samples.iter().enumerate() {
                moved |= beliefs.stated[i].observe(sample).moved;
            }
            for d in DIMENSIONS {
                let i = index(d);
                let lowest = snap.window(d).remaining.map(|r| rounding(d).range(r).0);
                let seen = beliefs.stated[i].capacity.seen;
                if share < 1000 && lowest.is_some_and(|l| seen > 0 && l >= seen / 2) {
                    // Cut off from its peers: a provider bucket at least
                    // half full says the share this process measured is no
                    // longer all it may use (`SilentEstimate::headroom`).
                    // Followed by the buckets at the next admission.
                    let _ = beliefs
                        .estimate_mut(i, true)
                        .observe(&Sample::Headroom { at: t });
                }
                // An answer's view beside this process's own charges then
                // (a success's after its charge, a 429's without it): the
                // drain between views beyond them is the others'. Cut off,
                // a success's sets the share; else every answer's tells
                // what clients this process cannot see take (`Others`; a
                // 429's is what reaches a bucket of a second or two). The
                // share's drain reads successes alone, as measured.
                if !charged && (share < 1000 || imported) {
                    continue;
                }
                let view = match (sent, snap.window(d).remaining, limits[i]) {
                    (Some(x), Some(remaining), Some(limit)) if headers_describe(d, provider) => {
                        let (lo, hi) = rounding(d).range(remaining);
                        let amount = x.amounts.by_index(i);
                        let own = if charged { amount } else { 0 };
                        BucketView {
                            remaining,
                            spread: hi.saturating_sub(lo).max(1),
                            capacity: seen,
                            limit,
                            // The running total without what the server
                            // did not charge.
                            charged: x.charged[i].wrapping_sub((amount - own) as u32),
                            own,
                            at: x.admitted_at,
                            permille: share,
                        }
                    }
                    _ => continue,
                };
                moved |= if share < 1000 {
                    beliefs.share[i].observe(&Sample::View(view)).moved
                } else if imported {
                    // Peers in a shared store: their charges are not in
                    // this process's, and would read as others' takes.
                    false
                } else {
                    beliefs.others[i].observe(&Sample::Seen(view)).moved
                };
            }
            // A hypothesis, taken only where surprises can correct it.
            let guess = if learn {
                sibling_horizon(beliefs.stated.each_ref().map(|x| &x.capacity), &limits)
            } else {
                [None; 4]
            };
            for (i, g) in guess.into_iter().enumerate() {
                let c = &mut beliefs.stated[i].capacity;
                moved |= c.guess != g;
                c.guess = g;
            }
            ((), moved)
        });
        // A capacity learned larger raises the credit below.
        let after = credit_capacities(s);
        let grown: [u64; 4] = std::array::from_fn(|i| match (before[i], after[i]) {
            (Some(b), Some(a)) => a.saturating_sub(b),
            _ => 0,
        });
        let mut surplus: [Option<u64>; 4] = [None; 4];
        for d in DIMENSIONS
            .into_iter()
            .filter(|d| headers_describe(*d, provider))
        {
            let i = index(d);
            let Some(b) = &mut s.buckets[i] else {
                continue;
            };
            let level = &mut s.levels[i];
            let w = snap.window(d);
            let view = ServerView {
                remaining: w.remaining,
                until_full: w
                    .reset
                    .and_then(|r| reset_wait(r, view_wall, profile))
                    .map(|until| {
                        let limit = w.limit.filter(|l| *l > 0).unwrap_or(b.limit());
                        (limit, until)
                    }),
            };
            let dead_band = rounding(d);
            // An error answer's view does not count the request itself.
            let mark = sent.and_then(|x| {
                let own = if charged { 0 } else { x.amounts.by_index(i) };
                x.marks[i].get().map(|m| m.plus(own))
            });
            level.sync(b, &view, mark, dead_band, t);
            if let (Some(x), Some(m)) = (sent, mark) {
                // What the server held beyond the credit at the send, less
                // what was given back since (uncharged sends counted then).
                let since = u64::from((s.released[i] as u32).wrapping_sub(x.released[i]));
                surplus[i] = level
                    .surplus(b, &view, m, dead_band)
                    .map(|u| u.saturating_sub(since));
            }
            if grown[i] > 0 {
                // A capacity learned larger: the credit was held below the
                // server's level by the old, smaller capacity; it rises by
                // what the server showed beyond it (against the credit at
                // the send, or now without one), at most by the growth, so
                // a reordered view cannot raise it further than that.
                let up = match &mut surplus[i] {
                    Some(u) => {
                        let up = (*u).min(grown[i]);
                        *u -= up;
                        up
                    }
                    None if mark.is_none() => level
                        .surplus(b, &view, level.mark(b), dead_band)
                        .map_or(0, |u| u.min(grown[i])),
                    None => 0,
                };
                if up > 0 {
                    level.raise_credit(b, up, t);
                }
            }
        }
        if let Some(x) = sent {
            self.refund_unconfirmed(x, surplus, t);
        }
    }

    /// An outcome held as unknown keeps its worst case, in case the server
    /// charged it. When a later response shows that the server held, at
    /// that request's admission, more than the credit then (less what was
    /// given back since), the difference was never charged: that much of
    /// the held reservations' bucket part is given back, oldest first, per
    /// bucket, never more than they hold. The spend budget keeps the worst
    /// case until the outcome is resolved.
    ///
    /// Without this a held send that the server never saw costs its
    /// reservation for the rest of a backlog. Evidence that is wrong (a
    /// reordered send) only makes the credit too high by at most the held
    /// amounts, and the next view lowers it again.
    fn refund_unconfirmed(&mut self, sent: &Sent, mut surplus: [Option<u64>; 4], t: Instant) {
        if self.slab.held_live == 0 || surplus.iter().all(Option::is_none) {
            return;
        }
        let Some(s) = self.scopes.get_mut(sent.scope.0 as usize) else {
            return;
        };
        for (id, left) in self.slab.unconfirmed_in(sent.scope, sent.admitted_at) {
            let mut refund = [0u64; 4];
            for (i, b) in s.buckets.iter_mut().enumerate() {
                let (Some(b), Some(u)) = (b, &mut surplus[i]) else {
                    continue;
                };
                let r = left[i].min(*u);
                // A correction: views taken before it count it.
                s.levels[i].refund(b, r, t);
                *u -= r;
                refund[i] = r;
            }
            self.slab.add_refund(id, refund);
        }
    }
}

/// The furthest `*-reset` header sync trusts: a per-minute bucket is full
/// again within a minute of being empty, so a reset further away is a
/// per-day window, a wrong clock or garbage, and is ignored (a minute, plus
/// a few seconds for clock skew).
pub(crate) const RESET_HORIZON: Duration = Duration::from_secs(65);

/// How long until the server's bucket is full, when the reset is usable:
/// `None` when it has passed (or is now) or lies beyond [`RESET_HORIZON`].
/// Taken in the server's favour by as much as the value may be off
/// ([`Profile::reset_uncertainty`]: a second for a whole-second value, a
/// millisecond for one with sub-second digits) — never a fixed second,
/// which on a 5 s bucket is a fifth of it.
fn reset_wait(r: Reset, wall: SystemTime, profile: &Profile) -> Option<Duration> {
    let wait = r.wait_from(wall);
    if wait.is_zero() || wait > RESET_HORIZON {
        return None;
    }
    Some(wait.saturating_sub(profile.reset_uncertainty(r)))
}
