//! Whose clock a record's times are read against.
//!
//! A record keeps absolute times (bucket updates, pause ends, stop ends).
//! Processes on different hosts read them against their own wall clocks,
//! so a host running 200 ms fast would see 200 ms more refill. With
//! [`Clock::Redis`] every process reads them against Redis's `TIME`
//! instead: each reply carries it, and the process keeps the offset of its
//! wall clock from Redis's, measured on the fastest recent round trip (the
//! error is at most half of it).

use ratewise_core::Now;
use std::time::{Duration, SystemTime};

/// The wall clock operations are stamped with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Clock {
    /// Redis's `TIME`, as an offset from this host's wall clock, measured
    /// on the store's round trips (the default).
    #[default]
    Redis,
    /// The `now` each operation is called with, unchanged: tests that
    /// step time by hand, or hosts whose clocks are known to agree.
    Caller,
}

/// Samples per window: the window's fastest round trip sets the offset.
const WINDOW: u32 = 32;

/// The offset of Redis's clock from this host's wall clock.
#[derive(Debug)]
pub(crate) struct ClockSync {
    mode: Clock,
    /// Redis minus local, nanoseconds; `None` until the first reply.
    offset_ns: Option<i128>,
    best: Option<(Duration, i128)>,
    samples: u32,
}

impl ClockSync {
    pub(crate) fn new(mode: Clock) -> Self {
        ClockSync {
            mode,
            offset_ns: None,
            best: None,
            samples: 0,
        }
    }

    /// `now` as the store reads it.
    pub(crate) fn adjust(&self, now: Now) -> Now {
        match (self.mode, self.offset_ns) {
            (Clock::Redis, Some(off)) => Now::new(now.instant, shift(now.wall, off)),
            _ => now,
        }
    }

    /// One reply: Redis said `redis_ns` somewhere between `sent` and
    /// `sent + rtt` on the local wall clock.
    pub(crate) fn sample(&mut self, sent: SystemTime, rtt: Duration, redis_ns: i128) {
        if self.mode != Clock::Redis {
            return;
        }
        let mid = unix_ns(sent) + (rtt.as_nanos() / 2) as i128;
        let off = redis_ns - mid;
        if self.best.is_none_or(|(r, _)| rtt < r) {
            self.best = Some((rtt, off));
        }
        self.samples += 1;
        if self.offset_ns.is_none() || self.samples >= WINDOW {
            self.offset_ns = self.best.map(|(_, o)| o);
            self.best = None;
            self.samples = 0;
        }
    }
}

fn unix_ns(t: SystemTime) -> i128 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    }
}

fn shift(t: SystemTime, off_ns: i128) -> SystemTime {
    let mag = Duration::from_nanos(u64::try_from(off_ns.unsigned_abs()).unwrap_or(u64::MAX));
    if off_ns >= 0 {
        t.checked_add(mag).unwrap_or(t)
    } else {
        t.checked_sub(mag).unwrap_or(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratewise_core::Instant;

    #[test]
    fn the_fastest_round_trip_sets_the_offset() {
        let mut c = ClockSync::new(Clock::Redis);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let now = Now::new(Instant::ZERO, t0);
        assert_eq!(c.adjust(now), now, "nothing known yet: unchanged");
        // Redis is 2 s ahead; the first sample is taken at once.
        let redis = unix_ns(t0) + 2_000_000_000 + 500_000;
        c.sample(t0, Duration::from_millis(1), redis);
        assert_eq!(c.adjust(now).wall, t0 + Duration::from_secs(2));
        // A slow round trip with a skewed reading does not win the window.
        for i in 0..WINDOW {
            let rtt = if i == 3 {
                Duration::from_micros(100)
            } else {
                Duration::from_millis(40)
            };
            let skew = if i == 3 { 0 } else { 15_000_000 };
            let mid = unix_ns(t0) + (rtt.as_nanos() / 2) as i128;
            c.sample(t0, rtt, mid + 3_000_000_000 + skew);
        }
        assert_eq!(c.adjust(now).wall, t0 + Duration::from_secs(3));
    }

    #[test]
    fn the_callers_clock_is_left_alone() {
        let mut c = ClockSync::new(Clock::Caller);
        let now = Now::new(
            Instant::ZERO,
            SystemTime::UNIX_EPOCH + Duration::from_secs(5),
        );
        c.sample(now.wall, Duration::ZERO, 99_000_000_000);
        assert_eq!(c.adjust(now), now);
    }
}
