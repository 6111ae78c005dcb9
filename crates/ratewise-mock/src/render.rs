//! Answers rendered into the providers' exact shapes: status, headers,
//! JSON bodies, HTML proxy pages and SSE frames. Pure: everything it needs
//! (ids, the wall clock, the time scale) comes in a [`RenderCtx`].
//!
//! Durations told to clients are in **real** time (see [`crate::clock`]):
//! `retry-after` in decimal seconds rounded up to the millisecond,
//! `anthropic-ratelimit-*-reset` as RFC 3339 instants on the real wall
//! clock, `x-ratelimit-reset-*` as Go durations.
//!
//! `*-remaining` headers print [`WindowView::reported_remaining`]: what the
//! model says the headers show (Anthropic's token values rounded to the
//! nearest thousand by default, as documented; biases applied), never the
//! true level.
//!
//! [`RenderCtx::silent`] ([`Silent`]) leaves the rate-limit headers out of
//! every answer, and in its `message` variant moves a 429's wait from
//! `retry-after` into the error message: a provider that states no limits.
//!
//! [`Provider::Gemini`] answers are rendered by [`gemini`] (Google's
//! shapes, never a rate-limit header); the functions here hand them over.
//! The OpenAI surface's flavors ([`RenderCtx::flavor`]) are rendered by
//! [`flavor`], which hands back what it renders as OpenAI does.

pub mod bedrock;
pub mod flavor;
pub mod gemini;
mod sse;

pub use sse::{delivered_tokens, stream_error_frame, stream_frames, stream_headers, SseFrame};

use crate::clock::{ceil_ms, format_retry_after, TimeScale};
use crate::config::Silent;
use crate::faults::{Fault, RetryAfterFormat};
use crate::flavor::Flavor;
use crate::model::LongQuotas;
use crate::model::{Answer, Outcome, WindowView};
use crate::tokens::fnv1a;
use ratewise_core::parse::duration::format_go_duration;
use ratewise_core::time::format_rfc3339;
use ratewise_core::{Dimension, Provider};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

/// Everything rendering needs besides the answer.
#[derive(Debug, Clone)]
pub struct RenderCtx {
    /// Which API shape.
    pub provider: Provider,
    /// The requested model (echoed back).
    pub model: String,
    /// Request id for `request-id` / `x-request-id` (and Anthropic bodies).
    pub request_id: String,
    /// Message / completion id.
    pub message_id: String,
    /// Real wall clock now.
    pub wall_now: SystemTime,
    /// Time scale for durations told to clients.
    pub scale: TimeScale,
    /// Seed of the generated text.
    pub text_seed: u64,
    /// OpenAI `stream_options.include_usage`.
    pub include_usage: bool,
    /// Output tokens per content delta.
    pub tokens_per_delta: u64,
    /// Which rate-limit signals are left out ([`MockConfig::silent`](crate::MockConfig::silent);
    /// [`Silent::Off`] from [`RenderCtx::new`]).
    pub silent: Silent,
    /// Gemini streams: `alt=sse` (server-sent events; the default), else
    /// one JSON array.
    pub sse: bool,
    /// The exact provider-time wait of a rate-limit answer when the server
    /// knows it (Gemini's "Please retry in 12.345s."); `None`: the
    /// outcome's whole seconds.
    pub wait: Option<Duration>,
    /// Which provider the OpenAI surface answers as
    /// ([`MockConfig::flavor`](crate::MockConfig::flavor); [`Flavor::Openai`]
    /// from [`RenderCtx::new`] and on the other routes).
    pub flavor: Flavor,
    /// Azure's `api-version` (empty: none sent).
    pub api_version: String,
    /// The request's per-day and per-month quotas (Groq's and Mistral's
    /// headers); none from [`RenderCtx::new`].
    pub quotas: LongQuotas,
    /// OpenRouter's upstream provider (errors from the model's provider).
    pub upstream: String,
}

impl RenderCtx {
    /// A context with ids derived from `seed` and the request number `nth`.
    pub fn new(provider: Provider, model: &str, seed: u64, nth: u64, wall_now: SystemTime) -> Self {
        let (request_id, message_id) = ids(provider, seed, nth);
        RenderCtx {
            provider,
            model: model.to_string(),
            request_id,
            message_id,
            wall_now,
            scale: TimeScale::REAL,
            text_seed: fnv1a(seed, &nth.to_le_bytes()),
            include_usage: false,
            tokens_per_delta: 4,
            silent: Silent::Off,
            sse: true,
            wait: None,
            flavor: Flavor::Openai,
            api_version: String::new(),
            quotas: LongQuotas::default(),
            upstream: String::new(),
        }
    }
}

/// Deterministic (request id, message id) for request `nth`.
pub fn ids(provider: Provider, seed: u64, nth: u64) -> (String, String) {
    let a = fnv1a(seed, &nth.to_le_bytes());
    let b = fnv1a(a, b"message");
    match provider {
        Provider::Openai => (
            format!("req_{a:016x}{:016x}", fnv1a(a, b"req")),
            format!("chatcmpl-mock{b:016x}"),
        ),
        // Gemini's `responseId` (no request-id header): both the same.
        Provider::Gemini => (base62(b, 23), base62(b, 23)),
        // `x-amzn-RequestId` is a UUID.
        Provider::Bedrock => {
            let c = fnv1a(a, b"uuid");
            let id = format!(
                "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                a >> 32,
                (a >> 16) & 0xffff,
                a & 0xffff,
                c >> 48,
                c & 0xffff_ffff_ffff
            );
            (id.clone(), id)
        }
        _ => (
            format!("req_011CV{}", base62(a, 16)),
            format!("msg_01{}", base62(b, 22)),
        ),
    }
}

/// `x` as `len` base-62 digits (ids in the providers' styles).
pub(crate) fn base62(mut x: u64, len: usize) -> String {
    const A: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = String::with_capacity(len);
    for i in 0..len {
        if x == 0 {
            x = fnv1a(i as u64, b"pad");
        }
        out.push(A[(x % 62) as usize] as char);
        x /= 62;
    }
    out
}

/// A rendered non-streaming answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// HTTP status.
    pub status: u16,
    /// Headers, in order (lower-case names).
    pub headers: Vec<(&'static str, String)>,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl Rendered {
    /// The first header named `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

pub(crate) fn id_header(ctx: &RenderCtx) -> (&'static str, String) {
    match ctx.provider {
        Provider::Openai => ("x-request-id", ctx.request_id.clone()),
        _ => ("request-id", ctx.request_id.clone()),
    }
}

/// `anthropic-ratelimit-*` or `x-ratelimit-*` headers for `windows`; none
/// when [`RenderCtx::silent`] hides them. Every answer's rate-limit headers
/// come from here, so a silent provider leaves none out by accident.
pub fn ratelimit_headers(ctx: &RenderCtx, windows: &[WindowView]) -> Vec<(&'static str, String)> {
    let mut h = Vec::new();
    if ctx.silent.hides_ratelimit_headers() {
        return h;
    }
    if flavor::flavored(ctx) {
        if let Some(h) = flavor::ratelimit_headers(ctx, windows) {
            return h;
        }
    }
    for w in windows {
        let real_reset = ctx.scale.to_real(w.reset);
        match ctx.provider {
            Provider::Openai => {
                let (l, r, t) = match w.dimension {
                    Dimension::Requests => (
                        "x-ratelimit-limit-requests",
                        "x-ratelimit-remaining-requests",
                        "x-ratelimit-reset-requests",
                    ),
                    Dimension::Tokens => (
                        "x-ratelimit-limit-tokens",
                        "x-ratelimit-remaining-tokens",
                        "x-ratelimit-reset-tokens",
                    ),
                    Dimension::InputTokens => (
                        "x-ratelimit-limit-input-tokens",
                        "x-ratelimit-remaining-input-tokens",
                        "x-ratelimit-reset-input-tokens",
                    ),
                    Dimension::OutputTokens => (
                        "x-ratelimit-limit-output-tokens",
                        "x-ratelimit-remaining-output-tokens",
                        "x-ratelimit-reset-output-tokens",
                    ),
                    // A dimension this mock has no header for.
                    _ => continue,
                };
                h.push((l, w.limit.to_string()));
                h.push((r, w.reported_remaining.to_string()));
                h.push((t, go_duration_ms(real_reset)));
            }
            _ => {
                let (l, r, t) = match w.dimension {
                    Dimension::Requests => (
                        "anthropic-ratelimit-requests-limit",
                        "anthropic-ratelimit-requests-remaining",
                        "anthropic-ratelimit-requests-reset",
                    ),
                    Dimension::InputTokens => (
                        "anthropic-ratelimit-input-tokens-limit",
                        "anthropic-ratelimit-input-tokens-remaining",
                        "anthropic-ratelimit-input-tokens-reset",
                    ),
                    Dimension::OutputTokens => (
                        "anthropic-ratelimit-output-tokens-limit",
                        "anthropic-ratelimit-output-tokens-remaining",
                        "anthropic-ratelimit-output-tokens-reset",
                    ),
                    Dimension::Tokens => (
                        "anthropic-ratelimit-tokens-limit",
                        "anthropic-ratelimit-tokens-remaining",
                        "anthropic-ratelimit-tokens-reset",
                    ),
                    // A dimension this mock has no header for.
                    _ => continue,
                };
                let at = ctx
                    .wall_now
                    .checked_add(ceil_ms(real_reset))
                    .unwrap_or(ctx.wall_now);
                h.push((l, w.limit.to_string()));
                h.push((r, w.reported_remaining.to_string()));
                h.push((t, format_rfc3339(at)));
            }
        }
    }
    h
}

pub(crate) fn go_duration_ms(d: Duration) -> String {
    format_go_duration(ceil_ms(d))
}

/// The `retry-after` header of a rate-limit 429 waiting `real`, unless
/// [`Silent::Message`] says the wait only in the message.
pub(crate) fn push_retry_after(
    ctx: &RenderCtx,
    h: &mut Vec<(&'static str, String)>,
    real: Duration,
) {
    if ctx.silent.sends_retry_after() {
        h.push(("retry-after", format_retry_after(real)));
    }
}

/// OpenAI's sentence for a wait of `real` ("Please try again in 1.146s."),
/// the phrase ratewise-core's `parse::message::try_again_in` reads.
fn try_again_sentence(real: Duration) -> String {
    format!("Please try again in {}.", go_duration_ms(real))
}

/// The provider's error body for `error_type` (Anthropic) or
/// `error_type` + `code` (OpenAI).
pub fn error_body(ctx: &RenderCtx, error_type: &str, code: Option<&str>, message: &str) -> Vec<u8> {
    let v = match ctx.provider {
        Provider::Openai => json!({"error": {"message": message, "type": error_type,
            "param": Value::Null, "code": code}}),
        _ => {
            let mut err = json!({"type": error_type, "message": message});
            if let Some(c) = code {
                err["details"] = json!({"error_code": c});
            }
            json!({"type": "error", "error": err, "request_id": ctx.request_id})
        }
    };
    serde_json::to_vec(&v).unwrap_or_default()
}

/// A provider-shaped error for a request-level problem (400, 401, 404,
/// 413, or any status), with its usual error type.
pub fn render_status_error(ctx: &RenderCtx, status: u16, message: &str) -> Rendered {
    if ctx.provider == Provider::Gemini {
        return gemini::render_status_error(status, message);
    }
    if ctx.provider == Provider::Bedrock {
        return bedrock::render_status_error(ctx, status, message);
    }
    let (ty, code) = error_kind(ctx.provider, status);
    let mut headers = vec![
        ("content-type", "application/json".to_string()),
        id_header(ctx),
    ];
    if ctx.provider != Provider::Openai && is_retryable(status) {
        headers.push(("x-should-retry", "true".into()));
    }
    Rendered {
        status,
        headers,
        body: error_body(ctx, ty, code, message),
    }
}

fn is_retryable(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || status >= 500
}

fn error_kind(provider: Provider, status: u16) -> (&'static str, Option<&'static str>) {
    match provider {
        Provider::Openai => match status {
            400 | 422 => ("invalid_request_error", None),
            401 => ("invalid_request_error", Some("invalid_api_key")),
            403 => ("invalid_request_error", Some("model_not_allowed")),
            404 => ("invalid_request_error", Some("unknown_url")),
            408 => ("timeout", Some("request_timeout")),
            413 => ("invalid_request_error", Some("string_above_max_length")),
            429 => ("requests", Some("rate_limit_exceeded")),
            503 => ("service_unavailable_error", None),
            _ => ("server_error", None),
        },
        _ => match status {
            400 | 422 => ("invalid_request_error", None),
            401 => ("authentication_error", None),
            402 => ("billing_error", None),
            403 => ("permission_error", None),
            404 => ("not_found_error", None),
            408 | 504 => ("timeout_error", None),
            413 => ("request_too_large", None),
            429 => ("rate_limit_error", None),
            529 => ("overloaded_error", None),
            _ => ("api_error", None),
        },
    }
}

fn default_message(provider: Provider, status: u16) -> &'static str {
    match (provider, status) {
        (Provider::Openai, 408) => "Request timed out.",
        (Provider::Openai, _) => {
            "The server had an error while processing your request. Sorry about that!"
        }
        (_, 408) | (_, 504) => "Request timed out",
        (_, 529) => "Overloaded",
        _ => "Internal server error",
    }
}

/// A proxy's HTML error page.
pub fn html_page(status: u16) -> Vec<u8> {
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error");
    format!(
        "<html>\r\n<head><title>{status} {reason}</title></head>\r\n<body>\r\n<center><h1>{status} {reason}</h1></center>\r\n<hr><center>cloudflare</center>\r\n</body>\r\n</html>\r\n"
    )
    .into_bytes()
}

/// Renders every non-streaming answer: JSON successes and all errors.
/// (Streams use [`stream_frames`]; resets are not rendered.)
pub fn render_answer(ctx: &RenderCtx, answer: &Answer) -> Rendered {
    let p = ctx.provider;
    if p == Provider::Gemini {
        return gemini::render_answer(ctx, answer);
    }
    if p == Provider::Bedrock {
        return bedrock::render_answer(ctx, answer);
    }
    if flavor::flavored(ctx) {
        if let Some(r) = flavor::render_answer(ctx, answer) {
            return r;
        }
    }
    let anthropic = p != Provider::Openai;
    let mut headers = vec![
        ("content-type", "application/json".to_string()),
        id_header(ctx),
    ];
    let rl = ratelimit_headers(ctx, &answer.windows);
    let retry_true = |h: &mut Vec<(&'static str, String)>| {
        if anthropic {
            h.push(("x-should-retry", "true".into()));
        }
    };
    let (status, body) = match &answer.outcome {
        Outcome::Success(g) => {
            headers.extend(rl);
            (
                200,
                success_body(ctx, g.input_tokens, g.output_tokens, g.reserved_output),
            )
        }
        Outcome::RateLimited {
            dimension,
            retry_after,
            limit,
            used,
            requested,
        } => {
            let real = ctx.scale.to_real(*retry_after);
            push_retry_after(ctx, &mut headers, real);
            retry_true(&mut headers);
            headers.extend(rl);
            let body = if anthropic {
                // Anthropic writes no wait into this message; a silent
                // provider in `message` mode adds OpenAI's sentence.
                let wait = if ctx.silent.wait_in_message() {
                    format!(" {}", try_again_sentence(real))
                } else {
                    String::new()
                };
                let what = match dimension {
                    Dimension::Requests => "requests",
                    Dimension::InputTokens => "input tokens",
                    Dimension::OutputTokens => "output tokens",
                    _ => "tokens",
                };
                let msg = format!(
                    "This request would exceed the rate limit for your organization of {limit} {what} per minute.{wait} For details, refer to: https://docs.claude.com/en/api/rate-limits."
                );
                error_body(ctx, "rate_limit_error", None, &msg)
            } else {
                let (ty, label) = match dimension {
                    Dimension::Requests => ("requests", "requests per min (RPM)"),
                    Dimension::InputTokens => ("input_tokens", "input tokens per min"),
                    Dimension::OutputTokens => ("output_tokens", "output tokens per min"),
                    _ => ("tokens", "tokens per min (TPM)"),
                };
                // OpenAI says the wait in this message whatever `silent` is.
                let msg = format!(
                    "Rate limit reached for {} in organization org-mock on {label}: Limit {limit}, Used {used}, Requested {requested}. {} Visit https://platform.openai.com/account/rate-limits to learn more.",
                    ctx.model,
                    try_again_sentence(real)
                );
                error_body(ctx, ty, Some("rate_limit_exceeded"), &msg)
            };
            (429, body)
        }
        Outcome::SlowDown { retry_after } => {
            let real = ctx.scale.to_real(*retry_after);
            push_retry_after(ctx, &mut headers, real);
            retry_true(&mut headers);
            headers.extend(rl);
            let mut msg = if anthropic {
                "Your organization's request rate increased too sharply. Please reduce the rate at which you send requests and ramp up gradually."
            } else {
                "Please reduce the rate at which you send requests."
            }
            .to_string();
            if ctx.silent.wait_in_message() {
                // Neither provider words a wait here; without `retry-after`
                // the message is the only place left to say it.
                msg = format!("{msg} {}", try_again_sentence(real));
            }
            let body = if anthropic {
                // Anthropic's acceleration ("ramp") limit: the official SDK
                // maps this code to `RampLimitExceededError`.
                error_body(ctx, "rate_limit_error", Some("ramp_limit_exceeded"), &msg)
            } else {
                error_body(ctx, "rate_limit_error", Some("slow_down"), &msg)
            };
            (429, body)
        }
        Outcome::SpendCap => {
            let body = if anthropic {
                let msg = format!(
                    "You have reached your API usage limits: your organization has crossed its monthly API usage threshold, set based on your organization's API tier. You will regain access on {} at 00:00 UTC.",
                    next_month_start(ctx.wall_now)
                );
                error_body(
                    ctx,
                    "rate_limit_error",
                    Some("enforced_spend_limit_reached"),
                    &msg,
                )
            } else {
                error_body(ctx, "insufficient_quota", Some("insufficient_quota"),
                    "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.")
            };
            (429, body)
        }
        Outcome::Billing => {
            let body = if anthropic {
                error_body(ctx, "billing_error", None,
                    "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.")
            } else {
                error_body(
                    ctx,
                    "billing_error",
                    Some("billing_not_active"),
                    "Your account is not active, please check your billing details on our website.",
                )
            };
            (402, body)
        }
        Outcome::TooManyKeys => return render_status_error(ctx, 401, "invalid x-api-key"),
        // Quotas of Gemini and the flavors, rendered by them; a provider
        // the model gives none of these to never gets here.
        Outcome::DailyQuota { .. } | Outcome::QuotaNotGranted | Outcome::MonthlyQuota { .. } => {
            return render_status_error(ctx, 429, "Quota exceeded.")
        }
        Outcome::RequestTooLarge { .. } => {
            return render_status_error(ctx, 413, "Request too large.")
        }
        Outcome::Fault(f) => return render_fault(ctx, f, headers),
    };
    Rendered {
        status,
        headers,
        body,
    }
}

fn render_fault(
    ctx: &RenderCtx,
    fault: &Fault,
    mut headers: Vec<(&'static str, String)>,
) -> Rendered {
    let anthropic = ctx.provider != Provider::Openai;
    match fault {
        Fault::Overloaded => {
            if anthropic {
                headers.push(("x-should-retry", "true".into()));
                Rendered {
                    status: 529,
                    headers,
                    body: error_body(ctx, "overloaded_error", None, "Overloaded"),
                }
            } else {
                Rendered {
                    status: 503,
                    headers,
                    body: error_body(
                        ctx,
                        "service_unavailable_error",
                        Some("server_is_overloaded"),
                        "The server is overloaded. Please try again later.",
                    ),
                }
            }
        }
        Fault::Status { status, html: true } => {
            headers[0].1 = "text/html".into();
            Rendered {
                status: *status,
                headers,
                body: html_page(*status),
            }
        }
        Fault::Status {
            status,
            html: false,
        } => render_status_error(ctx, *status, default_message(ctx.provider, *status)),
        Fault::RetryAfter { format, secs } => {
            headers.push(("retry-after", retry_after_value(ctx, *format, *secs)));
            if anthropic {
                headers.push(("x-should-retry", "true".into()));
            }
            let body = if anthropic {
                error_body(ctx, "rate_limit_error", None,
                    "This request would exceed the rate limit for your organization of requests per minute.")
            } else {
                error_body(
                    ctx,
                    "requests",
                    Some("rate_limit_exceeded"),
                    "Rate limit reached for requests.",
                )
            };
            Rendered {
                status: 429,
                headers,
                body,
            }
        }
        Fault::UpstreamRateLimited => {
            let mut r = render_status_error(ctx, 429, "Rate limit reached for requests.");
            r.headers.retain(|(n, _)| *n != "x-should-retry");
            r
        }
        // OpenRouter's error inside a 200 (any flavor: a fault says what it
        // sends); Anthropic's surface has no such answer: a 502.
        Fault::ErrorInBody { .. } if !anthropic => Rendered {
            status: 200,
            headers,
            body: serde_json::to_vec(
                &json!({"error": {"code": 502, "message": flavor::openrouter::in_body_message(ctx)}}),
            )
            .unwrap_or_default(),
        },
        Fault::ErrorInBody { .. } => render_status_error(ctx, 502, default_message(ctx.provider, 502)),
        // Not answers of their own; a server never renders these.
        Fault::Reset
        | Fault::Stall { .. }
        | Fault::StreamCut { .. }
        | Fault::StreamError { .. } => {
            render_status_error(ctx, 500, default_message(ctx.provider, 500))
        }
    }
}

/// The `retry-after` an injected [`Fault::RetryAfter`] sends.
pub(crate) fn retry_after_value(ctx: &RenderCtx, format: RetryAfterFormat, secs: u64) -> String {
    match format {
        RetryAfterFormat::Seconds => secs.to_string(),
        RetryAfterFormat::HttpDate => httpdate::fmt_http_date(
            ctx.wall_now + Duration::from_secs(secs) + Duration::from_millis(999),
        ),
        RetryAfterFormat::Garbage => "soon".into(),
        RetryAfterFormat::Negative => "-1".into(),
    }
}

/// `YYYY-MM-DD` of the first day of the month after `t` (UTC).
pub fn next_month_start(t: SystemTime) -> String {
    let d = time::OffsetDateTime::from(t);
    let (y, m) = match d.month() {
        time::Month::December => (d.year() + 1, 1),
        m => (d.year(), u8::from(m) + 1),
    };
    format!("{y:04}-{m:02}-01")
}

pub(crate) fn anthropic_usage(input: u64, output: u64) -> Value {
    json!({"input_tokens": input, "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0, "output_tokens": output})
}

pub(crate) fn openai_usage(input: u64, output: u64) -> Value {
    json!({"prompt_tokens": input, "completion_tokens": output,
        "total_tokens": input + output,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}})
}

pub(crate) fn stop_reason(provider: Provider, output: u64, max_tokens: u64) -> &'static str {
    match (provider, output >= max_tokens) {
        (Provider::Openai, true) => "length",
        (Provider::Openai, false) => "stop",
        (_, true) => "max_tokens",
        (_, false) => "end_turn",
    }
}

pub(crate) fn created(ctx: &RenderCtx) -> u64 {
    ctx.wall_now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The JSON body of a non-streaming success.
pub fn success_body(ctx: &RenderCtx, input: u64, output: u64, max_tokens: u64) -> Vec<u8> {
    if ctx.provider == Provider::Gemini {
        return gemini::success_body(ctx, input, output, max_tokens);
    }
    let text = crate::tokens::text(ctx.text_seed, output);
    let stop = stop_reason(ctx.provider, output, max_tokens);
    let v = match ctx.provider {
        Provider::Openai => json!({
            "id": ctx.message_id, "object": "chat.completion", "created": created(ctx),
            "model": ctx.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text,
                "refusal": Value::Null, "annotations": []},
                "logprobs": Value::Null, "finish_reason": stop}],
            "usage": openai_usage(input, output),
            "service_tier": "default", "system_fingerprint": "fp_mock"}),
        _ => json!({
            "id": ctx.message_id, "type": "message", "role": "assistant", "model": ctx.model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": stop, "stop_sequence": Value::Null,
            "usage": anthropic_usage(input, output)}),
    };
    serde_json::to_vec(&v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Grant;

    fn ctx(p: Provider) -> RenderCtx {
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_953_600); // 2026-11-29T12:00:00Z
        RenderCtx::new(p, "claude-sonnet-4-5", 1, 1, wall)
    }

    fn answer(outcome: Outcome, windows: Vec<WindowView>) -> Answer {
        Answer {
            nth: 1,
            outcome,
            windows,
            stall: None,
            stream_fault: None,
        }
    }

    #[test]
    fn anthropic_rate_limit_has_headers_in_scaled_real_time() {
        let mut c = ctx(Provider::Anthropic);
        c.scale = TimeScale::new(1.0);
        let w = WindowView {
            dimension: Dimension::InputTokens,
            limit: 30_000,
            remaining: 0,
            reported_remaining: 0,
            reset: Duration::from_secs(30),
        };
        let r = render_answer(
            &c,
            &answer(
                Outcome::RateLimited {
                    dimension: Dimension::InputTokens,
                    retry_after: Duration::from_secs(8),
                    limit: 30_000,
                    used: 30_000,
                    requested: 10,
                },
                vec![w],
            ),
        );
        assert_eq!(r.status, 429);
        assert_eq!(r.header("retry-after"), Some("0.134"));
        assert_eq!(r.header("x-should-retry"), Some("true"));
        assert_eq!(
            r.header("anthropic-ratelimit-input-tokens-reset"),
            Some("2026-11-29T12:00:00.5Z")
        );
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["error"]["type"], "rate_limit_error");
        assert_eq!(v["request_id"], c.request_id.as_str());
        assert_eq!(r.header("request-id"), Some(c.request_id.as_str()));
    }

    #[test]
    fn spend_cap_shapes() {
        let r = render_answer(
            &ctx(Provider::Anthropic),
            &answer(Outcome::SpendCap, vec![]),
        );
        assert_eq!(r.status, 429);
        assert_eq!(r.header("retry-after"), None);
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            v["error"]["details"]["error_code"],
            "enforced_spend_limit_reached"
        );
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("2026-12-01"));
        let r = render_answer(&ctx(Provider::Openai), &answer(Outcome::SpendCap, vec![]));
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["error"]["code"], "insufficient_quota");
        assert!(r.header("x-request-id").is_some());
    }

    #[test]
    fn openai_success_and_stream_usage() {
        let mut c = ctx(Provider::Openai);
        c.include_usage = true;
        let g = Grant {
            bucket: crate::model::BucketKey {
                provider: Provider::Openai,
                key: "k".into(),
                class: "m".into(),
            },
            model: "m".into(),
            input_tokens: 7,
            reserved_output: 100,
            output_tokens: 9,
        };
        let r = render_answer(&c, &answer(Outcome::Success(g), vec![]));
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["usage"]["total_tokens"], 16);
        let frames = stream_frames(&c, 7, 9, 100);
        assert_eq!(frames.last().unwrap().bytes, "data: [DONE]\n\n");
        assert_eq!(delivered_tokens(&frames, frames.len()), 9);
        assert!(frames[frames.len() - 2]
            .bytes
            .contains("\"completion_tokens\":9"));
    }

    #[test]
    fn anthropic_stream_is_in_order() {
        let frames = stream_frames(&ctx(Provider::Anthropic), 5, 10, 10);
        let names: Vec<&str> = frames
            .iter()
            .map(|f| {
                f.bytes
                    .lines()
                    .next()
                    .unwrap()
                    .trim_start_matches("event: ")
            })
            .collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert!(frames[7].bytes.contains("\"stop_reason\":\"max_tokens\""));
    }
}
