//! Parsers for untrusted provider input: headers, error bodies, messages.
//!
//! Every function here is total: it never panics, does bounded work on any
//! input, and reports a rejected value with a typed reason rather than
//! turning it into a zero. Nothing here knows about policies or time
//! budgets; the wall clock comes in as an argument where a server speaks in
//! calendar time.

pub mod body;
#[doc(hidden)]
pub mod duration;
#[doc(hidden)]
pub mod message;
pub mod ratelimit;
pub mod request_id;
pub mod retry_after;

use serde::Serialize;
use std::fmt;

/// Values longer than this are rejected unread: no header value we parse is
/// legitimately longer.
pub const MAX_VALUE_LEN: usize = 128;

/// Hints longer than this (about 31 years) mean "longer than any deadline".
pub const MAX_HINT_SECS: u64 = 1_000_000_000;

/// Why a hint (a delay, a date, a count) was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Rejected {
    /// Empty or only whitespace.
    Empty,
    /// Longer than [`MAX_VALUE_LEN`].
    TooLong,
    /// Not UTF-8 / not visible ASCII.
    NotText,
    /// `NaN` or an infinity.
    NotFinite,
    /// A negative number of seconds.
    Negative,
    /// Neither a number nor a date in an accepted form.
    Garbage,
}

impl Rejected {
    /// A short word for notes and records.
    pub const fn as_str(self) -> &'static str {
        match self {
            Rejected::Empty => "empty",
            Rejected::TooLong => "too_long",
            Rejected::NotText => "not_text",
            Rejected::NotFinite => "not_finite",
            Rejected::Negative => "negative",
            Rejected::Garbage => "garbage",
        }
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A header value as trimmed visible ASCII, or why not.
pub(crate) fn header_text(raw: &[u8]) -> Result<&str, Rejected> {
    let trimmed = trim_ows(raw)?;
    // Visible ASCII only, checked on bytes; the UTF-8 check then cannot fail.
    if !trimmed
        .iter()
        .all(|&b| (0x20..0x7f).contains(&b) || b == b'\t')
    {
        return Err(Rejected::NotText);
    }
    std::str::from_utf8(trimmed).map_err(|_| Rejected::NotText)
}

/// [`header_text`] of a header value, without re-validating UTF-8:
/// `HeaderValue::to_str` checks the same visible-ASCII set, so the result
/// and every rejection reason are the same.
pub(crate) fn value_text(value: &http::HeaderValue) -> Result<&str, Rejected> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Rejected::TooLong);
    }
    // An all-OWS value is visible ASCII, so `Empty` still wins over `NotText`
    // exactly as in `header_text` (a non-text byte is never OWS).
    let text = value.to_str().map_err(|_| Rejected::NotText)?;
    let trimmed = text.trim_matches([' ', '\t']);
    if trimmed.is_empty() {
        return Err(Rejected::Empty);
    }
    Ok(trimmed)
}

/// `raw` without optional whitespace around it (RFC 9110 OWS), bounded.
pub(crate) fn trim_ows(raw: &[u8]) -> Result<&[u8], Rejected> {
    if raw.len() > MAX_VALUE_LEN {
        return Err(Rejected::TooLong);
    }
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = raw.iter().position(|b| !is_ows(b)).ok_or(Rejected::Empty)?;
    let end = raw
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |e| e + 1);
    Ok(&raw[start..end])
}

/// Parses a non-negative decimal like `8`, `2.5` or `.5` (digits and at most
/// one dot, no sign, no exponent) into units scaled by `unit_nanos`
/// nanoseconds. Values past [`MAX_HINT_SECS`] saturate to "forever".
pub(crate) fn decimal_duration(s: &str, unit_nanos: u128) -> Result<std::time::Duration, Rejected> {
    let signs = s.bytes().take_while(|b| matches!(b, b'+' | b'-')).count();
    let unsigned = &s[signs..];
    // The words start with n or i: numbers skip the comparisons.
    if matches!(unsigned.as_bytes().first(), Some(b'n' | b'N' | b'i' | b'I'))
        && ["nan", "inf", "infinity"]
            .iter()
            .any(|w| unsigned.eq_ignore_ascii_case(w))
    {
        return Err(Rejected::NotFinite);
    }
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    // 64-bit arithmetic (128-bit multiplication with overflow checks is a
    // call); an integer part past `u64` is "forever" whatever the unit.
    let mut int: u64 = 0;
    let mut huge = false;
    let mut frac_nanos: u64 = 0;
    let mut frac_scale: u64 = 1;
    let mut seen_dot = false;
    let mut seen_digit = false;
    for b in digits.bytes() {
        match b {
            b'0'..=b'9' => {
                seen_digit = true;
                let d = u64::from(b - b'0');
                if seen_dot {
                    if frac_scale < 1_000_000_000 {
                        frac_scale *= 10;
                        frac_nanos = frac_nanos * 10 + d;
                    }
                } else if let Some(n) = int.checked_mul(10).and_then(|n| n.checked_add(d)) {
                    int = n;
                } else {
                    huge = true;
                }
            }
            b'.' if !seen_dot => seen_dot = true,
            _ => return Err(Rejected::Garbage),
        }
    }
    if !seen_digit {
        return Err(Rejected::Garbage);
    }
    // A sign has no place in delta-seconds; "-0" is as wrong as "-5".
    if negative {
        return Err(Rejected::Negative);
    }
    if huge && unit_nanos > 0 {
        return Ok(FOREVER); // at least 2^64 ns: past MAX_HINT_SECS
    }
    // Both factors are below 2^64, so the products cannot overflow; the
    // division is done in 64 bits when it fits (128-bit division is a call).
    let frac = u128::from(frac_nanos) * unit_nanos;
    let frac = match u64::try_from(frac) {
        Ok(n) => u128::from(n / frac_scale),
        Err(_) => frac / u128::from(frac_scale),
    };
    let total = (u128::from(int) * unit_nanos).saturating_add(frac);
    Ok(nanos_to_duration(total))
}

/// Converts nanoseconds to a duration, saturating past [`MAX_HINT_SECS`] to
/// [`FOREVER`].
pub(crate) fn nanos_to_duration(nanos: u128) -> std::time::Duration {
    // Below the saturation point the value fits in 64 bits (1e18 < 2^64):
    // 64-bit division, no call.
    const SATURATES_AT: u64 = (MAX_HINT_SECS + 1) * 1_000_000_000;
    if let Ok(small) = u64::try_from(nanos) {
        if small < SATURATES_AT {
            return std::time::Duration::from_nanos(small);
        }
    }
    let secs = nanos / 1_000_000_000;
    if secs > u128::from(MAX_HINT_SECS) {
        return FOREVER;
    }
    std::time::Duration::new(secs as u64, (nanos % 1_000_000_000) as u32)
}

/// A valid wait too large to represent: longer than any deadline.
pub const FOREVER: std::time::Duration = std::time::Duration::from_secs(MAX_HINT_SECS + 1);

/// `s` cut to at most `max_bytes`, on a character boundary. No allocation.
pub fn clip(s: &str, max_bytes: usize) -> &str {
    if s.len() <= max_bytes {
        return s;
    }
    let mut end = max_bytes;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Byte offset of the first ASCII-case-insensitive match of `needle`
/// (which must be ASCII) in `haystack`. No allocation.
pub(crate) fn find_ignore_ascii_case(haystack: &str, needle: &str) -> Option<usize> {
    let (h, n) = (haystack.as_bytes(), needle.as_bytes());
    if n.is_empty() {
        return Some(0);
    }
    let last_start = h.len().checked_sub(n.len())?;
    let (lo, up) = (n[0].to_ascii_lowercase(), n[0].to_ascii_uppercase());
    // Jump between candidate first bytes with memchr instead of testing every offset.
    memchr::memchr2_iter(lo, up, &h[..last_start + 1])
        .find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

/// Does `haystack` contain `needle`, ignoring ASCII case?
pub(crate) fn contains_ignore_ascii_case(haystack: &str, needle: &str) -> bool {
    find_ignore_ascii_case(haystack, needle).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    /// The former all-128-bit conversion, as the oracle.
    fn nanos_to_duration_128(nanos: u128) -> Duration {
        let secs = nanos / 1_000_000_000;
        if secs > u128::from(MAX_HINT_SECS) {
            return FOREVER;
        }
        Duration::new(secs as u64, (nanos % 1_000_000_000) as u32)
    }

    /// The former all-128-bit decimal reader, as the oracle.
    fn decimal_duration_128(s: &str, unit_nanos: u128) -> Result<std::time::Duration, Rejected> {
        let unsigned = s.trim_start_matches(['+', '-']);
        // The words start with n or i: numbers skip the comparisons.
        if matches!(unsigned.as_bytes().first(), Some(b'n' | b'N' | b'i' | b'I'))
            && ["nan", "inf", "infinity"]
                .iter()
                .any(|w| unsigned.eq_ignore_ascii_case(w))
        {
            return Err(Rejected::NotFinite);
        }
        let (negative, digits) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let mut int: u128 = 0;
        let mut frac_nanos: u128 = 0;
        let mut frac_scale: u128 = 1;
        let mut seen_dot = false;
        let mut seen_digit = false;
        for b in digits.bytes() {
            match b {
                b'0'..=b'9' => {
                    seen_digit = true;
                    let d = u128::from(b - b'0');
                    if seen_dot {
                        if frac_scale < 1_000_000_000 {
                            frac_scale *= 10;
                            frac_nanos = frac_nanos * 10 + d;
                        }
                    } else {
                        int = int.saturating_mul(10).saturating_add(d);
                    }
                }
                b'.' if !seen_dot => seen_dot = true,
                _ => return Err(Rejected::Garbage),
            }
        }
        if !seen_digit {
            return Err(Rejected::Garbage);
        }
        // A sign has no place in delta-seconds; "-0" is as wrong as "-5".
        if negative {
            return Err(Rejected::Negative);
        }
        // Both factors are below 2^64, so the product cannot overflow; the
        // division is done in 64 bits when it fits (128-bit division is a call).
        let frac = frac_nanos * unit_nanos;
        let frac = match (u64::try_from(frac), u64::try_from(frac_scale)) {
            (Ok(n), Ok(d)) => u128::from(n / d),
            _ => frac / frac_scale,
        };
        let total = int.saturating_mul(unit_nanos).saturating_add(frac);
        Ok(nanos_to_duration_128(total))
    }

    proptest! {
        /// Any string over the characters that matter reads as before.
        #[test]
        fn decimal_duration_is_the_128_bit_one(
            s in "[0-9.+-]{0,30}|[0-9]{15,45}(\\.[0-9]{0,12})?|[+-]?(nan|inf|infinity|NaN|Inf|nanx)",
            unit in prop::sample::select(vec![0u128, 1, 1_000, 1_000_000, 1_000_000_000, 60_000_000_000, 3_600_000_000_000]),
        ) {
            prop_assert_eq!(decimal_duration(&s, unit), decimal_duration_128(&s, unit), "{}", s);
        }

        #[test]
        fn nanos_to_duration_is_the_128_bit_one(
            nanos in prop_oneof![
                any::<u128>(),
                any::<u64>().prop_map(u128::from),
                (0u128..4).prop_map(|d| u128::from(MAX_HINT_SECS + 1) * 1_000_000_000 + d - 2),
            ]
        ) {
            prop_assert_eq!(nanos_to_duration(nanos), nanos_to_duration_128(nanos));
        }

        /// Decimal parsing against the exact arithmetic on the digits.
        #[test]
        fn decimal_duration_is_exact(
            int in 0u64..100_000_000_000,
            frac in "[0-9]{0,12}",
            unit in prop::sample::select(vec![1u128, 1_000, 1_000_000, 1_000_000_000, 60_000_000_000, 3_600_000_000_000]),
        ) {
            let s = if frac.is_empty() { int.to_string() } else { format!("{int}.{frac}") };
            let kept = &frac[..frac.len().min(9)];
            let scale = 10u128.pow(kept.len() as u32);
            let frac_nanos: u128 = kept.parse().unwrap_or(0);
            let nanos = u128::from(int) * unit + frac_nanos * unit / scale;
            prop_assert_eq!(decimal_duration(&s, unit), Ok(nanos_to_duration_128(nanos)), "{}", s);
        }
    }

    #[test]
    fn words_are_not_finite() {
        for s in ["nan", "NaN", "-inf", "+Infinity", "INF"] {
            assert_eq!(decimal_duration(s, 1), Err(Rejected::NotFinite), "{s}");
        }
        assert_eq!(decimal_duration("nanx", 1), Err(Rejected::Garbage));
        assert_eq!(decimal_duration("-5", 1), Err(Rejected::Negative));
    }
}
