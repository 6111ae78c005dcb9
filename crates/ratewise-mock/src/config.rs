//! The mock's configuration: every field has a default, so `{}` is a valid
//! config file and tests set only what they care about.
//!
//! ```
//! let cfg: ratewise_mock::MockConfig = serde_json::from_str(r#"{
//!     "seconds_per_minute": 1.0,
//!     "anthropic_limits": {"requests_per_minute": 5},
//!     "spend": {"cap_usd": 0.01},
//!     "capacity_seconds": 10.0,
//!     "faults": [{"fault": "overloaded", "when": {"nth": [1]}}],
//!     "framing": "chunked",
//!     "compression": true
//! }"#).unwrap();
//! assert_eq!(cfg.anthropic_limits.requests_per_minute, Some(5));
//! assert_eq!(cfg.framing, ratewise_mock::Framing::Chunked);
//! // per-minute limits enforced over 10 s; rejected requests cost nothing
//! assert_eq!((cfg.capacity_seconds, cfg.count_rejected), (10.0, false));
//! // a limits object replaces the defaults: what it omits is unlimited
//! assert_eq!(cfg.anthropic_limits.input_tokens_per_minute, None);
//! assert_eq!(cfg.openai_limits.tokens_per_minute, Some(200_000));
//! ```

use crate::faults::FaultRule;
use crate::flavor::{CompatibleConfig, Flavor};
use ratewise_core::{Dimension, Provider};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Everything the mock can be told. See the field docs for defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MockConfig {
    /// Seed for output lengths, request ids and fault dice (default 0).
    pub seed: u64,
    /// Real seconds one provider minute lasts (default 60 = real time;
    /// `1.0` makes a minute pass in a second). Alias: `time_scale`.
    #[serde(alias = "time_scale")]
    pub seconds_per_minute: f64,
    /// Limits for `/v1/messages` (default 50 RPM, 30 000 ITPM, 8 000 OTPM).
    pub anthropic_limits: Limits,
    /// Limits for `/v1/chat/completions` (default 500 RPM, 200 000 TPM).
    pub openai_limits: Limits,
    /// Limits for the Gemini routes (`/v1beta/models/{model}:generateContent`
    /// and `:streamGenerateContent`), per (key, model class): default 15 RPM
    /// and 1 000 000 input tokens per minute ([`Limits::gemini_default`]).
    /// Gemini documents RPM, TPM (input) and RPD; output tokens are not
    /// limited, so only `requests_per_minute` and `input_tokens_per_minute`
    /// mean anything Google would say (the others work, and are named in
    /// 429s as input tokens). Per-day: [`GeminiConfig::requests_per_day`].
    pub gemini_limits: Limits,
    /// Limits for Bedrock's `POST /model/{modelId}/converse`, per (key,
    /// model class): default 50 requests and 200 000 tokens (input +
    /// output) per minute ([`Limits::bedrock_default`]).
    pub bedrock_limits: Limits,
    /// What only the Bedrock surface has: the SigV4 secrets it verifies
    /// signatures with (none by default: the signature's shape is checked,
    /// not its value).
    pub bedrock: BedrockConfig,
    /// What only the Gemini surface has: the per-day request quota, models
    /// the key's tier lacks ("limit: 0"), the default `maxOutputTokens`.
    pub gemini: GeminiConfig,
    /// Per model class limits that replace the provider's defaults.
    pub class_limits: BTreeMap<String, Limits>,
    /// Model → class mapping by prefix; first match wins. A model matching
    /// none is its own class with any `-YYYYMMDD` suffix removed.
    pub model_classes: Vec<ModelClassRule>,
    /// Acceleration limit (off by default).
    pub acceleration: Option<AccelerationConfig>,
    /// Seconds of refill every per-minute bucket holds (default 60: a
    /// minute of the limit). A bucket of limit `L` per minute holds
    /// `L × capacity_seconds / 60`, refills at `L` per minute and starts
    /// full; `10.0` is a per-minute limit enforced over 10 s, as Anthropic
    /// documents it may be. `*-limit` headers still say the per-minute
    /// limit, `*-remaining` the level and `*-reset` when that bucket is full
    /// again. A cost above a bucket's capacity is admitted by a full bucket
    /// and leaves a debt (see [`crate::bucket`]). A value that is not a
    /// positive finite number means 60; at most 86 400 (a day).
    ///
    /// **A choice, not a documented value.** Anthropic documents a token
    /// bucket ("your capacity is continuously replenished up to your
    /// maximum limit") and that "a rate of 60 requests per minute (RPM)
    /// might be enforced as 1 request per second"
    /// (<https://platform.claude.com/docs/en/api/rate-limits>); OpenAI that
    /// "Rate limits can be applied over shorter periods - for example, 1
    /// request per second for a 60 RPM limit"
    /// (<https://help.openai.com/en/articles/5955604-how-can-i-solve-429-too-many-requests-errors>).
    /// Neither says how much a bucket holds, so the mock's 60 is a choice:
    /// vary it (scenarios do) rather than trust it.
    pub capacity_seconds: f64,
    /// A request answered 429 for a rate limit (a per-minute limit or the
    /// acceleration limit) still takes a request from the requests bucket,
    /// as OpenAI documents; it is charged no tokens (default false: rejected
    /// requests cost nothing).
    pub count_rejected: bool,
    /// What the token `*-remaining` headers show (default
    /// [`RemainingRounding::Documented`]: Anthropic's rounded to the nearest
    /// thousand, as Anthropic documents; OpenAI's exact).
    pub remaining_rounding: RemainingRounding,
    /// Departures from the documentation, to test clients against a
    /// provider whose headers are not the whole truth (none by default).
    pub bias: BiasConfig,
    /// Prices and the spend cap (no cap by default).
    pub spend: SpendConfig,
    /// Per-model prices (USD per million tokens), first matching prefix
    /// wins; a model matching none costs [`SpendConfig`]'s flat prices.
    /// Default empty (every model at the flat 3 / 15, Claude Sonnet's
    /// price); [`ModelPrice::documented`] is a table from the providers'
    /// pricing pages. Direct answers and batch items are priced alike,
    /// batch items at [`BatchConfig::discount`] of it.
    pub prices: Vec<ModelPrice>,
    /// The batch APIs (OpenAI `/v1/files` + `/v1/batches`, Anthropic
    /// `/v1/messages/batches`): throughput, window, bounds, discount.
    pub batch: BatchConfig,
    /// Answer every request with 402 `billing_error` (default false;
    /// switchable at runtime).
    pub billing_error: bool,
    /// Range of output lengths (default 5..=50 tokens), capped by `max_tokens`.
    pub output_tokens: OutputRange,
    /// Output tokens per SSE content delta (default 4).
    pub tokens_per_delta: u64,
    /// Latency (default none).
    pub latency: LatencyConfig,
    /// How non-stream bodies (JSON answers and errors) are framed:
    /// `"content_length"` (default: a `Content-Length` header and the body
    /// in one piece, as real providers send JSON) or `"chunked"`
    /// (`Transfer-Encoding: chunked`, the body in two chunks). Streams are
    /// always chunked.
    pub framing: Framing,
    /// Compress answers as the request's `Accept-Encoding` allows
    /// (default false): `gzip`, `br` or `deflate` (zlib-wrapped), the
    /// highest q-value winning and the first listed on a tie, sent with
    /// `Content-Encoding` and `Vary: accept-encoding`. Applies to JSON
    /// answers, errors and streams (flushed per SSE event); a request
    /// without an acceptable coding gets the body as it is.
    pub compression: bool,
    /// Send no rate-limit headers, as many providers do (default
    /// [`Silent::Off`]: the headers as documented). `"retry_after"` keeps
    /// `retry-after` on a 429; `"message"` drops it too and says the wait
    /// only in the error message. Only what the answers say changes: the
    /// buckets admit and refuse exactly the same requests.
    pub silent: Silent,
    /// Which OpenAI-compatible provider `/v1/chat/completions` answers as
    /// (default [`Flavor::Openai`]: OpenAI). See [`crate::flavor`].
    pub flavor: Flavor,
    /// Settings of the OpenAI-compatible flavors (daily and monthly
    /// quotas, Azure's content filter, DeepSeek's concurrency queue).
    pub compatible: CompatibleConfig,
    /// Faults to inject, checked in order (default none).
    pub faults: Vec<FaultRule>,
    /// Labels recorded instead of a key's fingerprint: key → label.
    pub key_labels: BTreeMap<String, String>,
    /// Largest request body read, bytes (default 4 MiB); larger gets 413.
    pub max_body_bytes: usize,
    /// Most records kept (default 100 000); later requests are counted but
    /// not recorded.
    pub max_records: usize,
    /// Most distinct (key, model class) bucket sets (default 10 000); a new
    /// key past it is answered 401.
    pub max_keys: usize,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            seed: 0,
            seconds_per_minute: 60.0,
            anthropic_limits: Limits::anthropic_default(),
            openai_limits: Limits::openai_default(),
            gemini_limits: Limits::gemini_default(),
            gemini: GeminiConfig::default(),
            bedrock_limits: Limits::bedrock_default(),
            bedrock: BedrockConfig::default(),
            class_limits: BTreeMap::new(),
            model_classes: Vec::new(),
            acceleration: None,
            capacity_seconds: 60.0,
            count_rejected: false,
            remaining_rounding: RemainingRounding::default(),
            bias: BiasConfig::default(),
            spend: SpendConfig::default(),
            prices: Vec::new(),
            batch: BatchConfig::default(),
            billing_error: false,
            output_tokens: OutputRange::default(),
            tokens_per_delta: 4,
            latency: LatencyConfig::default(),
            framing: Framing::default(),
            compression: false,
            silent: Silent::Off,
            flavor: Flavor::Openai,
            compatible: CompatibleConfig::default(),
            faults: Vec::new(),
            key_labels: BTreeMap::new(),
            max_body_bytes: 4 << 20,
            max_records: 100_000,
            max_keys: 10_000,
        }
    }
}

/// The Bedrock surface's settings.
///
/// ```
/// let cfg: ratewise_mock::MockConfig = serde_json::from_str(
///     r#"{"bedrock": {"sigv4_secrets": {"AKIDMOCK": "mock-secret"}}}"#).unwrap();
/// assert_eq!(cfg.bedrock.sigv4_secrets.len(), 1);
/// // Debug names the access key ids, never a secret.
/// assert!(!format!("{cfg:?}").contains("mock-secret"));
/// ```
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BedrockConfig {
    /// Access key id → secret access key. Empty (the default): a SigV4
    /// `Authorization` is checked for its shape only (scope, signed
    /// headers, 64 hex digits, `x-amz-date`). Not empty: its signature is
    /// verified too (canonical request, string to sign, derived key), and
    /// an access key id not listed is 403 `UnrecognizedClientException`.
    pub sigv4_secrets: BTreeMap<String, String>,
}

impl std::fmt::Debug for BedrockConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BedrockConfig")
            .field(
                "sigv4_secrets",
                &self.sigv4_secrets.keys().collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// What the token `*-remaining` headers show. Only what the headers
/// *say* changes: the buckets, admissions and [`crate::model::WindowView`]'s
/// true `remaining` are the same either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RemainingRounding {
    /// As documented (the default). Anthropic's token headers
    /// (`anthropic-ratelimit-input-tokens-remaining`, `-output-tokens-`,
    /// `-tokens-`) are "The number of input tokens remaining (rounded to
    /// the nearest thousand) before being rate limited."
    /// (<https://platform.claude.com/docs/en/api/rate-limits>, response
    /// headers table): half up, so 1 500 shows 2 000 and 499 shows 0.
    /// `anthropic-ratelimit-requests-remaining` is exact ("The number of
    /// requests remaining before being rate limited."), and so is every
    /// OpenAI header: OpenAI documents no rounding ("The remaining number
    /// of tokens that are permitted before exhausting the rate limit.",
    /// <https://platform.openai.com/docs/guides/rate-limits>).
    #[default]
    Documented,
    /// Every header exact (the mock before issue #24): for tests that are
    /// about something else and need exact numbers.
    Exact,
}

impl RemainingRounding {
    /// What a `*-remaining` header of `dimension` shows for `value` units.
    ///
    /// ```
    /// use ratewise_core::{Dimension, Provider};
    /// use ratewise_mock::RemainingRounding::{Documented, Exact};
    /// let a = Provider::Anthropic;
    /// assert_eq!(Documented.show(a, Dimension::OutputTokens, 1_500), 2_000);
    /// assert_eq!(Documented.show(a, Dimension::InputTokens, 499), 0);
    /// assert_eq!(Documented.show(a, Dimension::Requests, 499), 499);
    /// assert_eq!(Documented.show(Provider::Openai, Dimension::Tokens, 1_500), 1_500);
    /// assert_eq!(Exact.show(a, Dimension::OutputTokens, 1_500), 1_500);
    /// ```
    pub fn show(self, provider: Provider, dimension: Dimension, value: u64) -> u64 {
        let rounded = matches!(self, RemainingRounding::Documented)
            && provider != Provider::Openai
            && is_token_dimension(dimension);
        if rounded {
            value.saturating_add(500) / 1000 * 1000
        } else {
            value
        }
    }
}

/// Input, output or combined tokens (not requests).
pub fn is_token_dimension(dimension: Dimension) -> bool {
    matches!(
        dimension,
        Dimension::InputTokens | Dimension::OutputTokens | Dimension::Tokens
    )
}

/// Which rate-limit signals the mock leaves out of its answers.
///
/// Why it exists (issue #35): Anthropic and OpenAI state their limits in
/// `anthropic-ratelimit-*` / `x-ratelimit-*` headers, but many providers
/// state nothing — Gemini's API, Vertex, Bedrock, most OpenAI-compatible
/// hosts, and any proxy that drops unknown headers. There a client learns
/// a limit from its 429s alone, and it needs a provider to be tested
/// against that enforces the same buckets and says less.
///
/// In both silent variants no answer carries a rate-limit header: no
/// `*-limit`, `*-remaining` or `*-reset` of either family, on successes,
/// streams and 429s alike. Everything else is unchanged: statuses, bodies
/// (usage, ids, error types and messages), `request-id`,
/// `x-should-retry`, SSE frames, and the buckets' decisions. An injected
/// [`Fault::RetryAfter`](crate::Fault::RetryAfter) still sends the
/// `retry-after` its rule asks for: a fault says exactly what it sends.
///
/// ```
/// let cfg: ratewise_mock::MockConfig = serde_json::from_str(r#"{"silent": "message"}"#).unwrap();
/// assert_eq!(cfg.silent, ratewise_mock::Silent::Message);
/// assert_eq!(ratewise_mock::MockConfig::default().silent, ratewise_mock::Silent::Off);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Silent {
    /// Every rate-limit header as documented (the default).
    #[default]
    Off,
    /// No rate-limit headers; a 429 (a per-minute limit or the
    /// acceleration limit) still carries `retry-after`, in real seconds
    /// rounded up to the millisecond as always (whole seconds at real
    /// time: the model's waits are whole provider seconds), and the
    /// provider's usual error body — OpenAI's message keeps its own
    /// "Please try again in …", Anthropic's has none. The shape of a
    /// provider behind a proxy that keeps only the standard HTTP header.
    RetryAfter,
    /// No rate-limit headers and no `retry-after` either: a 429's wait is
    /// said only in its error message, as OpenAI words it ("… Please try
    /// again in 1.146s. …", a Go duration of real time), for both
    /// providers — Anthropic's message gains the same sentence, which
    /// ratewise-core's `parse::message::try_again_in` reads. The shape of
    /// providers whose only hint is in the text.
    Message,
}

impl Silent {
    /// Rate-limit headers (`anthropic-ratelimit-*`, `x-ratelimit-*`) are
    /// left out.
    pub fn hides_ratelimit_headers(self) -> bool {
        !matches!(self, Silent::Off)
    }

    /// A rate-limit 429 carries `retry-after`.
    pub fn sends_retry_after(self) -> bool {
        !matches!(self, Silent::Message)
    }

    /// A rate-limit 429's message says the wait ("Please try again in
    /// …"), whatever the provider usually writes.
    pub fn wait_in_message(self) -> bool {
        matches!(self, Silent::Message)
    }
}

/// Biases the providers' documentation does not describe, each off by
/// default. They exist because a client tuned against a provider that
/// tells the exact truth may fail against one that does not; each is a
/// plausible way for headers to mislead.
///
/// Out-of-range shares are clamped, like [`MockConfig::capacity_seconds`]:
/// not a finite number or below 0 means 0, above [`MAX_SHARE`] means
/// [`MAX_SHARE`] (a share of 1 would leave the key nothing, or no bucket).
///
/// ```
/// let cfg: ratewise_mock::MockConfig = serde_json::from_str(r#"{
///     "bias": {"remaining_tokens_high": 400, "capacity_shortfall": 0.2, "other_client_share": 0.3}
/// }"#).unwrap();
/// assert_eq!(cfg.bias.remaining_tokens_high, 400);
/// assert_eq!(ratewise_mock::BiasConfig { capacity_shortfall: 7.0, ..Default::default() }
///     .clamped().capacity_shortfall, ratewise_mock::config::MAX_SHARE);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct BiasConfig {
    /// Every token `*-remaining` header (input, output, combined; both
    /// providers) reports this many tokens above the truth, before any
    /// rounding. Requests are told exactly.
    pub remaining_tokens_high: u64,
    /// Share (0..1) of [`MockConfig::capacity_seconds`] every bucket lacks:
    /// it really holds `(1 − x)` of it, while its headers imply the full
    /// capacity. The headers are those of a full-size bucket charged like
    /// the real one: `*-remaining` is the true level plus `x` of the full
    /// capacity (a full bucket shows the full capacity; an empty one still
    /// shows `x` of it), and `*-reset` is when that full-size bucket would
    /// be full — the instant the real one is. `0.2` is "a bucket whose
    /// capacity is 20 % below what its headers imply".
    pub capacity_shortfall: f64,
    /// Share (0..1) of every per-minute limit a second client on the same
    /// key takes, continuously (0.3 = 30 % of the key's requests and
    /// tokens per minute). It takes only what is there: while a bucket is
    /// above zero it refills at `(1 − x)` of its rate, while it pays back a
    /// debt at the full rate. It is seen only in the headers (`*-remaining`
    /// and `*-reset` show the level it leaves); it sends no requests the
    /// mock records or answers.
    pub other_client_share: f64,
    /// Once, a second client on the key takes this many tokens at a go
    /// from each token bucket (input, output, combined) of the key and
    /// model class of the provider's request number
    /// [`burst_at_request`](Self::burst_at_request), just before that
    /// request is charged: a one-off nobody's model could foresee, seen
    /// only in the headers that follow. A request answered before its
    /// charge (a fault, the acceleration limit, a spend cap) takes no
    /// burst with it. `0`: never.
    pub burst_tokens: u64,
    /// The request (counted from 1 across the provider, as the
    /// [`Answer::nth`](crate::model::Answer::nth) it gets) before which
    /// [`burst_tokens`](Self::burst_tokens) are taken.
    pub burst_at_request: u64,
}

/// Largest [`BiasConfig`] share: a bucket keeps at least 1 % of its
/// capacity and of its refill.
pub const MAX_SHARE: f64 = 0.99;

impl BiasConfig {
    /// The bias with its shares made valid (see [`BiasConfig`]).
    pub fn clamped(self) -> Self {
        let share = |x: f64| {
            if x.is_finite() && x > 0.0 {
                x.min(MAX_SHARE)
            } else {
                0.0
            }
        };
        BiasConfig {
            remaining_tokens_high: self.remaining_tokens_high,
            capacity_shortfall: share(self.capacity_shortfall),
            other_client_share: share(self.other_client_share),
            ..self
        }
    }
}

/// Per-minute limits of one (key, model class). `None` = unlimited. A
/// limits object in a config replaces the defaults as a whole: fields it
/// omits are unlimited.
///
/// Anthropic publishes requests, input tokens and output tokens; OpenAI
/// publishes requests and combined tokens (`tokens_per_minute`, charged
/// input + `max_tokens` at the start). Any combination may be set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Requests per minute.
    pub requests_per_minute: Option<u64>,
    /// Input tokens per minute (`input_tokens + cache_creation_input_tokens`).
    pub input_tokens_per_minute: Option<u64>,
    /// Output tokens per minute (charged from `max_tokens`, corrected at the end).
    pub output_tokens_per_minute: Option<u64>,
    /// Combined tokens per minute (input + output).
    pub tokens_per_minute: Option<u64>,
}

impl Limits {
    /// Anthropic tier-1-like defaults.
    pub fn anthropic_default() -> Self {
        Limits {
            requests_per_minute: Some(50),
            input_tokens_per_minute: Some(30_000),
            output_tokens_per_minute: Some(8_000),
            tokens_per_minute: None,
        }
    }

    /// OpenAI-like defaults.
    pub fn openai_default() -> Self {
        Limits {
            requests_per_minute: Some(500),
            input_tokens_per_minute: None,
            output_tokens_per_minute: None,
            tokens_per_minute: Some(200_000),
        }
    }

    /// Bedrock on-demand-like defaults: 50 requests and 200 000 tokens per
    /// minute (**a choice**: Bedrock's quotas differ by model and region).
    pub fn bedrock_default() -> Self {
        Limits {
            requests_per_minute: Some(50),
            input_tokens_per_minute: None,
            output_tokens_per_minute: None,
            tokens_per_minute: Some(200_000),
        }
    }

    /// Gemini free-tier-like defaults: 15 RPM and 1 000 000 input tokens
    /// per minute (the free tier's published figures for its Flash models
    /// were of this size; a choice, not a current table). No output limit:
    /// Gemini documents none.
    pub fn gemini_default() -> Self {
        Limits {
            requests_per_minute: Some(15),
            input_tokens_per_minute: Some(1_000_000),
            output_tokens_per_minute: None,
            tokens_per_minute: None,
        }
    }
}

/// Default `generationConfig.maxOutputTokens` of a Gemini request that
/// sets none (see [`GeminiConfig::default_max_output_tokens`]).
pub const GEMINI_DEFAULT_MAX_OUTPUT_TOKENS: u64 = 8192;

/// Gemini quotas beyond the per-minute buckets ([`MockConfig::gemini`]).
///
/// ```
/// let cfg: ratewise_mock::MockConfig = serde_json::from_str(r#"{
///     "gemini_limits": {"requests_per_minute": 5, "input_tokens_per_minute": 250000},
///     "gemini": {"requests_per_day": 100, "limit_zero_models": ["gemini-2.5-pro"]}
/// }"#).unwrap();
/// assert_eq!(cfg.gemini.requests_per_day, Some(100));
/// assert_eq!(cfg.gemini.default_max_output_tokens, 8192);
/// assert!(cfg.gemini.grants_nothing("gemini-2.5-pro-preview"));
/// assert!(!cfg.gemini.grants_nothing("gemini-2.5-flash"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GeminiConfig {
    /// Requests per day per (key, model class), as Gemini's RPD: past it
    /// every request is answered 429 naming
    /// `GenerateRequestsPerDayPerProjectPerModel` until the day ends.
    /// `None` (default): no daily quota. A day is a provider day
    /// (86 400 provider seconds, scaled like every minute) counted from the
    /// server's start — **a choice**: Google resets at midnight Pacific,
    /// and the mock's provider clock has no calendar. Successes count;
    /// refused requests do not.
    pub requests_per_day: Option<u64>,
    /// Models the key's tier does not have: every request for a model
    /// starting with one of these prefixes is answered 429 with "limit: 0"
    /// in the message (and "Please retry in 25.46s", which no wait honours),
    /// as google-gemini/gemini-cli#22486 shows. Default none.
    pub limit_zero_models: Vec<String>,
    /// `maxOutputTokens` of a request that sets none (default 8192, the
    /// output limit Gemini's model cards gave its 1.5 and 2.0 models; 2.5
    /// models allow more). It caps the output like `max_tokens`.
    pub default_max_output_tokens: u64,
}

impl Default for GeminiConfig {
    fn default() -> Self {
        GeminiConfig {
            requests_per_day: None,
            limit_zero_models: Vec::new(),
            default_max_output_tokens: GEMINI_DEFAULT_MAX_OUTPUT_TOKENS,
        }
    }
}

impl GeminiConfig {
    /// Whether `model` is one the key's tier lacks (a quota of 0).
    pub fn grants_nothing(&self, model: &str) -> bool {
        self.limit_zero_models
            .iter()
            .any(|p| !p.is_empty() && model.starts_with(p.as_str()))
    }
}

/// Maps models starting with `prefix` to the bucket class `class`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelClassRule {
    /// Model name prefix.
    pub prefix: String,
    /// Class name (the bucket's name).
    pub class: String,
}

/// Acceleration limit: a key that was idle for `idle_secs` may send at most
/// `max_requests` in the `window_secs` after it resumes; more get 429
/// `slow_down` (OpenAI) / `rate_limit_error` with `details.error_code =
/// "ramp_limit_exceeded"` (Anthropic),
/// even under the nominal limits. Provider seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccelerationConfig {
    /// Idle time after which a key's ramp starts over (default 60).
    pub idle_secs: f64,
    /// Length of the ramp window (default 10).
    pub window_secs: f64,
    /// Requests allowed in the window (default 5).
    pub max_requests: u64,
}

impl Default for AccelerationConfig {
    fn default() -> Self {
        AccelerationConfig {
            idle_secs: 60.0,
            window_secs: 10.0,
            max_requests: 5,
        }
    }
}

/// Prices and the organisation-wide spend cap.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpendConfig {
    /// After this total (USD, all keys) every request gets the spend-cap
    /// answer. `None` = no cap.
    pub cap_usd: Option<f64>,
    /// USD per million input tokens (default 3).
    pub input_usd_per_mtok: f64,
    /// USD per million output tokens (default 15).
    pub output_usd_per_mtok: f64,
}

impl Default for SpendConfig {
    fn default() -> Self {
        SpendConfig {
            cap_usd: None,
            input_usd_per_mtok: 3.0,
            output_usd_per_mtok: 15.0,
        }
    }
}

/// The price of the models starting with `prefix`.
///
/// ```
/// let cfg: ratewise_mock::MockConfig = serde_json::from_str(r#"{
///     "prices": [{"prefix": "gpt-4o-mini", "input_usd_per_mtok": 0.15, "output_usd_per_mtok": 0.6}]
/// }"#).unwrap();
/// assert_eq!(cfg.price_of("gpt-4o-mini-2024-07-18").input_usd_per_mtok, 0.15);
/// assert_eq!(cfg.price_of("claude-sonnet-4-5").output_usd_per_mtok, 15.0); // the flat default
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Model name prefix.
    pub prefix: String,
    /// USD per million input tokens.
    pub input_usd_per_mtok: f64,
    /// USD per million output tokens.
    pub output_usd_per_mtok: f64,
}

impl ModelPrice {
    /// A price row.
    pub fn new(prefix: &str, input_usd_per_mtok: f64, output_usd_per_mtok: f64) -> Self {
        ModelPrice {
            prefix: prefix.to_string(),
            input_usd_per_mtok,
            output_usd_per_mtok,
        }
    }

    /// Standard (non-batch) prices from the providers' pricing pages
    /// (<https://platform.claude.com/docs/en/about-claude/pricing>,
    /// <https://platform.openai.com/docs/pricing>), USD per million input /
    /// output tokens, longer prefixes first. A snapshot: the pages change.
    pub fn documented() -> Vec<ModelPrice> {
        vec![
            ModelPrice::new("claude-opus-4", 15.0, 75.0),
            ModelPrice::new("claude-sonnet-4", 3.0, 15.0),
            ModelPrice::new("claude-haiku-4-5", 1.0, 5.0),
            ModelPrice::new("claude-3-5-haiku", 0.8, 4.0),
            ModelPrice::new("gpt-4o-mini", 0.15, 0.6),
            ModelPrice::new("gpt-4o", 2.5, 10.0),
            ModelPrice::new("gpt-4.1-mini", 0.4, 1.6),
            ModelPrice::new("gpt-4.1", 2.0, 8.0),
        ]
    }

    /// The cost of `input` and `output` tokens at this price, USD.
    pub fn cost(&self, input: u64, output: u64) -> f64 {
        (input as f64 * self.input_usd_per_mtok + output as f64 * self.output_usd_per_mtok) / 1e6
    }
}

/// The batch APIs' settings ([`MockConfig::batch`]). Times are provider
/// seconds (scaled by [`MockConfig::seconds_per_minute`] like everything
/// else), so a test shrinks the 24-hour window with the clock or directly.
///
/// ```
/// let cfg: ratewise_mock::MockConfig = serde_json::from_str(r#"{
///     "batch": {"items_per_second": 5, "window_seconds": 2}
/// }"#).unwrap();
/// assert_eq!(cfg.batch.window_seconds, 2.0);
/// assert_eq!(cfg.batch.discount, 0.5);
/// assert_eq!(ratewise_mock::BatchConfig::default().window_seconds, 86_400.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchConfig {
    /// Items the mock processes per provider second, across every batch
    /// of both providers, oldest batch first (default 10). Not a
    /// documented figure: both providers only promise "within 24 hours".
    pub items_per_second: f64,
    /// How long a batch may run before what is left of it expires,
    /// provider seconds (default 86 400: the documented 24 hours).
    pub window_seconds: f64,
    /// How long an OpenAI batch stays `validating`, provider seconds
    /// (default 1). Anthropic batches start `in_progress`.
    pub validating_seconds: f64,
    /// Items still finished after a cancel (the "in-progress,
    /// non-interruptible requests" both providers say may complete;
    /// default 1); the rest are cancelled.
    pub cancel_finishes: u64,
    /// Batch price as a share of the direct price (default 0.5: both
    /// providers document 50 % off).
    pub discount: f64,
    /// Most batches kept (default 1 000, both providers together): past
    /// it the oldest ended batch is forgotten (with its files), and when
    /// none has ended a create is refused with 429.
    pub max_batches: usize,
    /// Most files kept (default 10 000): past it an upload is refused.
    pub max_files: usize,
    /// Largest OpenAI file, bytes (default 200 MB, as documented).
    pub max_file_bytes: usize,
    /// Largest Anthropic create body, bytes (default 256 MB, as documented).
    pub max_anthropic_bytes: usize,
    /// Most bytes all files and batch inputs may hold together (default
    /// 1 GiB); past it uploads and creates are refused.
    pub max_store_bytes: usize,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            items_per_second: 10.0,
            window_seconds: 86_400.0,
            validating_seconds: 1.0,
            cancel_finishes: 1,
            discount: 0.5,
            max_batches: 1_000,
            max_files: 10_000,
            max_file_bytes: 200_000_000,
            max_anthropic_bytes: 256_000_000,
            max_store_bytes: 1 << 30,
        }
    }
}

/// Inclusive range of output lengths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputRange {
    /// Fewest output tokens.
    pub min: u64,
    /// Most output tokens (before the `max_tokens` cap).
    pub max: u64,
}

impl Default for OutputRange {
    fn default() -> Self {
        OutputRange { min: 5, max: 50 }
    }
}

/// How the mock frames a non-stream body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Framing {
    /// A `Content-Length` header and the body in one piece (default: what
    /// real providers send for JSON).
    #[default]
    ContentLength,
    /// `Transfer-Encoding: chunked`, no length told up front.
    Chunked,
}

/// Response latency, real milliseconds (not scaled).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct LatencyConfig {
    /// Before the first byte of every answer.
    pub first_byte_ms: u64,
    /// Per output token of a success (JSON: before the body; streams: between deltas).
    pub per_output_token_ms: f64,
}

impl MockConfig {
    /// Reads a JSON config.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The price of `model`: the first [`MockConfig::prices`] row whose
    /// prefix it starts with, else [`SpendConfig`]'s flat prices.
    pub fn price_of(&self, model: &str) -> ModelPrice {
        price_of(&self.prices, &self.spend, model)
    }
}

/// The price of `model` in `prices`, else `spend`'s flat prices.
pub fn price_of(prices: &[ModelPrice], spend: &SpendConfig, model: &str) -> ModelPrice {
    prices
        .iter()
        .find(|p| model.starts_with(p.prefix.as_str()))
        .cloned()
        .unwrap_or_else(|| ModelPrice {
            prefix: String::new(),
            input_usd_per_mtok: spend.input_usd_per_mtok,
            output_usd_per_mtok: spend.output_usd_per_mtok,
        })
}
