//! Deterministic token counts and text: tests must be able to predict usage.
//!
//! * **Input tokens** are `ceil(bytes / 4)` of every JSON string found under
//!   the request's `system` and `messages` fields (at least 1), unless the
//!   request carries the test header [`INPUT_TOKENS_HEADER`] with a decimal
//!   count, which wins. Bytes/4 is the usual rule of thumb for English text.
//! * **Output tokens** are `min + fnv1a(seed, body) % (max - min + 1)`,
//!   clamped to the request's `max_tokens`: the same body and seed always get
//!   the same length ([`output_tokens_for`]). A request carrying the test
//!   header [`OUTPUT_TOKENS_HEADER`] (`MIN-MAX`) is given that range
//!   instead of the configured one ([`range_header`]): a bench's small
//!   interactive calls beside its long bulk ones, on one model.
//! * The generated text has exactly one word per output token.

use serde_json::Value;

/// Test header that fixes the input-token count of a request.
pub const INPUT_TOKENS_HEADER: &str = "x-mock-input-tokens";

/// Test header that sets the range of a request's output length
/// (`MIN-MAX`, inclusive, before the `max_tokens` cap).
pub const OUTPUT_TOKENS_HEADER: &str = "x-mock-output-tokens";

/// The output range a request's [`OUTPUT_TOKENS_HEADER`] asks for; `None`
/// when it has none or it does not read as `MIN-MAX` (the configured range
/// then applies).
///
/// ```
/// use ratewise_mock::tokens::range_header;
/// let mut h = http::HeaderMap::new();
/// assert_eq!(range_header(&h), None);
/// h.insert("x-mock-output-tokens", "30-50".parse().unwrap());
/// let r = range_header(&h).unwrap();
/// assert_eq!((r.min, r.max), (30, 50));
/// h.insert("x-mock-output-tokens", "soon".parse().unwrap());
/// assert_eq!(range_header(&h), None);
/// ```
pub fn range_header(headers: &http::HeaderMap) -> Option<crate::config::OutputRange> {
    let v = headers.get(OUTPUT_TOKENS_HEADER)?.to_str().ok()?;
    let (min, max) = v.split_once('-')?;
    Some(crate::config::OutputRange {
        min: min.trim().parse().ok()?,
        max: max.trim().parse().ok()?,
    })
}

/// FNV-1a (64 bit) over `bytes`, started from `seed`. Stable across Rust
/// versions and platforms, unlike `std`'s hasher; not cryptographic.
pub fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Estimated input tokens of a parsed request body: `ceil(bytes / 4)` of the
/// text under `system` and `messages`, at least 1.
///
/// ```
/// let body = serde_json::json!({"messages": [{"role": "user", "content": "12345678"}]});
/// // "user" (4 bytes) + "12345678" (8 bytes) = 12 bytes -> 3 tokens
/// assert_eq!(ratewise_mock::tokens::estimate_input_tokens(&body), 3);
/// ```
pub fn estimate_input_tokens(body: &Value) -> u64 {
    estimate_input_tokens_of(body, &["system", "messages"])
}

/// The same estimate over other top-level fields: Gemini's request keeps
/// its text under `contents` and `systemInstruction`.
///
/// ```
/// let body = serde_json::json!({"contents": [{"role": "user", "parts": [{"text": "12345678"}]}]});
/// // "user" (4 bytes) + "12345678" (8 bytes) = 12 bytes -> 3 tokens
/// assert_eq!(ratewise_mock::tokens::estimate_input_tokens_of(&body, &["contents"]), 3);
/// ```
pub fn estimate_input_tokens_of(body: &Value, fields: &[&str]) -> u64 {
    let mut bytes = 0u64;
    for field in fields {
        if let Some(v) = body.get(field) {
            bytes = bytes.saturating_add(string_bytes(v, 0));
        }
    }
    bytes.div_ceil(4).max(1)
}

/// Total byte length of all strings inside `v` (depth-limited; serde_json
/// itself refuses nesting deeper than 128).
fn string_bytes(v: &Value, depth: u32) -> u64 {
    if depth > 64 {
        return 0;
    }
    match v {
        Value::String(s) => s.len() as u64,
        Value::Array(items) => items.iter().map(|i| string_bytes(i, depth + 1)).sum(),
        Value::Object(map) => map.values().map(|i| string_bytes(i, depth + 1)).sum(),
        _ => 0,
    }
}

/// The deterministic output length for a request body: a seeded hash of the
/// raw body picks a value in `min..=max`, then `max_tokens` caps it.
///
/// ```
/// use ratewise_mock::tokens::output_tokens_for;
/// let n = output_tokens_for(7, b"{}", 5, 50, 1024);
/// assert!((5..=50).contains(&n));
/// assert_eq!(n, output_tokens_for(7, b"{}", 5, 50, 1024));
/// assert_eq!(output_tokens_for(7, b"{}", 5, 50, 3), 3);
/// ```
pub fn output_tokens_for(seed: u64, body: &[u8], min: u64, max: u64, max_tokens: u64) -> u64 {
    let (lo, hi) = if min <= max { (min, max) } else { (max, min) };
    let span = hi - lo;
    let pick = if span == u64::MAX {
        fnv1a(seed, body)
    } else {
        lo + fnv1a(seed, body) % (span + 1)
    };
    pick.min(max_tokens)
}

/// The words of generated text: 2 to 4 letters, 3 on average, so a token
/// with its leading space is 4 bytes on average — the same bytes/4 rule of
/// thumb the input count uses, and about what real tokenizers give on
/// English. (Longer words would make the mock's text cost 1.5× more bytes
/// per token than its own input rule, which no provider's text does.) The
/// lengths vary, so a byte count only estimates the tokens.
const WORDS: &[&str] = &[
    "of", "to", "in", "is", "the", "and", "for", "was", "are", "but", "not", "can", "rate", "wait",
    "time", "sent",
];

/// The `i`-th word of a generated answer (each word is one output token).
/// Words after the first start with a space, so joining them gives the text.
pub fn word(seed: u64, i: u64) -> String {
    let w = WORDS[(fnv1a(seed, &i.to_le_bytes()) % WORDS.len() as u64) as usize];
    if i == 0 {
        w.to_string()
    } else {
        format!(" {w}")
    }
}

/// The whole generated text of `n` tokens.
pub fn text(seed: u64, n: u64) -> String {
    (0..n).map(|i| word(seed, i)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_length_is_deterministic_and_bounded() {
        for i in 0..200u32 {
            let body = format!("{{\"n\":{i}}}");
            let a = output_tokens_for(1, body.as_bytes(), 10, 20, 4096);
            assert!((10..=20).contains(&a));
            assert_eq!(a, output_tokens_for(1, body.as_bytes(), 10, 20, 4096));
        }
        assert_eq!(output_tokens_for(1, b"x", 5, 5, 100), 5);
        assert_eq!(output_tokens_for(1, b"x", 0, u64::MAX, 9), 9);
    }

    #[test]
    fn input_estimate_counts_system_and_messages_only() {
        let body = serde_json::json!({"model": "a-very-long-model-name", "system": "abcd",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "abcdefgh"}]}]});
        // "abcd" + "user" + "text" + "abcdefgh" = 20 bytes
        assert_eq!(estimate_input_tokens(&body), 5);
        assert_eq!(estimate_input_tokens(&serde_json::json!({})), 1);
    }

    #[test]
    fn text_has_one_word_per_token() {
        assert_eq!(text(3, 7).split(' ').count(), 7);
        assert_eq!(text(3, 0), "");
    }

    #[test]
    fn text_is_about_four_bytes_per_token() {
        let n = 1000;
        let bytes = text(3, n).len() as f64;
        let per = bytes / n as f64;
        assert!((3.8..=4.2).contains(&per), "{per} bytes per token");
        let mean = WORDS.iter().map(|w| w.len() + 1).sum::<usize>() as f64 / WORDS.len() as f64;
        assert_eq!(mean, 4.0);
    }
}
