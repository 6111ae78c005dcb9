//! Azure OpenAI: `error.code` `"429"` with `retry-after` and
//! `retry-after-ms`, a daily quota's "Please retry after 86400 seconds",
//! the content filter's 400, and only `x-ratelimit-remaining-*` headers.

use super::{json_headers, rendered};
use crate::clock::ceil_ms;
use crate::model::{Answer, Outcome, WindowView};
use crate::render::{RenderCtx, Rendered};
use ratewise_core::Dimension;
use serde_json::{json, Value};
use std::time::Duration;

/// The `api-version` named when a request sent none.
pub const DEFAULT_API_VERSION: &str = "2024-10-21";

/// Seconds Azure's daily-quota 429 says to wait.
pub const DAY_RETRY_SECS: u64 = 86_400;

/// `x-ratelimit-remaining-requests` and `x-ratelimit-remaining-tokens`
/// (Azure states what remains, not the limit or its reset).
pub fn ratelimit_headers(windows: &[WindowView]) -> Vec<(&'static str, String)> {
    let mut h = Vec::new();
    for w in windows {
        let name = match w.dimension {
            Dimension::Requests => "x-ratelimit-remaining-requests",
            Dimension::Tokens => "x-ratelimit-remaining-tokens",
            _ => continue,
        };
        h.push((name, w.reported_remaining.to_string()));
    }
    h
}

/// Azure's 429 sentence for a wait of `secs` whole seconds.
fn message(ctx: &RenderCtx, limit: &str, secs: u64) -> String {
    let version = if ctx.api_version.is_empty() {
        DEFAULT_API_VERSION
    } else {
        &ctx.api_version
    };
    format!(
        "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version {version} have exceeded {limit} rate limit of your current OpenAI S0 pricing tier. Please retry after {secs} second{}. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit.",
        if secs == 1 { "" } else { "s" }
    )
}

fn rate_limited(ctx: &RenderCtx, answer: &Answer, limit: &str, real: Duration) -> Rendered {
    let ms = ceil_ms(real).as_millis() as u64;
    let secs = ms.div_ceil(1000).max(1);
    let mut h = json_headers(ctx);
    if ctx.silent.sends_retry_after() {
        h.push(("retry-after-ms", ms.max(1).to_string()));
        h.push(("retry-after", secs.to_string()));
    }
    h.extend(crate::render::ratelimit_headers(ctx, &answer.windows));
    let body = json!({"error": {"code": "429", "message": message(ctx, limit, secs)}});
    rendered(429, h, &body)
}

/// Azure's renderings: per-minute limits and the daily quota.
pub fn render_answer(ctx: &RenderCtx, answer: &Answer) -> Option<Rendered> {
    match &answer.outcome {
        Outcome::RateLimited {
            dimension,
            retry_after,
            ..
        } => {
            let limit = match dimension {
                Dimension::Requests => "call",
                _ => "token",
            };
            Some(rate_limited(
                ctx,
                answer,
                limit,
                ctx.scale.to_real(*retry_after),
            ))
        }
        // Azure's daily quota always says a day, whatever is left of it.
        Outcome::DailyQuota { .. } => Some(rate_limited(
            ctx,
            answer,
            "call",
            Duration::from_secs(DAY_RETRY_SECS),
        )),
        _ => None,
    }
}

/// The 400 of a prompt the content filter caught.
pub fn content_filter(ctx: &RenderCtx) -> Rendered {
    let body = json!({"error": {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766",
        "type": Value::Null, "param": "prompt", "code": "content_filter", "status": 400,
        "innererror": {"code": "ResponsibleAIPolicyViolation",
            "content_filter_result": {
                "hate": {"filtered": false, "severity": "safe"},
                "self_harm": {"filtered": false, "severity": "safe"},
                "sexual": {"filtered": false, "severity": "safe"},
                "violence": {"filtered": true, "severity": "high"}}}}});
    rendered(400, json_headers(ctx), &body)
}
