//! [`ScaledClock`]: the layer's clock in *provider time*.
//!
//! The mock runs a provider minute in `seconds_per_minute` real seconds
//! ([`TimeScale`]). The layer must live on the same scale, or every
//! per-minute bucket, backoff base, ramp step, retry-budget window and
//! deadline of the controller would run `speedup` times too slow. So the
//! clock hands the layer provider time, and sleeps for the matching real
//! time:
//!
//! * `now().instant` = real time since the origin × speedup;
//! * `now().wall` = the simulation's fixed wall origin
//!   ([`WALL_ORIGIN_SECS`](ratewise_sim::provider::WALL_ORIGIN_SECS)) +
//!   that instant, so calendar statements (a spend cap until the 1st of
//!   next month) mean the same in both runs;
//! * `sleep_until(at)` sleeps until the real moment whose provider time is
//!   `at` (rounded up: it never wakes before `at`).
//!
//! Both clocks of [`Now`] advance together, as the core assumes. Hints the
//! mock renders in real time are brought into this frame by
//! [`crate::hints`].
//!
//! ```
//! use ratewise_real::ScaledClock;
//! use ratewise_tower::Clock;
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let clock = ScaledClock::new(ratewise_mock::TimeScale::new(0.6)); // 100× speed
//! let t = clock.now().instant;
//! clock.sleep_until(t + std::time::Duration::from_secs(1)).await; // ~10 ms real
//! assert!(clock.now().instant >= t + std::time::Duration::from_secs(1));
//! # }
//! ```

use ratewise_core::{Instant, Now};
use ratewise_mock::TimeScale;
use ratewise_sim::provider::SimProvider;
use ratewise_tower::{Clock, Sleep};
use std::time::{Duration, SystemTime};

/// Provider time on a real clock; see the [module](self) docs.
#[derive(Debug, Clone, Copy)]
pub struct ScaledClock {
    origin: tokio::time::Instant,
    real_wall_origin: SystemTime,
    scale: TimeScale,
}

impl ScaledClock {
    /// A clock whose provider time 0 is now.
    pub fn new(scale: TimeScale) -> Self {
        ScaledClock {
            origin: tokio::time::Instant::now(),
            real_wall_origin: SystemTime::now(),
            scale,
        }
    }

    /// The scale.
    pub fn scale(&self) -> TimeScale {
        self.scale
    }

    /// Provider time now.
    pub fn instant(&self) -> Instant {
        Instant::from_origin(self.scale.to_provider(self.origin.elapsed()))
    }

    /// The real moment at which provider time reaches `at` (rounded up by
    /// a microsecond so that float rounding never wakes a sleeper early).
    pub fn real_at(&self, at: Instant) -> tokio::time::Instant {
        let real = self
            .scale
            .to_real(at.since_origin())
            .saturating_add(Duration::from_micros(1));
        // Far enough to mean "never" in any run, short enough not to overflow.
        self.origin
            .checked_add(real)
            .unwrap_or_else(|| self.origin + Duration::from_secs(100 * 365 * 86_400))
    }

    /// The provider-frame wall time of a real wall time `real` (for
    /// absolute instants a server stated on the real clock).
    pub fn provider_wall(&self, real: SystemTime) -> SystemTime {
        let since = real
            .duration_since(self.real_wall_origin)
            .unwrap_or(Duration::ZERO);
        SimProvider::wall(Instant::from_origin(self.scale.to_provider(since)))
    }
}

impl Clock for ScaledClock {
    fn now(&self) -> Now {
        let t = self.instant();
        Now::new(t, SimProvider::wall(t))
    }

    fn sleep_until(&self, at: Instant) -> Sleep {
        Box::pin(tokio::time::sleep_until(self.real_at(at)))
    }
}
