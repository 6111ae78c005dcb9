//! A stop's evidence: what answering a stopped key needs, kept where it
//! outlives this process — the journal's `stop` line and, with `--redis`,
//! a note beside the key's shared record — so the same process after a
//! restart, and every replica, gives the same typed answer with the
//! original `since`.
//!
//! What is kept is the provider's status, its error `type` and `code` and
//! a message bounded at [`MAX_MESSAGE`] bytes (the provider's own words
//! about the key, never anything from the request), with the cause, since
//! and until. The answer is rebuilt in the caller's provider's JSON shape
//! ([`Evidence::render`]), so an official SDK raises the same typed
//! exception (Anthropic's `details.error_code`, OpenAI's `code`) whichever
//! process answers. What is read back (a journal on disk, a Redis value
//! anyone could write) is bounded again before use.
//!
//! An operator's stop (`POST /stop`) is kept with `operator: true`: its
//! answer says an operator stopped the key. Its cause in the admission
//! record stays `user_limit`: a new cause word in the shared record would
//! make a replica of an older version unable to read the record at all,
//! while an unknown field here is ignored by one.

use axum::body::Body;
use axum::response::Response;
use http::{HeaderValue, StatusCode};
use ratewise_core::{Cause, Provider};
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime};

/// The longest message kept, in bytes.
pub const MAX_MESSAGE: usize = 1024;

/// The longest error type or code kept (longer ones are dropped).
const MAX_WORD: usize = 64;

/// The longest serialized evidence read back (a Redis note, say).
pub const MAX_RECORD: usize = 4096;

/// The provider's answer that stopped a key, as far as answering needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderAnswer {
    /// Its HTTP status (4xx or 5xx).
    pub status: u16,
    /// Its error `type` (`rate_limit_error`, `insufficient_quota`…).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    /// Its error code (Anthropic's `details.error_code`, OpenAI's `code`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Its message, at most [`MAX_MESSAGE`] bytes.
    #[serde(default)]
    pub message: String,
    /// The request id its body carried (Anthropic's `request_id`): the
    /// provider's name for the request that met the stop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl ProviderAnswer {
    /// Reads an error answer's `type`, `code` and `message` from its JSON
    /// body (either provider's shape); `None` for a status that is not an
    /// error.
    pub fn parse(status: StatusCode, body: &[u8]) -> Option<ProviderAnswer> {
        let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        let err = &v["error"];
        let text = |v: &serde_json::Value| v.as_str().map(str::to_owned);
        ProviderAnswer {
            status: status.as_u16(),
            error_type: text(&err["type"]),
            code: text(&err["code"]).or_else(|| text(&err["details"]["error_code"])),
            message: text(&err["message"]).unwrap_or_default(),
            request_id: text(&v["request_id"]),
        }
        .bounded()
    }

    /// The same within bounds: a status that is not 4xx/5xx is refused,
    /// a type or code that is long or not a plain word is dropped, the
    /// message is cut at [`MAX_MESSAGE`] bytes and loses control
    /// characters.
    pub fn bounded(mut self) -> Option<ProviderAnswer> {
        if !(400..=599).contains(&self.status) {
            return None;
        }
        let word = |w: Option<String>| {
            w.filter(|w| {
                !w.is_empty()
                    && w.len() <= MAX_WORD
                    && w.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
            })
        };
        self.error_type = word(self.error_type);
        self.code = word(self.code);
        self.request_id = word(self.request_id);
        let mut m: String = scrub(&self.message)
            .chars()
            .filter(|c| !c.is_control())
            .collect();
        if m.len() > MAX_MESSAGE {
            let mut cut = MAX_MESSAGE;
            while !m.is_char_boundary(cut) {
                cut -= 1;
            }
            m.truncate(cut);
        }
        self.message = m;
        Some(self)
    }
}

/// The message with anything that may be a credential replaced by
/// `[redacted]`: a word starting `sk-` (either provider's keys), or a run
/// of 20 or more letters, digits, `-` and `_` with both letters and digits
/// (a token, a key echoed whole). A provider that echoes a caller's key in
/// its error (OpenAI masks all but its ends) leaves nothing of it kept.
fn scrub(message: &str) -> String {
    let secretish = |w: &str| {
        let core = w.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_');
        core.starts_with("sk-")
            || core
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
                .any(|run| {
                    run.len() >= 20
                        && run.bytes().any(|b| b.is_ascii_digit())
                        && run.bytes().any(|b| b.is_ascii_alphabetic())
                })
    };
    message
        .split(' ')
        .map(|w| if secretish(w) { "[redacted]" } else { w })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why a key is stopped and what its jobs are answered; see the
/// [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    /// The cause (the admission record's).
    pub cause: Cause,
    /// Stopped by an operator (`POST /stop`).
    pub operator: bool,
    /// When the key stopped.
    pub since: SystemTime,
    /// When the stop lifts by itself, if it does.
    pub until: Option<SystemTime>,
    /// The provider's answer that stopped it, when one did.
    pub answer: Option<ProviderAnswer>,
    /// Not the stop's own evidence (a replica found the key stopped before
    /// the evidence was readable): looked for again, never written.
    pub provisional: bool,
    /// The provider's answer as it came (body, content type), in the
    /// process that received it: replayed byte for byte there. Never
    /// written; elsewhere the answer is rebuilt from `answer`.
    pub raw: Option<(bytes::Bytes, Option<HeaderValue>)>,
    /// When the shared evidence was last read for it (with `--redis`).
    pub checked: Option<std::time::Instant>,
}

/// [`Evidence`] as written (a Redis note); times in Unix milliseconds.
/// Every field but the cause has a default, so a shorter record reads.
#[derive(Debug, Serialize, Deserialize)]
struct Wire {
    cause: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    operator: bool,
    #[serde(default)]
    since_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    until_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    answer: Option<ProviderAnswer>,
}

/// Unix milliseconds.
pub fn ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Unix milliseconds as a time.
pub fn at(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

impl Evidence {
    /// A stop with no provider answer (one read back from an old journal
    /// line, or found in the shared record without its evidence).
    pub fn bare(cause: Cause, since: SystemTime, until: Option<SystemTime>) -> Evidence {
        Evidence {
            cause,
            operator: false,
            since,
            until,
            answer: None,
            provisional: false,
            raw: None,
            checked: None,
        }
    }

    /// An operator's stop, until resumed.
    pub fn operator(since: SystemTime) -> Evidence {
        Evidence {
            operator: true,
            ..Evidence::bare(Cause::UserLimit, since, None)
        }
    }

    /// The stop a provider's answer (`status`, `body`) caused.
    pub fn of_answer(
        cause: Cause,
        status: Option<StatusCode>,
        body: Option<&[u8]>,
        since: SystemTime,
        until: Option<SystemTime>,
    ) -> Evidence {
        Evidence {
            answer: status.and_then(|s| ProviderAnswer::parse(s, body.unwrap_or_default())),
            ..Evidence::bare(cause, since, until)
        }
    }

    /// The cause as `/status` and the logs name it: `operator` for an
    /// operator's stop.
    pub fn cause_word(&self) -> &'static str {
        if self.operator {
            "operator"
        } else {
            self.cause.as_str()
        }
    }

    /// As JSON, for a Redis note.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&Wire {
            cause: self.cause.as_str().to_owned(),
            operator: self.operator,
            since_ms: ms(self.since),
            until_ms: self.until.map(ms),
            answer: self.answer.clone(),
        })
        .unwrap_or_default()
    }

    /// Read back from JSON (untrusted: bounded, an unknown cause is
    /// `unknown`).
    pub fn from_json(text: &str) -> Option<Evidence> {
        if text.len() > MAX_RECORD {
            return None;
        }
        let w: Wire = serde_json::from_str(text).ok()?;
        Some(Evidence {
            cause: Cause::from_word(&w.cause).unwrap_or(Cause::Unknown),
            operator: w.operator,
            since: at(w.since_ms),
            until: w.until_ms.map(at),
            answer: w.answer.and_then(ProviderAnswer::bounded),
            provisional: false,
            raw: None,
            checked: None,
        })
    }

    /// The answer for a job that finds the key stopped, in `provider`'s
    /// shape: the provider's own status, type, code and message when a
    /// provider answer stopped it; else one for the cause (an operator's
    /// says so). `retry-after` when the stop lifts by itself.
    pub fn render(&self, provider: Provider) -> Response {
        if let (Some((body, ct)), Some(a)) = (&self.raw, &self.answer) {
            let mut r = Response::new(Body::from(body.clone()));
            *r.status_mut() =
                StatusCode::from_u16(a.status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
            if let Some(ct) = ct {
                r.headers_mut()
                    .insert(http::header::CONTENT_TYPE, ct.clone());
            }
            return r;
        }
        let request_id = self.answer.as_ref().and_then(|a| a.request_id.clone());
        let (status, kind, code, message) = match &self.answer {
            Some(a) => (
                StatusCode::from_u16(a.status).unwrap_or(StatusCode::TOO_MANY_REQUESTS),
                a.error_type.clone().unwrap_or_else(|| "api_error".into()),
                a.code.clone(),
                a.message.clone(),
            ),
            None if self.operator => (
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error".into(),
                Some("ratewise_operator_stop".into()),
                format!(
                    "ratewise: an operator stopped sending with this key (admin POST /stop) at {}; nothing was sent; it resumes when an operator resumes it",
                    ratewise_core::time::format_rfc3339(self.since)
                ),
            ),
            None => return Response::new(Body::empty()),
        };
        let body = match provider.dialect() {
            Provider::Openai => serde_json::json!({
                "error": {"message": message, "type": kind, "param": null, "code": code},
            }),
            Provider::Gemini => crate::answer::google_error(status, &message),
            _ => {
                let mut err = serde_json::json!({"type": kind, "message": message});
                if let Some(c) = &code {
                    err["details"] = serde_json::json!({"error_code": c});
                }
                let mut v = serde_json::json!({"type": "error", "error": err});
                if let Some(id) = request_id {
                    v["request_id"] = id.into();
                }
                v
            }
        };
        let mut r = Response::new(Body::from(body.to_string()));
        *r.status_mut() = status;
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    }

    /// Whether `other` is the same stop (cause, since, operator, answer).
    pub fn same_stop(&self, other: &Evidence) -> bool {
        self.cause == other.cause
            && ms(self.since) == ms(other.since)
            && self.operator == other.operator
            && self.answer == other.answer
    }

    /// Whether [`render`](Self::render) has an answer of its own (else the
    /// caller answers for the cause).
    pub fn renders(&self) -> bool {
        self.answer.is_some() || self.operator
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANTHROPIC_CAP: &str = r#"{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your API usage limits.","details":{"error_code":"enforced_spend_limit_reached"}},"request_id":"req_1"}"#;

    #[test]
    fn a_providers_answer_is_kept_and_rendered_in_its_shape() {
        let since = at(1_796_000_000_000);
        let e = Evidence::of_answer(
            Cause::SpendCap,
            Some(StatusCode::TOO_MANY_REQUESTS),
            Some(ANTHROPIC_CAP.as_bytes()),
            since,
            None,
        );
        let a = e.answer.clone().unwrap();
        assert_eq!(a.error_type.as_deref(), Some("rate_limit_error"));
        assert_eq!(a.code.as_deref(), Some("enforced_spend_limit_reached"));
        assert_eq!(a.request_id.as_deref(), Some("req_1"));
        // Written and read back: the same.
        let back = Evidence::from_json(&e.to_json()).unwrap();
        assert_eq!(back, e);
        let oa = r#"{"error":{"message":"quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
        let o = ProviderAnswer::parse(StatusCode::TOO_MANY_REQUESTS, oa.as_bytes()).unwrap();
        assert_eq!(o.code.as_deref(), Some("insufficient_quota"));
    }

    #[test]
    fn what_is_read_back_is_bounded() {
        let long = "é".repeat(5000);
        let a = ProviderAnswer {
            status: 429,
            error_type: Some("bad type with spaces".into()),
            code: Some("x".repeat(65)),
            request_id: Some("req 1".into()),
            message: format!("line\nbreak{long}"),
        }
        .bounded()
        .unwrap();
        assert!(a.message.len() <= MAX_MESSAGE && !a.message.contains('\n'));
        assert_eq!((a.error_type, a.code, a.request_id), (None, None, None));
        assert!(ProviderAnswer {
            status: 200,
            error_type: None,
            code: None,
            message: String::new(),
            request_id: None,
        }
        .bounded()
        .is_none());
        assert!(Evidence::from_json(&"x".repeat(MAX_RECORD + 1)).is_none());
        // A key echoed by a provider is not kept.
        let echoed = ProviderAnswer {
            status: 401,
            error_type: Some("invalid_request_error".into()),
            code: Some("invalid_api_key".into()),
            request_id: None,
            message: "Incorrect API key provided: sk-proj-abcdEFGH1234secret. Or Bearer abcdefgh12345678ijklmnop.".into(),
        }
        .bounded()
        .unwrap();
        assert!(
            !echoed.message.contains("sk-") && !echoed.message.contains("12345678"),
            "{}",
            echoed.message
        );
        assert!(echoed
            .message
            .starts_with("Incorrect API key provided: [redacted]"));
        // Ordinary prose stays.
        let prose = "You will regain access on 2027-01-01 at 00:00 UTC. See https://platform.openai.com/docs/guides/error-codes/api-errors.";
        assert_eq!(scrub(prose), prose);
        assert!(
            Evidence::from_json("{\"cause\":\"no_such\"}")
                .unwrap()
                .cause
                == Cause::Unknown
        );
        assert!(Evidence::from_json("not json").is_none());
    }
}
