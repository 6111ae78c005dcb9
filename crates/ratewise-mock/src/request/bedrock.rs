//! Reading a Bedrock `Converse` request: the route
//! (`/model/{modelId}/converse`), the key (the access key id of a SigV4
//! `Authorization`, never verified, or a Bedrock API key as a Bearer token)
//! and the body's fields (`messages`, `system`,
//! `inferenceConfig.maxTokens`). Pure functions; untrusted input gives
//! `None` or the 400's message, never a panic.

use super::{header_str, truncate, ParsedRequest};
use crate::tokens::{self, INPUT_TOKENS_HEADER};
use http::HeaderMap;
use serde_json::Value;

/// `maxTokens` of a request that sets none (**a choice**: Bedrock's
/// default is the model's own maximum).
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// The model of a `POST /model/{modelId}/converse` path (`%3A` decoded to
/// `:`, at most 256 bytes); `None` for any other path.
///
/// ```
/// use ratewise_mock::request::bedrock::route;
/// assert_eq!(route("/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse").as_deref(),
///     Some("anthropic.claude-3-haiku-20240307-v1:0"));
/// assert_eq!(route("/model//converse"), None);
/// assert_eq!(route("/model/m/converse-stream"), None);
/// ```
pub fn route(path: &str) -> Option<String> {
    let model = path.strip_prefix("/model/")?.strip_suffix("/converse")?;
    let model = model.replace("%3A", ":").replace("%3a", ":");
    (!model.is_empty() && !model.contains('/')).then(|| truncate(&model, 256))
}

/// The caller: a SigV4 `Authorization`'s access key id
/// (`Credential=AKID/…`), else a Bearer token (Bedrock API keys).
pub fn api_key(h: &HeaderMap) -> Option<&str> {
    let auth = header_str(h, "authorization")?;
    if let Some(rest) = auth.strip_prefix("AWS4-HMAC-SHA256") {
        let cred = rest.split_once("Credential=")?.1;
        let akid = cred.split(['/', ',']).next()?.trim();
        return (!akid.is_empty()).then_some(akid);
    }
    auth.strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|k| !k.is_empty())
}

/// The fields of a `Converse` body, or the `ValidationException`'s message.
pub fn parse(body: &[u8], h: &HeaderMap, model: &str) -> Result<ParsedRequest, String> {
    let v: Value = serde_json::from_slice(body).map_err(|_| {
        "Malformed input request, please reformat your input and try again.".to_string()
    })?;
    let obj = v
        .as_object()
        .ok_or("Malformed input request, please reformat your input and try again.")?;
    if !obj.get("messages").is_some_and(Value::is_array) {
        return Err("The model returned the following errors: messages: field required".into());
    }
    let max_tokens = match obj.get("inferenceConfig").and_then(|c| c.get("maxTokens")) {
        None => DEFAULT_MAX_TOKENS,
        Some(m) => m
            .as_u64()
            .filter(|m| *m > 0)
            .ok_or("1 validation error detected: Value at 'inferenceConfig.maxTokens' failed to satisfy constraint: Member must have value greater than or equal to 1")?,
    };
    let input_tokens = header_str(h, INPUT_TOKENS_HEADER)
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| tokens::estimate_input_tokens_of(&v, &["system", "messages"]));
    Ok(ParsedRequest {
        model: model.to_string(),
        max_tokens,
        stream: false,
        include_usage: false,
        input_tokens,
    })
}
