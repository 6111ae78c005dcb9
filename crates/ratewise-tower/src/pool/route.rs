//! A member's route: where one attempt goes and how it is authenticated,
//! applied to the request just before it is sent.

use crate::error::BoxError;
use crate::KeyLabel;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, AUTHORIZATION, CONTENT_LENGTH, HOST};
use http::request::Parts;
use http::Uri;
use ratewise_core::Provider;
use std::fmt;

/// Rewrites a pooled job's request for one member, once per attempt, just
/// before it is sent: its URL, its credentials, the model's name, and —
/// for a route of your own — its signature or body.
///
/// [`HttpRoute`] covers every API that needs only a base URL and a key
/// (Anthropic, OpenAI and the OpenAI-compatible hosts, Azure OpenAI's
/// deployment paths, Gemini). Implement this for the channels that sign or
/// translate: Bedrock's SigV4 and Converse body, Vertex's
/// `anthropic_version` and OAuth token. The crate's `examples/pool_bedrock.rs`
/// and `examples/pool_vertex.rs` do each against the mock provider.
///
/// ```
/// use bytes::Bytes;
/// use ratewise_tower::pool::MemberRoute;
/// use ratewise_tower::{BoxError, Provider};
///
/// /// A host that takes its key in a header of its own.
/// struct Internal { key: String }
///
/// impl MemberRoute for Internal {
///     fn upstream(&self) -> &str { "llm.internal" }
///     fn provider(&self) -> Provider { Provider::Openai }
///     fn key_label(&self) -> String { ratewise_tower::KeyLabel::fingerprint(&self.key).as_str().to_owned() }
///     fn prepare(&self, parts: &mut http::request::Parts, _body: &mut Bytes, _model: &str) -> Result<(), BoxError> {
///         let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
///         parts.uri = format!("http://llm.internal{path}").parse()?;
///         parts.headers.insert("x-internal-key", self.key.parse()?);
///         Ok(())
///     }
/// }
/// ```
pub trait MemberRoute: Send + Sync + 'static {
    /// Where the member's requests go: members with the same upstream
    /// share its overloads (a 529 from one holds them all), and a
    /// provider-wide overload moves jobs to another upstream.
    fn upstream(&self) -> &str;

    /// How the member's answers are read.
    fn provider(&self) -> Provider;

    /// The label its key is paced under in the store: a fingerprint
    /// ([`KeyLabel::fingerprint`]), never the key.
    fn key_label(&self) -> String;

    /// Rewrites one attempt's request for this member: `parts` as the
    /// caller made it (the URL, the headers), `body` as the caller sent it,
    /// `model` this member's name for the job's model. An error sends
    /// nothing (the attempt is decided as a connection never made).
    fn prepare(&self, parts: &mut Parts, body: &mut Bytes, model: &str) -> Result<(), BoxError>;
}

/// Why an [`HttpRoute`] could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteError(String);

impl fmt::Display for RouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RouteError {}

/// How an [`HttpRoute`] authenticates and lays out its paths.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Style {
    /// `x-api-key`.
    Anthropic,
    /// `Authorization: Bearer`, `/v1/...` paths.
    Bearer,
    /// `api-key`, `/openai/deployments/{model}/...?api-version=`.
    Azure { api_version: String },
    /// `x-goog-api-key`.
    Gemini,
}

/// The route of an API that needs only a base URL and a key.
///
/// * the base URL's scheme and host replace the caller's; its path, if
///   any, goes before the caller's (a `/v1` on both is said once);
/// * the caller's credentials (`authorization`, `x-api-key`, `api-key`,
///   `x-goog-api-key`, a `?key=`) are removed and the member's set, marked
///   sensitive;
/// * the body's `model` becomes the member's name for it, when the two
///   differ ([`PoolMember::model`](super::PoolMember::model));
/// * OpenAI ↔ Azure OpenAI: the same chat body goes to
///   `/openai/deployments/{deployment}/…?api-version=…` with `api-key` on
///   an Azure member, and an Azure-shaped call to `/v1/…` with the model
///   in the body on an OpenAI-compatible one.
///
/// Its `Debug` never shows the key.
#[derive(Clone)]
pub struct HttpRoute {
    style: Style,
    provider: Provider,
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    /// The base URL's path, without a trailing `/` (may be empty).
    prefix: String,
    key: String,
    label: String,
}

impl fmt::Debug for HttpRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpRoute")
            .field("style", &self.style)
            .field("provider", &self.provider)
            .field(
                "base",
                &format_args!("{}://{}{}", self.scheme, self.authority, self.prefix),
            )
            .field("key", &self.label)
            .finish()
    }
}

impl HttpRoute {
    fn make(style: Style, provider: Provider, base: &str, key: &str) -> Result<Self, RouteError> {
        let uri: Uri = base
            .trim()
            .parse()
            .map_err(|e| RouteError(format!("upstream {base:?} is not a URL: {e}")))?;
        let (Some(scheme), Some(authority)) = (uri.scheme().cloned(), uri.authority().cloned())
        else {
            return Err(RouteError(format!(
                "upstream {base:?} needs a scheme and a host (https://…)"
            )));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(RouteError(format!("upstream {base:?}: the key is empty")));
        }
        if HeaderValue::from_str(key).is_err() {
            return Err(RouteError(format!(
                "upstream {base:?}: the key is not a valid header value"
            )));
        }
        Ok(HttpRoute {
            style,
            provider,
            scheme,
            authority,
            prefix: uri.path().trim_end_matches('/').to_owned(),
            label: KeyLabel::fingerprint(key).as_str().to_owned(),
            key: key.to_owned(),
        })
    }

    /// Anthropic's Messages API at `base` (`https://api.anthropic.com`),
    /// with `x-api-key`.
    pub fn anthropic(base: &str, key: &str) -> Result<Self, RouteError> {
        Self::make(Style::Anthropic, Provider::Anthropic, base, key)
    }

    /// OpenAI at `base` (`https://api.openai.com`), with a bearer token.
    pub fn openai(base: &str, key: &str) -> Result<Self, RouteError> {
        Self::compatible(Provider::Openai, base, key)
    }

    /// An OpenAI-compatible host (Groq, Mistral, DeepSeek, OpenRouter,
    /// xAI, a self-hosted server) read by `provider`'s rules, with a
    /// bearer token.
    pub fn compatible(provider: Provider, base: &str, key: &str) -> Result<Self, RouteError> {
        Self::make(Style::Bearer, provider, base, key)
    }

    /// Azure OpenAI at `endpoint` (`https://my-res.openai.azure.com`), with
    /// `api-key` and `api-version`: the member's model name is the
    /// deployment.
    pub fn azure(endpoint: &str, key: &str, api_version: &str) -> Result<Self, RouteError> {
        if api_version.trim().is_empty()
            || !api_version
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        {
            return Err(RouteError(format!(
                "azure upstream {endpoint:?}: api_version {api_version:?} is not a version"
            )));
        }
        Self::make(
            Style::Azure {
                api_version: api_version.trim().to_owned(),
            },
            Provider::Azure,
            endpoint,
            key,
        )
    }

    /// The Gemini API at `base`, with `x-goog-api-key`.
    pub fn gemini(base: &str, key: &str) -> Result<Self, RouteError> {
        Self::make(Style::Gemini, Provider::Gemini, base, key)
    }

    /// The route `provider`'s API takes: Anthropic's `x-api-key`,
    /// Gemini's `x-goog-api-key`, Azure's deployments (`api_version`,
    /// default `2024-10-21`), a bearer token for the rest — Bedrock's
    /// included: an Amazon Bedrock API key goes in `Authorization: Bearer`
    /// ("Include the following as an authorization header: Authorization:
    /// Bearer $AWS_BEARER_TOKEN_BEDROCK", docs.aws.amazon.com, "Use an
    /// Amazon Bedrock API key"). A Bedrock member keeps the caller's path
    /// (the caller speaks Bedrock's own API; its model is in that path,
    /// not renamed); SigV4 or a Messages → Converse translation is a route
    /// of your own (`examples/pool_bedrock.rs`).
    pub fn for_provider(
        provider: Provider,
        base: &str,
        key: &str,
        api_version: Option<&str>,
    ) -> Result<Self, RouteError> {
        match provider {
            Provider::Anthropic => Self::anthropic(base, key),
            Provider::Gemini => Self::gemini(base, key),
            Provider::Azure => Self::azure(base, key, api_version.unwrap_or("2024-10-21")),
            other => Self::compatible(other, base, key),
        }
    }

    /// The path the caller's `path_and_query` takes on this member.
    fn path(&self, caller: &str, model: &str) -> String {
        let (path, query) = match caller.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (caller, None),
        };
        // The caller's query, without a key of its own (Gemini's `?key=`)
        // or Azure's version (an Azure member sets its own).
        let mut kept: Vec<String> = query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|kv| {
                !kv.is_empty() && !kv.starts_with("key=") && !kv.starts_with("api-version=")
            })
            .map(str::to_owned)
            .collect();
        // An Azure deployment path's API part (`chat/completions`).
        let azure_rest = path
            .strip_prefix("/openai/deployments/")
            .and_then(|r| r.split_once('/'))
            .map(|(_, rest)| rest);
        let path = match &self.style {
            Style::Azure { api_version } => {
                let rest = azure_rest
                    .or_else(|| path.strip_prefix("/v1/"))
                    .unwrap_or_else(|| path.trim_start_matches('/'));
                kept.push(format!("api-version={api_version}"));
                format!("/openai/deployments/{model}/{rest}")
            }
            _ => match azure_rest {
                Some(rest) => format!("/v1/{rest}"),
                None => path.to_owned(),
            },
        };
        let mut joined = match path.strip_prefix("/v1/") {
            Some(rest) if self.prefix.ends_with("/v1") => format!("{}/{rest}", self.prefix),
            _ => format!("{}{path}", self.prefix),
        };
        if !kept.is_empty() {
            joined.push('?');
            joined.push_str(&kept.join("&"));
        }
        joined
    }

    /// The header this member's key goes in, and its value.
    fn credential(&self) -> Result<(HeaderName, HeaderValue), BoxError> {
        let (name, value) = match self.style {
            Style::Anthropic => (HeaderName::from_static("x-api-key"), self.key.clone()),
            Style::Bearer => (AUTHORIZATION, format!("Bearer {}", self.key)),
            Style::Azure { .. } => (HeaderName::from_static("api-key"), self.key.clone()),
            Style::Gemini => (HeaderName::from_static("x-goog-api-key"), self.key.clone()),
        };
        let mut value = HeaderValue::from_str(&value)?;
        value.set_sensitive(true);
        Ok((name, value))
    }
}

impl MemberRoute for HttpRoute {
    fn upstream(&self) -> &str {
        self.authority.as_str()
    }

    fn provider(&self) -> Provider {
        self.provider
    }

    fn key_label(&self) -> String {
        self.label.clone()
    }

    fn prepare(&self, parts: &mut Parts, body: &mut Bytes, model: &str) -> Result<(), BoxError> {
        let caller = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let caller_azure = caller.starts_with("/openai/deployments/");
        let path = self.path(caller, model);
        parts.uri = Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path)
            .build()?;
        // The caller's credentials, in whichever header the layer reads
        // them from, go before the member's own are set.
        for name in crate::credentials::CREDENTIAL_HEADERS {
            parts.headers.remove(name);
        }
        parts.headers.remove(HOST);
        let (name, value) = self.credential()?;
        parts.headers.insert(name, value);
        // The model: in the path for an Azure member; in the body for the
        // others (and set there when the caller spoke Azure, whose bodies
        // name no model).
        if !matches!(self.style, Style::Azure { .. }) {
            if let Some(rewritten) = with_model(body, model, caller_azure) {
                *body = rewritten;
                if parts.headers.contains_key(CONTENT_LENGTH) {
                    parts
                        .headers
                        .insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
                }
            }
        }
        Ok(())
    }
}

/// `body` with its `model` set to `model`, when it is a JSON object whose
/// model differs (or has none and `insert` says to add it); `None` when
/// nothing changes (or it is not a JSON object). The common case — the
/// same model — is told by the layer's one reader of request bodies (no
/// tree built); only a body that may change is parsed whole.
pub(crate) fn with_model(body: &[u8], model: &str, insert: bool) -> Option<Bytes> {
    match crate::job::body_fields(body).model {
        Some(m) if m == model => return None,
        None if !insert => return None,
        _ => {}
    }
    let mut value: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(body).ok()?;
    match value.get("model") {
        Some(serde_json::Value::String(m)) if m == model => return None,
        None if !insert => return None,
        _ => {}
    }
    value.insert(
        "model".to_owned(),
        serde_json::Value::String(model.to_owned()),
    );
    serde_json::to_vec(&value).ok().map(Bytes::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut b = http::Request::builder().method("POST").uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn an_anthropic_member_gets_its_url_and_key_and_the_callers_key_goes() {
        let r = HttpRoute::anthropic("http://127.0.0.1:9000", "sk-main").unwrap();
        let mut p = parts(
            "http://proxy.local/v1/messages?beta=true",
            &[
                ("x-api-key", "sk-team"),
                ("authorization", "Bearer sk-team"),
                ("host", "proxy.local"),
            ],
        );
        let mut body = Bytes::from_static(br#"{"model":"claude-sonnet-4-5","max_tokens":5}"#);
        r.prepare(&mut p, &mut body, "claude-sonnet-4-5").unwrap();
        assert_eq!(
            p.uri.to_string(),
            "http://127.0.0.1:9000/v1/messages?beta=true"
        );
        assert_eq!(p.headers["x-api-key"], "sk-main");
        assert!(p.headers["x-api-key"].is_sensitive());
        assert!(p.headers.get("authorization").is_none());
        assert!(p.headers.get("host").is_none());
        // The same model: the body is not touched.
        assert_eq!(
            &body[..],
            br#"{"model":"claude-sonnet-4-5","max_tokens":5}"#
        );
        assert_eq!(r.upstream(), "127.0.0.1:9000");
        assert!(!format!("{r:?}").contains("sk-main"));
        assert!(r.key_label().starts_with("fp-"));
    }

    #[test]
    fn a_v1_base_is_not_doubled_and_a_mapped_model_is_rewritten() {
        let r = HttpRoute::openai("https://api.groq.com/openai/v1", "gsk").unwrap();
        let mut p = parts("http://x/v1/chat/completions", &[("content-length", "20")]);
        let mut body = Bytes::from_static(br#"{"model":"llama","messages":[]}"#);
        r.prepare(&mut p, &mut body, "llama-3.3-70b-versatile")
            .unwrap();
        assert_eq!(
            p.uri.to_string(),
            "https://api.groq.com/openai/v1/chat/completions"
        );
        assert_eq!(p.headers["authorization"], "Bearer gsk");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["model"], "llama-3.3-70b-versatile");
        assert_eq!(p.headers["content-length"], body.len().to_string().as_str());
    }

    #[test]
    fn openai_to_azure_and_back() {
        let azure =
            HttpRoute::azure("https://res.openai.azure.com", "az-key", "2024-10-21").unwrap();
        let mut p = parts(
            "http://x/v1/chat/completions",
            &[("authorization", "Bearer sk-team")],
        );
        let mut body = Bytes::from_static(br#"{"model":"gpt-4o","messages":[]}"#);
        azure.prepare(&mut p, &mut body, "gpt4o-prod").unwrap();
        assert_eq!(
            p.uri.to_string(),
            "https://res.openai.azure.com/openai/deployments/gpt4o-prod/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(p.headers["api-key"], "az-key");
        assert!(p.headers.get("authorization").is_none());

        let openai = HttpRoute::openai("https://api.openai.com", "sk-o").unwrap();
        let mut p = parts(
            "http://x/openai/deployments/gpt4o-prod/chat/completions?api-version=2024-10-21",
            &[("api-key", "sk-team")],
        );
        let mut body = Bytes::from_static(br#"{"messages":[]}"#);
        openai.prepare(&mut p, &mut body, "gpt-4o").unwrap();
        assert_eq!(
            p.uri.to_string(),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(p.headers["authorization"], "Bearer sk-o");
        assert!(p.headers.get("api-key").is_none());
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["model"], "gpt-4o");
    }

    #[test]
    fn a_gemini_key_in_the_query_is_replaced_by_the_members_header() {
        let r = HttpRoute::gemini("http://127.0.0.1:7", "g-key").unwrap();
        let mut p = parts(
            "http://x/v1beta/models/gemini-2.5-flash:generateContent?key=caller&alt=sse",
            &[],
        );
        let mut body = Bytes::from_static(br#"{"contents":[]}"#);
        r.prepare(&mut p, &mut body, "gemini-2.5-flash").unwrap();
        assert_eq!(
            p.uri.to_string(),
            "http://127.0.0.1:7/v1beta/models/gemini-2.5-flash:generateContent?alt=sse"
        );
        assert_eq!(p.headers["x-goog-api-key"], "g-key");
    }

    #[test]
    fn a_bedrock_api_key_is_a_bearer_token_and_the_path_is_kept() {
        let r = HttpRoute::for_provider(
            Provider::Bedrock,
            "https://bedrock-runtime.us-east-1.amazonaws.com",
            "bedrock-api-key-1",
            None,
        )
        .unwrap();
        let path = "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse";
        let mut p = parts(&format!("http://x{path}"), &[("x-api-key", "caller")]);
        let mut body = Bytes::from_static(br#"{"messages":[]}"#);
        r.prepare(
            &mut p,
            &mut body,
            "anthropic.claude-sonnet-4-5-20250929-v1:0",
        )
        .unwrap();
        assert_eq!(
            p.uri.to_string(),
            format!("https://bedrock-runtime.us-east-1.amazonaws.com{path}")
        );
        assert_eq!(p.headers["authorization"], "Bearer bedrock-api-key-1");
        assert!(p.headers.get("x-api-key").is_none());
        assert_eq!(&body[..], br#"{"messages":[]}"#);
        assert_eq!(r.provider(), Provider::Bedrock);
    }

    #[test]
    fn bad_routes_are_typed_errors() {
        assert!(HttpRoute::openai("not a url", "k").is_err());
        assert!(HttpRoute::openai("/v1", "k").is_err());
        assert!(HttpRoute::openai("https://h", " ").is_err());
        assert!(HttpRoute::azure("https://h", "k", "x/../y").is_err());
        assert!(HttpRoute::openai("https://h", "a\nb").is_err());
    }

    #[test]
    fn bodies_that_are_not_json_objects_are_left_alone() {
        assert_eq!(with_model(b"[1]", "m", true), None);
        assert_eq!(with_model(b"{not json", "m", true), None);
        assert_eq!(with_model(br#"{"model":"m"}"#, "m", true), None);
        assert_eq!(with_model(br#"{"x":1}"#, "m", false), None);
    }
}
