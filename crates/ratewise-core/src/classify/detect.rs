//! `--provider auto`: which profile a response most likely came from.

use crate::vocab::Provider;
use http::HeaderMap;

/// Guesses the provider from header families first, then the body's error
/// envelope; [`Provider::Generic`] when nothing is specific.
pub fn detect_provider(headers: &HeaderMap, body: &[u8]) -> Provider {
    let names = headers.keys().map(|n| n.as_str());
    let mut openai = false;
    for name in names {
        if name == "request-id" || name.starts_with("anthropic-") {
            return Provider::Anthropic;
        }
        if name == "x-amzn-errortype" || name == "x-amzn-bedrock-invocation-latency" {
            return Provider::Bedrock;
        }
        if name == "x-request-id" || name.starts_with("x-ratelimit-") || name.starts_with("openai-")
        {
            openai = true;
        }
    }
    if openai {
        return Provider::Openai;
    }
    let head = &body[..body.len().min(256)];
    let has = |needle: &[u8]| head.windows(needle.len()).any(|w| w == needle);
    // Google's status names come after its message, which may be long.
    let long = &body[..body.len().min(4096)];
    let google = |needle: &[u8]| long.windows(needle.len()).any(|w| w == needle);
    if google(b"\"RESOURCE_EXHAUSTED\"")
        || google(b"type.googleapis.com/google.rpc.")
        || (google(b"\"status\"") && google(b"\"UNAVAILABLE\""))
    {
        Provider::Gemini
    } else if has(b"\"type\":\"error\"") || has(b"\"type\": \"error\"") {
        Provider::Anthropic
    } else if has(b"\"error\"") {
        Provider::Openai
    } else {
        Provider::Generic
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_headers_then_body() {
        let mut h = HeaderMap::new();
        assert_eq!(detect_provider(&h, b"Too Many Requests"), Provider::Generic);
        assert_eq!(
            detect_provider(&h, br#"{"type": "error", "error": {}}"#),
            Provider::Anthropic
        );
        assert_eq!(
            detect_provider(&h, br#"{"error": {"code": "x"}}"#),
            Provider::Openai
        );
        assert_eq!(
            detect_provider(
                &h,
                br#"{"error":{"code":429,"message":"m","status":"RESOURCE_EXHAUSTED"}}"#
            ),
            Provider::Gemini
        );
        let mut aws = HeaderMap::new();
        aws.insert("x-amzn-ErrorType", "ThrottlingException:x".parse().unwrap());
        assert_eq!(detect_provider(&aws, b"{}"), Provider::Bedrock);
        h.insert("x-ratelimit-limit-requests", "5".parse().unwrap());
        assert_eq!(detect_provider(&h, b""), Provider::Openai);
        h.insert("request-id", "req_1".parse().unwrap());
        assert_eq!(detect_provider(&h, b""), Provider::Anthropic);
    }
}
