//! Amazon Bedrock's `Converse` answers: the success's `output.message`,
//! `stopReason` and `usage`; errors as an exception named in
//! `x-amzn-ErrorType` with a flat `{"message": …}` body; never a
//! rate-limit header or `retry-after` (an injected
//! [`Fault::RetryAfter`] still sends one).

use super::{html_page, retry_after_value, RenderCtx, Rendered};
use crate::faults::Fault;
use crate::model::{Answer, Outcome};
use ratewise_core::Dimension;
use serde_json::json;

/// The throttling message for tokens (the core's decision case).
pub const TOO_MANY_TOKENS: &str = "Too many tokens, please wait before trying again.";
/// The throttling message for requests.
pub const TOO_MANY_REQUESTS: &str = "Too many requests, please wait before trying again.";

/// An exception: status, `x-amzn-ErrorType`, `x-amzn-RequestId`, body.
pub fn exception(ctx: &RenderCtx, status: u16, kind: &str, message: &str) -> Rendered {
    Rendered {
        status,
        headers: vec![
            ("content-type", "application/json".to_string()),
            ("x-amzn-requestid", ctx.request_id.clone()),
            (
                "x-amzn-errortype",
                format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"),
            ),
        ],
        body: serde_json::to_vec(&json!({ "message": message })).unwrap_or_default(),
    }
}

/// The exception a request-level status is.
pub fn render_status_error(ctx: &RenderCtx, status: u16, message: &str) -> Rendered {
    let kind = match status {
        400 | 413 | 422 => "ValidationException",
        401 => "UnrecognizedClientException",
        403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 | 504 => "ModelTimeoutException",
        429 => "ThrottlingException",
        503 | 529 => "ServiceUnavailableException",
        _ => "InternalServerException",
    };
    exception(ctx, status, kind, message)
}

/// The JSON body of a `Converse` success.
pub fn success_body(ctx: &RenderCtx, input: u64, output: u64, max_tokens: u64) -> Vec<u8> {
    let text = crate::tokens::text(ctx.text_seed, output);
    let stop = if output >= max_tokens {
        "max_tokens"
    } else {
        "end_turn"
    };
    let v = json!({"output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": stop,
        "usage": {"inputTokens": input, "outputTokens": output, "totalTokens": input + output},
        "metrics": {"latencyMs": 0}});
    serde_json::to_vec(&v).unwrap_or_default()
}

/// Renders every Bedrock answer (no streams: `ConverseStream` is not
/// served).
pub fn render_answer(ctx: &RenderCtx, answer: &Answer) -> Rendered {
    match &answer.outcome {
        Outcome::Success(g) => Rendered {
            status: 200,
            headers: vec![
                ("content-type", "application/json".to_string()),
                ("x-amzn-requestid", ctx.request_id.clone()),
            ],
            body: success_body(ctx, g.input_tokens, g.output_tokens, g.reserved_output),
        },
        Outcome::RateLimited {
            dimension: Dimension::Requests,
            ..
        }
        | Outcome::SlowDown { .. } => exception(ctx, 429, "ThrottlingException", TOO_MANY_REQUESTS),
        Outcome::RateLimited { .. } | Outcome::RequestTooLarge { .. } => {
            exception(ctx, 429, "ThrottlingException", TOO_MANY_TOKENS)
        }
        Outcome::DailyQuota { .. } | Outcome::MonthlyQuota { .. } | Outcome::SpendCap => exception(
            ctx,
            429,
            "ThrottlingException",
            "Too many tokens per day, please wait before trying again.",
        ),
        Outcome::Billing | Outcome::QuotaNotGranted => exception(
            ctx,
            403,
            "AccessDeniedException",
            "You don't have access to the model with the specified model ID.",
        ),
        Outcome::TooManyKeys => exception(
            ctx,
            403,
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
        ),
        Outcome::Fault(f) => render_fault(ctx, f),
    }
}

fn render_fault(ctx: &RenderCtx, fault: &Fault) -> Rendered {
    match fault {
        Fault::Overloaded => exception(
            ctx,
            503,
            "ServiceUnavailableException",
            "Service unavailable. Try your request again.",
        ),
        Fault::Status { status, html: true } => Rendered {
            status: *status,
            headers: vec![("content-type", "text/html".to_string())],
            body: html_page(*status),
        },
        Fault::Status { status, .. } => {
            render_status_error(ctx, *status, "The server encountered an internal error.")
        }
        Fault::RetryAfter { format, secs } => {
            let mut r = exception(ctx, 429, "ThrottlingException", TOO_MANY_TOKENS);
            r.headers
                .push(("retry-after", retry_after_value(ctx, *format, *secs)));
            r
        }
        Fault::UpstreamRateLimited => exception(ctx, 429, "ThrottlingException", TOO_MANY_REQUESTS),
        Fault::ErrorInBody { .. } => exception(
            ctx,
            424,
            "ModelErrorException",
            "The model produced an invalid response.",
        ),
        Fault::Reset
        | Fault::Stall { .. }
        | Fault::StreamCut { .. }
        | Fault::StreamError { .. } => {
            render_status_error(ctx, 500, "The server encountered an internal error.")
        }
    }
}
