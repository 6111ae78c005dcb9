//! Reading a provider request: the key, the fields the model needs, and
//! the 400 message when they are missing. Pure functions. Gemini's
//! request (model in the path, key in `x-goog-api-key` or `?key=`) is
//! read by [`gemini`]; Bedrock's (SigV4, [`sigv4`]) by [`bedrock`];
//! Claude on Vertex AI's (model in the path, `anthropic_version` in the
//! body) by [`vertex`].

pub mod bedrock;
pub mod gemini;
pub mod sigv4;
pub mod vertex;

use crate::tokens::{self, INPUT_TOKENS_HEADER};
use http::HeaderMap;
use ratewise_core::Provider;
use serde_json::Value;

/// Default `max_tokens` of an OpenAI request that sets none.
pub const OPENAI_DEFAULT_MAX_TOKENS: u64 = 4096;

/// A header as trimmed text, if it is text.
pub fn header_str<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

/// The caller's key: `x-api-key`, else `Authorization: Bearer …`.
pub fn api_key(h: &HeaderMap) -> Option<&str> {
    header_str(h, "x-api-key")
        .filter(|k| !k.is_empty())
        .or_else(|| {
            header_str(h, "authorization")
                .and_then(|a| a.strip_prefix("Bearer "))
                .map(str::trim)
                .filter(|k| !k.is_empty())
        })
}

/// `k:` + 8 hex digits of a hash of `key`: enough to tell keys apart in
/// records, too little to recover or use the key.
pub fn key_fingerprint(key: &str) -> String {
    format!("k:{:08x}", tokens::fnv1a(0, key.as_bytes()) >> 32)
}

/// `s` cut to at most `max` bytes on a character boundary.
pub fn truncate(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The fields of a request body the mock acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedRequest {
    /// `model` (at most 256 bytes).
    pub model: String,
    /// `max_tokens` (OpenAI: `max_completion_tokens`, else `max_tokens`,
    /// else [`OPENAI_DEFAULT_MAX_TOKENS`]).
    pub max_tokens: u64,
    /// `stream: true`.
    pub stream: bool,
    /// OpenAI `stream_options.include_usage`.
    pub include_usage: bool,
    /// [`INPUT_TOKENS_HEADER`] if valid, else the estimate of
    /// [`tokens::estimate_input_tokens`].
    pub input_tokens: u64,
}

/// Reads what the mock needs from a request body, or the message of the
/// 400 a provider would answer.
pub fn parse_request(
    provider: Provider,
    body: &[u8],
    h: &HeaderMap,
) -> Result<ParsedRequest, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
    parse_value(provider, &v, h)
}

/// Azure's deployment route: the model is the deployment named in the path
/// (the body's `model`, if any, is ignored, as Azure does).
pub fn parse_deployment_request(
    body: &[u8],
    h: &HeaderMap,
    deployment: &str,
) -> Result<ParsedRequest, String> {
    let mut v: Value =
        serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
    let obj = v.as_object_mut().ok_or("body must be a JSON object")?;
    obj.insert("model".into(), Value::String(deployment.to_string()));
    parse_value(Provider::Openai, &v, h)
}

/// Azure's key: `api-key`, else [`api_key`].
pub fn azure_api_key(h: &HeaderMap) -> Option<&str> {
    header_str(h, "api-key")
        .filter(|k| !k.is_empty())
        .or_else(|| api_key(h))
}

/// An Azure deployment path, `/openai/deployments/{deployment}/chat/completions`:
/// the deployment (at most 256 bytes).
pub fn azure_deployment(path: &str) -> Option<String> {
    let d = path
        .strip_prefix("/openai/deployments/")?
        .strip_suffix("/chat/completions")?;
    (!d.is_empty() && !d.contains('/')).then(|| truncate(d, 256))
}

/// The query's `api-version` (at most 64 bytes), empty when absent.
pub fn api_version(query: Option<&str>) -> String {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("api-version="))
        .map(|v| truncate(v, 64))
        .unwrap_or_default()
}

fn parse_value(provider: Provider, v: &Value, h: &HeaderMap) -> Result<ParsedRequest, String> {
    let obj = v.as_object().ok_or("body must be a JSON object")?;
    let model = obj
        .get("model")
        .and_then(Value::as_str)
        .ok_or("model: field required")?;
    if !obj.get("messages").is_some_and(Value::is_array) {
        return Err("messages: field required".into());
    }
    let max_tokens = match provider {
        Provider::Openai => obj
            .get("max_completion_tokens")
            .or_else(|| obj.get("max_tokens"))
            .map(|m| m.as_u64().ok_or("max_tokens: must be a positive integer"))
            .transpose()?
            .unwrap_or(OPENAI_DEFAULT_MAX_TOKENS),
        _ => obj
            .get("max_tokens")
            .ok_or("max_tokens: field required")?
            .as_u64()
            .ok_or("max_tokens: must be a positive integer")?,
    };
    if max_tokens == 0 {
        return Err("max_tokens: must be at least 1".into());
    }
    let stream = obj.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = obj
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let input_tokens = header_str(h, INPUT_TOKENS_HEADER)
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| tokens::estimate_input_tokens(v));
    Ok(ParsedRequest {
        model: truncate(model, 256),
        max_tokens,
        stream,
        include_usage,
        input_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_from_either_header() {
        let mut h = HeaderMap::new();
        assert_eq!(api_key(&h), None);
        h.insert("authorization", "Bearer  sk-1 ".parse().unwrap());
        assert_eq!(api_key(&h), Some("sk-1"));
        h.insert("x-api-key", "sk-2".parse().unwrap());
        assert_eq!(api_key(&h), Some("sk-2"));
        assert_ne!(key_fingerprint("sk-1"), key_fingerprint("sk-2"));
        assert!(!key_fingerprint("sk-1").contains("sk-1"));
    }

    #[test]
    fn required_fields_per_provider() {
        let h = HeaderMap::new();
        let ok = br#"{"model":"m","messages":[],"max_tokens":5}"#;
        assert_eq!(
            parse_request(Provider::Anthropic, ok, &h)
                .unwrap()
                .max_tokens,
            5
        );
        let no_max = br#"{"model":"m","messages":[]}"#;
        assert!(parse_request(Provider::Anthropic, no_max, &h).is_err());
        let p = parse_request(Provider::Openai, no_max, &h).unwrap();
        assert_eq!(p.max_tokens, OPENAI_DEFAULT_MAX_TOKENS);
        for bad in [
            &b"[]"[..],
            b"{",
            br#"{"messages":[]}"#,
            br#"{"model":"m"}"#,
            br#"{"model":"m","messages":[],"max_tokens":0}"#,
            br#"{"model":"m","messages":[],"max_tokens":-1}"#,
        ] {
            assert!(parse_request(Provider::Anthropic, bad, &h).is_err());
        }
        assert_eq!(truncate("ééé", 3), "é");
    }
}
