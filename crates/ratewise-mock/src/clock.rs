//! Time scale: a provider "minute" may last less than a real minute.
//!
//! The provider model keeps all its maths per minute in *provider time*
//! (a [`ratewise_core::Instant`] since the server started). The server maps
//! real elapsed time to provider time with [`TimeScale`], and maps every
//! duration it tells a client (`retry-after`, reset headers, "try again in")
//! back to **real** time, because that is the clock the client waits on.
//!
//! `retry-after` is written in real seconds rounded *up* to the millisecond
//! with trailing zeros dropped: `"8"` at normal speed, `"0.134"` when a
//! minute lasts one second. ratewise (and the official SDKs) read decimal
//! seconds; rounding up keeps "wait at least this long" true.

use ratewise_core::Instant;
use std::time::Duration;

/// How many real seconds one provider minute lasts (60 = real time).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeScale {
    seconds_per_minute: f64,
}

impl Default for TimeScale {
    fn default() -> Self {
        TimeScale::REAL
    }
}

impl TimeScale {
    /// Real time: a minute lasts 60 s.
    pub const REAL: TimeScale = TimeScale {
        seconds_per_minute: 60.0,
    };

    /// A scale where one provider minute lasts `seconds_per_minute` real
    /// seconds. Non-finite or non-positive values mean real time.
    pub fn new(seconds_per_minute: f64) -> Self {
        if seconds_per_minute.is_finite() && seconds_per_minute > 0.0 {
            TimeScale { seconds_per_minute }
        } else {
            TimeScale::REAL
        }
    }

    /// Real seconds per provider minute.
    pub fn seconds_per_minute(self) -> f64 {
        self.seconds_per_minute
    }

    /// Provider seconds that pass per real second.
    pub fn speedup(self) -> f64 {
        60.0 / self.seconds_per_minute
    }

    /// Provider time that passes during `real`.
    pub fn to_provider(self, real: Duration) -> Duration {
        Duration::try_from_secs_f64(real.as_secs_f64() * self.speedup()).unwrap_or(Duration::MAX)
    }

    /// Real time that `provider` lasts.
    pub fn to_real(self, provider: Duration) -> Duration {
        Duration::try_from_secs_f64(provider.as_secs_f64() / self.speedup())
            .unwrap_or(Duration::MAX)
    }
}

/// Converts real time since the server started into provider time.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: std::time::Instant,
    scale: TimeScale,
}

impl Clock {
    /// A clock whose provider time starts now.
    pub fn start(scale: TimeScale) -> Self {
        Clock {
            origin: std::time::Instant::now(),
            scale,
        }
    }

    /// The scale in use.
    pub fn scale(&self) -> TimeScale {
        self.scale
    }

    /// Real time since start.
    pub fn real_elapsed(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Provider time now.
    pub fn now(&self) -> Instant {
        Instant::from_origin(self.scale.to_provider(self.real_elapsed()))
    }
}

/// Formats a real duration as `retry-after` seconds, rounded up to the
/// millisecond: `8`, `0.25`, `1.146`.
///
/// ```
/// use std::time::Duration;
/// use ratewise_mock::clock::format_retry_after;
/// assert_eq!(format_retry_after(Duration::from_secs(8)), "8");
/// assert_eq!(format_retry_after(Duration::from_micros(133_334)), "0.134");
/// assert_eq!(format_retry_after(Duration::from_millis(250)), "0.25");
/// ```
pub fn format_retry_after(real: Duration) -> String {
    let ms = ceil_ms(real).as_millis();
    let (secs, frac) = (ms / 1000, ms % 1000);
    if frac == 0 {
        secs.to_string()
    } else {
        let f = format!("{frac:03}");
        format!("{secs}.{}", f.trim_end_matches('0'))
    }
}

/// `d` rounded up to whole milliseconds: every wait the mock states is
/// rounded up, so a client that honours it never comes back early.
pub fn ceil_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_round_trips() {
        let s = TimeScale::new(1.0);
        assert_eq!(
            s.to_provider(Duration::from_secs(1)),
            Duration::from_secs(60)
        );
        assert_eq!(
            s.to_real(Duration::from_secs(30)),
            Duration::from_millis(500)
        );
        assert_eq!(TimeScale::new(f64::NAN), TimeScale::REAL);
        assert_eq!(TimeScale::new(-1.0), TimeScale::REAL);
    }
}
