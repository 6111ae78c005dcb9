//! The results: one line per ended job, in the provider's own batch
//! result format, with a `ratewise` object beside it.
//!
//! | state | OpenAI result line | Anthropic `result.type` |
//! |---|---|---|
//! | done | `response.status_code` 200, `body` | `succeeded` |
//! | failed | the provider's status and body | `errored` (the provider's error) |
//! | held_unknown | `error.code` `outcome_unknown` | `errored`, `outcome_unknown` |
//! | stopped | `error.code` `stopped` + the cause | `canceled` |
//! | expired | `error.code` `batch_expired` | `expired` |
//! | pending (an unfinished run) | `error.code` `unfinished` | `result` null |
//!
//! A run that did not finish (a signal, a stop, a store that could not be
//! written) still writes a line for every job: an unfinished job's line
//! has `ratewise.outcome` `pending` and no result. An OpenAI line's `id` is
//! `batch_req_<n>`, as the Batch API's output names its lines.
//!
//! The OpenAI line follows the [Batch API's output
//! format](https://platform.openai.com/docs/guides/batch) (`id`,
//! `custom_id`, `response` with `status_code`, `request_id`, `body`, and
//! `error`); the Anthropic line the [Message Batches
//! results](https://docs.anthropic.com/en/api/retrieving-message-batch-results)
//! (`custom_id`, `result.type`, `result.message` / `result.error`).

use crate::input::Shape;
use crate::store::{Ended, State};
use serde_json::{json, Value};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// The body as JSON when it is JSON, else as a string (a proxy's HTML
/// page), never lost.
fn body_value(body: Option<&[u8]>) -> Value {
    match body {
        None => Value::Null,
        Some(b) => serde_json::from_slice(b)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(b).into_owned())),
    }
}

/// The `ratewise` object of a line: outcome, cause, attempts (allow-listed
/// records: send time, status, request id, cause), usage, waits.
fn ratewise_object(e: &Ended) -> Value {
    let attempts: Value = serde_json::from_str(&e.attempts).unwrap_or(Value::Array(Vec::new()));
    let mut o = json!({
        "outcome": e.state.as_str(),
        "cause": e.cause,
        "sends": e.sends,
        "attempts": attempts,
        "usage": e.usage.map(|(i, o)| json!({"input_tokens": i, "output_tokens": o})),
        "charged_tokens": e.charged,
        "waited_ms": e.waited_ms,
    });
    if e.double_spend {
        o["possible_double_spend"] = Value::Bool(true);
    }
    if let Some(m) = &e.message {
        o["message"] = Value::String(m.clone());
    }
    o
}

/// One output line (no newline) of a job of the direct path
/// (`ratewise.price_basis` `"direct"`).
pub fn line(shape: Shape, e: &Ended) -> String {
    line_with_batch(shape, e, None)
}

/// One output line (no newline); `batch` names the provider's batch the
/// result came from (`crate::batch`): `ratewise.batch_id`,
/// `ratewise.price_basis` `"batch"`, and an OpenAI line keeps the
/// provider's `batch_req_…` id.
pub fn line_with_batch(shape: Shape, e: &Ended, batch: Option<&crate::store::BatchRef>) -> String {
    let mut rw = ratewise_object(e);
    rw["price_basis"] = Value::String(if batch.is_some() { "batch" } else { "direct" }.into());
    if let Some(b) = batch {
        rw["batch_id"] = b.batch_id.clone().map_or(Value::Null, Value::String);
    }
    let message = e.message.clone().unwrap_or_default();
    let v = match shape {
        Shape::OpenAi => {
            let (response, error) = match e.state {
                State::Done | State::Failed if e.status.is_some() => (
                    json!({
                        "status_code": e.status,
                        "request_id": e.request_id,
                        "body": body_value(e.response.as_deref()),
                    }),
                    Value::Null,
                ),
                State::Done | State::Failed => {
                    (Value::Null, json!({"code": "failed", "message": message}))
                }
                State::HeldUnknown => (
                    Value::Null,
                    json!({"code": "outcome_unknown", "message": message}),
                ),
                State::Stopped => (
                    Value::Null,
                    json!({"code": "stopped", "cause": e.cause, "message": message}),
                ),
                State::Expired => (
                    Value::Null,
                    json!({"code": "batch_expired", "message": message}),
                ),
                State::Pending | State::Sending | State::Batched => (
                    Value::Null,
                    json!({"code": "unfinished", "message": "not finished: run the same command again to resume"}),
                ),
            };
            let id = match batch.and_then(|b| b.result_id.clone()) {
                Some(id) => id,
                None => format!("batch_req_{}", e.seq),
            };
            json!({
                "id": id,
                "custom_id": e.custom_id,
                "response": response,
                "error": error,
                "ratewise": rw,
            })
        }
        Shape::Anthropic => {
            let result = match e.state {
                State::Done => {
                    json!({"type": "succeeded", "message": body_value(e.response.as_deref())})
                }
                State::Failed => {
                    let body = body_value(e.response.as_deref());
                    let error = if body.get("type").and_then(Value::as_str) == Some("error") {
                        body
                    } else {
                        json!({"type": "error", "error": {"type": "api_error", "message": message, "status": e.status, "body": body}})
                    };
                    json!({"type": "errored", "error": error})
                }
                State::HeldUnknown => {
                    json!({"type": "errored", "error": {"type": "error", "error": {"type": "outcome_unknown", "message": message}}})
                }
                State::Stopped => json!({"type": "canceled"}),
                State::Expired => json!({"type": "expired"}),
                State::Pending | State::Sending | State::Batched => Value::Null,
            };
            json!({"custom_id": e.custom_id, "result": result, "ratewise": rw})
        }
    };
    v.to_string()
}

/// The `.partial` file beside `out`: results appended as jobs end.
pub fn partial_path(out: &Path) -> PathBuf {
    let mut name = out.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

/// Appends each ended job's line as it ends: a reader sees results before
/// the run ends. The final file is written from the store, not from this.
pub struct Partial {
    file: BufWriter<File>,
}

impl Partial {
    /// Opens `path` for appending.
    pub fn open(path: &Path) -> io::Result<Partial> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Partial {
            file: BufWriter::new(file),
        })
    }

    /// One line.
    pub fn push(&mut self, line: &str) -> io::Result<()> {
        self.file.write_all(line.as_bytes())?;
        self.file.write_all(b"\n")
    }

    /// Writes out what is buffered.
    pub fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Writes the result file `out` from the store: every job in input order,
/// one line per `custom_id` (a job not ended as unfinished), a batch's
/// with its `batch_id` and `price_basis` `"batch"` ([`line_with_batch`]).
/// The lines written and, of them, the jobs not ended.
pub fn write_results(store: &dyn crate::Store, shape: Shape, out: &Path) -> io::Result<(u64, u64)> {
    let mut unfinished = 0u64;
    let written = write_final(out, |emit| {
        store
            .each_job_with_batch(&mut |e, b| {
                if !e.state.is_end() {
                    unfinished += 1;
                }
                emit(&line_with_batch(shape, &e, b.as_ref()))
            })
            .map_err(io::Error::other)
    })?;
    Ok((written, unfinished))
}

/// Writes the whole result file from `each` (every ended job in input
/// order) to a temporary file beside `out`, synced, then renamed over it:
/// a reader sees the old file or the new, never half of one.
pub fn write_final(
    out: &Path,
    each: impl FnOnce(&mut dyn FnMut(&str) -> io::Result<()>) -> io::Result<()>,
) -> io::Result<u64> {
    let mut tmp_name = out.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    let mut w = BufWriter::new(File::create(&tmp)?);
    let mut n = 0u64;
    each(&mut |l: &str| {
        n += 1;
        w.write_all(l.as_bytes())?;
        w.write_all(b"\n")
    })?;
    let f = w.into_inner().map_err(|e| e.into_error())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, out)?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(state: State) -> Ended {
        Ended {
            seq: 3,
            custom_id: "c-3".into(),
            state,
            status: Some(400),
            request_id: Some("req_1".into()),
            response: Some(bytes::Bytes::from_static(
                br#"{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}"#,
            )),
            cause: Some("invalid_request".into()),
            message: Some("the request must change".into()),
            attempts: "[]".into(),
            usage: None,
            charged: 0,
            sends: 1,
            double_spend: false,
            waited_ms: 0,
        }
    }

    #[test]
    fn each_state_lands_where_the_table_says() {
        let get =
            |shape, state| -> Value { serde_json::from_str(&line(shape, &ended(state))).unwrap() };
        let f = get(Shape::OpenAi, State::Failed);
        assert_eq!(f["response"]["status_code"], 400);
        assert_eq!(f["response"]["body"]["error"]["message"], "bad");
        assert_eq!(
            get(Shape::OpenAi, State::HeldUnknown)["error"]["code"],
            "outcome_unknown"
        );
        assert_eq!(
            get(Shape::OpenAi, State::Stopped)["error"]["code"],
            "stopped"
        );
        assert_eq!(
            get(Shape::OpenAi, State::Expired)["error"]["code"],
            "batch_expired"
        );
        assert_eq!(
            get(Shape::Anthropic, State::Failed)["result"]["type"],
            "errored"
        );
        assert_eq!(
            get(Shape::Anthropic, State::Failed)["result"]["error"]["error"]["message"],
            "bad"
        );
        let held = get(Shape::Anthropic, State::HeldUnknown);
        assert_eq!(held["result"]["error"]["error"]["type"], "outcome_unknown");
        assert_eq!(
            get(Shape::Anthropic, State::Stopped)["result"]["type"],
            "canceled"
        );
        assert_eq!(
            get(Shape::Anthropic, State::Expired)["result"]["type"],
            "expired"
        );
        assert_eq!(
            get(Shape::Anthropic, State::Expired)["ratewise"]["outcome"],
            "expired"
        );
    }

    #[test]
    fn a_batch_result_names_its_batch_and_price_basis() {
        let direct: Value =
            serde_json::from_str(&line(Shape::OpenAi, &ended(State::Done))).unwrap();
        assert_eq!(direct["ratewise"]["price_basis"], "direct");
        assert_eq!(direct["id"], "batch_req_3");
        let b = crate::store::BatchRef {
            batch_id: Some("batch_1".into()),
            result_id: Some("batch_req_9".into()),
        };
        for shape in [Shape::OpenAi, Shape::Anthropic] {
            let v: Value =
                serde_json::from_str(&line_with_batch(shape, &ended(State::Done), Some(&b)))
                    .unwrap();
            assert_eq!(v["ratewise"]["price_basis"], "batch");
            assert_eq!(v["ratewise"]["batch_id"], "batch_1");
            if shape == Shape::OpenAi {
                assert_eq!(v["id"], "batch_req_9");
            }
        }
    }

    #[test]
    fn a_body_that_is_not_json_is_kept_as_text() {
        let mut e = ended(State::Failed);
        e.response = Some(bytes::Bytes::from_static(b"<html>bad gateway</html>"));
        let v: Value = serde_json::from_str(&line(Shape::OpenAi, &e)).unwrap();
        assert_eq!(v["response"]["body"], "<html>bad gateway</html>");
    }
}
