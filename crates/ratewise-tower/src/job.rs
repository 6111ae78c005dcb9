//! One call of the service = one job: its id, arrival, deadline and what
//! admission needs to know about the request.

use crate::extensions::{Deadline, JobId, KeyLabel, Model, TokenEstimate};
use http::request::Parts;
use ratewise_core::{Instant, Provider};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Which key a request without a [`KeyLabel`] is paced under: the
/// configured one ([`Config::key_label`](crate::Config::key_label)), else
/// its credentials' fingerprint, else [`KeyLabel::ANONYMOUS`] — warned
/// once per layer, since every such request then shares one scope.
#[derive(Debug, Default)]
pub(crate) struct Keys {
    configured: Option<String>,
    warned: AtomicBool,
}

impl Keys {
    pub fn new(configured: Option<String>) -> Self {
        Keys {
            configured,
            warned: AtomicBool::new(false),
        }
    }

    /// The key of a request to `provider` (`None`: not known).
    pub fn of(
        &self,
        extensions: &http::Extensions,
        headers: &http::HeaderMap,
        uri: &http::Uri,
        provider: Option<Provider>,
    ) -> String {
        if let Some(k) = extensions.get::<KeyLabel>() {
            return k.as_str().to_owned();
        }
        if let Some(k) = &self.configured {
            return k.clone();
        }
        // Gemini also takes its key in the URL (`?key=`): fingerprinted
        // like a header's, never kept.
        if let Some(k) = KeyLabel::of_request(headers, uri, provider) {
            return k.as_str().to_owned();
        }
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                key = KeyLabel::ANONYMOUS,
                "a request with no KeyLabel and no credentials (x-api-key, authorization, api-key, \
                 x-goog-api-key): such requests share one scope; set a KeyLabel on each request \
                 (this is said once)"
            );
        }
        KeyLabel::ANONYMOUS.to_owned()
    }
}

/// What the layer learned about a job before its first send.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub id: String,
    pub arrived: Instant,
    pub deadline: Option<Duration>,
    pub key: String,
    pub model: String,
    pub max_tokens: Option<u64>,
    pub input_estimate: Option<u64>,
    pub body_bytes: u64,
    /// `"stream": true` in the body (Gemini: a `:streamGenerateContent`
    /// path): the answer's head comes with its first token.
    pub streamed: bool,
    /// Whose rules read the answers: the configured profile, else the one
    /// the request's host names ([`Provider::from_host`]), else found from
    /// each answer.
    pub provider: Option<Provider>,
}

/// What Gemini reserves for a generation that sets no
/// `generationConfig.maxOutputTokens`: its models' usual output cap.
pub const GEMINI_DEFAULT_MAX_OUTPUT: u64 = 8192;

/// The output a Gemini call of `path` may produce when its body names no
/// cap: [`GEMINI_DEFAULT_MAX_OUTPUT`] for `:generateContent` and
/// `:streamGenerateContent`, nothing for the methods that generate no text
/// (`:countTokens`, `:embedContent`, ...); `None` for a path that is not
/// Gemini's `/models/{model}:{method}`.
fn gemini_output_cap(path: &str) -> Option<u64> {
    let at = path.find("/models/")?;
    let (_, method) = path[at..].rsplit_once(':')?;
    Some(match method {
        "generateContent" | "streamGenerateContent" => GEMINI_DEFAULT_MAX_OUTPUT,
        _ => 0,
    })
}

/// The model a provider names in the path rather than the body: Gemini's
/// `/v1beta/models/{model}:generateContent`, Azure OpenAI's
/// `/openai/deployments/{deployment}/chat/completions`.
fn model_in_path(path: &str) -> Option<&str> {
    let after = |marker: &str| {
        let at = path.find(marker)? + marker.len();
        let rest = &path[at..];
        let end = rest.find([':', '/']).unwrap_or(rest.len());
        Some(&rest[..end]).filter(|m| !m.is_empty())
    };
    after("/openai/deployments/").or_else(|| after("/models/").filter(|_| path.contains(':')))
}

/// The request body's fields the layer reads: its model, output cap and
/// stream flag (every other field is skipped). Given as a request
/// extension by a caller that has read them already (the proxy, which
/// journals the model), the layer does not parse the body again.
///
/// ```
/// use ratewise_tower::BodyFields;
/// let f = BodyFields::read(br#"{"model":"gpt-4o","max_completion_tokens":7,"stream":true}"#);
/// assert_eq!((f.model.as_deref(), f.max_tokens, f.streamed), (Some("gpt-4o"), Some(7), true));
/// assert_eq!(BodyFields::read(b"not json"), BodyFields::default());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BodyFields {
    /// `model` (clipped to 128 bytes).
    pub model: Option<String>,
    /// `max_tokens` (Anthropic, OpenAI Chat), `max_completion_tokens`
    /// (OpenAI Chat), `max_output_tokens` (OpenAI Responses) or
    /// `generationConfig.maxOutputTokens` (Gemini).
    pub max_tokens: Option<u64>,
    /// `"stream": true`.
    pub streamed: bool,
}

impl BodyFields {
    /// Reads them from a JSON body; anything else, or not JSON: none.
    pub fn read(body: &[u8]) -> BodyFields {
        body_fields(body)
    }
}

/// The fields read from a request body, borrowed where possible; every
/// other field is skipped without building a tree.
#[derive(serde::Deserialize)]
struct Wire<'a> {
    #[serde(borrow, default)]
    model: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
    #[serde(default)]
    stream: Option<bool>,
    /// Gemini: `generationConfig.maxOutputTokens`.
    #[serde(default, rename = "generationConfig")]
    generation_config: Option<GenerationConfig>,
}

#[derive(serde::Deserialize)]
struct GenerationConfig {
    #[serde(default, rename = "maxOutputTokens")]
    max_output_tokens: Option<u64>,
}

/// Reads `model` and `max_tokens` (Anthropic), `max_completion_tokens` or
/// `max_tokens` (OpenAI Chat), `max_output_tokens` (OpenAI Responses) from
/// a JSON body. Anything else, or not JSON: nothing.
pub(crate) fn body_fields(body: &[u8]) -> BodyFields {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return BodyFields::default();
    }
    let Ok(wire) = serde_json::from_slice::<Wire<'_>>(body) else {
        return BodyFields::default();
    };
    BodyFields {
        model: wire
            .model
            .map(|m| ratewise_core::parse::clip(&m, 128).to_owned()),
        max_tokens: wire
            .max_tokens
            .or(wire.max_completion_tokens)
            .or(wire.max_output_tokens)
            .or(wire.generation_config.and_then(|g| g.max_output_tokens)),
        streamed: wire.stream == Some(true),
    }
}

impl Job {
    /// The job of a request: its fields read from the request's parts
    /// and body. [`BodyFields`] given as an extension are taken out of
    /// the parts (read once, not copied into every attempt's request).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        parts: &mut Parts,
        generated_id: impl FnOnce() -> String,
        arrived: Instant,
        default_deadline: Option<Duration>,
        keys: &Keys,
        body: &[u8],
        configured: Option<Provider>,
    ) -> Job {
        let fields = parts
            .extensions
            .remove::<BodyFields>()
            .unwrap_or_else(|| body_fields(body));
        let ext = &parts.extensions;
        let provider = configured.or_else(|| parts.uri.host().and_then(Provider::from_host));
        Job {
            id: ext
                .get::<JobId>()
                .map(|j| ratewise_core::parse::clip(j.as_str(), 128).to_owned())
                .unwrap_or_else(generated_id),
            arrived,
            deadline: ext.get::<Deadline>().map(|d| d.0).or(default_deadline),
            key: keys.of(&parts.extensions, &parts.headers, &parts.uri, provider),
            model: ext
                .get::<Model>()
                .map(|m| m.0.to_string())
                .or(fields.model)
                .or_else(|| {
                    model_in_path(parts.uri.path())
                        .map(|m| ratewise_core::parse::clip(m, 128).to_owned())
                })
                .unwrap_or_else(|| "unknown".to_owned()),
            max_tokens: fields
                .max_tokens
                .or_else(|| gemini_output_cap(parts.uri.path())),
            input_estimate: ext.get::<TokenEstimate>().map(|t| t.input_tokens),
            body_bytes: body.len() as u64,
            streamed: fields.streamed || parts.uri.path().contains(":streamGenerateContent"),
            provider,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_model_and_max_tokens() {
        let f = body_fields(br#"{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[]}"#);
        assert_eq!(f.model.as_deref(), Some("claude-sonnet-4-5"));
        assert_eq!(f.max_tokens, Some(1024));
        let f = body_fields(br#"{"model":"gpt-4o","max_completion_tokens":7}"#);
        assert_eq!(f.max_tokens, Some(7));
        assert_eq!(body_fields(b"not json"), BodyFields::default());
        assert_eq!(body_fields(b"[1,2]"), BodyFields::default());
        assert_eq!(body_fields(b"{not json"), BodyFields::default());
        assert_eq!(
            body_fields(b" \n{\"model\":\"m\"}").model.as_deref(),
            Some("m")
        );
    }

    #[test]
    fn fields_already_read_are_taken_from_the_request_not_read_again() {
        let keys = Keys::default();
        let mut p = http::Request::post("http://127.0.0.1:9/v1/messages")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        p.extensions.insert(BodyFields {
            model: Some("read-before".into()),
            max_tokens: Some(5),
            streamed: true,
        });
        let body = br#"{"model":"in-body","max_tokens":900}"#;
        let job = job_of(&mut p, &keys, body);
        assert_eq!(
            (job.model.as_str(), job.max_tokens, job.streamed),
            ("read-before", Some(5), true)
        );
        assert!(
            p.extensions.get::<BodyFields>().is_none(),
            "taken out, not copied into each attempt"
        );
        assert_eq!(job.body_bytes, body.len() as u64);
    }

    impl Keys {
        fn of_parts(&self, p: &Parts, provider: Option<Provider>) -> String {
            self.of(&p.extensions, &p.headers, &p.uri, provider)
        }
    }

    /// The job of a request arrived at time zero, its id generated as `g`.
    fn job_of(p: &mut Parts, keys: &Keys, body: &[u8]) -> Job {
        Job::new(p, || "g".into(), Instant::ZERO, None, keys, body, None)
    }

    fn parts(headers: &[(&str, &str)]) -> Parts {
        let mut req = http::Request::builder();
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        req.body(()).unwrap().into_parts().0
    }

    #[test]
    fn gemini_and_azure_name_the_model_in_the_path() {
        let keys = Keys::default();
        let req = |uri: &str, body: &[u8]| {
            let mut p = http::Request::post(uri).body(()).unwrap().into_parts().0;
            job_of(&mut p, &keys, body)
        };
        let g = req(
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&key=AIza-secret",
            br#"{"contents":[],"generationConfig":{"maxOutputTokens":300}}"#,
        );
        assert_eq!(g.model, "gemini-2.5-flash");
        assert_eq!(g.max_tokens, Some(300));
        assert!(g.streamed);
        assert_eq!(g.provider, Some(Provider::Gemini));
        assert_eq!(g.key, KeyLabel::fingerprint("AIza-secret").as_str());
        assert!(!format!("{g:?}").contains("AIza-secret"));
        let a = req(
            "https://res.openai.azure.com/openai/deployments/my-gpt4o/chat/completions?api-version=2024-10-21",
            br#"{"messages":[]}"#,
        );
        assert_eq!(a.model, "my-gpt4o");
        assert_eq!(a.provider, Some(Provider::Azure));
        let default = req(
            "http://127.0.0.1:9/v1beta/models/gemini-2.5-pro:generateContent",
            br#"{"contents":[]}"#,
        );
        assert_eq!(
            (default.model.as_str(), default.max_tokens),
            ("gemini-2.5-pro", Some(GEMINI_DEFAULT_MAX_OUTPUT))
        );
        let count = req(
            "http://127.0.0.1:9/v1beta/models/gemini-2.5-pro:countTokens",
            br#"{"contents":[]}"#,
        );
        assert_eq!(count.max_tokens, Some(0));
        let local = req("http://127.0.0.1:9/v1/messages", br#"{"model":"m"}"#);
        assert_eq!((local.model.as_str(), local.provider), ("m", None));
    }

    #[test]
    fn extensions_override_defaults() {
        let mut p = parts(&[("x-api-key", "sk-1")]);
        p.extensions.insert(JobId::new("j-1"));
        p.extensions.insert(Deadline(Duration::from_secs(3)));
        p.extensions.insert(TokenEstimate { input_tokens: 42 });
        p.extensions.insert(Model::new("m"));
        p.extensions.insert(KeyLabel::new("k"));
        let keys = Keys::new(Some("configured".into()));
        let job = Job::new(
            &mut p,
            || "gen".into(),
            Instant::ZERO,
            None,
            &keys,
            b"{}",
            None,
        );
        assert_eq!(job.id, "j-1");
        assert_eq!(job.deadline, Some(Duration::from_secs(3)));
        assert_eq!(job.input_estimate, Some(42));
        assert_eq!(job.model, "m");
        assert_eq!(job.key, "k");
    }

    #[test]
    fn a_request_without_a_label_is_paced_under_its_credentials() {
        let keys = Keys::default();
        let fp = |k: &str| KeyLabel::fingerprint(k).as_str().to_owned();
        assert_eq!(
            keys.of_parts(&parts(&[("x-api-key", "sk-a")]), None),
            fp("sk-a")
        );
        assert_eq!(
            keys.of_parts(&parts(&[("authorization", "Bearer sk-b")]), None),
            fp("sk-b")
        );
        assert_eq!(keys.of_parts(&parts(&[("api-key", "az")]), None), fp("az"));
        assert_eq!(
            keys.of_parts(&parts(&[("x-goog-api-key", "g")]), None),
            fp("g")
        );
        // The first in order wins; an empty one is skipped.
        let both = parts(&[
            ("x-api-key", " "),
            ("authorization", "Bearer sk-b"),
            ("api-key", "az"),
        ]);
        assert_eq!(keys.of_parts(&both, None), fp("sk-b"));
        assert_ne!(fp("sk-a"), fp("sk-b"));
        // No credentials: one anonymous scope, never a shared default.
        assert_eq!(keys.of_parts(&parts(&[]), None), KeyLabel::ANONYMOUS);
        assert_eq!(keys.of_parts(&parts(&[]), None), KeyLabel::ANONYMOUS);
        // A configured label is the one key behind the layer.
        let one = Keys::new(Some("team".into()));
        assert_eq!(one.of_parts(&parts(&[("x-api-key", "sk-a")]), None), "team");
        // The provider's own header first: OpenAI's is `Authorization`.
        let two = parts(&[("x-api-key", "sk-a"), ("authorization", "Bearer sk-b")]);
        assert_eq!(keys.of_parts(&two, None), fp("sk-a"));
        assert_eq!(keys.of_parts(&two, Some(Provider::Openai)), fp("sk-b"));
    }

    #[test]
    fn fingerprint_is_the_proxys() {
        // `fp-` and the first 8 bytes of SHA-256("abc"), as
        // `ratewise_proxy::keys::fingerprint` writes it.
        assert_eq!(KeyLabel::fingerprint("abc").as_str(), "fp-ba7816bf8f01cfea");
    }
}
