//! The store seam: where the shared admission state lives, and the five
//! things a job asks of it.
//!
//! A [`Store`] keeps what every worker of a key must agree on — bucket
//! levels, pauses, stops, budgets — and answers in whole steps:
//!
//! * [`target`](Store::target): resolve (key, model) to a scope;
//! * [`admit`](Store::admit): admit-or-wait, taking the reservation;
//! * [`update`](Store::update): apply what one job event implies — an
//!   answer's evidence (header view, pause, ramp cut, stop, the retry
//!   budget) *and* the end of its reservation (settle with the correction
//!   to actual usage, or release) — in one step, so no waiter woken by the
//!   give-back can find the scope without the pause the same answer
//!   reported;
//! * [`resume`](Store::resume): lift a key's stop;
//! * [`snapshot`](Store::snapshot): what a scope looks like.
//!
//! Every answer is a [`StoreFuture`]: a store may await (a network round
//! trip), while the in-memory [`Shared`](super::Shared) answers at once
//! with [`StoreFuture::ready`], allocating nothing. The core never polls
//! one itself: the [job machine](crate::job) hands its requests to the
//! driver as values ([`Step::Admit`](crate::job::Step::Admit),
//! [`Update`]), and the driver awaits the store.
//!
//! `Drop` cannot await: an update from a destructor (a caller's dropped
//! response body) goes through [`update_detached`](Store::update_detached),
//! which a remote store queues and applies in the background; the store's
//! lease on a reservation is the backstop for whatever never arrives.
//!
//! ```
//! use ratewise_core::admit::{AdmitRequest, Config, Controller, End, Shared, Store, Update};
//! use ratewise_core::{Instant, Now, Usage};
//! use std::time::SystemTime;
//!
//! // A driver written against any store.
//! async fn one_send(store: &dyn Store, now: Now) {
//!     let target = store.target("team-a", "claude-haiku-4-5").await;
//!     let res = store.admit(AdmitRequest::new(target), now).await.go().unwrap();
//!     // ... sent, answered, the body read ...
//!     let usage = Usage { input_tokens: 10, output_tokens: 20, ..Usage::default() };
//!     store.update(Update::ending(End::Settle { reservation: res, usage }), now).await;
//! }
//!
//! let mut config = Config::default();
//! config.seed = Some(1);
//! let store = Shared::new(Controller::new(config));
//! let now = Now::new(Instant::ZERO, SystemTime::UNIX_EPOCH);
//! futures_lite_block_on(one_send(&store, now));
//! assert!(store.ledger().is_clean());
//! # fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     // The in-memory store is always ready: one poll finishes it.
//! #     let waker = std::task::Waker::noop();
//! #     let mut cx = std::task::Context::from_waker(&waker);
//! #     let mut f = std::pin::pin!(f);
//! #     match f.as_mut().poll(&mut cx) {
//! #         std::task::Poll::Ready(v) => v,
//! #         std::task::Poll::Pending => panic!("the in-memory store never waits"),
//! #     }
//! # }
//! ```

use super::controller::{Admission, AdmitRequest, ScopeSnapshot, Target};
use super::reservation::{Reservation, Sent};
use super::ScopeId;
use crate::classify::Classification;
use crate::decision::Decision;
use crate::time::Now;
use crate::usage::Usage;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A store's answer: ready at once (the in-memory store), or a boxed
/// future (a store that awaits). A plain enum rather than `impl Future`
/// so that [`Store`] stays object-safe (`Arc<dyn Store>`) and the ready
/// case costs no allocation.
#[must_use = "a store's answer does nothing unless awaited"]
pub struct StoreFuture<'a, T>(Answer<'a, T>);

enum Answer<'a, T> {
    Ready(Option<T>),
    Boxed(Pin<Box<dyn Future<Output = T> + Send + 'a>>),
}

impl<'a, T> StoreFuture<'a, T> {
    /// An answer available now.
    pub fn ready(value: T) -> Self {
        StoreFuture(Answer::Ready(Some(value)))
    }

    /// An answer that awaits.
    pub fn new(fut: impl Future<Output = T> + Send + 'a) -> Self {
        StoreFuture(Answer::Boxed(Box::pin(fut)))
    }

    /// The answer when it is ready without awaiting; the future itself
    /// otherwise (for wrappers that act on ready answers at once).
    pub fn into_ready(self) -> Result<T, Self> {
        match self.0 {
            Answer::Ready(Some(v)) => Ok(v),
            other => Err(StoreFuture(other)),
        }
    }
}

// Nothing is ever pinned in place: a ready value is moved out, a boxed
// future is pinned on the heap.
impl<T> Unpin for StoreFuture<'_, T> {}

impl<T> Future for StoreFuture<'_, T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match &mut self.0 {
            Answer::Ready(v) => match v.take() {
                Some(v) => Poll::Ready(v),
                // Polled again after it finished: a caller's bug that a
                // future may answer any way it likes but by panicking.
                None => Poll::Pending,
            },
            Answer::Boxed(f) => f.as_mut().poll(cx),
        }
    }
}

impl<T> std::fmt::Debug for StoreFuture<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Answer::Ready(_) => "StoreFuture::Ready",
            Answer::Boxed(_) => "StoreFuture::Boxed",
        })
    }
}

/// How a reservation ends.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum End {
    /// Corrected to what the provider counted: actual usage, or the
    /// estimate for a send that may have run with no answer.
    Settle {
        /// The reservation.
        reservation: Reservation,
        /// What it is charged.
        usage: Usage,
    },
    /// Given back whole: it never reached the provider.
    Release {
        /// The reservation.
        reservation: Reservation,
    },
}

impl End {
    /// The reservation it ends.
    pub fn reservation(&self) -> &Reservation {
        match self {
            End::Settle { reservation, .. } | End::Release { reservation } => reservation,
        }
    }
}

/// What one answer said, for the store to apply: its classification and
/// the decision made on it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Observed {
    /// The scope the answer belongs to.
    pub scope: ScopeId,
    /// The admission it answers, when it answers an admitted request: its
    /// header view is read against the credit at that admission.
    pub sent: Option<Sent>,
    /// The classified answer.
    pub classification: Classification,
    /// The decision made on it.
    pub decision: Decision,
}

impl Observed {
    /// An answer in `scope`, decided `decision`.
    pub fn new(scope: ScopeId, classification: Classification, decision: Decision) -> Self {
        Observed {
            scope,
            sent: None,
            classification,
            decision,
        }
    }

    /// The same, read against the admission `sent`.
    pub fn of_sent(mut self, sent: Sent) -> Self {
        self.scope = sent.scope();
        self.sent = Some(sent);
        self
    }
}

/// What a store answers to an update that carried an answer.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Applied {
    /// The machine's decision, its action as decided, with what the shared
    /// state did about the answer in its notes (a pause, a stop, a margin
    /// learned).
    pub decision: Decision,
    /// The queue's retry budget as the answer found it: an input to
    /// [`decide`](crate::decide::decide), which alone says what a spent
    /// budget means for the job.
    pub retry_budget: crate::RetryBudgetState,
}

impl Applied {
    /// `decision` applied, with the retry budget in `retry_budget`.
    pub fn new(decision: Decision, retry_budget: crate::RetryBudgetState) -> Self {
        Applied {
            decision,
            retry_budget,
        }
    }
}

/// One job event's effect on the shared state, applied in one step: the
/// evidence first, then the reservation's end.
#[derive(Debug)]
#[non_exhaustive]
pub struct Update {
    /// An answer's evidence, if the event was an answer.
    pub observed: Option<Observed>,
    /// The reservation it ends, if any.
    pub end: Option<End>,
}

impl Update {
    /// An update that only ends a reservation (a body's end, a
    /// cancellation).
    pub fn ending(end: End) -> Self {
        Update {
            observed: None,
            end: Some(end),
        }
    }

    /// An answer's evidence, and the reservation it ends (if the job held
    /// one).
    pub fn answer(observed: Observed, end: Option<End>) -> Self {
        Update {
            observed: Some(observed),
            end,
        }
    }

    /// Whether it gives capacity back (a waiter may now fit) or stops the
    /// queue (a waiter must hand its job back): what a driver wakes
    /// admission waiters on.
    pub fn wakes_waiters(&self) -> bool {
        self.end.is_some()
    }
}

/// Where the shared admission state lives. See the [`admit`](crate::admit) module docs.
///
/// Implement it for a store shared between processes; every method is
/// one atomic step against that state. Policy and arithmetic (the ramp,
/// capacity learning, what a 429 pauses, the bucket levels) stay in the
/// core: a remote store keeps each key's `KeyRecord`
/// and runs the core's [`Controller`](super::Controller) on the record
/// it loads — `import_key`, the
/// operation, `export_key` — writing it
/// back with a compare-and-set, so the logic exists once and decides
/// exactly as in one process (`tests/key_record.rs` shows two processes
/// with different clock origins deciding as one controller).
pub trait Store: Send + Sync {
    /// Resolves (key, model) to its scope and price.
    fn target<'a>(&'a self, key: &'a str, model: &'a str) -> StoreFuture<'a, Target>;

    /// Asks to send one request now: a reservation, or how long to wait,
    /// or why not at all.
    ///
    /// A store that awaits must not lose a reservation granted to a caller
    /// whose future was dropped on the way (a timeout above the layer):
    /// give it straight back when the answer cannot be delivered (the
    /// test store in `ratewise-tower/tests/awaiting_store.rs` does), or
    /// leave it to the lease.
    fn admit(&self, req: AdmitRequest, now: Now) -> StoreFuture<'_, Admission>;

    /// When `req`, with `ahead` requests like it queued before it in this
    /// process, will have its turn — or that it cannot be sent before its
    /// deadline ([`Controller::predict`](super::Controller::predict)).
    /// Nothing is taken. The default predicts nothing (`None`): such a
    /// store's queued jobs wait for their turn, bounded by their deadline.
    fn predict(
        &self,
        req: AdmitRequest,
        ahead: u32,
        now: Now,
    ) -> StoreFuture<'_, Option<Admission>> {
        let _ = (req, ahead, now);
        StoreFuture::ready(None)
    }

    /// Applies one job event in one step: the answer's evidence, then the
    /// reservation's end. Returns, when the update carried an answer, its
    /// decision with the store's notes and the retry budget's state
    /// ([`Applied`]).
    ///
    /// The update owns the reservation it ends: a store that awaits must
    /// apply it even when the returned future is dropped before it
    /// finishes (a caller's timeout above the driver) — send it before the
    /// first await, or hand it to a task — or the reservation and the
    /// answer's evidence are lost until the lease.
    fn update(&self, update: Update, now: Now) -> StoreFuture<'_, Option<Applied>>;

    /// [`update`](Self::update) from where nothing can await (a `Drop`):
    /// a store that awaits queues it and applies it in the background; its
    /// lease releases whatever never arrives.
    fn update_detached(&self, update: Update, now: Now);

    /// Lifts a key's stop (a human resumed).
    fn resume<'a>(&'a self, key: &'a str, now: Now) -> StoreFuture<'a, ()>;

    /// What one scope looks like now.
    fn snapshot(&self, scope: ScopeId, now: Now) -> StoreFuture<'_, Option<ScopeSnapshot>>;

    /// Priorities across processes: publishes this process's waiting
    /// demand on `scope` — the rank of the highest priority level with
    /// work waiting here (0 is the highest), `None` when nothing waits —
    /// and answers the highest level (lowest rank) the *other* processes
    /// sharing the scope published within [`DEMAND_FRESH`]. A process whose
    /// waiting work is of a lower level then leaves the tokens to that
    /// demand, beyond its minimum share. A published demand is refreshed
    /// while its work waits; a process that dies stops refreshing, and its
    /// demand no longer counts once it is older than [`DEMAND_FRESH`].
    ///
    /// The default is a store no other process shares (the in-memory
    /// one): nothing is published and no demand is foreign.
    fn demand(&self, scope: ScopeId, waiting: Option<u8>, now: Now) -> StoreFuture<'_, Option<u8>> {
        let _ = (scope, waiting, now);
        StoreFuture::ready(None)
    }
}

/// How long a process's published waiting demand counts
/// ([`Store::demand`]): a few of its refreshes, so a live process's demand
/// never lapses between two, and a dead one's is forgotten within seconds.
pub const DEMAND_FRESH: std::time::Duration = std::time::Duration::from_secs(3);
