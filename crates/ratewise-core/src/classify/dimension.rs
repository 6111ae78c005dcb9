//! Which ceiling a rate limit hit: the message's words first (they name
//! the limit that was enforced), then the header whose `remaining` is zero.

use crate::parse::body::ErrorFields;
use crate::parse::ratelimit::RateLimitSnapshot;
use crate::vocab::{Dimension, Provider};

pub(super) fn limited_dimension(
    provider: Provider,
    error: Option<ErrorFields<'_>>,
    ratelimit: &RateLimitSnapshot,
) -> Option<Dimension> {
    if let Some(e) = error {
        if provider.dialect() == Provider::Openai {
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
    match provider.dialect() {
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
        // "Too many tokens, please wait" / "Too many requests".
        Provider::Bedrock => {
            if has("too many tokens") {
                Some(Dimension::Tokens)
            } else if has("too many requests") {
                Some(Dimension::Requests)
            } else {
                None
            }
        }
        // Gemini names its quota in `QuotaFailure` (read by `google`).
        _ => None,
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
    for at in t_positions(bytes) {
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

/// Every position of 't' or 'T' in `bytes`, in order, found eight bytes
/// at a time: messages are short, and a SIMD search restarted at each of
/// their many t's costs more than it saves.
fn t_positions(bytes: &[u8]) -> impl Iterator<Item = usize> + '_ {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const LOW7: u64 = ONES * 0x7f;
    let chunks = bytes.chunks(8);
    chunks.enumerate().flat_map(|(index, chunk)| {
        let mut word = [0; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        // `| 0x20` folds 'T' onto 't' and nothing else onto it; the padding
        // zeros of a short last chunk become spaces, never 't'.
        let x = (u64::from_le_bytes(word) | (ONES * 0x20)) ^ (ONES * u64::from(b't'));
        // Exact zero-byte test (no borrow between bytes): high bit of each
        // byte of `x` that is zero, i.e. of each 't'.
        let mut hits = !(((x & LOW7) + LOW7) | x | LOW7);
        std::iter::from_fn(move || {
            if hits == 0 {
                return None;
            }
            let at = index * 8 + (hits.trailing_zeros() / 8) as usize;
            hits &= hits - 1;
            Some(at)
        })
    })
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

    proptest! {
        #[test]
        fn t_positions_are_the_byte_loop(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
            let naive: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i] | 0x20 == b't').collect();
            prop_assert_eq!(t_positions(&bytes).collect::<Vec<_>>(), naive);
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
