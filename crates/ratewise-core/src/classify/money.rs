//! Money stops everything: when a stop lifts. (Which messages mean money is
//! [`super::money_message`].)

use crate::vocab::{Cause, Provider};
use std::time::SystemTime;

/// When a money stop lifts by itself: the date in the message ("You will
/// regain access on 2026-12-01 at 00:00 UTC"), else for Anthropic's monthly
/// spend cap 00:00 UTC on the 1st of next month. `None`: a human resumes.
pub(super) fn resume_at(
    provider: Provider,
    cause: Cause,
    message: Option<&str>,
    wall_now: SystemTime,
) -> Option<SystemTime> {
    let stated = message.and_then(regain_access_on);
    match (cause, provider) {
        (Cause::SpendCap, Provider::Anthropic) => {
            stated.or_else(|| Some(first_of_next_month_utc(wall_now)))
        }
        (Cause::UserLimit, _) => stated,
        _ => None,
    }
}

/// "regain access on 2026-12-01 at 00:00 UTC" → that instant. Seconds are
/// kept when the time has them ("at 12:30:45"): a resume is never earlier
/// than the server said.
fn regain_access_on(message: &str) -> Option<SystemTime> {
    let at = message.find("regain access on ")? + "regain access on ".len();
    let rest = message.get(at..)?;
    let date = rest.get(..10)?;
    let clock = rest.get(10..).and_then(|r| r.strip_prefix(" at "));
    let hm = clock.and_then(|r| r.get(..5)).unwrap_or("00:00");
    let sec = clock
        .and_then(|r| r.get(5..8))
        .and_then(|s| s.strip_prefix(':'))
        .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        .unwrap_or("00");
    crate::time::parse_rfc3339(&format!("{date}T{hm}:{sec}Z"))
}

/// 00:00 UTC on the first day of the month after `now`.
pub(crate) fn first_of_next_month_utc(now: SystemTime) -> SystemTime {
    let odt = time::OffsetDateTime::from(now);
    let (year, month) = match odt.month() {
        time::Month::December => (odt.year() + 1, time::Month::January),
        m => (odt.year(), m.next()),
    };
    time::Date::from_calendar_date(year, month, 1)
        .map(|d| SystemTime::from(d.midnight().assume_utc()))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::{format_rfc3339, parse_rfc3339};

    #[test]
    fn next_month_rolls_over_the_year() {
        let dec = parse_rfc3339("2026-12-31T23:59:59Z").unwrap();
        assert_eq!(
            format_rfc3339(first_of_next_month_utc(dec)),
            "2027-01-01T00:00:00Z"
        );
        let nov = parse_rfc3339("2026-11-29T12:00:00Z").unwrap();
        assert_eq!(
            format_rfc3339(first_of_next_month_utc(nov)),
            "2026-12-01T00:00:00Z"
        );
    }

    #[test]
    fn stated_date_is_read() {
        let t = regain_access_on("You will regain access on 2026-12-15 at 08:30 UTC.").unwrap();
        assert_eq!(format_rfc3339(t), "2026-12-15T08:30:00Z");
        let t = regain_access_on("You will regain access on 2026-09-01 at 12:30:45 UTC").unwrap();
        assert_eq!(format_rfc3339(t), "2026-09-01T12:30:45Z");
        let t = regain_access_on("You will regain access on 2026-09-01 at 00:00 (UTC).").unwrap();
        assert_eq!(format_rfc3339(t), "2026-09-01T00:00:00Z");
        assert_eq!(
            regain_access_on("regain access on 2026-09-01 at 00:00:é"),
            regain_access_on("regain access on 2026-09-01 at 00:00")
        );
        assert_eq!(regain_access_on("regain access on soon"), None);
        assert_eq!(regain_access_on("regain access on é"), None);
    }
}
