//! Successful answers, JSON and SSE, in the providers' shapes, with
//! predictable usage.

mod common;
use common::*;
use ratewise_core::parse::body::parse_usage;
use ratewise_core::parse::request_id::request_id_from_headers;
use ratewise_mock::tokens::{estimate_input_tokens, output_tokens_for};
use ratewise_mock::{MockConfig, MockServer, OutputRange};

#[tokio::test]
async fn anthropic_json_success_has_predictable_usage_and_headers() {
    let cfg = MockConfig {
        seed: 42,
        output_tokens: OutputRange { min: 3, max: 30 },
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let body = anthropic_body("Tell me about rate limits, please.", 1000, false);
    let r = anthropic(&server, &body).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    let expect_out = output_tokens_for(42, &serde_json::to_vec(&body).unwrap(), 3, 30, 1000);
    assert_eq!(v["usage"]["output_tokens"], expect_out);
    assert_eq!(v["usage"]["input_tokens"], estimate_input_tokens(&body));
    assert_eq!(v["usage"]["cache_read_input_tokens"], 0);
    assert_eq!(v["type"], "message");
    assert_eq!(
        v["content"][0]["text"].as_str().unwrap().split(' ').count() as u64,
        expect_out
    );
    let usage = parse_usage(&r.body).expect("core reads the usage");
    assert_eq!(usage.output_tokens, expect_out);
    let rid = request_id_from_headers(&r.headers).expect("request-id");
    assert!(rid.starts_with("req_"));
    for h in ["requests", "input-tokens", "output-tokens"] {
        let reset = r.header(&format!("anthropic-ratelimit-{h}-reset")).unwrap();
        assert!(
            ratewise_core::time::parse_rfc3339(reset).is_some(),
            "{reset}"
        );
    }
    assert_eq!(
        r.header("anthropic-ratelimit-requests-remaining"),
        Some("49")
    );
    let recs = server.records();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].output_tokens, expect_out);
    assert_eq!(recs[0].request_id.as_deref(), Some(rid.as_str()));
    server.shutdown().await;
}

#[tokio::test]
async fn input_tokens_header_wins() {
    let server = MockServer::start(MockConfig::default()).await.unwrap();
    let r = post(
        &server,
        "/v1/messages",
        "k",
        &anthropic_body("x", 10, false),
        &[("x-mock-input-tokens", "1234")],
    )
    .await;
    assert_eq!(r.json()["usage"]["input_tokens"], 1234);
    server.shutdown().await;
}

#[tokio::test]
async fn openai_json_success() {
    let server = MockServer::start(MockConfig::default()).await.unwrap();
    let r = openai(&server, &openai_body("hello", 3, false)).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["usage"]["completion_tokens"], 3);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert!(r.header("x-request-id").is_some());
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("499"));
    assert!(ratewise_core::parse::duration::parse_go_duration(
        r.header("x-ratelimit-reset-tokens").unwrap()
    )
    .is_ok());
    server.shutdown().await;
}

#[tokio::test]
async fn anthropic_stream_is_complete_and_ordered() {
    let server = MockServer::start(MockConfig::default()).await.unwrap();
    let body = anthropic_body("stream please", 1000, true);
    let r = anthropic(&server, &body).await;
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let frames = r.frames();
    let names: Vec<&str> = frames.iter().map(|f| f.lines().next().unwrap()).collect();
    assert_eq!(names[0], "event: message_start");
    assert_eq!(names[2], "event: ping");
    assert_eq!(*names.last().unwrap(), "event: message_stop");
    let delta = frames
        .iter()
        .find(|f| f.starts_with("event: message_delta"))
        .unwrap();
    let data: serde_json::Value =
        serde_json::from_str(delta.lines().nth(1).unwrap().trim_start_matches("data: ")).unwrap();
    let expected = output_tokens_for(0, &serde_json::to_vec(&body).unwrap(), 5, 50, 1000);
    assert_eq!(data["usage"]["output_tokens"], expected);
    server.shutdown().await;
}

#[tokio::test]
async fn openai_stream_has_final_usage_chunk_and_done() {
    let server = MockServer::start(MockConfig::default()).await.unwrap();
    let r = openai(&server, &openai_body("stream please", 1000, true)).await;
    let frames = r.frames();
    assert_eq!(frames.last().unwrap(), "data: [DONE]");
    let usage: serde_json::Value =
        serde_json::from_str(frames[frames.len() - 2].trim_start_matches("data: ")).unwrap();
    assert_eq!(usage["choices"], serde_json::json!([]));
    assert!(usage["usage"]["completion_tokens"].as_u64().unwrap() >= 5);
    // without include_usage there is no usage chunk
    let mut b = openai_body("x", 10, true);
    b["stream_options"] = serde_json::json!({"include_usage": false});
    let frames = openai(&server, &b).await.frames();
    assert!(!frames.iter().any(|f| f.contains("\"usage\"")));
    server.shutdown().await;
}

#[tokio::test]
async fn bad_requests_get_provider_errors() {
    let server = MockServer::start(MockConfig {
        max_body_bytes: 1000,
        ..MockConfig::default()
    })
    .await
    .unwrap();
    let r = post(
        &server,
        "/v1/messages",
        "",
        &anthropic_body("x", 10, false),
        &[],
    )
    .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["type"], "authentication_error");
    let r = post_raw(&server, "/v1/messages", "k", b"{not json".to_vec(), &[]).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let r = post(
        &server,
        "/v1/messages",
        "k",
        &serde_json::json!({"model": "m", "messages": []}),
        &[],
    )
    .await;
    assert_eq!(r.status, 400, "max_tokens is required by Anthropic");
    let r = post(
        &server,
        "/v1/messages",
        "k",
        &anthropic_body(&"x".repeat(2000), 10, false),
        &[],
    )
    .await;
    assert_eq!(r.status, 413);
    let r = post(
        &server,
        "/v1/nothing",
        "k",
        &anthropic_body("x", 10, false),
        &[],
    )
    .await;
    assert_eq!(r.status, 404);
    let r = post(
        &server,
        "/v1/chat/completions",
        "k",
        &serde_json::json!({"model": "m"}),
        &[],
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let recs = server.records();
    assert_eq!(
        recs.len(),
        5,
        "API routes are recorded, unknown paths are not"
    );
    server.shutdown().await;
}
