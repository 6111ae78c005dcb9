//! Reservations: what one admitted request holds, and the ledger that
//! shows every unit reserved settled, released or still outstanding, and
//! every end of a reservation that had already ended refused.

use super::belief::CreditMark;
use crate::time::Instant;

/// A price interned by its controller (keeps reservations small: an
/// `Option<PriceId>` is 4 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PriceId(std::num::NonZeroU32);

impl PriceId {
    /// The id of table index `i` (`None` past 2³² − 2 prices, which no
    /// table reaches: each is a distinct price in memory).
    pub(super) fn at(i: usize) -> Option<PriceId> {
        let n = u32::try_from(i).ok()?.checked_add(1)?;
        std::num::NonZeroU32::new(n).map(PriceId)
    }

    /// Its index in the controller's table.
    #[inline]
    pub(super) fn index(self) -> usize {
        (self.0.get() - 1) as usize
    }
}

/// Units held by one reservation, per dimension. The combined-tokens bucket
/// takes `input + output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Amounts {
    /// Requests (1 per reservation).
    pub requests: u64,
    /// Input tokens (rate-limited input: uncached + cache writes).
    pub input: u64,
    /// Output tokens.
    pub output: u64,
}

impl Amounts {
    /// Input plus output.
    pub const fn tokens(&self) -> u64 {
        self.input.saturating_add(self.output)
    }

    /// The amount of bucket `i` (requests, input, output, combined).
    pub(crate) const fn by_index(&self, i: usize) -> u64 {
        match i {
            0 => self.requests,
            1 => self.input,
            2 => self.output,
            _ => self.tokens(),
        }
    }

    fn add(&mut self, o: &Amounts) {
        self.requests = self.requests.saturating_add(o.requests);
        self.input = self.input.saturating_add(o.input);
        self.output = self.output.saturating_add(o.output);
    }
}

/// Identifies a reservation: a slot and its generation, so a stale handle
/// (already settled, released or expired) is recognised: its end is
/// refused, except the one end still due from the owner of a reservation
/// that ended without it (lease expiry, disowned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReservationId {
    /// Slot in the ledger.
    pub(crate) slot: u32,
    /// Generation of the slot.
    pub(crate) generation: u32,
}

/// An admitted request's claim on its buckets and budgets. It is not
/// `Clone`: it is consumed exactly once by `settle`, `release` or
/// `resolve_unknown`. A reservation nobody settles is released when its
/// lease runs out, unless it was put on hold as `outcome_unknown`.
#[must_use = "settle or release a reservation, or it holds capacity until its lease expires"]
#[derive(Debug, PartialEq, Eq)]
pub struct Reservation {
    pub(crate) id: ReservationId,
    pub(crate) scope: super::ScopeId,
    pub(crate) amounts: Amounts,
    pub(crate) cost: u64,
    pub(crate) price: Option<PriceId>,
    pub(crate) admitted_at: Instant,
    /// Whether the request streams its answer (its head comes at the
    /// first token, not after the whole generation).
    pub(crate) streamed: bool,
    /// Each bucket's credit right after the take ([`CreditMark::NONE`]: no
    /// bucket).
    pub(crate) marks: [CreditMark; 4],
    /// The scope's running total of units given back unused, then (low 32
    /// bits: differences are taken wrapping).
    pub(crate) released: [u32; 4],
    /// The scope's running total of units charged, right after the take
    /// (low 32 bits: differences are taken wrapping).
    pub(crate) charged: [u32; 4],
}

/// What a response's rate-limit headers are read against: the scope and
/// each bucket's credit when the request was admitted. Take it from the
/// [`Reservation`] before settling it, and give it with the response
/// ([`Observed::of_sent`](super::Observed::of_sent)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub(crate) scope: super::ScopeId,
    pub(crate) amounts: Amounts,
    pub(crate) admitted_at: Instant,
    pub(crate) streamed: bool,
    pub(crate) marks: [CreditMark; 4],
    pub(crate) released: [u32; 4],
    /// The scope's running total of units charged, right after the take
    /// (low 32 bits: differences are taken wrapping).
    pub(crate) charged: [u32; 4],
}

impl Sent {
    /// The scope the request was admitted on.
    pub fn scope(&self) -> super::ScopeId {
        self.scope
    }
}

impl Reservation {
    /// The ledger id.
    pub fn id(&self) -> ReservationId {
        self.id
    }
    /// The scope (key, class) whose buckets it holds.
    pub fn scope(&self) -> super::ScopeId {
        self.scope
    }
    /// The reserved units.
    pub fn amounts(&self) -> Amounts {
        self.amounts
    }
    /// The worst-case cost reserved in the spend budget, in micro-units of
    /// currency (0 when unpriced).
    pub fn cost_micros(&self) -> u64 {
        self.cost
    }
    /// What its response's rate-limit headers are read against.
    pub fn sent(&self) -> Sent {
        Sent {
            scope: self.scope,
            amounts: self.amounts,
            admitted_at: self.admitted_at,
            streamed: self.streamed,
            marks: self.marks,
            released: self.released,
            charged: self.charged,
        }
    }
}

/// The reservation counters, per dimension: `reserved == settled +
/// released + outstanding` (`held` is the part of `outstanding` whose
/// outcome is unknown), and how many ends were refused because their
/// reservation had already ended.
///
/// What a test of a driver should check once its requests are done is
/// [`is_clean`](Self::is_clean): every reservation ended, none ended
/// twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Ledger {
    /// Everything ever reserved.
    pub reserved: Amounts,
    /// Reserved amounts of settled reservations (the estimates, not usage).
    pub settled: Amounts,
    /// Reserved amounts released unused (abandoned, lease expired, resolved
    /// as not sent).
    pub released: Amounts,
    /// Reserved and not yet settled or released.
    pub outstanding: Amounts,
    /// Part of `outstanding` held as `outcome_unknown`.
    pub held: Amounts,
    /// Actual usage charged by settles (input = rate-limited input).
    pub charged: Amounts,
    /// Settles and releases refused because their reservation had already
    /// ended (settled or released by its owner before, or its late end
    /// already taken): each charged and gave back nothing. Not 0 means a
    /// driver ended one reservation twice — a bug a test should see, not a
    /// second charge.
    pub refused_ends: u64,
}

impl Ledger {
    /// True when no reservation is outstanding (nor held) on any
    /// dimension: every admitted request was settled or released.
    pub fn all_ended(&self) -> bool {
        self.outstanding == Amounts::default() && self.held == Amounts::default()
    }

    /// True when every reservation ended ([`all_ended`](Self::all_ended))
    /// and none was ended twice (`refused_ends == 0`): the state a driver
    /// must leave the ledger in once its requests are done.
    pub fn is_clean(&self) -> bool {
        self.all_ended() && self.refused_ends == 0
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub generation: u32,
    pub scope: super::ScopeId,
    pub live: bool,
    pub held: bool,
    /// Units per bucket already given back on the server's word while
    /// held (see `Controller::sync_headers_sent`).
    pub refunded: [u64; 4],
    pub amounts: Amounts,
    /// Reserved output the pace was not charged (`Takes::unpaced`).
    pub unpaced: u64,
    pub cost: u64,
    pub admitted_at: Instant,
}

/// What a removed entry held.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Removed {
    pub scope: super::ScopeId,
    pub amounts: Amounts,
    /// Reserved output the pace was not charged: charged to it before the
    /// end gives back or charges the rest.
    pub unpaced: u64,
    pub cost: u64,
    /// Units per bucket the buckets already have back.
    pub refunded: [u64; 4],
}

/// Outstanding reservations in a slab: O(1) insert and remove, no hashing
/// on the common path (only reservations ended without their owner are
/// hashed, in `orphans`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Slab {
    entries: Vec<Entry>,
    free: Vec<u32>,
    /// Reservations ended without their owner (lease expired, disowned),
    /// with when: the owner's one late end is taken (a settle charges its
    /// usage), any other end of an ended reservation is refused.
    orphans: rustc_hash::FxHashMap<ReservationId, Instant>,
    pub ledger: Ledger,
    /// Live held entries: header sync looks for refunds only when there
    /// are some.
    pub held_live: u32,
}

/// How a reservation leaves the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Settled by its owner.
    Settled,
    /// Released by its owner.
    Released,
    /// Released without its owner (lease expired, disowned) at this
    /// time: the owner's end is still due, and is taken once.
    Orphaned(Instant),
}

impl Slab {
    #[inline]
    pub(crate) fn insert(
        &mut self,
        scope: super::ScopeId,
        amounts: Amounts,
        unpaced: u64,
        cost: u64,
        now: Instant,
    ) -> ReservationId {
        self.ledger.reserved.add(&amounts);
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.entries.push(Entry {
                    generation: 0,
                    scope,
                    live: false,
                    held: false,
                    refunded: [0; 4],
                    amounts: Amounts::default(),
                    unpaced: 0,
                    cost: 0,
                    admitted_at: now,
                });
                (self.entries.len() - 1) as u32
            }
        };
        let e = &mut self.entries[slot as usize];
        e.live = true;
        e.scope = scope;
        e.held = false;
        e.refunded = [0; 4];
        e.amounts = amounts;
        e.unpaced = unpaced;
        e.cost = cost;
        e.admitted_at = now;
        ReservationId {
            slot,
            generation: e.generation,
        }
    }

    fn live(&mut self, id: ReservationId) -> Option<&mut Entry> {
        self.entries
            .get_mut(id.slot as usize)
            .filter(|e| e.live && e.generation == id.generation)
    }

    /// Removes a live entry; `None` when the handle is stale.
    #[inline]
    pub(crate) fn remove(&mut self, id: ReservationId, how: Exit) -> Option<Removed> {
        let e = self.live(id)?;
        e.live = false;
        e.generation = e.generation.wrapping_add(1);
        let out = Removed {
            scope: e.scope,
            amounts: e.amounts,
            unpaced: e.unpaced,
            cost: e.cost,
            refunded: e.refunded,
        };
        if e.held {
            self.held_live -= 1;
        }
        match how {
            Exit::Settled => self.ledger.settled.add(&out.amounts),
            Exit::Released => self.ledger.released.add(&out.amounts),
            Exit::Orphaned(at) => {
                self.ledger.released.add(&out.amounts);
                self.orphans.insert(id, at);
            }
        }
        self.free.push(id.slot);
        Some(out)
    }

    /// The end of a reservation that is no longer live: `true` when it is
    /// the owner's late end of an orphaned reservation (taken, once);
    /// `false` when it is refused (the reservation had already ended, or
    /// was never this slab's), and then counted in `refused_ends`.
    pub(crate) fn end_stale(&mut self, id: ReservationId) -> bool {
        if self.orphans.remove(&id).is_some() {
            return true;
        }
        self.ledger.refused_ends += 1;
        false
    }

    /// Forgets orphans orphaned at or before `cutoff`: their owners are
    /// taken as gone (a late end after that is refused and counted), so
    /// abandoned reservations do not pile up.
    pub(crate) fn forget_orphans(&mut self, cutoff: Instant) {
        self.orphans.retain(|_, at| *at > cutoff);
    }

    pub(crate) fn hold(&mut self, id: ReservationId) -> bool {
        let Some(e) = self.live(id) else {
            return false;
        };
        if !e.held {
            e.held = true;
            self.held_live += 1;
        }
        true
    }

    /// Held entries of `scope` admitted before `before`, oldest first, with
    /// the units per bucket not yet given back.
    pub(crate) fn unconfirmed_in(
        &self,
        scope: super::ScopeId,
        before: Instant,
    ) -> Vec<(ReservationId, [u64; 4])> {
        let mut out: Vec<(Instant, ReservationId, [u64; 4])> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.live && e.held && e.scope == scope && e.admitted_at < before)
            .map(|(i, e)| {
                let id = ReservationId {
                    slot: i as u32,
                    generation: e.generation,
                };
                let left =
                    std::array::from_fn(|d| e.amounts.by_index(d).saturating_sub(e.refunded[d]));
                (e.admitted_at, id, left)
            })
            .filter(|(_, _, left)| left.iter().any(|u| *u > 0))
            .collect();
        out.sort_by_key(|(t, id, _)| (*t, id.slot));
        out.into_iter().map(|(_, id, left)| (id, left)).collect()
    }

    /// Records units per bucket of a held entry given back.
    pub(crate) fn add_refund(&mut self, id: ReservationId, units: [u64; 4]) {
        if let Some(e) = self.live(id) {
            for (r, u) in e.refunded.iter_mut().zip(units) {
                *r = r.saturating_add(u);
            }
        }
    }

    /// The ledger, with `outstanding` and `held` summed from the live
    /// entries themselves (not from counters); in debug builds it checks
    /// them against the counters (`reserved == settled + released +
    /// outstanding`), a check of this slab's own bookkeeping.
    pub(crate) fn ledger(&self) -> Ledger {
        let mut l = self.ledger;
        l.outstanding = Amounts::default();
        l.held = Amounts::default();
        for e in self.entries.iter().filter(|e| e.live) {
            l.outstanding.add(&e.amounts);
            if e.held {
                l.held.add(&e.amounts);
            }
        }
        debug_assert!(balanced(&l), "the slab lost track of a reservation: {l:?}");
        l
    }

    pub(crate) fn is_live(&mut self, id: ReservationId) -> bool {
        self.live(id).is_some()
    }

    pub(crate) fn charge(&mut self, actual: &Amounts) {
        self.ledger.charged.add(actual);
    }

    /// Ids of live, not held entries admitted at or before `cutoff`.
    pub(crate) fn expired(&self, cutoff: Instant) -> Vec<ReservationId> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.live && !e.held && e.admitted_at <= cutoff)
            .map(|(i, e)| ReservationId {
                slot: i as u32,
                generation: e.generation,
            })
            .collect()
    }

    /// The scopes that hold a live entry (held ones too).
    pub(crate) fn live_scopes(&self) -> std::collections::HashSet<super::ScopeId> {
        self.entries
            .iter()
            .filter(|e| e.live)
            .map(|e| e.scope)
            .collect()
    }

    /// Ids of live entries on one of `scopes` (held ones too).
    pub(crate) fn live_on(&self, scopes: &[super::ScopeId]) -> Vec<ReservationId> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.live && scopes.contains(&e.scope))
            .map(|(i, e)| ReservationId {
                slot: i as u32,
                generation: e.generation,
            })
            .collect()
    }

    /// The earliest admission time among live, not held entries.
    pub(crate) fn oldest(&self) -> Option<Instant> {
        self.entries
            .iter()
            .filter(|e| e.live && !e.held)
            .map(|e| e.admitted_at)
            .min()
    }
}

/// `reserved == settled + released + outstanding`: the slab's counters
/// agree with its live entries.
fn balanced(l: &Ledger) -> bool {
    let mut sum = l.settled;
    sum.add(&l.released);
    sum.add(&l.outstanding);
    sum == l.reserved
}
