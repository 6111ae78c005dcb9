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
    Admission, AdmitRequest, Applied, End, ReservationId, ScopeId, ScopeSnapshot, Store,
    StoreFuture, Target, Update,
};
use ratewise_core::{Action, Now, Usage};
use std::sync::Arc;

/// The shared state, plus a signal to the queues' heads whenever
/// capacity comes back.
pub(crate) struct Waking {
    inner: Arc<dyn State>,
    queues: Arc<Queues>,
}

impl Waking {
    /// Wraps `inner`; the heads of `queues` are woken on settle, release,
    /// resume and stop.
    pub fn new(inner: Arc<dyn State>, queues: Arc<Queues>) -> Self {
        Waking { inner, queues }
    }

    /// Wakes the heads when an update gave capacity back, or decided to
    /// stop the queue: each head asks again, is told the queue is
    /// stopped, hands its job back now instead of at the end of its wait,
    /// and wakes the next.
    /// The reservation an update ends, and what it was charged (`None`:
    /// released whole), for the queue discipline's correction of the
    /// flow it was admitted in.
    fn ended(update: &Update) -> Option<(ReservationId, Option<Usage>)> {
        let end = update.end.as_ref()?;
        let usage = match end {
            End::Settle { usage, .. } => Some(*usage),
            _ => None,
        };
        Some((end.reservation().id(), usage))
    }

    /// Tells the queues a followed reservation ended (before the heads
    /// are woken: the new head is chosen on the corrected costs).
    fn settle(queues: &Queues, ended: Option<(ReservationId, Option<Usage>)>, now: Now) {
        if let Some((id, usage)) = ended {
            queues.settled(id, usage.as_ref(), now.instant);
        }
    }

    fn after_update(queues: &Queues, gave_back: bool, a: &Option<Applied>) {
        let stops = a
            .as_ref()
            .is_some_and(|a| matches!(a.decision.action, Action::StopQueue { .. }));
        if gave_back || stops {
            queues.wake_heads();
        }
    }
}

impl Store for Waking {
    fn target<'a>(&'a self, key: &'a str, model: &'a str) -> StoreFuture<'a, Target> {
        self.inner.target(key, model)
    }

    fn admit(&self, req: AdmitRequest, now: Now) -> StoreFuture<'_, Admission> {
        self.inner.admit(req, now)
    }

    fn predict(
        &self,
        req: AdmitRequest,
        ahead: u32,
        now: Now,
    ) -> StoreFuture<'_, Option<Admission>> {
        self.inner.predict(req, ahead, now)
    }

    fn update(&self, update: Update, now: Now) -> StoreFuture<'_, Option<Applied>> {
        let gave_back = update.wakes_waiters();
        let ended = Self::ended(&update);
        // The wake comes after the store applied the whole update: a woken
        // head finds the pause or stop the same answer reported.
        match self.inner.update(update, now).into_ready() {
            Ok(d) => {
                Self::settle(&self.queues, ended, now);
                Self::after_update(&self.queues, gave_back, &d);
                StoreFuture::ready(d)
            }
            Err(pending) => {
                let queues = self.queues.clone();
                StoreFuture::new(async move {
                    let d = pending.await;
                    Self::settle(&queues, ended, now);
                    Self::after_update(&queues, gave_back, &d);
                    d
                })
            }
        }
    }

    fn update_detached(&self, update: Update, now: Now) {
        let gave_back = update.wakes_waiters();
        let ended = Self::ended(&update);
        self.inner.update_detached(update, now);
        Self::settle(&self.queues, ended, now);
        // A store that queues it wakes nobody yet; the head asks again by
        // its computed instant in any case.
        Self::after_update(&self.queues, gave_back, &None);
    }

    fn resume<'a>(&'a self, key: &'a str, now: Now) -> StoreFuture<'a, ()> {
        match self.inner.resume(key, now).into_ready() {
            Ok(()) => {
                self.queues.wake_heads();
                StoreFuture::ready(())
            }
            Err(pending) => {
                let queues = self.queues.clone();
                StoreFuture::new(async move {
                    pending.await;
                    queues.wake_heads();
                })
            }
        }
    }

    fn snapshot(&self, scope: ScopeId, now: Now) -> StoreFuture<'_, Option<ScopeSnapshot>> {
        self.inner.snapshot(scope, now)
    }

    fn demand(&self, scope: ScopeId, waiting: Option<u8>, now: Now) -> StoreFuture<'_, Option<u8>> {
        self.inner.demand(scope, waiting, now)
    }
}
