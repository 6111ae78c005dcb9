//! The shared-state seam: exactly the operations of admission, on `&self`.
//!
//! [`Controller`] is plain `&mut self` state. Whatever shares it between
//! workers implements [`AdmissionState`]: [`Shared`] here wraps it in a
//! `parking_lot::Mutex` (a lock is not IO, so this stays sans-IO: no clock,
//! no sleep, no thread of its own; its short adaptive spin suits critical
//! sections of tens of nanoseconds better than a futex mutex, measured at
//! about 1.7× less time per operation with two threads on one limiter); a
//! Redis-backed store implements the same trait with atomic scripts so
//! several processes get the same decisions.
//!
//! Even so, two lock sessions per job (admit, settle) were 3–3.6× a
//! single-bucket `governor` check with two threads on one limiter. So
//! [`Shared`] has a *fast lane* per scope (`admit::lane`): credit leased
//! from the buckets under the lock, parked in atomics, from which a common
//! first attempt is admitted with one CAS and settled with plain stores
//! into its thread's stripe, without the lock. Everything that changes
//! admission revokes the lease first, so decisions are those of the
//! controller; the rate bounds, conservation, stops, pauses, ramp and
//! retry budget hold as before (see the lane module for the argument and
//! the small differences: first attempts reach the retry budget at the
//! next lock session; lane reservations expire between one and two lease
//! times).

use super::bucket::CreditMark;
use super::controller::{Admission, AdmitRequest, Controller, ScopeSnapshot, Target};
use super::estimate::{input_from_bytes, OutputEstimator};
use super::lane::{self, Finish, Lane, LANES};
use super::reservation::{Amounts, LaneTag, Ledger, Reservation, ReservationId};
use super::spend::Price;
use super::ScopeId;
use crate::classify::Classification;
use crate::decision::Decision;
use crate::time::{Instant, Now};
use crate::usage::Usage;
use parking_lot::{Mutex, MutexGuard};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Admission state shared between workers: the operations of
/// [`Controller`], nothing more.
pub trait AdmissionState {
    /// Resolves (key, model) to a scope and price.
    fn target(&self, key: &str, model: &str) -> Target;
    /// Asks to send one request now.
    fn admit(&self, req: &AdmitRequest, now: Now) -> Admission;
    /// Corrects a reservation to actual usage.
    fn settle(&self, res: super::Reservation, usage: &Usage, now: Now);
    /// Gives a reservation back unused.
    fn release(&self, res: super::Reservation, now: Now);
    /// Keeps a reservation's worst case until its outcome is known.
    fn hold_unknown(&self, res: &super::Reservation, now: Now);
    /// Settles (`Some`) or releases (`None`) an unknown outcome.
    fn resolve_unknown(&self, res: super::Reservation, usage: Option<&Usage>, now: Now);
    /// Applies a response's classification and decision to the shared
    /// state; returns the decision, amended by queue-wide bounds.
    fn observe(&self, scope: ScopeId, c: &Classification, d: Decision, now: Now) -> Decision;
    /// [`observe`](Self::observe) for the response to an admitted request:
    /// header sync reads the server's view against the admission.
    fn observe_sent(
        &self,
        sent: &super::Sent,
        c: &Classification,
        d: Decision,
        now: Now,
    ) -> Decision;
    /// Lifts a key's stop.
    fn resume(&self, key: &str, now: Now);
    /// What one scope looks like now.
    fn snapshot(&self, scope: ScopeId, now: Now) -> Option<ScopeSnapshot>;
}

/// A [`Controller`] behind a mutex, with a lock-free fast lane per scope:
/// the in-memory, in-process store.
///
/// A first attempt is admitted without the lock when its scope's lane
/// holds enough leased credit (see the module docs); anything else takes
/// the lock and asks the controller, as before.
///
/// ```
/// use ratewise_core::admit::{AdmissionState, AdmitRequest, Config, Controller, Limits, RampConfig, Shared};
/// use ratewise_core::{Instant, Now, Usage};
/// use std::time::SystemTime;
///
/// let shared = Shared::new(Controller::new(Config {
///     limits: Limits { requests: Some(6_000), ..Limits::NONE },
///     ramp: RampConfig { start: 1000, ..RampConfig::default() },
///     ..Config::default()
/// }));
/// let target = shared.target("k", "claude-haiku-4-5");
/// let now = Now::new(Instant::ZERO, SystemTime::UNIX_EPOCH);
/// let req = AdmitRequest::new(target);
/// // The first admission takes the lock and leases credit; the second
/// // takes it from the lease.
/// let a = shared.admit(&req, now).go().unwrap();
/// let b = shared.admit(&req, now).go().unwrap();
/// assert!(!a.is_fast_lane() && b.is_fast_lane());
/// shared.settle(a, &Usage::default(), now);
/// shared.settle(b, &Usage::default(), now);
/// let ledger = shared.ledger();
/// assert!(ledger.conserved());
/// assert_eq!((ledger.reserved.requests, ledger.settled.requests), (2, 2));
/// ```
#[derive(Debug)]
pub struct Shared {
    ctl: Mutex<Controller>,
    /// Lanes of the first [`LANES`] scopes, created on first slow admit.
    lanes: Box<[OnceLock<Box<Lane>>]>,
    /// Prices by [`PriceId`](super::PriceId) index, for lane reservations'
    /// worst-case cost.
    prices: Box<[OnceLock<Price>]>,
    output: Arc<dyn OutputEstimator>,
    /// No spend budget: lanes may run.
    lane_on: bool,
    /// A lease serves for this long (`RampConfig::idle_after`), in ns.
    fresh_ns: u64,
    lease: Duration,
}

impl Shared {
    /// Shares a controller.
    pub fn new(c: Controller) -> Self {
        let cfg = c.config();
        Shared {
            lanes: (0..LANES).map(|_| OnceLock::new()).collect(),
            prices: (0..LANES).map(|_| OnceLock::new()).collect(),
            output: Arc::clone(&cfg.output),
            lane_on: c.lane_allowed(),
            fresh_ns: u64::try_from(cfg.ramp.idle_after.as_nanos()).unwrap_or(u64::MAX),
            lease: cfg.lease,
            ctl: Mutex::new(c),
        }
    }

    /// The controller, for operations outside the seam. The lock does not
    /// poison: every controller operation leaves it consistent.
    ///
    /// Taking it drains every lane into the controller and puts their
    /// leased credit back into the buckets, so that what the guard shows
    /// (ledger, levels) includes lane reservations, and whatever it changes
    /// (limits, stops, pauses) applies to the next admission.
    pub fn lock(&self) -> MutexGuard<'_, Controller> {
        let mut c = self.ctl.lock();
        for lane in self.lanes.iter().filter_map(|l| l.get()) {
            lane.begin(&mut c, lane.latest(), self.lease, true);
        }
        c
    }

    /// The conservation counters, lane reservations included (drained
    /// into the controller; leases stay in place).
    pub fn ledger(&self) -> Ledger {
        let mut c = self.ctl.lock();
        for lane in self.lanes.iter().filter_map(|l| l.get()) {
            lane.begin(&mut c, lane.latest(), self.lease, false);
        }
        c.ledger()
    }

    /// Releases every reservation older than the lease that is not held
    /// as unknown ([`Controller::expire`]); lane reservations expire
    /// between one and two lease times after admission. Returns how many.
    pub fn expire(&self, now: Now) -> usize {
        let mut c = self.ctl.lock();
        let mut n = 0;
        for lane in self.lanes.iter().filter_map(|l| l.get()) {
            n += lane.begin(&mut c, now.instant, self.lease, false);
        }
        n + c.expire(now)
    }

    /// [`Controller::next_wakeup`], including when lane reservations may
    /// expire.
    pub fn next_wakeup(&self, now: Now) -> Option<Instant> {
        let c = self.ctl.lock();
        let lanes = self
            .lanes
            .iter()
            .filter_map(|l| l.get())
            .filter_map(|l| l.deadline(self.lease));
        c.next_wakeup(now)
            .into_iter()
            .chain(lanes.filter(|x| *x > now.instant))
            .min()
    }

    #[inline]
    fn lane(&self, scope: ScopeId) -> Option<&Lane> {
        self.lanes.get(scope.0 as usize)?.get().map(|b| &**b)
    }

    /// The scope's lane, created if the scope exists (under the lock).
    fn lane_or_create(&self, c: &Controller, scope: ScopeId) -> Option<&Lane> {
        if !self.lane_on || c.key_of(scope).is_none() {
            return None;
        }
        let slot = self.lanes.get(scope.0 as usize)?;
        Some(slot.get_or_init(|| Box::new(Lane::new(scope))))
    }

    /// The amounts the controller would reserve for `req`.
    #[inline]
    fn shape(&self, req: &AdmitRequest) -> Amounts {
        let input = req
            .input_estimate
            .unwrap_or_else(|| input_from_bytes(req.body_bytes));
        Amounts {
            requests: 1,
            input,
            output: self.output.output_estimate(req.max_tokens, input),
        }
    }

    /// The worst-case cost of a lane reservation; `None` when its price is
    /// not in the lane's copy of the table (then it takes the lock).
    #[inline]
    fn cost(&self, target: &Target, a: &Amounts) -> Option<u64> {
        match target.price {
            None => Some(0),
            Some(p) => Some(self.prices.get(p.index())?.get()?.worst_case(a)),
        }
    }

    /// Applies a response with the key's leases put back into the buckets
    /// first, and taken again afterwards if admission still allows: a
    /// response may lower levels (header sync compares the server's view
    /// with the level *including* leased credit), pause, stop, or cut the
    /// ramp. Fast-lane reservations carry no credit marks (their credit
    /// was taken with the lease), so `observe_sent` reads their response
    /// against the present, as `observe` does.
    fn observe_with(
        &self,
        scope: ScopeId,
        now: Now,
        apply: impl FnOnce(&mut Controller) -> Decision,
    ) -> Decision {
        let t = now.instant;
        let mut ctl = self.ctl.lock();
        let mut leased = Vec::new();
        for s in ctl.scopes_on_key(scope) {
            if let Some(lane) = self.lane(s) {
                lane.begin(&mut ctl, t, self.lease, false);
                if let Some(shape) = lane.take_back(&mut ctl, t) {
                    leased.push((lane, shape));
                }
            }
        }
        let d = apply(&mut ctl);
        for (lane, shape) in leased {
            lane.lease(&mut ctl, &shape, t);
        }
        d
    }

    /// Admits a first attempt from its scope's lane, topping the pool up
    /// when it runs low (with `locked`, or if the lock is free): the other
    /// threads keep taking from the pool meanwhile. The reservation is
    /// built in the caller's return slot (it is large: no copies).
    #[inline(always)]
    fn lane_admit(
        &self,
        req: &AdmitRequest,
        now: Now,
        locked: Option<&mut Controller>,
    ) -> Option<Admission> {
        if !self.lane_on || req.is_retry {
            return None;
        }
        let lane = self.lane(req.target.scope)?;
        let amounts = self.shape(req);
        if !lane::fits(&amounts) {
            return None;
        }
        let cost = self.cost(&req.target, &amounts)?;
        let (gen, low) = lane.try_admit(&amounts, lane::ns(now.instant), self.fresh_ns)?;
        if low {
            match locked {
                Some(c) => lane.top_up(c, &amounts, now.instant, self.lease),
                None => {
                    if let Some(mut c) = self.ctl.try_lock() {
                        lane.top_up(&mut c, &amounts, now.instant, self.lease);
                    }
                }
            }
        }
        Some(Admission::Go(Reservation {
            id: ReservationId {
                slot: ReservationId::LANE_SLOT,
                generation: gen as u32,
            },
            scope: req.target.scope,
            amounts,
            cost,
            price: req.target.price,
            admitted_at: now.instant,
            marks: [CreditMark::NONE; 4],
            released: [0; 4],
            lane: LaneTag::new(),
        }))
    }

    /// The slow path of [`AdmissionState::admit`]: under the lock.
    #[inline(never)]
    fn admit_locked(&self, req: &AdmitRequest, now: Now) -> Admission {
        let t = now.instant;
        let mut c = self.ctl.lock();
        // Another thread may have topped the pool up while this one waited.
        if let Some(a) = self.lane_admit(req, now, Some(&mut c)) {
            return a;
        }
        let lane = self.lane_or_create(&c, req.target.scope);
        if let Some(lane) = lane {
            lane.begin(&mut c, t, self.lease, true);
        }
        let a = c.admit(req, now);
        if let (Some(lane), Admission::Go(r)) = (lane, &a) {
            if !req.is_retry
                && lane::fits(&r.amounts)
                && self.cost(&req.target, &r.amounts).is_some()
            {
                lane.lease(&mut c, &r.amounts, t);
            }
        }
        a
    }
}

/// The slab reservation a held lane reservation was moved to, if it was.
#[inline]
fn moved(res: &Reservation) -> Option<Reservation> {
    if !res.is_fast_lane() {
        return None;
    }
    let id = res.lane.moved()?;
    Some(to_slab(res, id))
}

#[cold]
fn to_slab(res: &Reservation, id: ReservationId) -> Reservation {
    Reservation {
        id,
        scope: res.scope,
        amounts: res.amounts,
        cost: res.cost,
        price: res.price,
        admitted_at: res.admitted_at,
        marks: res.marks,
        released: res.released,
        lane: LaneTag::new(),
    }
}

impl AdmissionState for Shared {
    fn target(&self, key: &str, model: &str) -> Target {
        let mut c = self.ctl.lock();
        let t = c.target(key, model);
        if let Some(p) = t.price {
            if let (Some(slot), Some(price)) = (self.prices.get(p.index()), c.price(p)) {
                slot.get_or_init(|| price);
            }
        }
        t
    }

    #[inline]
    fn admit(&self, req: &AdmitRequest, now: Now) -> Admission {
        if let Some(a) = self.lane_admit(req, now, None) {
            return a;
        }
        self.admit_locked(req, now)
    }

    #[inline]
    fn settle(&self, res: Reservation, usage: &Usage, now: Now) {
        let Some(gen) = res.lane_gen() else {
            return self.ctl.lock().settle(res, usage, now);
        };
        if let Some(r) = moved(&res) {
            return self.ctl.lock().settle(r, usage, now);
        }
        let Some(lane) = self.lane(res.scope) else {
            return;
        };
        let actual = Amounts {
            requests: 1,
            input: usage.rate_limited_input(),
            output: usage.output_tokens,
        };
        let est = res.amounts;
        let t = now.instant;
        if actual.input <= est.input && actual.output <= est.output {
            match lane.try_settle(gen, &est, &actual) {
                Finish::Done => return,
                Finish::Drain => {
                    lane.begin(&mut self.ctl.lock(), t, self.lease, false);
                    return;
                }
                Finish::Locked => {}
            }
        }
        let mut c = self.ctl.lock();
        lane.begin(&mut c, t, self.lease, false);
        lane.finish_locked(&mut c, &res, Some(&actual), t);
    }

    fn release(&self, res: Reservation, now: Now) {
        let Some(gen) = res.lane_gen() else {
            return self.ctl.lock().release(res, now);
        };
        if let Some(r) = moved(&res) {
            return self.ctl.lock().release(r, now);
        }
        let Some(lane) = self.lane(res.scope) else {
            return;
        };
        let t = now.instant;
        match lane.try_release(gen, &res.amounts) {
            Finish::Done => {}
            Finish::Drain => {
                lane.begin(&mut self.ctl.lock(), t, self.lease, false);
            }
            Finish::Locked => {
                let mut c = self.ctl.lock();
                lane.begin(&mut c, t, self.lease, false);
                lane.finish_locked(&mut c, &res, None, t);
            }
        }
    }

    fn hold_unknown(&self, res: &Reservation, now: Now) {
        if !res.is_fast_lane() {
            return self.ctl.lock().hold_unknown(res, now);
        }
        let Some(lane) = self.lane(res.scope) else {
            return;
        };
        let mut c = self.ctl.lock();
        lane.begin(&mut c, now.instant, self.lease, false);
        lane.hold(&mut c, res);
    }

    fn resolve_unknown(&self, res: Reservation, usage: Option<&Usage>, now: Now) {
        if let Some(r) = moved(&res) {
            return self.ctl.lock().resolve_unknown(r, usage, now);
        }
        if !res.is_fast_lane() {
            return self.ctl.lock().resolve_unknown(res, usage, now);
        }
        match usage {
            Some(u) => self.settle(res, u, now),
            None => self.release(res, now),
        }
    }

    fn observe(&self, scope: ScopeId, c: &Classification, d: Decision, now: Now) -> Decision {
        self.observe_with(scope, now, |ctl| ctl.observe(scope, c, d, now))
    }

    fn observe_sent(
        &self,
        sent: &super::Sent,
        c: &Classification,
        d: Decision,
        now: Now,
    ) -> Decision {
        self.observe_with(sent.scope(), now, |ctl| ctl.observe_sent(sent, c, d, now))
    }

    fn resume(&self, key: &str, now: Now) {
        let mut c = self.ctl.lock();
        for lane in self.lanes.iter().filter_map(|l| l.get()) {
            lane.begin(&mut c, now.instant, self.lease, true);
        }
        c.resume(key, now)
    }

    fn snapshot(&self, scope: ScopeId, now: Now) -> Option<ScopeSnapshot> {
        let mut c = self.ctl.lock();
        if let Some(lane) = self.lane(scope) {
            lane.begin(&mut c, now.instant, self.lease, false);
        }
        c.snapshot(scope, now)
    }
}

/// A reservation that releases itself when dropped: for callers whose
/// request future may be cancelled. Settle, hold or release it explicitly
/// on every path you can; a drop is the "abandoned" path.
///
/// Sans-IO has no clock in `Drop`, so a dropped guard releases at the
/// instant of its last explicit `now` (the admission's); a release only
/// puts capacity back, so an earlier instant is harmless.
///
/// ```
/// use ratewise_core::admit::{AdmissionState, AdmitRequest, Config, Controller, Guard, Shared};
/// use ratewise_core::{Instant, Now};
/// use std::time::SystemTime;
///
/// let shared = Shared::new(Controller::new(Config::default()));
/// let target = shared.target("k", "claude-haiku-4-5");
/// let now = Now::new(Instant::ZERO, SystemTime::UNIX_EPOCH);
/// {
///     let res = shared.admit(&AdmitRequest::new(target), now).go().unwrap();
///     let _guard = Guard::new(&shared, res, now);
///     // ... the request future is dropped here ...
/// }
/// assert_eq!(shared.lock().ledger().released.requests, 1);
/// ```
#[derive(Debug)]
pub struct Guard<'a, S: AdmissionState + ?Sized> {
    state: &'a S,
    res: Option<super::Reservation>,
    now: Now,
}

impl<'a, S: AdmissionState + ?Sized> Guard<'a, S> {
    /// Guards a reservation admitted at `now`.
    pub fn new(state: &'a S, res: super::Reservation, now: Now) -> Self {
        Guard {
            state,
            res: Some(res),
            now,
        }
    }

    /// The guarded reservation.
    pub fn reservation(&self) -> Option<&super::Reservation> {
        self.res.as_ref()
    }

    /// Settles with actual usage.
    pub fn settle(mut self, usage: &Usage, now: Now) {
        if let Some(r) = self.res.take() {
            self.state.settle(r, usage, now);
        }
    }

    /// Releases unused.
    pub fn release(mut self, now: Now) {
        if let Some(r) = self.res.take() {
            self.state.release(r, now);
        }
    }

    /// Marks the outcome unknown and hands the reservation back, unguarded:
    /// an unknown outcome must not be released by a drop.
    pub fn hold_unknown(mut self, now: Now) -> Option<super::Reservation> {
        let r = self.res.take()?;
        self.state.hold_unknown(&r, now);
        Some(r)
    }
}

impl<S: AdmissionState + ?Sized> Drop for Guard<'_, S> {
    fn drop(&mut self) {
        if let Some(r) = self.res.take() {
            self.state.release(r, self.now);
        }
    }
}
