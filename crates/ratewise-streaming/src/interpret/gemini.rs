//! Gemini's `streamGenerateContent?alt=sse`: every event is one
//! `GenerateContentResponse` (ai.google.dev/api/generate-content): text in
//! `candidates[].content.parts[].text`, the usage so far in
//! `usageMetadata` (the last chunk's is the total), and the end marked by a
//! candidate's `finishReason` (or the prompt's `promptFeedback.blockReason`)
//! rather than a terminal event. An error is a `{"error": {..}}` payload in
//! Google's status model, read by the core's Gemini profile.

use super::{index, other, Interpreter, StreamEvent};
use crate::sse::SseEvent;
use ratewise_core::parse::body::usage_metadata_from_value;
use serde_json::Value;

impl Interpreter {
    pub(super) fn gemini(&mut self, event: SseEvent) -> StreamEvent {
        let Ok(v) = serde_json::from_str::<Value>(&event.data) else {
            return other(event);
        };
        if let Some(err) = v.get("error").filter(|e| e.is_object()) {
            // Google's status name stands in the type's place, as in the
            // core's reading of an error body.
            return self.error(err.get("status"), err.get("code"), err.get("message"));
        }
        let has_usage = match v.get("usageMetadata").and_then(usage_metadata_from_value) {
            Some(u) => {
                self.usage = Some(u);
                true
            }
            None => false,
        };
        let candidates = v.get("candidates").and_then(Value::as_array);
        let mut text: Option<(u64, String)> = None;
        let mut other_content = None;
        let mut finished = false;
        for candidate in candidates.into_iter().flatten() {
            finished |= candidate
                .get("finishReason")
                .and_then(Value::as_str)
                .is_some_and(|r| !r.is_empty() && r != "FINISH_REASON_UNSPECIFIED");
            let parts = candidate
                .get("content")
                .and_then(|c| c.get("parts"))
                .and_then(Value::as_array);
            for part in parts.into_iter().flatten() {
                // Thoughts (`thought: true`) are text the model wrote and
                // is billed for, like the answer.
                if let Some(t) = part.get("text").and_then(Value::as_str) {
                    self.count_text(Some(t));
                    if text.is_none() && !t.is_empty() {
                        text = Some((index(candidate), t.to_owned()));
                    }
                } else if let Some(call) = part.get("functionCall") {
                    self.count_text(call.get("args").map(|a| a.to_string()).as_deref());
                    other_content.get_or_insert(index(candidate));
                }
            }
        }
        let blocked = v
            .get("promptFeedback")
            .and_then(|f| f.get("blockReason"))
            .is_some();
        if finished || blocked {
            // The last chunk may carry text too: it counts as content.
            if text.is_some() || other_content.is_some() {
                self.content_delivered = true;
            }
            return StreamEvent::Done { usage: self.usage };
        }
        if let Some((index, text)) = text {
            return StreamEvent::TextDelta { index, text };
        }
        if let Some(index) = other_content {
            return StreamEvent::ContentDelta {
                index,
                kind: "functionCall".to_owned(),
            };
        }
        match self.usage {
            Some(u) if has_usage => StreamEvent::UsageUpdate(u),
            _ => other(event),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratewise_core::{Cause, Provider};

    fn ev(data: &str) -> SseEvent {
        SseEvent {
            event: "message".to_owned(),
            data: data.to_owned(),
            id: String::new(),
        }
    }

    #[test]
    fn text_then_the_last_chunk_with_the_usage_ends_the_answer() {
        let mut i = Interpreter::new(Provider::Gemini);
        let first = i.interpret(ev(
            r#"{"candidates":[{"content":{"parts":[{"text":"Hel"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":9,"totalTokenCount":9}}"#,
        ));
        assert_eq!(
            first,
            StreamEvent::TextDelta {
                index: 0,
                text: "Hel".into()
            }
        );
        let last = i.interpret(ev(
            r#"{"candidates":[{"content":{"parts":[{"text":"lo"}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":2,"thoughtsTokenCount":3,"totalTokenCount":14}}"#,
        ));
        let StreamEvent::Done { usage: Some(u) } = last else {
            panic!("{last:?}")
        };
        assert_eq!((u.input_tokens, u.output_tokens), (9, 5));
        assert!(i.content_delivered());
        assert_eq!(i.delivered_text_bytes(), Some(5));
    }

    #[test]
    fn an_error_payload_is_read_by_googles_status() {
        let mut i = Interpreter::new(Provider::Gemini);
        let e = i.interpret(ev(
            r#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}"#,
        ));
        let StreamEvent::Error(e) = e else {
            panic!("{e:?}")
        };
        assert_eq!(e.cause, Cause::Overloaded);
        assert_eq!(e.error_type.as_deref(), Some("UNAVAILABLE"));
    }

    #[test]
    fn garbage_and_empty_chunks_are_other_events() {
        let mut i = Interpreter::new(Provider::Gemini);
        assert!(matches!(
            i.interpret(ev("not json")),
            StreamEvent::Other { .. }
        ));
        assert!(matches!(i.interpret(ev("{}")), StreamEvent::Other { .. }));
        assert!(!i.content_delivered());
    }
}
