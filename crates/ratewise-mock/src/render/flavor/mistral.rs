//! Mistral: `x-ratelimit-{limit,remaining}-tokens-minute`, `-req-minute`
//! and `-tokens-month` headers (no OpenAI-named ones), and flat error
//! bodies `{"object":"error","message":…,"type":…,"param":null,"code":…}`.

use super::{json_headers, rendered};
use crate::model::{Answer, Outcome, WindowView};
use crate::render::{push_retry_after, RenderCtx, Rendered};
use crate::Fault;
use ratewise_core::Dimension;
use serde_json::{json, Value};

/// The per-minute token and request windows, and the month's tokens when
/// there is a monthly quota.
pub fn ratelimit_headers(ctx: &RenderCtx, windows: &[WindowView]) -> Vec<(&'static str, String)> {
    let mut h = Vec::new();
    for w in windows {
        let (l, r) = match w.dimension {
            Dimension::Tokens => (
                "x-ratelimit-limit-tokens-minute",
                "x-ratelimit-remaining-tokens-minute",
            ),
            Dimension::Requests => (
                "x-ratelimit-limit-req-minute",
                "x-ratelimit-remaining-req-minute",
            ),
            _ => continue,
        };
        h.push((l, w.limit.to_string()));
        h.push((r, w.reported_remaining.to_string()));
    }
    if let Some(m) = ctx.quotas.month {
        h.push(("x-ratelimit-limit-tokens-month", m.limit.to_string()));
        h.push((
            "x-ratelimit-remaining-tokens-month",
            m.remaining.to_string(),
        ));
    }
    h
}

/// Mistral's flat error object.
pub fn flat(message: &str, ty: &str, code: &str) -> Value {
    json!({"object": "error", "message": message, "type": ty, "param": Value::Null, "code": code})
}

const RATE_LIMITED: &str = "Requests rate limit exceeded";

/// Mistral's renderings: 429s (per minute and per month) and the
/// service tier's capacity (a 429 too).
pub fn render_answer(ctx: &RenderCtx, answer: &Answer) -> Option<Rendered> {
    let rl = || crate::render::ratelimit_headers(ctx, &answer.windows);
    match &answer.outcome {
        Outcome::RateLimited { retry_after, .. } => {
            let mut h = json_headers(ctx);
            push_retry_after(ctx, &mut h, ctx.scale.to_real(*retry_after));
            h.extend(rl());
            Some(rendered(
                429,
                h,
                &flat(RATE_LIMITED, "rate_limited", "1300"),
            ))
        }
        Outcome::MonthlyQuota { .. } => {
            let mut h = json_headers(ctx);
            h.extend(rl());
            Some(rendered(
                429,
                h,
                &flat(RATE_LIMITED, "rate_limited", "1300"),
            ))
        }
        Outcome::Fault(Fault::Overloaded) => Some(rendered(
            429,
            json_headers(ctx),
            &flat(
                "Service tier capacity exceeded for this model.",
                "invalid_request_error",
                "3505",
            ),
        )),
        _ => None,
    }
}
