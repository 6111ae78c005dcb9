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
pub trait State: Store + 'static {}

impl<T: Store + 'static> State for T {}
