//! The status envelope, read after the body's code (DESIGN principle 1).

use crate::classify::BodyReading;
use crate::note::Note;
use crate::parse::retry_after::RetryHeaders;
use crate::vocab::{Cause, Provider};
use http::StatusCode;

/// Combines the body's cause (if the provider's code or message was known,
/// with the note that says which) with the status. On providers that send
/// codes, a 429 or 400 without a known code is `unknown`: nothing proves it
/// is not money.
pub(super) fn decide_cause(
    provider: Provider,
    status: StatusCode,
    body_cause: Option<(Cause, Note)>,
    body: BodyReading,
    retry: &RetryHeaders,
    notes: &mut Vec<Note>,
) -> Cause {
    let code = status.as_u16();
    if let (402, Some((Cause::InvalidRequest, _))) = (code, &body_cause) {
        // 402 Payment Required under a generic "invalid request" class is
        // money (DeepSeek: 402 "Insufficient Balance", typed
        // `invalid_request_error`): the key stops, it is no request's fault.
        notes.push("402 Payment Required: money, whatever the generic error class says".into());
        return Cause::Billing;
    }
    if let Some((cause, why)) = body_cause {
        notes.push(why);
        return cause;
    }
    if provider == Provider::Generic {
        return generic(code, retry, notes);
    }
    match body {
        BodyReading::Unreadable(u) => notes.push(Note::BodyUnreadable(u)),
        BodyReading::Structured => notes.push("body error code not recognised".into()),
        BodyReading::NotRead => {}
    }
    if matches!(code, 400 | 429) {
        notes.push(Note::CodeNeeded(code));
        return Cause::Unknown;
    }
    let cause = by_status(code, provider);
    notes.push(Note::StatusDecides {
        status: code,
        cause,
        generic: false,
    });
    cause
}

/// Statuses that mean one thing whatever the body says.
fn by_status(code: u16, provider: Provider) -> Cause {
    match code {
        402 => Cause::Billing,
        401 => Cause::Authentication,
        403 => Cause::Permission,
        404 => Cause::NotFound,
        408 => Cause::Timeout,
        409 => Cause::Conflict,
        413 => Cause::RequestTooLarge,
        422 => Cause::InvalidRequest,
        500 | 502 | 503 | 504 => Cause::ServerError,
        529 if provider == Provider::Anthropic => Cause::Overloaded,
        _ => Cause::Unknown,
    }
}

/// RFC 9110 alone: a 429 or 503 with a valid `Retry-After` is a limit or an
/// overload to wait out.
fn generic(code: u16, retry: &RetryHeaders, notes: &mut Vec<Note>) -> Cause {
    let hinted = retry.best().is_some();
    let cause = match (code, hinted) {
        (429, _) => Cause::RateLimited,
        (503, true) => Cause::Overloaded,
        (400, _) => Cause::InvalidRequest,
        _ => by_status(code, Provider::Generic),
    };
    notes.push(Note::StatusDecides {
        status: code,
        cause,
        generic: true,
    });
    cause
}
