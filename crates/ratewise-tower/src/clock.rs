//! Time behind a small trait, so the layer runs on any runtime and tests
//! or a simulator can drive it in virtual time.
//!
//! The core never reads a clock: it takes a [`Now`] (a monotonic
//! [`Instant`] since an origin plus the wall clock). A [`Clock`] reads both
//! and sleeps until a monotonic instant. [`TokioClock`] (feature `tokio`,
//! on by default) is the default: its origin is the moment it was created.

use ratewise_core::{Instant, Now};
use std::future::Future;
use std::pin::Pin;

/// A boxed sleep: the one future a clock hands out.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Reads the present and sleeps until an instant of the same clock.
///
/// Implement it to run the layer on another runtime or in virtual time.
/// `sleep_until` of an instant in the past resolves at once.
pub trait Clock: Send + Sync + 'static {
    /// The present on both clocks.
    fn now(&self) -> Now;
    /// Resolves once [`now`](Clock::now) has reached `at`.
    fn sleep_until(&self, at: Instant) -> Sleep;
}

/// The default clock: `std::time::Instant` since creation, `SystemTime`
/// for the wall clock, and `tokio::time::sleep_until` for waits (so
/// `tokio::time::pause` also pauses the layer in tests).
#[cfg(feature = "tokio")]
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

#[cfg(feature = "tokio")]
impl TokioClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

#[cfg(feature = "tokio")]
impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "tokio")]
impl Clock for TokioClock {
    fn now(&self) -> Now {
        Now::new(
            Instant::from_origin(self.origin.elapsed()),
            std::time::SystemTime::now(),
        )
    }

    fn sleep_until(&self, at: Instant) -> Sleep {
        let deadline = self.origin + at.since_origin();
        Box::pin(tokio::time::sleep_until(deadline))
    }
}

#[cfg(all(test, feature = "tokio"))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn sleeps_until_the_instant() {
        let clock = TokioClock::new();
        let start = clock.now().instant;
        clock.sleep_until(start + Duration::from_secs(5)).await;
        assert!(clock.now().instant >= start + Duration::from_secs(5));
        // An instant in the past resolves at once.
        clock.sleep_until(Instant::ZERO).await;
    }
}
