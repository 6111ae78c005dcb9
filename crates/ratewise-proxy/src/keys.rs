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

/// The caller's key as the upstream reads it: for OpenAI (and
/// compatible) APIs `Authorization: Bearer …` first, for the others
/// `x-api-key` first; the other header when the first is absent. `None`
/// when neither is there or readable.
pub fn caller_key(headers: &HeaderMap, provider: Provider) -> Option<&str> {
    let api_key = || {
        headers
            .get("x-api-key")
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
        Provider::Openai => bearer().or_else(api_key),
        _ => api_key().or_else(bearer),
    }
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
        assert_eq!(last_four("ab"), "ab");
    }
}
