//! Accounting: how a reservation ends — settled at its actual usage,
//! released whole, held while its outcome is unknown, expired when its
//! owner went away, or disowned when a store's record replaced its buckets.
//!
//! Kept apart because the invariant lives here: every reservation ends
//! once, and a second end is refused and counted in
//! [`Ledger::refused_ends`](crate::admit::Ledger::refused_ends), never charged twice.

use super::admission::holds_output;
use super::{
    grow_ramp, silent_ended, Amounts, Controller, Exit, Instant, Now, Removed, Reservation, Usage,
};
use crate::admit::End;

impl Controller {
    /// Corrects a reservation to the actual usage of its response: input
    /// counts `input_tokens + cache_creation_input_tokens` (not cache
    /// reads), output counts `output_tokens`; the spend window gets the
    /// billed total. Like an admission, a settle lets the ramp take the
    /// growth steps of the calm time since its last change.
    ///
    /// A reservation that already ended is not charged again: the settle
    /// is refused and counted in [`Ledger::refused_ends`](crate::admit::Ledger::refused_ends). The exception
    /// is the owner's one end of a reservation that ended without it
    /// (lease expired, disowned by its store): that settle charges
    /// the actual usage, which was spent all the same.
    pub fn settle(&mut self, res: Reservation, usage: &Usage, now: Now) {
        self.end(
            &End::Settle {
                reservation: res,
                usage: *usage,
            },
            now,
        );
    }

    /// Ends a reservation as `end` says: the one body of [`settle`](Self::settle)
    /// and [`release`](Self::release). By reference, because
    /// [`apply`](Self::apply) takes its event by reference (a store may run
    /// the same event again on a fresher copy of the controller); the
    /// ledger, not ownership, is what refuses a second end.
    pub(super) fn end(&mut self, end: &End, now: Now) {
        let (res, usage) = match end {
            End::Settle { reservation, usage } => (reservation, usage),
            End::Release { reservation: res } => {
                match self.slab.remove(res.id, Exit::Released) {
                    Some(e) => {
                        if let Some(s) = self.scopes.get_mut(res.scope.0 as usize) {
                            silent_ended(s, &res.amounts, &Amounts::default(), res.admitted_at);
                        }
                        self.touch(res.scope, now.instant);
                        self.give_back(&e, now.instant)
                    }
                    // Already ended: an orphan's late release gives nothing back
                    // (its end gave it back); any other is refused and counted.
                    None => {
                        self.slab.end_stale(res.id);
                    }
                }
                return;
            }
        };
        let t = now.instant;
        let actual = Amounts {
            requests: 1,
            input: usage.rate_limited_input(),
            output: usage.output_tokens,
        };
        let removed = self.slab.remove(res.id, Exit::Settled);
        let live = removed.is_some();
        // Not live: the owner's late end of a reservation that ended
        // without it (lease expired, disowned) charges its usage, once;
        // any other end of an ended reservation is refused and counted —
        // a second settle never charges twice.
        if !live && !self.slab.end_stale(res.id) {
            return;
        }
        self.touch(res.scope, t);
        if let Some(s) = self.scopes.get_mut(res.scope.0 as usize) {
            // The probe's reservation ended. An answer teaches through
            // `observe` (which marks the scope heard); a settle alone —
            // a caller that left before the answer, a send cut with no
            // answer, charged at its estimate — taught nothing: the next
            // request becomes the probe, and nothing else goes out into
            // limits still unknown.
            s.probes.retain(|p| *p != res.id);
        }
        // A held reservation's buckets may have part of it back already.
        let refunded = removed.map_or([0; 4], |r| r.refunded);
        let unpaced = removed.map_or(0, |r| r.unpaced);
        let Some(s) = self.scopes.get_mut(res.scope.0 as usize) else {
            return;
        };
        if live {
            s.learn_output(actual.output);
        }
        for (i, b) in s.buckets.iter_mut().enumerate() {
            if let Some(b) = b {
                if holds_output(i) {
                    b.take_pace(unpaced, t);
                }
                let reserved = if live {
                    res.amounts.by_index(i).saturating_sub(refunded[i])
                } else {
                    0
                };
                let act = actual.by_index(i);
                s.charged[i] = s.charged[i].wrapping_add(act).wrapping_sub(reserved);
                if act < reserved {
                    b.put_back(reserved - act, t);
                } else if act > reserved {
                    b.charge(act - reserved, t);
                }
            }
        }
        if live {
            silent_ended(s, &res.amounts, &actual, res.admitted_at);
        }
        self.slab.charge(&actual);
        if let Some(sp) = &mut self.spend {
            if live {
                sp.unreserve(res.amounts.tokens(), res.cost, t);
            }
            let cost = res
                .price
                .and_then(|p| self.prices.get(p.index()))
                .map(|p| p.cost(usage))
                .unwrap_or(0);
            sp.settle(usage.total_tokens(), cost, t);
        }
        grow_ramp(s, &self.cfg.ramp, t);
    }

    /// Releases a reservation that was never sent (or whose send provably
    /// did not reach the provider): everything it held goes back. A
    /// release of a reservation that already ended gives nothing back and,
    /// unless it is the owner's end of one that ended without it, is
    /// counted in [`Ledger::refused_ends`](crate::admit::Ledger::refused_ends).
    pub fn release(&mut self, res: Reservation, now: Now) {
        self.end(&End::Release { reservation: res }, now);
    }

    fn give_back(&mut self, e: &Removed, t: Instant) {
        let Removed {
            scope,
            amounts,
            unpaced,
            cost,
            refunded,
        } = *e;
        if let Some(s) = self.scopes.get_mut(scope.0 as usize) {
            for (i, b) in s.buckets.iter_mut().enumerate() {
                if let Some(b) = b {
                    if holds_output(i) {
                        b.take_pace(unpaced, t);
                    }
                    let back = amounts.by_index(i).saturating_sub(refunded[i]);
                    b.put_back(back, t);
                    s.released[i] = s.released[i].wrapping_add(back);
                    s.charged[i] = s.charged[i].wrapping_sub(back);
                }
            }
        }
        if let Some(sp) = &mut self.spend {
            sp.unreserve(amounts.tokens(), cost, t);
        }
    }

    /// Marks a reservation's outcome as unknown: it keeps its worst-case
    /// cost (buckets and spend) and is exempt from lease expiry until
    /// [`resolve_unknown`](Self::resolve_unknown).
    pub fn hold_unknown(&mut self, res: &Reservation, _now: Now) {
        self.slab.hold(res.id);
        // A probe with no answer taught nothing: the next request probes.
        if let Some(s) = self.scopes.get_mut(res.scope.0 as usize) {
            s.probes.retain(|p| *p != res.id);
        }
    }

    /// Resolves an unknown outcome: with usage it is settled, without (the
    /// provider confirmed nothing was generated) it is released.
    pub fn resolve_unknown(&mut self, res: Reservation, usage: Option<&Usage>, now: Now) {
        match usage {
            Some(u) => self.settle(res, u, now),
            None => self.release(res, now),
        }
    }

    /// Releases every reservation older than the lease that is not held as
    /// unknown (abandoned: its owner went away). Returns how many.
    pub fn expire(&mut self, now: Now) -> usize {
        let t = now.instant;
        let Some(cutoff) = t.since_origin().checked_sub(self.cfg.lease) else {
            return 0;
        };
        let ids = self.slab.expired(Instant::from_origin(cutoff));
        let n = ids.len();
        for id in ids {
            if let Some(e) = self.slab.remove(id, Exit::Orphaned(t)) {
                self.give_back(&e, t);
            }
        }
        // An owner gets one more lease after its reservation ended without
        // it to end it (a late settle charges its usage); after that it is
        // taken as gone.
        self.slab.forget_orphans(Instant::from_origin(cutoff));
        n
    }
}
