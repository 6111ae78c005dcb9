//! Shared helpers of the end-to-end tests: a mock provider on loopback, a
//! hyper-util client under the layer, and request builders.
#![allow(dead_code)]

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_core::admit::{self, Controller, RampConfig, Shared};
use ratewise_core::decide::{Backoff, HintJitter, Policy};
use ratewise_core::{ActionKind, Provider};
use ratewise_mock::{MockConfig, MockServer};
use ratewise_tower::{
    Attempts, Config, Error, JobId, Metered, MeteredBody, RetryLayer, RetryService, TokioClock,
};
use std::sync::Arc;
use std::time::Duration;
use tower::{Service, ServiceExt};

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;
pub type Svc = RetryService<HttpClient>;

pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>()
}

/// A policy with short backoffs so the tests stay fast.
/// A layer's configuration for Anthropic answers with [`fast_policy`] and
/// a fixed seed (the priority and demand tests' layers).
pub fn anthropic_config() -> Config {
    let mut config = Config::default();
    config.policy = fast_policy();
    config.provider = Some(Provider::Anthropic);
    config.seed = Some(7);
    config
}

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

/// An admission controller paced to `per_minute` requests with no burst
/// (one send every 60 s / `per_minute`) and no cold-start ramp.
pub fn paced_state(per_minute: u64) -> Arc<Shared> {
    Arc::new(Shared::new(Controller::new({
        let mut config = admit::Config::default();
        config.limits = admit::Limits {
            requests: Some(per_minute),
            ..admit::Limits::NONE
        };
        config.burst = {
            let mut burst = admit::Burst::default();
            burst.requests = Duration::ZERO;
            burst
        };
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        config.seed = Some(3);
        config
    })))
}

/// An admission controller without the cold-start ramp (the mock's limits
/// are learned from its headers; the ramp would pace the tests).
pub fn state() -> Arc<Shared> {
    Arc::new(Shared::new(Controller::new({
        let mut config = admit::Config::default();
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        config
    })))
}

pub fn layer_with(config: Config) -> RetryLayer {
    RetryLayer::builder()
        .config(config)
        .store(state())
        .clock(Arc::new(TokioClock::new()))
        .build()
        .unwrap()
}

pub fn layer() -> RetryLayer {
    layer_with({
        let mut config = Config::default();
        config.policy = fast_policy();
        config.provider = Some(Provider::Anthropic);
        config
    })
}

pub async fn mock(config: MockConfig) -> MockServer {
    MockServer::start(config).await.expect("mock starts")
}

/// A mock whose rate limits are far above what a test sends (the layer
/// learns limits from headers and would otherwise pace the test).
pub fn roomy() -> MockConfig {
    let limits = ratewise_mock::Limits {
        requests_per_minute: Some(100_000),
        input_tokens_per_minute: Some(100_000_000),
        output_tokens_per_minute: Some(100_000_000),
        tokens_per_minute: None,
    };
    MockConfig {
        anthropic_limits: limits,
        ..MockConfig::default()
    }
}

/// A Messages request body, as fixed bytes: the mock picks an answer's
/// length from a hash of the raw body, and the tests that count spend rely
/// on it, so the bytes must not depend on serde_json's features (rig turns
/// on `preserve_order`, which changes the order `json!` writes keys in).
/// The keys are in the order serde_json writes them by default.
pub fn anthropic_body(max_tokens: u64, stream: bool) -> Bytes {
    Bytes::from(format!(
        r#"{{"max_tokens":{max_tokens},"messages":[{{"content":"SECRET-PROMPT-TEXT say hello","role":"user"}}],"model":"claude-sonnet-4-5","stream":{stream}}}"#
    ))
}

/// The API key every test request carries.
pub const API_KEY: &str = "sk-ant-SECRET-KEY";

/// The key the layer paces those requests under (they carry no
/// `KeyLabel`): the API key's fingerprint.
pub fn key() -> String {
    ratewise_tower::KeyLabel::fingerprint(API_KEY)
        .as_str()
        .to_owned()
}

pub fn request(server: &MockServer, job: &str, stream: bool) -> Request<Full<Bytes>> {
    request_to(&server.base_url(), job, stream)
}

pub fn request_to(base_url: &str, job: &str, stream: bool) -> Request<Full<Bytes>> {
    let mut req = Request::post(format!("{base_url}/v1/messages"))
        .header("content-type", "application/json")
        .header("x-api-key", API_KEY)
        .header("cookie", "session=SECRET-COOKIE")
        .body(Full::new(anthropic_body(64, stream)))
        .unwrap();
    req.extensions_mut().insert(JobId::new(job));
    req
}

/// How a job ended, as the tests compare it.
#[derive(Debug)]
pub struct Ended {
    pub action: ActionKind,
    pub attempts: usize,
    pub records: Vec<ratewise_core::record::AttemptRecord>,
    pub error: Option<Error>,
    pub metered: Option<Metered>,
    pub body: Bytes,
}

/// Sends one job and reads a success body to its end.
pub async fn run(svc: &mut Svc, req: Request<Full<Bytes>>) -> Ended {
    let result = svc.ready().await.expect("ready").call(req).await;
    finish(result).await
}

pub async fn finish(result: Result<Response<MeteredBody<hyper::body::Incoming>>, Error>) -> Ended {
    match result {
        Ok(resp) => {
            let records = resp
                .extensions()
                .get::<Attempts>()
                .expect("attempts")
                .0
                .clone();
            let attempts = records.len();
            let mut body = resp.into_body();
            let mut bytes = Vec::new();
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(f) => {
                        if let Some(d) = f.data_ref() {
                            bytes.extend_from_slice(d);
                        }
                    }
                    Err(_) => break,
                }
            }
            Ended {
                action: ActionKind::Done,
                attempts,
                records,
                error: None,
                metered: body.metered().cloned(),
                body: Bytes::from(bytes),
            }
        }
        Err(e) => Ended {
            action: e.action().expect("a decided error"),
            attempts: e.attempts().len(),
            records: e.attempts().to_vec(),
            metered: None,
            body: e.body().cloned().unwrap_or_default(),
            error: Some(e),
        },
    }
}

/// Sends per job as the mock recorded them.
pub fn sends(server: &MockServer, job: &str) -> usize {
    server
        .records()
        .iter()
        .filter(|r| r.job.as_deref() == Some(job))
        .count()
}

/// Asserts that no send of `job` came before the delay its previous
/// attempt decided (mock arrival times, real milliseconds).
pub fn assert_delays_respected(
    server: &MockServer,
    job: &str,
    records: &[ratewise_core::record::AttemptRecord],
) {
    let sent: Vec<u64> = server
        .records()
        .iter()
        .filter(|r| r.job.as_deref() == Some(job))
        .map(|r| r.at_ms)
        .collect();
    for (k, pair) in sent.windows(2).enumerate() {
        let delay = records[k].delay_ms.expect("a retried attempt has a delay");
        assert!(
            pair[1] - pair[0] + 1 >= delay,
            "{job}: attempt {} sent {} ms after attempt {}, decided delay {delay} ms",
            k + 2,
            pair[1] - pair[0],
            k + 1
        );
    }
}
