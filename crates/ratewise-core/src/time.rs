//! Time as the caller gives it: the core never reads a clock.
//!
//! Two clocks matter. A monotonic [`Instant`] orders events and measures
//! waits; the wall clock ([`SystemTime`]) is needed only to read server
//! statements made in calendar time (`Retry-After` HTTP-dates, Anthropic's
//! RFC 3339 reset instants, "00:00 UTC on the 1st"). [`Now`] carries both,
//! taken at the same moment by the IO layer (or by a simulation).

use std::ops::{Add, Sub};
use std::time::{Duration, SystemTime};

/// A monotonic instant: a duration since an origin the caller chose.
///
/// Unlike [`std::time::Instant`] it can be built from a number, so
/// simulations and tests drive the core in virtual time and every run is
/// reproducible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(Duration);

impl Instant {
    /// The caller's origin.
    pub const ZERO: Instant = Instant(Duration::ZERO);

    /// An instant `since_origin` after the caller's origin.
    pub const fn from_origin(since_origin: Duration) -> Self {
        Instant(since_origin)
    }

    /// An instant `ms` milliseconds after the origin.
    pub const fn from_millis(ms: u64) -> Self {
        Instant(Duration::from_millis(ms))
    }

    /// Time elapsed since the origin.
    pub const fn since_origin(self) -> Duration {
        self.0
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// `self + d`, saturating at the largest representable instant.
    pub fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        self.saturating_add(rhs)
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

/// The present moment on both clocks, read once by whoever drives the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Monotonic time: orders events and measures waits.
    pub instant: Instant,
    /// Wall-clock time (UTC): reads calendar statements made by servers.
    pub wall: SystemTime,
}

impl Now {
    /// Both clocks at once.
    pub const fn new(instant: Instant, wall: SystemTime) -> Self {
        Now { instant, wall }
    }

    /// The same moment `d` later on both clocks.
    pub fn after(self, d: Duration) -> Now {
        Now {
            instant: self.instant + d,
            wall: self.wall.checked_add(d).unwrap_or(self.wall),
        }
    }

    /// The monotonic instant at which wall-clock time `at` arrives, assuming
    /// the two clocks advance together. A past `at` maps to `self.instant`.
    pub fn instant_at(self, at: SystemTime) -> Instant {
        match at.duration_since(self.wall) {
            Ok(ahead) => self.instant + ahead,
            Err(_) => self.instant,
        }
    }

    /// The wall-clock time at monotonic instant `at`.
    pub fn wall_at(self, at: Instant) -> SystemTime {
        if at >= self.instant {
            self.wall
                .checked_add(at - self.instant)
                .unwrap_or(self.wall)
        } else {
            self.wall
                .checked_sub(self.instant - at)
                .unwrap_or(SystemTime::UNIX_EPOCH)
        }
    }
}

/// Formats a wall-clock time as RFC 3339 in UTC (`2026-12-01T00:00:00Z`),
/// with milliseconds only when there are some.
pub fn format_rfc3339(t: SystemTime) -> String {
    use time::format_description::well_known::Rfc3339;
    let odt = time::OffsetDateTime::from(t);
    let millis = u32::from(odt.millisecond());
    let trimmed = odt.replace_nanosecond(millis * 1_000_000).unwrap_or(odt);
    trimmed
        .format(&Rfc3339)
        .unwrap_or_else(|_| format!("{}s since the epoch", unix_secs(t)))
}

/// Parses an RFC 3339 instant such as `2026-11-29T12:00:04Z` or
/// `2026-11-29T13:00:04.5+01:00`. `None` for anything else.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    use time::format_description::well_known::Rfc3339;
    let s = s.trim();
    if s.len() > 64 {
        return None;
    }
    time::OffsetDateTime::parse(s, &Rfc3339)
        .ok()
        .map(SystemTime::from)
}

fn unix_secs(t: SystemTime) -> i128 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i128::from(d.as_secs()),
        Err(e) => -i128::from(e.duration().as_secs()),
    }
}
