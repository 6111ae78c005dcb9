//! The shared-state seam: every clone of a [`RetryService`](crate::RetryService)
//! talks to one admission store.
//!
//! [`State`] is the core's [`Store`] — admit-or-wait, and one update per
//! job event (an answer's evidence and the end of its reservation in one
//! step) — plus `'static`, so one `Arc<dyn State>` can be shared by every
//! clone and task. In one process the store is the core's
//! [`Shared`](ratewise_core::admit::Shared) (a `Mutex<Controller>`, which
//! answers without awaiting); a store shared between processes implements
//! [`Store`] and may await.

use ratewise_core::admit::Store;

/// Admission state shared by every clone of the layer: any [`Store`]
/// that lives as long as it must.
pub trait State: Store + 'static {
    /// The store as `Any`: how the layer finds its own in-memory store to
    /// show its ledger and snapshots ([`RetryLayer::ledger`](crate::RetryLayer::ledger)).
    #[doc(hidden)]
    fn as_any(&self) -> &dyn std::any::Any;
}

impl<T: Store + 'static> State for T {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl crate::RetryLayer {
    /// The in-memory store the layer paces with — the one the
    /// [`Builder`](crate::Builder) made, or a
    /// [`Shared`](ratewise_core::admit::Shared) given to it — for what it
    /// knows beyond [`ledger`](Self::ledger) and
    /// [`snapshots`](Self::snapshots). `None` for a store of another kind
    /// (a Redis store answers for itself).
    pub fn in_memory_store(&self) -> Option<&ratewise_core::admit::Shared> {
        self.raw_state()
            .as_any()
            .downcast_ref::<ratewise_core::admit::Shared>()
    }

    /// The reservations the layer's in-memory store holds and how they
    /// ended: [`Ledger::is_clean`](ratewise_core::admit::Ledger::is_clean)
    /// once every job and body has ended. `None` for a store of another
    /// kind.
    pub fn ledger(&self) -> Option<ratewise_core::admit::Ledger> {
        self.in_memory_store().map(|s| s.ledger())
    }

    /// Every scope (key and model class) of the layer's in-memory store as
    /// it is now, its buckets refilled to this moment: limits, levels,
    /// learned capacities, pauses, stops. `None` for a store of another
    /// kind.
    pub fn snapshots(&self) -> Option<Vec<ratewise_core::admit::ScopeSnapshot>> {
        let store = self.in_memory_store()?;
        let now = self.now();
        let mut c = store.lock();
        let scopes = c.scopes();
        Some(
            scopes
                .into_iter()
                .filter_map(|id| c.snapshot(id, now))
                .collect(),
        )
    }
}
