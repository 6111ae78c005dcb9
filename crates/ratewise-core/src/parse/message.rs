//! Workspace-internal: used by ratewise's own crates; not part of the public API and not covered by semver.
//! (The message-hint readers behind [`classify_response`](crate::classify::classify_response).)
//!
//! Hints OpenAI writes into error messages rather than headers.

use super::duration::parse_go_duration;
use super::Rejected;
use std::time::Duration;

/// Only this much of a message is scanned.
const SCAN_LIMIT: usize = 2048;

fn head(message: &str) -> &str {
    super::clip(message, SCAN_LIMIT)
}

/// "Please try again in 1.146s" / "in 84ms" / "in 6m0s": the wait, or why it
/// was rejected; `None` when the message has no such phrase.
///
/// ```
/// use ratewise_core::parse::message::try_again_in;
/// use std::time::Duration;
/// let m = "Rate limit reached ... Please try again in 1.146s. Visit ...";
/// assert_eq!(try_again_in(m), Some(Ok(Duration::from_millis(1146))));
/// ```
pub fn try_again_in(message: &str) -> Option<Result<Duration, Rejected>> {
    wait_after(head(message), "try again in ")
}

/// "Please retry after 86400 seconds" / "retry after 1 second": the wait
/// Azure OpenAI writes into its 429 messages (its quota errors read
/// "… have exceeded token rate limit of your current OpenAI S0 pricing
/// tier. Please retry after 6 seconds."), or why it was rejected; `None`
/// when the message has no such phrase. A bare number is seconds.
pub(crate) fn retry_after_in(message: &str) -> Option<Result<Duration, Rejected>> {
    wait_after(head(message), "retry after ")
}

/// "Please retry in 47.48s." / "retry in 6.2s": the delay Gemini writes
/// into its 429 messages (precise where its `RetryInfo` is whole
/// seconds), or why it was rejected; `None` without the phrase.
pub(crate) fn retry_in(message: &str) -> Option<Result<Duration, Rejected>> {
    wait_after(head(message), "retry in ")
}

/// The wait written after `phrase` in `text`: a Go-style duration
/// ("1.146s", "6m0s") or a number and a unit word ("20 seconds").
fn wait_after(text: &str, phrase: &str) -> Option<Result<Duration, Rejected>> {
    let at = super::find_ignore_ascii_case(text, phrase)? + phrase.len();
    let token: String = text[at..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != ',' && *c != ';' && *c != ')')
        .take(40)
        .collect();
    let token = token.trim_end_matches('.');
    // "in 20 seconds" style: a bare number followed by a unit word.
    if token.bytes().all(|b| b.is_ascii_digit() || b == b'.') && !token.is_empty() {
        let unit_word: String = text[at + token.len()..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect::<String>()
            .to_ascii_lowercase();
        let unit = match unit_word.as_str() {
            "ms" | "millisecond" | "milliseconds" => "ms",
            "s" | "sec" | "secs" | "second" | "seconds" => "s",
            "m" | "min" | "mins" | "minute" | "minutes" => "m",
            "h" | "hour" | "hours" => "h",
            _ => return Some(Err(Rejected::Garbage)),
        };
        return Some(parse_go_duration(&format!("{token}{unit}")));
    }
    Some(parse_go_duration(token))
}

/// "Request too large for gpt-4o ... Limit 30000, Requested 50000": returns
/// `(limit, requested)` only when `requested > limit`, i.e. when waiting for
/// the bucket to refill cannot help.
///
/// ```
/// use ratewise_core::parse::message::too_large_for_limit;
/// let m = "Request too large for gpt-4o on tokens per min (TPM): Limit 30000, Requested 50000.";
/// assert_eq!(too_large_for_limit(m), Some((30000, 50000)));
/// let ok = "Limit 200000, Used 195869, Requested 4412. Please try again in 1.146s.";
/// assert_eq!(too_large_for_limit(ok), None);
/// ```
pub fn too_large_for_limit(message: &str) -> Option<(u64, u64)> {
    let text = head(message);
    let limit = number_after(text, "Limit ")?;
    let requested = number_after(text, "Requested ")?;
    (requested > limit).then_some((limit, requested))
}

/// The number after `label` ("Limit 30,000" → 30000); thousands commas
/// allowed, at most 19 digits.
fn number_after(text: &str, label: &str) -> Option<u64> {
    let at = find(text.as_bytes(), label.as_bytes())? + label.len();
    let mut n: u64 = 0;
    let mut digits = 0;
    for &b in &text.as_bytes()[at..] {
        match b {
            b'0'..=b'9' if digits < 19 => {
                n = n * 10 + u64::from(b - b'0');
                digits += 1;
            }
            b'0'..=b'9' => return None,
            b',' => {}
            _ => break,
        }
    }
    (digits > 0).then_some(n)
}

/// The first occurrence of `needle` (non-empty): a jump between copies of
/// its first byte. The labels here start with a capital letter, rare in
/// messages, so this beats building a `memmem` searcher on every call.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, _) = needle.split_first()?;
    memchr::memchr_iter(first, haystack).find(|&at| haystack[at..].starts_with(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_phrases_read() {
        let m = "… pricing tier. Please retry after 86400 seconds. Please go here: …";
        assert_eq!(retry_after_in(m), Some(Ok(Duration::from_secs(86_400))));
        let m = "* Quota exceeded for metric: …, limit: 1000000\nPlease retry in 47.48s.";
        assert_eq!(retry_in(m), Some(Ok(Duration::from_millis(47_480))));
    }

    #[test]
    fn try_again_forms() {
        assert_eq!(
            try_again_in("Please try again in 84ms."),
            Some(Ok(Duration::from_millis(84)))
        );
        assert_eq!(
            try_again_in("Please try again in 6m0s."),
            Some(Ok(Duration::from_secs(360)))
        );
        assert_eq!(
            try_again_in("Please try again in 20 seconds"),
            Some(Ok(Duration::from_secs(20)))
        );
        assert_eq!(
            try_again_in("Please try again in NaNs."),
            Some(Err(Rejected::NotFinite))
        );
        assert_eq!(
            try_again_in("Please try again in a moment."),
            Some(Err(Rejected::Garbage))
        );
        assert_eq!(try_again_in("no hint here"), None);
    }

    #[test]
    fn azure_writes_retry_after_in_its_message() {
        let m = "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-02-01 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 86400 seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit.";
        assert_eq!(retry_after_in(m), Some(Ok(Duration::from_secs(86_400))));
        assert_eq!(
            retry_after_in("Please retry after 1 second."),
            Some(Ok(Duration::from_secs(1)))
        );
        assert_eq!(
            retry_after_in("Please retry after 2 hours"),
            Some(Ok(Duration::from_secs(7_200)))
        );
        assert_eq!(
            retry_after_in("Please retry after a while."),
            Some(Err(Rejected::Garbage))
        );
        assert_eq!(retry_after_in("Please try again in 2s"), None);
    }

    #[test]
    fn long_messages_are_scanned_only_in_their_head() {
        let m = format!("{}Please try again in 1s", "é".repeat(SCAN_LIMIT));
        assert_eq!(try_again_in(&m), None);
    }

    #[test]
    fn find_is_the_first_occurrence() {
        assert_eq!(find(b"Limit Limit 5", b"Limit "), Some(0));
        assert_eq!(find(b"LLimit 5", b"Limit "), Some(1));
        assert_eq!(find(b"Limi", b"Limit "), None);
        assert_eq!(find(b"x", b""), None);
    }

    #[test]
    fn too_large_needs_requested_above_limit() {
        assert_eq!(too_large_for_limit("Limit 10, Requested 10"), None);
        assert_eq!(
            too_large_for_limit("Limit 1,000, Requested 2,000"),
            Some((1000, 2000))
        );
        assert_eq!(too_large_for_limit("Requested 5"), None);
    }
}
