//! Target `error_body`: an error body as raw bytes (Anthropic's and
//! OpenAI's envelopes, proxies' HTML, truncated and hostile JSON).
//!
//! Properties beyond "no panic":
//! - the envelope fast path answers exactly what serde_json alone answers
//!   (differential: `parse_error_body` against
//!   `parse_error_body_reference`);
//! - every kept string is bounded: type, code, message and param by
//!   `MAX_MESSAGE_LEN` bytes, the request id by `MAX_REQUEST_ID_LEN` and
//!   printable ASCII only;
//! - `Empty` exactly when the body is only whitespace; parsing is
//!   deterministic;
//! - the provider code table and the message scanners are total on
//!   whatever was read.

use ratewise_core::classify::codes::cause_of_error;
use ratewise_core::parse::body::reference::parse_error_body_reference;
use ratewise_core::parse::body::{parse_error_body, parse_usage, Unreadable, MAX_MESSAGE_LEN};
use ratewise_core::parse::message::{too_large_for_limit, try_again_in};
use ratewise_core::parse::request_id::MAX_REQUEST_ID_LEN;
use ratewise_core::parse::FOREVER;
use ratewise_core::Provider;

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let parsed = parse_error_body(data);
    assert_eq!(
        parsed,
        parse_error_body_reference(data),
        "fast path and serde_json disagree"
    );
    assert_eq!(
        parsed == Err(Unreadable::Empty),
        data.iter().all(u8::is_ascii_whitespace),
        "Empty iff only whitespace"
    );
    let _ = parse_usage(data);
    let Ok(e) = &parsed else {
        return;
    };
    for s in [&e.error_type, &e.code, &e.message, &e.param]
        .into_iter()
        .flatten()
    {
        assert!(s.len() <= MAX_MESSAGE_LEN, "kept {} bytes", s.len());
    }
    if let Some(id) = &e.request_id {
        assert!(!id.is_empty() && id.len() <= MAX_REQUEST_ID_LEN);
        assert!(id.bytes().all(|b| (0x21..0x7f).contains(&b)), "{id:?}");
    }
    for provider in Provider::ALL {
        let _ = cause_of_error(*provider, e.fields());
    }
    if let Some(m) = &e.message {
        if let Some(Ok(d)) = try_again_in(m) {
            assert!(d <= FOREVER);
        }
        if let Some((limit, requested)) = too_large_for_limit(m) {
            assert!(requested > limit);
        }
    }
    assert_eq!(parse_error_body(data), parsed, "deterministic");
}
