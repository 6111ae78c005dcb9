//! Which ceiling a rate limit hit: the message's words first (they name
//! the limit that was enforced), then the header whose `remaining` is zero.

use crate::classify::codes::ErrorFields;
use crate::parse::ratelimit::RateLimitSnapshot;
use crate::vocab::{Dimension, Provider};

pub(super) fn limited_dimension(
    provider: Provider,
    error: Option<ErrorFields<'_>>,
    ratelimit: &RateLimitSnapshot,
) -> Option<Dimension> {
    if let Some(e) = error {
        if provider == Provider::Openai {
            match e.error_type {
                Some("tokens") => return Some(Dimension::Tokens),
                Some("requests") => return Some(Dimension::Requests),
                _ => {}
            }
        }
        if let Some(d) = e.message.and_then(|m| from_message(provider, m)) {
            return Some(d);
        }
    }
    ratelimit.exhausted().next()
}

fn from_message(provider: Provider, message: &str) -> Option<Dimension> {
    let head = crate::parse::clip(message, 512);
    let has = |p: &str| crate::parse::contains_ignore_ascii_case(head, p);
    match provider {
        Provider::Anthropic => {
            if has("output tokens") {
                Some(Dimension::OutputTokens)
            } else if has("input tokens") || has("request tokens") || has("prompt tokens") {
                Some(Dimension::InputTokens)
            } else if has("requests per minute") || has("number of requests") {
                Some(Dimension::Requests)
            } else {
                None
            }
        }
        Provider::Openai => {
            if has("(tpm)") || has("tokens per min") {
                Some(Dimension::Tokens)
            } else if has("(rpm)") || has("requests per min") {
                Some(Dimension::Requests)
            } else {
                None
            }
        }
        Provider::Generic => None,
    }
}
