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
//! Every operation is one lock session. At the provider's pace that is
//! not what a job waits for: `benches/waiters.rs` measures admissions and
//! settles per second with jobs waiting on a scope, and how many waiting
//! jobs ask again per settle.

use super::controller::{Admission, AdmitRequest, Controller, ScopeSnapshot, Target};
use super::ScopeId;
use crate::classify::Classification;
use crate::decision::Decision;
use crate::time::Now;
use crate::usage::Usage;
use parking_lot::{Mutex, MutexGuard};

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

/// A [`Controller`] behind a mutex: the in-memory, in-process store. Each
/// operation of [`AdmissionState`] takes the lock once and asks the
/// controller.
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
/// let a = shared.admit(&req, now).go().unwrap();
/// let b = shared.admit(&req, now).go().unwrap();
/// shared.settle(a, &Usage::default(), now);
/// shared.settle(b, &Usage::default(), now);
/// let ledger = shared.lock().ledger();
/// assert!(ledger.conserved());
/// assert_eq!((ledger.reserved.requests, ledger.settled.requests), (2, 2));
/// ```
#[derive(Debug)]
pub struct Shared(Mutex<Controller>);

impl Shared {
    /// Shares a controller.
    pub fn new(c: Controller) -> Self {
        Shared(Mutex::new(c))
    }

    /// The controller, for operations outside the seam (the ledger,
    /// [`expire`](Controller::expire),
    /// [`next_wakeup`](Controller::next_wakeup), stops, limits). The lock
    /// does not poison: every controller operation leaves it consistent.
    pub fn lock(&self) -> MutexGuard<'_, Controller> {
        self.0.lock()
    }

    /// The conservation counters (a short lock).
    pub fn ledger(&self) -> super::Ledger {
        self.lock().ledger()
    }
}

impl AdmissionState for Shared {
    fn target(&self, key: &str, model: &str) -> Target {
        self.lock().target(key, model)
    }
    fn admit(&self, req: &AdmitRequest, now: Now) -> Admission {
        self.lock().admit(req, now)
    }
    fn settle(&self, res: super::Reservation, usage: &Usage, now: Now) {
        self.lock().settle(res, usage, now)
    }
    fn release(&self, res: super::Reservation, now: Now) {
        self.lock().release(res, now)
    }
    fn hold_unknown(&self, res: &super::Reservation, now: Now) {
        self.lock().hold_unknown(res, now)
    }
    fn resolve_unknown(&self, res: super::Reservation, usage: Option<&Usage>, now: Now) {
        self.lock().resolve_unknown(res, usage, now)
    }
    fn observe(&self, scope: ScopeId, c: &Classification, d: Decision, now: Now) -> Decision {
        self.lock().observe(scope, c, d, now)
    }
    fn observe_sent(
        &self,
        sent: &super::Sent,
        c: &Classification,
        d: Decision,
        now: Now,
    ) -> Decision {
        self.lock().observe_sent(sent, c, d, now)
    }
    fn resume(&self, key: &str, now: Now) {
        self.lock().resume(key, now)
    }
    fn snapshot(&self, scope: ScopeId, now: Now) -> Option<ScopeSnapshot> {
        self.lock().snapshot(scope, now)
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
