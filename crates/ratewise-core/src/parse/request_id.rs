//! The provider's request id: the one thing support asks for.

use http::HeaderMap;

/// Longest request id kept; anything longer is cut (ids are short).
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// Anthropic's request id header.
pub(crate) const REQUEST_ID: http::HeaderName = http::HeaderName::from_static("request-id");
/// OpenAI's request id header.
pub(crate) const X_REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-request-id");

/// `request-id` (Anthropic) or `x-request-id` (OpenAI), as visible ASCII.
pub fn request_id_from_headers(headers: &HeaderMap) -> Option<String> {
    [REQUEST_ID, X_REQUEST_ID]
        .iter()
        .filter_map(|name| headers.get(name))
        .find_map(|v| clean(v.as_bytes()))
}

/// [`clean`] of a header value: a value `HeaderValue::to_str` accepts is
/// already ASCII, so UTF-8 need not be checked again.
pub(crate) fn clean_value(value: &http::HeaderValue) -> Option<String> {
    match value.to_str() {
        // Visible ASCII: the only whitespace `trim` could remove is ' ' and tab.
        Ok(s) => keep(s.trim_matches([' ', '\t'])),
        Err(_) => clean(value.as_bytes()),
    }
}

/// Keeps an id only if it is printable ASCII, cut to [`MAX_REQUEST_ID_LEN`].
pub(crate) fn clean(raw: &[u8]) -> Option<String> {
    clean_text(std::str::from_utf8(raw).ok()?)
}

fn clean_text(s: &str) -> Option<String> {
    keep(s.trim())
}

fn keep(s: &str) -> Option<String> {
    if s.is_empty() || !s.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        return None;
    }
    Some(crate::parse::clip(s, MAX_REQUEST_ID_LEN).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn either_header() {
        let mut h = HeaderMap::new();
        assert_eq!(request_id_from_headers(&h), None);
        h.insert("x-request-id", "req_abc".parse().unwrap());
        assert_eq!(request_id_from_headers(&h).as_deref(), Some("req_abc"));
        h.insert("request-id", "req_011".parse().unwrap());
        assert_eq!(request_id_from_headers(&h).as_deref(), Some("req_011"));
    }

    #[test]
    fn unprintable_ids_are_dropped() {
        assert_eq!(clean(b"a b"), None);
        assert_eq!(clean(&[0xff]), None);
        assert_eq!(
            clean(&[b'x'; 1000]).map(|s| s.len()),
            Some(MAX_REQUEST_ID_LEN)
        );
    }
}
