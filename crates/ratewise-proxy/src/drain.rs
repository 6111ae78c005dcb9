//! The way out: SIGTERM or SIGINT starts a drain, the grace ends it.
//!
//! * **Draining**: the callers' listener stays open and answers every new
//!   request at once with a 503 in the provider's shape, `retry-after`
//!   and `connection: close`, sending nothing; every job with nothing on
//!   the wire gets the same — not yet sent, between attempts, or handed
//!   to the client still waiting for a connection (withdrawn: it never
//!   reaches the wire) — as its cancellation decides in one step; the
//!   shutdown's cancellation ([`Drain::cancel`], every job's parent)
//!   refuses every send, retries included — the job machine ends such a
//!   job `give_up` `cancelled`, nothing sent, and an attempt it had
//!   journaled as started is journaled as ended; sends on the wire
//!   finish.
//! * **Cut** (the grace is over): a job whose send is still on the wire
//!   gets a 504 with `x-ratewise-action: hold_unknown` and is journaled as
//!   an unknown outcome; a streamed answer still being written gets the
//!   provider's SSE `error` event and ends cleanly.
//!
//! The admin listener stays up throughout, `/healthz` answering 503
//! `draining`.

use crate::upstream::Wire;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::watch;

/// Where the proxy stands on its way out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Serving.
    Serving,
    /// A signal came: nothing new is sent; sends on the wire finish.
    Draining,
    /// The grace is over: what is still on the wire is cut.
    Cut,
}

/// The drain's state, shared by the handlers and the shutdown.
#[derive(Debug)]
pub struct Drain {
    phase: watch::Sender<Phase>,
    cut: AtomicUsize,
    /// The sends on the wire, which the shutdown waits for (read from each
    /// job's view of its send).
    pub wire: Arc<Wire>,
    /// Every job's cancellation is a child of this one: given when the
    /// drain starts, no job hands another send to the transport.
    pub cancel: ratewise_tower::Cancel,
}

impl Default for Drain {
    fn default() -> Self {
        Drain {
            phase: watch::channel(Phase::Serving).0,
            cut: AtomicUsize::new(0),
            wire: Arc::new(Wire::default()),
            cancel: ratewise_tower::Cancel::new(),
        }
    }
}

impl Drain {
    /// The phase now.
    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    /// Whether a drain has started.
    pub fn is_draining(&self) -> bool {
        self.phase() != Phase::Serving
    }

    /// Follows the phase.
    pub fn subscribe(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    /// Starts the drain: sends are refused first, so no send starts once
    /// a handler has seen the phase.
    pub fn start(&self) {
        self.cancel.cancel();
        self.phase.send_replace(Phase::Draining);
    }

    /// The grace is over.
    pub fn cut_now(&self) {
        self.cancel.cancel();
        self.phase.send_replace(Phase::Cut);
    }

    /// One caller's answer was cut (a 504 `hold_unknown`, or a stream
    /// ended with an error event).
    pub fn note_cut(&self) {
        self.cut.fetch_add(1, Ordering::AcqRel);
    }

    /// Answers cut so far.
    pub fn cut(&self) -> usize {
        self.cut.load(Ordering::Acquire)
    }
}
