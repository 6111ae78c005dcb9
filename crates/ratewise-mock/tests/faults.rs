//! Injected faults over loopback.

mod common;
use common::*;
use ratewise_core::parse::retry_after::parse_retry_after;
use ratewise_core::Cause;
use ratewise_mock::{
    Fault, FaultRule, LatencyConfig, MockConfig, MockServer, RetryAfterFormat, Trigger,
};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn with_faults(rules: Vec<FaultRule>) -> MockServer {
    MockServer::start(MockConfig {
        faults: rules,
        ..MockConfig::default()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn overloaded_is_529_on_anthropic_and_503_on_openai() {
    let server = with_faults(vec![FaultRule::nth(Fault::Overloaded, [1, 2])]).await;
    let r = anthropic(&server, &anthropic_body("x", 10, false)).await;
    assert_eq!(r.status, 529);
    assert_eq!(r.json()["error"]["type"], "overloaded_error");
    assert_eq!(r.header("x-should-retry"), Some("true"));
    let r = openai(&server, &openai_body("x", 10, false)).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["code"], "server_is_overloaded");
    assert_eq!(
        anthropic(&server, &anthropic_body("x", 10, false))
            .await
            .status,
        200,
        "only the 1st and 2nd"
    );
    let causes: Vec<Cause> = server.records().iter().map(|r| r.cause).collect();
    assert_eq!(
        causes,
        [Cause::Overloaded, Cause::Overloaded, Cause::Success]
    );
    server.shutdown().await;
}

#[tokio::test]
async fn status_faults_json_and_html() {
    let server = with_faults(vec![]).await;
    for (status, html) in [
        (500, false),
        (502, true),
        (500, true),
        (408, false),
        (503, false),
    ] {
        server.set_faults(vec![FaultRule::always(Fault::Status { status, html })]);
        for r in [
            anthropic(&server, &anthropic_body("x", 10, false)).await,
            openai(&server, &openai_body("x", 10, false)).await,
        ] {
            assert_eq!(r.status, status);
            if html {
                assert_eq!(r.header("content-type"), Some("text/html"));
                assert!(r.text().contains(&format!("<title>{status}")));
            } else {
                assert!(r.json()["error"]["type"].is_string(), "{}", r.text());
            }
        }
    }
    server.shutdown().await;
}

#[tokio::test]
async fn reset_after_reading_the_request_sends_nothing() {
    let server = with_faults(vec![FaultRule::always(Fault::Reset)]).await;
    let mut tcp = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let body = serde_json::to_vec(&anthropic_body("x", 10, false)).unwrap();
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: localhost\r\nx-api-key: k\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(&body).await.unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut buf))
        .await
        .expect("closed");
    assert!(
        buf.is_empty(),
        "no response bytes: {:?}",
        String::from_utf8_lossy(&buf)
    );
    // SO_LINGER 0: the peer sees RST, not a clean FIN
    assert_eq!(
        read.map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ConnectionReset)
    );
    let rec = server.records().pop().unwrap();
    assert_eq!((rec.cause, rec.status), (Cause::OutcomeUnknown, None));
    assert_eq!(
        rec.input_tokens, 2,
        "the request was read whole (\"user\" + \"x\")"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn stall_outlasts_a_client_timeout() {
    let server = with_faults(vec![FaultRule::nth(Fault::Stall { ms: 5_000 }, [1])]).await;
    let body = anthropic_body("x", 10, false);
    let timed = tokio::time::timeout(Duration::from_millis(500), anthropic(&server, &body)).await;
    assert!(timed.is_err(), "the client gave up first");
    // the request may still be on its way on a loaded machine: wait for its record
    for _ in 0..200 {
        if !server.records().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(server.records()[0].fault, Some(Fault::Stall { ms: 5_000 }));
    // the next request is not stalled
    assert_eq!(anthropic(&server, &body).await.status, 200);
    server.shutdown().await;
}

#[tokio::test]
async fn stream_cut_ends_without_message_stop() {
    let server = with_faults(vec![FaultRule::always(Fault::StreamCut {
        after_events: 4,
    })])
    .await;
    let r = anthropic(&server, &anthropic_body("x", 100, true)).await;
    assert_eq!(r.status, 200);
    let frames = r.frames();
    assert_eq!(frames.len(), 4);
    assert!(!r.text().contains("message_stop"));
    let r = openai(&server, &openai_body("x", 100, true)).await;
    assert_eq!(r.frames().len(), 4);
    assert!(!r.text().contains("[DONE]"));
    assert!(server.records().iter().all(|r| r.cause == Cause::MidStream));
    // a non-streaming request is not affected
    assert_eq!(
        anthropic(&server, &anthropic_body("x", 100, false))
            .await
            .status,
        200
    );
    server.shutdown().await;
}

#[tokio::test]
async fn stream_error_first_frame_and_mid_way() {
    let server = with_faults(vec![FaultRule::nth(
        Fault::StreamError { after_events: 0 },
        [1],
    )])
    .await;
    let r = anthropic(&server, &anthropic_body("x", 100, true)).await;
    assert_eq!(r.status, 200);
    // One `error` event and nothing else. The JSON is compared parsed: its
    // key order follows serde_json's features (rig turns on
    // `preserve_order`), and a client reads it parsed.
    let text = r.text();
    let data = text
        .strip_prefix("event: error\ndata: ")
        .and_then(|rest| rest.strip_suffix("\n\n"))
        .unwrap_or_else(|| panic!("one error event, got {text:?}"));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(data).unwrap(),
        serde_json::json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );
    server.set_faults(vec![FaultRule::always(Fault::StreamError {
        after_events: 4,
    })]);
    let frames = anthropic(&server, &anthropic_body("x", 100, true))
        .await
        .frames();
    assert_eq!(frames.len(), 5);
    assert!(frames[3].starts_with("event: content_block_delta"));
    assert!(frames[4].starts_with("event: error") && frames[4].contains("overloaded_error"));
    let frames = openai(&server, &openai_body("x", 100, true)).await.frames();
    assert!(frames[4].starts_with("data: {\"error\""));
    server.shutdown().await;
}

#[tokio::test]
async fn malformed_and_http_date_retry_after() {
    let server = with_faults(vec![]).await;
    for (format, expect_ok) in [
        (RetryAfterFormat::Garbage, false),
        (RetryAfterFormat::Negative, false),
        (RetryAfterFormat::HttpDate, true),
        (RetryAfterFormat::Seconds, true),
    ] {
        server.set_faults(vec![FaultRule::always(Fault::RetryAfter {
            format,
            secs: 3,
        })]);
        let r = anthropic(&server, &anthropic_body("x", 10, false)).await;
        assert_eq!(r.status, 429);
        let raw = r.header("retry-after").unwrap().to_string();
        let parsed = parse_retry_after(raw.as_bytes(), SystemTime::now());
        assert_eq!(parsed.is_ok(), expect_ok, "{format:?}: {raw}");
        if let Ok(d) = parsed {
            assert!(d <= Duration::from_secs(4), "{raw}");
        }
    }
    server.shutdown().await;
}

#[tokio::test]
async fn probability_faults_are_seeded() {
    let rules = vec![FaultRule::new(Fault::Overloaded, Trigger::Probability(0.5))];
    let mut runs = Vec::new();
    for _ in 0..2 {
        let server = MockServer::start(MockConfig {
            seed: 11,
            faults: rules.clone(),
            ..MockConfig::default()
        })
        .await
        .unwrap();
        let mut statuses = Vec::new();
        for _ in 0..12 {
            statuses.push(
                anthropic(&server, &anthropic_body("x", 10, false))
                    .await
                    .status,
            );
        }
        server.shutdown().await;
        runs.push(statuses);
    }
    assert_eq!(runs[0], runs[1]);
    assert!(
        runs[0].contains(&529) && runs[0].contains(&200),
        "{:?}",
        runs[0]
    );
}

#[tokio::test]
async fn latency_grows_with_output_tokens() {
    let cfg = MockConfig {
        latency: LatencyConfig {
            first_byte_ms: 0,
            per_output_token_ms: 10.0,
        },
        output_tokens: ratewise_mock::OutputRange { min: 20, max: 20 },
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    for stream in [false, true] {
        let start = std::time::Instant::now();
        let r = anthropic(&server, &anthropic_body("x", 100, stream)).await;
        assert_eq!(r.status, 200);
        // a lower bound only: the mock sleeps at least 20 × 10 ms
        assert!(
            start.elapsed() >= Duration::from_millis(200),
            "{:?}",
            start.elapsed()
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn scheduled_faults_follow_the_scaled_clock() {
    // a provider minute lasts 0.6 s: the first 30 provider seconds are 0.3 real seconds
    let cfg = MockConfig {
        seconds_per_minute: 0.6,
        faults: vec![FaultRule::new(
            Fault::Overloaded,
            Trigger::Between {
                from_secs: 0.0,
                until_secs: 30.0,
            },
        )],
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let first = anthropic(&server, &anthropic_body("x", 10, false)).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let later = anthropic(&server, &anthropic_body("x", 10, false)).await;
    let recs = server.records();
    // the first request arrived before 0.3 s unless the machine stalled; assert on what was recorded
    if recs[0].provider_ms < 30_000 {
        assert_eq!(first.status, 529);
    }
    assert!(recs[1].provider_ms >= 30_000);
    assert_eq!(later.status, 200);
    server.shutdown().await;
}
