//! Classification: one response (or transport failure) → cause, scope,
//! dimension, hints and evidence.
//!
//! The body's structured code is read first, headers second, status last
//! (DESIGN principle 1). Nothing here knows about policies or time budgets:
//! [`crate::decide`] turns a [`Classification`] into an action.
//!
//! ```
//! use ratewise_core::classify::{classify_response, ResponseView};
//! use ratewise_core::{Cause, Dimension, Provider, Scope};
//! use http::{HeaderMap, StatusCode};
//!
//! let mut headers = HeaderMap::new();
//! headers.insert("retry-after", "8".parse().unwrap());
//! headers.insert("anthropic-ratelimit-input-tokens-remaining", "0".parse().unwrap());
//! let body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
//! let view = ResponseView { status: StatusCode::TOO_MANY_REQUESTS, headers: &headers, body };
//! let c = classify_response(Provider::Anthropic, &view, std::time::SystemTime::UNIX_EPOCH);
//! assert_eq!(c.cause, Cause::RateLimited);
//! assert_eq!(c.scope, Scope::Bucket);
//! assert_eq!(c.dimension, Some(Dimension::InputTokens));
//! assert_eq!(c.hints.wait.unwrap().wait.as_secs(), 8);
//! ```

mod bedrock;
#[doc(hidden)]
pub mod codes;
mod compatible;
mod detect;
mod dimension;
mod google;
mod headers;
mod money;
#[doc(hidden)]
pub mod money_message;
mod quota;
mod status;
mod transport;

pub use detect::detect_provider;
pub use transport::TransportFailure;

use crate::parse::body::{parse_error_ref, Unreadable};
use crate::parse::ratelimit::RateLimitSnapshot;
use crate::parse::retry_after::{HintSource, RetryHeaders};
use crate::parse::{message, Rejected};
use crate::vocab::{Cause, Dimension, Provider, Scope};
use http::{HeaderMap, StatusCode};
use std::time::{Duration, SystemTime};

/// One HTTP response as the classifier reads it: borrowed, never owned.
#[derive(Debug, Clone, Copy)]
pub struct ResponseView<'a> {
    /// The status code.
    pub status: StatusCode,
    /// All response headers.
    pub headers: &'a HeaderMap,
    /// The body, or the bounded prefix of it the caller buffered.
    pub body: &'a [u8],
}

/// A valid wait hint and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hint {
    /// Which header or phrase said it.
    pub source: HintSource,
    /// The minimum wait the server asked for.
    pub wait: Duration,
}

/// Everything the response said about waiting.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hints {
    /// The most trusted valid wait hint: `retry-after-ms`, `Retry-After`,
    /// the message's "try again in", the limited dimension's reset header.
    pub wait: Option<Hint>,
    /// `x-should-retry`, when present and valid.
    pub should_retry: Option<bool>,
    /// Hints present but rejected, with the reason (never turned into zero).
    pub rejected: Vec<(HintSource, Rejected)>,
    /// The rate-limit headers.
    pub ratelimit: RateLimitSnapshot,
    /// When a stop lifts by itself (the monthly spend cap, a dated limit).
    pub resume_at: Option<SystemTime>,
}

/// How the body was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BodyReading {
    /// Not read: a success, a transport failure, or the generic profile.
    NotRead,
    /// A structured provider error was read.
    Structured,
    /// The body could not be read as a provider error.
    Unreadable(Unreadable),
}

/// What was seen, for records and explanations (no secrets: nothing from
/// the request, no body beyond the provider's error fields).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Evidence {
    /// The provider's request id (headers first, then the body).
    pub request_id: Option<String>,
    /// `error.type`.
    pub error_type: Option<String>,
    /// `error.code` / `error.details.error_code`.
    pub error_code: Option<String>,
    /// `error.message` (bounded); shown by `explain`, not kept in records.
    pub message: Option<String>,
    /// How the body was read.
    pub body: BodyReading,
    /// Why the classifier chose this cause.
    pub notes: Vec<crate::note::Note>,
}

impl Evidence {
    /// Nothing read from a body yet: the start of every classification.
    fn unread(notes: Vec<crate::note::Note>) -> Self {
        Evidence {
            request_id: None,
            error_type: None,
            error_code: None,
            message: None,
            body: BodyReading::NotRead,
            notes,
        }
    }
}

/// The classifier's verdict on one response or transport failure.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Classification {
    /// The profile whose rules were applied.
    pub provider: Provider,
    /// The HTTP status, when there was a response.
    pub status: Option<u16>,
    /// The transport failure, when there was no response.
    pub transport: Option<TransportFailure>,
    /// What happened.
    pub cause: Cause,
    /// Who is affected.
    pub scope: Scope,
    /// Which ceiling was hit, when known.
    pub dimension: Option<Dimension>,
    /// What the response said about waiting.
    pub hints: Hints,
    /// What was seen.
    pub evidence: Evidence,
}

impl Classification {
    /// The default scope of a cause (DESIGN's decision table).
    pub(crate) const fn default_scope(cause: Cause) -> Scope {
        match cause {
            Cause::RateLimited => Scope::Bucket,
            Cause::AccelerationLimited
            | Cause::SpendCap
            | Cause::Billing
            | Cause::UserLimit
            | Cause::Authentication
            | Cause::Permission => Scope::Key,
            Cause::Overloaded => Scope::Provider,
            _ => Scope::Request,
        }
    }
}

/// Classifies one HTTP response under a provider profile. `wall_now` reads
/// HTTP-date and RFC 3339 hints.
pub fn classify_response(
    provider: Provider,
    response: &ResponseView<'_>,
    wall_now: SystemTime,
) -> Classification {
    let status = response.status;
    // Built in place and filled in: the classification is large (the
    // rate-limit snapshot alone is six windows), so its parts are written
    // where they end up rather than assembled and moved.
    let mut c = Classification {
        provider,
        status: Some(status.as_u16()),
        transport: None,
        cause: Cause::Success,
        scope: Scope::Request,
        dimension: None,
        hints: Hints::default(),
        evidence: Evidence::unread(Vec::new()),
    };
    let headers::HeaderScan { retry, ids } =
        headers::HeaderScan::new(response.headers, wall_now, &mut c.hints.ratelimit);
    c.hints.ratelimit.for_provider(provider);
    let retry = &retry;
    c.hints.should_retry = retry.should_retry.and_then(Result::ok);
    c.hints.rejected = retry.rejected();
    if matches!(retry.should_retry, Some(Err(_))) {
        c.evidence
            .notes
            .push("x-should-retry: unreadable value ignored".into());
    }

    // Success needs no body reading, unless the provider sends errors
    // inside a 2xx answer (OpenRouter, once a model started).
    let in_band = status
        .is_success()
        .then(|| compatible::in_band_error(provider, response.body))
        .flatten()
        .and_then(|code| StatusCode::from_u16(code).ok());
    let status = match in_band {
        Some(code) => {
            c.evidence.notes.push(
                format!(
                    "{provider}: a {} answer carrying an error {code}: read as that error",
                    status.as_u16()
                )
                .into(),
            );
            code
        }
        None if status.is_success() => {
            c.evidence.request_id = ids.request_id();
            return c;
        }
        None => status,
    };

    // At least one note follows (the cause's reason): room for the usual few
    // at once rather than growing from nothing.
    if c.evidence.notes.is_empty() {
        c.evidence.notes = Vec::with_capacity(4);
    }

    // Borrowed from the body: only what the classification keeps is copied.
    // Google's status model is read by its own reader (numbers, arrays of
    // typed details), its status name in the type's place.
    let own_reader = matches!(
        provider,
        Provider::Generic | Provider::Gemini | Provider::Bedrock
    );
    let (parsed, body_reading) = if own_reader {
        (None, BodyReading::NotRead)
    } else {
        match parse_error_ref(response.body) {
            Ok(e) => (Some(e), BodyReading::Structured),
            Err(u) => (None, BodyReading::Unreadable(u)),
        }
    };
    let (google, body_reading) = if provider == Provider::Gemini {
        match google::read(response.body) {
            Ok(g) => (Some(g), BodyReading::Structured),
            Err(u) => (None, BodyReading::Unreadable(u)),
        }
    } else {
        (None, body_reading)
    };
    let (bedrock, body_reading) = if provider == Provider::Bedrock {
        match bedrock::read(response.headers, response.body) {
            Some(b) => (Some(b), BodyReading::Structured),
            None => (None, BodyReading::Unreadable(Unreadable::NoErrorObject)),
        }
    } else {
        (None, body_reading)
    };
    let fields = parsed
        .as_ref()
        .map(|e| e.fields())
        .or_else(|| google.as_ref().map(|g| g.fields()))
        .or_else(|| bedrock.as_ref().map(|b| b.fields()));
    let message = fields.and_then(|f| f.message);

    // Codes first; a message that says money ran out beats a plain
    // "invalid request" (a 400 that means money) or a bare rate-limit type.
    let body_cause = fields
        .and_then(|f| codes::read_error(provider, f))
        .map(|r| match r.said {
            Some(said) => (r.cause, crate::note::Note::from(said.explain())),
            None => (r.cause, crate::note::Note::BodyCode(r.cause)),
        });
    let mut cause = status::decide_cause(
        provider,
        status,
        body_cause,
        body_reading,
        retry,
        &mut c.evidence.notes,
    );

    let mut dimension = match cause {
        Cause::RateLimited | Cause::RequestTooLarge => {
            dimension::limited_dimension(provider, fields, &c.hints.ratelimit)
        }
        _ => None,
    };
    c.hints.wait = wait_hint(
        retry,
        message,
        dimension,
        &c.hints.ratelimit,
        wall_now,
        &mut c.hints.rejected,
    );
    let mut scope_of_quota = None;
    if let (Some(g), Cause::RateLimited) = (&google, cause) {
        scope_of_quota = google_quota(
            g,
            &mut cause,
            &mut dimension,
            &mut c.hints,
            wall_now,
            &mut c.evidence.notes,
        );
    }
    let rules = compatible::ProviderRules {
        provider,
        status: status.as_u16(),
        body: response.body,
        message,
        wall_now,
    };
    let scope = rules
        .apply(&mut cause, &mut c.hints, &mut c.evidence.notes)
        .or(scope_of_quota);
    if cause != Cause::RateLimited && cause != Cause::RequestTooLarge {
        dimension = None;
    }
    if cause.is_money() || cause == Cause::Authentication {
        c.hints.resume_at = money::resume_at(provider, cause, message, wall_now);
    }
    if cause == Cause::RequestTooLarge {
        if let Some((limit, requested)) = message.and_then(message::too_large_for_limit) {
            c.evidence
                .notes
                .push(format!("requested {requested} > limit {limit}: waiting cannot help").into());
        }
    }

    c.cause = cause;
    c.scope = scope.unwrap_or_else(|| Classification::default_scope(cause));
    c.dimension = dimension;
    c.evidence.request_id = ids
        .request_id()
        .or_else(|| parsed.as_ref().and_then(|e| e.request_id()));
    c.evidence.error_type = fields.and_then(|f| f.error_type).map(str::to_owned);
    c.evidence.error_code = fields.and_then(|f| f.code).map(str::to_owned);
    c.evidence.message = message.map(str::to_owned);
    c.evidence.body = body_reading;
    c
}

/// Classifies a transport failure: before the request left (safe to retry)
/// or after it was sent (outcome unknown).
pub fn classify_transport(provider: Provider, failure: TransportFailure) -> Classification {
    let cause = failure.cause();
    Classification {
        provider,
        status: None,
        transport: Some(failure),
        cause,
        scope: Classification::default_scope(cause),
        dimension: None,
        hints: Hints::default(),
        evidence: Evidence::unread(vec![failure.explain().into()]),
    }
}

/// Classifies an error that arrived inside a `200` stream (an SSE `error`
/// event): its cause as the stream tracker read it, the event's type and
/// code. One classification for every driver (a stream that failed before
/// its commit point is decided like an error answer; after it, reported as
/// evidence when its body ends).
pub fn classify_in_band(
    provider: Provider,
    cause: Cause,
    error_type: Option<String>,
    code: Option<String>,
) -> Classification {
    Classification {
        provider,
        status: Some(200),
        transport: None,
        cause,
        scope: Classification::default_scope(cause),
        dimension: None,
        hints: Hints::default(),
        evidence: Evidence {
            request_id: None,
            error_type,
            error_code: code,
            message: None,
            body: BodyReading::Structured,
            notes: vec!["error event inside the stream".into()],
        },
    }
}

/// What a Gemini 429's `QuotaFailure` and `RetryInfo` add: the quota's
/// dimension; a quota of zero is one the key's tier does not have (no wait
/// helps, whatever the answer's "retry in" says: a permission); a per-day
/// quota waits for its documented reset, not for the delay beside it; a
/// per-minute one waits for `retryDelay` where no header said more.
/// Returns the scope when it is not the cause's (a quota of 0 is the
/// model's on this key: its bucket, not the whole key).
fn google_quota(
    g: &google::GoogleStatus,
    cause: &mut Cause,
    dimension: &mut Option<Dimension>,
    hints: &mut Hints,
    wall_now: SystemTime,
    notes: &mut Vec<crate::note::Note>,
) -> Option<Scope> {
    if g.quota_not_granted() {
        *cause = Cause::Permission;
        *dimension = None;
        hints.wait = None;
        notes.push("gemini: a quota of 0 (\"limit: 0\"): the key's tier does not have it for this model; waiting cannot help".into());
        return Some(Scope::Bucket);
    }
    let violation = g.violation();
    if let Some(d) = violation.and_then(google::Violation::dimension) {
        *dimension = Some(d);
    }
    if violation.is_some_and(google::Violation::per_day) {
        let reset = google::next_daily_reset(wall_now);
        hints.wait = Some(Hint {
            source: HintSource::QuotaReset,
            wait: reset
                .duration_since(wall_now)
                .unwrap_or(Duration::ZERO)
                .max(Duration::from_secs(1)),
        });
        hints.resume_at = Some(reset);
        notes.push("gemini: a per-day quota: it resets at midnight Pacific (taken as 08:00 UTC), not after the answer's retry delay".into());
        return None;
    }
    // The structured delay beats a phrase in the message; a header, where
    // a proxy in between added one, beats both.
    if hints.wait.is_none_or(|h| h.source == HintSource::Message) {
        if let Some(wait) = g.retry_delay {
            hints.wait = Some(Hint {
                source: HintSource::RetryInfo,
                wait,
            });
        }
    }
    // But `RetryInfo` is whole seconds ("47s") where the message is precise
    // ("Please retry in 47.48s."): a retry at the truncated delay comes
    // before the quota has room and is answered 429 again. The wait is
    // never shorter than either.
    let precise = g.message.as_deref().and_then(message::retry_in);
    if let Some(Ok(precise)) = precise {
        let from_body = hints
            .wait
            .is_none_or(|h| matches!(h.source, HintSource::Message | HintSource::RetryInfo));
        if from_body && hints.wait.is_none_or(|h| h.wait < precise) {
            hints.wait = Some(Hint {
                source: HintSource::Message,
                wait: precise,
            });
        }
    }
    // A per-minute quota's `quotaValue` is the limit of its dimension, as
    // the provider states it (Gemini sends no rate-limit headers; its
    // `QuotaFailure` is where it says the limit): read as a stated limit.
    // A per-day quota's is not a per-minute limit, and is not read.
    if let Some(v) = violation.filter(|v| v.per_minute() && !v.per_day()) {
        if let (Some(d), Some(q)) = (v.dimension(), v.quota_value.filter(|q| *q > 0)) {
            let w = match d {
                Dimension::Requests => &mut hints.ratelimit.requests,
                Dimension::InputTokens => &mut hints.ratelimit.input_tokens,
                Dimension::OutputTokens => &mut hints.ratelimit.output_tokens,
                Dimension::Tokens => &mut hints.ratelimit.tokens,
            };
            w.limit = Some(q);
        }
    }
    None
}

/// The most trusted valid wait hint, in DESIGN's order: `retry-after-ms`,
/// `Retry-After`, the message, the limited dimension's reset header.
fn wait_hint(
    retry: &RetryHeaders,
    message: Option<&str>,
    dimension: Option<Dimension>,
    ratelimit: &RateLimitSnapshot,
    wall_now: SystemTime,
    rejected: &mut Vec<(HintSource, Rejected)>,
) -> Option<Hint> {
    if let Some((source, wait)) = retry.best() {
        return Some(Hint { source, wait });
    }
    // OpenAI's "try again in 1.146s", Azure's "retry after 6 seconds".
    let in_message =
        message.and_then(|m| message::try_again_in(m).or_else(|| message::retry_after_in(m)));
    match in_message {
        Some(Ok(wait)) => {
            return Some(Hint {
                source: HintSource::Message,
                wait,
            })
        }
        Some(Err(reason)) => rejected.push((HintSource::Message, reason)),
        None => {}
    }
    let reset = ratelimit.window(dimension?).reset?;
    Some(Hint {
        source: HintSource::ResetHeader,
        wait: reset.wait_from(wall_now),
    })
}
