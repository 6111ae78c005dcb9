//! The attempt record is an allow-list: whatever a response carries, only
//! the allowed evidence reaches the serialised record.

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use ratewise_core::classify::{classify_response, ResponseView};
use ratewise_core::decide::{decide, JobState, Policy};
use ratewise_core::record::AttemptRecord;
use ratewise_core::time::parse_rfc3339;
use ratewise_core::{Instant, Now, Provider, Usage};

#[test]
fn secrets_in_a_response_never_reach_the_record() {
    let mut headers = HeaderMap::new();
    for (k, v) in [
        ("set-cookie", "session=SECRET-COOKIE"),
        ("authorization", "Bearer sk-SECRET-BEARER"),
        ("x-api-key", "sk-ant-SECRET-KEY"),
        ("request-id", "req_123"),
        ("retry-after", "4"),
        ("anthropic-ratelimit-requests-remaining", "0"),
    ] {
        headers.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
    }
    let body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"requests per minute; your prompt was: SECRET-PROMPT"},"request_id":"req_123"}"#;
    let wall = parse_rfc3339("2026-11-29T12:00:00Z").unwrap();
    let view = ResponseView {
        status: StatusCode::TOO_MANY_REQUESTS,
        headers: &headers,
        body,
    };
    let c = classify_response(Provider::Anthropic, &view, wall);
    let d = decide(
        &Policy::default(),
        &JobState::new(1, Instant::ZERO, None),
        &c,
        Now::new(Instant::ZERO, wall),
        &mut fastrand::Rng::with_seed(1),
    );
    let record = AttemptRecord::new(wall, Some("job-7"), 1, &c, &d).with_usage(Usage::default());
    let json = serde_json::to_string(&record).unwrap();
    for secret in ["SECRET", "sk-", "session=", "Bearer", "prompt"] {
        assert!(!json.contains(secret), "{secret} leaked into {json}");
    }
    // ... while the evidence that is allowed is all there.
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["time_utc"], "2026-11-29T12:00:00Z");
    assert_eq!(v["job_id"], "job-7");
    assert_eq!(v["status"], 429);
    assert_eq!(v["request_id"], "req_123");
    assert_eq!(v["error_type"], "rate_limit_error");
    assert_eq!(v["hint_ms"], 4000);
    assert_eq!(v["hint_source"], "retry-after");
    assert_eq!(v["cause"], "rate_limited");
    assert_eq!(v["action"], "retry");
    assert_eq!(v["dimension"], "requests");
    assert_eq!(v["ratelimit"][0]["dimension"], "requests");
    assert_eq!(v["ratelimit"][0]["remaining"], 0);
    assert!(v["delay_ms"].as_u64().unwrap() >= 4000);
}
