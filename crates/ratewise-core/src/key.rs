//! An API key's name wherever it is shared: its fingerprint, never the
//! key. Buckets, pauses and stops are per key, and a key reaches them
//! through several doors — the tower layer's default label, the proxy's
//! pools, admin API and journal, `ratewise-reqwest`'s stop evidence, the
//! Redis store's tags — so the fingerprint is written here once and read
//! back the same everywhere (an upper-case `fp-` is the same key's).
//!
//! ```
//! use ratewise_core::key::{fingerprint, is_fingerprint, tag};
//!
//! // `fp-` and the first 16 hex digits of the key's SHA-256.
//! assert_eq!(fingerprint("abc"), "fp-ba7816bf8f01cfea");
//! assert!(is_fingerprint("fp-BA7816BF8F01CFEA"));
//! assert_eq!(tag("fp-BA7816BF8F01CFEA"), "fp-ba7816bf8f01cfea");
//! assert_eq!(tag("team-a"), fingerprint("team-a"));
//! ```

use sha2::{Digest, Sha256};

/// The fingerprint of an API key: `fp-` and the first 16 lower-case hex
/// digits of its SHA-256. The same in every process and after a restart
/// (so replicas sharing a store, and a journal, agree on it); the key
/// cannot be read back from it.
pub fn fingerprint(key: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(key.as_bytes());
    let mut out = String::with_capacity(19);
    out.push_str("fp-");
    for b in &digest[..8] {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out
}

/// Whether `s` is a fingerprint as [`fingerprint`] writes them, in either
/// case: `fp-` and 16 hex digits.
pub fn is_fingerprint(s: &str) -> bool {
    s.len() == 19 && s.starts_with("fp-") && s[3..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// The name a key called `name` is filed under: a fingerprint as it is,
/// lower-cased; anything else (a key, a group's name) fingerprinted, so
/// it is never written out.
pub fn tag(name: &str) -> String {
    if is_fingerprint(name) {
        name.to_ascii_lowercase()
    } else {
        fingerprint(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fingerprint_hides_the_key_and_is_read_back_in_either_case() {
        let fp = fingerprint("sk-ant-api03-SECRET");
        assert_eq!(fp, fingerprint("sk-ant-api03-SECRET"));
        assert_ne!(fp, fingerprint("sk-ant-api03-SECRET2"));
        assert!(!fp.contains("SECRET") && is_fingerprint(&fp));
        assert_eq!(tag(&fp), fp);
        assert_eq!(tag(&fp.to_ascii_uppercase().replacen("FP-", "fp-", 1)), fp);
        for junk in [
            "",
            "fp-",
            "FP-ba7816bf8f01cfea",
            "fp-ba7816bf8f01cfe",
            "fp-ba7816bf8f01cfeaa",
            "xx-ba7816bf8f01cfea",
            "fp-ba7816bf8f01cfeg",
            "fp-ba7816bf8f01cfé",
            "fp-{x}",
        ] {
            assert!(!is_fingerprint(junk), "{junk}");
            assert!(is_fingerprint(&tag(junk)) && tag(junk) != junk, "{junk}");
        }
    }
}
