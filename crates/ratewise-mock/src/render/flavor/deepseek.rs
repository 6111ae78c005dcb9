//! DeepSeek: no rate-limit headers; 402 "Insufficient Balance" for money,
//! 503 "Server overloaded"; a waiting request is sent blank lines (JSON) or
//! `: keep-alive` comments (streams) — the queue itself is the server's
//! (`server::queue`).

use super::{json_headers, rendered};
use crate::model::{Answer, Outcome};
use crate::render::{RenderCtx, Rendered};
use crate::Fault;
use serde_json::{json, Value};

/// What a waiting request is sent every keep-alive interval.
pub fn keepalive(stream: bool) -> &'static str {
    if stream {
        ": keep-alive\n\n"
    } else {
        "\n"
    }
}

/// The 503 of an overloaded server (also a queue wait that ran out).
pub fn overloaded(ctx: &RenderCtx) -> Rendered {
    let body = json!({"error": {"message": "Server overloaded, please try again later.",
        "type": "service_unavailable_error", "param": Value::Null, "code": "server_overloaded"}});
    rendered(503, json_headers(ctx), &body)
}

/// The 429 of a request over the concurrency limit
/// ([`CompatibleConfig::concurrency_refuses`](crate::CompatibleConfig::concurrency_refuses)).
/// DeepSeek documents the status ("429 - Rate Limit Reached") but no body:
/// OpenAI's envelope and code (`rate_limit_exceeded`) with the table's
/// words is **a choice** (ratewise-core reads an unknown code in a 429 as
/// an unknown cause).
pub fn concurrency_exceeded(ctx: &RenderCtx) -> Rendered {
    let body = json!({"error": {"message": "Rate Limit Reached",
        "type": "requests", "param": Value::Null, "code": "rate_limit_exceeded"}});
    rendered(429, json_headers(ctx), &body)
}

/// DeepSeek's renderings: money and overload.
pub fn render_answer(ctx: &RenderCtx, answer: &Answer) -> Option<Rendered> {
    match &answer.outcome {
        Outcome::Billing | Outcome::SpendCap => {
            let body = json!({"error": {"message": "Insufficient Balance",
                "type": "unknown_error", "param": Value::Null, "code": "invalid_request_error"}});
            Some(rendered(402, json_headers(ctx), &body))
        }
        Outcome::Fault(Fault::Overloaded) => Some(overloaded(ctx)),
        _ => None,
    }
}
