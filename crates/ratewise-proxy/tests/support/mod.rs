//! A small upstream on loopback that speaks Gemini's native API and Azure
//! OpenAI's deployments well enough for the proxy's tests: it keeps every
//! request it is sent (path and query, headers, body) and answers from a
//! script, then with a success.

#![allow(dead_code)]

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_proxy::config::{Flags, ProxyConfig};
use ratewise_proxy::Running;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// One request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Path and query.
    pub uri: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// An answer the upstream gives instead of its success, once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scripted {
    /// 429 `RESOURCE_EXHAUSTED` with a `RetryInfo` of 1 s.
    Quota,
    /// 400 `FAILED_PRECONDITION`: billing (stops the key).
    Billing,
    /// Azure OpenAI's 429 whose only hint is in its message: "Please retry
    /// after 86400 seconds" (a daily quota).
    AzureDay,
}

/// Azure OpenAI's 429 for a quota of a day: no header, the wait in the
/// message.
pub const AZURE_429_DAY: &str = r#"{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 86400 seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit."}}"#;

/// Gemini's 429, as `google.rpc.Status`.
pub const GEMINI_429: &str = r#"{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1s"}]}}"#;

/// Gemini's billing refusal.
pub const GEMINI_BILLING: &str = r#"{"error":{"code":400,"message":"Gemini API free tier is not available in your country. Please enable billing on your project in Google AI Studio.","status":"FAILED_PRECONDITION"}}"#;

/// A Gemini `generateContent` success.
pub const GEMINI_OK: &str = r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"hi"}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":1,"totalTokenCount":6},"modelVersion":"gemini-2.5-flash"}"#;

/// A Gemini `streamGenerateContent?alt=sse` success: two chunks, the last
/// with the usage.
pub const GEMINI_SSE: &str = "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Hel\"}]},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":5,\"totalTokenCount\":5},\"modelVersion\":\"gemini-2.5-flash\"}\r\n\r\ndata: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"lo\"}]},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":5,\"candidatesTokenCount\":2,\"totalTokenCount\":7},\"modelVersion\":\"gemini-2.5-flash\"}\r\n\r\n";

/// An Azure OpenAI chat completion.
pub const AZURE_OK: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#;

/// The upstream.
pub struct Upstream {
    pub url: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    pub script: Arc<Mutex<VecDeque<Scripted>>>,
    /// While set, each request waits for a permit of `gate` before it is
    /// answered (it is recorded at once).
    holding: Arc<std::sync::atomic::AtomicBool>,
    gate: Arc<tokio::sync::Semaphore>,
}

impl Upstream {
    /// Starts one on an ephemeral loopback port.
    pub async fn start() -> Upstream {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(VecDeque::new()));
        let holding = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let (kept, next, held, wait) =
            (seen.clone(), script.clone(), holding.clone(), gate.clone());
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let (kept, next, held, wait) = (kept.clone(), next.clone(), held.clone(), wait.clone());
            async move {
                let (parts, body) = req.into_parts();
                let body = body
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                let uri = parts
                    .uri
                    .path_and_query()
                    .map_or("/", |p| p.as_str())
                    .to_owned();
                kept.lock().unwrap().push(Seen {
                    uri: uri.clone(),
                    headers: parts.headers.clone(),
                    body,
                });
                if held.load(std::sync::atomic::Ordering::SeqCst) {
                    if let Ok(p) = wait.acquire().await {
                        p.forget();
                    }
                }
                let scripted = next.lock().unwrap().pop_front();
                let (status, ct, text) = match scripted {
                    Some(Scripted::Quota) => (
                        StatusCode::TOO_MANY_REQUESTS,
                        "application/json",
                        GEMINI_429,
                    ),
                    Some(Scripted::Billing) => {
                        (StatusCode::BAD_REQUEST, "application/json", GEMINI_BILLING)
                    }
                    Some(Scripted::AzureDay) => (
                        StatusCode::TOO_MANY_REQUESTS,
                        "application/json",
                        AZURE_429_DAY,
                    ),
                    None if uri.contains(":streamGenerateContent") => {
                        (StatusCode::OK, "text/event-stream", GEMINI_SSE)
                    }
                    None if uri.starts_with("/openai/") => {
                        (StatusCode::OK, "application/json", AZURE_OK)
                    }
                    None => (StatusCode::OK, "application/json", GEMINI_OK),
                };
                (status, [("content-type", ct)], text)
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Upstream {
            url: format!("http://{addr}"),
            seen,
            script,
            holding,
            gate,
        }
    }

    /// The requests received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Holds every request from now on until [`release`](Self::release).
    pub fn hold(&self) {
        self.holding
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Lets `n` held requests be answered.
    pub fn release(&self, n: usize) {
        self.gate.add_permits(n);
    }

    /// Answers the next requests with these, in order.
    pub fn then(&self, answers: &[Scripted]) {
        self.script.lock().unwrap().extend(answers.iter().copied());
    }
}

/// A proxy in front of `upstream`, read as `provider` (`None`: from its
/// host), both listeners on ephemeral ports.
pub async fn proxy(upstream: &str, provider: Option<&str>, toml: &str) -> Running {
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:1".into()),
        upstream: Some(upstream.into()),
        provider: provider.map(Into::into),
        ..Flags::default()
    };
    let mut config = ProxyConfig::from_toml(&flags, toml, |_| None).expect("config");
    config.admin = "127.0.0.1:0".parse().unwrap();
    ratewise_proxy::start(config).await.expect("proxy starts")
}

/// What a caller got.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    /// Everything the caller was given, as text (status, headers, body).
    pub fn text(&self) -> String {
        let mut t = format!("{}\n", self.status);
        for (k, v) in &self.headers {
            t.push_str(&format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())));
        }
        t.push_str(&self.body);
        t
    }

    /// `x-ratewise-action`.
    pub fn action(&self) -> &str {
        self.headers
            .get("x-ratewise-action")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// POSTs `body` to `path_and_query` on the proxy with `headers`.
pub async fn post(
    p: &Running,
    path_and_query: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = Request::post(format!("http://{}{path_and_query}", p.addr))
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client
        .request(req.body(Full::new(Bytes::from(body.to_owned()))).unwrap())
        .await
        .expect("the proxy answers");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// GETs an admin path; its body as text.
pub async fn admin(p: &Running, method: &str, path: &str) -> (StatusCode, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", p.admin_addr))
        .header("authorization", p.app.admin.authorization())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A Gemini `generateContent` body, with `maxOutputTokens` when given.
pub fn gemini_body(text: &str, max_output: Option<u64>) -> String {
    let config = max_output
        .map(|n| format!(r#","generationConfig":{{"maxOutputTokens":{n},"temperature":0.2}}"#))
        .unwrap_or_default();
    format!(r#"{{"contents":[{{"role":"user","parts":[{{"text":"{text}"}}]}}]{config}}}"#)
}

/// Waits until `cond` holds (what the proxy does after the caller has its
/// answer); the bound only turns a hang into a failure.
pub async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..2_000 {
        if cond() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("never: {what}");
}
