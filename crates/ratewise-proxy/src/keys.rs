//! Callers' API keys, fingerprinted: the fingerprint names the shared
//! admission state (buckets, pauses, stops) of a key; the key itself is
//! never stored or logged.
//!
//! A fingerprint is `fp-` and the first 16 hex digits of the key's
//! SHA-256: the same in every process and after a restart, so replicas
//! and a journal agree on it. `/status` shows it with the key's last four
//! characters, so an operator can tell keys apart.

use std::collections::BTreeMap;
use std::sync::Mutex;

use ratewise_tower::credentials::percent_decode;
pub use ratewise_tower::credentials::{caller_key, query_key, MAX_QUERY_KEY};
use ratewise_tower::KeyLabel;

/// Whether `s` is a fingerprint as [`fingerprint`] writes them: `fp-`
/// and 16 hex digits (what the admin API accepts; see [`normalized`]).
pub fn is_fingerprint(s: &str) -> bool {
    KeyLabel::is_fingerprint(s)
}

/// A fingerprint as the proxy files it (lower-case), when `s` is one: an
/// operator may type it, or a store may hand it back, upper-cased.
pub fn normalized(s: &str) -> Option<String> {
    is_fingerprint(s).then(|| s.to_ascii_lowercase())
}

/// The fingerprint of a key.
pub fn fingerprint(key: &str) -> String {
    // One definition for the proxy and the layer's own default label: a
    // key is paced under the same scope whichever way it comes in.
    KeyLabel::fingerprint(key).0.to_string()
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
        // Upper-case hex names the same key, filed lower-case.
        assert_eq!(
            normalized("fp-BA7816BF8F01CFEA").as_deref(),
            Some("fp-ba7816bf8f01cfea")
        );
        assert_eq!(normalized("team-a"), None);
        for junk in [
            "",
            "fp-",
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
    fn an_operator_sees_the_last_four_characters() {
        assert_eq!(last_four("sk-ant-9876"), "9876");
        assert_eq!(last_four("ab"), "ab");
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
