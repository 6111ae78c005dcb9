//! Groq: `x-ratelimit-*-requests` are the requests-per-day window,
//! `x-ratelimit-*-tokens` the tokens-per-minute bucket; `retry-after` on a
//! 429 only; messages naming "(RPD)", "(RPM)", "(TPM)"; 413 for a request
//! larger than the TPM limit.

use super::{json_headers, rendered};
use crate::model::{Answer, Outcome, WindowView};
use crate::render::{go_duration_ms, push_retry_after, RenderCtx, Rendered};
use ratewise_core::Dimension;
use serde_json::json;
use std::time::Duration;

/// The organization Groq's messages name.
pub const ORGANIZATION: &str = "org_01mockorganization";

/// The per-day requests window (from [`RenderCtx::quotas`]) and the
/// per-minute tokens bucket.
pub fn ratelimit_headers(ctx: &RenderCtx, windows: &[WindowView]) -> Vec<(&'static str, String)> {
    let mut h = Vec::new();
    if let Some(day) = ctx.quotas.day {
        h.push(("x-ratelimit-limit-requests", day.limit.to_string()));
        h.push(("x-ratelimit-remaining-requests", day.remaining.to_string()));
        h.push((
            "x-ratelimit-reset-requests",
            go_duration_ms(ctx.scale.to_real(day.reset)),
        ));
    }
    for w in windows.iter().filter(|w| w.dimension == Dimension::Tokens) {
        h.push(("x-ratelimit-limit-tokens", w.limit.to_string()));
        h.push((
            "x-ratelimit-remaining-tokens",
            w.reported_remaining.to_string(),
        ));
        h.push((
            "x-ratelimit-reset-tokens",
            go_duration_ms(ctx.scale.to_real(w.reset)),
        ));
    }
    h
}

#[allow(clippy::too_many_arguments)]
fn limit_reached(
    ctx: &RenderCtx,
    answer: &Answer,
    ty: &str,
    label: &str,
    limit: u64,
    used: u64,
    requested: u64,
    real: Duration,
) -> Rendered {
    let mut h = json_headers(ctx);
    push_retry_after(ctx, &mut h, real);
    h.extend(crate::render::ratelimit_headers(ctx, &answer.windows));
    let msg = format!(
        "Rate limit reached for model `{}` in organization `{ORGANIZATION}` service tier `on_demand` on {label}: Limit {limit}, Used {used}, Requested {requested}. Please try again in {}. Need more tokens? Upgrade to Dev Tier today at https://console.groq.com/settings/billing",
        ctx.model,
        go_duration_ms(real)
    );
    let body = json!({"error": {"message": msg, "type": ty, "code": "rate_limit_exceeded"}});
    rendered(429, h, &body)
}

/// Groq's renderings: 429s per window, the per-day quota, the 413.
pub fn render_answer(ctx: &RenderCtx, answer: &Answer) -> Option<Rendered> {
    match &answer.outcome {
        Outcome::RateLimited {
            dimension,
            retry_after,
            limit,
            used,
            requested,
        } => {
            let (ty, label) = match dimension {
                Dimension::Requests => ("requests", "requests per minute (RPM)"),
                _ => ("tokens", "tokens per minute (TPM)"),
            };
            let real = ctx.scale.to_real(*retry_after);
            Some(limit_reached(
                ctx, answer, ty, label, *limit, *used, *requested, real,
            ))
        }
        Outcome::DailyQuota { limit, retry_after } => {
            let wait = ctx.quotas.day.map_or(*retry_after, |d| d.reset);
            Some(limit_reached(
                ctx,
                answer,
                "requests",
                "requests per day (RPD)",
                *limit,
                *limit,
                1,
                ctx.scale.to_real(wait),
            ))
        }
        Outcome::RequestTooLarge { limit, requested } => {
            let msg = format!(
                "Request too large for model `{}` in organization `{ORGANIZATION}` service tier `on_demand` on tokens per minute (TPM): Limit {limit}, Requested {requested}, please reduce your message size and try again. Need more tokens? Upgrade to Dev Tier today at https://console.groq.com/settings/billing",
                ctx.model
            );
            let body =
                json!({"error": {"message": msg, "type": "tokens", "code": "rate_limit_exceeded"}});
            Some(rendered(413, json_headers(ctx), &body))
        }
        _ => None,
    }
}
