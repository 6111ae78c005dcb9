//! Error envelopes and usage objects in JSON bodies.
//!
//! Anthropic: `{"type":"error","error":{"type","message","details":{"error_code"}?},"request_id"}`.
//! OpenAI: `{"error":{"message","type","param","code"}}`. Mistral, flat:
//! `{"object":"error","message","type","param","code"}`. Unknown fields
//! are ignored; anything else (empty, not JSON, truncated, too deep, no
//! `error` object) is a typed [`Unreadable`] reason, never a panic.
//!
//! The envelopes providers usually send (plain strings, `null`s, nested
//! objects) are read by a fast path without copying; serde_json reads
//! everything else, and a property test checks the two agree.

mod envelope;
#[cfg(feature = "fixtures")]
#[doc(hidden)]
pub mod reference;

use crate::usage::Usage;
use serde::de::{self, Deserializer, IgnoredAny, Visitor};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;

/// At most this many bytes of a body are read.
pub const MAX_BODY_PREFIX: usize = 64 * 1024;

/// Longest message kept from an error body.
pub const MAX_MESSAGE_LEN: usize = 1024;

/// Structured fields of one provider error, borrowed from a parsed body or
/// an in-band stream event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ErrorFields<'a> {
    /// `error.type` (Anthropic, OpenAI) or the event's `type`.
    pub error_type: Option<&'a str>,
    /// OpenAI's `error.code`, or Anthropic's `error.details.error_code`.
    pub code: Option<&'a str>,
    /// The human-readable message (read for documented phrases only).
    pub message: Option<&'a str>,
}

/// Why a body gave no structured error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Unreadable {
    /// No bytes at all.
    Empty,
    /// Longer than [`MAX_BODY_PREFIX`]; the prefix did not parse.
    Truncated,
    /// Not JSON, malformed, or nested past the parser's depth limit.
    NotJson,
    /// Valid JSON, but no `error` object.
    NoErrorObject,
}

impl Unreadable {
    /// A short word for notes and records.
    pub const fn as_str(self) -> &'static str {
        match self {
            Unreadable::Empty => "empty",
            Unreadable::Truncated => "truncated",
            Unreadable::NotJson => "not_json",
            Unreadable::NoErrorObject => "no_error_object",
        }
    }
}

/// A provider error read from a body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProviderError {
    /// `error.type`.
    pub error_type: Option<String>,
    /// OpenAI `error.code`, or Anthropic `error.details.error_code`.
    pub code: Option<String>,
    /// `error.message`, cut to [`MAX_MESSAGE_LEN`] characters.
    pub message: Option<String>,
    /// `error.param` (OpenAI).
    pub param: Option<String>,
    /// The body's `request_id` (Anthropic).
    pub request_id: Option<String>,
}

impl ProviderError {
    /// The fields the code table reads.
    pub fn fields(&self) -> ErrorFields<'_> {
        ErrorFields {
            error_type: self.error_type.as_deref(),
            code: self.code.as_deref(),
            message: self.message.as_deref(),
        }
    }
}

/// Reads an error envelope from the first [`MAX_BODY_PREFIX`] bytes.
///
/// ```
/// use ratewise_core::parse::body::{parse_error_body, Unreadable};
/// let e = parse_error_body(br#"{"error":{"message":"x","type":"tokens","code":"rate_limit_exceeded"}}"#).unwrap();
/// assert_eq!(e.code.as_deref(), Some("rate_limit_exceeded"));
/// assert_eq!(parse_error_body(b"<html>502</html>"), Err(Unreadable::NotJson));
/// ```
pub fn parse_error_body(body: &[u8]) -> Result<ProviderError, Unreadable> {
    parse_error_ref(body).map(|e| e.to_owned_error())
}

/// A provider error borrowed from the body: the classifier reads the fields
/// in place and copies only those a classification keeps. Every accessor
/// clips as [`ProviderError`]'s fields are clipped, so both read the same.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ErrorRef<'a> {
    error_type: Option<Cow<'a, str>>,
    code: Option<Cow<'a, str>>,
    message: Option<Cow<'a, str>>,
    param: Option<Cow<'a, str>>,
    pub(super) request_id: Option<Cow<'a, str>>,
}

fn clipped<'s>(field: &'s Option<Cow<'_, str>>) -> Option<&'s str> {
    field
        .as_deref()
        .map(|s| crate::parse::clip(s, MAX_MESSAGE_LEN))
}

impl<'a> ErrorRef<'a> {
    /// Fields read in place by the envelope fast path (no request id yet).
    pub(super) fn borrowed(
        error_type: Option<&'a str>,
        code: Option<&'a str>,
        message: Option<&'a str>,
        param: Option<&'a str>,
    ) -> Self {
        ErrorRef {
            error_type: error_type.map(Cow::Borrowed),
            code: code.map(Cow::Borrowed),
            message: message.map(Cow::Borrowed),
            param: param.map(Cow::Borrowed),
            request_id: None,
        }
    }

    /// `error.type`, as [`ProviderError::error_type`].
    pub(crate) fn error_type(&self) -> Option<&str> {
        clipped(&self.error_type)
    }

    /// `error.code` or `error.details.error_code`, as [`ProviderError::code`].
    pub(crate) fn code(&self) -> Option<&str> {
        clipped(&self.code)
    }

    /// `error.message`, as [`ProviderError::message`].
    pub(crate) fn message(&self) -> Option<&str> {
        clipped(&self.message)
    }

    /// The body's request id, as [`ProviderError::request_id`] (allocates).
    pub(crate) fn request_id(&self) -> Option<String> {
        self.request_id
            .as_deref()
            .and_then(|id| crate::parse::request_id::clean(id.as_bytes()))
    }

    /// The fields the code table reads.
    pub(crate) fn fields(&self) -> ErrorFields<'_> {
        ErrorFields {
            error_type: self.error_type(),
            code: self.code(),
            message: self.message(),
        }
    }

    fn to_owned_error(&self) -> ProviderError {
        ProviderError {
            error_type: self.error_type().map(str::to_owned),
            code: self.code().map(str::to_owned),
            message: self.message().map(str::to_owned),
            param: clipped(&self.param).map(str::to_owned),
            request_id: self.request_id(),
        }
    }
}

/// [`parse_error_body`] without copying: the fields borrow from `body`
/// (unless JSON escapes had to be decoded).
pub(crate) fn parse_error_ref(body: &[u8]) -> Result<ErrorRef<'_>, Unreadable> {
    let (bytes, truncated) = prefix(body)?;
    if let Some(read) = envelope::read(bytes) {
        return read;
    }
    parse_error_serde(bytes, truncated)
}

/// The general reading, by serde_json: the reference the fast path agrees with.
fn parse_error_serde(bytes: &[u8], truncated: bool) -> Result<ErrorRef<'_>, Unreadable> {
    let env: Envelope<'_> = match serde_json::from_slice(bytes) {
        Ok(env) => env,
        Err(_) if truncated => return Err(Unreadable::Truncated),
        Err(_) => return Err(Unreadable::NotJson),
    };
    let Some(err) = env.error else {
        // Mistral's flat envelope: the error's fields at the top, marked
        // by `"object": "error"`.
        if env.object.0.as_deref() == Some("error") {
            return Ok(ErrorRef {
                error_type: env.kind.0,
                code: env.code.0,
                message: env.message.0,
                param: env.param.0,
                request_id: env.request_id.0,
            });
        }
        return Err(Unreadable::NoErrorObject);
    };
    let err = match err {
        ErrorValue::Object(err) => err,
        // xAI: `"error": "<the message>"`.
        ErrorValue::Text(message) => {
            return Ok(ErrorRef {
                message: Some(message),
                request_id: env.request_id.0,
                ..ErrorRef::default()
            })
        }
    };
    let code = err
        .code
        .0
        .or_else(|| err.details.and_then(|d| d.error_code.0));
    Ok(ErrorRef {
        error_type: err.kind.0,
        code,
        message: err.message.0,
        param: err.param.0,
        request_id: env.request_id.0,
    })
}

/// Reads the `usage` object of a JSON success body: Anthropic's fields, or
/// OpenAI's `prompt_tokens` / `completion_tokens` (whose
/// `prompt_tokens_details.cached_tokens` become cache reads), or the
/// Responses API's `input_tokens` / `output_tokens`, or Gemini's
/// `usageMetadata`. `None` when there is no readable usage.
///
/// The whole body is read, not a prefix: `usage` comes last, after the
/// completion's text, so an answer over [`MAX_BODY_PREFIX`] would otherwise
/// settle at its estimate. The caller bounds what it buffers (the tower
/// layer's `max_metered_body`); parsing allocates nothing per byte beyond
/// the usage fields, skipping everything else.
///
/// ```
/// use ratewise_core::parse::body::parse_usage;
/// let u = parse_usage(br#"{"candidates":[],"usageMetadata":{"promptTokenCount":120,"candidatesTokenCount":30,"thoughtsTokenCount":12,"cachedContentTokenCount":100}}"#).unwrap();
/// assert_eq!((u.input_tokens, u.output_tokens, u.cache_read_input_tokens), (20, 42, 100));
/// ```
pub fn parse_usage(body: &[u8]) -> Option<Usage> {
    let holder: UsageHolder = serde_json::from_slice(body).ok()?;
    holder
        .usage
        .map(RawUsage::into_usage)
        .or_else(|| holder.usage_metadata.map(GeminiUsage::into_usage))
}

/// A JSON answer body inside a larger document — a batch result line's
/// `response.body` (OpenAI) or `result.message` (Anthropic) — read once,
/// with the line: its bytes as they were, and its `usage` read by
/// [`parse_usage`] as the line is deserialized. A result line's reader
/// takes both from here and parses the usage nowhere else.
///
/// ```
/// use ratewise_core::parse::body::AnswerBody;
/// #[derive(serde::Deserialize)]
/// struct Line { body: AnswerBody }
/// let l: Line = serde_json::from_str(r#"{"body": {"id":"x","usage":{"input_tokens":3,"output_tokens":4}}}"#).unwrap();
/// assert_eq!(l.body.as_bytes(), br#"{"id":"x","usage":{"input_tokens":3,"output_tokens":4}}"#);
/// assert_eq!(l.body.usage().map(|u| (u.input_tokens, u.output_tokens)), Some((3, 4)));
/// ```
#[derive(Debug, Clone)]
pub struct AnswerBody {
    raw: Box<serde_json::value::RawValue>,
    usage: Option<Usage>,
}

impl AnswerBody {
    /// The body's bytes, as they were in the document.
    pub fn as_bytes(&self) -> &[u8] {
        self.raw.get().as_bytes()
    }

    /// Its `usage`; `None` when it had no readable one.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }
}

impl<'de> Deserialize<'de> for AnswerBody {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Box::<serde_json::value::RawValue>::deserialize(d)?;
        let usage = parse_usage(raw.get().as_bytes());
        Ok(AnswerBody { raw, usage })
    }
}

/// Reads a bare usage object (`{"input_tokens":..}` or OpenAI's form).
pub fn usage_from_value(value: &serde_json::Value) -> Option<Usage> {
    RawUsage::deserialize(value).ok().map(RawUsage::into_usage)
}

/// Reads a bare Gemini `usageMetadata` object (one streamed chunk's).
///
/// ```
/// use ratewise_core::parse::body::usage_metadata_from_value;
/// let v = serde_json::json!({"promptTokenCount": 9, "candidatesTokenCount": 4, "totalTokenCount": 13});
/// let u = usage_metadata_from_value(&v).unwrap();
/// assert_eq!((u.input_tokens, u.output_tokens), (9, 4));
/// ```
pub fn usage_metadata_from_value(value: &serde_json::Value) -> Option<Usage> {
    GeminiUsage::deserialize(value)
        .ok()
        .map(GeminiUsage::into_usage)
}

fn prefix(body: &[u8]) -> Result<(&[u8], bool), Unreadable> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(Unreadable::Empty);
    }
    Ok(prefix_any(body).unwrap_or((body, false)))
}

fn prefix_any(body: &[u8]) -> Option<(&[u8], bool)> {
    if body.is_empty() {
        return None;
    }
    if body.len() > MAX_BODY_PREFIX {
        Some((&body[..MAX_BODY_PREFIX], true))
    } else {
        Some((body, false))
    }
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    error: Option<ErrorValue<'a>>,
    #[serde(borrow, default)]
    request_id: LooseStr<'a>,
    // A flat envelope's fields (Mistral), read when `error` is absent.
    #[serde(borrow, default)]
    object: LooseStr<'a>,
    #[serde(borrow, default, rename = "type")]
    kind: LooseStr<'a>,
    #[serde(borrow, default)]
    message: LooseStr<'a>,
    #[serde(borrow, default)]
    code: LooseStr<'a>,
    #[serde(borrow, default)]
    param: LooseStr<'a>,
}

/// `error` as an object (every provider but one) or as the message itself
/// (xAI: `{"code": "...", "error": "Your team ... has either used all
/// available credits or reached its monthly spending limit."}`).
///
/// Untagged, the object first: anything an object was read from before
/// (an array too, as a derived struct reads one) still is.
#[derive(Deserialize)]
#[serde(untagged)]
enum ErrorValue<'a> {
    Object(#[serde(borrow)] ErrorObject<'a>),
    Text(#[serde(borrow)] Cow<'a, str>),
}

#[derive(Deserialize)]
struct ErrorObject<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: LooseStr<'a>,
    #[serde(borrow, default)]
    message: LooseStr<'a>,
    #[serde(borrow, default)]
    code: LooseStr<'a>,
    #[serde(borrow, default)]
    param: LooseStr<'a>,
    #[serde(borrow, default)]
    details: Option<Details<'a>>,
}

#[derive(Deserialize)]
struct Details<'a> {
    #[serde(borrow, default)]
    error_code: LooseStr<'a>,
}

/// A string field that tolerates `null`, numbers or objects (kept as
/// `None`): a provider changing a field's type must not make the whole
/// envelope unreadable.
#[derive(Default)]
struct LooseStr<'a>(Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for LooseStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LooseStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(LooseStr(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(LooseStr(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(LooseStr(Some(Cow::Owned(v))))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(LooseStr(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(LooseStr(None))
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
                d.deserialize_any(V)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(LooseStr(None))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(LooseStr(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(LooseStr(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(LooseStr(None))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(LooseStr(None))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(LooseStr(None))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize)]
struct UsageHolder {
    #[serde(default)]
    usage: Option<RawUsage>,
    /// Gemini's `usageMetadata`.
    #[serde(default, rename = "usageMetadata")]
    usage_metadata: Option<GeminiUsage>,
}

/// Gemini's `usageMetadata` (ai.google.dev/api/generate-content
/// `UsageMetadata`): `promptTokenCount` includes the cached part
/// (`cachedContentTokenCount`); thinking (`thoughtsTokenCount`) is billed
/// as output beside `candidatesTokenCount`.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct GeminiUsage {
    #[serde(default)]
    prompt_token_count: Option<u64>,
    #[serde(default)]
    candidates_token_count: Option<u64>,
    #[serde(default)]
    thoughts_token_count: Option<u64>,
    #[serde(default)]
    cached_content_token_count: Option<u64>,
}

impl GeminiUsage {
    fn into_usage(self) -> Usage {
        let cached = self.cached_content_token_count.unwrap_or(0);
        Usage {
            input_tokens: self.prompt_token_count.unwrap_or(0).saturating_sub(cached),
            output_tokens: self
                .candidates_token_count
                .unwrap_or(0)
                .saturating_add(self.thoughts_token_count.unwrap_or(0)),
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: cached,
        }
    }
}

#[derive(Deserialize, Default)]
struct RawUsage {
    // Bedrock's Converse API names the same counts in camel case.
    #[serde(default, alias = "inputTokens")]
    input_tokens: Option<u64>,
    #[serde(default, alias = "outputTokens")]
    output_tokens: Option<u64>,
    #[serde(default, alias = "cacheWriteInputTokens")]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default, alias = "cacheReadInputTokens")]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<CachedDetails>,
    #[serde(default)]
    input_tokens_details: Option<CachedDetails>,
}

#[derive(Deserialize, Default)]
struct CachedDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl RawUsage {
    fn into_usage(self) -> Usage {
        let responses_style = self.input_tokens_details.is_some();
        let cached = self
            .prompt_tokens_details
            .or(self.input_tokens_details)
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0);
        if let Some(prompt) = self.prompt_tokens {
            // OpenAI Chat: cached tokens are part of prompt_tokens.
            return Usage {
                input_tokens: prompt.saturating_sub(cached),
                output_tokens: self.completion_tokens.unwrap_or(0),
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: cached,
            };
        }
        // OpenAI Responses: cached tokens are part of input_tokens too.
        let openai_style = responses_style && cached > 0;
        let input = self.input_tokens.unwrap_or(0);
        Usage {
            input_tokens: if openai_style {
                input.saturating_sub(cached)
            } else {
                input
            },
            output_tokens: self.output_tokens.unwrap_or(0),
            cache_creation_input_tokens: self.cache_creation_input_tokens.unwrap_or(0),
            cache_read_input_tokens: self.cache_read_input_tokens.unwrap_or(if openai_style {
                cached
            } else {
                0
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn json_value() -> impl Strategy<Value = String> {
        let leaf = prop::sample::select(vec![
            r#""rate_limit_error""#,
            r#""error""#,
            r#""Number of request tokens has exceeded your per-minute rate limit""#,
            r#""""#,
            r#""a \"b\"""#,
            r#""x\u0041""#,
            r#""\ud800""#,
            "\"tab\there\"",
            r#""é ü 日本""#,
            r#""req_011CVrl1""#,
            "null",
            "true",
            "false",
            "nul",
            "1",
            "-2.5",
            "[1,2]",
            "[]",
            "{}",
        ])
        .prop_map(str::to_owned);
        leaf.prop_recursive(4, 24, 5, |inner| {
            let key = prop::sample::select(vec![
                "error",
                "object",
                "type",
                "message",
                "code",
                "param",
                "details",
                "error_code",
                "request_id",
                "x",
                r#"typ\u0065"#,
                "Error",
            ]);
            let ws = prop::sample::select(vec!["", " ", "\n\t ", "\r"]);
            prop::collection::vec((key, ws, inner), 0..5).prop_map(|fields| {
                let body: Vec<String> = fields
                    .into_iter()
                    .map(|(k, w, v)| format!("{w}\"{k}\"{w}:{w}{v}{w}"))
                    .collect();
                format!("{{{}}}", body.join(","))
            })
        })
    }

    proptest! {
        /// Wherever the envelope fast path answers, serde_json answers the same.
        #[test]
        fn fast_path_agrees_with_serde(
            value in json_value(),
            cut in any::<prop::sample::Index>(),
            junk in prop::sample::select(vec!["", " ", "\n", "}", ",", "x", "\u{0}", "\u{ff}"]),
            mutate in 0u8..4,
        ) {
            let mut body = format!(r#"{{"type":"error","error":{value},"request_id":"req_1"}}"#);
            match mutate {
                1 => {
                    let at = cut.index(body.len() + 1);
                    if body.is_char_boundary(at) {
                        body.truncate(at);
                    }
                }
                2 => {
                    let at = cut.index(body.len() + 1);
                    if body.is_char_boundary(at) {
                        body.insert_str(at, junk);
                    }
                }
                3 => body = value,
                _ => body.push_str(junk),
            }
            let bytes = body.as_bytes();
            if let Some(fast) = super::envelope::read(bytes) {
                prop_assert_eq!(fast, parse_error_serde(bytes, false), "{}", body);
            }
        }
    }

    #[test]
    fn fast_path_reads_the_usual_envelopes() {
        for body in [
            &br#"{"type": "error", "error": {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your per-minute rate limit"}, "request_id": "req_011CVrl1"}"#[..],
            br#"{"error": {"message": "Rate limit reached for gpt-4o-mini in organization org-x on tokens per min (TPM): Limit 200000, Used 195869, Requested 4412. Please try again in 1.146s.", "type": "tokens", "param": null, "code": "rate_limit_exceeded"}}"#,
            br#"{"type":"error","error":{"type":"rate_limit_error","message":"m","details":{"error_code":"enforced_spend_limit_reached"}},"request_id":"req_1"}"#,
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded","details":null}}"#,
            b"{\"ok\":true}",
        ] {
            let fast = super::envelope::read(body);
            assert!(fast.is_some(), "{}", String::from_utf8_lossy(body));
            assert_eq!(fast.unwrap(), parse_error_serde(body, false));
        }
    }

    #[test]
    fn anthropic_envelope_with_details() {
        let b = br#"{"type":"error","error":{"type":"rate_limit_error","message":"m","details":{"error_code":"enforced_spend_limit_reached"}},"request_id":"req_1"}"#;
        let e = parse_error_body(b).unwrap();
        assert_eq!(e.error_type.as_deref(), Some("rate_limit_error"));
        assert_eq!(e.code.as_deref(), Some("enforced_spend_limit_reached"));
        assert_eq!(e.request_id.as_deref(), Some("req_1"));
    }

    #[test]
    fn anthropic_null_details() {
        let b = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded","details":null}}"#;
        let e = parse_error_body(b).unwrap();
        assert_eq!(e.code, None);
    }

    #[test]
    fn openai_envelope_with_escapes_and_odd_types() {
        let b = br#"{"error":{"message":"a \"b\"","type":"tokens","param":null,"code":429,"extra":[1,2]}}"#;
        let e = parse_error_body(b).unwrap();
        assert_eq!(e.message.as_deref(), Some("a \"b\""));
        assert_eq!(e.code.as_deref(), Some("429"));
    }

    #[test]
    fn unreadable_reasons() {
        assert_eq!(parse_error_body(b""), Err(Unreadable::Empty));
        assert_eq!(parse_error_body(b"  \n"), Err(Unreadable::Empty));
        assert_eq!(
            parse_error_body(b"Too Many Requests"),
            Err(Unreadable::NotJson)
        );
        assert_eq!(
            parse_error_body(b"{\"ok\":true}"),
            Err(Unreadable::NoErrorObject)
        );
        assert_eq!(parse_error_body(b"[1]"), Err(Unreadable::NotJson));
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(
            parse_error_body(deep.as_bytes()),
            Err(Unreadable::Truncated)
        );
        let deep_small = "[".repeat(10_000);
        assert_eq!(
            parse_error_body(deep_small.as_bytes()),
            Err(Unreadable::NotJson)
        );
        let huge = format!("{{\"error\":{{\"message\":\"{}\"}}}}", "x".repeat(200_000));
        assert_eq!(
            parse_error_body(huge.as_bytes()),
            Err(Unreadable::Truncated)
        );
    }

    #[test]
    fn usage_shapes() {
        let a = br#"{"usage":{"input_tokens":12,"output_tokens":3,"cache_creation_input_tokens":5,"cache_read_input_tokens":7}}"#;
        assert_eq!(
            parse_usage(a),
            Some(Usage {
                input_tokens: 12,
                output_tokens: 3,
                cache_creation_input_tokens: 5,
                cache_read_input_tokens: 7
            })
        );
        let o = br#"{"usage":{"prompt_tokens":19,"completion_tokens":2,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":4}}}"#;
        assert_eq!(
            parse_usage(o),
            Some(Usage {
                input_tokens: 15,
                output_tokens: 2,
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: 4
            })
        );
        assert_eq!(parse_usage(b"{}"), None);
        assert_eq!(parse_usage(b"nope"), None);
        // Bedrock Converse (docs.aws.amazon.com, `TokenUsage`).
        let b = br#"{"output":{"message":{}},"stopReason":"end_turn","usage":{"inputTokens":30,"outputTokens":8,"totalTokens":38,"cacheReadInputTokens":4}}"#;
        let u = parse_usage(b).unwrap();
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.cache_read_input_tokens),
            (30, 8, 4)
        );
    }

    /// `usage` after 200 KiB of completion, in every provider's shape.
    #[test]
    fn usage_after_a_long_completion_is_read() {
        let text = "word ".repeat(40_000);
        let bodies = [
            format!(
                r#"{{"content":[{{"type":"text","text":"{text}"}}],"usage":{{"input_tokens":10,"cache_creation_input_tokens":2,"cache_read_input_tokens":3,"output_tokens":40000}}}}"#
            ),
            format!(
                r#"{{"choices":[{{"message":{{"content":"{text}"}}}}],"usage":{{"prompt_tokens":19,"completion_tokens":40000}}}}"#
            ),
            format!(
                r#"{{"output":[{{"content":[{{"text":"{text}"}}]}}],"usage":{{"input_tokens":19,"output_tokens":40000,"input_tokens_details":{{"cached_tokens":0}}}}}}"#
            ),
            format!(
                r#"{{"candidates":[{{"content":{{"parts":[{{"text":"{text}"}}]}}}}],"usageMetadata":{{"promptTokenCount":19,"candidatesTokenCount":40000}}}}"#
            ),
            format!(
                r#"{{"output":{{"message":{{"content":[{{"text":"{text}"}}]}}}},"usage":{{"inputTokens":19,"outputTokens":40000}}}}"#
            ),
        ];
        for body in &bodies {
            assert!(body.len() > MAX_BODY_PREFIX);
            let u = parse_usage(body.as_bytes()).unwrap_or_else(|| panic!("{}", &body[..40]));
            assert_eq!(u.output_tokens, 40_000, "{}", &body[..40]);
        }
        // A body cut short (the caller's bound) has no usage: never a guess.
        assert_eq!(parse_usage(&bodies[0].as_bytes()[..MAX_BODY_PREFIX]), None);
    }

    /// DeepSeek, while a request waits in its queue, sends blank lines
    /// before a non-streamed answer (api-docs.deepseek.com/quick_start/
    /// rate_limit): the usage behind them is read all the same.
    #[test]
    fn blank_lines_before_an_answer_hide_nothing() {
        let body =
            b"\n\n\r\n\n{\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4}}";
        let u = parse_usage(body).unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (9, 4));
        assert_eq!(parse_usage(b"\n\n\n"), None);
    }
}
