//! A tiny text form of an HTTP response that fuzzers mutate well and that
//! seed files can be written in by hand:
//!
//! ```text
//! 429
//! retry-after: 8
//! anthropic-ratelimit-input-tokens-remaining: 0
//!
//! {"type":"error","error":{"type":"rate_limit_error","message":"..."}}
//! ```
//!
//! The first line is the status, then `name: value` lines up to an empty
//! line, then the body (the rest, byte for byte). Lines end in `\n` (a `\r`
//! before it is dropped). Lines that are not valid header names or values
//! are skipped, as a client library would never produce them; at most
//! [`MAX_HEADERS`] headers are kept so the work per input stays bounded.

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

/// At most this many header lines are read from one input.
pub const MAX_HEADERS: usize = 64;

/// A response decoded from the text form.
#[derive(Debug, Clone)]
pub struct WireResponse<'a> {
    /// The status; inputs with no valid status line map to 500.
    pub status: StatusCode,
    /// The headers that were valid HTTP header lines.
    pub headers: HeaderMap,
    /// Everything after the first empty line.
    pub body: &'a [u8],
}

/// Splits off one line (without `\n` and a trailing `\r`); the rest follows.
fn line(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == b'\n') {
        Some(at) => {
            let l = &data[..at];
            (l.strip_suffix(b"\r").unwrap_or(l), &data[at + 1..])
        }
        None => (data, &[]),
    }
}

/// Reads `name: value` lines up to an empty line (or the end) into a map;
/// returns the map and the bytes after the empty line.
pub fn read_headers(mut data: &[u8]) -> (HeaderMap, &[u8]) {
    let mut headers = HeaderMap::new();
    let mut kept = 0;
    while !data.is_empty() {
        let (l, rest) = line(data);
        data = rest;
        if l.is_empty() {
            break;
        }
        if kept >= MAX_HEADERS {
            continue;
        }
        let Some(colon) = l.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&l[..colon], &l[colon + 1..]);
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        {
            headers.append(name, value);
            kept += 1;
        }
    }
    (headers, data)
}

/// Decodes the whole text form.
pub fn read_response(data: &[u8]) -> WireResponse<'_> {
    let (status_line, rest) = line(data);
    let status = std::str::from_utf8(status_line)
        .ok()
        .and_then(|s| s.trim().parse::<u16>().ok())
        .and_then(|n| StatusCode::from_u16(n).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let (headers, body) = read_headers(rest);
    WireResponse {
        status,
        headers,
        body,
    }
}

/// Writes the text form; [`read_response`] reads it back.
pub fn write_response(status: u16, headers: &[(String, String)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{status}\n").into_bytes();
    out.extend_from_slice(&write_headers(headers));
    out.push(b'\n');
    out.extend_from_slice(body);
    out
}

/// Writes `name: value` lines (no terminating empty line).
pub fn write_headers(headers: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.push(b'\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let h = vec![
            ("retry-after".to_owned(), "8".to_owned()),
            ("x-request-id".to_owned(), "req_1".to_owned()),
        ];
        let bytes = write_response(429, &h, b"{\"a\":\n1}");
        let r = read_response(&bytes);
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers["retry-after"], "8");
        assert_eq!(r.headers["x-request-id"], "req_1");
        assert_eq!(r.body, b"{\"a\":\n1}");
    }

    #[test]
    fn junk_is_bounded_and_tolerated() {
        let r = read_response(b"abc\n\x00bad: x\nok: \x7f\r\n:\n");
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(r.headers.is_empty());
        let many: Vec<u8> = (0..200)
            .flat_map(|i| format!("h{i}: v\n").into_bytes())
            .collect();
        assert_eq!(read_headers(&many).0.len(), MAX_HEADERS);
    }
}
