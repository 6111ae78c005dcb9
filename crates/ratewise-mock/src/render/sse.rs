//! SSE frames of a successful stream and the in-band error frame, in the
//! providers' exact event shapes (see the recorded streams under
//! `shared/fixtures/streams/`).

use super::{
    anthropic_usage, created, id_header, openai_usage, ratelimit_headers, stop_reason, RenderCtx,
};
use crate::model::WindowView;
use crate::tokens::word;
use ratewise_core::Provider;
use serde_json::{json, Value};

/// One SSE frame of a successful stream.
#[derive(Debug, Clone, PartialEq)]
pub struct SseFrame {
    /// The frame's bytes, ending with a blank line.
    pub bytes: String,
    /// Output tokens this frame delivers (for latency pacing).
    pub output_tokens: u64,
}

/// Headers of a successful stream.
pub fn stream_headers(ctx: &RenderCtx, windows: &[WindowView]) -> Vec<(&'static str, String)> {
    if ctx.provider == Provider::Gemini {
        return super::gemini::stream_headers(ctx);
    }
    let mut h = vec![
        (
            "content-type",
            "text/event-stream; charset=utf-8".to_string(),
        ),
        ("cache-control", "no-cache".to_string()),
        id_header(ctx),
    ];
    h.extend(ratelimit_headers(ctx, windows));
    h
}

fn event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn data(data: &Value) -> String {
    format!("data: {data}\n\n")
}

/// The frames of a complete successful stream, in order.
pub fn stream_frames(ctx: &RenderCtx, input: u64, output: u64, max_tokens: u64) -> Vec<SseFrame> {
    if ctx.provider == Provider::Gemini {
        return super::gemini::stream_frames(ctx, input, output, max_tokens);
    }
    let per = ctx.tokens_per_delta.max(1);
    let mut chunks = Vec::new();
    let mut i = 0;
    while i < output {
        let n = per.min(output - i);
        chunks.push((
            (i..i + n)
                .map(|j| word(ctx.text_seed, j))
                .collect::<String>(),
            n,
        ));
        i += n;
    }
    let frame = |bytes: String, output_tokens: u64| SseFrame {
        bytes,
        output_tokens,
    };
    let stop = stop_reason(ctx.provider, output, max_tokens);
    let mut out = Vec::new();
    match ctx.provider {
        Provider::Openai => {
            let usage_null = ctx.include_usage;
            let chunk = |delta: Value, finish: Value| {
                let mut v = json!({"id": ctx.message_id, "object": "chat.completion.chunk",
                    "created": created(ctx), "model": ctx.model, "service_tier": "default",
                    "system_fingerprint": "fp_mock",
                    "choices": [{"index": 0, "delta": delta, "logprobs": Value::Null,
                        "finish_reason": finish}]});
                if usage_null {
                    v["usage"] = Value::Null;
                }
                v
            };
            out.push(frame(
                data(&chunk(
                    json!({"role": "assistant", "content": "", "refusal": Value::Null}),
                    Value::Null,
                )),
                0,
            ));
            for (text, n) in chunks {
                out.push(frame(
                    data(&chunk(json!({"content": text}), Value::Null)),
                    n,
                ));
            }
            out.push(frame(data(&chunk(json!({}), json!(stop))), 0));
            if ctx.include_usage {
                let v = json!({"id": ctx.message_id, "object": "chat.completion.chunk",
                    "created": created(ctx), "model": ctx.model, "service_tier": "default",
                    "system_fingerprint": "fp_mock", "choices": [],
                    "usage": openai_usage(input, output)});
                out.push(frame(data(&v), 0));
            }
            out.push(frame("data: [DONE]\n\n".into(), 0));
            if ctx.flavor == crate::flavor::Flavor::Openrouter {
                out.insert(0, frame(super::flavor::openrouter::PROCESSING.into(), 0));
            }
        }
        _ => {
            let start = json!({"type": "message_start", "message": {"id": ctx.message_id,
                "type": "message", "role": "assistant", "content": [], "model": ctx.model,
                "stop_reason": Value::Null, "stop_sequence": Value::Null,
                "usage": anthropic_usage(input, 1)}});
            out.push(frame(event("message_start", &start), 0));
            out.push(frame(
                event(
                    "content_block_start",
                    &json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}}),
                ),
                0,
            ));
            out.push(frame(event("ping", &json!({"type": "ping"})), 0));
            for (text, n) in chunks {
                out.push(frame(
                    event(
                        "content_block_delta",
                        &json!({"type": "content_block_delta",
                        "index": 0, "delta": {"type": "text_delta", "text": text}}),
                    ),
                    n,
                ));
            }
            out.push(frame(
                event(
                    "content_block_stop",
                    &json!({"type": "content_block_stop", "index": 0}),
                ),
                0,
            ));
            out.push(frame(
                event(
                    "message_delta",
                    &json!({"type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": Value::Null},
                    "usage": {"output_tokens": output}}),
                ),
                0,
            ));
            out.push(frame(
                event("message_stop", &json!({"type": "message_stop"})),
                0,
            ));
        }
    }
    out
}

/// The in-band error frame of a stream: Anthropic `event: error` with
/// `overloaded_error`; OpenAI a `data:` error object.
pub fn stream_error_frame(ctx: &RenderCtx) -> String {
    match ctx.provider {
        // (An array stream's error before any element: the server asks
        // `gemini::stream_error_frame` itself.)
        Provider::Gemini => super::gemini::stream_error_frame(ctx, false),
        Provider::Openai if ctx.flavor == crate::flavor::Flavor::Openrouter => {
            super::flavor::openrouter::error_chunk(ctx)
        }
        Provider::Openai => data(&json!({"error": {"message":
            "The server had an error while processing your request. Sorry about that!",
            "type": "server_error", "param": Value::Null, "code": Value::Null}})),
        _ => event(
            "error",
            &json!({"type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
    }
}

/// Output tokens delivered by the first `n` frames.
pub fn delivered_tokens(frames: &[SseFrame], n: usize) -> u64 {
    frames.iter().take(n).map(|f| f.output_tokens).sum()
}
