//! One call of the service = one job: its id, arrival, deadline and what
//! admission needs to know about the request.

use crate::extensions::{Deadline, JobId, KeyLabel, Model, TokenEstimate};
use http::Extensions;
use ratewise_core::Instant;
use std::time::Duration;

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
    /// `"stream": true` in the body: the answer's head comes with its
    /// first token.
    pub streamed: bool,
}

/// The request body fields admission reads (unknown fields are skipped).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct BodyFields {
    pub model: Option<String>,
    pub max_tokens: Option<u64>,
    pub streamed: bool,
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
            .or(wire.max_output_tokens),
        streamed: wire.stream == Some(true),
    }
}

impl Job {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        ext: &Extensions,
        generated_id: impl FnOnce() -> String,
        arrived: Instant,
        default_deadline: Option<Duration>,
        default_key: &str,
        body: &[u8],
    ) -> Job {
        let fields = body_fields(body);
        Job {
            id: ext
                .get::<JobId>()
                .map(|j| ratewise_core::parse::clip(j.as_str(), 128).to_owned())
                .unwrap_or_else(generated_id),
            arrived,
            deadline: ext.get::<Deadline>().map(|d| d.0).or(default_deadline),
            key: ext
                .get::<KeyLabel>()
                .map(|k| k.0.to_string())
                .unwrap_or_else(|| default_key.to_owned()),
            model: ext
                .get::<Model>()
                .map(|m| m.0.to_string())
                .or(fields.model)
                .unwrap_or_else(|| "unknown".to_owned()),
            max_tokens: fields.max_tokens,
            input_estimate: ext.get::<TokenEstimate>().map(|t| t.input_tokens),
            body_bytes: body.len() as u64,
            streamed: fields.streamed,
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
    }

    #[test]
    fn extensions_override_defaults() {
        let mut ext = Extensions::new();
        ext.insert(JobId::new("j-1"));
        ext.insert(Deadline(Duration::from_secs(3)));
        ext.insert(TokenEstimate { input_tokens: 42 });
        ext.insert(Model::new("m"));
        let job = Job::new(&ext, || "gen".into(), Instant::ZERO, None, "k", b"{}");
        assert_eq!(job.id, "j-1");
        assert_eq!(job.deadline, Some(Duration::from_secs(3)));
        assert_eq!(job.input_estimate, Some(42));
        assert_eq!(job.model, "m");
        assert_eq!(job.key, "k");
    }
}
