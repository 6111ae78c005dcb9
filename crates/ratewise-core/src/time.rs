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
///
/// Kept as whole nanoseconds in a `u64` (8 bytes, where a [`Duration`] takes
/// 16: instants sit in every bucket and reservation, and reservations are
/// moved by value on the admission path). That spans 584 years from the
/// origin; later instants saturate there, which still compares as the far
/// future.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

/// As the time since the origin (`Instant(1.5s)`), not raw nanoseconds.
impl std::fmt::Debug for Instant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Instant")
            .field(&self.since_origin())
            .finish()
    }
}

/// Whole nanoseconds of `d`, saturating at `u64::MAX`.
#[inline]
const fn nanos(d: Duration) -> u64 {
    let n = d.as_nanos();
    if n > u64::MAX as u128 {
        u64::MAX
    } else {
        n as u64
    }
}

impl Instant {
    /// The caller's origin.
    pub const ZERO: Instant = Instant(0);

    /// An instant `since_origin` after the caller's origin (saturating 584
    /// years after it).
    #[inline]
    pub const fn from_origin(since_origin: Duration) -> Self {
        Instant(nanos(since_origin))
    }

    /// An instant `ms` milliseconds after the origin.
    #[inline]
    pub const fn from_millis(ms: u64) -> Self {
        Instant(ms.saturating_mul(1_000_000))
    }

    /// Time elapsed since the origin.
    #[inline]
    pub const fn since_origin(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// Nanoseconds since the origin.
    #[inline]
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// An instant `ns` nanoseconds after the origin.
    #[inline]
    pub const fn from_nanos(ns: u64) -> Self {
        Instant(ns)
    }

    /// `self - earlier`, or zero when `earlier` is later.
    #[inline]
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, saturating at the largest representable instant.
    #[inline]
    pub fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(nanos(d)))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    #[inline]
    fn add(self, rhs: Duration) -> Instant {
        self.saturating_add(rhs)
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    #[inline]
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
    if let Some(t) = utc_seconds_fast_path(s.as_bytes()) {
        return Some(t);
    }
    time::OffsetDateTime::parse(s, &Rfc3339)
        .ok()
        .map(SystemTime::from)
}

/// The one form Anthropic sends on every response,
/// `YYYY-MM-DDTHH:MM:SSZ`, read without the general parser (three of them
/// per response made it a fifth of classification). Anything else —
/// fractions, offsets, leap seconds, odd digits — returns `None` and goes
/// to `time`'s RFC 3339 parser, which a property test uses as the oracle.
pub(crate) fn utc_seconds_fast_path(b: &[u8]) -> Option<SystemTime> {
    let b: &[u8; 20] = b.try_into().ok()?;
    if b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'Z'
    {
        return None;
    }
    let digits = [
        b[0], b[1], b[2], b[3], b[5], b[6], b[8], b[9], b[11], b[12], b[14], b[15], b[17], b[18],
    ];
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let two = |at: usize| u64::from(b[at] - b'0') * 10 + u64::from(b[at + 1] - b'0');
    let year = two(0) * 100 + two(2);
    if year < 1970 {
        return None; // before the epoch: the general parser
    }
    let (month, day) = (two(5), two(8));
    let (hour, minute, second) = (two(11), two(14), two(17));
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if !(1..=12).contains(&month)
        || day < 1
        || day > month_days
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    // Days since 1970-01-01 (H. Hinnant's days_from_civil), all
    // non-negative from 1970 on, so unsigned arithmetic.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
    SystemTime::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(secs))
}

fn unix_secs(t: SystemTime) -> i128 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i128::from(d.as_secs()),
        Err(e) => -i128::from(e.duration().as_secs()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn by_time_crate(s: &str) -> Option<SystemTime> {
        use time::format_description::well_known::Rfc3339;
        time::OffsetDateTime::parse(s, &Rfc3339)
            .ok()
            .map(SystemTime::from)
    }

    proptest! {
        /// The fast path agrees with the `time` crate wherever it answers.
        #[test]
        fn fast_path_agrees_with_the_time_crate(
            y in 1900i64..2200, mo in 0i64..14, d in 0i64..33, h in 0i64..25, mi in 0i64..61, se in 0i64..61
        ) {
            let s = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{se:02}Z");
            let fast = utc_seconds_fast_path(s.as_bytes());
            if fast.is_some() {
                prop_assert_eq!(fast, by_time_crate(&s), "{}", s);
            }
            prop_assert_eq!(parse_rfc3339(&s), by_time_crate(&s), "{}", s);
        }
    }

    #[test]
    fn instants_saturate_far_in_the_future_and_keep_their_order() {
        let far = Instant::from_origin(Duration::MAX);
        assert_eq!(far.as_nanos(), u64::MAX);
        assert_eq!(Instant::ZERO.saturating_add(Duration::MAX), far);
        assert!(Instant::from_millis(u64::MAX) <= far);
        assert!(Instant::from_origin(Duration::from_secs(1)) < far);
        let t = Instant::from_origin(Duration::new(3, 7));
        assert_eq!(t.since_origin(), Duration::new(3, 7));
        assert_eq!(t + Duration::from_nanos(5) - t, Duration::from_nanos(5));
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!(format!("{:?}", Instant::from_millis(1500)), "Instant(1.5s)");
    }

    #[test]
    fn other_forms_still_parse() {
        for s in [
            "2026-11-29T13:00:04+01:00",
            "2026-11-29T12:00:04.5Z",
            "2026-11-29t12:00:04z",
        ] {
            assert_eq!(parse_rfc3339(s), by_time_crate(s), "{s}");
        }
        assert_eq!(
            format_rfc3339(parse_rfc3339("2028-02-29T23:59:59Z").unwrap()),
            "2028-02-29T23:59:59Z"
        );
        assert_eq!(parse_rfc3339("2027-02-29T00:00:00Z"), None);
        // Bytes just outside '0'..='9' are not digits to the fast path.
        for s in [
            "2026-11-2:T12:00:00Z",
            "2026-1/-29T12:00:00Z",
            "+026-11-29T12:00:00Z",
        ] {
            assert_eq!(utc_seconds_fast_path(s.as_bytes()), None, "{s}");
            assert_eq!(parse_rfc3339(s), by_time_crate(s), "{s}");
        }
    }
}

/// Converts between a process's monotonic instants and the record's
/// absolute times, at one `now`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimeBase {
    /// Unix nanoseconds of `Instant::ZERO` on this process's clocks.
    origin_unix_ns: i128,
}

impl TimeBase {
    pub(crate) fn at(now: Now) -> Self {
        let wall = match now.wall.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i128,
            Err(e) => -(e.duration().as_nanos() as i128),
        };
        TimeBase {
            origin_unix_ns: wall - i128::from(now.instant.as_nanos()),
        }
    }

    /// An instant as Unix nanoseconds.
    pub(crate) fn out(self, t: Instant) -> i64 {
        let v = self.origin_unix_ns + i128::from(t.as_nanos());
        v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// Unix nanoseconds as an instant (one before this process's origin
    /// is its origin: nothing local happened before it).
    pub(crate) fn back(self, unix_ns: i64) -> Instant {
        let local = i128::from(unix_ns) - self.origin_unix_ns;
        Instant::from_nanos(u64::try_from(local.max(0)).unwrap_or(u64::MAX))
    }

    /// Nanoseconds to add to a local instant's nanoseconds to get the
    /// record's (for bucket times).
    pub(crate) fn shift(self) -> i128 {
        self.origin_unix_ns
    }
}
