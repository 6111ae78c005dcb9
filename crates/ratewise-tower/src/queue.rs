//! Fair admission within a process: per scope, a FIFO of the jobs that
//! wait for admission, and the signals that hand them their turn.
//!
//! A job joins its scope's queue (the `Target`'s scope: key × model class)
//! before it asks for admission, at its place: its arrival instant, ties
//! broken by a sequence number. A retry joins again at its job's arrival,
//! so it keeps its place ahead of later arrivals. Only the head of the
//! queue asks; the others wait for their turn. The [`Ticket`] is the
//! job's place: dropping it (admitted, ended, or the call future dropped)
//! leaves the queue and, when it was the head, wakes the next head so it
//! asks in turn (a chain).
//!
//! Capacity coming back (a settle, a release, a resolved unknown outcome,
//! a resume, a stop) wakes only the heads ([`Queues::wake_heads`]), not
//! every waiter: a settle that frees room for one job wakes about one job
//! (it is admitted, leaves, and wakes the next, which asks and, without
//! room, waits). Heads of every scope are woken, not only the settled
//! one's: key-wide budgets (spend, the key's stop) are shared by the
//! key's classes, and heads are few. A stop ends the whole queue through
//! the same chain: each head asks, is told the key is stopped, ends and
//! hands the turn on, with no wait in between.
//!
//! The head still wakes at the instant admission computed (its `until`);
//! a waiter that is not the head wakes at its admission deadline at the
//! latest and then asks out of turn, so a queue never holds a job past its
//! deadline (the machine ends it, or admits it if there is room).
//!
//! **A large job at the head waits (strict FIFO).** Smaller jobs behind it
//! do not pass, even when the bucket has room for them: letting them pass
//! is what starves large jobs (there is always a smaller one that fits),
//! and the head's own wait is bounded — the controller computes when the
//! bucket refills enough for it, and its deadline bounds the rest. The
//! cost is some idle room while a large head waits for its refill.

use event_listener::{Event, EventListener};
use ratewise_core::admit::ScopeId;
use ratewise_core::Instant;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A job's place in its scope's queue: arrival first, then a sequence
/// number taken when the job first joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Place {
    arrived: Instant,
    seq: u64,
}

/// The waiting queues of every scope of one layer (and of the layers
/// derived from it).
#[derive(Default)]
pub(crate) struct Queues {
    scopes: Mutex<HashMap<ScopeId, BTreeMap<Place, Arc<Event>>>>,
    seq: AtomicU64,
}

impl Queues {
    fn lock(&self) -> MutexGuard<'_, HashMap<ScopeId, BTreeMap<Place, Arc<Event>>>> {
        self.scopes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a job that arrived at `arrived`, to keep across its
    /// retries (the sequence number breaks ties among equal arrivals).
    pub fn place(&self, arrived: Instant) -> Place {
        Place {
            arrived,
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Joins `scope`'s queue at `place`.
    pub fn join(self: &Arc<Self>, scope: ScopeId, place: Place) -> Ticket {
        let signal = Arc::new(Event::new());
        self.lock()
            .entry(scope)
            .or_default()
            .insert(place, signal.clone());
        Ticket {
            queues: self.clone(),
            scope,
            place,
            signal,
        }
    }

    /// Wakes the head of every scope's queue: capacity came back (or the
    /// key stopped), and the head asks again.
    pub fn wake_heads(&self) {
        let heads: Vec<Arc<Event>> = self
            .lock()
            .values()
            .filter_map(|q| q.values().next().cloned())
            .collect();
        for h in heads {
            h.notify(usize::MAX);
        }
    }

    /// Jobs waiting in `scope`'s queue.
    #[cfg(test)]
    pub fn len(&self, scope: ScopeId) -> usize {
        self.lock().get(&scope).map_or(0, BTreeMap::len)
    }
}

/// A job's place in its scope's queue; dropping it leaves the queue and
/// hands the turn on.
pub(crate) struct Ticket {
    queues: Arc<Queues>,
    scope: ScopeId,
    place: Place,
    signal: Arc<Event>,
}

impl Ticket {
    /// Whether this job is the head of its queue (its turn to ask).
    pub fn is_head(&self) -> bool {
        self.queues
            .lock()
            .get(&self.scope)
            .and_then(|q| q.keys().next())
            == Some(&self.place)
    }

    /// How many jobs wait ahead of this one in its queue.
    pub fn ahead(&self) -> usize {
        self.queues
            .lock()
            .get(&self.scope)
            .map_or(0, |q| q.range(..self.place).count())
    }

    /// A listener for this job's next signal (its turn, or capacity back
    /// while it is the head). Listen before checking, then await.
    pub fn listen(&self) -> EventListener {
        self.signal.listen()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let next = {
            let mut scopes = self.queues.lock();
            let Some(q) = scopes.get_mut(&self.scope) else {
                return;
            };
            let was_head = q.keys().next() == Some(&self.place);
            q.remove(&self.place);
            let next = if was_head {
                q.values().next().cloned()
            } else {
                None
            };
            if q.is_empty() {
                scopes.remove(&self.scope);
            }
            next
        };
        if let Some(next) = next {
            next.notify(usize::MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn scope() -> ScopeId {
        let mut c = ratewise_core::admit::Controller::new(ratewise_core::admit::Config::default());
        c.target("k", "m").scope
    }

    #[test]
    fn oldest_first_and_leaving_hands_the_turn_on() {
        let q = Arc::new(Queues::default());
        let s = scope();
        let t0 = Instant::ZERO;
        let late = q.join(s, q.place(t0 + Duration::from_secs(2)));
        let early = q.join(s, q.place(t0 + Duration::from_secs(1)));
        assert!(early.is_head() && !late.is_head());
        let turn = late.listen();
        drop(early);
        assert!(late.is_head());
        // The next head was signalled.
        assert!(futures::FutureExt::now_or_never(turn).is_some());
        drop(late);
        assert_eq!(q.len(s), 0, "an empty scope is forgotten");
    }

    #[test]
    fn equal_arrivals_keep_their_joining_order() {
        let q = Arc::new(Queues::default());
        let s = scope();
        let a = q.join(s, q.place(Instant::ZERO));
        let b = q.join(s, q.place(Instant::ZERO));
        assert!(a.is_head() && !b.is_head());
        // A dropped waiter behind the head hands nothing on.
        drop(b);
        assert!(a.is_head());
    }

    #[test]
    fn ahead_counts_the_jobs_before_not_behind() {
        let q = Arc::new(Queues::default());
        let s = scope();
        let at = |ms: u64| Instant::from_millis(ms);
        let a = q.join(s, q.place(at(10)));
        let b = q.join(s, q.place(at(20)));
        let late = q.join(s, q.place(at(30)));
        assert_eq!(late.ahead(), 2);
        // A retry of an older job has none ahead: it keeps its place.
        let old = q.join(s, q.place(at(5)));
        assert_eq!(old.ahead(), 0);
        assert!(old.is_head());
        drop((a, b, late, old));
        assert_eq!(q.len(s), 0);
    }
}
