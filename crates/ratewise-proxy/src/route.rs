//! What a request's path says: which provider's API it calls (when the
//! upstream does not say), and — for the APIs that name the model in the
//! path rather than the body — its model.
//!
//! | API | path | model | output reserved |
//! |---|---|---|---|
//! | Gemini | `POST /v1beta/models/{model}:generateContent` (also `/v1/`, `/v1alpha/`, `tunedModels/`) | `{model}` | `generationConfig.maxOutputTokens`, else 8,192 |
//! | Gemini | `POST /v1beta/models/{model}:streamGenerateContent?alt=sse` | `{model}` | the same; the stream metered as Gemini's |
//! | Gemini | any other `models/{model}:method` (`countTokens`, `embedContent`, …) | `{model}` | none |
//! | Azure OpenAI | `/openai/deployments/{deployment}/chat/completions?api-version=…` (and `/completions`, `/embeddings`, …) | `{deployment}` | OpenAI's body fields |
//! | OpenAI | `/v1/chat/…`, `/v1/responses`, `/v1/embeddings`, `/v1/completions` | the body's `model` | the body's fields |
//! | an OpenAI-compatible surface | `/v1beta/openai/chat/completions` (Gemini's) | the body's `model` | the body's fields; the proxy's own answers in OpenAI's shape |
//! | Anthropic (anything else) | `/v1/messages`, … | the body's `model` | `max_tokens` |
//!
//! A Gemini request's input is estimated from its `contents`,
//! `systemInstruction` and `tools` as any body is (a token per 4 bytes).
//!
//! Nothing here allocates more than the path's own length, and a path
//! that fits no pattern is simply not one of these APIs.

use bytes::Bytes;
use ratewise_core::Provider;

/// The output reserved for a Gemini generation that sets no
/// `generationConfig.maxOutputTokens`.
pub const GEMINI_DEFAULT_MAX_OUTPUT: u64 = 8192;

/// The longest model or deployment name kept from a path.
const MAX_MODEL: usize = 128;

/// A request's path, read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathApi {
    /// Gemini's native API: `…/models/{model}:{method}`.
    Gemini {
        /// The model (`gemini-2.5-flash`).
        model: String,
        /// The method (`generateContent`, `streamGenerateContent`, …).
        method: String,
    },
    /// Azure OpenAI's deployments: `/openai/deployments/{deployment}/…`.
    AzureDeployment {
        /// The deployment, the model class.
        deployment: String,
    },
    /// Azure OpenAI's other paths (`/openai/v1/…`): the body names the
    /// model.
    Azure,
    /// OpenAI's paths.
    Openai,
    /// Another provider's OpenAI-compatible surface under a version
    /// (Gemini's `/v1beta/openai/chat/completions`): its callers speak
    /// OpenAI's API, and the body names the model.
    OpenaiCompatible,
    /// Anything else.
    Other,
}

impl PathApi {
    /// Reads a path (a query after `?` is ignored).
    pub fn of(path_and_query: &str) -> PathApi {
        let path = path_and_query
            .split_once('?')
            .map_or(path_and_query, |(p, _)| p);
        if let Some(g) = gemini(path) {
            return g;
        }
        if let Some(rest) = path.strip_prefix("/openai/deployments/") {
            let deployment = rest.split('/').next().unwrap_or("");
            if !deployment.is_empty() {
                return PathApi::AzureDeployment {
                    deployment: ratewise_core::parse::clip(deployment, MAX_MODEL).to_owned(),
                };
            }
        }
        if path.starts_with("/openai/") {
            return PathApi::Azure;
        }
        if ["/v1beta/openai/", "/v1/openai/", "/v1alpha/openai/"]
            .iter()
            .any(|p| path.starts_with(p))
        {
            return PathApi::OpenaiCompatible;
        }
        if path.starts_with("/v1/chat/")
            || path.starts_with("/v1/responses")
            || path.starts_with("/v1/embeddings")
            || path.starts_with("/v1/completions")
        {
            return PathApi::Openai;
        }
        PathApi::Other
    }

    /// The provider whose API the path is, when the upstream does not
    /// say: Gemini's and Azure's paths are theirs, OpenAI's paths
    /// OpenAI's, anything else Anthropic's.
    pub fn provider(&self) -> Provider {
        match self {
            PathApi::Gemini { .. } => Provider::Gemini,
            PathApi::AzureDeployment { .. } | PathApi::Azure => Provider::Azure,
            PathApi::Openai | PathApi::OpenaiCompatible => Provider::Openai,
            PathApi::Other => Provider::Anthropic,
        }
    }

    /// The model the path names, when it names one for `provider`'s
    /// callers (Gemini's model, Azure's deployment).
    pub fn model(&self, provider: Provider) -> Option<&str> {
        match self {
            PathApi::Gemini { model, .. } if provider == Provider::Gemini => Some(model),
            PathApi::AzureDeployment { deployment } if provider.dialect() == Provider::Openai => {
                Some(deployment)
            }
            _ => None,
        }
    }

    /// Whether it is a Gemini generation (`generateContent`,
    /// `streamGenerateContent`): output is reserved for it.
    pub fn generates(&self) -> bool {
        matches!(self, PathApi::Gemini { method, .. }
            if method == "generateContent" || method == "streamGenerateContent")
    }

    /// Whether it is a Gemini stream (`streamGenerateContent`).
    pub fn streams(&self) -> bool {
        matches!(self, PathApi::Gemini { method, .. } if method == "streamGenerateContent")
    }
}

/// `/{v1beta|v1|v1alpha}/{models|tunedModels}/{model}:{method}`.
fn gemini(path: &str) -> Option<PathApi> {
    let rest = ["/v1beta/", "/v1/", "/v1alpha/"]
        .iter()
        .find_map(|p| path.strip_prefix(p))?;
    let rest = rest
        .strip_prefix("models/")
        .or_else(|| rest.strip_prefix("tunedModels/"))?;
    let (model, method) = rest.rsplit_once(':')?;
    let word = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._@%".contains(&b))
    };
    if !word(model) || method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
        return None;
    }
    Some(PathApi::Gemini {
        model: ratewise_core::parse::clip(model, MAX_MODEL).to_owned(),
        method: ratewise_core::parse::clip(method, 64).to_owned(),
    })
}

/// What admission reads of a Gemini request's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GeminiBody {
    /// `generationConfig.maxOutputTokens`, when set.
    pub max_output_tokens: Option<u64>,
    /// Input tokens estimated from `contents`, `systemInstruction` and
    /// `tools` (a token per 4 bytes of their JSON); from the whole body
    /// when it is not a JSON object.
    pub input_estimate: u64,
}

/// Reads a Gemini request body (never building a tree of it).
pub fn gemini_body(body: &[u8]) -> GeminiBody {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Config {
        #[serde(default)]
        max_output_tokens: Option<u64>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Wire<'a> {
        #[serde(borrow, default)]
        contents: Option<&'a serde_json::value::RawValue>,
        #[serde(borrow, default)]
        system_instruction: Option<&'a serde_json::value::RawValue>,
        #[serde(borrow, default)]
        tools: Option<&'a serde_json::value::RawValue>,
        #[serde(default)]
        generation_config: Option<Config>,
    }
    let whole = GeminiBody {
        max_output_tokens: None,
        input_estimate: (body.len() as u64).div_ceil(4),
    };
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return whole;
    }
    let Ok(w) = serde_json::from_slice::<Wire<'_>>(body) else {
        return whole;
    };
    let bytes: usize = [w.contents, w.system_instruction, w.tools]
        .iter()
        .flatten()
        .map(|r| r.get().len())
        .sum();
    GeminiBody {
        max_output_tokens: w.generation_config.and_then(|c| c.max_output_tokens),
        input_estimate: (bytes as u64).div_ceil(4),
    }
}

/// The body the layer reads for a Gemini request, in the fields it knows
/// (`max_tokens`, `stream`): the layer reads OpenAI's and Anthropic's
/// fields only. It is never sent: the request's own body goes upstream
/// ([`crate::upstream::WireBody`]).
pub fn gemini_admission_body(api: &PathApi, body: &GeminiBody) -> Bytes {
    let max = if api.generates() {
        body.max_output_tokens.unwrap_or(GEMINI_DEFAULT_MAX_OUTPUT)
    } else {
        0
    };
    Bytes::from(serde_json::json!({"max_tokens": max, "stream": api.streams()}).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemini_paths_name_the_model_and_method() {
        let g = PathApi::of("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&key=k");
        assert_eq!(
            g,
            PathApi::Gemini {
                model: "gemini-2.5-flash".into(),
                method: "streamGenerateContent".into()
            }
        );
        assert!(g.generates() && g.streams());
        assert_eq!(g.provider(), Provider::Gemini);
        assert_eq!(g.model(Provider::Gemini), Some("gemini-2.5-flash"));
        assert_eq!(g.model(Provider::Anthropic), None);
        let v1 = PathApi::of("/v1/models/gemini-2.0-flash:generateContent");
        assert!(v1.generates() && !v1.streams());
        let count = PathApi::of("/v1beta/models/gemini-2.5-pro:countTokens");
        assert!(!count.generates());
        assert_eq!(count.provider(), Provider::Gemini);
        // OpenAI's and Anthropic's model listings are not Gemini's.
        for other in [
            "/v1/models",
            "/v1/models/gpt-4o",
            "/v1beta/models/:generateContent",
            "/v1beta/models/a/b:generateContent",
            "/v1beta/models/x:",
            "/v1beta/models/x:gen-erate",
            "/v2/models/x:generateContent",
        ] {
            assert!(
                !matches!(PathApi::of(other), PathApi::Gemini { .. }),
                "{other}"
            );
        }
    }

    #[test]
    fn azure_deployments_name_the_model() {
        let a =
            PathApi::of("/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21");
        assert_eq!(
            a,
            PathApi::AzureDeployment {
                deployment: "gpt-4o-prod".into()
            }
        );
        assert_eq!(a.provider(), Provider::Azure);
        assert_eq!(a.model(Provider::Azure), Some("gpt-4o-prod"));
        assert_eq!(a.model(Provider::Openai), Some("gpt-4o-prod"));
        assert_eq!(PathApi::of("/openai/deployments//chat"), PathApi::Azure);
        assert_eq!(PathApi::of("/openai/v1/chat/completions"), PathApi::Azure);
        assert_eq!(PathApi::of("/v1/chat/completions"), PathApi::Openai);
        assert_eq!(PathApi::of("/v1/messages").provider(), Provider::Anthropic);
        let compat = PathApi::of("/v1beta/openai/chat/completions");
        assert_eq!(compat, PathApi::OpenaiCompatible);
        assert_eq!(compat.provider(), Provider::Openai);
        assert_eq!(compat.model(Provider::Gemini), None);
    }

    #[test]
    fn junk_paths_never_panic_and_are_clipped() {
        let long = format!("/v1beta/models/{}:generateContent", "m".repeat(10_000));
        match PathApi::of(&long) {
            PathApi::Gemini { model, .. } => assert_eq!(model.len(), MAX_MODEL),
            other => panic!("{other:?}"),
        }
        let dep = format!("/openai/deployments/{}/embeddings", "d".repeat(10_000));
        assert!(PathApi::of(&dep).model(Provider::Azure).unwrap().len() <= MAX_MODEL);
        for junk in [
            "",
            "/",
            "?",
            "/v1beta/",
            "/v1beta/models/",
            ":::",
            "/openai/deployments/",
        ] {
            let _ = PathApi::of(junk);
        }
    }

    #[test]
    fn a_gemini_body_gives_its_output_cap_and_input_estimate() {
        let body = br#"{"contents":[{"role":"user","parts":[{"text":"hello there"}]}],"generationConfig":{"maxOutputTokens":256,"temperature":0.2}}"#;
        let b = gemini_body(body);
        assert_eq!(b.max_output_tokens, Some(256));
        let contents = r#"[{"role":"user","parts":[{"text":"hello there"}]}]"#;
        assert_eq!(b.input_estimate, (contents.len() as u64).div_ceil(4));
        let none = gemini_body(br#"{"contents":[]}"#);
        assert_eq!(none.max_output_tokens, None);
        let api = PathApi::of("/v1beta/models/m:generateContent");
        assert_eq!(
            gemini_admission_body(&api, &none),
            Bytes::from_static(br#"{"max_tokens":8192,"stream":false}"#)
        );
        let count = PathApi::of("/v1beta/models/m:countTokens");
        assert_eq!(
            gemini_admission_body(&count, &b),
            Bytes::from_static(br#"{"max_tokens":0,"stream":false}"#)
        );
        // Not JSON: the whole body, as any other.
        assert_eq!(gemini_body(b"12345678").input_estimate, 2);
        assert_eq!(gemini_body(br#"{"contents": 5"#).input_estimate, 4);
    }
}
