//! The shared-state seam: every clone of a [`RetryService`](crate::RetryService)
//! talks to one admission state through `&self`.
//!
//! [`State`] is the core's [`AdmissionState`] — admit, settle, release,
//! hold, resume and `observe` (apply what one answer said: header sync,
//! pause on a wait hint, ramp cut on an acceleration limit, stop on money,
//! the retry budget) — plus `Send + Sync + 'static`, so one `Arc<dyn
//! State>` can be shared by every clone and task. In one process the state
//! is the core's [`Shared`](ratewise_core::admit::Shared) (a
//! `Mutex<Controller>`); a Redis-backed store implements
//! [`AdmissionState`] with atomic scripts and is used the same way.

use ratewise_core::admit::AdmissionState;

/// Admission state shared by every clone of the layer: any
/// [`AdmissionState`] that can cross threads.
pub trait State: AdmissionState + Send + Sync + 'static {}

impl<T: AdmissionState + Send + Sync + 'static> State for T {}
