//! The OpenAI surface's flavors over loopback (`MockConfig::flavor`): each
//! provider's answers provoked, their status, headers and bodies checked,
//! and every error read back through ratewise-core's profile of that
//! provider, which must find the cause its own decision cases expect.

mod common;
use common::*;
use http::StatusCode;
use ratewise_core::classify::{classify_response, Classification, ResponseView};
use ratewise_core::parse::duration::parse_go_duration;
use ratewise_core::parse::retry_after::HintSource;
use ratewise_core::{Cause, Provider, Scope};
use ratewise_mock::{
    Fault, FaultRule, Flavor, LatencyConfig, Limits, MockConfig, MockServer, OutputRange,
    INPUT_TOKENS_HEADER,
};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

const KEY: &str = "sk-compatible-test";

fn config(flavor: Flavor, limits: Limits) -> MockConfig {
    MockConfig {
        flavor,
        openai_limits: limits,
        ..MockConfig::default()
    }
}

fn rpm(n: u64) -> Limits {
    Limits {
        requests_per_minute: Some(n),
        ..Limits::default()
    }
}

fn tpm(n: u64) -> Limits {
    Limits {
        tokens_per_minute: Some(n),
        ..Limits::default()
    }
}

fn body(max_tokens: u64, stream: bool) -> Value {
    openai_body("hello there", max_tokens, stream)
}

async fn chat(s: &MockServer, body: &Value) -> Reply {
    post(s, "/v1/chat/completions", KEY, body, &[]).await
}

/// A chat request whose input is `input` tokens.
async fn chat_tokens(s: &MockServer, input: u64, max_tokens: u64) -> Reply {
    let n = input.to_string();
    post(
        s,
        "/v1/chat/completions",
        KEY,
        &body(max_tokens, false),
        &[(INPUT_TOKENS_HEADER, n.as_str())],
    )
    .await
}

fn classify(p: Provider, r: &Reply) -> Classification {
    classify_response(
        p,
        &ResponseView {
            status: StatusCode::from_u16(r.status).unwrap(),
            headers: &r.headers,
            body: &r.body,
        },
        SystemTime::now(),
    )
}

fn ratelimit_names(r: &Reply) -> Vec<String> {
    r.headers
        .keys()
        .map(|n| n.as_str().to_owned())
        .filter(|n| n.contains("ratelimit"))
        .collect()
}

fn message(r: &Reply) -> String {
    r.json()["error"]["message"].as_str().unwrap().to_owned()
}

// ---------------------------------------------------------------- Azure

const DEPLOYMENT: &str = "/openai/deployments/gpt4o-prod/chat/completions?api-version=2024-10-21";

async fn azure(s: &MockServer, body: &Value) -> Reply {
    post(s, DEPLOYMENT, "", body, &[("api-key", KEY)]).await
}

fn azure_body() -> Value {
    json!({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 50})
}

#[tokio::test]
async fn azure_deployment_route_and_api_key() {
    let s = MockServer::start(config(Flavor::Azure, rpm(10)))
        .await
        .unwrap();
    let ok = azure(&s, &azure_body()).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.header("x-ratelimit-remaining-requests"), Some("9"));
    assert_eq!(ok.header("x-ratelimit-limit-requests"), None);
    // The deployment is the model (and its bucket class).
    assert_eq!(s.records()[0].model, "gpt4o-prod");
    // A Bearer token works too; no key at all is a 401.
    let bearer = post(
        &s,
        "/openai/deployments/gpt4o-prod/chat/completions",
        KEY,
        &azure_body(),
        &[],
    )
    .await;
    assert_eq!(bearer.status, 200);
    let none = post(&s, DEPLOYMENT, "", &azure_body(), &[]).await;
    assert_eq!(none.status, 401);
    // Only the Azure flavor has the route.
    let plain = MockServer::start(MockConfig::default()).await.unwrap();
    assert_eq!(
        post(&plain, DEPLOYMENT, "", &azure_body(), &[("api-key", KEY)])
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn azure_429_says_retry_after_in_seconds_and_ms() {
    let s = MockServer::start(config(Flavor::Azure, rpm(1)))
        .await
        .unwrap();
    assert_eq!(azure(&s, &azure_body()).await.status, 200);
    let r = azure(&s, &azure_body()).await;
    assert_eq!(r.status, 429);
    let v = r.json();
    assert_eq!(v["error"]["code"], "429");
    let msg = message(&r);
    assert!(
        msg.starts_with("Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded call rate limit"),
        "{msg}"
    );
    let secs: u64 = r.header("retry-after").unwrap().parse().unwrap();
    let ms: u64 = r.header("retry-after-ms").unwrap().parse().unwrap();
    assert!((1..=60).contains(&secs) && ms <= secs * 1000 && ms > (secs - 1) * 1000);
    assert!(
        msg.contains(&format!("Please retry after {secs} seconds.")),
        "{msg}"
    );
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
    let c = classify(Provider::Azure, &r);
    assert_eq!(c.cause, Cause::RateLimited, "{c:?}");
}

#[tokio::test]
async fn azure_daily_quota_says_86400_seconds() {
    let mut cfg = config(Flavor::Azure, rpm(100));
    cfg.compatible.requests_per_day = Some(1);
    let s = MockServer::start(cfg).await.unwrap();
    assert_eq!(azure(&s, &azure_body()).await.status, 200);
    let r = azure(&s, &azure_body()).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("86400"));
    assert_eq!(r.header("retry-after-ms"), Some("86400000"));
    assert!(message(&r).contains("Please retry after 86400 seconds."));
    let c = classify(Provider::Azure, &r);
    assert_eq!(c.cause, Cause::RateLimited, "{c:?}");
    assert!(c.hints.wait.unwrap().wait >= Duration::from_secs(86_400));
}

#[tokio::test]
async fn azure_content_filter_is_400_invalid_request() {
    let mut cfg = config(Flavor::Azure, rpm(100));
    cfg.compatible.content_filter_marker = Some("FILTER-ME".into());
    let s = MockServer::start(cfg).await.unwrap();
    let b = json!({"messages": [{"role": "user", "content": "please FILTER-ME now"}]});
    let r = azure(&s, &b).await;
    assert_eq!(r.status, 400);
    let e = &r.json()["error"];
    assert_eq!(e["code"], "content_filter");
    assert_eq!(e["param"], "prompt");
    assert_eq!(e["status"], 400);
    assert!(e["type"].is_null());
    assert!(e["message"].as_str().unwrap().starts_with(
        "The response was filtered due to the prompt triggering Azure OpenAI's content management policy."
    ));
    let c = classify(Provider::Azure, &r);
    assert_eq!(c.cause, Cause::InvalidRequest, "{c:?}");
    assert_eq!(s.records()[0].cause, Cause::InvalidRequest);
    // Without the marker the same deployment answers.
    assert_eq!(azure(&s, &azure_body()).await.status, 200);
}

// ----------------------------------------------------------------- Groq

#[tokio::test]
async fn groq_requests_headers_are_per_day_and_tokens_per_minute() {
    let mut cfg = config(Flavor::Groq, tpm(6000));
    cfg.compatible.requests_per_day = Some(14_400);
    let s = MockServer::start(cfg).await.unwrap();
    let r = chat_tokens(&s, 100, 200).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-ratelimit-limit-requests"), Some("14400"));
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("14399"));
    let day = parse_go_duration(r.header("x-ratelimit-reset-requests").unwrap()).unwrap();
    assert!(day > Duration::from_secs(86_000) && day <= Duration::from_secs(86_400));
    assert_eq!(r.header("x-ratelimit-limit-tokens"), Some("6000"));
    assert_eq!(r.header("x-ratelimit-remaining-tokens"), Some("5700"));
    assert!(r.header("x-ratelimit-reset-tokens").is_some());
    assert_eq!(r.header("retry-after"), None, "retry-after on 429s only");
}

#[tokio::test]
async fn groq_request_larger_than_tpm_is_413_request_too_large() {
    let s = MockServer::start(config(Flavor::Groq, tpm(6000)))
        .await
        .unwrap();
    let r = chat_tokens(&s, 5000, 2000).await;
    assert_eq!(r.status, 413);
    let e = &r.json()["error"];
    assert_eq!(e["type"], "tokens");
    assert_eq!(e["code"], "rate_limit_exceeded");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.starts_with("Request too large for model `gpt-4o-mini` in organization `org_"));
    assert!(msg.contains("on tokens per minute (TPM): Limit 6000, Requested 7000, please reduce your message size and try again."));
    let c = classify(Provider::Groq, &r);
    assert_eq!(c.cause, Cause::RequestTooLarge, "{c:?}");
    assert_eq!(s.records()[0].cause, Cause::RequestTooLarge);
    // One that fits is answered.
    assert_eq!(chat_tokens(&s, 5000, 1000).await.status, 200);
}

#[tokio::test]
async fn groq_per_day_exhausted_defers_to_quota_reset() {
    let mut cfg = config(Flavor::Groq, tpm(6000));
    cfg.compatible.requests_per_day = Some(2);
    let s = MockServer::start(cfg).await.unwrap();
    for _ in 0..2 {
        assert_eq!(chat_tokens(&s, 10, 10).await.status, 200);
    }
    let r = chat_tokens(&s, 10, 10).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
    let msg = message(&r);
    assert!(
        msg.contains(
            "on requests per day (RPD): Limit 2, Used 2, Requested 1. Please try again in"
        ),
        "{msg}"
    );
    assert_eq!(r.json()["error"]["type"], "requests");
    assert!(r.header("retry-after").is_some());
    let c = classify(Provider::Groq, &r);
    assert_eq!(c.cause, Cause::RateLimited, "{c:?}");
    let hint = c.hints.wait.unwrap();
    assert_eq!(hint.source, HintSource::QuotaReset);
    assert!(hint.wait > Duration::from_secs(86_000));
}

#[tokio::test]
async fn groq_tpm_429_names_tpm_and_has_retry_after() {
    let s = MockServer::start(config(Flavor::Groq, tpm(1000)))
        .await
        .unwrap();
    // Charged input + max_tokens; the first leaves less than 900.
    assert_eq!(chat_tokens(&s, 100, 800).await.status, 200);
    let r = chat_tokens(&s, 100, 800).await;
    assert_eq!(r.status, 429);
    let msg = message(&r);
    assert!(
        msg.contains("on tokens per minute (TPM): Limit 1000"),
        "{msg}"
    );
    assert!(msg.contains("Please try again in"), "{msg}");
    assert_eq!(r.json()["error"]["type"], "tokens");
    assert!(r.header("retry-after").is_some());
    let c = classify(Provider::Groq, &r);
    assert_eq!(c.cause, Cause::RateLimited, "{c:?}");
    assert_ne!(c.hints.wait.unwrap().source, HintSource::QuotaReset);
}

// -------------------------------------------------------------- Mistral

fn mistral_limits() -> Limits {
    Limits {
        requests_per_minute: Some(10),
        tokens_per_minute: Some(500_000),
        ..Limits::default()
    }
}

#[tokio::test]
async fn mistral_headers_are_per_minute_and_per_month() {
    let mut cfg = config(Flavor::Mistral, mistral_limits());
    cfg.compatible.tokens_per_month = Some(1_000_000_000);
    let s = MockServer::start(cfg).await.unwrap();
    let r = chat_tokens(&s, 100, 100).await;
    assert_eq!(r.status, 200);
    let mut names = ratelimit_names(&r);
    names.sort();
    assert_eq!(
        names,
        [
            "x-ratelimit-limit-req-minute",
            "x-ratelimit-limit-tokens-minute",
            "x-ratelimit-limit-tokens-month",
            "x-ratelimit-remaining-req-minute",
            "x-ratelimit-remaining-tokens-minute",
            "x-ratelimit-remaining-tokens-month",
        ]
    );
    assert_eq!(r.header("x-ratelimit-limit-tokens-minute"), Some("500000"));
    assert_eq!(
        r.header("x-ratelimit-remaining-tokens-minute"),
        Some("499800")
    );
    assert_eq!(r.header("x-ratelimit-remaining-req-minute"), Some("9"));
    let out = s.records()[0].output_tokens;
    assert_eq!(
        r.header("x-ratelimit-remaining-tokens-month"),
        Some((1_000_000_000 - 100 - out).to_string().as_str())
    );
}

#[tokio::test]
async fn mistral_429_is_the_flat_envelope() {
    let s = MockServer::start(config(Flavor::Mistral, rpm(1)))
        .await
        .unwrap();
    assert_eq!(chat(&s, &body(10, false)).await.status, 200);
    let r = chat(&s, &body(10, false)).await;
    assert_eq!(r.status, 429);
    assert_eq!(
        r.json(),
        json!({"object": "error", "message": "Requests rate limit exceeded",
            "type": "rate_limited", "param": null, "code": "1300"})
    );
    assert!(r.header("retry-after").is_some());
    let c = classify(Provider::Mistral, &r);
    assert_eq!(c.cause, Cause::RateLimited, "{c:?}");
}

#[tokio::test]
async fn mistral_month_spent_defers_to_quota_reset() {
    let mut cfg = config(Flavor::Mistral, mistral_limits());
    cfg.compatible.tokens_per_month = Some(50);
    let s = MockServer::start(cfg).await.unwrap();
    assert_eq!(chat_tokens(&s, 60, 10).await.status, 200);
    let r = chat_tokens(&s, 60, 10).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["code"], "1300");
    assert_eq!(r.header("x-ratelimit-remaining-tokens-month"), Some("0"));
    let c = classify(Provider::Mistral, &r);
    assert_eq!(c.cause, Cause::RateLimited, "{c:?}");
    assert_eq!(c.hints.wait.unwrap().source, HintSource::QuotaReset);
}

#[tokio::test]
async fn mistral_overload_is_429_service_tier_capacity() {
    let mut cfg = config(Flavor::Mistral, mistral_limits());
    cfg.faults = vec![FaultRule::always(Fault::Overloaded)];
    let s = MockServer::start(cfg).await.unwrap();
    let r = chat(&s, &body(10, false)).await;
    assert_eq!(r.status, 429);
    assert_eq!(
        r.json()["message"],
        "Service tier capacity exceeded for this model."
    );
    assert_eq!(r.json()["code"], "3505");
    let c = classify(Provider::Mistral, &r);
    assert_eq!(c.cause, Cause::Overloaded, "{c:?}");
    assert_eq!(s.records()[0].status, Some(429));
}

// ------------------------------------------------------------- DeepSeek

#[tokio::test]
async fn deepseek_sends_no_ratelimit_headers() {
    let s = MockServer::start(config(Flavor::Deepseek, rpm(1)))
        .await
        .unwrap();
    let ok = chat(&s, &body(10, false)).await;
    assert_eq!(ok.status, 200);
    assert!(ratelimit_names(&ok).is_empty());
    let limited = chat(&s, &body(10, false)).await;
    assert_eq!(limited.status, 429);
    assert!(ratelimit_names(&limited).is_empty());
}

#[tokio::test]
async fn deepseek_billing_is_402_insufficient_balance() {
    let mut cfg = config(Flavor::Deepseek, rpm(10));
    cfg.billing_error = true;
    let s = MockServer::start(cfg).await.unwrap();
    let r = chat(&s, &body(10, false)).await;
    assert_eq!(r.status, 402);
    assert_eq!(
        r.json(),
        json!({"error": {"message": "Insufficient Balance", "type": "unknown_error",
            "param": null, "code": "invalid_request_error"}})
    );
    let c = classify(Provider::Deepseek, &r);
    assert_eq!(c.cause, Cause::Billing, "{c:?}");
}

#[tokio::test]
async fn deepseek_overload_is_503_server_overloaded() {
    let mut cfg = config(Flavor::Deepseek, rpm(10));
    cfg.faults = vec![FaultRule::always(Fault::Overloaded)];
    let s = MockServer::start(cfg).await.unwrap();
    let r = chat(&s, &body(10, false)).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["code"], "server_overloaded");
    let c = classify(Provider::Deepseek, &r);
    assert_eq!(c.cause, Cause::Overloaded, "{c:?}");
}

/// Every answer takes `ms` real milliseconds (20 output tokens).
fn slow_deepseek(concurrency: u64, ms: u64) -> MockConfig {
    let mut cfg = config(Flavor::Deepseek, Limits::default());
    cfg.output_tokens = OutputRange { min: 20, max: 20 };
    cfg.latency = LatencyConfig {
        first_byte_ms: 0,
        per_output_token_ms: ms as f64 / 20.0,
    };
    cfg.compatible.concurrency = Some(concurrency);
    cfg.compatible.keepalive_ms = 100;
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deepseek_concurrency_queues_the_request_over_the_limit() {
    let s = MockServer::start(slow_deepseek(2, 600)).await.unwrap();
    let b = body(100, false);
    let (a, b2, c) = tokio::join!(chat(&s, &b), chat(&s, &b), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        chat(&s, &b).await
    });
    for r in [&a, &b2, &c] {
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["object"], "chat.completion");
    }
    // One (the last to arrive, unless the machine is slow) waited: blank
    // lines first, then the answer.
    let waited_bodies = [&a, &b2, &c]
        .iter()
        .filter(|r| r.body.starts_with(b"\n"))
        .count();
    assert_eq!(waited_bodies, 1, "{:?}", c.text());
    let recs = s.records();
    assert_eq!(recs.len(), 3);
    let waited: Vec<u64> = recs.iter().map(|r| r.queued_ms).collect();
    assert_eq!(waited.iter().filter(|w| **w == 0).count(), 2, "{waited:?}");
    // It was admitted only when one of the first two ended (~600 ms).
    assert!(waited.iter().any(|w| *w >= 400), "{waited:?}");
    assert_eq!(s.peak_in_flight(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deepseek_queued_stream_gets_keepalive_comments() {
    let s = MockServer::start(slow_deepseek(1, 500)).await.unwrap();
    let json_body = body(100, false);
    let (first, streamed) = tokio::join!(chat(&s, &json_body), async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        chat(&s, &body(100, true)).await
    });
    assert_eq!(first.status, 200);
    assert_eq!(streamed.status, 200);
    assert_eq!(
        streamed.header("content-type"),
        Some("text/event-stream; charset=utf-8")
    );
    let frames = streamed.frames();
    assert_eq!(frames[0], ": keep-alive");
    assert_eq!(frames.last().unwrap(), "data: [DONE]");
    assert!(frames.iter().any(|f| f.contains("chat.completion.chunk")));
    assert_eq!(s.peak_in_flight(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deepseek_queue_wait_limit_is_503() {
    let mut cfg = slow_deepseek(1, 600);
    cfg.compatible.keepalive_ms = 5_000;
    cfg.compatible.queue_timeout_ms = 150;
    let s = MockServer::start(cfg).await.unwrap();
    let json_body = body(100, false);
    let (first, second) = tokio::join!(chat(&s, &json_body), async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        chat(&s, &body(100, false)).await
    });
    assert_eq!(first.status, 200);
    assert_eq!(second.status, 503);
    assert_eq!(
        second.json()["error"]["message"],
        "Server overloaded, please try again later."
    );
    let c = classify(Provider::Deepseek, &second);
    assert_eq!(c.cause, Cause::Overloaded, "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deepseek_concurrency_may_refuse_with_429_instead() {
    let mut cfg = slow_deepseek(1, 500);
    cfg.compatible.concurrency_refuses = true;
    let s = MockServer::start(cfg).await.unwrap();
    let json_body = body(100, false);
    let (first, second) = tokio::join!(chat(&s, &json_body), async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        chat(&s, &json_body).await
    });
    assert_eq!(first.status, 200);
    assert_eq!(second.status, 429);
    assert!(ratelimit_names(&second).is_empty());
    let c = classify(Provider::Deepseek, &second);
    assert_eq!(c.cause, Cause::RateLimited, "{c:?}");
    assert_eq!(s.records()[1].cause, Cause::RateLimited);
}

// ----------------------------------------------------------- OpenRouter

#[tokio::test]
async fn openrouter_billing_is_402_insufficient_credits() {
    let mut cfg = config(Flavor::Openrouter, rpm(10));
    cfg.billing_error = true;
    let s = MockServer::start(cfg).await.unwrap();
    let r = chat(&s, &body(10, false)).await;
    assert_eq!(r.status, 402);
    assert_eq!(r.json()["error"]["code"], 402);
    assert!(message(&r).starts_with("Insufficient credits."));
    let c = classify(Provider::Openrouter, &r);
    assert_eq!(c.cause, Cause::Billing, "{c:?}");
}

#[tokio::test]
async fn openrouter_upstream_429_is_scoped_to_the_provider() {
    let mut cfg = config(Flavor::Openrouter, rpm(10));
    cfg.faults = vec![FaultRule::nth(Fault::UpstreamRateLimited, [1])];
    let s = MockServer::start(cfg).await.unwrap();
    let r = chat(&s, &body(10, false)).await;
    assert_eq!(r.status, 429);
    let v = r.json();
    assert_eq!(v["error"]["code"], 429);
    assert_eq!(v["error"]["message"], "Provider returned error");
    assert_eq!(v["error"]["metadata"]["provider_name"], "DeepInfra");
    assert!(v["error"]["metadata"]["raw"].is_string());
    assert!(v["user_id"].is_string());
    let c = classify(Provider::Openrouter, &r);
    assert_eq!(c.cause, Cause::RateLimited, "{c:?}");
    assert_eq!(c.scope, Scope::Provider);
    // The key's own limit is the key's bucket.
    let s = MockServer::start(config(Flavor::Openrouter, rpm(1)))
        .await
        .unwrap();
    chat(&s, &body(10, false)).await;
    let own = chat(&s, &body(10, false)).await;
    assert_eq!(own.status, 429);
    assert!(ratelimit_names(&own).is_empty());
    let c = classify(Provider::Openrouter, &own);
    assert_eq!((c.cause, c.scope), (Cause::RateLimited, Scope::Bucket));
}

#[tokio::test]
async fn openrouter_error_in_a_200_is_a_server_error() {
    let mut cfg = config(Flavor::Openrouter, rpm(10));
    cfg.faults = vec![FaultRule::always(Fault::ErrorInBody { after_events: 3 })];
    let s = MockServer::start(cfg).await.unwrap();
    let r = chat(&s, &body(10, false)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["error"]["code"], 502);
    let c = classify(Provider::Openrouter, &r);
    assert_eq!(c.cause, Cause::ServerError, "{c:?}");
    assert_eq!(s.records()[0].cause, Cause::ServerError);
}

#[tokio::test]
async fn openrouter_stream_starts_processing_and_ends_with_an_error_chunk() {
    let mut cfg = config(Flavor::Openrouter, rpm(10));
    cfg.output_tokens = OutputRange { min: 20, max: 20 };
    cfg.faults = vec![FaultRule::nth(Fault::ErrorInBody { after_events: 3 }, [2])];
    let s = MockServer::start(cfg).await.unwrap();
    // A whole stream: the comment first, then OpenAI's chunks.
    let whole = chat(&s, &body(100, true)).await;
    let frames = whole.frames();
    assert_eq!(frames[0], ": OPENROUTER PROCESSING");
    assert_eq!(frames.last().unwrap(), "data: [DONE]");
    // A failing one: some content, then the error chunk, then the end.
    let failed = chat(&s, &body(100, true)).await;
    assert_eq!(failed.status, 200);
    let frames = failed.frames();
    assert_eq!(frames.len(), 4, "{frames:?}");
    assert_eq!(frames[0], ": OPENROUTER PROCESSING");
    assert!(frames[2].contains("\"content\":\""), "{frames:?}");
    let last: Value = serde_json::from_str(frames[3].strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(last["object"], "chat.completion.chunk");
    assert_eq!(last["error"]["code"], "server_error");
    assert_eq!(last["choices"][0]["finish_reason"], "error");
    assert_eq!(s.records()[1].cause, Cause::MidStream);
}

// ------------------------------------------------------------------ xAI

#[tokio::test]
async fn xai_money_is_a_429_with_a_string_error() {
    let mut cfg = config(Flavor::Xai, rpm(10));
    cfg.billing_error = true;
    let s = MockServer::start(cfg).await.unwrap();
    let r = chat(&s, &body(10, false)).await;
    assert_eq!(r.status, 429);
    let v = r.json();
    assert!(v["code"].is_string());
    let e = v["error"].as_str().unwrap();
    assert!(
        e.contains("has either used all available credits or reached its monthly spending limit")
    );
    let c = classify(Provider::Xai, &r);
    assert!(
        matches!(c.cause, Cause::Billing | Cause::SpendCap | Cause::UserLimit),
        "{c:?}"
    );
    assert_eq!(s.records()[0].status, Some(429));
    // The spend cap says the same.
    let mut cfg = config(Flavor::Xai, rpm(10));
    cfg.spend.cap_usd = Some(0.0);
    let s = MockServer::start(cfg).await.unwrap();
    let r = chat(&s, &body(10, false)).await;
    assert_eq!((r.status, r.json()["error"].is_string()), (429, true));
}

// --------------------------------------------------------------- OpenAI

#[tokio::test]
async fn openai_flavor_is_the_default() {
    assert_eq!(MockConfig::default().flavor, Flavor::Openai);
    let cfg: MockConfig = serde_json::from_str(r#"{"flavor": "openai"}"#).unwrap();
    assert_eq!(cfg, MockConfig::default());
    let s = MockServer::start(config(Flavor::Openai, rpm(1)))
        .await
        .unwrap();
    let ok = chat(&s, &body(10, false)).await;
    assert_eq!(ok.header("x-ratelimit-limit-requests"), Some("1"));
    assert!(!ok.text().starts_with(':'));
    let r = chat(&s, &body(10, false)).await;
    assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");
}

// -------------------------------------------------------------- Bedrock

const CONVERSE: &str = "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse";
/// A SigV4 `Authorization` of the shape Bedrock checks (the mock knows no
/// secret here, so the signature's value is not verified: `tests/cloud.rs`
/// verifies one), sent with its `x-amz-date`.
const SIGV4: &str = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261129/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd";
const AMZ_DATE: &str = "20261129T101500Z";

fn converse_body(max_tokens: u64) -> Value {
    json!({"messages": [{"role": "user", "content": [{"text": "hello there"}]}],
        "inferenceConfig": {"maxTokens": max_tokens}})
}

#[tokio::test]
async fn bedrock_converse_throttles_with_too_many_tokens() {
    // 200 output tokens each: the first leaves less than 800 + input.
    let cfg = MockConfig {
        bedrock_limits: tpm(1000),
        output_tokens: OutputRange { min: 200, max: 200 },
        ..MockConfig::default()
    };
    let s = MockServer::start(cfg).await.unwrap();
    let auth = [("authorization", SIGV4), ("x-amz-date", AMZ_DATE)];
    let ok = post(&s, CONVERSE, "", &converse_body(800), &auth).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    let v = ok.json();
    assert_eq!(v["output"]["message"]["role"], "assistant");
    assert!(v["output"]["message"]["content"][0]["text"].is_string());
    assert!(v["usage"]["inputTokens"].as_u64().unwrap() > 0);
    assert!(ok.header("x-amzn-requestid").is_some());
    assert!(ratelimit_names(&ok).is_empty());
    let r = post(&s, CONVERSE, "", &converse_body(800), &auth).await;
    assert_eq!(r.status, 429);
    assert!(r
        .header("x-amzn-errortype")
        .unwrap()
        .starts_with("ThrottlingException"));
    assert_eq!(
        r.json(),
        json!({"message": "Too many tokens, please wait before trying again."})
    );
    assert_eq!(r.header("retry-after"), None);
    let c = classify(Provider::Bedrock, &r);
    assert_eq!(c.cause, Cause::RateLimited, "{c:?}");
    let recs = s.records();
    assert_eq!(recs[0].model, "anthropic.claude-3-haiku-20240307-v1:0");
    assert_eq!(recs[0].key, recs[1].key);
    assert_eq!(
        (recs[1].status, recs[1].cause),
        (Some(429), Cause::RateLimited)
    );
    // Unsigned: 403; a bad body: 400 ValidationException.
    let unsigned = post(&s, CONVERSE, "", &converse_body(10), &[]).await;
    assert_eq!(unsigned.status, 403);
    let bad = post(&s, CONVERSE, "", &json!({"inferenceConfig": {}}), &auth).await;
    assert_eq!(bad.status, 400);
    assert!(bad
        .header("x-amzn-errortype")
        .unwrap()
        .starts_with("ValidationException"));
    assert_eq!(
        classify(Provider::Bedrock, &bad).cause,
        Cause::InvalidRequest
    );
}
