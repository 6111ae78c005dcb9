//! Helpers shared by the core's integration tests: a fixed wall clock and
//! real responses classified by the core.
#![allow(dead_code)]

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use ratewise_core::classify::{classify_response, Classification, ResponseView};
use ratewise_core::{Instant, Now, Provider};
use std::time::Duration;

/// `ms` milliseconds after 2026-11-29T12:00:00Z, on both clocks.
pub fn now_at(ms: u64) -> Now {
    let wall0 = ratewise_core::time::parse_rfc3339("2026-11-29T12:00:00Z").unwrap();
    Now::new(Instant::from_millis(ms), wall0 + Duration::from_millis(ms))
}

/// A response with these status, headers and body, classified as
/// `provider`'s at `now`.
pub fn classify(
    provider: Provider,
    status: u16,
    headers: &[(&str, &str)],
    body: &str,
    now: Now,
) -> Classification {
    let mut h = HeaderMap::new();
    for (k, v) in headers {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    let view = ResponseView {
        status: StatusCode::from_u16(status).unwrap(),
        headers: &h,
        body: body.as_bytes(),
    };
    classify_response(provider, &view, now.wall)
}
