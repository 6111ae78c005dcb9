//! Target `openai_reset`: OpenAI's Go-style reset durations (`6m0s`,
//! `1.146s`, `84ms`) as they arrive in `x-ratelimit-reset-*` headers and in
//! "Please try again in ..." messages.
//!
//! Properties beyond "no panic":
//! - a parsed duration round-trips through `format_go_duration` exactly
//!   (every parsed value, to the nanosecond, `FOREVER` included);
//! - any duration up to the hint ceiling, built from the input's first
//!   eight bytes, round-trips format → parse;
//! - the header path (`x-ratelimit-reset-tokens`) agrees with the bare
//!   parser, and the message scanner never panics on the same text.

use http::{HeaderMap, HeaderValue};
use ratewise_core::parse::duration::{format_go_duration, parse_go_duration};
use ratewise_core::parse::message::try_again_in;
use ratewise_core::parse::ratelimit::{RateLimitSnapshot, Reset};
use ratewise_core::parse::{FOREVER, MAX_HINT_SECS};
use ratewise_core::Provider;
use std::time::Duration;

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    if data.len() >= 8 {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(&data[..8]);
        let nanos = u64::from_le_bytes(raw) % ((MAX_HINT_SECS + 1) * 1_000_000_000);
        let d = Duration::from_nanos(nanos);
        assert_eq!(parse_go_duration(&format_go_duration(d)), Ok(d), "{d:?}");
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = parse_go_duration(text);
    if let Ok(d) = parsed {
        assert!(d <= FOREVER);
        let formatted = format_go_duration(d);
        assert_eq!(
            parse_go_duration(&formatted),
            Ok(d),
            "{text:?} -> {formatted}"
        );
    }
    if let Ok(value) = HeaderValue::from_str(text) {
        let mut h = HeaderMap::new();
        h.insert("x-ratelimit-reset-tokens", value);
        let snap = RateLimitSnapshot::from_headers(&h, Provider::Openai);
        match parsed {
            Ok(d) => assert_eq!(snap.tokens.reset, Some(Reset::After(d))),
            Err(reason) => {
                assert_eq!(snap.tokens.reset, None);
                assert_eq!(snap.rejected.len(), 1);
                assert_eq!(snap.rejected[0].1, reason);
            }
        }
    }
    let message = format!("Rate limit reached. Please try again in {text}. Visit ...");
    if let Some(Ok(d)) = try_again_in(&message) {
        assert!(d <= FOREVER);
    }
}
