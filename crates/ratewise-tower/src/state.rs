//! The shared-state seam: every clone of a [`RetryService`](crate::RetryService)
//! talks to one admission state through `&self`.
//!
//! [`State`] is the core's [`AdmissionState`] (admit, settle, release,
//! hold, resume, ...) plus [`observe`](State::observe): apply what one
//! answer said to the shared state — header sync, pause on a wait hint,
//! ramp cut on an acceleration limit, stop on money. In one process the
//! state is the core's [`Shared`] (a `Mutex<Controller>`); a Redis-backed
//! store implements the same two traits with atomic scripts.

use ratewise_core::admit::{AdmissionState, Shared, Target};
use ratewise_core::classify::Classification;
use ratewise_core::{Action, Cause, Decision, Now};

/// Admission state shared by every clone of the layer.
pub trait State: AdmissionState + Send + Sync + 'static {
    /// Applies one classified answer and its decision to the shared state.
    fn observe(&self, target: Target, c: &Classification, d: &Decision, now: Now);
}

impl State for Shared {
    fn observe(&self, target: Target, c: &Classification, d: &Decision, now: Now) {
        let mut ctl = self.lock();
        let scope = target.scope;
        if c.status.is_some() {
            ctl.sync_headers(scope, &c.hints.ratelimit, c.provider, now);
        }
        match c.cause {
            Cause::RateLimited => {
                if let Some(hint) = c.hints.wait {
                    // Every clone waits out the server's hint, not only
                    // the job that was told.
                    ctl.pause(scope, now.instant + hint.wait, c.dimension, now);
                }
            }
            Cause::AccelerationLimited => ctl.slow_down(scope, now),
            _ => {}
        }
        if let Action::StopQueue { until } = d.action {
            ctl.stop(scope, c.cause, until, now);
        }
    }
}
