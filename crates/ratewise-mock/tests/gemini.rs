//! The Gemini surface over loopback: routes, keys, bodies, streams, and
//! every 429 read back through ratewise-core's Gemini profile.

mod common;
use common::*;
use http::{HeaderMap, StatusCode};
use ratewise_core::classify::{classify_response, Classification, ResponseView};
use ratewise_core::parse::body::parse_usage;
use ratewise_core::parse::retry_after::HintSource;
use ratewise_core::{Cause, Dimension, Provider, Scope};
use ratewise_mock::{
    Fault, FaultRule, GeminiConfig, Limits, MockConfig, MockServer, INPUT_TOKENS_HEADER,
};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

const KEY: &str = "AIza-mock-key-1";

fn body(text: &str, max: Option<u64>) -> Value {
    let mut v = json!({"contents": [{"role": "user", "parts": [{"text": text}]}]});
    if let Some(m) = max {
        v["generationConfig"] = json!({"maxOutputTokens": m});
    }
    v
}

fn generate(model: &str) -> String {
    format!("/v1beta/models/{model}:generateContent")
}

/// POST with the key in `x-goog-api-key`.
async fn gemini(server: &MockServer, path: &str, body: &Value) -> Reply {
    post(server, path, "", body, &[("x-goog-api-key", KEY)]).await
}

fn classify(r: &Reply) -> Classification {
    classify_response(
        Provider::Gemini,
        &ResponseView {
            status: StatusCode::from_u16(r.status).unwrap(),
            headers: &r.headers,
            body: &r.body,
        },
        SystemTime::now(),
    )
}

fn config(limits: Limits) -> MockConfig {
    MockConfig {
        gemini_limits: limits,
        ..MockConfig::default()
    }
}

fn rpm(n: u64) -> Limits {
    Limits {
        requests_per_minute: Some(n),
        ..Limits::default()
    }
}

/// The details of a `google.rpc.Status` by `@type` suffix.
fn detail<'a>(v: &'a Value, kind: &str) -> &'a Value {
    v["error"]["details"]
        .as_array()
        .expect("details")
        .iter()
        .find(|d| d["@type"].as_str().unwrap().ends_with(kind))
        .unwrap_or_else(|| panic!("no {kind} in {v}"))
}

/// `RetryInfo.retryDelay` and the message's "Please retry in …", seconds.
fn waits(v: &Value) -> (f64, f64) {
    let delay = detail(v, "google.rpc.RetryInfo")["retryDelay"]
        .as_str()
        .unwrap();
    let delay: f64 = delay.strip_suffix('s').unwrap().parse().unwrap();
    assert_eq!(delay.fract(), 0.0, "whole seconds");
    let msg = v["error"]["message"].as_str().unwrap();
    let said = msg.rsplit("Please retry in ").next().unwrap();
    let said: f64 = said.strip_suffix("s.").unwrap().parse().unwrap();
    (delay, said)
}

fn assert_no_ratelimit_headers(h: &HeaderMap) {
    for (name, _) in h {
        let n = name.as_str();
        assert!(
            !n.contains("ratelimit") && n != "retry-after" && n != "x-should-retry",
            "{n}"
        );
    }
}

/// SSE events of a Gemini stream (`\r\n\r\n`-separated `data:` lines).
fn events(r: &Reply) -> Vec<Value> {
    r.text()
        .split("\r\n\r\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| serde_json::from_str(e.strip_prefix("data: ").expect("data: event")).unwrap())
        .collect()
}

#[tokio::test]
async fn gemini_answers_carry_no_ratelimit_headers() {
    let mut c = config(rpm(2));
    c.gemini.requests_per_day = Some(3);
    c.gemini.limit_zero_models = vec!["gemini-2.5-pro".into()];
    let s = MockServer::start(c).await.unwrap();
    let m = generate("gemini-2.0-flash");
    let ok = gemini(&s, &m, &body("hi", None)).await;
    assert_eq!(ok.status, 200);
    assert_no_ratelimit_headers(&ok.headers);
    let stream = gemini(
        &s,
        "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse",
        &body("hi", None),
    )
    .await;
    assert_eq!(stream.status, 200);
    assert_no_ratelimit_headers(&stream.headers);
    let limited = gemini(&s, &m, &body("hi", None)).await;
    assert_eq!(limited.status, 429);
    assert_no_ratelimit_headers(&limited.headers);
    let zero = gemini(&s, &generate("gemini-2.5-pro"), &body("hi", None)).await;
    assert_eq!(zero.status, 429);
    assert_no_ratelimit_headers(&zero.headers);
    // not even when a client asks for the documented headers of the others
    assert_eq!(MockConfig::default().silent, ratewise_mock::Silent::Off);
    s.shutdown().await;
}

#[tokio::test]
async fn gemini_requests_429_names_its_quota_and_classifies_as_requests() {
    let s = MockServer::start(config(rpm(1))).await.unwrap();
    let m = generate("gemini-2.0-flash");
    assert_eq!(gemini(&s, &m, &body("hi", None)).await.status, 200);
    let r = gemini(&s, &m, &body("hi", None)).await;
    assert_eq!(r.status, 429);
    assert_eq!(
        r.header("content-type"),
        Some("application/json; charset=UTF-8")
    );
    let v = r.json();
    assert_eq!(v["error"]["code"], 429);
    assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with(
            "You exceeded your current quota, please check your plan and billing details."
        ),
        "{msg}"
    );
    assert!(msg.contains("Quota exceeded for metric: generativelanguage.googleapis.com/generate_requests_per_model, limit: 1, model: gemini-2.0-flash"), "{msg}");
    let violation = &detail(&v, "google.rpc.QuotaFailure")["violations"][0];
    assert_eq!(
        violation["quotaId"],
        "GenerateRequestsPerMinutePerProjectPerModel"
    );
    assert_eq!(
        violation["quotaMetric"],
        "generativelanguage.googleapis.com/generate_requests_per_model"
    );
    assert_eq!(violation["quotaDimensions"]["model"], "gemini-2.0-flash");
    assert_eq!(violation["quotaValue"], "1");
    assert_eq!(
        detail(&v, "google.rpc.Help")["links"][0]["url"],
        "https://ai.google.dev/gemini-api/docs/rate-limits"
    );
    // ratewise-core reads it as Gemini's per-minute requests quota
    let c = classify(&r);
    assert_eq!(c.cause, Cause::RateLimited);
    assert_eq!(c.dimension, Some(Dimension::Requests));
    let hint = c.hints.wait.unwrap();
    assert_eq!(hint.source, HintSource::RetryInfo);
    assert_eq!(hint.wait, Duration::from_secs(60));
    let rec = s.records().pop().unwrap();
    assert_eq!((rec.provider, rec.status), (Provider::Gemini, Some(429)));
    assert_eq!(
        (rec.cause, rec.dimension),
        (Cause::RateLimited, Some(Dimension::Requests))
    );
    s.shutdown().await;
}

#[tokio::test]
async fn gemini_input_tokens_429_names_its_quota() {
    let s = MockServer::start(config(Limits {
        requests_per_minute: Some(1000),
        input_tokens_per_minute: Some(100),
        ..Limits::default()
    }))
    .await
    .unwrap();
    let m = generate("gemini-2.0-flash");
    let heavy = [(INPUT_TOKENS_HEADER, "80"), ("x-goog-api-key", KEY)];
    assert_eq!(post(&s, &m, "", &body("a", None), &heavy).await.status, 200);
    let r = post(&s, &m, "", &body("b", None), &heavy).await;
    assert_eq!(r.status, 429);
    let v = r.json();
    let violation = &detail(&v, "google.rpc.QuotaFailure")["violations"][0];
    assert_eq!(
        violation["quotaId"],
        "GenerateContentInputTokensPerModelPerMinute"
    );
    assert_eq!(
        violation["quotaMetric"],
        "generativelanguage.googleapis.com/generate_content_input_token_count"
    );
    assert_eq!(violation["quotaValue"], "100");
    let c = classify(&r);
    assert_eq!(c.cause, Cause::RateLimited);
    assert_eq!(c.dimension, Some(Dimension::InputTokens));
    // output is not limited: a large maxOutputTokens changes nothing
    let other = MockServer::start(config(Limits {
        input_tokens_per_minute: Some(100),
        ..Limits::default()
    }))
    .await
    .unwrap();
    for _ in 0..3 {
        let r = gemini(&other, &m, &body("c", Some(1_000_000))).await;
        assert_eq!(r.status, 200);
    }
    other.shutdown().await;
    s.shutdown().await;
}

#[tokio::test]
async fn gemini_retry_delay_is_the_real_wait_rounded_up() {
    // a provider minute of 6 real seconds: RPM 1 refills in 6 s
    let c = MockConfig {
        seconds_per_minute: 6.0,
        ..config(rpm(1))
    };
    let s = MockServer::start(c).await.unwrap();
    let m = generate("gemini-2.0-flash");
    assert_eq!(gemini(&s, &m, &body("hi", None)).await.status, 200);
    tokio::time::sleep(Duration::from_millis(1_250)).await;
    let r = gemini(&s, &m, &body("hi", None)).await;
    assert_eq!(r.status, 429);
    let (delay, said) = waits(&r.json());
    // the message says the exact real wait (to the millisecond), the
    // structured delay the same rounded up to whole seconds
    assert!(said > 4.0 && said < 4.8, "{said}");
    assert_eq!(delay, said.ceil());
    // waiting the retryDelay is enough
    tokio::time::sleep(Duration::from_secs_f64(delay)).await;
    assert_eq!(gemini(&s, &m, &body("hi", None)).await.status, 200);
    s.shutdown().await;
}

#[tokio::test]
async fn gemini_per_day_quota_is_named_and_its_delay_is_small() {
    let c = MockConfig {
        gemini: GeminiConfig {
            requests_per_day: Some(2),
            ..GeminiConfig::default()
        },
        ..config(rpm(1000))
    };
    let s = MockServer::start(c).await.unwrap();
    let m = generate("gemini-2.0-flash");
    for _ in 0..2 {
        assert_eq!(gemini(&s, &m, &body("hi", None)).await.status, 200);
    }
    let r = gemini(&s, &m, &body("hi", None)).await;
    assert_eq!(r.status, 429);
    let v = r.json();
    let violation = &detail(&v, "google.rpc.QuotaFailure")["violations"][0];
    assert_eq!(
        violation["quotaId"],
        "GenerateRequestsPerDayPerProjectPerModel"
    );
    assert_eq!(violation["quotaValue"], "2");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("limit: 2, model: gemini-2.0-flash"), "{msg}");
    // a small delay beside a daily quota, as Google gives
    let (delay, said) = waits(&v);
    assert!(delay <= 60.0 && said <= delay, "{delay} {said}");
    // the core waits for the daily reset instead
    let c = classify(&r);
    assert_eq!(c.cause, Cause::RateLimited);
    assert_eq!(c.dimension, Some(Dimension::Requests));
    assert_eq!(c.hints.wait.unwrap().source, HintSource::QuotaReset);
    // per model: another model still answers; refusals do not count
    assert_eq!(
        gemini(&s, &generate("gemini-2.5-flash"), &body("hi", None))
            .await
            .status,
        200
    );
    let rec = s.records().into_iter().nth(2).unwrap();
    assert_eq!(
        (rec.cause, rec.dimension),
        (Cause::RateLimited, Some(Dimension::Requests))
    );
    s.shutdown().await;
}

#[tokio::test]
async fn gemini_limit_zero_model_is_a_permission_never_retried() {
    let mut c = MockConfig::default();
    c.gemini.limit_zero_models = vec!["gemini-2.5-pro".into()];
    let s = MockServer::start(c).await.unwrap();
    for _ in 0..3 {
        let r = gemini(&s, &generate("gemini-2.5-pro"), &body("hi", None)).await;
        assert_eq!(r.status, 429);
        let v = r.json();
        assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("limit: 0, model: gemini-2.5-pro"), "{msg}");
        assert!(msg.ends_with("Please retry in 25.46s."), "{msg}");
        let c = classify(&r);
        assert_eq!(c.cause, Cause::Permission);
        // The model's on this key: its class stops, not the whole key.
        assert_eq!(c.scope, Scope::Bucket);
        assert!(!c.cause.is_retryable());
        assert_eq!(c.hints.wait, None);
    }
    assert!(s.records().iter().all(|r| r.cause == Cause::Permission));
    // other models are served
    let ok = gemini(&s, &generate("gemini-2.5-flash"), &body("hi", None)).await;
    assert_eq!(ok.status, 200);
    s.shutdown().await;
}

#[tokio::test]
async fn gemini_usage_is_in_the_answer_and_the_last_stream_chunk() {
    let s = MockServer::start(MockConfig::default()).await.unwrap();
    let extra = [(INPUT_TOKENS_HEADER, "123"), ("x-goog-api-key", KEY)];
    let r = post(
        &s,
        &generate("gemini-2.0-flash"),
        "",
        &body("hi", None),
        &extra,
    )
    .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    let rec = s.records().pop().unwrap();
    assert_eq!(v["usageMetadata"]["promptTokenCount"], 123);
    assert_eq!(
        v["usageMetadata"]["candidatesTokenCount"],
        rec.output_tokens
    );
    assert_eq!(
        v["usageMetadata"]["totalTokenCount"],
        123 + rec.output_tokens
    );
    assert_eq!(v["candidates"][0]["content"]["role"], "model");
    assert_eq!(v["candidates"][0]["finishReason"], "STOP");
    assert!(v["responseId"].is_string() && v["modelVersion"] == "gemini-2.0-flash");
    let text = v["candidates"][0]["content"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert_eq!(text.split(' ').count() as u64, rec.output_tokens);
    let u = parse_usage(&r.body).unwrap();
    assert_eq!((u.input_tokens, u.output_tokens), (123, rec.output_tokens));

    let path = "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse";
    let r = post(&s, path, "", &body("hi", None), &extra).await;
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let rec = s.records().pop().unwrap();
    assert!(rec.stream);
    let ev = events(&r);
    assert!(ev.len() >= 2, "{}", r.text());
    let last = ev.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert_eq!(last["usageMetadata"]["promptTokenCount"], 123);
    assert_eq!(
        last["usageMetadata"]["candidatesTokenCount"],
        rec.output_tokens
    );
    let u = parse_usage(last.to_string().as_bytes()).unwrap();
    assert_eq!((u.input_tokens, u.output_tokens), (123, rec.output_tokens));
    assert!(ev[..ev.len() - 1]
        .iter()
        .all(|e| e["candidates"][0].get("finishReason").is_none()));
    let streamed: String = ev
        .iter()
        .map(|e| {
            e["candidates"][0]["content"]["parts"][0]["text"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(streamed.split(' ').count() as u64, rec.output_tokens);

    // without alt=sse: one JSON array of the same chunks
    let path = "/v1beta/models/gemini-2.0-flash:streamGenerateContent";
    let r = post(&s, path, "", &body("hi", None), &extra).await;
    assert_eq!(
        r.header("content-type"),
        Some("application/json; charset=UTF-8")
    );
    let arr = r.json();
    let arr = arr.as_array().unwrap();
    assert!(arr.len() >= 2);
    assert!(
        arr.last().unwrap()["usageMetadata"]["totalTokenCount"]
            .as_u64()
            .unwrap()
            > 123
    );
    s.shutdown().await;
}

#[tokio::test]
async fn gemini_key_from_header_or_query() {
    let s = MockServer::start(MockConfig::default()).await.unwrap();
    let m = generate("gemini-2.0-flash");
    let by_header = gemini(&s, &m, &body("hi", None)).await;
    assert_eq!(by_header.status, 200);
    let by_query = post(&s, &format!("{m}?key={KEY}"), "", &body("hi", None), &[]).await;
    assert_eq!(by_query.status, 200);
    let sse = format!("/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse&key={KEY}");
    assert_eq!(post(&s, &sse, "", &body("hi", None), &[]).await.status, 200);
    let v1 = post(
        &s,
        &format!("/v1/models/gemini-2.0-flash:generateContent?key={KEY}"),
        "",
        &body("hi", None),
        &[],
    )
    .await;
    assert_eq!(v1.status, 200);
    let recs = s.records();
    assert_eq!(recs.len(), 4);
    assert!(recs
        .iter()
        .all(|r| r.key == recs[0].key && r.key.starts_with("k:")));
    // the key itself is never recorded
    assert!(!serde_json::to_string(&recs).unwrap().contains(KEY));
    // no key: Google's 403
    let none = post(&s, &m, "", &body("hi", None), &[]).await;
    assert_eq!(none.status, 403);
    assert_eq!(none.json()["error"]["status"], "PERMISSION_DENIED");
    assert_eq!(classify(&none).cause, Cause::Permission);
    // another provider's header is not Gemini's
    let other = post(&s, &m, "sk-ant", &body("hi", None), &[]).await;
    assert_eq!(other.status, 403);
    s.shutdown().await;
}

#[tokio::test]
async fn gemini_wrong_path_is_a_google_404() {
    let s = MockServer::start(MockConfig::default()).await.unwrap();
    for path in [
        "/v1beta/models/gemini-2.0-flash:countTokens",
        "/v1beta/models/gemini-2.0-flash",
        "/v1beta/models/a/b:generateContent",
        "/v1beta/files",
    ] {
        let r = gemini(&s, path, &body("hi", None)).await;
        assert_eq!(r.status, 404, "{path}");
        let v = r.json();
        assert_eq!(v["error"]["code"], 404);
        assert_eq!(v["error"]["status"], "NOT_FOUND");
        assert_eq!(classify(&r).cause, Cause::NotFound);
    }
    s.shutdown().await;
}

#[tokio::test]
async fn gemini_overload_is_503_unavailable() {
    let c = MockConfig {
        faults: vec![FaultRule {
            provider: Some(Provider::Gemini),
            ..FaultRule::always(Fault::Overloaded)
        }],
        ..MockConfig::default()
    };
    let s = MockServer::start(c).await.unwrap();
    let r = gemini(&s, &generate("gemini-2.0-flash"), &body("hi", None)).await;
    assert_eq!(r.status, 503);
    let v = r.json();
    assert_eq!(v["error"]["status"], "UNAVAILABLE");
    assert_eq!(
        v["error"]["message"],
        "The model is overloaded. Please try again later."
    );
    assert_eq!(classify(&r).cause, Cause::Overloaded);
    assert_eq!(s.records()[0].status, Some(503));
    // the other providers keep their own overload answers
    let a = anthropic(&s, &anthropic_body("hi", 10, false)).await;
    assert_eq!(a.status, 200);
    // an in-band stream error is Google's status object in a data: event
    s.set_faults(vec![FaultRule::always(Fault::StreamError {
        after_events: 1,
    })]);
    let path = "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse";
    let r = gemini(&s, path, &body("hi", None)).await;
    let ev = events(&r);
    assert_eq!(ev.len(), 2);
    assert_eq!(ev[1]["error"]["status"], "UNAVAILABLE");
    s.shutdown().await;
}

#[tokio::test]
async fn gemini_bad_bodies_are_400_invalid_argument() {
    let s = MockServer::start(MockConfig::default()).await.unwrap();
    let m = generate("gemini-2.0-flash");
    for bad in [
        &b"{"[..],
        b"[]",
        b"\xff\xfe",
        br#"{"contents": []}"#,
        br#"{"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {"maxOutputTokens": 0}}"#,
        br#"{"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {"maxOutputTokens": 1e99}}"#,
    ] {
        let r = post_raw(&s, &m, "", bad.to_vec(), &[("x-goog-api-key", KEY)]).await;
        assert_eq!(r.status, 400, "{bad:?}");
        assert_eq!(r.json()["error"]["status"], "INVALID_ARGUMENT");
        assert_eq!(classify(&r).cause, Cause::InvalidRequest);
    }
    s.shutdown().await;
}

#[tokio::test]
async fn gemini_max_output_tokens_defaults_to_8192() {
    let s = MockServer::start(MockConfig {
        output_tokens: ratewise_mock::OutputRange { min: 20, max: 20 },
        ..MockConfig::default()
    })
    .await
    .unwrap();
    let m = generate("gemini-2.0-flash");
    assert_eq!(gemini(&s, &m, &body("hi", None)).await.status, 200);
    assert_eq!(s.records()[0].max_tokens, 8192);
    let r = gemini(&s, &m, &body("hi", Some(3))).await;
    let v = r.json();
    assert_eq!(v["usageMetadata"]["candidatesTokenCount"], 3);
    assert_eq!(v["candidates"][0]["finishReason"], "MAX_TOKENS");
    s.shutdown().await;
}

#[test]
fn gemini_daily_quota_ends_with_the_provider_day() {
    use ratewise_core::Instant;
    use ratewise_mock::model::{Outcome, ProviderModel, RequestMeta};
    let c = MockConfig {
        gemini: GeminiConfig {
            requests_per_day: Some(1),
            ..GeminiConfig::default()
        },
        ..MockConfig::default()
    };
    let mut m = ProviderModel::new(&c);
    let meta = RequestMeta::new(Provider::Gemini, "k", "gemini-2.0-flash", 10, 100, 5);
    let t = Instant::from_millis(3_600_000 + 15_500);
    assert!(matches!(m.handle(&meta, t).outcome, Outcome::Success(_)));
    let a = m.handle(&meta, t);
    assert_eq!(
        a.outcome,
        Outcome::DailyQuota {
            limit: 1,
            retry_after: Duration::from_millis(44_500)
        }
    );
    // the oracle waits for the next provider day, and it is admitted then
    let next_day = Instant::from_millis(86_400_000);
    assert_eq!(m.admission_at(&meta, t), next_day);
    assert!(matches!(
        m.handle(&meta, next_day).outcome,
        Outcome::Success(_)
    ));
    // the other providers have no daily quota
    let mut a = RequestMeta::new(Provider::Anthropic, "k", "claude-sonnet-4-5", 10, 100, 5);
    a.stream = false;
    for _ in 0..3 {
        assert!(matches!(m.handle(&a, t).outcome, Outcome::Success(_)));
    }
}

#[tokio::test]
async fn gemini_billing_is_400_failed_precondition() {
    let s = MockServer::start(MockConfig::default()).await.unwrap();
    s.set_billing_error(true);
    let r = gemini(&s, &generate("gemini-2.0-flash"), &body("hi", None)).await;
    assert_eq!(r.status, 400);
    let v = r.json();
    assert_eq!(v["error"]["status"], "FAILED_PRECONDITION");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Gemini API free tier is not available in your country."));
    assert_eq!(classify(&r).cause, Cause::Billing);
    assert_eq!(s.records()[0].status, Some(400));
    s.shutdown().await;
}
