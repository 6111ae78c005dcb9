//! The evidence record of one attempt: an allow-list.
//!
//! Every field is something DESIGN principle 10 allows: time (UTC), job id,
//! attempt, status, error type and code, request id, retry hints,
//! rate-limit headers, decision, usage. There is no field that could hold a
//! request header, a key, a cookie or a body, so nothing secret can be
//! logged through a record however it is filled.

use crate::classify::Classification;
use crate::decision::Decision;
use crate::parse::ratelimit::{RateLimitSnapshot, Reset, Window};
use crate::usage::Usage;
use crate::vocab::{ActionKind, Cause, Dimension, GiveUpReason, Scope};
use serde::Serialize;
use std::time::SystemTime;

/// One attempt's evidence, serialisable as one JSON line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AttemptRecord {
    /// When the answer (or failure) arrived, RFC 3339 UTC.
    pub time_utc: String,
    /// The application's job id, when it gave one.
    pub job_id: Option<String>,
    /// Which send of the job this was (1-based).
    pub attempt: u32,
    /// HTTP status, when there was a response.
    pub status: Option<u16>,
    /// Transport failure word, when there was no response.
    pub transport: Option<&'static str>,
    /// `error.type`.
    pub error_type: Option<String>,
    /// `error.code` / `error.details.error_code`.
    pub error_code: Option<String>,
    /// The provider's request id.
    pub request_id: Option<String>,
    /// The wait hint used, in milliseconds.
    pub hint_ms: Option<u64>,
    /// Where the hint came from.
    pub hint_source: Option<&'static str>,
    /// Hints rejected, as `"retry-after: not_finite"`.
    pub rejected_hints: Vec<String>,
    /// The rate-limit headers' view of each dimension.
    pub ratelimit: Vec<WindowRecord>,
    /// What happened.
    pub cause: Cause,
    /// Who is affected.
    pub scope: Scope,
    /// Which ceiling, when known.
    pub dimension: Option<Dimension>,
    /// What was decided.
    pub action: ActionKind,
    /// Retry delay in milliseconds.
    pub delay_ms: Option<u64>,
    /// `until` of a defer or stop, RFC 3339 UTC.
    pub until: Option<String>,
    /// Reason of a give-up.
    pub reason: Option<GiveUpReason>,
    /// Usage, when known (success or streamed so far).
    pub usage: Option<Usage>,
    /// The pool member the attempt went to (its upstream and key
    /// fingerprint, never the key), for a pooled job; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
}

/// One dimension's published window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WindowRecord {
    /// Which dimension (`requests`, `input_tokens`, ...; `priority_*` too).
    pub dimension: &'static str,
    /// Published limit.
    pub limit: Option<u64>,
    /// Published remaining.
    pub remaining: Option<u64>,
    /// Milliseconds until full again, from the record's time.
    pub reset_ms: Option<u64>,
}

impl AttemptRecord {
    /// Builds the record of one attempt from what the core already knows.
    pub fn new(
        wall: SystemTime,
        job_id: Option<&str>,
        attempt: u32,
        c: &Classification,
        d: &Decision,
    ) -> Self {
        let hint = c.hints.wait;
        AttemptRecord {
            time_utc: crate::time::format_rfc3339(wall),
            job_id: job_id.map(|j| crate::parse::clip(j, 128).to_owned()),
            attempt,
            status: c.status,
            transport: c.transport.map(|t| t.as_str()),
            error_type: c.evidence.error_type.clone(),
            error_code: c.evidence.error_code.clone(),
            request_id: c.evidence.request_id.clone(),
            hint_ms: hint.map(|h| millis(h.wait)),
            hint_source: hint.map(|h| h.source.as_str()),
            rejected_hints: c
                .hints
                .rejected
                .iter()
                .map(|(s, r)| format!("{}: {r}", s.as_str()))
                .collect(),
            ratelimit: windows(&c.hints.ratelimit, wall),
            cause: c.cause,
            scope: c.scope,
            dimension: c.dimension,
            action: d.action.kind(),
            delay_ms: d.action.delay().map(millis),
            until: d.action.until().map(crate::time::format_rfc3339),
            reason: d.action.reason(),
            usage: None,
            member: None,
        }
    }

    /// The same record naming the pool member the attempt went to.
    pub fn with_member(mut self, member: Option<String>) -> Self {
        self.member = member;
        self
    }

    /// The same record with its usage.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn windows(s: &RateLimitSnapshot, wall: SystemTime) -> Vec<WindowRecord> {
    let all: [(&'static str, &Window); 6] = [
        ("requests", &s.requests),
        ("input_tokens", &s.input_tokens),
        ("output_tokens", &s.output_tokens),
        ("tokens", &s.tokens),
        ("priority_input_tokens", &s.priority_input_tokens),
        ("priority_output_tokens", &s.priority_output_tokens),
    ];
    all.iter()
        .filter(|(_, w)| !w.is_empty())
        .map(|(dimension, w)| WindowRecord {
            dimension,
            limit: w.limit,
            remaining: w.remaining,
            reset_ms: w.reset.map(|r: Reset| millis(r.wait_from(wall))),
        })
        .collect()
}
