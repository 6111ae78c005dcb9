//! OpenRouter: `{"error":{"code":N,"message":…}}` bodies; 402 for money;
//! an upstream provider's 429 with `metadata.provider_name` and `raw`;
//! errors inside a 200 (JSON) or as a stream's last chunk; `: OPENROUTER
//! PROCESSING` comments at a stream's start; no rate-limit headers.

use super::{json_headers, rendered};
use crate::model::{Answer, Outcome};
use crate::render::{created, push_retry_after, RenderCtx, Rendered};
use crate::Fault;
use serde_json::json;

/// The comment OpenRouter sends while the model has not started.
pub const PROCESSING: &str = ": OPENROUTER PROCESSING\n\n";

/// The `user_id` OpenRouter's error bodies name.
pub const USER_ID: &str = "user_2mockopenrouter";

/// The message of the error inside a 200 (JSON) answer.
pub fn in_body_message(ctx: &RenderCtx) -> String {
    format!("Upstream error from {}: connection reset", ctx.upstream)
}

/// The chunk a stream ends with when the model's provider failed after
/// starting (`finish_reason: "error"`).
pub fn error_chunk(ctx: &RenderCtx) -> String {
    let v = json!({"id": ctx.message_id, "object": "chat.completion.chunk",
        "created": created(ctx), "model": ctx.model, "provider": ctx.upstream,
        "error": {"code": "server_error", "message": "Provider disconnected unexpectedly"},
        "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]});
    format!("data: {v}\n\n")
}

/// OpenRouter's renderings: money, the key's own 429, an upstream's 429.
pub fn render_answer(ctx: &RenderCtx, answer: &Answer) -> Option<Rendered> {
    match &answer.outcome {
        Outcome::Billing | Outcome::SpendCap => {
            let body = json!({"error": {"code": 402,
                "message": "Insufficient credits. Add more using https://openrouter.ai/settings/credits"}});
            Some(rendered(402, json_headers(ctx), &body))
        }
        Outcome::RateLimited {
            retry_after, limit, ..
        } => {
            let real = ctx.scale.to_real(*retry_after);
            let mut h = json_headers(ctx);
            push_retry_after(ctx, &mut h, real);
            let reset_ms = ctx
                .wall_now
                .checked_add(real)
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis() as u64);
            let body = json!({"error": {"code": 429,
                "message": format!("Rate limit exceeded: limit_rpm/{}", ctx.model),
                "metadata": {"headers": {"X-RateLimit-Limit": limit.to_string(),
                    "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset_ms.to_string()}}},
                "user_id": USER_ID});
            Some(rendered(429, h, &body))
        }
        Outcome::Fault(Fault::UpstreamRateLimited) => {
            let raw = format!(
                "{} is temporarily rate-limited upstream. Please retry shortly, or add your own key to accumulate your rate limits: https://openrouter.ai/settings/integrations",
                ctx.model
            );
            let body = json!({"error": {"code": 429, "message": "Provider returned error",
                "metadata": {"raw": raw, "provider_name": ctx.upstream,
                    "limit_source": "upstream_provider_shared_pool"}},
                "user_id": USER_ID});
            Some(rendered(429, json_headers(ctx), &body))
        }
        _ => None,
    }
}
