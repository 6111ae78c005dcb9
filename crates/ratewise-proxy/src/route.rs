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

use ratewise_core::Provider;

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
}
