//! Gemini's answers: `GenerateContentResponse` bodies and stream chunks,
//! and `google.rpc.Status` errors (`{"error": {"code", "message",
//! "status", "details"}}`), the shapes ratewise-core's Gemini profile
//! reads (`classify/google.rs`).
//!
//! Gemini sends **no rate-limit headers** and no `retry-after`: a 429 says
//! its wait in `RetryInfo.retryDelay` (whole seconds, rounded up here so a
//! client that honours it is never early) and in its message ("Please
//! retry in 12.345s.", real time rounded up to the millisecond). Only an
//! injected [`Fault::RetryAfter`] sends `retry-after`: a fault says exactly
//! what it asks for. [`RenderCtx::silent`] changes nothing here.

use super::{html_page, retry_after_value, RenderCtx, Rendered};
use crate::clock::{ceil_ms, format_retry_after};
use crate::faults::Fault;
use crate::model::{Answer, Outcome};
use crate::tokens::word;
use ratewise_core::Dimension;
use serde_json::{json, Value};
use std::time::Duration;

const JSON: &str = "application/json; charset=UTF-8";
const RATE_LIMITS_URL: &str = "https://ai.google.dev/gemini-api/docs/rate-limits";
const METRIC: &str = "generativelanguage.googleapis.com/";

/// The `"Please retry in …"` wait of a "limit: 0" answer, as
/// google-gemini/gemini-cli#22486 shows it (no wait helps).
pub const LIMIT_ZERO_WAIT: Duration = Duration::from_millis(25_460);

/// Google's canonical status name for an HTTP status (the core's one
/// table, which the proxy's own Gemini answers use too).
pub fn status_name(status: u16) -> &'static str {
    ratewise_core::classify::codes::google_status(status)
}

fn default_message(status: u16) -> &'static str {
    match status {
        503 | 529 => "The service is currently unavailable.",
        408 | 504 => "The request timed out. Please try again.",
        _ => "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting",
    }
}

/// A `google.rpc.Status` body with the usual name of `status`
/// ([`status_name`]); `details` left out when empty.
pub fn error_body(status: u16, message: &str, details: Vec<Value>) -> Vec<u8> {
    named_error_body(status, status_name(status), message, details)
}

/// A `google.rpc.Status` body with the status name `name` (400 is also
/// `FAILED_PRECONDITION`).
pub fn named_error_body(status: u16, name: &str, message: &str, details: Vec<Value>) -> Vec<u8> {
    let mut err = json!({"code": status, "message": message, "status": name});
    if !details.is_empty() {
        err["details"] = Value::Array(details);
    }
    serde_json::to_vec(&json!({ "error": err })).unwrap_or_default()
}

fn rendered(status: u16, body: Vec<u8>) -> Rendered {
    Rendered {
        status,
        headers: vec![("content-type", JSON.to_string())],
        body,
    }
}

/// A request-level error (400, 403, 404, 413, any status) in Google's shape.
pub fn render_status_error(status: u16, message: &str) -> Rendered {
    rendered(status, error_body(status, message, Vec::new()))
}

/// `12.345s`: a real wait rounded up to the millisecond, as the message
/// says it.
pub fn message_secs(real: Duration) -> String {
    format!("{}s", format_retry_after(real))
}

/// `13s`: `RetryInfo.retryDelay`, whole seconds rounded up, at least 1.
pub fn retry_delay(real: Duration) -> String {
    let ms = ceil_ms(real).as_millis();
    format!("{}s", ms.div_ceil(1000).max(1))
}

/// One quota a 429 names: its id and metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// `quotaId`.
    pub id: &'static str,
    /// `quotaMetric` (without the service prefix).
    pub metric: &'static str,
}

/// The per-minute quota of `dimension`: requests, else input tokens.
pub fn minute_quota(dimension: Dimension) -> Quota {
    match dimension {
        Dimension::Requests => Quota {
            id: "GenerateRequestsPerMinutePerProjectPerModel",
            metric: "generate_requests_per_model",
        },
        _ => Quota {
            id: "GenerateContentInputTokensPerModelPerMinute",
            metric: "generate_content_input_token_count",
        },
    }
}

/// The per-day request quota.
pub const DAY_QUOTA: Quota = Quota {
    id: "GenerateRequestsPerDayPerProjectPerModel",
    metric: "generate_requests_per_model_per_day",
};

/// The free tier's quotas a "limit: 0" answer names (requests and input
/// tokens, as gemini-cli#22486 shows).
const ZERO_QUOTAS: [Quota; 2] = [
    Quota {
        id: "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
        metric: "generate_content_free_tier_requests",
    },
    Quota {
        id: "GenerateContentInputTokensPerModelPerMinute-FreeTier",
        metric: "generate_content_free_tier_input_token_count",
    },
];

/// A 429 `RESOURCE_EXHAUSTED` naming `quotas` (each with its limit, and
/// whether its violation carries `quotaValue`), with `Help` and
/// `RetryInfo`, worded as Google's: the message ends "Please retry in
/// {real_wait}." and `retryDelay` is `real_wait` in whole seconds, rounded
/// up.
pub fn quota_error(model: &str, quotas: &[(Quota, u64, bool)], real_wait: Duration) -> Vec<u8> {
    let mut msg = format!(
        "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: {RATE_LIMITS_URL}. To monitor your current usage, head to: https://ai.dev/usage?tab=rate-limit. "
    );
    let mut violations = Vec::new();
    for (q, limit, with_value) in quotas {
        msg.push_str(&format!(
            "\n* Quota exceeded for metric: {METRIC}{}, limit: {limit}, model: {model}",
            q.metric
        ));
        let mut v = json!({"quotaMetric": format!("{METRIC}{}", q.metric), "quotaId": q.id,
            "quotaDimensions": {"location": "global", "model": model}});
        if *with_value {
            v["quotaValue"] = json!(limit.to_string());
        }
        violations.push(v);
    }
    msg.push_str(&format!("\nPlease retry in {}.", message_secs(real_wait)));
    error_body(
        429,
        &msg,
        vec![
            json!({"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": violations}),
            json!({"@type": "type.googleapis.com/google.rpc.Help", "links": [
                {"description": "Learn more about Gemini API quotas", "url": RATE_LIMITS_URL}]}),
            json!({"@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": retry_delay(real_wait)}),
        ],
    )
}

/// Renders every non-streaming Gemini answer.
pub fn render_answer(ctx: &RenderCtx, answer: &Answer) -> Rendered {
    let real = |d: Duration| ctx.scale.to_real(d);
    match &answer.outcome {
        Outcome::Success(g) => rendered(
            200,
            success_body(ctx, g.input_tokens, g.output_tokens, g.reserved_output),
        ),
        Outcome::RateLimited {
            dimension,
            retry_after,
            limit,
            ..
        } => {
            let wait = real(ctx.wait.unwrap_or(*retry_after));
            let q = minute_quota(*dimension);
            rendered(429, quota_error(&ctx.model, &[(q, *limit, true)], wait))
        }
        Outcome::DailyQuota { limit, retry_after } => rendered(
            429,
            quota_error(&ctx.model, &[(DAY_QUOTA, *limit, true)], real(*retry_after)),
        ),
        Outcome::QuotaNotGranted => {
            let quotas: Vec<_> = ZERO_QUOTAS.iter().map(|q| (*q, 0, false)).collect();
            rendered(429, quota_error(&ctx.model, &quotas, LIMIT_ZERO_WAIT))
        }
        Outcome::SlowDown { retry_after } => {
            let wait = real(*retry_after);
            rendered(
                429,
                error_body(
                    429,
                    &format!(
                        "Resource has been exhausted (e.g. check quota). Please retry in {}.",
                        message_secs(wait)
                    ),
                    vec![json!({"@type": "type.googleapis.com/google.rpc.RetryInfo",
                        "retryDelay": retry_delay(wait)})],
                ),
            )
        }
        Outcome::SpendCap => rendered(
            429,
            error_body(
                429,
                &format!("You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: {RATE_LIMITS_URL}."),
                Vec::new(),
            ),
        ),
        Outcome::Billing => rendered(
            400,
            named_error_body(
                400,
                "FAILED_PRECONDITION",
                "Gemini API free tier is not available in your country. Please enable billing on your project in Google AI Studio.",
                Vec::new(),
            ),
        ),
        Outcome::TooManyKeys => rendered(
            400,
            error_body(
                400,
                "API key not valid. Please pass a valid API key.",
                vec![json!({"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID", "domain": "googleapis.com",
                    "metadata": {"service": "generativelanguage.googleapis.com"}})],
            ),
        ),
        // The OpenAI flavors' outcomes; the model gives Gemini none.
        Outcome::RequestTooLarge { .. } | Outcome::MonthlyQuota { .. } => {
            render_status_error(429, "Resource has been exhausted (e.g. check quota).")
        }
        Outcome::Fault(f) => render_fault(ctx, f),
    }
}

fn render_fault(ctx: &RenderCtx, fault: &Fault) -> Rendered {
    match fault {
        Fault::Overloaded => {
            render_status_error(503, "The model is overloaded. Please try again later.")
        }
        Fault::Status { status, html: true } => Rendered {
            status: *status,
            headers: vec![("content-type", "text/html".to_string())],
            body: html_page(*status),
        },
        Fault::Status { status, .. } => render_status_error(*status, default_message(*status)),
        Fault::RetryAfter { format, secs } => {
            let mut r = render_status_error(429, "Resource has been exhausted (e.g. check quota).");
            r.headers
                .push(("retry-after", retry_after_value(ctx, *format, *secs)));
            r
        }
        Fault::UpstreamRateLimited => {
            render_status_error(429, "Resource has been exhausted (e.g. check quota).")
        }
        Fault::ErrorInBody { .. } => render_status_error(502, default_message(502)),
        Fault::Reset
        | Fault::Stall { .. }
        | Fault::StreamCut { .. }
        | Fault::StreamError { .. } => render_status_error(500, default_message(500)),
    }
}

fn finish_reason(output: u64, max_tokens: u64) -> &'static str {
    if output >= max_tokens {
        "MAX_TOKENS"
    } else {
        "STOP"
    }
}

/// `usageMetadata` of `input` prompt and `output` candidate tokens.
pub fn usage(input: u64, output: u64) -> Value {
    json!({"promptTokenCount": input, "candidatesTokenCount": output,
        "totalTokenCount": input + output,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": input}]})
}

fn response(ctx: &RenderCtx, text: &str, finish: Option<&str>, usage: Value) -> Value {
    let mut cand = json!({"content": {"parts": [{"text": text}], "role": "model"}, "index": 0});
    if let Some(f) = finish {
        cand["finishReason"] = json!(f);
    }
    json!({"candidates": [cand], "usageMetadata": usage,
        "modelVersion": ctx.model, "responseId": ctx.message_id})
}

/// The JSON body of a non-streaming success (`GenerateContentResponse`).
pub fn success_body(ctx: &RenderCtx, input: u64, output: u64, max_tokens: u64) -> Vec<u8> {
    let text = crate::tokens::text(ctx.text_seed, output);
    let v = response(
        ctx,
        &text,
        Some(finish_reason(output, max_tokens)),
        usage(input, output),
    );
    serde_json::to_vec(&v).unwrap_or_default()
}

/// Headers of a successful stream: SSE, or a JSON array without `alt=sse`.
pub fn stream_headers(ctx: &RenderCtx) -> Vec<(&'static str, String)> {
    let ct = if ctx.sse { "text/event-stream" } else { JSON };
    vec![
        ("content-type", ct.to_string()),
        ("cache-control", "no-cache".to_string()),
    ]
}

/// The frames of a successful stream: one `GenerateContentResponse` per
/// `tokens_per_delta` output tokens, each with the usage so far; the last
/// carries `finishReason` and the final totals. With `alt=sse` each is a
/// `data: …\r\n\r\n` event; without, they are the elements of one JSON
/// array (`[` first, `]` as a frame of its own).
pub fn stream_frames(
    ctx: &RenderCtx,
    input: u64,
    output: u64,
    max_tokens: u64,
) -> Vec<super::SseFrame> {
    let per = ctx.tokens_per_delta.max(1);
    let mut chunks = Vec::new();
    let mut i = 0;
    while i < output {
        let n = per.min(output - i);
        let text: String = (i..i + n).map(|j| word(ctx.text_seed, j)).collect();
        chunks.push((text, n));
        i += n;
    }
    if chunks.is_empty() {
        chunks.push((String::new(), 0));
    }
    let count = chunks.len();
    let mut so_far = 0;
    let mut out = Vec::with_capacity(count + 1);
    for (k, (text, n)) in chunks.into_iter().enumerate() {
        so_far += n;
        let last = k + 1 == count;
        let finish = last.then(|| finish_reason(output, max_tokens));
        let v = response(ctx, &text, finish, usage(input, so_far));
        let bytes = if ctx.sse {
            format!("data: {v}\r\n\r\n")
        } else if k == 0 {
            format!("[{v}")
        } else {
            format!(",\r\n{v}")
        };
        out.push(super::SseFrame {
            bytes,
            output_tokens: n,
        });
    }
    if !ctx.sse {
        out.push(super::SseFrame {
            bytes: "]".into(),
            output_tokens: 0,
        });
    }
    out
}

/// The in-band error of a stream: a `google.rpc.Status` 503 `UNAVAILABLE`,
/// as an SSE event, or as the array's next element (`first`: the array
/// was not opened yet) closing it.
pub fn stream_error_frame(ctx: &RenderCtx, first: bool) -> String {
    let body = error_body(
        503,
        "The model is overloaded. Please try again later.",
        Vec::new(),
    );
    let body = String::from_utf8_lossy(&body);
    if ctx.sse {
        format!("data: {body}\r\n\r\n")
    } else if first {
        format!("[{body}]")
    } else {
        format!(",\r\n{body}]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_rounded_up() {
        assert_eq!(retry_delay(Duration::from_millis(12_001)), "13s");
        assert_eq!(retry_delay(Duration::from_millis(12_000)), "12s");
        assert_eq!(retry_delay(Duration::ZERO), "1s");
        assert_eq!(message_secs(Duration::from_micros(12_345_001)), "12.346s");
        assert_eq!(message_secs(LIMIT_ZERO_WAIT), "25.46s");
    }

    #[test]
    fn array_streams_are_one_json_array() {
        let mut ctx = RenderCtx::new(
            ratewise_core::Provider::Gemini,
            "gemini-2.0-flash",
            1,
            1,
            std::time::SystemTime::UNIX_EPOCH,
        );
        ctx.sse = false;
        let frames = stream_frames(&ctx, 5, 9, 100);
        let all: String = frames.iter().map(|f| f.bytes.as_str()).collect();
        let v: Value = serde_json::from_str(&all).unwrap();
        let items = v.as_array().unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(items[2]["usageMetadata"]["candidatesTokenCount"], 9);
        assert_eq!(items[2]["candidates"][0]["finishReason"], "STOP");
        let err = format!("{}{}", frames[0].bytes, stream_error_frame(&ctx, false));
        assert!(serde_json::from_str::<Value>(&err).is_ok());
        assert!(serde_json::from_str::<Value>(&stream_error_frame(&ctx, true)).is_ok());
    }
}
