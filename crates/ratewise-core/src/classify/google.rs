//! Google's error model (`google.rpc.Status`), as the Gemini API answers
//! it over REST: `{"error": {"code": 429, "message", "status":
//! "RESOURCE_EXHAUSTED", "details": [...]}}`, each detail typed by its
//! `@type`. Its OpenAI-compatible endpoint wraps the same object in a JSON
//! array. Read as one model (the gRPC status carries the same details), so
//! the rules below hold for both.
//!
//! Sources (as issue #36 quotes and cites them; not re-read against the
//! live pages when this was written — check before relying on a detail):
//! * <https://ai.google.dev/gemini-api/docs/troubleshooting>: 429
//!   `RESOURCE_EXHAUSTED` "You've exceeded the rate limit"; 503
//!   `UNAVAILABLE` "The service may be temporarily overloaded or down";
//!   400 `FAILED_PRECONDITION` "Gemini API free tier is not available in
//!   your country. Please enable billing on your project".
//! * <https://ai.google.dev/gemini-api/docs/rate-limits>: limits per
//!   minute (RPM, TPM of input) and per day (RPD), the daily quota reset
//!   "at midnight Pacific time".
//! * `google/rpc/error_details.proto`: `RetryInfo.retry_delay` (a
//!   `Duration`, JSON "47s" or "47.481s"), `QuotaFailure.violations[]`
//!   with `quotaMetric`, `quotaId`, `quotaValue` (issue googleapis/
//!   python-genai#2044 shows several violations in one 429).
//! * google-gemini/gemini-cli#22486: "limit: 0" in the message (a quota the
//!   key's tier does not have) while it still says "Please retry in 25s".
//!
//! Bounded: the body's [`MAX_BODY_PREFIX`](crate::parse::body::MAX_BODY_PREFIX)
//! is read, at most [`MAX_VIOLATIONS`] violations are kept, every string
//! is clipped.

use crate::parse::body::ErrorFields;
use crate::parse::body::{Unreadable, MAX_BODY_PREFIX, MAX_MESSAGE_LEN};
use crate::vocab::{Cause, Dimension};
use serde::de::IgnoredAny;
use serde::Deserialize;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Violations kept from one `QuotaFailure` (the rest are ignored).
pub(crate) const MAX_VIOLATIONS: usize = 8;

/// One `QuotaFailure` violation: which quota ran out.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Violation {
    /// `quotaId`, e.g. `GenerateContentPaidTierInputTokensPerModelPerMinute`.
    pub quota_id: Option<String>,
    /// `quotaMetric`, e.g. `generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count`.
    pub quota_metric: Option<String>,
    /// `quotaValue`: the quota's size (a string in JSON).
    pub quota_value: Option<u64>,
}

impl Violation {
    /// Whether its `quotaId` holds `id_word` or its `quotaMetric` holds
    /// `metric_word` (ASCII case ignored).
    fn mentions(&self, id_word: &str, metric_word: &str) -> bool {
        let has = |s: &Option<String>, w: &str| {
            s.as_deref()
                .is_some_and(|s| crate::parse::contains_ignore_ascii_case(s, w))
        };
        has(&self.quota_id, id_word) || has(&self.quota_metric, metric_word)
    }

    /// Whether the quota is counted per day (its id or metric says so):
    /// it resets at midnight Pacific time, not within a minute.
    pub(crate) fn per_day(&self) -> bool {
        self.mentions("PerDay", "per_day")
    }

    /// Whether the quota is counted per minute (its id or metric says so):
    /// its `quotaValue` is then the per-minute limit of its dimension.
    pub(crate) fn per_minute(&self) -> bool {
        self.mentions("PerMinute", "per_minute")
    }

    /// The dimension the quota meters: input tokens or requests.
    pub(crate) fn dimension(&self) -> Option<Dimension> {
        if self.mentions("InputTokens", "input_token") {
            Some(Dimension::InputTokens)
        } else if self.mentions("Requests", "requests") {
            Some(Dimension::Requests)
        } else {
            None
        }
    }
}

/// A `google.rpc.Status` read from a body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct GoogleStatus {
    /// `status`, the canonical code's name (`RESOURCE_EXHAUSTED`).
    pub status: Option<String>,
    /// `message`, clipped.
    pub message: Option<String>,
    /// `RetryInfo.retryDelay`, when valid.
    pub retry_delay: Option<Duration>,
    /// `QuotaFailure.violations`, at most [`MAX_VIOLATIONS`].
    pub violations: Vec<Violation>,
}

impl GoogleStatus {
    /// The fields the code table and the evidence read: the status name
    /// stands in for `error.type`.
    pub(crate) fn fields(&self) -> ErrorFields<'_> {
        ErrorFields {
            error_type: self.status.as_deref(),
            code: None,
            message: self.message.as_deref(),
        }
    }

    /// The quota a 429 is about: a per-day violation wins (it outlasts any
    /// per-minute one named beside it), else the first.
    pub(crate) fn violation(&self) -> Option<&Violation> {
        self.violations
            .iter()
            .find(|v| v.per_day())
            .or_else(|| self.violations.first())
    }

    /// A quota of zero: the key's tier does not have it at all, so no wait
    /// helps ("limit: 0" in the message, or a `quotaValue` of 0), though
    /// the answer still says "Please retry in 25s".
    pub(crate) fn quota_not_granted(&self) -> bool {
        if self.violations.iter().any(|v| v.quota_value == Some(0)) {
            return true;
        }
        let Some(m) = self.message.as_deref() else {
            return false;
        };
        let mut rest = m;
        while let Some(at) = crate::parse::find_ignore_ascii_case(rest, "limit: 0") {
            let after = &rest[at + "limit: 0".len()..];
            if !after.starts_with(|c: char| c.is_ascii_digit()) {
                return true;
            }
            rest = after;
        }
        false
    }
}

/// Reads a `google.rpc.Status` envelope (an object, or the object first in
/// an array), or says why not.
pub(crate) fn read(body: &[u8]) -> Result<GoogleStatus, Unreadable> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(Unreadable::Empty);
    }
    let truncated = body.len() > MAX_BODY_PREFIX;
    let bytes = &body[..body.len().min(MAX_BODY_PREFIX)];
    let env: Envelope = match serde_json::from_slice(bytes) {
        Ok(e) => e,
        Err(_) if truncated => return Err(Unreadable::Truncated),
        Err(_) => return Err(Unreadable::NotJson),
    };
    let status = match env {
        Envelope::One(w) => w.error,
        Envelope::Many(mut v) if !v.is_empty() => v.swap_remove(0).error,
        Envelope::Many(_) => None,
    };
    let Some(s) = status else {
        return Err(Unreadable::NoErrorObject);
    };
    let clip = |s: String| crate::parse::clip(&s, MAX_MESSAGE_LEN).to_owned();
    let mut out = GoogleStatus {
        status: s.status.map(clip),
        message: s.message.map(clip),
        ..GoogleStatus::default()
    };
    for d in s.details.into_iter().flatten() {
        let kind = d.kind.as_deref().unwrap_or("");
        if kind.ends_with("google.rpc.RetryInfo") {
            out.retry_delay = d.retry_delay.as_deref().and_then(proto_duration);
        } else if kind.ends_with("google.rpc.QuotaFailure") {
            for v in d.violations.into_iter().flatten() {
                if out.violations.len() == MAX_VIOLATIONS {
                    break;
                }
                out.violations.push(Violation {
                    quota_id: v.quota_id.map(clip),
                    quota_metric: v.quota_metric.map(clip),
                    quota_value: v.quota_value.and_then(|q| q.0),
                });
            }
        }
    }
    Ok(out)
}

/// The canonical code's name → cause, per the troubleshooting page; `None`
/// for a name it does not document.
pub(crate) fn cause_of_status(status: &str) -> Option<Cause> {
    Some(match status {
        "RESOURCE_EXHAUSTED" => Cause::RateLimited,
        // "The service may be temporarily overloaded or down": overload,
        // unrelated to the caller's quota.
        "UNAVAILABLE" => Cause::Overloaded,
        "INVALID_ARGUMENT" => Cause::InvalidRequest,
        // "Gemini API free tier is not available in your country. Please
        // enable billing": money, not the request.
        "FAILED_PRECONDITION" => Cause::Billing,
        "PERMISSION_DENIED" => Cause::Permission,
        "UNAUTHENTICATED" => Cause::Authentication,
        "NOT_FOUND" => Cause::NotFound,
        "INTERNAL" => Cause::ServerError,
        "DEADLINE_EXCEEDED" => Cause::Timeout,
        _ => return None,
    })
}

/// A protobuf JSON `Duration` ("47s", "0.5s", "47.481s"); `None` for
/// anything else, never a zero from garbage.
fn proto_duration(s: &str) -> Option<Duration> {
    let secs = s.strip_suffix('s')?;
    if secs.is_empty() || secs.len() > 24 || !secs.bytes().all(|b| b.is_ascii_digit() || b == b'.')
    {
        return None;
    }
    let v: f64 = secs.parse().ok()?;
    (v.is_finite() && v > 0.0 && v <= 86_400.0 * 366.0).then(|| Duration::from_secs_f64(v))
}

/// The next daily quota reset after `now`: midnight Pacific time, taken as
/// 08:00 UTC (midnight in standard time). In daylight time the real reset
/// is an hour earlier (07:00 UTC): waiting for 08:00 is never early, at
/// most an hour late, and needs no time-zone table.
pub(crate) fn next_daily_reset(now: SystemTime) -> SystemTime {
    const DAY: u64 = 86_400;
    const RESET: u64 = 8 * 3_600;
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let today = secs - secs % DAY + RESET;
    let next = if today > secs { today } else { today + DAY };
    UNIX_EPOCH + Duration::from_secs(next)
}

/// An array first: serde reads a one-field struct from an array too.
#[derive(Deserialize)]
#[serde(untagged)]
enum Envelope {
    Many(Vec<Wrapper>),
    One(Wrapper),
}

#[derive(Deserialize)]
struct Wrapper {
    #[serde(default)]
    error: Option<Status>,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    #[allow(dead_code)]
    code: Option<IgnoredAny>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    details: Option<Vec<Detail>>,
}

#[derive(Deserialize)]
struct Detail {
    #[serde(default, rename = "@type")]
    kind: Option<String>,
    #[serde(default, rename = "retryDelay")]
    retry_delay: Option<String>,
    #[serde(default)]
    violations: Option<Vec<RawViolation>>,
}

#[derive(Deserialize)]
struct RawViolation {
    #[serde(default, rename = "quotaId")]
    quota_id: Option<String>,
    #[serde(default, rename = "quotaMetric")]
    quota_metric: Option<String>,
    #[serde(default, rename = "quotaValue")]
    quota_value: Option<QuotaValue>,
}

/// `quotaValue` is an int64, which protobuf's JSON writes as a string;
/// a number is read too, anything else is `None`.
struct QuotaValue(Option<u64>);

impl<'de> Deserialize<'de> for QuotaValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        Ok(QuotaValue(match v {
            serde_json::Value::String(s) => s.trim().parse().ok(),
            serde_json::Value::Number(n) => n.as_u64(),
            _ => None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::codes::google_status;

    /// `google/rpc/code.proto`, each code with its `HTTP Mapping:` line.
    const CODE_PROTO: [(&str, u16); 16] = [
        ("CANCELLED", 499),           // HTTP Mapping: 499 Client Closed Request
        ("UNKNOWN", 500),             // HTTP Mapping: 500 Internal Server Error
        ("INVALID_ARGUMENT", 400),    // HTTP Mapping: 400 Bad Request
        ("DEADLINE_EXCEEDED", 504),   // HTTP Mapping: 504 Gateway Timeout
        ("NOT_FOUND", 404),           // HTTP Mapping: 404 Not Found
        ("ALREADY_EXISTS", 409),      // HTTP Mapping: 409 Conflict
        ("PERMISSION_DENIED", 403),   // HTTP Mapping: 403 Forbidden
        ("RESOURCE_EXHAUSTED", 429),  // HTTP Mapping: 429 Too Many Requests
        ("FAILED_PRECONDITION", 400), // HTTP Mapping: 400 Bad Request
        ("ABORTED", 409),             // HTTP Mapping: 409 Conflict
        ("OUT_OF_RANGE", 400),        // HTTP Mapping: 400 Bad Request
        ("UNIMPLEMENTED", 501),       // HTTP Mapping: 501 Not Implemented
        ("INTERNAL", 500),            // HTTP Mapping: 500 Internal Server Error
        ("UNAVAILABLE", 503),         // HTTP Mapping: 503 Service Unavailable
        ("DATA_LOSS", 500),           // HTTP Mapping: 500 Internal Server Error
        ("UNAUTHENTICATED", 401),     // HTTP Mapping: 401 Unauthorized
    ];

    #[test]
    fn every_status_googles_mapping_names_maps_back_to_one_of_its_codes() {
        for (_, http) in CODE_PROTO {
            let name = google_status(http);
            let back = CODE_PROTO.iter().find(|(c, _)| *c == name);
            assert_eq!(back.map(|(_, h)| *h), Some(http), "{http} -> {name}");
        }
        // Every status gets a code the proto defines.
        for http in 100..600 {
            let name = google_status(http);
            assert!(
                CODE_PROTO.iter().any(|(c, _)| *c == name),
                "{http} -> {name}"
            );
        }
    }

    const PER_MINUTE: &str = r#"{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count, limit: 1000000, model: gemini-2.0-flash\nPlease retry in 47.48s.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count","quotaId":"GenerateContentPaidTierInputTokensPerModelPerMinute","quotaDimensions":{"location":"global","model":"gemini-2.0-flash"},"quotaValue":"1000000"}]},{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"47s"}]}}"#;

    #[test]
    fn a_per_minute_quota_names_its_dimension_and_delay() {
        let s = read(PER_MINUTE.as_bytes()).unwrap();
        assert_eq!(s.status.as_deref(), Some("RESOURCE_EXHAUSTED"));
        assert_eq!(s.retry_delay, Some(Duration::from_secs(47)));
        let v = s.violation().unwrap();
        assert!(!v.per_day());
        assert_eq!(v.dimension(), Some(Dimension::InputTokens));
        assert_eq!(v.quota_value, Some(1_000_000));
        assert!(!s.quota_not_granted());
    }

    #[test]
    fn the_openai_compatible_array_and_garbage() {
        let wrapped = format!("[{PER_MINUTE}]");
        assert_eq!(
            read(wrapped.as_bytes()).unwrap(),
            read(PER_MINUTE.as_bytes()).unwrap()
        );
        assert_eq!(read(b"  "), Err(Unreadable::Empty));
        assert_eq!(read(b"<html>"), Err(Unreadable::NotJson));
        assert_eq!(read(b"[]"), Err(Unreadable::NoErrorObject));
        assert_eq!(read(br#"{"x":1}"#), Err(Unreadable::NoErrorObject));
        for bad in [
            "",
            "s",
            "-1s",
            "abc",
            "1e9s",
            "0s",
            "1.5",
            "NaNs",
            "99999999999999999999s",
        ] {
            assert_eq!(proto_duration(bad), None, "{bad}");
        }
        assert_eq!(proto_duration("0.5s"), Some(Duration::from_millis(500)));
    }

    #[test]
    fn limit_zero_is_a_quota_not_granted() {
        let m = r#"{"error":{"code":429,"message":"Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 0, model: gemini-2.5-pro\nPlease retry in 25.46s.","status":"RESOURCE_EXHAUSTED"}}"#;
        assert!(read(m.as_bytes()).unwrap().quota_not_granted());
        let ten = m.replace("limit: 0,", "limit: 10,");
        assert!(!read(ten.as_bytes()).unwrap().quota_not_granted());
    }

    #[test]
    fn the_daily_reset_is_the_next_eight_utc() {
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        // 2026-12-03 21:00 UTC → 2026-12-04 08:00 UTC.
        let now = at(1_796_331_600);
        let next = next_daily_reset(now);
        assert_eq!(
            next.duration_since(now).unwrap(),
            Duration::from_secs(11 * 3600)
        );
        // At 07:59:59 UTC: one second.
        let day = 1_796_331_600 - 21 * 3600;
        assert_eq!(next_daily_reset(at(day + 8 * 3600 - 1)), at(day + 8 * 3600));
        assert_eq!(
            next_daily_reset(at(day + 8 * 3600)),
            at(day + 86_400 + 8 * 3600)
        );
    }

    #[test]
    fn a_per_day_quota_waits_for_the_reset_not_the_delay_beside_it() {
        use crate::classify::{classify_response, ResponseView};
        use crate::parse::retry_after::HintSource;
        use crate::vocab::Provider;
        let day = PER_MINUTE
            .replace(
                "GenerateContentPaidTierInputTokensPerModelPerMinute",
                "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
            )
            .replace(
                "generate_content_paid_tier_input_token_count",
                "generate_content_free_tier_requests",
            );
        let headers = http::HeaderMap::new();
        let view = |body: &'static [u8]| ResponseView {
            status: http::StatusCode::TOO_MANY_REQUESTS,
            headers: &headers,
            body,
        };
        // 2026-12-03 21:00 UTC: the reset is 11 h away.
        let now = UNIX_EPOCH + Duration::from_secs(1_796_331_600);
        let day: &'static str = Box::leak(day.into_boxed_str());
        let c = classify_response(Provider::Gemini, &view(day.as_bytes()), now);
        assert_eq!(c.cause, Cause::RateLimited);
        assert_eq!(c.dimension, Some(Dimension::Requests));
        let hint = c.hints.wait.unwrap();
        assert_eq!(hint.source, HintSource::QuotaReset);
        assert_eq!(hint.wait, Duration::from_secs(11 * 3600));
        assert_eq!(c.hints.resume_at, Some(now + hint.wait));
        // A per-day quota's value is not a per-minute limit.
        assert_eq!(c.hints.ratelimit.requests.limit, None);
        // Per minute: never shorter than the message's precise 47.48 s
        // (issue #47: a retry at the structured 47 s, truncated to whole
        // seconds, came before the quota had room and met a 429 again).
        let c = classify_response(Provider::Gemini, &view(PER_MINUTE.as_bytes()), now);
        let hint = c.hints.wait.unwrap();
        assert_eq!(
            (hint.source, hint.wait),
            (HintSource::Message, Duration::from_millis(47_480))
        );
        // Its `quotaValue` is the stated per-minute limit of its dimension.
        assert_eq!(c.hints.ratelimit.input_tokens.limit, Some(1_000_000));
        assert_eq!(c.hints.ratelimit.requests.limit, None);
        // A precise delay shorter than RetryInfo's leaves RetryInfo's.
        let shorter: &'static str =
            Box::leak(PER_MINUTE.replace("47.48s", "46.2s").into_boxed_str());
        let c = classify_response(Provider::Gemini, &view(shorter.as_bytes()), now);
        let hint = c.hints.wait.unwrap();
        assert_eq!(
            (hint.source, hint.wait),
            (HintSource::RetryInfo, Duration::from_secs(47))
        );
        // Detected from the body alone.
        assert_eq!(
            crate::classify::detect_provider(&headers, PER_MINUTE.as_bytes()),
            Provider::Gemini
        );
    }
}
