//! The in-memory, in-process [`Store`]: a [`Controller`] behind a mutex.
//!
//! [`Controller`] is plain `&mut self` state; [`Shared`] wraps it in a
//! `parking_lot::Mutex` (a lock is not IO, so this stays sans-IO: no clock,
//! no sleep, no thread of its own; its short adaptive spin suits critical
//! sections of tens of nanoseconds better than a futex mutex). It answers
//! every [`Store`] request at once, without awaiting, and offers the same
//! operations as plain synchronous methods for drivers that own no
//! runtime (the simulator, tests).
//!
//! Every operation is one lock session. At the provider's pace that is
//! not what a job waits for: `benches/waiters.rs` measures admissions and
//! settles per second with jobs waiting on a scope, and how many waiting
//! jobs ask again per settle.

use super::controller::{Admission, AdmitRequest, Controller, ScopeSnapshot, Target};
use super::store::{Store, StoreFuture, Update};
use super::ScopeId;
use crate::time::Now;
use parking_lot::{Mutex, MutexGuard};

/// A [`Controller`] behind a mutex: the in-memory, in-process store. Each
/// operation takes the lock once and asks the controller.
///
/// ```
/// use ratewise_core::admit::{AdmitRequest, Config, Controller, Limits, RampConfig, Shared};
/// use ratewise_core::{Instant, Now, Usage};
/// use std::time::SystemTime;
///
/// let mut ramp = RampConfig::default();
/// ramp.start = 1000;
/// let mut config = Config::default();
/// config.limits = Limits { requests: Some(6_000), ..Limits::NONE };
/// config.ramp = ramp;
/// let shared = Shared::new(Controller::new(config));
/// let target = shared.target("k", "claude-haiku-4-5");
/// let now = Now::new(Instant::ZERO, SystemTime::UNIX_EPOCH);
/// let req = AdmitRequest::new(target);
/// let a = shared.admit(&req, now).go().unwrap();
/// let b = shared.admit(&req, now).go().unwrap();
/// shared.lock().settle(a, &Usage::default(), now);
/// shared.lock().settle(b, &Usage::default(), now);
/// let ledger = shared.lock().ledger();
/// assert!(ledger.is_clean());
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

    /// The reservation counters (a short lock).
    pub fn ledger(&self) -> super::Ledger {
        self.lock().ledger()
    }

    /// Resolves (key, model) to a scope and price.
    pub fn target(&self, key: &str, model: &str) -> Target {
        self.lock().target(key, model)
    }

    /// Asks to send one request now.
    pub fn admit(&self, req: &AdmitRequest, now: Now) -> Admission {
        self.lock().admit(req, now)
    }

    /// Applies one job event in one lock session
    /// ([`Controller::apply`]).
    pub fn apply(&self, update: Update, now: Now) -> Option<super::Applied> {
        self.lock().apply(&update, now)
    }

    /// Lifts a key's stop.
    pub fn resume(&self, key: &str, now: Now) {
        self.lock().resume(key, now)
    }

    /// What one scope looks like now.
    pub fn snapshot(&self, scope: ScopeId, now: Now) -> Option<ScopeSnapshot> {
        self.lock().snapshot(scope, now)
    }
}

impl Store for Shared {
    fn target<'a>(&'a self, key: &'a str, model: &'a str) -> StoreFuture<'a, Target> {
        StoreFuture::ready(Shared::target(self, key, model))
    }
    fn admit(&self, req: AdmitRequest, now: Now) -> StoreFuture<'_, Admission> {
        StoreFuture::ready(Shared::admit(self, &req, now))
    }
    fn predict(
        &self,
        req: AdmitRequest,
        ahead: u32,
        now: Now,
    ) -> StoreFuture<'_, Option<Admission>> {
        StoreFuture::ready(self.lock().predict(&req, ahead, now))
    }
    fn update(&self, update: Update, now: Now) -> StoreFuture<'_, Option<super::Applied>> {
        StoreFuture::ready(self.apply(update, now))
    }
    fn update_detached(&self, update: Update, now: Now) {
        self.apply(update, now);
    }
    fn resume<'a>(&'a self, key: &'a str, now: Now) -> StoreFuture<'a, ()> {
        Shared::resume(self, key, now);
        StoreFuture::ready(())
    }
    fn snapshot(&self, scope: ScopeId, now: Now) -> StoreFuture<'_, Option<ScopeSnapshot>> {
        StoreFuture::ready(Shared::snapshot(self, scope, now))
    }
}
