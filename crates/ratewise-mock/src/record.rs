//! What the mock remembers about every API request it received: enough to
//! assert on sends per job and on what was answered, and nothing secret
//! (no key, no body).

use crate::faults::Fault;
use crate::flavor::Flavor;
use crate::model::{Answer, Outcome};
use crate::render::RenderCtx;
use ratewise_core::{Cause, Dimension, Provider};
use serde::Serialize;

/// Request header carrying the caller's job id (set by the tower layer).
pub const JOB_HEADER: &str = "x-ratewise-job";
/// Request header carrying the attempt number, 1-based (set by the tower layer).
pub const ATTEMPT_HEADER: &str = "x-ratewise-attempt";

/// One API request and what the mock answered.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestRecord {
    /// 1-based arrival order among all API requests (valid or not).
    pub seq: u64,
    /// Real milliseconds since the server started.
    pub at_ms: u64,
    /// Provider-time milliseconds since the server started.
    pub provider_ms: u64,
    /// Which API was called.
    pub provider: Provider,
    /// The key's label (from the config) or a short non-reversible
    /// fingerprint (`k:` + 8 hex digits); never the key.
    pub key: String,
    /// The requested model (empty when unreadable; at most 256 bytes).
    pub model: String,
    /// Job id from [`JOB_HEADER`], if sent.
    pub job: Option<String>,
    /// Attempt from [`ATTEMPT_HEADER`], if sent.
    pub attempt: Option<u32>,
    /// Streaming requested.
    pub stream: bool,
    /// Input tokens counted.
    pub input_tokens: u64,
    /// The request's `max_tokens`.
    pub max_tokens: u64,
    /// Output tokens a success produces (planned; a cut stream delivers fewer).
    pub output_tokens: u64,
    /// HTTP status answered; `None` when the connection was reset.
    pub status: Option<u16>,
    /// What was answered, in ratewise's vocabulary (`outcome_unknown` for a
    /// reset, `mid_stream` for a cut or broken stream).
    pub cause: Cause,
    /// The limited dimension of a rate-limit answer.
    pub dimension: Option<Dimension>,
    /// The injected fault, if any.
    pub fault: Option<Fault>,
    /// Request id sent back (none for resets).
    pub request_id: Option<String>,
    /// Real milliseconds the request waited for a concurrency slot
    /// (DeepSeek's queue, [`CompatibleConfig::concurrency`](crate::CompatibleConfig::concurrency)); 0 otherwise.
    pub queued_ms: u64,
}

/// Counts of records by job: how many sends each job made.
pub fn sends_per_job(records: &[RequestRecord]) -> std::collections::BTreeMap<String, usize> {
    let mut m = std::collections::BTreeMap::new();
    for r in records {
        if let Some(j) = &r.job {
            *m.entry(j.clone()).or_insert(0) += 1;
        }
    }
    m
}

/// Fills in what the answer was, in ratewise's vocabulary.
pub fn describe(rec: &mut RequestRecord, answer: &Answer, ctx: &RenderCtx) {
    rec.request_id = Some(ctx.request_id.clone());
    if ctx.provider == Provider::Bedrock {
        describe_bedrock(rec, answer, ctx);
        return;
    }
    let (status, cause, dimension): (Option<u16>, Cause, Option<Dimension>) = match &answer.outcome
    {
        Outcome::Success(_) => match answer.stream_fault {
            Some(_) => (Some(200), Cause::MidStream, None),
            None => (Some(200), Cause::Success, None),
        },
        Outcome::RateLimited { dimension, .. } => (Some(429), Cause::RateLimited, Some(*dimension)),
        Outcome::SlowDown { .. } => (Some(429), Cause::AccelerationLimited, None),
        // DeepSeek and OpenRouter answer money with 402.
        Outcome::SpendCap if matches!(ctx.flavor, Flavor::Deepseek | Flavor::Openrouter) => {
            (Some(402), Cause::SpendCap, None)
        }
        Outcome::SpendCap => (Some(429), Cause::SpendCap, None),
        // xAI's money answer is a 429.
        Outcome::Billing if ctx.flavor == Flavor::Xai => (Some(429), Cause::Billing, None),
        // Gemini's billing answer is 400 `FAILED_PRECONDITION`.
        Outcome::Billing if ctx.provider == Provider::Gemini => (Some(400), Cause::Billing, None),
        Outcome::Billing => (Some(402), Cause::Billing, None),
        Outcome::TooManyKeys if ctx.provider == Provider::Gemini => {
            (Some(400), Cause::Authentication, None)
        }
        Outcome::TooManyKeys => (Some(401), Cause::Authentication, None),
        Outcome::DailyQuota { .. } => (Some(429), Cause::RateLimited, Some(Dimension::Requests)),
        // "limit: 0": ratewise-core reads a quota the tier lacks as a permission.
        Outcome::QuotaNotGranted => (Some(429), Cause::Permission, None),
        Outcome::RequestTooLarge { .. } => {
            (Some(413), Cause::RequestTooLarge, Some(Dimension::Tokens))
        }
        Outcome::MonthlyQuota { .. } => (Some(429), Cause::RateLimited, Some(Dimension::Tokens)),
        Outcome::Fault(f) => {
            rec.fault = Some(f.clone());
            match f {
                Fault::Reset => {
                    rec.request_id = None;
                    (None, Cause::OutcomeUnknown, None)
                }
                Fault::Overloaded => (
                    Some(match (ctx.provider, ctx.flavor) {
                        (Provider::Openai, Flavor::Mistral) => 429,
                        (Provider::Openai | Provider::Gemini, _) => 503,
                        _ => 529,
                    }),
                    Cause::Overloaded,
                    None,
                ),
                Fault::Status { status, .. } => (
                    Some(*status),
                    match status {
                        408 | 504 => Cause::Timeout,
                        529 => Cause::Overloaded,
                        s if *s >= 500 => Cause::ServerError,
                        _ => Cause::Unknown,
                    },
                    None,
                ),
                Fault::RetryAfter { .. } | Fault::UpstreamRateLimited => {
                    (Some(429), Cause::RateLimited, Some(Dimension::Requests))
                }
                Fault::ErrorInBody { .. } if ctx.provider == Provider::Openai => {
                    (Some(200), Cause::ServerError, None)
                }
                Fault::ErrorInBody { .. } => (Some(502), Cause::ServerError, None),
                _ => (Some(200), Cause::Success, None),
            }
        }
    };
    if let Some(f) = &answer.stream_fault {
        rec.fault = Some(f.clone());
    } else if let Some(ms) = answer.stall {
        rec.fault = Some(Fault::Stall {
            ms: ms.as_millis() as u64,
        });
    }
    rec.status = status;
    rec.cause = cause;
    rec.dimension = dimension;
}

/// Bedrock's statuses: read back from the rendering, which names them.
fn describe_bedrock(rec: &mut RequestRecord, answer: &Answer, ctx: &RenderCtx) {
    let r = crate::render::bedrock::render_answer(ctx, answer);
    rec.request_id = Some(ctx.request_id.clone());
    rec.status = Some(r.status);
    rec.fault = match &answer.outcome {
        Outcome::Fault(f) => Some(f.clone()),
        _ => None,
    };
    if let Some(ms) = answer.stall {
        rec.fault = Some(Fault::Stall {
            ms: ms.as_millis() as u64,
        });
    }
    (rec.cause, rec.dimension) = match &answer.outcome {
        Outcome::Success(_) => (Cause::Success, None),
        Outcome::RateLimited { dimension, .. } => (Cause::RateLimited, Some(*dimension)),
        Outcome::SlowDown { .. } => (Cause::AccelerationLimited, None),
        Outcome::SpendCap | Outcome::DailyQuota { .. } | Outcome::MonthlyQuota { .. } => {
            (Cause::RateLimited, Some(Dimension::Tokens))
        }
        Outcome::RequestTooLarge { .. } => (Cause::RateLimited, Some(Dimension::Tokens)),
        Outcome::Billing | Outcome::QuotaNotGranted => (Cause::Permission, None),
        Outcome::TooManyKeys => (Cause::Authentication, None),
        Outcome::Fault(Fault::Reset) => {
            rec.request_id = None;
            rec.status = None;
            (Cause::OutcomeUnknown, None)
        }
        Outcome::Fault(Fault::Overloaded) => (Cause::Overloaded, None),
        Outcome::Fault(Fault::RetryAfter { .. } | Fault::UpstreamRateLimited) => {
            (Cause::RateLimited, Some(Dimension::Tokens))
        }
        Outcome::Fault(_) => match r.status {
            408 | 504 => (Cause::Timeout, None),
            s if s >= 500 => (Cause::ServerError, None),
            _ => (Cause::Unknown, None),
        },
    };
}
