//! Target `ratelimit_headers`: the Anthropic (`anthropic-ratelimit-*`,
//! `anthropic-priority-*`) and OpenAI (`x-ratelimit-*`) header families,
//! read from header lines in the [`crate::wire`] text form.
//!
//! Properties beyond "no panic":
//! - the snapshot does not depend on the provider passed in (the header
//!   names decide the family), and reading twice gives the same snapshot;
//! - the rejected list stays bounded (at most 32 entries);
//! - every published value round-trips: a count through its decimal form,
//!   an RFC 3339 reset through `format_rfc3339` (to the millisecond), an
//!   OpenAI reset through `format_go_duration`;
//! - `exhausted()` names exactly the windows whose `remaining` is zero.

use crate::wire::read_headers;
use ratewise_core::parse::duration::{format_go_duration, parse_go_duration};
use ratewise_core::parse::ratelimit::{parse_count, parse_instant, RateLimitSnapshot, Reset};
use ratewise_core::time::{format_rfc3339, parse_rfc3339};
use ratewise_core::{Dimension, Provider};
use std::time::Duration;

/// Most rejected headers one snapshot keeps.
pub const MAX_REJECTED: usize = 32;

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let (headers, _) = read_headers(data);
    let snap = RateLimitSnapshot::from_headers(&headers, Provider::Anthropic);
    for provider in [Provider::Openai, Provider::Generic] {
        assert_eq!(RateLimitSnapshot::from_headers(&headers, provider), snap);
    }
    assert!(snap.rejected.len() <= MAX_REJECTED);

    let windows = [
        snap.requests,
        snap.input_tokens,
        snap.output_tokens,
        snap.tokens,
        snap.priority_input_tokens,
        snap.priority_output_tokens,
    ];
    for w in windows {
        for n in [w.limit, w.remaining].into_iter().flatten() {
            if n != u64::MAX {
                assert_eq!(parse_count(n.to_string().as_bytes()), Ok(n));
            }
        }
        match w.reset {
            Some(Reset::At(t)) => {
                let text = format_rfc3339(t);
                let back = parse_rfc3339(&text).expect("formatted instants parse");
                let lost = t.duration_since(back).expect("formatting only truncates");
                assert!(lost < Duration::from_millis(1), "{text}: lost {lost:?}");
            }
            Some(Reset::After(d)) => {
                assert_eq!(parse_go_duration(&format_go_duration(d)), Ok(d), "{d:?}");
            }
            // No reset, or a form added later: nothing to round-trip.
            _ => {}
        }
    }
    let exhausted: Vec<Dimension> = snap.exhausted().collect();
    for d in Dimension::ALL {
        assert_eq!(
            exhausted.contains(d),
            snap.window(*d).remaining == Some(0),
            "{d}"
        );
    }
    if headers.is_empty() {
        assert!(snap.is_empty());
    }

    // Each value alone, whatever its name: the parsers are total.
    for value in headers.values() {
        let _ = parse_count(value.as_bytes());
        if let Ok(t) = parse_instant(value.as_bytes()) {
            assert!(parse_rfc3339(&format_rfc3339(t)).is_some());
        }
    }
}
