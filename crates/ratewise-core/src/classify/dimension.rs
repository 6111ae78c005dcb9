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
            if let Some(d) = anthropic_tokens(head) {
                Some(d)
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

/// "output tokens" anywhere wins; else "input", "request" or "prompt
/// tokens" anywhere means input. One pass over the places "tokens" occurs
/// (looking at the word before it) instead of one scan per phrase.
fn anthropic_tokens(head: &str) -> Option<Dimension> {
    let bytes = head.as_bytes();
    let before = |at: usize, word: &str| {
        at.checked_sub(word.len())
            .is_some_and(|start| bytes[start..at].eq_ignore_ascii_case(word.as_bytes()))
    };
    let mut input = false;
    // Messages are short: a plain loop beats restarting a SIMD search at
    // every 't'. `| 0x20` folds 'T' onto 't' (and nothing else onto it).
    for at in 0..bytes.len() {
        if bytes[at] | 0x20 != b't' {
            continue;
        }
        let word = bytes.get(at..at + "tokens".len());
        if !word.is_some_and(|w| w.eq_ignore_ascii_case(b"tokens")) {
            continue;
        }
        if before(at, "output ") {
            return Some(Dimension::OutputTokens);
        }
        input = input
            || ["input ", "request ", "prompt "]
                .iter()
                .any(|w| before(at, w));
    }
    input.then_some(Dimension::InputTokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The phrase-by-phrase reading the one-pass scan replaced.
    fn by_phrases(head: &str) -> Option<Dimension> {
        let has = |p: &str| crate::parse::contains_ignore_ascii_case(head, p);
        if has("output tokens") {
            Some(Dimension::OutputTokens)
        } else if has("input tokens") || has("request tokens") || has("prompt tokens") {
            Some(Dimension::InputTokens)
        } else {
            None
        }
    }

    proptest! {
        #[test]
        fn one_pass_agrees_with_phrase_by_phrase(
            words in prop::collection::vec(prop::sample::select(vec![
                "output", "Output", "input", "INPUT", "request", "prompt", "tokens", "Tokens",
                "tokenstokens", " ", "  ", "xoutput", "é", "rate", "limit", "-",
            ]), 0..12)
        ) {
            let m = words.concat();
            prop_assert_eq!(anthropic_tokens(&m), by_phrases(&m), "{}", m);
        }
    }

    #[test]
    fn anthropic_phrases() {
        let a = |m| from_message(Provider::Anthropic, m);
        assert_eq!(
            a("Number of request tokens has exceeded your per-minute rate limit"),
            Some(Dimension::InputTokens)
        );
        assert_eq!(
            a("input tokens ... and Output Tokens too"),
            Some(Dimension::OutputTokens)
        );
        assert_eq!(
            a("Number of requests has exceeded"),
            Some(Dimension::Requests)
        );
        assert_eq!(a("tokens"), None);
    }
}
