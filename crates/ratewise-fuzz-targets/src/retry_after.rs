//! Target `retry_after`: one `Retry-After` / `retry-after-ms` /
//! `x-should-retry` value, as raw header bytes.
//!
//! Properties beyond "no panic":
//! - a parsed delay round-trips: formatting it as decimal seconds (for
//!   `Retry-After`) or decimal milliseconds (for `retry-after-ms`) and
//!   parsing that again gives the same [`Duration`], to the nanosecond,
//!   except that anything past [`MAX_HINT_SECS`] reads back as [`FOREVER`]
//!   (decimal values and HTTP-dates centuries ahead both saturate there:
//!   "longer than any deadline");
//! - surrounding spaces and tabs never change the result;
//! - a later wall clock never lengthens the wait (HTTP-dates only shrink,
//!   delta-seconds do not move);
//! - reading through a [`HeaderMap`] agrees with the bare parsers, and the
//!   best hint prefers `retry-after-ms`.

use crate::REFERENCE_NOW_SECS;
use http::{HeaderMap, HeaderValue};
use ratewise_core::parse::retry_after::{
    parse_retry_after, parse_retry_after_ms, parse_should_retry, HintSource, RetryHeaders,
};
use ratewise_core::parse::{Rejected, FOREVER, MAX_HINT_SECS, MAX_VALUE_LEN};
use std::time::{Duration, SystemTime};

/// `d` as decimal seconds with every nanosecond kept (`2.5`, `8`).
pub fn format_seconds(d: Duration) -> String {
    decimal(u128::from(d.as_secs()), u128::from(d.subsec_nanos()), 9)
}

/// `d` as decimal milliseconds with every nanosecond kept (`1500`, `2.5`).
pub fn format_millis(d: Duration) -> String {
    let nanos = d.as_nanos();
    decimal(nanos / 1_000_000, nanos % 1_000_000, 6)
}

fn decimal(int: u128, frac: u128, width: usize) -> String {
    if frac == 0 {
        return int.to_string();
    }
    let digits = format!("{frac:0width$}");
    format!("{int}.{}", digits.trim_end_matches('0'))
}

/// What a decimal value of `d` parses back as: `d`, or [`FOREVER`] past
/// the hint ceiling.
pub fn saturated(d: Duration) -> Duration {
    if d.as_secs() > MAX_HINT_SECS {
        FOREVER
    } else {
        d
    }
}

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(REFERENCE_NOW_SECS);
    let later = now + Duration::from_secs(1);

    let secs = parse_retry_after(data, now);
    if let Ok(d) = secs {
        let again = parse_retry_after(format_seconds(d).as_bytes(), now);
        assert_eq!(again, Ok(saturated(d)), "Retry-After round trip of {d:?}");
        match parse_retry_after(data, later) {
            Ok(l) => assert!(l <= d, "a later clock lengthened the wait: {l:?} > {d:?}"),
            Err(e) => panic!("parsed at now but not a second later: {e:?}"),
        }
    }
    let ms = parse_retry_after_ms(data);
    if let Ok(d) = ms {
        assert_eq!(
            parse_retry_after_ms(format_millis(d).as_bytes()),
            Ok(d),
            "retry-after-ms round trip of {d:?}"
        );
        assert!(d <= FOREVER);
    }
    let should = parse_should_retry(data);
    if let Ok(v) = should {
        let text = std::str::from_utf8(data).expect("accepted text is UTF-8");
        assert!(text
            .trim()
            .eq_ignore_ascii_case(if v { "true" } else { "false" }));
    }

    // Padding with the whitespace the parser trims changes nothing.
    if data.len() + 2 <= MAX_VALUE_LEN {
        let mut padded = Vec::with_capacity(data.len() + 2);
        padded.push(b' ');
        padded.extend_from_slice(data);
        padded.push(b'\t');
        assert_eq!(parse_retry_after(&padded, now), secs);
        assert_eq!(parse_retry_after_ms(&padded), ms);
        assert_eq!(parse_should_retry(&padded), should);
    }
    if data.len() > MAX_VALUE_LEN {
        assert_eq!(secs, Err(Rejected::TooLong));
    }

    // Through a header map, as classification reads them.
    if let Ok(value) = HeaderValue::from_bytes(data) {
        let mut h = HeaderMap::new();
        h.insert(http::header::RETRY_AFTER, value.clone());
        h.insert("retry-after-ms", value.clone());
        h.insert("x-should-retry", value);
        let r = RetryHeaders::from_headers(&h, now);
        assert_eq!(r.retry_after, Some(secs));
        assert_eq!(r.retry_after_ms, Some(ms));
        assert_eq!(r.should_retry, Some(should));
        match (ms, r.best()) {
            (Ok(d), best) => assert_eq!(best, Some((HintSource::RetryAfterMs, d))),
            (Err(_), best) => assert_eq!(best, secs.ok().map(|d| (HintSource::RetryAfter, d))),
        }
        let rejected = r.rejected();
        assert_eq!(
            rejected.len(),
            usize::from(ms.is_err()) + usize::from(secs.is_err())
        );
    }
}
