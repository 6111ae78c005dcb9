//! Reading a Gemini request: the route (`/v1beta/models/{model}:{method}`,
//! or `/v1/models/…`), the key (`x-goog-api-key`, else the query's
//! `key=`) and the body's fields (`contents`, `systemInstruction`,
//! `generationConfig.maxOutputTokens`). Pure functions; untrusted input
//! gives `None` or the 400's message, never a panic.

use super::{header_str, truncate, ParsedRequest};
use crate::tokens::{self, INPUT_TOKENS_HEADER};
use http::HeaderMap;
use serde_json::Value;

/// A Gemini API route: which model, and how it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeminiRoute {
    /// The model from the path (at most 256 bytes).
    pub model: String,
    /// `:streamGenerateContent` (else `:generateContent`).
    pub stream: bool,
    /// `alt=sse` in the query: a stream as server-sent events (else, for
    /// a stream, one JSON array sent piece by piece, as Google does).
    pub sse: bool,
}

/// Reads a Gemini route from a path and query: `None` when the path is not
/// one (the caller answers 404).
///
/// ```
/// use ratewise_mock::request::gemini::route;
/// let r = route("/v1beta/models/gemini-2.0-flash:streamGenerateContent", Some("alt=sse")).unwrap();
/// assert_eq!((r.model.as_str(), r.stream, r.sse), ("gemini-2.0-flash", true, true));
/// assert!(!route("/v1/models/gemini-2.0-flash:generateContent", None).unwrap().stream);
/// assert_eq!(route("/v1beta/models/gemini-2.0-flash:countTokens", None), None);
/// assert_eq!(route("/v1beta/models/:generateContent", None), None);
/// ```
pub fn route(path: &str, query: Option<&str>) -> Option<GeminiRoute> {
    let rest = path
        .strip_prefix("/v1beta/models/")
        .or_else(|| path.strip_prefix("/v1/models/"))?;
    let (model, method) = rest.rsplit_once(':')?;
    if model.is_empty() || model.contains('/') {
        return None;
    }
    let stream = match method {
        "generateContent" => false,
        "streamGenerateContent" => true,
        _ => return None,
    };
    Some(GeminiRoute {
        model: truncate(model, 256),
        stream,
        sse: query_param(query, "alt") == Some("sse"),
    })
}

/// Whether `path` is under Gemini's API prefixes (its 404s take Google's
/// shape).
pub fn is_gemini_path(path: &str) -> bool {
    ["/v1beta/", "/v1/models/", "/v1alpha/"]
        .iter()
        .any(|p| path.starts_with(p))
}

/// The raw value of the first `name=` in a query string.
pub fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The caller's key: `x-goog-api-key`, else the query's `key=`.
///
/// ```
/// use ratewise_mock::request::gemini::api_key;
/// let mut h = http::HeaderMap::new();
/// assert_eq!(api_key(&h, Some("alt=sse&key=AIza-q")), Some("AIza-q"));
/// h.insert("x-goog-api-key", "AIza-h".parse().unwrap());
/// assert_eq!(api_key(&h, Some("key=AIza-q")), Some("AIza-h"));
/// assert_eq!(api_key(&http::HeaderMap::new(), Some("key=")), None);
/// ```
pub fn api_key<'a>(h: &'a HeaderMap, query: Option<&'a str>) -> Option<&'a str> {
    header_str(h, "x-goog-api-key")
        .filter(|k| !k.is_empty())
        .or_else(|| query_param(query, "key").filter(|k| !k.is_empty()))
}

/// Reads what the mock needs from a `GenerateContentRequest`, or the
/// message of Google's 400 `INVALID_ARGUMENT`. `max_tokens` is
/// `generationConfig.maxOutputTokens`, else `default_max`.
pub fn parse(
    body: &[u8],
    h: &HeaderMap,
    route: &GeminiRoute,
    default_max: u64,
) -> Result<ParsedRequest, String> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("Invalid JSON payload received. {e}"))?;
    let obj = v
        .as_object()
        .ok_or("Invalid JSON payload received. Expected an object.")?;
    match obj.get("contents") {
        Some(Value::Array(c)) if !c.is_empty() => {}
        _ => return Err("* GenerateContentRequest.contents: contents is not specified\n".into()),
    }
    let max_tokens = match obj
        .get("generationConfig")
        .and_then(|g| g.get("maxOutputTokens"))
    {
        None | Some(Value::Null) => default_max.max(1),
        Some(m) => match m.as_u64() {
            Some(n) if n > 0 => n,
            _ => return Err("* GenerateContentRequest.generation_config.max_output_tokens: max_output_tokens must be positive.\n".into()),
        },
    };
    let input_tokens = header_str(h, INPUT_TOKENS_HEADER)
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| {
            tokens::estimate_input_tokens_of(&v, &["systemInstruction", "contents"])
        });
    Ok(ParsedRequest {
        model: route.model.clone(),
        max_tokens,
        stream: route.stream,
        include_usage: false,
        input_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r() -> GeminiRoute {
        route("/v1beta/models/gemini-2.0-flash:generateContent", None).unwrap()
    }

    #[test]
    fn fields_and_defaults() {
        let h = HeaderMap::new();
        let body = br#"{"contents":[{"role":"user","parts":[{"text":"12345678"}]}]}"#;
        let p = parse(body, &h, &r(), 8192).unwrap();
        assert_eq!((p.max_tokens, p.input_tokens), (8192, 3));
        assert_eq!(p.model, "gemini-2.0-flash");
        let body = br#"{"contents":[{"parts":[{"text":"x"}]}],"generationConfig":{"maxOutputTokens":7},"systemInstruction":{"parts":[{"text":"abcdefg"}]}}"#;
        let p = parse(body, &h, &r(), 8192).unwrap();
        assert_eq!((p.max_tokens, p.input_tokens), (7, 2));
        let mut h = HeaderMap::new();
        h.insert(INPUT_TOKENS_HEADER, "500".parse().unwrap());
        assert_eq!(parse(body, &h, &r(), 8192).unwrap().input_tokens, 500);
    }

    #[test]
    fn bad_bodies_are_400s() {
        let h = HeaderMap::new();
        for bad in [
            &b""[..],
            b"[]",
            b"{",
            br#"{"contents":[]}"#,
            br#"{"contents":"hi"}"#,
            br#"{"contents":[{}],"generationConfig":{"maxOutputTokens":0}}"#,
            br#"{"contents":[{}],"generationConfig":{"maxOutputTokens":-3}}"#,
            br#"{"contents":[{}],"generationConfig":{"maxOutputTokens":"9"}}"#,
        ] {
            assert!(parse(bad, &h, &r(), 8192).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn routes() {
        assert!(route("/v1beta/models/a/b:generateContent", None).is_none());
        assert!(route("/v1beta/models/gemini", None).is_none());
        assert!(route("/v2/models/g:generateContent", None).is_none());
        let s = route("/v1beta/models/g:streamGenerateContent", Some("key=x")).unwrap();
        assert!(s.stream && !s.sse);
        assert!(is_gemini_path("/v1beta/models/g:countTokens"));
        assert!(!is_gemini_path("/v1/messages"));
    }
}
