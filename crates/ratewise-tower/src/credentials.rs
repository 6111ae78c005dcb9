//! A request's API key, read one way everywhere: the layer's default
//! [`KeyLabel`](crate::KeyLabel), the proxy's pools and stop evidence,
//! `ratewise-reqwest`'s evidence and the Redis store's tags all name a
//! key by what this module reads, so one key is never filed under two
//! names (a Gemini key in `?key=` paced under its fingerprint by the
//! layer and stopped under `anonymous` by another reader).
//!
//! Where the provider is known, its key is read where the provider reads
//! it:
//!
//! * OpenAI and the OpenAI-compatible APIs (Groq, Mistral, DeepSeek,
//!   OpenRouter, xAI): `Authorization`, else `x-api-key`;
//! * Azure OpenAI: `api-key`, else `Authorization`;
//! * Gemini: `x-goog-api-key`, else the query's `key=` (percent-decoded),
//!   else `Authorization`;
//! * the others (Anthropic, Bedrock, generic): `x-api-key`, else
//!   `Authorization`.
//!
//! Where it is not, the first of `x-api-key`, `Authorization`, `api-key`,
//! `x-goog-api-key`, then `?key=`. `Authorization` is read as the token of
//! `Bearer <token>`, else its whole value. Empty and unreadable values
//! are no key.
//!
//! ```
//! use ratewise_tower::credentials::caller_key;
//! use ratewise_tower::Provider;
//!
//! let mut headers = http::HeaderMap::new();
//! headers.insert("authorization", "Bearer sk-proj-1234".parse().unwrap());
//! headers.insert("x-api-key", "sk-ant-9876".parse().unwrap());
//! assert_eq!(caller_key(&headers, None, Some(Provider::Openai)).as_deref(), Some("sk-proj-1234"));
//! assert_eq!(caller_key(&headers, None, Some(Provider::Anthropic)).as_deref(), Some("sk-ant-9876"));
//!
//! let none = http::HeaderMap::new();
//! let query = Some("alt=sse&key=AIza%2Bq");
//! assert_eq!(caller_key(&none, query, Some(Provider::Gemini)).as_deref(), Some("AIza+q"));
//! ```

use http::HeaderMap;
use ratewise_core::Provider;
use std::borrow::Cow;

/// Every header a key is read from: what a request forwarded with other
/// credentials has removed first.
pub(crate) const CREDENTIAL_HEADERS: [&str; 4] =
    ["x-api-key", "authorization", "api-key", "x-goog-api-key"];

/// The longest query key read: a longer value is junk, not a key.
pub const MAX_QUERY_KEY: usize = 512;

/// The caller's key for a request to `provider` (`None`: not known) with
/// these headers and this URI query (without the `?`). See the module
/// docs for where each provider's key is read.
pub fn caller_key<'a>(
    headers: &'a HeaderMap,
    query: Option<&str>,
    provider: Option<Provider>,
) -> Option<Cow<'a, str>> {
    let header = |name: &str| header_key(headers, name).map(Cow::Borrowed);
    let auth = || authorization(headers).map(Cow::Borrowed);
    let in_query = || query.and_then(query_key).map(Cow::Owned);
    match provider {
        None => header("x-api-key")
            .or_else(auth)
            .or_else(|| header("api-key"))
            .or_else(|| header("x-goog-api-key"))
            .or_else(in_query),
        Some(Provider::Azure) => header("api-key").or_else(auth),
        Some(Provider::Gemini) => header("x-goog-api-key").or_else(in_query).or_else(auth),
        Some(p) if p.dialect() == Provider::Openai => auth().or_else(|| header("x-api-key")),
        Some(_) => header("x-api-key").or_else(auth),
    }
}

/// A header's value as a key: trimmed; `None` when absent, empty or not
/// visible ASCII.
fn header_key<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let value = headers.get(name)?.to_str().ok()?.trim();
    (!value.is_empty()).then_some(value)
}

/// `Authorization` as a key: the token of `Bearer <token>`, else the
/// whole value.
fn authorization(headers: &HeaderMap) -> Option<&str> {
    let value = header_key(headers, http::header::AUTHORIZATION.as_str())?;
    // `to_str` admits visible ASCII alone: byte offsets are char bounds.
    let bearer = value.len() >= 6
        && value[..6].eq_ignore_ascii_case("bearer")
        && value.as_bytes().get(6).is_none_or(|b| *b == b' ');
    let key = if bearer { value[6..].trim() } else { value };
    (!key.is_empty()).then_some(key)
}

/// The first `key=` value of a query, percent-decoded (`+` as a space);
/// `None` when absent, empty, longer than [`MAX_QUERY_KEY`] bytes, or not
/// UTF-8 once decoded.
///
/// ```
/// use ratewise_tower::credentials::query_key;
/// assert_eq!(query_key("alt=sse&key=AIza%2Bq+1").as_deref(), Some("AIza+q 1"));
/// assert_eq!(query_key("key="), None);
/// ```
pub fn query_key(query: &str) -> Option<String> {
    let raw = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("key="))?;
    if raw.is_empty() || raw.len() > MAX_QUERY_KEY * 3 {
        return None;
    }
    let decoded = percent_decode(raw)?;
    let k = decoded.trim();
    (!k.is_empty() && k.len() <= MAX_QUERY_KEY).then(|| k.to_owned())
}

/// `s` percent-decoded as a query component (`+` as a space); `None`
/// when an escape is broken or the result is not UTF-8.
///
/// ```
/// use ratewise_tower::credentials::percent_decode;
/// assert_eq!(percent_decode("%6Bey+x").as_deref(), Some("key x"));
/// assert_eq!(percent_decode("%zz"), None);
/// ```
pub fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = |c: u8| (c as char).to_digit(16);
                let hi = b.get(i + 1).copied().and_then(hex)?;
                let lo = b.get(i + 2).copied().and_then(hex)?;
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn each_provider_reads_its_own_header_first() {
        let h = headers(&[
            ("authorization", "Bearer sk-proj-1234"),
            ("x-api-key", "sk-ant-9876"),
            ("api-key", "azure-key"),
            ("x-goog-api-key", "AIza-header"),
        ]);
        let read = |p| caller_key(&h, Some("key=AIza-query"), p).map(|k| k.into_owned());
        assert_eq!(
            read(Some(Provider::Openai)).as_deref(),
            Some("sk-proj-1234")
        );
        assert_eq!(read(Some(Provider::Groq)).as_deref(), Some("sk-proj-1234"));
        assert_eq!(
            read(Some(Provider::Anthropic)).as_deref(),
            Some("sk-ant-9876")
        );
        assert_eq!(read(Some(Provider::Azure)).as_deref(), Some("azure-key"));
        assert_eq!(read(Some(Provider::Gemini)).as_deref(), Some("AIza-header"));
        assert_eq!(read(None).as_deref(), Some("sk-ant-9876"));
    }

    #[test]
    fn a_provider_falls_back_to_authorization_and_nothing_else() {
        let bearer = headers(&[("authorization", "Bearer entra-token")]);
        for p in [Provider::Azure, Provider::Anthropic, Provider::Gemini] {
            assert_eq!(
                caller_key(&bearer, None, Some(p)).as_deref(),
                Some("entra-token")
            );
        }
        // Another provider's header is not this provider's key.
        let goog = headers(&[("x-goog-api-key", "AIza")]);
        assert_eq!(caller_key(&goog, None, Some(Provider::Openai)), None);
        assert_eq!(caller_key(&goog, None, None).as_deref(), Some("AIza"));
    }

    #[test]
    fn gemini_reads_the_query_percent_decoded_and_others_only_when_unknown() {
        let none = HeaderMap::new();
        let q = Some("alt=sse&key=AIza%2Bq+1");
        assert_eq!(
            caller_key(&none, q, Some(Provider::Gemini)).as_deref(),
            Some("AIza+q 1")
        );
        assert_eq!(caller_key(&none, q, None).as_deref(), Some("AIza+q 1"));
        assert_eq!(caller_key(&none, q, Some(Provider::Anthropic)), None);
        // The header wins over the query.
        let h = headers(&[("x-goog-api-key", "AIza-header")]);
        assert_eq!(
            caller_key(&h, q, Some(Provider::Gemini)).as_deref(),
            Some("AIza-header")
        );
    }

    #[test]
    fn authorization_is_a_bearer_token_or_the_whole_value() {
        let basic = headers(&[("authorization", "Basic dXNlcjpwYXNz")]);
        assert_eq!(
            caller_key(&basic, None, Some(Provider::Openai)).as_deref(),
            Some("Basic dXNlcjpwYXNz")
        );
        let empty = headers(&[("authorization", "Bearer  "), ("x-api-key", " ")]);
        assert_eq!(caller_key(&empty, None, None), None);
        assert_eq!(caller_key(&empty, None, Some(Provider::Openai)), None);
    }

    #[test]
    fn junk_in_the_query_is_no_key() {
        assert_eq!(query_key("alt=sse"), None);
        assert_eq!(query_key("key=%zz"), None);
        assert_eq!(query_key("key=%ff%fe"), None);
        assert_eq!(query_key("key=+"), None);
        assert_eq!(
            query_key(&format!("key={}", "a".repeat(MAX_QUERY_KEY + 1))),
            None
        );
        assert_eq!(query_key("a=1&key=k&key=j").as_deref(), Some("k"));
    }
}
