//! The OpenAI-compatible flavors' renderings ([`Flavor`]): what each
//! provider changes in OpenAI's answers. Each flavor's module renders only
//! the answers its provider writes differently and hands the rest back
//! (`None`): OpenAI's shapes, with the flavor's rate-limit headers.
//!
//! Only the OpenAI surface has a flavor ([`RenderCtx::flavor`] is
//! [`Flavor::Openai`] on the other routes).

pub mod azure;
pub mod deepseek;
pub mod groq;
pub mod mistral;
pub mod openrouter;
pub mod xai;

use super::{id_header, RenderCtx, Rendered};
use crate::flavor::Flavor;
use crate::model::{Answer, WindowView};
use serde_json::Value;

/// Whether `ctx` is the OpenAI surface answering as another provider.
pub(crate) fn flavored(ctx: &RenderCtx) -> bool {
    ctx.provider == ratewise_core::Provider::Openai && ctx.flavor != Flavor::Openai
}

/// The flavor's rate-limit headers; `None`: OpenAI's.
pub(crate) fn ratelimit_headers(
    ctx: &RenderCtx,
    windows: &[WindowView],
) -> Option<Vec<(&'static str, String)>> {
    match ctx.flavor {
        Flavor::Azure => Some(azure::ratelimit_headers(windows)),
        Flavor::Groq => Some(groq::ratelimit_headers(ctx, windows)),
        Flavor::Mistral => Some(mistral::ratelimit_headers(ctx, windows)),
        // Neither states a limit in headers.
        Flavor::Deepseek | Flavor::Openrouter => Some(Vec::new()),
        Flavor::Openai | Flavor::Xai => None,
    }
}

/// The flavor's own rendering of `answer`; `None`: OpenAI's.
pub(crate) fn render_answer(ctx: &RenderCtx, answer: &Answer) -> Option<Rendered> {
    match ctx.flavor {
        Flavor::Azure => azure::render_answer(ctx, answer),
        Flavor::Groq => groq::render_answer(ctx, answer),
        Flavor::Mistral => mistral::render_answer(ctx, answer),
        Flavor::Deepseek => deepseek::render_answer(ctx, answer),
        Flavor::Openrouter => openrouter::render_answer(ctx, answer),
        Flavor::Xai => xai::render_answer(ctx, answer),
        Flavor::Openai => None,
    }
}

/// `content-type: application/json` and the request id.
pub(crate) fn json_headers(ctx: &RenderCtx) -> Vec<(&'static str, String)> {
    vec![
        ("content-type", "application/json".to_string()),
        id_header(ctx),
    ]
}

/// A JSON answer.
pub(crate) fn rendered(
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: &Value,
) -> Rendered {
    Rendered {
        status,
        headers,
        body: serde_json::to_vec(body).unwrap_or_default(),
    }
}
