//! Callers' API keys, fingerprinted: the fingerprint names the shared
//! admission state (buckets, pauses, stops) of a key; the key itself is
//! never stored or logged.
//!
//! A fingerprint is `fp-` and the first 16 hex digits of the key's
//! SHA-256: the same in every process and after a restart, so replicas
//! and a journal agree on it. `/status` shows it with the key's last four
//! characters, so an operator can tell keys apart.

use http::HeaderMap;
use ratewise_core::Provider;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Whether `s` is a fingerprint as [`fingerprint`] writes them: `fp-`
/// and 16 lowercase hex digits (what the admin API accepts).
pub fn is_fingerprint(s: &str) -> bool {
    s.len() == 19
        && s.starts_with("fp-")
        && s[3..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The fingerprint of a key.
pub fn fingerprint(key: &str) -> String {
    // One definition for the proxy and the layer's own default label: a
    // key is paced under the same scope whichever way it comes in.
    ratewise_tower::KeyLabel::fingerprint(key).0.to_string()
}

/// The caller's key as the upstream reads it, from the headers alone
/// (see [`caller_key_in`] for Gemini's `?key=`):
///
/// * OpenAI and the OpenAI-compatible APIs (Groq, Mistral, DeepSeek,
///   OpenRouter, xAI): `Authorization: Bearer …`, else `x-api-key`;
/// * Azure OpenAI: `api-key`, else `Authorization: Bearer …`;
/// * Gemini: `x-goog-api-key`, else `Authorization: Bearer …`;
/// * the others (Anthropic, Bedrock, generic): `x-api-key`, else
///   `Authorization: Bearer …`.
///
/// `None` when none of them is there or readable.
pub fn caller_key(headers: &HeaderMap, provider: Provider) -> Option<&str> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|k| !k.is_empty())
    };
    let bearer = || {
        let auth = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
        let (scheme, token) = auth.trim().split_once(' ')?;
        let token = token.trim();
        (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
    };
    match provider {
        Provider::Azure => header("api-key").or_else(bearer),
        Provider::Gemini => header("x-goog-api-key").or_else(bearer),
        p if p.dialect() == Provider::Openai => bearer().or_else(|| header("x-api-key")),
        _ => header("x-api-key").or_else(bearer),
    }
}

/// The caller's key, from the headers ([`caller_key`]) or, for Gemini,
/// from the query's `key=` when no `x-goog-api-key` header is sent (the
/// first `key=`, percent-decoded; a junk value is no key). `query` is the
/// request URI's query, without the `?`.
pub fn caller_key_in<'a>(
    headers: &'a HeaderMap,
    query: Option<&str>,
    provider: Provider,
) -> Option<std::borrow::Cow<'a, str>> {
    if provider == Provider::Gemini {
        let header = headers
            .get("x-goog-api-key")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|k| !k.is_empty());
        if let Some(k) = header {
            return Some(k.into());
        }
        if let Some(k) = query.and_then(query_key) {
            return Some(k.into());
        }
    }
    caller_key(headers, provider).map(Into::into)
}

/// The longest query key read: a longer value is junk, not a key.
pub const MAX_QUERY_KEY: usize = 512;

/// The first `key=` value of a query, percent-decoded (`+` as a space);
/// `None` when absent, empty, longer than [`MAX_QUERY_KEY`] bytes, or not
/// UTF-8 once decoded.
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

fn percent_decode(s: &str) -> Option<String> {
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

/// A path and query as logs may show it: the value of every `key=`
/// parameter replaced by `REDACTED` (Gemini's API key travels there), and
/// clipped to 512 bytes.
pub fn redacted_path(path_and_query: &str) -> String {
    const MAX: usize = 512;
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    let mut out = String::with_capacity(path_and_query.len().min(MAX) + 16);
    out.push_str(ratewise_core::parse::clip(path, MAX));
    if let Some(q) = query {
        out.push('?');
        for (i, pair) in q.split('&').enumerate() {
            if out.len() > MAX {
                out.push('…');
                break;
            }
            if i > 0 {
                out.push('&');
            }
            // Any spelling of the name (`KEY=`, `%6Bey=`) is a key.
            let name = pair.split_once('=').map_or(pair, |(n, _)| n);
            let plain = percent_decode(name).unwrap_or_default();
            if plain.eq_ignore_ascii_case("key") || !name.is_ascii() {
                out.push_str("key=REDACTED");
            } else {
                out.push_str(ratewise_core::parse::clip(pair, MAX));
            }
        }
    }
    out
}

/// The last four characters of a key (fewer for a shorter one), for an
/// operator to recognise it.
pub fn last_four(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    let from = chars.len().saturating_sub(4);
    chars[from..].iter().collect()
}

/// The fingerprints seen, each with its key's last four characters.
#[derive(Debug, Default)]
pub struct Seen(Mutex<BTreeMap<String, String>>);

impl Seen {
    /// Notes a caller's key; returns its fingerprint.
    pub fn note(&self, key: &str) -> String {
        let fp = fingerprint(key);
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !seen.contains_key(&fp) {
            seen.insert(fp.clone(), last_four(key));
        }
        fp
    }

    /// Every fingerprint seen, with its key's last four characters.
    pub fn all(&self) -> Vec<(String, String)> {
        let seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        seen.iter().map(|(a, b)| (a.clone(), b.clone())).collect()
    }

    /// How many fingerprints are held.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every fingerprint held.
    pub fn fingerprints(&self) -> Vec<String> {
        let seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        seen.keys().cloned().collect()
    }

    /// Forgets these fingerprints (their keys were forgotten).
    pub fn forget(&self, fps: &[String]) {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for fp in fps {
            seen.remove(fp);
        }
    }

    /// The last four characters of the key behind `fp`, when seen.
    pub fn last_four_of(&self, fp: &str) -> Option<String> {
        let seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        seen.get(fp).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fingerprint_is_stable_and_hides_the_key() {
        let fp = fingerprint("sk-ant-api03-SECRET");
        assert_eq!(fp, fingerprint("sk-ant-api03-SECRET"));
        assert_ne!(fp, fingerprint("sk-ant-api03-SECRET2"));
        assert!(fp.starts_with("fp-") && fp.len() == 19, "{fp}");
        assert!(!fp.contains("SECRET"));
        // SHA-256("abc") starts ba7816bf8f01cfea.
        assert_eq!(fingerprint("abc"), "fp-ba7816bf8f01cfea");
        assert!(is_fingerprint(&fp) && is_fingerprint("fp-ba7816bf8f01cfea"));
        for junk in [
            "",
            "fp-",
            "fp-BA7816BF8F01CFEA",
            "fp-ba7816bf8f01cfe",
            "fp-ba7816bf8f01cfeaa",
            "xx-ba7816bf8f01cfea",
            "fp-ba7816bf8f01cfeg",
            "fp-ba7816bf8f01cfé",
        ] {
            assert!(!is_fingerprint(junk), "{junk}");
        }
    }

    #[test]
    fn keys_come_from_either_header() {
        let (a, o) = (Provider::Anthropic, Provider::Openai);
        let mut h = HeaderMap::new();
        assert_eq!(caller_key(&h, a), None);
        h.insert("authorization", "Bearer sk-proj-1234".parse().unwrap());
        assert_eq!(caller_key(&h, a), Some("sk-proj-1234"));
        h.insert("x-api-key", "sk-ant-9876".parse().unwrap());
        assert_eq!(caller_key(&h, a), Some("sk-ant-9876"));
        // The key the upstream reads is the one paced and stopped.
        assert_eq!(caller_key(&h, o), Some("sk-proj-1234"));
        let mut basic = HeaderMap::new();
        basic.insert("authorization", "Basic abc".parse().unwrap());
        assert_eq!(caller_key(&basic, o), None);
        assert_eq!(last_four("sk-ant-9876"), "9876");
        // The OpenAI-compatible APIs read Bearer first.
        assert_eq!(caller_key(&h, Provider::Groq), Some("sk-proj-1234"));
        assert_eq!(last_four("ab"), "ab");
    }

    #[test]
    fn gemini_and_azure_keys_come_from_their_own_headers() {
        let g = Provider::Gemini;
        let mut h = HeaderMap::new();
        assert_eq!(caller_key_in(&h, Some("alt=sse"), g), None);
        assert_eq!(
            caller_key_in(&h, Some("alt=sse&key=AIza%2Bq+1"), g).as_deref(),
            Some("AIza+q 1")
        );
        h.insert("x-goog-api-key", "AIza-header".parse().unwrap());
        assert_eq!(
            caller_key_in(&h, Some("key=AIza-query"), g).as_deref(),
            Some("AIza-header")
        );
        // The query is Gemini's alone.
        let mut other = HeaderMap::new();
        other.insert("x-api-key", "sk-ant-1".parse().unwrap());
        assert_eq!(
            caller_key_in(&other, Some("key=AIza-query"), Provider::Anthropic).as_deref(),
            Some("sk-ant-1")
        );
        let mut az = HeaderMap::new();
        az.insert("authorization", "Bearer entra-token".parse().unwrap());
        assert_eq!(caller_key(&az, Provider::Azure), Some("entra-token"));
        az.insert("api-key", "azure-key-1".parse().unwrap());
        assert_eq!(caller_key(&az, Provider::Azure), Some("azure-key-1"));
        // Junk never panics and is no key.
        for q in [
            "key=",
            "key=%",
            "key=%zz",
            "key=%ff%fe",
            "&&&",
            "key",
            "=key",
        ] {
            assert_eq!(caller_key_in(&HeaderMap::new(), Some(q), g), None, "{q}");
        }
        let long = format!("key={}", "a".repeat(MAX_QUERY_KEY + 1));
        assert_eq!(query_key(&long), None);
    }

    #[test]
    fn a_path_is_logged_with_its_key_redacted() {
        assert_eq!(
            redacted_path(
                "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&key=AIzaSECRET"
            ),
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&key=REDACTED"
        );
        for q in ["KEY=S", "%6Bey=S", "key=S&key=S2", "Key"] {
            let r = redacted_path(&format!("/p?{q}"));
            assert!(!r.contains('S'), "{q}: {r}");
        }
        assert_eq!(redacted_path("/v1/messages"), "/v1/messages");
        let huge = format!("/p?{}", "a=b&".repeat(10_000));
        assert!(redacted_path(&huge).len() < 1100);
    }
}
