//! Workspace-internal: used by ratewise's own crates; not part of the public API and not covered by semver.
//! (The Go-duration parser behind the rate-limit and message parsers.)
//!
//! Go-style durations as OpenAI sends them in `x-ratelimit-reset-*` and in
//! messages: `1s`, `6m0s`, `16m17.764s`, `84ms`, `1h2m`, `250us`, `0s`.

use super::{header_text, nanos_to_duration, Rejected};
use std::time::Duration;

/// Parses a Go-style duration: one or more `<decimal><unit>` groups with
/// units `h`, `m`, `s`, `ms`, `us`/`µs`, `ns`. No sign (a negative reset
/// is rejected), no bare numbers except `0`.
///
/// ```
/// use ratewise_core::parse::duration::parse_go_duration;
/// use std::time::Duration;
/// assert_eq!(parse_go_duration("16m17.764s"), Ok(Duration::from_millis(977_764)));
/// assert_eq!(parse_go_duration("84ms"), Ok(Duration::from_millis(84)));
/// assert!(parse_go_duration("soon").is_err());
/// ```
pub fn parse_go_duration(s: &str) -> Result<Duration, Rejected> {
    go_duration_of_text(header_text(s.as_bytes())?)
}

/// [`parse_go_duration`] of a value already trimmed and checked as visible
/// ASCII (by `header_text` or `value_text`, which leave such a value as is).
pub(crate) fn go_duration_of_text(s: &str) -> Result<Duration, Rejected> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.starts_with('-') {
        return Err(Rejected::Negative);
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    let head = s.get(..3).unwrap_or("");
    if head.eq_ignore_ascii_case("nan") || head.eq_ignore_ascii_case("inf") {
        return Err(Rejected::NotFinite);
    }
    let mut rest = s;
    let mut total_nanos: u128 = 0;
    let mut groups = 0;
    while !rest.is_empty() {
        let num_len = rest
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b'.')
            .count();
        if num_len == 0 {
            return Err(Rejected::Garbage);
        }
        let (num, after) = rest.split_at(num_len);
        let unit_len = after
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(after.len(), |(i, _)| i);
        let (unit, next) = after.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "h" => 3_600_000_000_000,
            "m" => 60_000_000_000,
            "s" => 1_000_000_000,
            "ms" => 1_000_000,
            "us" | "µs" | "μs" => 1_000,
            "ns" => 1,
            _ => return Err(Rejected::Garbage),
        };
        let part = super::decimal_duration(num, unit_nanos)?;
        total_nanos = total_nanos.saturating_add(part.as_nanos());
        groups += 1;
        rest = next;
    }
    if groups == 0 {
        return Err(Rejected::Garbage);
    }
    Ok(nanos_to_duration(total_nanos))
}

/// Formats a duration the way Go (and OpenAI) print it: `1s`, `6m0s`,
/// `16m17.764s`, `84ms`. `parse_go_duration(&format_go_duration(d))` gives
/// back `d` for every duration of whole microseconds, the property the fuzz
/// target checks.
pub fn format_go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000_000_000 {
        return if nanos.is_multiple_of(1_000_000) {
            format!("{}ms", nanos / 1_000_000)
        } else if nanos.is_multiple_of(1_000) {
            format!("{}us", nanos / 1_000)
        } else {
            format!("{nanos}ns")
        };
    }
    let total_secs = d.as_secs();
    let (h, m, s) = (total_secs / 3600, (total_secs / 60) % 60, total_secs % 60);
    let frac = d.subsec_nanos();
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if frac == 0 {
        out.push_str(&format!("{s}s"));
    } else {
        let digits = format!("{frac:09}");
        out.push_str(&format!("{s}.{}s", digits.trim_end_matches('0')));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_examples() {
        assert_eq!(parse_go_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_go_duration("6m0s"), Ok(Duration::from_secs(360)));
        assert_eq!(parse_go_duration("1.146s"), Ok(Duration::from_millis(1146)));
        assert_eq!(parse_go_duration("1h2m3s"), Ok(Duration::from_secs(3723)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("250us"), Ok(Duration::from_micros(250)));
    }

    #[test]
    fn rejects_with_reasons() {
        assert_eq!(parse_go_duration(""), Err(Rejected::Empty));
        assert_eq!(parse_go_duration("-1s"), Err(Rejected::Negative));
        assert_eq!(parse_go_duration("NaNs"), Err(Rejected::NotFinite));
        assert_eq!(parse_go_duration("12"), Err(Rejected::Garbage));
        assert_eq!(parse_go_duration("1x"), Err(Rejected::Garbage));
        assert_eq!(parse_go_duration("s"), Err(Rejected::Garbage));
        assert_eq!(parse_go_duration("1..2s"), Err(Rejected::Garbage));
    }

    #[test]
    fn absurd_saturates_to_forever() {
        assert_eq!(
            parse_go_duration("99999999999999999999h"),
            Ok(crate::parse::FOREVER)
        );
    }

    #[test]
    fn format_round_trips() {
        for d in [
            Duration::from_millis(84),
            Duration::from_millis(977_764),
            Duration::from_secs(360),
            Duration::from_micros(1_500_250),
            Duration::from_secs(7 * 3600 + 5),
        ] {
            assert_eq!(parse_go_duration(&format_go_duration(d)), Ok(d), "{d:?}");
        }
        assert_eq!(format_go_duration(Duration::from_secs(360)), "6m0s");
    }
}
