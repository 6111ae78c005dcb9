//! Quotas longer than a minute: a day's or a month's allowance spent is
//! not a wait of seconds (DESIGN: a per-day or per-month quota defers to
//! its documented reset, or is answered at once when the caller's deadline
//! comes first). Which window ran out comes from the provider's profile;
//! when it resets comes from its header, else from the calendar.

use super::{Hint, Hints};
use crate::note::Note;
use crate::parse::ratelimit::Window;
use crate::parse::retry_after::HintSource;
use std::time::{Duration, SystemTime};

/// How long a spent quota lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Period {
    /// Until the next 00:00 UTC, unless the provider says otherwise.
    Day,
    /// Until the first day of the next month, 00:00 UTC.
    Month,
}

impl Period {
    fn name(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Month => "month",
        }
    }

    /// When the period after `now` starts (UTC calendar).
    pub(super) fn next_start(self, now: SystemTime) -> SystemTime {
        let t = time::OffsetDateTime::from(now);
        let date = t.date();
        let next = match self {
            Period::Day => date.next_day(),
            Period::Month => {
                let (year, month) = match date.month() {
                    time::Month::December => (date.year() + 1, time::Month::January),
                    m => (date.year(), m.next()),
                };
                time::Date::from_calendar_date(year, month, 1).ok()
            }
        };
        next.map_or(now + Duration::from_secs(86_400), |d| {
            SystemTime::from(d.midnight().assume_utc())
        })
    }
}

/// Turns a 429's wait into the quota's reset: the window's own reset when
/// the provider published one (Groq's `x-ratelimit-reset-requests`), else
/// the start of the next `period`. The stop lifts at that instant.
pub(super) fn defer_to_reset(
    who: &str,
    period: Period,
    window: Option<&Window>,
    hints: &mut Hints,
    wall_now: SystemTime,
    notes: &mut Vec<Note>,
) {
    let published = window.and_then(|w| w.reset).map(|r| r.wait_from(wall_now));
    let wait = published
        .unwrap_or_else(|| {
            period
                .next_start(wall_now)
                .duration_since(wall_now)
                .unwrap_or(Duration::ZERO)
        })
        .max(Duration::from_secs(1));
    hints.wait = Some(Hint {
        source: HintSource::QuotaReset,
        wait,
    });
    hints.resume_at = Some(wall_now + wait);
    let when = if published.is_some() {
        "when its reset header says"
    } else {
        "at the start of the next UTC calendar period"
    };
    notes.push(
        format!(
            "{who}: a per-{} quota is spent: it comes back {when}, not after a per-minute wait",
            period.name()
        )
        .into(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::{format_rfc3339, parse_rfc3339};

    #[test]
    fn the_next_day_and_month_start_at_midnight_utc() {
        let at = |s: &str| parse_rfc3339(s).unwrap();
        let now = at("2026-12-31T23:59:59Z");
        assert_eq!(
            format_rfc3339(Period::Day.next_start(now)),
            "2027-01-01T00:00:00Z"
        );
        assert_eq!(
            format_rfc3339(Period::Month.next_start(now)),
            "2027-01-01T00:00:00Z"
        );
        let now = at("2028-02-10T08:00:00Z");
        assert_eq!(
            format_rfc3339(Period::Month.next_start(now)),
            "2028-03-01T00:00:00Z"
        );
        assert_eq!(
            format_rfc3339(Period::Day.next_start(at("2026-12-04T00:00:00Z"))),
            "2026-12-05T00:00:00Z"
        );
    }
}
