//! Result lines into job ends.
//!
//! * OpenAI output and error files
//!   (<https://platform.openai.com/docs/guides/batch>): `{"id":
//!   "batch_req_…", "custom_id", "response": {"status_code",
//!   "request_id", "body"}, "error": {"code", "message"}}`; an item not
//!   run before the window closed is in the error file with `error.code`
//!   `batch_expired`.
//! * Anthropic results
//!   (<https://docs.anthropic.com/en/api/retrieving-message-batch-results>):
//!   `{"custom_id", "result": {"type": "succeeded", "message"} |
//!   {"type": "errored", "error"} | {"type": "canceled"} | {"type":
//!   "expired"}}`.

use crate::input::Shape;
use crate::store::{End, State};
use bytes::Bytes;
use ratewise_core::parse::body::AnswerBody;
use serde::Deserialize;
use serde_json::value::RawValue;

/// How the provider ended one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    /// A 2xx answer.
    Succeeded,
    /// An error answer.
    Errored,
    /// Not run within the batch window.
    Expired,
    /// Canceled before it ran.
    Canceled,
}

/// One result line, read.
#[derive(Debug, Clone)]
pub struct ItemResult {
    /// The caller's id.
    pub custom_id: String,
    /// The provider's id of the line (OpenAI `batch_req_…`).
    pub result_id: Option<String>,
    /// How it ended.
    pub item: Item,
    /// The job's end (its charge is the caller's: see
    /// [`ItemResult::charge`]).
    pub end: End,
}

impl ItemResult {
    /// Sets the end's charge: the usage reported, or the job's worst case
    /// for a success that reported none; nothing for an item not run.
    pub fn charge(&mut self, worst_case: u64) {
        self.end.charged = match (self.item, self.end.usage) {
            (_, Some((i, o))) => i.saturating_add(o),
            (Item::Succeeded, None) => worst_case,
            _ => 0,
        };
    }
}

#[derive(Deserialize)]
struct OpenAiLine<'a> {
    #[serde(borrow)]
    id: Option<&'a str>,
    custom_id: String,
    response: Option<OpenAiResponse>,
    error: Option<OpenAiError>,
}

#[derive(Deserialize)]
struct OpenAiResponse {
    status_code: Option<u16>,
    request_id: Option<String>,
    /// Its usage is read here, with the line, by the core.
    body: Option<AnswerBody>,
}

#[derive(Deserialize)]
struct OpenAiError {
    code: Option<String>,
    message: Option<String>,
}

#[derive(Deserialize)]
struct AnthropicLine<'a> {
    custom_id: String,
    #[serde(borrow)]
    result: AnthropicResult<'a>,
}

#[derive(Deserialize)]
struct AnthropicResult<'a> {
    #[serde(rename = "type")]
    kind: String,
    /// Its usage is read here, with the line, by the core.
    message: Option<AnswerBody>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

/// The answer's bytes, as the result line held them.
fn bytes_of(body: &AnswerBody) -> Bytes {
    Bytes::copy_from_slice(body.as_bytes())
}

/// The end's usage — billed input (cache writes and reads included) and
/// output — as the core read it with the line; provider numbers saturate.
fn take_usage(end: &mut End, body: Option<&AnswerBody>) {
    end.usage = body
        .and_then(AnswerBody::usage)
        .map(|u| (u.billed_input(), u.output_tokens));
}

fn attempt(
    batch_id: &str,
    status: Option<u16>,
    request_id: Option<&str>,
    outcome: &str,
) -> serde_json::Value {
    serde_json::json!({
        "batch_id": batch_id,
        "status": status,
        "request_id": request_id,
        "cause": outcome,
        "action": "batch",
    })
}

/// Reads one result line of `shape` from batch `batch_id`; `None` for a
/// line that is not one.
pub fn parse(shape: Shape, batch_id: &str, line: &[u8]) -> Option<ItemResult> {
    match shape {
        Shape::OpenAi => parse_openai(batch_id, line),
        Shape::Anthropic => parse_anthropic(batch_id, line),
    }
}

fn parse_openai(batch_id: &str, line: &[u8]) -> Option<ItemResult> {
    let l: OpenAiLine<'_> = serde_json::from_slice(line).ok()?;
    let mut end = End::default();
    let item;
    if let Some(r) = l.response.as_ref().filter(|r| r.status_code.is_some()) {
        let status = r.status_code.unwrap_or(0);
        end.status = Some(status);
        end.request_id = r.request_id.clone();
        if (200..300).contains(&status) {
            item = Item::Succeeded;
            end.state = Some(State::Done);
            end.cause = Some("success".into());
            take_usage(&mut end, r.body.as_ref());
        } else {
            item = Item::Errored;
            end.state = Some(State::Failed);
            end.cause = Some("batch_errored".into());
            end.message = Some(format!("the batch answered this request {status}"));
        }
        end.response = r.body.as_ref().map(bytes_of);
    } else {
        let (code, message) = match &l.error {
            Some(e) => (e.code.clone(), e.message.clone()),
            None => (None, None),
        };
        if code.as_deref() == Some("batch_cancelled") {
            // Cancelled before it ran (a cancelled batch "will have partial
            // results (if any) available in the output file"; the rest
            // are named in the error file): not run, not billed.
            item = Item::Canceled;
            end.state = Some(State::Pending);
            end.cause = Some("batch_canceled".into());
        } else if code.as_deref() == Some("batch_expired") {
            item = Item::Expired;
            end.state = Some(State::Expired);
            end.cause = Some("batch_expired".into());
            end.message = Some(message.unwrap_or_else(|| "not run within the batch window".into()));
        } else {
            item = Item::Errored;
            end.state = Some(State::Failed);
            end.cause = Some("batch_errored".into());
            end.message = Some(format!(
                "{}: {}",
                code.as_deref().unwrap_or("error"),
                message
                    .as_deref()
                    .unwrap_or("the batch did not run this request")
            ));
            end.response = l.error.as_ref().map(|_| {
                let v = serde_json::json!({"error": {"code": code, "message": end.message}});
                Bytes::from(v.to_string())
            });
        }
    }
    end.attempts = vec![attempt(
        batch_id,
        end.status,
        end.request_id.as_deref(),
        end.cause.as_deref().unwrap_or(""),
    )];
    Some(ItemResult {
        custom_id: l.custom_id,
        result_id: l.id.map(str::to_owned),
        item,
        end,
    })
}

fn parse_anthropic(batch_id: &str, line: &[u8]) -> Option<ItemResult> {
    let l: AnthropicLine<'_> = serde_json::from_slice(line).ok()?;
    let mut end = End::default();
    let item = match l.result.kind.as_str() {
        "succeeded" => {
            end.state = Some(State::Done);
            end.status = Some(200);
            end.cause = Some("success".into());
            take_usage(&mut end, l.result.message.as_ref());
            end.response = l.result.message.as_ref().map(bytes_of);
            Item::Succeeded
        }
        "errored" => {
            let body = l
                .result
                .error
                .map(|m| Bytes::copy_from_slice(m.get().as_bytes()));
            let message = body
                .as_deref()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
                .and_then(|v| {
                    v.pointer("/error/message")
                        .or_else(|| v.get("message"))
                        .and_then(|m| m.as_str())
                        .map(|m| m.chars().take(1024).collect::<String>())
                });
            end.state = Some(State::Failed);
            end.cause = Some("batch_errored".into());
            end.message = Some(
                message.unwrap_or_else(|| "the batch answered this request with an error".into()),
            );
            end.response = body;
            Item::Errored
        }
        "expired" => {
            end.state = Some(State::Expired);
            end.cause = Some("batch_expired".into());
            end.message = Some("not run within the batch window".into());
            Item::Expired
        }
        "canceled" => {
            end.state = Some(State::Pending);
            end.cause = Some("batch_canceled".into());
            Item::Canceled
        }
        _ => return None,
    };
    end.attempts = vec![attempt(
        batch_id,
        end.status,
        None,
        end.cause.as_deref().unwrap_or(""),
    )];
    Some(ItemResult {
        custom_id: l.custom_id,
        result_id: None,
        item,
        end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_lines_of_both_files() {
        let ok = br#"{"id":"batch_req_1","custom_id":"a","response":{"status_code":200,"request_id":"r1","body":{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}},"error":null}"#;
        let r = parse(Shape::OpenAi, "batch_x", ok).unwrap();
        assert_eq!((r.item, r.end.usage), (Item::Succeeded, Some((7, 3))));
        assert_eq!(r.result_id.as_deref(), Some("batch_req_1"));
        let bad = br#"{"id":"batch_req_2","custom_id":"b","response":{"status_code":400,"request_id":"r2","body":{"error":{"message":"no"}}},"error":null}"#;
        let r = parse(Shape::OpenAi, "batch_x", bad).unwrap();
        assert_eq!((r.item, r.end.status), (Item::Errored, Some(400)));
        let exp = br#"{"id":"batch_req_3","custom_id":"c","response":null,"error":{"code":"batch_expired","message":"This request could not be executed before the completion window expired."}}"#;
        let r = parse(Shape::OpenAi, "batch_x", exp).unwrap();
        assert_eq!(r.end.state, Some(State::Expired));
        let can = br#"{"id":"batch_req_4","custom_id":"d","response":null,"error":{"code":"batch_cancelled","message":"cancelled"}}"#;
        let r = parse(Shape::OpenAi, "batch_x", can).unwrap();
        assert_eq!(
            (r.item, r.end.state),
            (Item::Canceled, Some(State::Pending))
        );
        assert!(parse(Shape::OpenAi, "batch_x", b"nonsense").is_none());
    }

    #[test]
    fn huge_provider_numbers_saturate_and_the_body_is_kept_as_it_was() {
        let line = format!(
            r#"{{"custom_id":"a","result":{{"type":"succeeded","message":{{"id":"m", "usage":{{"input_tokens":3,"cache_creation_input_tokens":{m},"cache_read_input_tokens":{m},"output_tokens":4}}}}}}}}"#,
            m = u64::MAX
        );
        let mut r = parse(Shape::Anthropic, "b", line.as_bytes()).unwrap();
        assert_eq!(r.end.usage, Some((u64::MAX, 4)));
        r.charge(10);
        assert_eq!(r.end.charged, u64::MAX);
        let body = r.end.response.as_deref().unwrap();
        assert!(body.starts_with(br#"{"id":"m", "usage""#));
        // An OpenAI line: the body's bytes as they were, its usage read once.
        let ok = br#"{"id":"x","custom_id":"b","response":{"status_code":200,"body":{"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":18446744073709551615}}}}"#;
        let mut r = parse(Shape::OpenAi, "b", ok).unwrap();
        assert_eq!(r.end.usage, Some((u64::MAX, u64::MAX)));
        r.charge(10);
        assert_eq!(r.end.charged, u64::MAX);
    }

    #[test]
    fn anthropic_result_types() {
        let types = [
            (
                r#"{"type":"succeeded","message":{"usage":{"input_tokens":4,"output_tokens":2}}}"#,
                Item::Succeeded,
                State::Done,
            ),
            (
                r#"{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}}"#,
                Item::Errored,
                State::Failed,
            ),
            (r#"{"type":"expired"}"#, Item::Expired, State::Expired),
            (r#"{"type":"canceled"}"#, Item::Canceled, State::Pending),
        ];
        for (result, item, state) in types {
            let line = format!(r#"{{"custom_id":"x","result":{result}}}"#);
            let r = parse(Shape::Anthropic, "msgbatch_1", line.as_bytes()).unwrap();
            assert_eq!((r.item, r.end.state), (item, Some(state)), "{result}");
        }
        let line = br#"{"custom_id":"x","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}}}"#;
        assert_eq!(
            parse(Shape::Anthropic, "m", line)
                .unwrap()
                .end
                .message
                .as_deref(),
            Some("bad")
        );
    }
}
