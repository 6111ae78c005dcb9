//! One pass over a response's headers for everything the classifier reads.
//!
//! Looking each header up by name hashes the name every time; a typical
//! Anthropic 429 carries a dozen headers and the classifier wants five
//! names plus two families, so walking the map once and dispatching on the
//! name is cheaper. The readers are the public ones'
//! ([`RetryHeaders::from_headers`], [`RateLimitSnapshot::from_headers`],
//! [`request_id_from_headers`]), so the results are the same; a property
//! test checks that.
//!
//! [`request_id_from_headers`]: crate::parse::request_id::request_id_from_headers

use crate::parse::ratelimit::RateLimitSnapshot;
use crate::parse::request_id::clean_value;
use crate::parse::retry_after::RetryHeaders;
use http::{HeaderMap, HeaderValue};
use std::time::SystemTime;

/// What the classifier reads from the headers.
pub(super) struct HeaderScan<'h> {
    pub(super) retry: RetryHeaders,
    pub(super) ids: RequestIds<'h>,
}

/// The request id headers, read only when a classification keeps the id.
#[derive(Default)]
pub(super) struct RequestIds<'h> {
    /// First `request-id` value.
    request_id: Option<&'h HeaderValue>,
    /// First `x-request-id` value.
    x_request_id: Option<&'h HeaderValue>,
}

impl<'h> HeaderScan<'h> {
    /// Reads the headers; the rate-limit ones into `ratelimit` (a fresh
    /// snapshot, written in place because it is large).
    pub(super) fn new(
        headers: &'h HeaderMap,
        wall_now: SystemTime,
        ratelimit: &mut RateLimitSnapshot,
    ) -> Self {
        let mut scan = HeaderScan {
            retry: RetryHeaders::default(),
            ids: RequestIds::default(),
        };
        for (name, value) in headers {
            let name = name.as_str();
            // Names are lower case; the first byte rules out most names at once.
            match name.as_bytes().first() {
                Some(b'a' | b'x') if ratelimit.read_header(name, value) => {}
                Some(b'r' | b'x') if scan.retry.read_header(name, value, wall_now) => {}
                Some(b'r') if name == "request-id" => {
                    scan.ids.request_id.get_or_insert(value);
                }
                Some(b'x') if name == "x-request-id" => {
                    scan.ids.x_request_id.get_or_insert(value);
                }
                _ => {}
            }
        }
        scan
    }
}

impl RequestIds<'_> {
    /// As [`request_id_from_headers`]: `request-id`, else `x-request-id`.
    ///
    /// [`request_id_from_headers`]: crate::parse::request_id::request_id_from_headers
    pub(super) fn request_id(&self) -> Option<String> {
        [self.request_id, self.x_request_id]
            .into_iter()
            .flatten()
            .find_map(clean_value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::request_id::request_id_from_headers;
    use crate::vocab::Provider;
    use proptest::prelude::*;
    use std::time::Duration;

    proptest! {
        /// One pass gives what the look-ups by name give.
        #[test]
        fn one_pass_agrees_with_the_readers(
            pairs in prop::collection::vec((
                prop::sample::select(vec![
                    "retry-after", "retry-after-ms", "x-should-retry", "request-id",
                    "x-request-id", "anthropic-ratelimit-requests-remaining",
                    "x-ratelimit-reset-tokens", "retry-afte", "x-request-ids", "content-type",
                ]),
                prop::sample::select(vec![
                    &b"8"[..], b" 2.5 ", b"1500", b"true", b"FALSE", b"yes", b"", b" ", b"-1",
                    b"NaN", b"req_011CVrl1", b"\treq_1 ", b"a b", b"\xff", b"Sun, 29 Nov 2026 12:00:30 GMT",
                    b"1.146s", b"0",
                ]),
            ), 0..16)
        ) {
            let mut h = HeaderMap::new();
            for (k, v) in &pairs {
                h.append(*k, HeaderValue::from_bytes(v).unwrap());
            }
            let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_953_600);
            let mut ratelimit = RateLimitSnapshot::default();
            let scan = HeaderScan::new(&h, wall, &mut ratelimit);
            prop_assert_eq!(scan.retry, RetryHeaders::from_headers(&h, wall));
            prop_assert_eq!(
                ratelimit,
                RateLimitSnapshot::from_headers(&h, Provider::Anthropic)
            );
            prop_assert_eq!(scan.ids.request_id(), request_id_from_headers(&h));
        }
    }
}
