//! What the tests share: the mock, a layer with a fast policy, a client
//! with ratewise in its stack, a recorder of what reaches the wire, and a
//! manual clock.
#![allow(dead_code)]

use bytes::Bytes;
use ratewise_core::decide::{Backoff, HintJitter};
use ratewise_core::{Instant, Now};
use ratewise_mock::{MockConfig, MockServer};
use ratewise_reqwest::RatewiseMiddleware;
use ratewise_tower::{Clock, Policy, RetryLayer, Sleep};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

pub const ANTHROPIC_KEY: &str = "sk-ant-SECRET-KEY";
pub const OPENAI_KEY: &str = "sk-openai-SECRET-KEY";

pub fn fast_policy() -> Policy {
    let mut policy = Policy::default();
    policy.max_attempts = 3;
    policy.backoff = {
        let mut backoff = Backoff::default();
        backoff.transient_base = Duration::from_millis(40);
        backoff.throttle_base = Duration::from_millis(80);
        backoff.cap = Duration::from_millis(400);
        backoff
    };
    policy.hint_jitter = {
        let mut jitter = HintJitter::default();
        jitter.fixed = Duration::from_millis(50);
        jitter.fraction = 0.1;
        jitter
    };
    policy.default_deadline = Some(Duration::from_secs(30));
    policy
}

pub fn layer() -> RetryLayer {
    RetryLayer::builder()
        .policy(fast_policy())
        .seed(7)
        .build()
        .expect("layer")
}

/// A mock whose limits are far above what a test sends.
pub fn roomy() -> MockConfig {
    let limits = ratewise_mock::Limits {
        requests_per_minute: Some(100_000),
        input_tokens_per_minute: Some(100_000_000),
        output_tokens_per_minute: Some(100_000_000),
        tokens_per_minute: None,
    };
    MockConfig {
        anthropic_limits: limits,
        openai_limits: ratewise_mock::Limits {
            tokens_per_minute: Some(100_000_000),
            ..limits
        },
        ..MockConfig::default()
    }
}

pub async fn mock(config: MockConfig) -> MockServer {
    MockServer::start(config).await.expect("mock starts")
}

/// Every request body that reached the client below ratewise, in order.
#[derive(Clone, Default)]
pub struct Wire(pub Arc<Mutex<Vec<Bytes>>>);

impl Wire {
    pub fn bodies(&self) -> Vec<Bytes> {
        self.0.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl Middleware for Wire {
    async fn handle(
        &self,
        req: reqwest::Request,
        extensions: &mut http::Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let bytes = req
            .body()
            .and_then(|b| b.as_bytes())
            .map(Bytes::copy_from_slice)
            .unwrap_or_default();
        self.0.lock().unwrap().push(bytes);
        next.run(req, extensions).await
    }
}

/// A client with ratewise, then the wire recorder, in its stack.
pub fn client(layer: &RetryLayer, wire: &Wire) -> ClientWithMiddleware {
    client_over(reqwest::Client::new(), layer, wire)
}

pub fn client_over(
    inner: reqwest::Client,
    layer: &RetryLayer,
    wire: &Wire,
) -> ClientWithMiddleware {
    ClientBuilder::new(inner)
        .with(RatewiseMiddleware::from_layer(layer.clone()))
        .with(wire.clone())
        .build()
}

pub fn anthropic_body(max_tokens: u64, stream: bool) -> serde_json::Value {
    serde_json::json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": max_tokens,
        "stream": stream,
        "messages": [{"role": "user", "content": "say hello"}]
    })
}

pub fn openai_body(max_tokens: u64, stream: bool) -> serde_json::Value {
    serde_json::json!({
        "model": "gpt-4o-mini",
        "max_completion_tokens": max_tokens,
        "stream": stream,
        "messages": [{"role": "user", "content": "say hello"}]
    })
}

pub fn anthropic(
    client: &ClientWithMiddleware,
    server: &MockServer,
    job: &str,
) -> reqwest_middleware::RequestBuilder {
    client
        .post(format!("{}/v1/messages", server.base_url()))
        .header("x-api-key", ANTHROPIC_KEY)
        .header("content-type", "application/json")
        .with_extension(ratewise_tower::JobId::new(job))
}

pub fn openai(
    client: &ClientWithMiddleware,
    server: &MockServer,
    job: &str,
) -> reqwest_middleware::RequestBuilder {
    client
        .post(format!("{}/v1/chat/completions", server.base_url()))
        .bearer_auth(OPENAI_KEY)
        .header("content-type", "application/json")
        .with_extension(ratewise_tower::JobId::new(job))
}

/// Sends per job as the mock recorded them.
pub fn sends(server: &MockServer, job: &str) -> usize {
    server
        .records()
        .iter()
        .filter(|r| r.job.as_deref() == Some(job))
        .count()
}

/// Virtual time: a sleep returns at once and moves the clock to its end.
/// The wall clock starts at the real present, so an HTTP-date the mock
/// writes is read against the same present.
pub struct ManualClock {
    start: SystemTime,
    now: Mutex<Duration>,
}

impl ManualClock {
    pub fn new() -> Arc<Self> {
        Arc::new(ManualClock {
            start: SystemTime::now(),
            now: Mutex::new(Duration::ZERO),
        })
    }

    /// Virtual time slept so far.
    pub fn elapsed(&self) -> Duration {
        *self.now.lock().unwrap()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Now {
        let d = *self.now.lock().unwrap();
        Now::new(Instant::from_origin(d), self.start + d)
    }

    fn sleep_until(&self, at: Instant) -> Sleep {
        let mut now = self.now.lock().unwrap();
        *now = (*now).max(at.since_origin());
        Box::pin(std::future::ready(()))
    }
}

/// Waits (briefly, in real time) until the layer's ledger is clean: a
/// body dropped on another task settles through the store.
pub async fn clean(layer: &RetryLayer) -> ratewise_core::admit::Ledger {
    for _ in 0..200 {
        let l = layer.ledger().expect("in-memory store");
        if l.is_clean() {
            return l;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let l = layer.ledger().expect("in-memory store");
    panic!("ledger not clean: {l:?}");
}
