//! What a caller gets back when its job did not end in a success: always
//! in the provider's own error shape, so the SDK raises the typed error it
//! raises for the provider's own answer, with `x-should-retry: false` (the
//! proxy already retried what was worth retrying) and `x-ratewise-action`.
//!
//! * stopped (spend cap, billing, authentication): the provider's own
//!   answer for that cause — this job's, or the one that stopped the key
//!   ([`StopAnswers`]) — at once, nothing sent;
//! * deferred or shed: 429 with `retry-after` = when it may come back;
//! * given up on its deadline because the provider's own wait (a rate
//!   limit's or an overload's hint: Azure's "Please retry after 86400
//!   seconds") is longer than any deadline the proxy takes
//!   (`policy.max_deadline_ms`): no caller's timeout is what ran out; the
//!   provider said when, so the job is handed back for then — a 429 with
//!   that `retry-after` and `x-ratewise-action: defer` (DESIGN: "or
//!   `defer` when a caller's queue can take it back"), never a short retry;
//! * given up on its deadline otherwise: a 504 `timeout_error` naming the last cause
//!   seen and how long ago — or, when it could not be sent in time at all,
//!   when it could have gone (`x-ratewise-earliest`), with nothing sent and
//!   no `retry-after`;
//! * a request body over the bound: 413;
//! * anything else with an answer of its own (a 400, a retry budget spent):
//!   that answer, passed through.

use axum::body::Body;
use axum::response::Response;
use http::{HeaderMap, HeaderValue, StatusCode};
use ratewise_core::admit::Stop;
use ratewise_core::{ActionKind, Cause, GiveUpReason, Provider};
use ratewise_tower::Error;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

pub use crate::evidence::Evidence;

pub use ratewise_tower::ACTION_HEADER;

/// The evidence of each stopped key ([`Evidence`]), replayed to the jobs
/// that find the key stopped: the SDK gets the same typed error the
/// provider gave, from this process, after a restart, or on a replica.
///
/// Evidence beside the store's record, never a second flag: whether a
/// key is stopped, why and until when is the store's word (its
/// [`Stop`]); what is kept here is attached to what the store says
/// ([`beside`](Self::beside)), and has no expiry of its own. A job is
/// answered from it only once the store has said the key is stopped.
#[derive(Debug, Default)]
pub struct StopAnswers(Mutex<HashMap<String, Evidence>>);

/// Whether `e` ended on its own last answer's stop (rather than at an
/// admission that found the key stopped, carrying an earlier answer).
pub fn stopped_by_its_answer(e: &Error) -> bool {
    e.attempts()
        .last()
        .is_some_and(|r| r.action == ActionKind::StopQueue)
        && e.status().is_some()
}

impl StopAnswers {
    /// Keeps `ev` as `key`'s stop evidence (replacing any).
    pub fn keep(&self, key: &str, ev: Evidence) {
        self.lock().insert(key.to_owned(), ev);
    }

    /// Forgets `key`'s stop (resumed).
    pub fn forget(&self, key: &str) {
        let mut kept = self.lock();
        // Every send asks: with no evidence kept (nearly always), no hash.
        if !kept.is_empty() {
            kept.remove(key);
        }
    }

    /// The evidence kept for `key`, whatever the store says now: for a
    /// caller that has the store's word already (a job the store found
    /// stopped) or that only looks (whether the key was seen).
    pub fn get(&self, key: &str) -> Option<Evidence> {
        self.lock().get(key).cloned()
    }

    /// The evidence of the stop the store holds for `key` (`stop`, its
    /// record): kept for the same cause, else none (evidence of an
    /// earlier stop, lifted since, says nothing of this one). The stop's
    /// end is the record's, whatever the evidence said.
    pub fn beside(&self, key: &str, stop: &Stop) -> Option<Evidence> {
        let mut ev = self.get(key).filter(|e| e.cause == stop.cause)?;
        ev.until = stop.until;
        Some(ev)
    }

    /// The keys with evidence kept: the ones `/status` lists first (a
    /// listing's order, never whether a key is stopped).
    pub fn keys(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Evidence>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The answer for a job that ended in `e`, for a caller of `provider`'s
/// API, billed to `key`, by a proxy that waits a caller's timeout at most
/// `longest` (`policy.max_deadline_ms`). `upstream` is where the job was
/// sent (`scheme://host:port`, or a pool member's `host:port`): a 502 for
/// a connection that could not be made names it, since a wrong
/// `--upstream` (a port, a host) is the usual cause and the caller's SDK
/// shows only this message.
pub fn for_error(
    e: &Error,
    provider: Provider,
    key: &str,
    stops: &StopAnswers,
    longest: Duration,
    upstream: Option<&str>,
) -> Response {
    let mut action = e.action();
    let mut resp = if e.is_body_too_large() {
        shaped(
            provider,
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            "ratewise: the request body is larger than the proxy accepts (bounds.max_request_body)",
        )
    } else if e.is_request_body() {
        shaped(
            provider,
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "ratewise: the request body could not be read",
        )
    } else {
        match action {
            Some(ActionKind::StopQueue) => stopped(e, provider, key, stops),
            Some(ActionKind::Defer) => {
                let mut r = shaped(
                    provider,
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limit_error",
                    "ratewise: deferred: the key's limits cannot take this job now; come back after retry-after",
                );
                retry_after(r.headers_mut(), e.until());
                r
            }
            Some(ActionKind::GiveUp) if e.give_up_reason() == Some(GiveUpReason::Deadline) => {
                match provider_wait(e, longest, SystemTime::now()) {
                    Some(until) => {
                        action = Some(ActionKind::Defer);
                        let mut r = shaped(
                            provider,
                            StatusCode::TOO_MANY_REQUESTS,
                            "rate_limit_error",
                            "ratewise: deferred: the provider's own wait is longer than this request's deadline allows; come back after retry-after",
                        );
                        retry_after(r.headers_mut(), Some(until));
                        r
                    }
                    None => deadline(e, provider),
                }
            }
            Some(ActionKind::HoldUnknown) => shaped(
                provider,
                StatusCode::GATEWAY_TIMEOUT,
                "timeout_error",
                "ratewise: the request was sent and no answer came; it may have been processed, so it was not sent again",
            ),
            _ => match passthrough(e) {
                Some(r) => r,
                None => shaped(
                    provider,
                    StatusCode::BAD_GATEWAY,
                    "api_error",
                    &bad_gateway_message(e, upstream),
                ),
            },
        }
    };
    let h = resp.headers_mut();
    h.insert("x-should-retry", HeaderValue::from_static("false"));
    let word = action.map_or("error", |a| a.as_str());
    h.insert(ACTION_HEADER, HeaderValue::from_static(word));
    resp
}

/// The message of a 502 the proxy gives itself: the job's end, and for a
/// connection that could not be made (`connect_failed`: refused, DNS, a
/// TLS handshake) the upstream it could not reach. `upstream` is a
/// `scheme://host:port` (or `host:port`), never a key, user, path or query.
fn bad_gateway_message(e: &Error, upstream: Option<&str>) -> String {
    let connect_failed = e
        .classification()
        .is_some_and(|c| c.cause == Cause::ConnectFailed);
    match upstream {
        Some(up) if connect_failed => {
            format!("ratewise: could not connect to the upstream {up} (connect_failed): {e}")
        }
        _ => format!("ratewise: {e}"),
    }
}

/// A stopped key: this job's own answer when it was the one that stopped
/// it, else the key's kept evidence rebuilt in the provider's shape (see
/// [`Evidence::render`]), else one in the provider's shape for the cause.
fn stopped(e: &Error, provider: Provider, key: &str, stops: &StopAnswers) -> Response {
    if stopped_by_its_answer(e) {
        if let Some(r) = passthrough(e) {
            return r;
        }
    }
    let kept = stops.get(key);
    if let Some(k) = kept.as_ref().filter(|k| k.renders()) {
        let mut r = k.render(provider);
        // When it lifts is the store's word (the admission's decision),
        // not the evidence's.
        retry_after(r.headers_mut(), e.until());
        return r;
    }
    let cause = kept.map_or(Cause::UserLimit, |k| k.cause);
    let mut r = match cause {
        Cause::Authentication => shaped(
            provider,
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "ratewise: this key was refused by the provider; sending is stopped until it is resumed",
        ),
        Cause::Billing => shaped(
            provider,
            StatusCode::PAYMENT_REQUIRED,
            "billing_error",
            "ratewise: the provider reported a billing problem; sending is stopped until it is resumed",
        ),
        _ => shaped(
            provider,
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "ratewise: sending with this key is stopped (a spend or usage limit); it resumes at the limit's reset or when an operator resumes it",
        ),
    };
    if provider.dialect() == Provider::Openai && cause == Cause::SpendCap {
        r = openai(
            StatusCode::TOO_MANY_REQUESTS,
            "insufficient_quota",
            Some("insufficient_quota"),
            "ratewise: sending with this key is stopped: quota exhausted",
        );
    }
    retry_after(r.headers_mut(), e.until());
    r
}

/// When the provider said the job may come back, for a job given up on
/// its deadline because the provider's wait was longer than any deadline
/// this proxy takes (`longest`): its last answer a rate limit or an
/// overload whose hint is valid, finite and past `longest`, counted from
/// `now` (the answer just arrived: the decision is made on it). `None` for
/// a wait a longer timeout could have met (the caller's own timeout ran
/// out: a 504), for a deadline that ran out on ratewise's own pacing or
/// backoff, and for a hint meaning "longer than anything".
fn provider_wait(e: &Error, longest: Duration, now: SystemTime) -> Option<SystemTime> {
    let c = e.classification()?;
    if !matches!(
        c.cause,
        Cause::RateLimited | Cause::AccelerationLimited | Cause::Overloaded
    ) {
        return None;
    }
    let hint = c.hints.wait?;
    if hint.wait <= longest || hint.wait >= ratewise_core::parse::FOREVER {
        return None;
    }
    // The last decision must be the hint's: a later pacing wait would
    // have its own note.
    let hinted = e.decision().is_some_and(|d| {
        d.notes
            .iter()
            .any(|n| matches!(n, ratewise_core::Note::Hint { .. }))
    });
    hinted.then(|| now.checked_add(hint.wait)).flatten()
}

/// Given up on its deadline: a timeout naming the last cause seen and how
/// long ago it was. The provider's body is passed through only when it is
/// that attempt's own answer — here it never is: the deadline ended the
/// job, not the answer.
fn deadline(e: &Error, provider: Provider) -> Response {
    let last = e.attempts().last();
    let msg = match last {
        Some(r) => {
            let age = ratewise_core::time::parse_rfc3339(&r.time_utc)
                .and_then(|t| SystemTime::now().duration_since(t).ok())
                .unwrap_or(Duration::ZERO);
            format!(
                "ratewise: the job's deadline passed before an answer could come; last cause {} {:.1} s ago (attempt {})",
                r.cause,
                age.as_secs_f64(),
                r.attempt
            )
        }
        None => match e.earliest() {
            Some(at) => format!(
                "ratewise: this request cannot be sent before its deadline: the key's limits let it go in {:.1} s (at {}), after the caller's timeout allows; nothing was sent",
                at.duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO)
                    .as_secs_f64(),
                ratewise_core::time::format_rfc3339(at)
            ),
            None => "ratewise: the job's deadline passed before it could be sent".to_owned(),
        },
    };
    let mut r = shaped(provider, StatusCode::GATEWAY_TIMEOUT, "timeout_error", &msg);
    // No retry-after: the caller's own timeout is what ran out, and an
    // invitation to come back is one a caller without retries cannot take.
    // When it could have gone is said for a caller that can.
    if let Some(v) = e
        .earliest()
        .and_then(|at| HeaderValue::from_str(&ratewise_core::time::format_rfc3339(at)).ok())
    {
        r.headers_mut().insert(EARLIEST_HEADER, v);
    }
    r
}

/// The header saying when a job answered for its deadline could have
/// been sent (RFC 3339).
pub const EARLIEST_HEADER: &str = "x-ratewise-earliest";

/// The provider's own answer carried by `e`, as it was sent.
fn passthrough(e: &Error) -> Option<Response> {
    let (status, headers, body) = (e.status()?, e.headers()?, e.body()?);
    let mut r = Response::new(Body::from(body.clone()));
    *r.status_mut() = status;
    *r.headers_mut() = headers.clone();
    // The body may have been cut at the layer's bound, and it is sent as
    // read (decoded framing).
    let h = r.headers_mut();
    h.remove(http::header::CONTENT_LENGTH);
    h.remove(http::header::TRANSFER_ENCODING);
    h.remove(http::header::CONNECTION);
    Some(r)
}

fn retry_after(h: &mut HeaderMap, until: Option<SystemTime>) {
    ratewise_tower::set_retry_after(h, until, SystemTime::now());
}

/// An error in `provider`'s shape: OpenAI's for it and the
/// OpenAI-compatible APIs (Azure, Groq, Mistral, DeepSeek, OpenRouter,
/// xAI), Google's `google.rpc.Status` for Gemini
/// (`{"error":{"code":429,"message":…,"status":"RESOURCE_EXHAUSTED"}}`),
/// Anthropic's for the others (generic providers included).
pub fn shaped(provider: Provider, status: StatusCode, kind: &str, message: &str) -> Response {
    match provider.dialect() {
        Provider::Openai => openai(status, kind, None, message),
        Provider::Gemini => json(status, &google_error(status, message)),
        _ => anthropic(status, kind, message),
    }
}

/// Google's error body (`google.rpc.Status` in its JSON envelope) for an
/// answer of `status`.
pub fn google_error(status: StatusCode, message: &str) -> serde_json::Value {
    serde_json::json!({
        "error": {"code": status.as_u16(), "message": message, "status": google_status(status)},
    })
}

/// The `google.rpc.Code` name Google's APIs answer `status` with (the
/// core's one table).
pub fn google_status(status: StatusCode) -> &'static str {
    ratewise_core::classify::codes::google_status(status.as_u16())
}

fn anthropic(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = serde_json::json!({
        "type": "error",
        "error": {"type": kind, "message": message},
    });
    json(status, &body)
}

fn openai(status: StatusCode, kind: &str, code: Option<&str>, message: &str) -> Response {
    let body = serde_json::json!({
        "error": {"message": message, "type": kind, "param": null, "code": code},
    });
    json(status, &body)
}

fn json(status: StatusCode, body: &serde_json::Value) -> Response {
    let mut r = Response::new(Body::from(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}
