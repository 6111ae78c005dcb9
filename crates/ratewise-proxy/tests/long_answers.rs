//! A 1 MiB answer, whole or streamed, settles at the usage it reports
//! (issue #38): `usage` comes after the text, past any prefix a parser
//! might read, and `ratewise_tokens_charged` shows what the provider
//! said, not the reservation.

mod support;

use support::{admin, post, proxy};

/// About 1 MiB of text (`"word "` × 210,000).
fn long_text() -> String {
    "word ".repeat(210_000)
}

/// An upstream answering every request with `body` as `content_type`.
async fn upstream(content_type: &'static str, body: String) -> String {
    let body = bytes::Bytes::from(body);
    let app = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move { (http::StatusCode::OK, [("content-type", content_type)], body) }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

/// `ratewise_tokens_charged{kind="output"}` as `/metrics` shows it.
async fn charged_output(p: &ratewise_proxy::Running) -> f64 {
    let (_, metrics) = admin(p, "GET", "/metrics").await;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("ratewise_tokens_charged{kind=\"output\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(-1.0)
}

const REQUEST: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":300000,"messages":[{"role":"user","content":"write at length"}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_mib_json_answer_settles_at_its_usage() {
    let text = long_text();
    let body = format!(
        r#"{{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{{"type":"text","text":"{text}"}}],"stop_reason":"end_turn","usage":{{"input_tokens":11,"output_tokens":262500}}}}"#
    );
    assert!(body.len() > 1 << 20);
    let up = upstream("application/json", body.clone()).await;
    let p = proxy(&up, Some("anthropic"), "").await;
    let a = post(
        &p,
        "/v1/messages",
        &[("x-api-key", "sk-long-json")],
        REQUEST,
    )
    .await;
    assert_eq!(a.status, 200);
    assert_eq!(a.body.len(), body.len(), "the answer went through whole");
    // Settled when the body ended: polled, the bound only turns a hang
    // into a failure.
    let mut charged = -1.0;
    for _ in 0..200 {
        charged = charged_output(&p).await;
        if charged == 262_500.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(charged, 262_500.0, "settled at the usage, not max_tokens");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_mib_stream_settles_at_its_usage() {
    let mut sse = String::from(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_2\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":11,\"output_tokens\":1}}}\n\n\
         event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    );
    let chunk = "word ".repeat(1_000);
    for _ in 0..210 {
        sse.push_str(&format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{chunk}\"}}}}\n\n"
        ));
    }
    sse.push_str(
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
         event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":262500}}\n\n\
         event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    assert!(sse.len() > 1 << 20);
    let up = upstream("text/event-stream", sse.clone()).await;
    let p = proxy(&up, Some("anthropic"), "").await;
    let streamed = REQUEST.replace(
        r#""max_tokens":300000"#,
        r#""max_tokens":300000,"stream":true"#,
    );
    let a = post(
        &p,
        "/v1/messages",
        &[("x-api-key", "sk-long-sse")],
        &streamed,
    )
    .await;
    assert_eq!(a.status, 200);
    assert_eq!(a.body.len(), sse.len(), "the stream went through whole");
    let mut charged = -1.0;
    for _ in 0..200 {
        charged = charged_output(&p).await;
        if charged == 262_500.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(charged, 262_500.0, "settled at the stream's usage");
}
