//! xAI: money (billing, the spend cap) is a 429 whose `error` is a string
//! naming the team's credits or monthly spending limit.

use super::{json_headers, rendered};
use crate::model::{Answer, Outcome};
use crate::render::{RenderCtx, Rendered};
use serde_json::json;

/// The team xAI's message names.
pub const TEAM: &str = "0a1b2c3d-mock-team";

/// xAI's renderings: money.
pub fn render_answer(ctx: &RenderCtx, answer: &Answer) -> Option<Rendered> {
    match &answer.outcome {
        Outcome::Billing | Outcome::SpendCap => {
            let body = json!({"code": "Some resource has been exhausted",
                "error": format!("Your team {TEAM} has either used all available credits or reached its monthly spending limit. To continue making API requests, please purchase more credits or raise your spending limit.")});
            Some(rendered(429, json_headers(ctx), &body))
        }
        _ => None,
    }
}
