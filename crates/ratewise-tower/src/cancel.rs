//! A caller's cancellation of a job that runs on without it ([`Cancel`]).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// A caller's way to say "I have gone" to a job that runs on without it.
///
/// A call future dropped at any await cancels its job (its reservation
/// ends exactly once, as the crate docs say). Some drivers cannot drop it: a proxy whose client
/// disconnected after the send must still read the answer so its usage
/// settles, yet must make no further send for a caller nobody answers. A
/// [`Cancel`] in the request's extensions is that signal, given to the job
/// machine as a cancellation ([`Job::caller_left`]): between sends the job
/// ends at once, `give_up` `cancelled`, with nothing sent and nothing
/// journaled; a send in flight is finished and accounted, and no retry
/// follows it.
///
/// [`Cancel::cancel`] answers, in one atomic step against the layer's
/// hand-over of a send, whether anything was sent: a caller that must know
/// whether to answer "not sent" (a proxy shutting down) reads it there.
///
/// ```
/// use ratewise_tower::{Cancel, Cancelled};
/// let shutdown = Cancel::new();
/// // One per job, cancelled with the shutdown too.
/// let job = shutdown.child();
/// assert_eq!(job.cancel(), Cancelled::NothingSent);
/// assert!(job.is_cancelled());
/// assert!(!shutdown.is_cancelled());
/// let other = shutdown.child();
/// shutdown.cancel();
/// assert!(other.is_cancelled());
/// ```
///
/// [`Job::caller_left`]: ratewise_core::job::Job::caller_left
///
/// Cheap to clone: clones share one state.
#[derive(Debug, Clone)]
pub struct Cancel(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    state: AtomicU8,
    /// Cancelling it cancels this one too (a shutdown over every job).
    parent: Option<Cancel>,
    changed: event_listener::Event,
}

/// What [`Cancel::cancel`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// No send of the job had been handed to the transport: none will be.
    NothingSent,
    /// A send was handed over: it finishes (its answer is read and
    /// accounted); no other follows.
    AfterSend,
}

const OPEN: u8 = 0;
const SENT: u8 = 1;
const CANCELLED_BEFORE: u8 = 2;
const CANCELLED_AFTER: u8 = 3;

impl Default for Cancel {
    fn default() -> Self {
        Self::new()
    }
}

impl Cancel {
    /// A cancellation not yet given.
    pub fn new() -> Self {
        Cancel(Arc::new(Shared {
            state: AtomicU8::new(OPEN),
            parent: None,
            changed: event_listener::Event::new(),
        }))
    }

    /// A cancellation that is also given when this one is (a job's, under
    /// a shutdown's).
    pub fn child(&self) -> Self {
        Cancel(Arc::new(Shared {
            state: AtomicU8::new(OPEN),
            parent: Some(self.clone()),
            changed: event_listener::Event::new(),
        }))
    }

    /// Gives the cancellation. Returns whether a send of the job had been
    /// handed over (decided atomically against the hand-over: a send that
    /// had not started never will). Giving it twice keeps the first
    /// answer.
    pub fn cancel(&self) -> Cancelled {
        let s = &self.0.state;
        let mut now = s.load(Ordering::Acquire);
        let out = loop {
            let to = match now {
                OPEN => CANCELLED_BEFORE,
                SENT => CANCELLED_AFTER,
                CANCELLED_BEFORE => break Cancelled::NothingSent,
                _ => break Cancelled::AfterSend,
            };
            match s.compare_exchange(now, to, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) if to == CANCELLED_BEFORE => break Cancelled::NothingSent,
                Ok(_) => break Cancelled::AfterSend,
                Err(seen) => now = seen,
            }
        };
        self.0.changed.notify(usize::MAX);
        out
    }

    /// Whether it (or a parent) was given.
    pub fn is_cancelled(&self) -> bool {
        self.own_cancelled() || self.0.parent.as_ref().is_some_and(Cancel::is_cancelled)
    }

    fn own_cancelled(&self) -> bool {
        self.0.state.load(Ordering::Acquire) >= CANCELLED_BEFORE
    }

    /// A send is about to be handed to the transport: `false` when the
    /// cancellation was given (the send must not be made). Atomic against
    /// [`cancel`](Self::cancel) on this handle; a parent given at the same
    /// moment may let this one send start, as a signal that comes a moment
    /// later would.
    pub(crate) fn begin_send(&self) -> bool {
        if self.0.parent.as_ref().is_some_and(Cancel::is_cancelled) {
            return false;
        }
        match self
            .0
            .state
            .compare_exchange(OPEN, SENT, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(seen) => seen == SENT,
        }
    }

    /// Resolves when it (or a parent) is given.
    pub(crate) async fn cancelled(&self) {
        loop {
            // Listen before looking: a cancellation between the two is
            // not lost.
            let own = self.0.changed.listen();
            let parent = self.0.parent.as_ref().map(|p| p.0.changed.listen());
            if self.is_cancelled() {
                return;
            }
            match parent {
                Some(p) => {
                    futures::future::select(own, p).await;
                }
                None => own.await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_after_the_hand_over_says_so_and_stops_the_next() {
        let c = Cancel::new();
        assert!(c.begin_send());
        assert!(c.begin_send(), "a retry of a job not cancelled");
        assert_eq!(c.cancel(), Cancelled::AfterSend);
        assert!(!c.begin_send());
        assert_eq!(c.cancel(), Cancelled::AfterSend, "the first answer kept");
    }

    #[test]
    fn a_cancel_before_the_hand_over_refuses_it() {
        let c = Cancel::new();
        assert_eq!(c.cancel(), Cancelled::NothingSent);
        assert!(!c.begin_send());
        assert_eq!(c.cancel(), Cancelled::NothingSent);
    }

    #[test]
    fn a_parent_refuses_its_childrens_sends() {
        let p = Cancel::new();
        let c = p.child();
        assert!(c.begin_send());
        p.cancel();
        assert!(c.is_cancelled());
        assert!(!c.begin_send());
        // The child's own answer still says a send was made.
        assert_eq!(c.cancel(), Cancelled::AfterSend);
    }

    #[tokio::test]
    async fn a_waiter_wakes_on_its_parents_cancel() {
        let p = Cancel::new();
        let c = p.child();
        let waiter = tokio::spawn({
            let c = c.clone();
            async move { c.cancelled().await }
        });
        tokio::task::yield_now().await;
        p.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
    }
}
