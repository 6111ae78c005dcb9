//! Waking admission waiters when capacity comes back.
//!
//! A job waiting for admission sleeps until the instant the controller
//! computed from the refill rate. Capacity also comes back sooner: a
//! settle that returns an unused `max_tokens` reservation, a release, a
//! resolved unknown outcome, a lifted stop. A stop wakes them too, so that
//! they hand their jobs back at once. [`Waking`] wraps the shared
//! state, passes every operation through, and signals those events to
//! the head of each scope's waiting queue ([`crate::queue`]): the head
//! races its sleep against the signal and asks again, so the controller —
//! not the waiter — still decides (pauses and server waits hold), and a
//! settle wakes about one job, not every waiter. Without the signal, a
//! generous `max_tokens` left capacity idle until the computed refill time
//! (`simulate --real` measured 0.65 of the binding limit where the
//! simulation reached 0.96).

use crate::queue::Queues;
use crate::state::State;
use ratewise_core::admit::{
    Admission, AdmissionState, AdmitRequest, Reservation, ScopeId, ScopeSnapshot, Target,
};
use ratewise_core::classify::Classification;
use ratewise_core::{Action, Decision, Now, Usage};
use std::sync::Arc;

/// The shared state, plus a signal to the queues' heads whenever
/// capacity comes back.
pub(crate) struct Waking {
    inner: Arc<dyn State>,
    queues: Arc<Queues>,
}

impl Waking {
    /// Wraps `inner`; the heads of `queues` are woken on settle, release,
    /// resolve, resume and stop.
    pub fn new(inner: Arc<dyn State>, queues: Arc<Queues>) -> Self {
        Waking { inner, queues }
    }

    fn wake(&self) {
        self.queues.wake_heads();
    }

    /// A decision that stops the queue also wakes the waiters: each head
    /// asks again, is told the queue is stopped, hands its job back now
    /// instead of at the end of its wait, and wakes the next.
    fn stopping(&self, d: Decision) -> Decision {
        if matches!(d.action, Action::StopQueue { .. }) {
            self.wake();
        }
        d
    }
}

impl AdmissionState for Waking {
    fn target(&self, key: &str, model: &str) -> Target {
        self.inner.target(key, model)
    }

    fn admit(&self, req: &AdmitRequest, now: Now) -> Admission {
        self.inner.admit(req, now)
    }

    fn settle(&self, res: Reservation, usage: &Usage, now: Now) {
        self.inner.settle(res, usage, now);
        self.wake();
    }

    fn release(&self, res: Reservation, now: Now) {
        self.inner.release(res, now);
        self.wake();
    }

    fn hold_unknown(&self, res: &Reservation, now: Now) {
        self.inner.hold_unknown(res, now);
    }

    fn resolve_unknown(&self, res: Reservation, usage: Option<&Usage>, now: Now) {
        self.inner.resolve_unknown(res, usage, now);
        self.wake();
    }

    fn observe(&self, scope: ScopeId, c: &Classification, d: Decision, now: Now) -> Decision {
        self.stopping(self.inner.observe(scope, c, d, now))
    }

    fn observe_sent(
        &self,
        sent: &ratewise_core::admit::Sent,
        c: &Classification,
        d: Decision,
        now: Now,
    ) -> Decision {
        self.stopping(self.inner.observe_sent(sent, c, d, now))
    }

    fn resume(&self, key: &str, now: Now) {
        self.inner.resume(key, now);
        self.wake();
    }

    fn snapshot(&self, scope: ScopeId, now: Now) -> Option<ScopeSnapshot> {
        self.inner.snapshot(scope, now)
    }
}
