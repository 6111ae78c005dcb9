//! `Retry-After`, `retry-after-ms` and `x-should-retry`.
//!
//! `Retry-After` is delta-seconds or an HTTP-date (RFC 9110 §10.2.3);
//! decimal seconds (`2.5`) are accepted because real servers send them.
//! `retry-after-ms` is the OpenAI/Anthropic SDKs' millisecond variant.

use super::{decimal_duration, header_text, value_text, Rejected};
use http::{HeaderMap, HeaderValue};
use std::time::{Duration, SystemTime};

/// Parses one `Retry-After` value. An HTTP-date (any of the three RFC 9110
/// forms) is measured from `wall_now`; a date in the past means "now".
///
/// ```
/// use ratewise_core::parse::retry_after::parse_retry_after;
/// use std::time::{Duration, SystemTime};
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_953_600);
/// assert_eq!(parse_retry_after(b" 8 ", now), Ok(Duration::from_secs(8)));
/// assert_eq!(parse_retry_after(b"2.5", now), Ok(Duration::from_millis(2500)));
/// assert!(parse_retry_after(b"NaN", now).is_err());
/// ```
pub fn parse_retry_after(raw: &[u8], wall_now: SystemTime) -> Result<Duration, Rejected> {
    retry_after_of_text(header_text(raw)?, wall_now)
}

/// A `Retry-After` value as sent: a delay, or an instant (HTTP-date).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryAfterValue {
    /// Delta-seconds (decimal accepted).
    Delay(Duration),
    /// An HTTP-date, in any of the three RFC 9110 forms.
    At(SystemTime),
}

/// Reads one `Retry-After` value without measuring a date against a
/// clock: for code that moves the hint into another frame (a proxy, a
/// scaled test clock) before it is used. Same acceptance rules as
/// [`parse_retry_after`].
///
/// ```
/// use ratewise_core::parse::retry_after::{parse_retry_after_value, RetryAfterValue};
/// use std::time::Duration;
/// assert_eq!(
///     parse_retry_after_value(b"2.5"),
///     Ok(RetryAfterValue::Delay(Duration::from_millis(2500)))
/// );
/// assert!(matches!(
///     parse_retry_after_value(b"Sun, 06 Nov 1994 08:49:37 GMT"),
///     Ok(RetryAfterValue::At(_))
/// ));
/// assert!(parse_retry_after_value(b"1e3").is_err());
/// ```
pub fn parse_retry_after_value(raw: &[u8]) -> Result<RetryAfterValue, Rejected> {
    retry_after_value_of_text(header_text(raw)?)
}

fn retry_after_value_of_text(s: &str) -> Result<RetryAfterValue, Rejected> {
    match decimal_duration(s, 1_000_000_000) {
        Ok(d) => Ok(RetryAfterValue::Delay(d)),
        Err(Rejected::Garbage) => httpdate::parse_http_date(s)
            .map(RetryAfterValue::At)
            .map_err(|_| Rejected::Garbage),
        Err(other) => Err(other),
    }
}

/// [`parse_retry_after`] of a value already trimmed and checked as text.
fn retry_after_of_text(s: &str, wall_now: SystemTime) -> Result<Duration, Rejected> {
    match retry_after_value_of_text(s)? {
        RetryAfterValue::Delay(d) => Ok(d),
        // Centuries ahead saturate like absurd numbers: "longer than any deadline".
        RetryAfterValue::At(at) => Ok(super::nanos_to_duration(
            at.duration_since(wall_now)
                .unwrap_or(Duration::ZERO)
                .as_nanos(),
        )),
    }
}

/// Parses one `retry-after-ms` value (decimal milliseconds).
pub fn parse_retry_after_ms(raw: &[u8]) -> Result<Duration, Rejected> {
    decimal_duration(header_text(raw)?, 1_000_000)
}

/// Parses `x-should-retry`: `true` or `false`, any case.
pub fn parse_should_retry(raw: &[u8]) -> Result<bool, Rejected> {
    should_retry_of_text(header_text(raw)?)
}

fn should_retry_of_text(s: &str) -> Result<bool, Rejected> {
    if s.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if s.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(Rejected::Garbage)
    }
}

/// `retry-after-ms`, the SDKs' millisecond variant of `Retry-After`.
pub(crate) const RETRY_AFTER_MS: http::HeaderName = http::HeaderName::from_static("retry-after-ms");
/// `x-should-retry`, the provider's own retry verdict.
pub const X_SHOULD_RETRY: http::HeaderName = http::HeaderName::from_static("x-should-retry");

/// Where a wait hint came from, in the order of trust.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HintSource {
    /// `retry-after-ms`.
    RetryAfterMs,
    /// `Retry-After` in (decimal) seconds or as an HTTP-date.
    RetryAfter,
    /// "Please try again in 1.146s" in an OpenAI message.
    Message,
    /// The provider's reset header for the limited dimension.
    ResetHeader,
    /// Google's `RetryInfo.retryDelay` detail.
    RetryInfo,
    /// A per-day quota's documented reset (Gemini: midnight Pacific).
    QuotaReset,
}

impl HintSource {
    /// The header or place the hint was read from.
    pub const fn as_str(self) -> &'static str {
        match self {
            HintSource::RetryAfterMs => "retry-after-ms",
            HintSource::RetryAfter => "retry-after",
            HintSource::Message => "message",
            HintSource::ResetHeader => "reset-header",
            HintSource::RetryInfo => "retry-info",
            HintSource::QuotaReset => "quota-reset",
        }
    }
}

/// The retry-related headers of one response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetryHeaders {
    /// `retry-after-ms`, when present: parsed or rejected.
    pub retry_after_ms: Option<Result<Duration, Rejected>>,
    /// `Retry-After`, when present: parsed or rejected.
    pub retry_after: Option<Result<Duration, Rejected>>,
    /// `x-should-retry`, when present: parsed or rejected.
    pub should_retry: Option<Result<bool, Rejected>>,
}

impl RetryHeaders {
    /// Reads the three headers (the first value of each).
    pub fn from_headers(headers: &HeaderMap, wall_now: SystemTime) -> Self {
        RetryHeaders {
            retry_after_ms: headers
                .get(RETRY_AFTER_MS)
                .map(|v| parse_retry_after_ms(v.as_bytes())),
            retry_after: headers
                .get(http::header::RETRY_AFTER)
                .map(|v| parse_retry_after(v.as_bytes(), wall_now)),
            should_retry: headers
                .get(X_SHOULD_RETRY)
                .map(|v| parse_should_retry(v.as_bytes())),
        }
    }

    /// Reads one header when it is one of the three (true). Only the first
    /// value of each counts, as with `HeaderMap::get`, so one pass over a
    /// response's headers in their order gives the same result.
    pub(crate) fn read_header(
        &mut self,
        name: &str,
        value: &HeaderValue,
        wall_now: SystemTime,
    ) -> bool {
        let text = || value_text(value);
        match name {
            "retry-after" => {
                if self.retry_after.is_none() {
                    self.retry_after = Some(text().and_then(|s| retry_after_of_text(s, wall_now)));
                }
            }
            "retry-after-ms" => {
                if self.retry_after_ms.is_none() {
                    self.retry_after_ms = Some(text().and_then(|s| decimal_duration(s, 1_000_000)));
                }
            }
            "x-should-retry" => {
                if self.should_retry.is_none() {
                    self.should_retry = Some(text().and_then(should_retry_of_text));
                }
            }
            _ => return false,
        }
        true
    }

    /// The most trusted valid header hint, if any.
    pub fn best(&self) -> Option<(HintSource, Duration)> {
        if let Some(Ok(d)) = self.retry_after_ms {
            return Some((HintSource::RetryAfterMs, d));
        }
        if let Some(Ok(d)) = self.retry_after {
            return Some((HintSource::RetryAfter, d));
        }
        None
    }

    /// Header hints that were present but rejected, with the reason.
    pub fn rejected(&self) -> Vec<(HintSource, Rejected)> {
        let mut out = Vec::new();
        if let Some(Err(r)) = self.retry_after_ms {
            out.push((HintSource::RetryAfterMs, r));
        }
        if let Some(Err(r)) = self.retry_after {
            out.push((HintSource::RetryAfter, r));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> SystemTime {
        // 2026-11-29T12:00:00Z
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_953_600)
    }

    #[test]
    fn delta_seconds_and_decimals() {
        assert_eq!(parse_retry_after(b"0", now()), Ok(Duration::ZERO));
        assert_eq!(
            parse_retry_after(b"\t120 ", now()),
            Ok(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after(b".5", now()),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(parse_retry_after(b"+3", now()), Ok(Duration::from_secs(3)));
    }

    #[test]
    fn all_three_http_date_forms() {
        let later = Duration::from_secs(30);
        for form in [
            "Sun, 29 Nov 2026 12:00:30 GMT",
            "Sunday, 29-Nov-26 12:00:30 GMT",
            "Sun Nov 29 12:00:30 2026",
        ] {
            assert_eq!(
                parse_retry_after(form.as_bytes(), now()),
                Ok(later),
                "{form}"
            );
        }
        assert_eq!(
            parse_retry_after(b"Sun, 29 Nov 2026 11:00:00 GMT", now()),
            Ok(Duration::ZERO)
        );
    }

    #[test]
    fn rejects_invalid_values_with_reasons() {
        assert_eq!(parse_retry_after(b"NaN", now()), Err(Rejected::NotFinite));
        assert_eq!(parse_retry_after(b"-inf", now()), Err(Rejected::NotFinite));
        assert_eq!(parse_retry_after(b"inf", now()), Err(Rejected::NotFinite));
        assert_eq!(parse_retry_after(b"-5", now()), Err(Rejected::Negative));
        assert_eq!(parse_retry_after(b"soon", now()), Err(Rejected::Garbage));
        assert_eq!(parse_retry_after(b"1e3", now()), Err(Rejected::Garbage));
        assert_eq!(parse_retry_after(b"", now()), Err(Rejected::Empty));
        assert_eq!(
            parse_retry_after(&[0xff, 0xfe], now()),
            Err(Rejected::NotText)
        );
        assert_eq!(
            parse_retry_after(&[b'9'; 500], now()),
            Err(Rejected::TooLong)
        );
    }

    #[test]
    fn absurd_is_forever_not_zero() {
        assert_eq!(
            parse_retry_after(b"99999999999999999999999", now()),
            Ok(crate::parse::FOREVER)
        );
    }

    #[test]
    fn far_future_dates_are_forever_too() {
        assert_eq!(
            parse_retry_after(b"Thu, 01 Jan 2826 00:00:00 GMT", now()),
            Ok(crate::parse::FOREVER)
        );
    }

    #[test]
    fn retry_after_ms_and_should_retry() {
        assert_eq!(
            parse_retry_after_ms(b"1500"),
            Ok(Duration::from_millis(1500))
        );
        assert_eq!(
            parse_retry_after_ms(b"2.5"),
            Ok(Duration::from_micros(2500))
        );
        assert_eq!(parse_should_retry(b"FALSE"), Ok(false));
        assert_eq!(parse_should_retry(b"yes"), Err(Rejected::Garbage));
    }

    #[test]
    fn ms_header_is_trusted_first() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", "8".parse().unwrap());
        h.insert("retry-after-ms", "8400".parse().unwrap());
        let r = RetryHeaders::from_headers(&h, now());
        assert_eq!(
            r.best(),
            Some((HintSource::RetryAfterMs, Duration::from_millis(8400)))
        );
    }
}
