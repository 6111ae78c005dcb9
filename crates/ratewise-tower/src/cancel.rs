//! A caller's cancellation of a job that runs on without it ([`Cancel`]),
//! and the published view of where the job's send stands, which a
//! transport that can tell the wait for a connection from the wire
//! reports into ([`WireMark`]).

use ratewise_core::job::Sending;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A caller's way to say "I have gone" to a job that runs on without it,
/// and its view of whether the job's send reached the wire.
///
/// A call future dropped at any await cancels its job (its reservation
/// ends exactly once, as the crate docs say). Some drivers cannot drop it: a proxy whose client
/// disconnected after the send must still read the answer so its usage
/// settles, yet must make no further send for a caller nobody answers. A
/// [`Cancel`] in the request's extensions is that signal, given to the job
/// machine as a cancellation ([`Job::caller_left`]): between sends the job
/// ends at once, `give_up` `cancelled`, with nothing sent and nothing
/// journaled; a send waiting for a connection (see [`WireMark`]) is
/// withdrawn, its reservation given back; a send that may have reached
/// the provider is finished and accounted, and no retry follows it.
///
/// "Was it sent?" has one owner, the job machine
/// ([`Job::send_state`](ratewise_core::job::Job::send_state)); a
/// [`Cancel`] is its published view ([`sending`](Cancel::sending)),
/// written by the layer in step with the machine, and by the transport
/// through the attempt's [`WireMark`]. [`Cancel::cancel`] answers, in one
/// atomic step against the hand-over of a send and against its reaching
/// the wire, whether anything may have reached the provider: a caller that
/// must know whether to answer "not sent" (a proxy shutting down) reads it
/// there.
///
/// One per job: the view is the job's. A [`Cancel`] given to several jobs
/// (one signal for all of them) still cancels each, but its answer says
/// nothing of their sends — give each job a [`child`](Cancel::child).
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
    /// The view: the attempt (high 32 bits), whether the cancellation was
    /// given ([`CANCELLED`]), and where the attempt's send stands (the low
    /// bits, [`IDLE`] .. [`ON_WIRE`]; frozen once cancelled, so that the
    /// cancellation's answer never changes).
    state: AtomicU64,
    /// Cancelling it cancels this one too (a shutdown over every job).
    parent: Option<Cancel>,
    changed: event_listener::Event,
    /// A layer's job publishes its sends here (one job per view).
    claimed: AtomicBool,
}

/// What [`Cancel::cancel`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// Nothing of the job had reached the wire — no send out (none yet,
    /// or between sends), or one handed to a transport still waiting for a
    /// connection — and nothing will: what was waiting is withdrawn.
    NothingSent,
    /// A send was out that may have reached the provider (on the wire, or
    /// handed to a transport that does not say): it finishes (its answer
    /// is read and accounted); no other follows.
    AfterSend,
}

/// No send out.
const IDLE: u64 = 0;
/// Handed to a transport that does not (yet) say where it is.
const HANDED: u64 = 1;
/// Handed to a transport that waits for a connection ([`WireMark::watching`]).
const WATCHED: u64 = 2;
/// On the wire ([`WireMark::reached`]).
const ON_WIRE: u64 = 3;
const SEND: u64 = 0b111;
const CANCELLED: u64 = 0b1000;

fn send_bits(state: u64) -> u64 {
    state & SEND
}

fn attempt_of(state: u64) -> u32 {
    (state >> 32) as u32
}

fn at(attempt: u32, send: u64) -> u64 {
    (u64::from(attempt) << 32) | send
}

fn sending(send: u64) -> Sending {
    match send {
        HANDED => Sending::HandedOver,
        WATCHED => Sending::Connecting,
        ON_WIRE => Sending::OnWire,
        _ => Sending::NotSent,
    }
}

impl Default for Cancel {
    fn default() -> Self {
        Self::new()
    }
}

impl Cancel {
    /// A cancellation not yet given.
    pub fn new() -> Self {
        Self::with_parent(None)
    }

    /// A cancellation that is also given when this one is (a job's, under
    /// a shutdown's).
    pub fn child(&self) -> Self {
        Self::with_parent(Some(self.clone()))
    }

    fn with_parent(parent: Option<Cancel>) -> Self {
        Cancel(Arc::new(Shared {
            state: AtomicU64::new(IDLE),
            parent,
            changed: event_listener::Event::new(),
            claimed: AtomicBool::new(false),
        }))
    }

    /// Gives the cancellation. Returns whether a send of the job may have
    /// reached the provider, decided atomically against the hand-over of a
    /// send and against its reaching the wire: a send not handed over
    /// never will be, and one waiting for a connection never reaches it
    /// ([`WireMark::reached`] answers `false`). Giving it twice keeps the
    /// first answer.
    pub fn cancel(&self) -> Cancelled {
        let s = &self.0.state;
        let mut now = s.load(Ordering::Acquire);
        let frozen = loop {
            if now & CANCELLED != 0 {
                break now;
            }
            match s.compare_exchange(now, now | CANCELLED, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break now,
                Err(seen) => now = seen,
            }
        };
        self.0.changed.notify(usize::MAX);
        if sending(send_bits(frozen)).may_have_reached() {
            Cancelled::AfterSend
        } else {
            Cancelled::NothingSent
        }
    }

    /// Whether it (or a parent) was given.
    pub fn is_cancelled(&self) -> bool {
        self.own_cancelled() || self.0.parent.as_ref().is_some_and(Cancel::is_cancelled)
    }

    fn own_cancelled(&self) -> bool {
        self.0.state.load(Ordering::Acquire) & CANCELLED != 0
    }

    /// Where the job's send stands, as the layer that drives it publishes
    /// it (the job machine's [`Sending`]; the view of a job that never
    /// sent, or of a [`Cancel`] no layer drives, is
    /// [`Sending::NotSent`]). Once the cancellation is given it stays what
    /// the cancellation found, while that send is out.
    pub fn sending(&self) -> Sending {
        sending(send_bits(self.0.state.load(Ordering::Acquire)))
    }

    /// A layer's job takes this view for its own: `false` when another job
    /// already did (the [`Cancel`] is then one signal for several jobs,
    /// and the job publishes on a child of it).
    pub(crate) fn claim(&self) -> bool {
        !self.0.claimed.swap(true, Ordering::AcqRel)
    }

    /// Attempt `attempt` is handed to the transport: `false` when the
    /// cancellation was given (the send must not be made). Atomic against
    /// [`cancel`](Self::cancel) on this handle; a parent given at the same
    /// moment may let this one send start, as a signal that comes a moment
    /// later would.
    pub(crate) fn hand_over(&self, attempt: u32) -> bool {
        if self.0.parent.as_ref().is_some_and(Cancel::is_cancelled) {
            self.cancel();
            return false;
        }
        let s = &self.0.state;
        let mut now = s.load(Ordering::Acquire);
        loop {
            if now & CANCELLED != 0 {
                return false;
            }
            match s.compare_exchange(
                now,
                at(attempt, HANDED),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(seen) => now = seen,
            }
        }
    }

    /// The transport of `attempt` waits for a connection: until
    /// [`reached`](Self::reached), a cancellation finds nothing sent.
    fn watching(&self, attempt: u32) {
        let _ = self.0.state.compare_exchange(
            at(attempt, HANDED),
            at(attempt, WATCHED),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// The request of `attempt` got a connection: whether it may go on
    /// the wire (`false`: the cancellation came first, or the attempt is
    /// over — the transport must not send it).
    fn reached(&self, attempt: u32) -> bool {
        if self.0.parent.as_ref().is_some_and(Cancel::is_cancelled) {
            // Decided here, against this wire: the parent's cancellation
            // is this one's too.
            self.cancel();
        }
        let s = &self.0.state;
        let mut now = s.load(Ordering::Acquire);
        loop {
            if attempt_of(now) != attempt {
                return false;
            }
            if now & CANCELLED != 0 {
                // The cancellation's answer stands: a send it found
                // handed over may be sent; one it found waiting is not.
                return matches!(send_bits(now), HANDED | ON_WIRE);
            }
            match send_bits(now) {
                ON_WIRE => return true,
                HANDED | WATCHED => {}
                _ => return false,
            }
            match s.compare_exchange(
                now,
                at(attempt, ON_WIRE),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(seen) => now = seen,
            }
        }
    }

    /// Where `attempt`'s send stands, once its call came back (the layer
    /// tells its machine so): a send its transport still held waiting for
    /// a connection is closed here — it never reaches the wire
    /// ([`reached`](Self::reached) answers `false`), decided against the
    /// transport's report in one step; any other is read as it is (it is
    /// over once its answer is applied: [`end_send`](Self::end_send)).
    pub(crate) fn stop_waiting(&self, attempt: u32) -> Sending {
        let s = &self.0.state;
        let mut now = s.load(Ordering::Acquire);
        loop {
            if attempt_of(now) != attempt {
                return Sending::NotSent;
            }
            if now & CANCELLED != 0 || send_bits(now) != WATCHED {
                return sending(send_bits(now));
            }
            match s.compare_exchange(now, at(attempt, IDLE), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Sending::Connecting,
                Err(seen) => now = seen,
            }
        }
    }

    /// `attempt`'s send is over (its answer or failure was applied, or the
    /// job was dropped with it out): where it stood, and from now on
    /// nothing of it goes on the wire ([`reached`](Self::reached) answers `false` to a
    /// send still waiting). Atomic against the transport's report: a send
    /// found waiting never reached the wire. Once the cancellation is
    /// given, the view stays what it found.
    pub(crate) fn end_send(&self, attempt: u32) -> Sending {
        let s = &self.0.state;
        let mut now = s.load(Ordering::Acquire);
        loop {
            if attempt_of(now) != attempt {
                return Sending::NotSent;
            }
            if now & CANCELLED != 0 || send_bits(now) == IDLE {
                return sending(send_bits(now));
            }
            match s.compare_exchange(now, at(attempt, IDLE), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return sending(send_bits(now)),
                Err(seen) => now = seen,
            }
        }
    }

    /// Resolves when it (or a parent) is given.
    pub(crate) async fn cancelled(&self) {
        loop {
            // Listen before looking, to this one and every ancestor (a job
            // that publishes on a child of a shared signal hangs two levels
            // under a shutdown): a cancellation between the two is not lost.
            let mut listeners = Vec::new();
            let mut at = Some(self);
            while let Some(c) = at {
                listeners.push(c.0.changed.listen());
                at = c.0.parent.as_ref();
            }
            if self.is_cancelled() {
                return;
            }
            futures::future::select_all(listeners).await;
        }
    }
}

/// One attempt's report of where its request is, for a transport that
/// can tell the wait for a connection from the wire.
///
/// The layer puts one in each attempt's request extensions. A transport
/// that can tell calls [`watching`](WireMark::watching) when it takes the
/// request (it will wait for a connection) and
/// [`reached`](WireMark::reached) when the request gets one, before
/// anything of it is written: `false` means the job's cancellation came
/// first (or the layer gave up on the attempt), and the transport must not
/// send it — it fails the request instead. Until then the job machine
/// counts the request as not sent: a cancellation (a caller gone, a proxy
/// draining) withdraws it and gives its reservation back, and the layer
/// answers its caller at once. A transport that never calls `watching`
/// keeps the conservative view: a request handed to it may have reached
/// the provider.
///
/// ```
/// # use ratewise_tower::WireMark;
/// fn on_connection(mark: Option<&WireMark>) -> Result<(), &'static str> {
///     match mark {
///         Some(m) if !m.reached() => Err("cancelled before the wire: not sent"),
///         _ => Ok(()), // write the request
///     }
/// }
/// # let _ = on_connection(None);
/// ```
#[derive(Debug, Clone)]
pub struct WireMark {
    view: Cancel,
    attempt: u32,
}

impl WireMark {
    pub(crate) fn new(view: Cancel, attempt: u32) -> Self {
        WireMark { view, attempt }
    }

    /// The attempt (1-based) this request is.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The transport took the request and waits for a connection; it will
    /// call [`reached`](Self::reached) when it gets one.
    pub fn watching(&self) {
        self.view.watching(self.attempt);
    }

    /// The request got a connection: whether to write it. `false`: the
    /// job's cancellation came first, or its layer gave up on the attempt
    /// — nothing of it may be sent. Asked again, it answers the same.
    pub fn reached(&self) -> bool {
        self.view.reached(self.attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_after_the_hand_over_says_so_and_stops_the_next() {
        let c = Cancel::new();
        assert!(c.hand_over(1));
        assert_eq!(c.sending(), Sending::HandedOver);
        assert_eq!(c.end_send(1), Sending::HandedOver);
        assert!(c.hand_over(2), "a retry of a job not cancelled");
        assert_eq!(c.cancel(), Cancelled::AfterSend);
        assert!(!c.hand_over(3));
        assert_eq!(c.cancel(), Cancelled::AfterSend, "the first answer kept");
    }

    #[test]
    fn a_cancel_before_the_hand_over_refuses_it() {
        let c = Cancel::new();
        assert_eq!(c.cancel(), Cancelled::NothingSent);
        assert!(!c.hand_over(1));
        assert_eq!(c.cancel(), Cancelled::NothingSent);
        assert_eq!(c.sending(), Sending::NotSent);
    }

    #[test]
    fn between_sends_nothing_is_out() {
        let c = Cancel::new();
        assert!(c.hand_over(1));
        let m = WireMark::new(c.clone(), 1);
        m.watching();
        assert!(m.reached());
        assert_eq!(c.end_send(1), Sending::OnWire);
        assert_eq!(c.sending(), Sending::NotSent);
        assert!(!m.reached(), "its attempt is over");
        assert_eq!(c.cancel(), Cancelled::NothingSent);
    }

    #[test]
    fn a_send_waiting_for_a_connection_is_withdrawn_by_the_cancel() {
        let c = Cancel::new();
        assert!(c.hand_over(1));
        let m = WireMark::new(c.clone(), 1);
        m.watching();
        assert_eq!(c.sending(), Sending::Connecting);
        assert_eq!(c.cancel(), Cancelled::NothingSent);
        assert!(!m.reached(), "the connection came after the cancel");
        assert!(!m.reached(), "asked again");
        assert_eq!(c.sending(), Sending::Connecting, "what the cancel found");
        assert_eq!(c.end_send(1), Sending::Connecting);
    }

    #[test]
    fn a_send_on_the_wire_is_not_withdrawn() {
        let c = Cancel::new();
        assert!(c.hand_over(1));
        let m = WireMark::new(c.clone(), 1);
        m.watching();
        assert!(m.reached());
        assert_eq!(c.cancel(), Cancelled::AfterSend);
        assert!(m.reached(), "asked again");
        assert_eq!(c.end_send(1), Sending::OnWire);
    }

    #[test]
    fn a_cancel_before_the_transport_watches_keeps_it_maybe_sent() {
        let c = Cancel::new();
        assert!(c.hand_over(1));
        assert_eq!(c.cancel(), Cancelled::AfterSend);
        let m = WireMark::new(c.clone(), 1);
        m.watching();
        assert!(m.reached(), "the cancel said it may be sent: it is");
        assert_eq!(c.sending(), Sending::HandedOver);
    }

    #[test]
    fn a_call_back_while_waiting_closes_the_wait_and_leaves_the_wire_as_it_is() {
        let c = Cancel::new();
        assert!(c.hand_over(1));
        let m = WireMark::new(c.clone(), 1);
        m.watching();
        assert_eq!(c.stop_waiting(1), Sending::Connecting);
        assert!(!m.reached(), "closed: never on the wire");
        assert_eq!(c.sending(), Sending::NotSent);
        assert!(c.hand_over(2));
        let m = WireMark::new(c.clone(), 2);
        m.watching();
        assert!(m.reached());
        assert_eq!(c.stop_waiting(2), Sending::OnWire);
        assert_eq!(
            c.sending(),
            Sending::OnWire,
            "open until its answer is applied"
        );
        assert_eq!(c.end_send(2), Sending::OnWire);
        assert_eq!(c.sending(), Sending::NotSent);
    }

    #[test]
    fn an_attempt_the_layer_gave_up_on_never_reaches_the_wire() {
        let c = Cancel::new();
        assert!(c.hand_over(1));
        let m = WireMark::new(c.clone(), 1);
        m.watching();
        assert_eq!(c.end_send(1), Sending::Connecting);
        assert!(!m.reached());
        // The next attempt's mark is its own; the old one stays refused.
        assert!(c.hand_over(2));
        let m2 = WireMark::new(c.clone(), 2);
        m2.watching();
        assert!(!m.reached());
        assert!(m2.reached());
    }

    #[test]
    fn a_parent_refuses_its_childrens_sends() {
        let p = Cancel::new();
        let c = p.child();
        assert!(c.hand_over(1));
        p.cancel();
        assert!(c.is_cancelled());
        assert!(!c.hand_over(2));
        // The child's own answer still says a send was out.
        assert_eq!(c.cancel(), Cancelled::AfterSend);
    }

    #[test]
    fn a_parent_withdraws_a_childs_send_waiting_for_a_connection() {
        let p = Cancel::new();
        let c = p.child();
        assert!(c.hand_over(1));
        let m = WireMark::new(c.clone(), 1);
        m.watching();
        p.cancel();
        assert!(!m.reached());
        assert_eq!(c.cancel(), Cancelled::NothingSent);
    }

    #[test]
    fn one_job_claims_a_view() {
        let c = Cancel::new();
        assert!(c.claim());
        assert!(!c.claim());
    }

    #[tokio::test]
    async fn a_waiter_wakes_on_its_grandparents_cancel() {
        // One job's signal shared by several jobs: each publishes on a
        // child of it, two levels under the shutdown.
        let shutdown = Cancel::new();
        let grandchild = shutdown.child().child();
        let waiter = tokio::spawn({
            let c = grandchild.clone();
            async move { c.cancelled().await }
        });
        tokio::task::yield_now().await;
        shutdown.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
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
