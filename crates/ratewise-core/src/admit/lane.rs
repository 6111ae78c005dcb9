//! The fast lane of [`Shared`](super::Shared): credit leased from a
//! scope's buckets under the lock and parked in atomics, so that a common
//! first attempt is admitted with one compare-and-swap and settled with
//! plain stores into its thread's own stripe, without the lock.
//!
//! Why: every `admit` and `settle` through the mutex is a lock session
//! writing a dozen cache lines; with two threads on one limiter that cost
//! 3–3.6× a single-bucket `governor` check, and even an ideal lock-based
//! design measured 2.7–3× a CAS. So the lock leaves the common path.
//!
//! # How
//!
//! * **Pool.** One `AtomicU64` per scope packs (requests 8 bits, input 27,
//!   output 27) of credit plus 2 bits of the lane generation, on a 64-byte
//!   line with the lease instants. Settles go to per-thread stripes
//!   ([`stripes`](super::stripes), each on its own lines) and the
//!   generation sits on a read-mostly line, so with two threads a job
//!   moves one line between the cores, as a single-bucket limiter's check
//!   does (one shared accumulator made it two: 290–298 ns per job against
//!   217–227 ns striped, 181–196 ns with leases of 64, 160–167 ns with
//!   owned stripes). A lock
//!   holder fills it (a *lease*) after admitting a first attempt through
//!   the controller: at most [`LEASE_SHAPES`] times that request's amounts,
//!   never more than the buckets hold now, and only at full ramp rate with
//!   no pause, stop or spend budget (with a spend budget the lane is off:
//!   its window needs every cost under the lock). Under pacing the buckets
//!   are nearly empty, leases are about one request and the lane idles:
//!   correct, just no faster.
//! * **Fast admit.** Only a first attempt whose amounts fit
//!   ([`INPUT_MAX`], [`OUTPUT_MAX`]), while the lease is younger than
//!   [`RampConfig::idle_after`](super::RampConfig::idle_after): a pool left
//!   from before an idle period never releases a burst after idle, and the
//!   slow path sees the idle gap (the lane's latest admission, kept to the
//!   millisecond, is passed to the controller at each drain) and restarts
//!   the ramp exactly as before. One CAS decrements the pool.
//! * **Top-up.** A fast admit that leaves the pool at [`LOW_WATER`] or less
//!   tops it up if the lock is free (`try_lock`): a lock session that
//!   drains, bounds and leases more, while the other threads keep taking
//!   from what is left instead of queueing on the lock when it runs dry.
//!   A slow admit first tries the lane again under the lock (another thread
//!   may have topped it up meanwhile).
//! * **Revocation.** Every slow admit first puts the unused pool back into
//!   the buckets (and leases again afterwards if the controller admitted a
//!   first attempt); `observe` puts the leases of the key back before the
//!   controller applies the response — header sync then compares the
//!   server's remaining with the level *including* the leased credit, a
//!   pause drains it, a stop or a ramp cut finds it in the buckets — and
//!   leases again afterwards only if admission still allows; `resume`,
//!   [`Shared::lock`](super::Shared::lock) and generation changes put it
//!   back too. A fast admit that wins its CAS therefore took credit that
//!   was valid at that instant.
//! * **Capacity.** While a lease lives, the bucket is kept at
//!   `level + lease ≤ capacity` at every lock session on the scope (see
//!   `Controller::lane_bound`), so a full bucket plus a parked lease is
//!   never a burst above the capacity: the rate bounds documented in
//!   [`limits`](super::limits) hold as before. The cost: up to one lease
//!   (plus one unit) of a nearly full bucket stays unused while it lives.
//! * **Settle and release.** A settle adds (estimate, actual) to its
//!   thread's stripe of free-running counters: plain stores where the
//!   thread owns the stripe, atomic adds in the stripes shared by threads
//!   beyond the owned ones (see [`stripes`](super::stripes): two `lock
//!   xadd`s were a third of an uncontended job's own cost). A release adds
//!   to packed accumulators (rarer). The next lock holder on the scope
//!   drains both into the ledger and corrects the buckets by the
//!   difference, with its sign (later than a locked settle would:
//!   conservative). Usage above
//!   the estimate (debt) takes the lock. A release accumulator field past
//!   half its range makes its releaser drain at once; one request adds at
//!   most 2²⁴ input and 2²⁰ output tokens, so an overflow would take over a
//!   hundred releasers inside one drain's few instructions.
//! * **Ledger.** Lane admissions are the pool's consumption, counted at the
//!   next lock session on the scope, and then also as first attempts in
//!   the retry budget, at that session's instant (a retry's own admission
//!   is such a session, so it always counts them): a lane first attempt
//!   may stay in the budget's window up to one lock session longer than
//!   it should — the budget is looser by that skew, never stricter.
//!   Drains read the accumulators before the pool, so every settle they
//!   see has its admission counted: `reserved = settled + released +
//!   outstanding` holds whenever the lock is held ([`Shared::ledger`]
//!   drains first).
//! * **Expiry.** Lane reservations carry a generation. The generation
//!   advances at a lock session a lease ([`Config::lease`]) after it
//!   began, or once its latest admission is a lease old; the generation
//!   before it is then closed: its reservations still outstanding were
//!   admitted at least a lease ago and are released (amounts known in
//!   aggregate). So a lane reservation expires between one and two lease
//!   times after admission (slab ones after one) — [`Shared::expire`] and
//!   [`Shared::next_wakeup`] include them. Only reservations of the
//!   current generation settle without the lock; older ones take it. A
//!   settle of an expired lane reservation is a stale handle: like the
//!   controller's, it charges the actual usage in full. That includes a
//!   lock-free settle that passed its generation check just as a lock
//!   holder closed the generation (the current one closes at once when its
//!   latest admission is a lease old): it lands in the closed generation's
//!   parity, which holds nothing else until the next generation of that
//!   parity begins, a lease later, so the next drain knows it for stale.
//!   Only a settler descheduled between two instructions for a whole lease
//!   (10 min by default) could be counted in the wrong generation.
//! * `hold_unknown` on a lane reservation moves it into the controller's
//!   slab, held; the reservation remembers its slab id (one atomic word in
//!   it, set through `&Reservation`), and resolves, settles or releases
//!   there like any other.
//! * Lane reservations carry no credit marks (their credit was taken with
//!   the lease): `observe_sent` reads their response against the present,
//!   as `observe` does, with the key's leases put back first.
//!
//! [`Config::lease`]: super::Config::lease
//! [`Shared::ledger`]: super::Shared::ledger
//! [`Shared::expire`]: super::Shared::expire
//! [`Shared::next_wakeup`]: super::Shared::next_wakeup

use super::controller::Controller;
use super::reservation::{Amounts, Reservation};
use super::stripes::{Seen, Stripes};
use super::ScopeId;
use crate::time::Instant;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Scopes with a lane: the first 64 created by a controller. Later ones
/// always take the lock.
pub const LANES: usize = 64;
/// A lease holds at most this many times the leasing request's amounts.
pub const LEASE_SHAPES: u64 = 64;
/// The fast admit that leaves this many requests in the pool tops it up
/// if the lock is free.
pub const LOW_WATER: u64 = LEASE_SHAPES / 4;
/// Largest input estimate a lane admits (16 Mi tokens).
pub const INPUT_MAX: u64 = 1 << 24;
/// Largest output estimate a lane admits (1 Mi tokens).
pub const OUTPUT_MAX: u64 = 1 << 20;

/// Resolution of the lane's latest-admission instant (1 ms): idle
/// detection may see a gap up to this much longer than it was (a ramp
/// restart that early is the cautious side).
const GRAIN: u64 = 1_000_000;
const FIELD_BITS: u32 = 27;
const FIELD: u64 = (1 << FIELD_BITS) - 1;
const IN_SHIFT: u32 = FIELD_BITS;
const REQ_SHIFT: u32 = 2 * FIELD_BITS;
const REQ_MAX: u64 = 0xff;
const GEN_SHIFT: u32 = 62;
const LOW: u64 = 0xffff_ffff;
const GUARD: u64 = 1 << 31;

#[inline]
fn pack(gen: u64, a: &Amounts) -> u64 {
    ((gen & 3) << GEN_SHIFT) | (a.requests << REQ_SHIFT) | (a.input << IN_SHIFT) | a.output
}

#[inline]
fn unpack(w: u64) -> Amounts {
    Amounts {
        requests: (w >> REQ_SHIFT) & REQ_MAX,
        input: (w >> IN_SHIFT) & FIELD,
        output: w & FIELD,
    }
}

/// Nanoseconds since the origin.
#[inline]
pub(crate) fn ns(t: Instant) -> u64 {
    t.as_nanos()
}

fn instant(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

/// Whether a request of these amounts may use a lane.
#[inline]
pub(crate) fn fits(a: &Amounts) -> bool {
    a.requests == 1 && a.input <= INPUT_MAX && a.output <= OUTPUT_MAX
}

/// What admission writes, on one cache line: with two threads on one
/// limiter, the pool's line moves between cores once per admission, as a
/// single-bucket limiter's does.
#[repr(align(64))]
#[derive(Debug, Default)]
struct Hot {
    /// Packed credit and generation bits.
    pool: AtomicU64,
    /// Nanoseconds of the lease.
    lease_at: AtomicU64,
    /// Nanoseconds of the latest lane admission (for idle detection).
    last: AtomicU64,
}

/// The current generation, on a line of its own: every admission and
/// settle reads it and it changes once per lease time, so it stays in
/// both cores' caches instead of moving with the pool.
#[repr(align(64))]
#[derive(Debug, Default)]
struct Gen(AtomicU64);

/// Releases per generation parity (rarer: their own line): input (high
/// half) | count (low half); output.
#[repr(align(64))]
#[derive(Debug, Default)]
struct Released([[AtomicU64; 2]; 2]);

/// Lock-side books of a lane (taken only while the controller is locked).
#[derive(Debug, Default)]
struct Book {
    /// The pool word as the last lock holder left it (or observed it).
    set: u64,
    gen: u64,
    gen_start: Option<Instant>,
    /// Generations below this are closed (expired): their finishes are
    /// stale.
    open_from: u64,
    /// Latest lane admission seen in the current generation (an upper
    /// bound: the lane's latest admission at the drain that saw it).
    last_admit: Option<Instant>,
    /// The request amounts of the last lease.
    shape: Amounts,
    /// What drains have taken from the settle stripes.
    seen: Seen,
    /// Per generation parity: admitted and finished (settled, released,
    /// moved) estimates.
    admitted: [Amounts; 2],
    finished: [Amounts; 2],
}

impl Book {
    /// The full generation of a reservation's low 32 bits (it is at most
    /// the current one, and fewer than 2³² generations old).
    fn full(&self, tag: u32) -> u64 {
        self.gen
            .saturating_sub(u64::from((self.gen as u32).wrapping_sub(tag)))
    }
}

/// How a lock-free finish went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finish {
    /// Recorded.
    Done,
    /// Recorded; an accumulator is half full: drain under the lock.
    Drain,
    /// Not recorded: do it under the lock.
    Locked,
}

/// One scope's lane.
#[derive(Debug)]
pub(crate) struct Lane {
    scope: ScopeId,
    hot: Hot,
    gen: Gen,
    settled: Stripes,
    released: Released,
    book: Mutex<Book>,
}

impl Lane {
    pub fn new(scope: ScopeId) -> Self {
        Lane {
            scope,
            hot: Hot::default(),
            gen: Gen::default(),
            settled: Default::default(),
            released: Released::default(),
            book: Mutex::new(Book::default()),
        }
    }

    /// Lock-free admission of a first attempt: the lane generation of the
    /// credit taken and whether the pool runs low, or `None` (take the slow
    /// path).
    #[inline]
    pub fn try_admit(&self, a: &Amounts, t_ns: u64, fresh_ns: u64) -> Option<(u64, bool)> {
        if t_ns.saturating_sub(self.hot.lease_at.load(Ordering::Acquire)) > fresh_ns {
            return None;
        }
        // Before the CAS, so a drain that sees the admission sees its time
        // to within `GRAIN` (or a later one: a lost race or a failed
        // attempt only delay expiry and idle detection, by the skew
        // between two threads). Stored once per `GRAIN`: a store on every
        // admission would take the line exclusively once more per job.
        if self.hot.last.load(Ordering::Relaxed).saturating_add(GRAIN) <= t_ns {
            self.hot.last.store(t_ns, Ordering::Relaxed);
        }
        let d = pack(0, a);
        let mut w = self.hot.pool.load(Ordering::Acquire);
        loop {
            let p = unpack(w);
            if p.requests < a.requests || p.input < a.input || p.output < a.output {
                return None;
            }
            match self
                .hot
                .pool
                .compare_exchange_weak(w, w - d, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(x) => w = x,
            }
        }
        // The generation is at least the word's (set before the word); its
        // two low bits say which one the credit belonged to.
        let g = self.gen.0.load(Ordering::Acquire);
        // Only the admission that crosses the mark tries the lock: one
        // `try_lock` per lease, not one per admission while low.
        let left = unpack(w - d).requests;
        let low = left <= LOW_WATER && left + a.requests > LOW_WATER;
        Some((g.wrapping_sub(g.wrapping_sub(w >> GEN_SHIFT) & 3), low))
    }

    /// Lock-free settle of a reservation of generation `gen` with `actual`
    /// at most `est` in every dimension.
    #[inline]
    pub fn try_settle(&self, gen: u32, est: &Amounts, actual: &Amounts) -> Finish {
        if self.gen.0.load(Ordering::Acquire) as u32 != gen {
            return Finish::Locked;
        }
        self.settled.add(gen as usize, est, actual);
        Finish::Done
    }

    /// Lock-free release of a reservation of generation `gen`.
    #[inline]
    pub fn try_release(&self, gen: u32, est: &Amounts) -> Finish {
        if self.gen.0.load(Ordering::Acquire) as u32 != gen {
            return Finish::Locked;
        }
        let [inp, out] = &self.released.0[(gen & 1) as usize];
        let a = inp.fetch_add((est.input << 32) | 1, Ordering::Release);
        let b = out.fetch_add(est.output, Ordering::Release);
        if near(a) || b >= 1 << 62 {
            Finish::Drain
        } else {
            Finish::Done
        }
    }

    /// The latest instant the lane has seen (for lock sessions without a
    /// `now`).
    pub fn latest(&self) -> Instant {
        let l = self.hot.last.load(Ordering::Relaxed);
        instant(l.max(self.hot.lease_at.load(Ordering::Relaxed)))
    }

    /// Starts a lock session on the scope: keeps the bucket within its
    /// capacity net of the lease, drains the lane into the controller,
    /// advances the generation when due (expiring the one before), and with
    /// `revoke` puts the unused pool back. Returns how many lane
    /// reservations expired.
    pub fn begin(&self, ctl: &mut Controller, t: Instant, lease: Duration, revoke: bool) -> usize {
        let mut b = self.book.lock();
        self.begin_in(&mut b, ctl, t, lease, revoke)
    }

    fn begin_in(
        &self,
        b: &mut Book,
        ctl: &mut Controller,
        t: Instant,
        lease: Duration,
        revoke: bool,
    ) -> usize {
        let start = *b.gen_start.get_or_insert(t);
        let held = unpack(b.set);
        if !held.is_zero() {
            ctl.lane_bound(self.scope, &held, t);
        }
        self.drain(b, ctl, t);
        let mut expired = 0;
        let quiet = b.last_admit.is_some_and(|l| t >= l.saturating_add(lease));
        if t >= start.saturating_add(lease) || quiet {
            self.revoke_in(b, ctl, t, true);
            expired = self.rotate(b, ctl, t, lease);
        }
        if revoke {
            self.revoke_in(b, ctl, t, true);
        }
        expired
    }

    /// Tops the pool up while it still holds some credit (a fast admit saw
    /// it run low and found the lock free): the other threads keep taking
    /// from what is left instead of queueing on the lock when it runs dry.
    /// A lock session like any other (drain, capacity bound, expiry), then
    /// a lease of up to [`LEASE_SHAPES`] shapes in all.
    pub fn top_up(&self, ctl: &mut Controller, shape: &Amounts, t: Instant, lease: Duration) {
        let mut b = self.book.lock();
        self.begin_in(&mut b, ctl, t, lease, false);
        self.lease_in(&mut b, ctl, shape, t);
    }

    /// Puts a parked lease back into the buckets; returns the shape it was
    /// leased for, to lease again after the change (`observe`).
    pub fn take_back(&self, ctl: &mut Controller, t: Instant) -> Option<Amounts> {
        let mut b = self.book.lock();
        if unpack(b.set).is_zero() {
            return None;
        }
        self.revoke_in(&mut b, ctl, t, true);
        Some(b.shape)
    }

    /// Leases credit for requests shaped like `shape` (after a slow admit
    /// of one, with the pool revoked).
    pub fn lease(&self, ctl: &mut Controller, shape: &Amounts, t: Instant) {
        let mut b = self.book.lock();
        self.lease_in(&mut b, ctl, shape, t);
    }

    /// Leases up to [`LEASE_SHAPES`] shapes in all, counting what the pool
    /// still holds: into an empty pool by a store, onto a live one by an
    /// add (fast admits only ever lower it, so the fields cannot overflow).
    fn lease_in(&self, b: &mut Book, ctl: &mut Controller, shape: &Amounts, t: Instant) {
        let cur = unpack(b.set);
        let max_n = LEASE_SHAPES
            .saturating_sub(cur.requests)
            .min(REQ_MAX - cur.requests)
            .min((FIELD - cur.input) / shape.input.max(1))
            .min((FIELD - cur.output) / shape.output.max(1));
        if max_n == 0 {
            return;
        }
        let n = ctl.lane_lease(self.scope, shape, max_n, t);
        if n == 0 {
            return;
        }
        let a = Amounts {
            requests: n,
            input: shape.input * n,
            output: shape.output * n,
        };
        b.shape = *shape;
        let at = ns(t);
        if self.hot.lease_at.load(Ordering::Relaxed) < at {
            self.hot.lease_at.store(at, Ordering::Release);
        }
        if b.set == 0 {
            let w = pack(b.gen, &a);
            self.hot.pool.store(w, Ordering::Release);
            b.set = w;
        } else {
            let add = pack(0, &a);
            self.hot.pool.fetch_add(add, Ordering::AcqRel);
            b.set += add;
        }
    }

    /// Settles (`Some(actual)`) or releases (`None`) a lane reservation
    /// under the lock (after [`begin`](Self::begin)).
    pub fn finish_locked(
        &self,
        ctl: &mut Controller,
        res: &Reservation,
        actual: Option<&Amounts>,
        t: Instant,
    ) {
        let Some(tag) = res.lane_gen() else { return };
        let mut b = self.book.lock();
        let gen = b.full(tag);
        if gen < b.open_from {
            // Expired: like a stale slab handle, a settle charges the
            // actual usage in full and a release does nothing.
            if let Some(act) = actual {
                ctl.lane_correct(self.scope, &Amounts::default(), act, t);
                ctl.slab_mut().charge(act);
            }
            return;
        }
        let est = res.amounts;
        b.finished[(gen & 1) as usize].add(&est);
        match actual {
            Some(act) => {
                ctl.slab_mut().lane_settled(&est, act);
                ctl.lane_correct(self.scope, &est, act, t);
            }
            None => {
                ctl.slab_mut().lane_released(&est);
                ctl.lane_put_back(self.scope, &est, true, t);
            }
        }
    }

    /// `hold_unknown` of a lane reservation: moves it into the slab, held.
    pub fn hold(&self, ctl: &mut Controller, res: &Reservation) {
        let Some(tag) = res.lane_gen() else { return };
        let mut b = self.book.lock();
        let gen = b.full(tag);
        if res.lane.moved().is_some() || gen < b.open_from {
            return;
        }
        b.finished[(gen & 1) as usize].add(&res.amounts);
        let id = ctl
            .slab_mut()
            .adopt_held(self.scope, res.amounts, res.cost, res.admitted_at);
        res.lane.set_moved(id);
    }

    /// When the generation advances next, if lane reservations are
    /// outstanding (for `next_wakeup`).
    pub fn deadline(&self, lease: Duration) -> Option<Instant> {
        let b = self.book.lock();
        let outstanding = |p: usize| {
            let mut o = b.admitted[p];
            o.sub(&b.finished[p]);
            !o.is_zero()
        };
        let cur = (b.gen & 1) as usize;
        let prev = outstanding(1 - cur) && b.gen > b.open_from;
        let by_start = b.gen_start.map(|s| s.saturating_add(lease));
        let by_quiet = b.last_admit.map(|l| l.saturating_add(lease));
        match (prev, outstanding(cur)) {
            (false, false) => None,
            (true, false) => by_start,
            (_, true) => by_start.into_iter().chain(by_quiet).min(),
        }
    }

    fn drain(&self, b: &mut Book, ctl: &mut Controller, t: Instant) {
        // A load first: most words are zero (the other parity, releases),
        // and a load is far cheaper than a swap.
        let take = |w: &AtomicU64| match w.load(Ordering::Acquire) {
            0 => 0,
            _ => w.swap(0, Ordering::AcqRel),
        };
        let settled = self.settled.take(&mut b.seen);
        let released = self.released.0.each_ref().map(|p| p.each_ref().map(take));
        // After the accumulators: every finish taken above has its
        // admission (an earlier CAS) in this load, so it is counted as
        // reserved before it is counted as settled or released.
        let w = self.hot.pool.load(Ordering::Acquire);
        self.account(b, ctl, w, t);
        // The parity of the generation before the current one, once that
        // one is closed, holds only finishes that lost a race with its
        // close (a settler past its generation check while a lock holder
        // closed the generation, releasing the reservation): stale handles,
        // handled as `finish_locked` handles an expired reservation.
        let cur = (b.gen & 1) as usize;
        let prev_closed = b.gen == 0 || b.gen - 1 < b.open_from;
        for p in 0..2 {
            let (est, act) = settled[p];
            if p != cur && prev_closed {
                if !act.is_zero() {
                    ctl.lane_drained(self.scope, &Amounts::default(), &act, t);
                    ctl.slab_mut().charge(&act);
                }
                continue;
            }
            if !est.is_zero() || !act.is_zero() {
                ctl.slab_mut().lane_settled(&est, &act);
                b.finished[p].add(&est);
                ctl.lane_drained(self.scope, &est, &act, t);
            }
            let [ri, ro] = released[p];
            let rel = Amounts {
                requests: ri & LOW,
                input: ri >> 32,
                output: ro,
            };
            if !rel.is_zero() {
                ctl.slab_mut().lane_released(&rel);
                b.finished[p].add(&rel);
                ctl.lane_put_back(self.scope, &rel, true, t);
            }
        }
        let last = self.hot.last.load(Ordering::Relaxed);
        if last > 0 {
            ctl.lane_touch(self.scope, instant(last));
        }
    }

    /// Counts the pool's consumption since `b.set` as lane admissions.
    fn account(&self, b: &mut Book, ctl: &mut Controller, w: u64, t: Instant) {
        let mut used = unpack(b.set);
        used.sub(&unpack(w));
        b.set = w;
        if !used.is_zero() {
            // An upper bound of the admissions' instants (`last` lags by
            // less than `GRAIN`): expiry is never early.
            let last = instant(self.hot.last.load(Ordering::Relaxed).saturating_add(GRAIN));
            b.last_admit = Some(b.last_admit.map_or(last, |l| l.max(last)));
            ctl.slab_mut().lane_reserved(&used);
            b.admitted[(b.gen & 1) as usize].add(&used);
            ctl.lane_firsts(used.requests, t);
        }
    }

    fn revoke_in(&self, b: &mut Book, ctl: &mut Controller, t: Instant, give_back: bool) {
        if b.set == 0 {
            return;
        }
        let w = self.hot.pool.swap(0, Ordering::AcqRel);
        self.account(b, ctl, w, t);
        b.set = 0;
        if give_back {
            ctl.lane_put_back(self.scope, &unpack(w), true, t);
        }
    }

    /// Advances the generation. The one before the current one is
    /// closed: its reservations were admitted before the current one began,
    /// at least a lease ago. The current one becomes the previous one, and
    /// is closed at once too when its last admission was a lease ago.
    fn rotate(&self, b: &mut Book, ctl: &mut Controller, t: Instant, lease: Duration) -> usize {
        let mut n = self.close(b, ctl, b.gen.wrapping_sub(1), t);
        let last = b.last_admit.take();
        b.gen += 1;
        b.gen_start = Some(t);
        if last.is_none_or(|l| t >= l.saturating_add(lease)) {
            n += self.close(b, ctl, b.gen - 1, t);
        }
        self.gen.0.store(b.gen, Ordering::Release);
        n
    }

    /// Releases what generation `g` still has outstanding.
    fn close(&self, b: &mut Book, ctl: &mut Controller, g: u64, t: Instant) -> usize {
        if g < b.open_from || g > b.gen {
            return 0;
        }
        let q = (g & 1) as usize;
        let mut out = b.admitted[q];
        out.sub(&b.finished[q]);
        if !out.is_zero() {
            ctl.slab_mut().lane_released(&out);
            ctl.lane_put_back(self.scope, &out, true, t);
        }
        b.admitted[q] = Amounts::default();
        b.finished[q] = Amounts::default();
        b.open_from = g + 1;
        out.requests as usize
    }
}

/// A 32|32 accumulator with a half past 2³¹ (one add is at most 2²⁴).
#[inline]
fn near(x: u64) -> bool {
    (x >> 32) >= GUARD || (x & LOW) >= GUARD
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admit::{Config, Limits, RampConfig};

    /// A settle that passed its generation check just as a lock holder
    /// closed that generation (quietly: its latest admission a lease old)
    /// writes into the closed generation's parity afterwards. The next
    /// drain treats it as a stale handle: the close already released the
    /// reservation, so the settle charges its actual usage and is not
    /// counted as settled (nor its estimate put back a second time).
    #[test]
    fn a_settle_that_loses_the_race_with_its_close_is_stale() {
        let lease = Duration::from_secs(600);
        let mut ctl = Controller::new(Config {
            limits: Limits {
                requests: Some(1_000_000),
                input_tokens: Some(1_000_000_000),
                output_tokens: Some(1_000_000_000),
                tokens: None,
            },
            ramp: RampConfig {
                start: 1000,
                idle_after: Duration::from_secs(3600),
                ..RampConfig::default()
            },
            lease,
            ..Config::default()
        });
        let scope = ctl.target("k", "claude-sonnet-4-5").scope;
        let lane = Lane::new(scope);
        let shape = Amounts {
            requests: 1,
            input: 1_000,
            output: 500,
        };
        let t0 = Instant::ZERO;
        lane.lease(&mut ctl, &shape, t0);
        let (gen, _) = lane.try_admit(&shape, 0, u64::MAX).expect("leased");
        // A lease later the generation is quiet: the lock session closes it
        // at once, releasing the reservation.
        let t1 = t0 + lease + Duration::from_secs(1);
        assert_eq!(lane.begin(&mut ctl, t1, lease, true), 1);
        let before = ctl.ledger();
        assert_eq!(before.released.requests, 1);
        // The settler's write, after the close.
        let actual = Amounts {
            requests: 1,
            input: 700,
            output: 300,
        };
        lane.settled.add(gen as usize, &shape, &actual);
        lane.begin(&mut ctl, t1, lease, false);
        let after = ctl.ledger();
        assert!(after.conserved(), "{after:?}");
        assert_eq!(after.settled, before.settled);
        assert_eq!(after.released, before.released);
        assert_eq!(after.charged.input - before.charged.input, 700);
        assert_eq!(after.outstanding.requests, 0);
    }

    #[test]
    fn pack_round_trips() {
        let a = Amounts {
            requests: 200,
            input: FIELD,
            output: 12345,
        };
        let w = pack(7, &a);
        assert_eq!(unpack(w), a);
        assert_eq!(w >> GEN_SHIFT, 3);
        // Decrementing fields never borrows into the generation bits.
        let d = pack(
            0,
            &Amounts {
                requests: 1,
                input: 5,
                output: 45,
            },
        );
        assert_eq!(unpack(w - d).output, 12300);
        assert_eq!((w - d) >> GEN_SHIFT, 3);
    }
}
