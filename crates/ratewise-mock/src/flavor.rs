//! Which OpenAI-compatible provider the OpenAI surface answers as
//! ([`MockConfig::flavor`](crate::MockConfig::flavor)), and the few settings
//! only those providers have ([`CompatibleConfig`]).
//!
//! The buckets, faults and money switches are the same for every flavor;
//! a flavor changes how an outcome is *rendered* (status, headers, body:
//! [`crate::render::flavor`]) and adds the outcomes only its provider has:
//! Azure's daily quota, content filter and deployment route; Groq's
//! requests-per-day window and 413 for a request larger than its TPM;
//! Mistral's monthly token quota; DeepSeek's per-key concurrency queue.
//!
//! ```
//! let cfg: ratewise_mock::MockConfig = serde_json::from_str(r#"{
//!     "flavor": "groq",
//!     "openai_limits": {"tokens_per_minute": 6000},
//!     "compatible": {"requests_per_day": 14400}
//! }"#).unwrap();
//! assert_eq!(cfg.flavor, ratewise_mock::Flavor::Groq);
//! assert_eq!(cfg.flavor.provider(), ratewise_core::Provider::Groq);
//! assert_eq!(ratewise_mock::MockConfig::default().flavor, ratewise_mock::Flavor::Openai);
//! ```

use ratewise_core::Provider;
use serde::{Deserialize, Serialize};

/// The provider `/v1/chat/completions` answers as (default
/// [`Flavor::Openai`]: OpenAI itself, byte for byte what the mock always
/// answered). Anthropic and Gemini routes ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Flavor {
    /// OpenAI (the default).
    #[default]
    Openai,
    /// Azure OpenAI: also `POST /openai/deployments/{deployment}/chat/completions`,
    /// the key in `api-key`; 429s with `error.code` `"429"`, `retry-after`
    /// and `retry-after-ms`; a daily quota; a content filter.
    Azure,
    /// Groq: `x-ratelimit-*-requests` per day, `*-tokens` per minute; 413
    /// for a request larger than the TPM limit.
    Groq,
    /// Mistral: `x-ratelimit-*-tokens-minute` / `-req-minute` /
    /// `-tokens-month` headers; flat error bodies (`"object": "error"`).
    Mistral,
    /// DeepSeek: no rate-limit headers; a per-key concurrency limit whose
    /// excess waits (blank lines / `: keep-alive` while it does); 402
    /// "Insufficient Balance", 503 "Server overloaded".
    Deepseek,
    /// OpenRouter: no rate-limit headers; `{"error":{"code":N,…}}` bodies,
    /// an upstream provider's 429, errors inside a 200, `: OPENROUTER
    /// PROCESSING` comments in streams.
    Openrouter,
    /// xAI: money (billing, spend cap) is a 429 whose `error` is a string.
    Xai,
}

impl Flavor {
    /// The ratewise-core profile that reads this flavor's answers.
    pub fn provider(self) -> Provider {
        match self {
            Flavor::Openai => Provider::Openai,
            Flavor::Azure => Provider::Azure,
            Flavor::Groq => Provider::Groq,
            Flavor::Mistral => Provider::Mistral,
            Flavor::Deepseek => Provider::Deepseek,
            Flavor::Openrouter => Provider::Openrouter,
            Flavor::Xai => Provider::Xai,
        }
    }
}

/// Settings only some OpenAI-compatible providers have
/// ([`MockConfig::compatible`](crate::MockConfig::compatible)); each is off
/// (or a documented default) unless set, and read only by its flavor.
///
/// ```
/// let cfg: ratewise_mock::MockConfig = serde_json::from_str(r#"{
///     "flavor": "deepseek",
///     "compatible": {"concurrency": 2, "keepalive_ms": 200, "queue_timeout_ms": 5000}
/// }"#).unwrap();
/// assert_eq!(cfg.compatible.concurrency, Some(2));
/// let d = ratewise_mock::CompatibleConfig::default();
/// assert_eq!((d.keepalive_ms, d.queue_timeout_ms), (1000, 600_000));
/// assert_eq!(d.content_filter_marker, None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompatibleConfig {
    /// Requests per day per (key, model class): Groq's RPD (reported in
    /// `x-ratelimit-*-requests`) or Azure's daily quota (its 429 says
    /// "Please retry after 86400 seconds"). Successes count; a day is a
    /// provider day from the server's start (as Gemini's). Default none.
    pub requests_per_day: Option<u64>,
    /// Mistral: tokens (input + output) per month per (key, model class),
    /// reported in `x-ratelimit-*-tokens-month`; a month is 30 provider
    /// days from the server's start. Default none.
    pub tokens_per_month: Option<u64>,
    /// Azure: a request whose body contains this text is answered 400
    /// `content_filter`. Default none.
    pub content_filter_marker: Option<String>,
    /// DeepSeek: requests in flight per key (from admission to the end of
    /// the answer); more wait for a slot. Default none (no limit).
    pub concurrency: Option<u64>,
    /// DeepSeek: real milliseconds between the blank lines (`\n`, or
    /// `: keep-alive` in a stream) a waiting request is sent (default 1000).
    /// Nothing is sent, not even the status, before the first is due.
    pub keepalive_ms: u64,
    /// DeepSeek: real milliseconds a request waits for a slot at most
    /// (default 600 000: "If the request has not started inference after
    /// 10 minutes, the server will close the connection."; earlier versions
    /// of the page said 30 minutes). Past it, a request to which nothing
    /// was sent yet is answered 503 "Server overloaded"; one already sent
    /// keep-alives has its connection closed.
    pub queue_timeout_ms: u64,
    /// DeepSeek: a request over the concurrency limit is refused at once
    /// with 429 instead of waiting (default false: it waits). DeepSeek's
    /// pages disagree: the current "Rate Limit & Isolation" page says "when
    /// the concurrency limit is exceeded, you will receive an HTTP 429 error
    /// code"; the earlier "Rate Limit" page describes the wait with blank
    /// lines and keep-alive comments.
    pub concurrency_refuses: bool,
    /// OpenRouter: the upstream provider named by an upstream error
    /// (default `"DeepInfra"`).
    pub upstream_provider: String,
}

impl Default for CompatibleConfig {
    fn default() -> Self {
        CompatibleConfig {
            requests_per_day: None,
            tokens_per_month: None,
            content_filter_marker: None,
            concurrency: None,
            keepalive_ms: 1000,
            queue_timeout_ms: 600_000,
            concurrency_refuses: false,
            upstream_provider: "DeepInfra".into(),
        }
    }
}
