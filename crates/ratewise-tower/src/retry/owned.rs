//! The reservation of an attempt while the call future owns it.
//!
//! A call future can be dropped at any await: a client timeout above the
//! layer, a caller that disconnects from a proxy. A reservation dropped
//! with it would stay outstanding for good, and a proxy whose callers time
//! out would drain its own buckets to zero. So the future holds it in an
//! [`Owned`], which ends it on the way out:
//!
//! * dropped before the request was handed to the inner service: nothing
//!   left, so everything goes back (released);
//! * dropped after (during the send, or while the answer's head or an
//!   error body is read): the provider may have run and billed it, so it
//!   is charged at its estimate, at once and for good — never left
//!   outstanding.
//!
//! Every other path takes the reservation out with [`Owned::take`] and
//! ends it itself (settle, release, hold, or hand it to the metered body).

use ratewise_core::admit::{Reservation, Sent};
use ratewise_core::Usage;
use std::sync::Arc;

use crate::clock::Clock;
use crate::state::State;

pub(crate) struct Owned {
    state: Arc<dyn State>,
    clock: Arc<dyn Clock>,
    res: Option<Reservation>,
    handed_over: bool,
}

impl Owned {
    pub(crate) fn new(state: Arc<dyn State>, clock: Arc<dyn Clock>, res: Reservation) -> Self {
        Owned {
            state,
            clock,
            res: Some(res),
            handed_over: false,
        }
    }

    /// What the attempt's rate-limit headers are read against.
    pub(crate) fn admitted(&self) -> Sent {
        self.reservation().sent()
    }

    fn reservation(&self) -> &Reservation {
        // Only `take`, which consumes the `Owned`, empties it.
        self.res
            .as_ref()
            .expect("an Owned holds its reservation until taken")
    }

    /// The request is about to be handed to the inner service: from here
    /// on it may reach the provider.
    pub(crate) fn handing_over(&mut self) {
        self.handed_over = true;
    }

    /// The reservation, for the caller to end.
    pub(crate) fn take(mut self) -> Reservation {
        self.res
            .take()
            .expect("an Owned holds its reservation until taken")
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        let Some(res) = self.res.take() else {
            return;
        };
        let now = self.clock.now();
        if self.handed_over {
            let worst = estimate(&res);
            tracing::debug!("call dropped after the send: reservation charged at its estimate");
            self.state.settle(res, &worst, now);
        } else {
            tracing::debug!("call dropped before the send: reservation released");
            self.state.release(res, now);
        }
    }
}

/// A reservation's amounts as usage: what a send that may have run is
/// charged.
pub(crate) fn estimate(res: &Reservation) -> Usage {
    let a = res.amounts();
    Usage {
        input_tokens: a.input,
        output_tokens: a.output,
        ..Usage::default()
    }
}
