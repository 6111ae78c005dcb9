//! # ratewise-mock
//!
//! A fault-injecting mock LLM provider that answers like the real APIs:
//! Anthropic `POST /v1/messages`, OpenAI `POST /v1/chat/completions` and
//! Gemini `POST /v1beta/models/{model}:generateContent` /
//! `:streamGenerateContent`, JSON and SSE, with the providers' headers,
//! error bodies, rate limits, acceleration limit, spend cap, billing
//! errors and injected faults.
//! No test ever needs a real provider.
//!
//! * [`model`] — the pure provider model ([`ProviderModel::handle`] with an
//!   explicit `now`), reusable by a discrete-event simulator.
//! * [`render`] — pure rendering of answers into provider-shaped bytes.
//! * [`server`] — the hyper server: [`MockServer::start`] on an ephemeral
//!   loopback port, [`RequestRecord`]s of every request, runtime controls.
//! * [`clock`] — the time scale (a provider minute may last a real second).
//! * [`tokens`] — deterministic input estimates and output lengths.
//!
//! Conventions, in short:
//!
//! * **Keys** come from `x-api-key` or `Authorization: Bearer` (Gemini:
//!   `x-goog-api-key` or `?key=`); records
//!   keep a configured label or an 8-hex-digit fingerprint, never the key.
//!   [`JOB_HEADER`] / [`ATTEMPT_HEADER`] are recorded so tests can count
//!   sends per job ([`sends_per_job`]).
//! * **Tokens**: input = `ceil(bytes / 4)` of the text under `system` and
//!   `messages`, or [`INPUT_TOKENS_HEADER`]; output = a seeded hash of the
//!   body in [`MockConfig::output_tokens`], capped by `max_tokens`
//!   ([`tokens::output_tokens_for`] predicts it).
//! * **Time**: [`MockConfig::seconds_per_minute`] shrinks a provider minute;
//!   the bucket maths stays per minute in provider time, and everything told
//!   to clients (`retry-after`, reset headers, "try again in") is in *real*
//!   time: `retry-after` as decimal seconds rounded up to the millisecond.
//! * **Wire**: non-stream bodies are chunked by default, or sent with a
//!   `Content-Length` ([`MockConfig::framing`]); with
//!   [`MockConfig::compression`] answers are compressed per the request's
//!   `Accept-Encoding` ([`encoding`]).
//! * **Gemini** ([`MockConfig::gemini_limits`], [`GeminiConfig`]): per-model
//!   RPM and input-TPM buckets, an optional per-day quota and "limit: 0"
//!   models; never a rate-limit header, every 429 a `google.rpc.Status`
//!   `RESOURCE_EXHAUSTED` with `QuotaFailure`, `Help` and `RetryInfo`
//!   ([`render::gemini`]).
//! * **OpenAI-compatible flavors**: [`MockConfig::flavor`] ([`Flavor`])
//!   makes the OpenAI surface answer as Azure OpenAI, Groq, Mistral,
//!   DeepSeek, OpenRouter or xAI document ([`flavor`], [`render::flavor`]),
//!   with [`CompatibleConfig`] for what only they have.
//! * **Bedrock** ([`MockConfig::bedrock_limits`], [`BedrockConfig`]): `POST
//!   /model/{modelId}/converse`, throttled with `ThrottlingException`
//!   ([`render::bedrock`]); a SigV4 `Authorization` is checked for its
//!   shape, and verified when the mock knows the access key's secret
//!   ([`request::bedrock::authenticate`]).
//! * **Claude on Vertex AI**: `POST /v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict`
//!   (and `:streamRawPredict`): the Messages surface behind Vertex's
//!   route, Bearer token and body rules ([`request::vertex`]), paced with
//!   [`MockConfig::anthropic_limits`], no rate-limit header.
//! * **Silent providers**: [`MockConfig::silent`] ([`Silent`]) sends no
//!   rate-limit headers at all, and optionally no `retry-after` either
//!   (the wait only in the 429's message), over the same buckets: the
//!   providers that state no limits, for clients that must learn them
//!   from their 429s.
//! * **Batch APIs** ([`batch`], [`BatchConfig`]): OpenAI `/v1/files` +
//!   `/v1/batches` and Anthropic `/v1/messages/batches`, processed in the
//!   background on the provider clock; items take nothing from the
//!   per-minute buckets, cost [`BatchConfig::discount`] of the model's
//!   price ([`MockConfig::prices`]) and count toward the spend cap
//!   ([`MockServer::usd_direct`], [`MockServer::usd_batch`]).
//! * **Runtime control**: [`MockServer::set_faults`],
//!   [`MockServer::set_billing_error`], [`MockServer::set_spend_cap`],
//!   [`MockServer::set_acceleration`], or the same over HTTP under `/mock/`
//!   (see [`server`]) for the binary.
//!
//! ```
//! use ratewise_mock::{MockConfig, MockServer};
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let config = MockConfig { seconds_per_minute: 1.0, ..MockConfig::default() };
//! let server = MockServer::start(config).await.unwrap();
//! // point a client at server.base_url() (OpenAI: base_url() + "/v1") ...
//! assert!(server.records().is_empty());
//! server.shutdown().await;
//! # }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod batch;
pub mod body;
pub mod bucket;
pub mod clock;
pub mod config;
pub mod encoding;
pub mod faults;
pub mod flavor;
mod io;
pub mod model;
pub mod record;
pub mod render;
pub mod request;
pub mod server;
pub mod tokens;

pub use clock::TimeScale;
pub use config::{
    AccelerationConfig, BatchConfig, BedrockConfig, BiasConfig, Framing, GeminiConfig,
    LatencyConfig, Limits, MockConfig, ModelPrice, OutputRange, RemainingRounding, Silent,
    SpendConfig,
};
pub use faults::{Fault, FaultRule, RetryAfterFormat, Trigger};
pub use flavor::{CompatibleConfig, Flavor};
pub use model::{Answer, Outcome, ProviderModel, RequestMeta};
pub use record::{sends_per_job, RequestRecord, ATTEMPT_HEADER, JOB_HEADER};
pub use server::MockServer;
pub use tokens::INPUT_TOKENS_HEADER;
