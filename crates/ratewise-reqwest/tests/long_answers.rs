//! A 1 MiB answer through the middleware settles at the usage it reports
//! (issue #38), read as the caller reads it.

mod common;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A loopback server that answers every request with `body` (JSON), one
/// request per connection.
async fn upstream(body: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let body = body.clone();
            tokio::spawn(async move {
                // The request: its head, then as many bytes as it says.
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                let head_end = loop {
                    let n = conn.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    if let Some(at) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                };
                let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while got.len() < head_end + length {
                    let n = conn.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn a_one_mib_answer_settles_at_its_usage() {
    let text = "word ".repeat(210_000);
    let body = format!(
        r#"{{"id":"msg_1","type":"message","role":"assistant","content":[{{"type":"text","text":"{text}"}}],"usage":{{"input_tokens":11,"output_tokens":262500}}}}"#
    );
    assert!(body.len() > 1 << 20);
    let url = upstream(body.clone()).await;
    let layer = layer();
    let wire = Wire::default();
    let client = client(&layer, &wire);
    let response = client
        .post(format!("{url}/v1/messages"))
        .header("x-api-key", ANTHROPIC_KEY)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&anthropic_body(300_000, false)).unwrap())
        .send()
        .await
        .expect("ok");
    assert_eq!(response.status(), 200);
    let got = response.bytes().await.expect("the whole body");
    assert_eq!(got.len(), body.len());
    let ledger = clean(&layer).await;
    assert_eq!(
        ledger.charged.output, 262_500,
        "settled at the usage, not max_tokens: {ledger:?}"
    );
}
