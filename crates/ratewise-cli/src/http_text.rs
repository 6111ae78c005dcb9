//! A raw HTTP/1.x (or curl's HTTP/2) response as `curl -si` prints it.

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use ratewise_core::case::OwnedResponse;

/// Largest response read.
pub const MAX_INPUT: usize = 8 * 1024 * 1024;

/// Parses the final response of `curl -si` output: interim `1xx` blocks and
/// a proxy's `200 Connection established` are skipped; `HTTP/2` and
/// `HTTP/3` status lines are read like HTTP/1.1; bare LF line ends work.
pub fn parse_response(input: &[u8]) -> Result<OwnedResponse, String> {
    let mut rest = input;
    // Leading blank lines (a copy-paste artefact) are harmless.
    while let Some(r) = rest
        .strip_prefix(b"\r\n")
        .or_else(|| rest.strip_prefix(b"\n"))
    {
        rest = r;
    }
    for _ in 0..8 {
        let (status, headers, body) = parse_one(rest)?;
        let interim = status.is_informational()
            || (status == StatusCode::OK && starts_with_http(body) && headers.is_empty());
        let proxy_tunnel = status == StatusCode::OK && starts_with_http(body);
        if interim || proxy_tunnel {
            rest = body;
            continue;
        }
        return Ok(OwnedResponse {
            status,
            headers,
            body: body.to_vec(),
        });
    }
    Err("too many interim responses".to_owned())
}

fn starts_with_http(b: &[u8]) -> bool {
    b.starts_with(b"HTTP/")
}

fn parse_one(input: &[u8]) -> Result<(StatusCode, HeaderMap, &[u8]), String> {
    if !starts_with_http(input) {
        return Err("not an HTTP response: it must start with a status line such as `HTTP/1.1 429 Too Many Requests`".to_owned());
    }
    // httparse knows HTTP/1.x only; curl prints `HTTP/2 429`.
    let normalised;
    let text: &[u8] = if input.starts_with(b"HTTP/2 ") || input.starts_with(b"HTTP/3 ") {
        normalised = [b"HTTP/1.1".as_slice(), &input[6..]].concat();
        &normalised
    } else {
        input
    };
    let mut slots = [httparse::EMPTY_HEADER; 128];
    let mut parsed = httparse::Response::new(&mut slots);
    let head_len = match parsed.parse(text) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => text.len(),
        Err(e) => return Err(format!("not an HTTP response: {e}")),
    };
    let code = parsed.code.ok_or("not an HTTP response: no status code")?;
    let status = StatusCode::from_u16(code).map_err(|e| format!("bad status: {e}"))?;
    let mut headers = HeaderMap::new();
    for h in parsed.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|e| format!("bad header name: {e}"))?;
        let value =
            HeaderValue::from_bytes(h.value).map_err(|e| format!("bad header value: {e}"))?;
        headers.append(name, value);
    }
    // Map the head length back to the original input (HTTP/2 → HTTP/1.1 added 2 bytes).
    let consumed = head_len - (text.len() - input.len());
    Ok((status, headers, input.get(consumed..).unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curl_http2_with_lf() {
        let r = parse_response(b"HTTP/2 429 \nretry-after: 8\n\n{\"a\":1}").unwrap();
        assert_eq!(r.status, 429);
        assert_eq!(r.headers["retry-after"], "8");
        assert_eq!(r.body, b"{\"a\":1}");
    }

    #[test]
    fn interim_and_tunnel_blocks_are_skipped() {
        let text = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 503 Service Unavailable\r\nretry-after: 3\r\n\r\nbusy";
        let r = parse_response(text).unwrap();
        assert_eq!(r.status, 503);
        assert_eq!(r.body, b"busy");
    }

    #[test]
    fn not_http_is_an_error() {
        assert!(parse_response(b"hello").is_err());
        assert!(parse_response(b"").is_err());
        assert!(parse_response(b"HTTP/1.1 abc\r\n\r\n").is_err());
        assert!(parse_response(b"HTTP/1.1 999999 x\r\n\r\n").is_err());
    }
}
