//! Provider interpreters: SSE events in, typed [`StreamEvent`]s out.
//!
//! One [`Interpreter`] per stream, parameterised by the [`Provider`]. It
//! turns every [`SseEvent`] into exactly one [`StreamEvent`] (so "events
//! delivered" counts the same thing in the raw and the typed view) and keeps
//! the running [`Usage`] and whether content was delivered.
//!
//! - **Anthropic** (Messages API): `message_start` (input and cache usage),
//!   `content_block_start` / `_delta` / `_stop`, `message_delta` (cumulative
//!   usage: the fields it carries override), `message_stop`, `ping`, and
//!   `event: error` (e.g. `overloaded_error`).
//! - **OpenAI** Chat Completions: chunks with `choices[].delta`, the final
//!   usage chunk (`stream_options.include_usage`), `[DONE]`, and a top-level
//!   `{"error": {..}}` payload. Responses API: `response.created`,
//!   `response.*.delta`, `response.completed` / `response.incomplete`
//!   (with usage), `error` and `response.failed`.
//!   The OpenAI-compatible providers (Azure, Groq, Mistral, DeepSeek,
//!   OpenRouter, xAI) stream the same chunks: OpenRouter's mid-stream
//!   error is a chunk with a top-level `error`, DeepSeek's `: keep-alive`
//!   lines are SSE comments, skipped by the parser.
//! - **Gemini** (`streamGenerateContent?alt=sse`): every event is one
//!   `GenerateContentResponse` (see `gemini`).
//! - **Generic**: nothing is interpreted; every event is
//!   [`StreamEvent::Other`].
//!
//! Unknown event types and unreadable JSON pass through as
//! [`StreamEvent::Other`]. Error causes come from
//! [`ratewise_core::classify::codes::cause_of_error`], so an in-stream
//! `overloaded_error` is [`Cause::Overloaded`] exactly like a 529 body;
//! unknown codes are [`Cause::Unknown`].

use ratewise_core::classify::codes::{cause_of_error, ErrorFields};
use ratewise_core::parse::body::usage_from_value;
use ratewise_core::{Cause, Provider, Usage};
use serde_json::Value;

use crate::sse::SseEvent;

mod gemini;

/// Longest error message kept from an in-band error, in characters.
pub const MAX_ERROR_MESSAGE_CHARS: usize = 512;
/// Longest error type or code kept, in characters.
const MAX_ERROR_FIELD_CHARS: usize = 128;

/// An error the provider reported inside the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InBandError {
    /// The cause in the core's vocabulary ([`Cause::Unknown`] when the
    /// provider's type and code are not known).
    pub cause: Cause,
    /// The provider's error type (`overloaded_error`, `server_error`, ..).
    pub error_type: Option<String>,
    /// The provider's error code (`rate_limit_exceeded`, ..).
    pub code: Option<String>,
    /// The human-readable message, at most [`MAX_ERROR_MESSAGE_CHARS`].
    pub message: Option<String>,
}

/// A typed stream event. Each SSE event yields exactly one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamEvent {
    /// The response started (`message_start`, `response.created`), with
    /// the usage it announced (input and cache tokens).
    MessageStart {
        /// Usage announced at the start, when present.
        usage: Option<Usage>,
    },
    /// A content block (or Responses content part) opened.
    ContentBlockStart {
        /// The block's index.
        index: u64,
    },
    /// Generated text.
    TextDelta {
        /// The content block (Anthropic), choice (Chat) or content part
        /// (Responses) index.
        index: u64,
        /// The text fragment.
        text: String,
    },
    /// Other generated content: tool-call arguments, thinking, refusals.
    ContentDelta {
        /// The block, choice or part index.
        index: u64,
        /// The delta's kind (`input_json_delta`, `tool_calls`,
        /// `response.function_call_arguments.delta`, ..).
        kind: String,
    },
    /// A content block (or content part) closed.
    ContentBlockStop {
        /// The block's index.
        index: u64,
    },
    /// Usage was reported; this is the cumulative usage so far.
    UsageUpdate(Usage),
    /// A keep-alive.
    Ping,
    /// The response completed (`message_stop`, `[DONE]`,
    /// `response.completed`), with the final usage when known.
    Done {
        /// The final usage, when the stream reported any.
        usage: Option<Usage>,
    },
    /// An in-band error: the stream failed.
    Error(InBandError),
    /// Anything else, passed through unchanged.
    Other {
        /// The SSE event type.
        event: String,
        /// The SSE data.
        data: String,
    },
}

impl StreamEvent {
    /// Is this generated content (text or another content delta)?
    pub fn is_content(&self) -> bool {
        matches!(
            self,
            StreamEvent::TextDelta { .. } | StreamEvent::ContentDelta { .. }
        )
    }

    /// Does this event end the stream (success or in-band error)?
    pub fn is_terminal(&self) -> bool {
        matches!(self, StreamEvent::Done { .. } | StreamEvent::Error(_))
    }
}

/// The stateful interpreter of one stream.
#[derive(Debug, Clone)]
pub struct Interpreter {
    provider: Provider,
    usage: Option<Usage>,
    content_delivered: bool,
    /// Bytes of generated text seen (see [`Interpreter::delivered_text_bytes`]).
    text_bytes: u64,
}

impl Interpreter {
    /// An interpreter for one stream from `provider`.
    pub fn new(provider: Provider) -> Self {
        Interpreter {
            provider,
            usage: None,
            content_delivered: false,
            text_bytes: 0,
        }
    }

    /// The provider whose rules apply.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// The usage reported so far (cumulative), if any.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// Whether any content event was interpreted.
    pub fn content_delivered(&self) -> bool {
        self.content_delivered
    }

    /// UTF-8 bytes of generated content seen so far: text, tool-call
    /// arguments (`input_json_delta`, `tool_calls[].function.arguments`),
    /// thinking and refusals — what the model produced, as the caller got
    /// it. A stream cut before its usage arrives is charged from this count
    /// (see [`crate::cut_stream_usage`]): the provider bills what it
    /// generated, and the usage so far (Anthropic's `message_start` says 1
    /// output token) lags far behind. A counter only; nothing is kept.
    ///
    /// `None` for a provider whose events are not interpreted
    /// ([`Provider::Generic`]): its content is not known, not empty.
    pub fn delivered_text_bytes(&self) -> Option<u64> {
        match self.provider.dialect() {
            Provider::Anthropic | Provider::Openai | Provider::Gemini => Some(self.text_bytes),
            _ => None,
        }
    }

    fn count_text(&mut self, text: Option<&str>) {
        if let Some(t) = text {
            self.text_bytes = self.text_bytes.saturating_add(t.len() as u64);
        }
    }

    /// Interprets one SSE event.
    pub fn interpret(&mut self, event: SseEvent) -> StreamEvent {
        let typed = match self.provider.dialect() {
            Provider::Anthropic => self.anthropic(event),
            Provider::Openai => self.openai(event),
            Provider::Gemini => self.gemini(event),
            // `Generic` and any provider added later: no typed reading.
            _ => other(event),
        };
        if typed.is_content() {
            self.content_delivered = true;
        }
        typed
    }

    fn anthropic(&mut self, event: SseEvent) -> StreamEvent {
        let Ok(v) = serde_json::from_str::<Value>(&event.data) else {
            return other(event);
        };
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(&event.event);
        match kind {
            "message_start" => {
                let usage = v
                    .get("message")
                    .and_then(|m| m.get("usage"))
                    .and_then(usage_from_value);
                if usage.is_some() {
                    self.usage = usage;
                }
                StreamEvent::MessageStart { usage }
            }
            "content_block_start" => StreamEvent::ContentBlockStart { index: index(&v) },
            "content_block_delta" => {
                let delta = v.get("delta");
                // Generated content of every kind; `signature_delta` (an
                // opaque checksum of thinking) and citations are not text
                // the model wrote.
                for field in ["text", "partial_json", "thinking"] {
                    self.count_text(delta.and_then(|d| d.get(field)).and_then(Value::as_str));
                }
                let delta_type = delta
                    .and_then(|d| d.get("type"))
                    .and_then(Value::as_str)
                    .unwrap_or("delta");
                match (
                    delta_type,
                    delta.and_then(|d| d.get("text")).and_then(Value::as_str),
                ) {
                    ("text_delta", Some(text)) => StreamEvent::TextDelta {
                        index: index(&v),
                        text: text.to_owned(),
                    },
                    _ => StreamEvent::ContentDelta {
                        index: index(&v),
                        kind: clip(delta_type, MAX_ERROR_FIELD_CHARS),
                    },
                }
            }
            "content_block_stop" => StreamEvent::ContentBlockStop { index: index(&v) },
            "message_delta" => match v.get("usage") {
                Some(Value::Object(fields)) => {
                    let mut usage = self.usage.unwrap_or_default();
                    let set = |slot: &mut u64, key: &str| {
                        if let Some(n) = fields.get(key).and_then(Value::as_u64) {
                            *slot = n;
                        }
                    };
                    set(&mut usage.input_tokens, "input_tokens");
                    set(&mut usage.output_tokens, "output_tokens");
                    set(
                        &mut usage.cache_creation_input_tokens,
                        "cache_creation_input_tokens",
                    );
                    set(
                        &mut usage.cache_read_input_tokens,
                        "cache_read_input_tokens",
                    );
                    self.usage = Some(usage);
                    StreamEvent::UsageUpdate(usage)
                }
                _ => other(event),
            },
            "message_stop" => StreamEvent::Done { usage: self.usage },
            "ping" => StreamEvent::Ping,
            "error" => {
                let err = v.get("error");
                let code = err
                    .and_then(|e| e.get("details"))
                    .and_then(|d| d.get("error_code"));
                self.error(
                    err.and_then(|e| e.get("type")),
                    code,
                    err.and_then(|e| e.get("message")),
                )
            }
            _ => other(event),
        }
    }

    fn openai(&mut self, event: SseEvent) -> StreamEvent {
        if event.data.trim() == "[DONE]" {
            return StreamEvent::Done { usage: self.usage };
        }
        let Ok(v) = serde_json::from_str::<Value>(&event.data) else {
            return other(event);
        };
        match v.get("type").and_then(Value::as_str) {
            Some(kind) => self.openai_responses(kind, &v, event),
            None => self.openai_chat(&v, event),
        }
    }

    fn openai_chat(&mut self, v: &Value, event: SseEvent) -> StreamEvent {
        if let Some(err) = v.get("error").filter(|e| e.is_object()) {
            return self.error(err.get("type"), err.get("code"), err.get("message"));
        }
        let usage = v.get("usage").and_then(usage_from_value);
        if usage.is_some() {
            self.usage = usage;
        }
        let choices = v.get("choices").and_then(Value::as_array);
        // Every choice's content counts (n > 1 is billed for each), not
        // only the one the typed event names.
        for delta in choices.into_iter().flatten().filter_map(|c| c.get("delta")) {
            self.count_text(delta.get("content").and_then(Value::as_str));
            self.count_text(delta.get("refusal").and_then(Value::as_str));
            self.count_text(
                delta
                    .get("function_call")
                    .and_then(|f| f.get("arguments"))
                    .and_then(Value::as_str),
            );
            for call in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                self.count_text(
                    call.get("function")
                        .and_then(|f| f.get("arguments"))
                        .and_then(Value::as_str),
                );
            }
        }
        let mut content: Option<StreamEvent> = None;
        for choice in choices.into_iter().flatten() {
            let Some(delta) = choice.get("delta") else {
                continue;
            };
            let at = index(choice);
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                if !text.is_empty() {
                    content = Some(StreamEvent::TextDelta {
                        index: at,
                        text: text.to_owned(),
                    });
                    break;
                }
            }
            if content.is_none() {
                for kind in ["tool_calls", "function_call", "refusal", "audio"] {
                    if delta.get(kind).is_some_and(|x| !x.is_null()) {
                        content = Some(StreamEvent::ContentDelta {
                            index: at,
                            kind: kind.to_owned(),
                        });
                        break;
                    }
                }
            }
        }
        match (content, usage) {
            (Some(c), _) => c,
            (None, Some(u)) => StreamEvent::UsageUpdate(u),
            (None, None) => other(event),
        }
    }

    fn openai_responses(&mut self, kind: &str, v: &Value, event: SseEvent) -> StreamEvent {
        // Text, refusal, function-call arguments, reasoning: every
        // `response.*.delta` carries its fragment in `delta`; audio's is
        // base64 sound, billed as audio tokens, not text.
        if kind.starts_with("response.")
            && kind.ends_with(".delta")
            && kind != "response.audio.delta"
        {
            self.count_text(v.get("delta").and_then(Value::as_str));
        }
        let response_usage = || {
            v.get("response")
                .and_then(|r| r.get("usage"))
                .and_then(usage_from_value)
        };
        match kind {
            "error" => {
                // Fields at the top level; tolerate a nested `error` too.
                let src = v.get("error").filter(|e| e.is_object()).unwrap_or(v);
                let error_type = src.get("type").filter(|t| t.as_str() != Some("error"));
                self.error(error_type, src.get("code"), src.get("message"))
            }
            "response.failed" => {
                if let Some(u) = response_usage() {
                    self.usage = Some(u);
                }
                let err = v.get("response").and_then(|r| r.get("error"));
                self.error(
                    err.and_then(|e| e.get("type")),
                    err.and_then(|e| e.get("code")),
                    err.and_then(|e| e.get("message")),
                )
            }
            "response.completed" | "response.incomplete" => {
                if let Some(u) = response_usage() {
                    self.usage = Some(u);
                }
                StreamEvent::Done { usage: self.usage }
            }
            "response.created" => {
                let usage = response_usage();
                if usage.is_some() {
                    self.usage = usage;
                }
                StreamEvent::MessageStart { usage }
            }
            "response.content_part.added" => StreamEvent::ContentBlockStart {
                index: content_index(v),
            },
            "response.content_part.done" => StreamEvent::ContentBlockStop {
                index: content_index(v),
            },
            "response.output_text.delta" => match v.get("delta").and_then(Value::as_str) {
                Some(text) => StreamEvent::TextDelta {
                    index: content_index(v),
                    text: text.to_owned(),
                },
                None => other(event),
            },
            k if k.starts_with("response.") && k.ends_with(".delta") => StreamEvent::ContentDelta {
                index: content_index(v),
                kind: clip(k, MAX_ERROR_FIELD_CHARS),
            },
            _ => other(event),
        }
    }

    fn error(
        &self,
        error_type: Option<&Value>,
        code: Option<&Value>,
        message: Option<&Value>,
    ) -> StreamEvent {
        let (error_type, code, message) = (as_str(error_type), as_str(code), as_str(message));
        let fields = ErrorFields {
            error_type,
            code,
            message,
        };
        let cause = cause_of_error(self.provider, fields).unwrap_or(Cause::Unknown);
        StreamEvent::Error(InBandError {
            cause,
            error_type: error_type.map(|t| clip(t, MAX_ERROR_FIELD_CHARS)),
            code: code.map(|c| clip(c, MAX_ERROR_FIELD_CHARS)),
            message: message.map(|m| clip(m, MAX_ERROR_MESSAGE_CHARS)),
        })
    }
}

fn as_str(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str)
}

fn other(event: SseEvent) -> StreamEvent {
    StreamEvent::Other {
        event: event.event,
        data: event.data,
    }
}

fn index(v: &Value) -> u64 {
    v.get("index").and_then(Value::as_u64).unwrap_or(0)
}

fn content_index(v: &Value) -> u64 {
    v.get("content_index").and_then(Value::as_u64).unwrap_or(0)
}

fn clip(s: &str, max_chars: usize) -> String {
    s.chars().take(max_chars).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sse(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: String::new(),
        }
    }

    #[test]
    fn anthropic_message_delta_overrides_present_fields_only() {
        let mut i = Interpreter::new(Provider::Anthropic);
        i.interpret(sse(
            "message_start",
            r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":1}}}"#,
        ));
        let ev = i.interpret(sse(
            "message_delta",
            r#"{"type":"message_delta","usage":{"output_tokens":7,"input_tokens":12}}"#,
        ));
        let expect = Usage {
            input_tokens: 12,
            output_tokens: 7,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 5,
        };
        assert_eq!(ev, StreamEvent::UsageUpdate(expect));
        let done = i.interpret(sse("message_stop", r#"{"type":"message_stop"}"#));
        assert_eq!(
            done,
            StreamEvent::Done {
                usage: Some(expect)
            }
        );
    }

    #[test]
    fn anthropic_non_text_delta_is_content() {
        let mut i = Interpreter::new(Provider::Anthropic);
        let ev = i.interpret(sse(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a"}}"#,
        ));
        assert_eq!(
            ev,
            StreamEvent::ContentDelta {
                index: 1,
                kind: "input_json_delta".into()
            }
        );
        assert!(i.content_delivered());
    }

    #[test]
    fn anthropic_spend_cap_in_band() {
        let mut i = Interpreter::new(Provider::Anthropic);
        let ev = i.interpret(sse(
            "error",
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"x","details":{"error_code":"enforced_spend_limit_reached"}}}"#,
        ));
        let StreamEvent::Error(e) = ev else { panic!() };
        assert_eq!(e.cause, Cause::SpendCap);
    }

    #[test]
    fn unknown_error_type_is_unknown_and_unknown_events_pass_through() {
        let mut i = Interpreter::new(Provider::Anthropic);
        let StreamEvent::Error(e) = i.interpret(sse(
            "error",
            r#"{"type":"error","error":{"type":"brand_new_error"}}"#,
        )) else {
            panic!()
        };
        assert_eq!(e.cause, Cause::Unknown);
        assert_eq!(e.error_type.as_deref(), Some("brand_new_error"));
        let ev = i.interpret(sse("future_thing", r#"{"type":"future_thing"}"#));
        assert!(matches!(ev, StreamEvent::Other { ref event, .. } if event == "future_thing"));
        let ev = i.interpret(sse("message", "not json"));
        assert!(matches!(ev, StreamEvent::Other { .. }));
    }

    #[test]
    fn openai_chat_tool_call_delta_and_cached_usage() {
        let mut i = Interpreter::new(Provider::Openai);
        let ev = i.interpret(sse(
            "message",
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}"#,
        ));
        assert!(ev.is_content());
        let ev = i.interpret(sse(
            "message",
            r#"{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":60}}}"#,
        ));
        let StreamEvent::UsageUpdate(u) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(
            (u.input_tokens, u.cache_read_input_tokens, u.output_tokens),
            (40, 60, 3)
        );
        assert_eq!(
            i.interpret(sse("message", " [DONE]")),
            StreamEvent::Done { usage: Some(u) }
        );
    }

    #[test]
    fn openai_responses_completed_usage() {
        let mut i = Interpreter::new(Provider::Openai);
        let ev = i.interpret(sse(
            "response.completed",
            r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":50,"input_tokens_details":{"cached_tokens":20},"output_tokens":9}}}"#,
        ));
        let StreamEvent::Done { usage: Some(u) } = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(
            (u.input_tokens, u.cache_read_input_tokens, u.output_tokens),
            (30, 20, 9)
        );
    }

    #[test]
    fn generic_interprets_nothing() {
        let mut i = Interpreter::new(Provider::Generic);
        let ev = i.interpret(sse("message", "[DONE]"));
        assert!(matches!(ev, StreamEvent::Other { .. }));
    }

    #[test]
    fn long_error_message_is_clipped() {
        let mut i = Interpreter::new(Provider::Openai);
        let msg = "x".repeat(10_000);
        let data = format!(r#"{{"error":{{"type":"server_error","message":"{msg}"}}}}"#);
        let StreamEvent::Error(e) = i.interpret(sse("message", &data)) else {
            panic!()
        };
        assert_eq!(e.message.unwrap().len(), MAX_ERROR_MESSAGE_CHARS);
        assert_eq!(e.cause, Cause::ServerError);
    }

    #[test]
    fn anthropic_counts_text_tool_json_and_thinking_bytes() {
        let mut i = Interpreter::new(Provider::Anthropic);
        for data in [
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm."}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"h\u00e9llo"}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":7}}"#,
        ] {
            i.interpret(sse("content_block_delta", data));
        }
        // "hmm." 4 + "héllo" 6 (é is 2 bytes) + `{"a"` 4; the signature
        // and a non-string text are not counted.
        assert_eq!(i.delivered_text_bytes(), Some(14));
    }

    #[test]
    fn openai_chat_counts_every_choice_and_tool_arguments() {
        let mut i = Interpreter::new(Provider::Openai);
        i.interpret(sse(
            "message",
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
        ));
        i.interpret(sse(
            "message",
            r#"{"choices":[{"index":0,"delta":{"content":"abc"}},{"index":1,"delta":{"content":"defg"}}]}"#,
        ));
        i.interpret(sse(
            "message",
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"x\":"}},{"index":1,"function":{"arguments":"1}"}}]}}]}"#,
        ));
        i.interpret(sse(
            "message",
            r#"{"choices":[{"index":0,"delta":{"refusal":"no"}}]}"#,
        ));
        assert_eq!(i.delivered_text_bytes(), Some(3 + 4 + 5 + 2 + 2));
    }

    #[test]
    fn openai_responses_counts_deltas_but_not_audio() {
        let mut i = Interpreter::new(Provider::Openai);
        for data in [
            r#"{"type":"response.output_text.delta","content_index":0,"delta":"Hello"}"#,
            r#"{"type":"response.function_call_arguments.delta","delta":"{}"}"#,
            r#"{"type":"response.reasoning_summary_text.delta","delta":"why"}"#,
            r#"{"type":"response.audio.delta","delta":"UklGRiQAAABXQVZF"}"#,
            r#"{"type":"response.output_text.done","text":"Hello"}"#,
        ] {
            i.interpret(sse("message", data));
        }
        assert_eq!(i.delivered_text_bytes(), Some(5 + 2 + 3));
    }

    #[test]
    fn generic_delivered_text_is_unknown() {
        let mut i = Interpreter::new(Provider::Generic);
        i.interpret(sse(
            "message",
            r#"{"choices":[{"delta":{"content":"abc"}}]}"#,
        ));
        assert_eq!(i.delivered_text_bytes(), None);
    }
}
