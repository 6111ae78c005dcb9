//! Reading a request to Claude on Vertex AI: the route
//! (`/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict`,
//! `:streamRawPredict`), the caller (`Authorization: Bearer <OAuth token>`
//! only) and the body: an Anthropic Messages body without `model` (it is
//! in the path) and with `"anthropic_version": "vertex-2023-10-16"`.
//! Everything past that is the Messages surface's: the same parser, the
//! same buckets (Anthropic's limits, under the token's fingerprint), the
//! same answers.
//!
//! Source: Anthropic, "Claude on Vertex AI"
//! (<https://platform.claude.com/docs/en/api/claude-on-vertex-ai>): "In
//! Vertex, `model` is not passed in the request body. Instead, it is
//! specified in the Google Cloud endpoint URL." and "In Vertex,
//! `anthropic_version` is passed in the request body (rather than as a
//! header), and must be set to the value `vertex-2023-10-16`." Pure
//! functions; untrusted input gives `None` or the 400's message.

use super::{header_str, parse_value, truncate, ParsedRequest};
use http::HeaderMap;
use ratewise_core::Provider;
use serde_json::Value;

/// The only `anthropic_version` Vertex accepts.
pub const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// Google's message for a request without a usable OAuth token (401
/// `UNAUTHENTICATED`).
pub const UNAUTHENTICATED: &str = "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.";

/// A Vertex Anthropic path, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VertexRoute {
    /// The Google Cloud project.
    pub project: String,
    /// The location (`us-east5`, `global`).
    pub region: String,
    /// The model (`claude-sonnet-4-5@20250929`), at most 256 bytes.
    pub model: String,
    /// `:streamRawPredict` (server-sent events) rather than `:rawPredict`.
    pub stream: bool,
}

/// The route of a `POST` path, or `None` when it is not one.
///
/// ```
/// use ratewise_mock::request::vertex::route;
/// let r = route("/v1/projects/p-1/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict").unwrap();
/// assert_eq!((r.project.as_str(), r.region.as_str(), r.model.as_str(), r.stream),
///     ("p-1", "us-east5", "claude-sonnet-4-5@20250929", true));
/// assert_eq!(route("/v1/projects/p/locations/l/publishers/google/models/m:rawPredict"), None);
/// assert_eq!(route("/v1/projects/p/locations/l/publishers/anthropic/models/:rawPredict"), None);
/// ```
pub fn route(path: &str) -> Option<VertexRoute> {
    let rest = path.strip_prefix("/v1/projects/")?;
    let (project, rest) = rest.split_once("/locations/")?;
    let (region, rest) = rest.split_once("/publishers/anthropic/models/")?;
    let (model, stream) = match rest.rsplit_once(':')? {
        (m, "rawPredict") => (m, false),
        (m, "streamRawPredict") => (m, true),
        _ => return None,
    };
    let segment = |s: &str| !s.is_empty() && !s.contains('/');
    (segment(project) && segment(region) && segment(model)).then(|| VertexRoute {
        project: truncate(project, 128),
        region: truncate(region, 64),
        model: truncate(&model.replace("%40", "@"), 256),
        stream,
    })
}

/// The caller's OAuth token: `Authorization: Bearer …` (Vertex takes no
/// `x-api-key`).
pub fn api_key(h: &HeaderMap) -> Option<&str> {
    header_str(h, "authorization")
        .and_then(|a| a.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// The fields of a Vertex body, or the 400's message: a `model` in the
/// body, or an `anthropic_version` missing or not [`ANTHROPIC_VERSION`],
/// is refused; the rest is read as a Messages body whose model is the
/// path's. `:streamRawPredict` streams whatever the body says.
pub fn parse(body: &[u8], h: &HeaderMap, route: &VertexRoute) -> Result<ParsedRequest, String> {
    let mut v: Value =
        serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
    let obj = v.as_object_mut().ok_or("body must be a JSON object")?;
    if obj.contains_key("model") {
        return Err("model: Extra inputs are not permitted".into());
    }
    match obj.get("anthropic_version") {
        None => return Err("anthropic_version: Field required".into()),
        Some(Value::String(s)) if s == ANTHROPIC_VERSION => {}
        Some(_) => {
            return Err(format!(
                "anthropic_version: Input should be '{ANTHROPIC_VERSION}'"
            ))
        }
    }
    obj.insert("model".into(), Value::String(route.model.clone()));
    let mut parsed = parse_value(Provider::Anthropic, &v, h)?;
    parsed.stream |= route.stream;
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_follow_vertex_rules() {
        let r = route("/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-haiku-4-5@20251001:rawPredict").unwrap();
        let h = HeaderMap::new();
        let ok = br#"{"anthropic_version":"vertex-2023-10-16","max_tokens":5,"messages":[]}"#;
        let p = parse(ok, &h, &r).unwrap();
        assert_eq!(
            (p.model.as_str(), p.max_tokens, p.stream),
            ("claude-haiku-4-5@20251001", 5, false)
        );
        for bad in [
            &br#"{"max_tokens":5,"messages":[]}"#[..],
            br#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":5,"messages":[]}"#,
            br#"{"anthropic_version":"vertex-2023-10-16","model":"m","max_tokens":5,"messages":[]}"#,
            br#"{"anthropic_version":"vertex-2023-10-16","messages":[]}"#,
            b"[]",
            b"{",
        ] {
            assert!(parse(bad, &h, &r).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let streamed = VertexRoute { stream: true, ..r };
        assert!(parse(ok, &h, &streamed).unwrap().stream);
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "k".parse().unwrap());
        assert_eq!(api_key(&h), None);
        h.insert("authorization", "Bearer ya29.t".parse().unwrap());
        assert_eq!(api_key(&h), Some("ya29.t"));
    }
}
