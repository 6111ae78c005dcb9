//! A tiny loopback client for the mock's tests.
#![allow(dead_code)]

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_mock::MockServer;
use serde_json::Value;

pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    /// SSE frames (blank-line separated).
    pub fn frames(&self) -> Vec<String> {
        self.text()
            .split("\n\n")
            .filter(|f| !f.trim().is_empty())
            .map(str::to_string)
            .collect()
    }
}

pub fn anthropic_body(text: &str, max_tokens: u64, stream: bool) -> Value {
    serde_json::json!({"model": "claude-sonnet-4-5", "max_tokens": max_tokens, "stream": stream,
        "messages": [{"role": "user", "content": text}]})
}

pub fn openai_body(text: &str, max_tokens: u64, stream: bool) -> Value {
    let mut v = serde_json::json!({"model": "gpt-4o-mini", "max_completion_tokens": max_tokens,
        "messages": [{"role": "user", "content": text}]});
    if stream {
        v["stream"] = Value::Bool(true);
        v["stream_options"] = serde_json::json!({"include_usage": true});
    }
    v
}

pub async fn post(
    server: &MockServer,
    path: &str,
    key: &str,
    body: &Value,
    extra: &[(&str, &str)],
) -> Reply {
    post_raw(server, path, key, serde_json::to_vec(body).unwrap(), extra).await
}

pub async fn post_raw(
    server: &MockServer,
    path: &str,
    key: &str,
    body: Vec<u8>,
    extra: &[(&str, &str)],
) -> Reply {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut b = Request::post(format!("{}{path}", server.base_url()))
        .header("content-type", "application/json");
    if !key.is_empty() {
        b = if path.contains("chat") {
            b.header("authorization", format!("Bearer {key}"))
        } else {
            b.header("x-api-key", key)
        };
    }
    for (n, v) in extra {
        b = b.header(*n, *v);
    }
    let resp = client
        .request(b.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .expect("response");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    Reply {
        status,
        headers,
        body,
    }
}

pub async fn anthropic(server: &MockServer, body: &Value) -> Reply {
    post(server, "/v1/messages", "sk-ant-test", body, &[]).await
}

pub async fn openai(server: &MockServer, body: &Value) -> Reply {
    post(server, "/v1/chat/completions", "sk-openai-test", body, &[]).await
}

/// An answer with a window on every dimension, all exhausted (full again
/// in 12 s): what the renderers are checked on, with and without headers.
pub fn answer(outcome: ratewise_mock::model::Outcome) -> ratewise_mock::model::Answer {
    use ratewise_core::Dimension;
    let windows = [
        Dimension::Requests,
        Dimension::InputTokens,
        Dimension::OutputTokens,
        Dimension::Tokens,
    ]
    .into_iter()
    .map(|dimension| ratewise_mock::model::WindowView {
        dimension,
        limit: 100,
        remaining: 0,
        reported_remaining: 0,
        reset: std::time::Duration::from_secs(12),
    })
    .collect();
    ratewise_mock::model::Answer {
        nth: 9,
        outcome,
        windows,
        stall: None,
        stream_fault: None,
    }
}
