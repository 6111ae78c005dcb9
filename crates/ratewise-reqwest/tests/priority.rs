//! The tower layer's [`Workload`] extension passes through the
//! middleware (`RequestBuilder::with_extension`): an interactive call
//! behind twenty queued bulk calls on one key is sent next. Tokio's paused
//! clock and a provider stub at the end of the stack: every wait is
//! virtual.

use ratewise_core::admit::{self, Burst, RampConfig};
use ratewise_reqwest::RatewiseMiddleware;
use ratewise_tower::{Limits, Policy, RetryLayer, Workload};
use reqwest_middleware::{ClientBuilder, Middleware, Next};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The provider: answers every send at once, recording the job ids in
/// the order they came.
#[derive(Clone, Default)]
struct Stub(Arc<Mutex<Vec<String>>>);

#[async_trait::async_trait]
impl Middleware for Stub {
    async fn handle(
        &self,
        req: reqwest::Request,
        _extensions: &mut http::Extensions,
        _next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let job = req.headers()["x-ratewise-job"].to_str().unwrap().to_owned();
        self.0.lock().unwrap().push(job);
        let body =
            r#"{"type":"message","content":[],"usage":{"input_tokens":5,"output_tokens":7}}"#;
        Ok(http::Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(body)
            .unwrap()
            .into())
    }
}

/// One send per 100 ms, no burst, no ramp.
fn layer() -> RetryLayer {
    let mut a = admit::Config::default();
    a.limits = Limits::per_minute().requests(600);
    a.burst = {
        let mut b = Burst::default();
        b.requests = Duration::ZERO;
        b
    };
    a.ramp = {
        let mut r = RampConfig::default();
        r.start = 1000;
        r
    };
    a.seed = Some(3);
    RetryLayer::builder()
        .policy(Policy::default())
        .admission(a)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_interactive_call_passes_queued_bulk_calls_through_the_middleware() {
    let stub = Stub::default();
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(RatewiseMiddleware::from_layer(layer()))
        .with(stub.clone())
        .build();
    let call = |job: String, workload: Workload| {
        client
            .post("http://127.0.0.1:9/v1/messages")
            .header("x-api-key", "sk-ant-test")
            .header("content-type", "application/json")
            .with_extension(ratewise_tower::JobId::new(job))
            .with_extension(workload)
            .body(r#"{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[]}"#)
            .send()
    };
    let mut handles = Vec::new();
    for i in 0..20 {
        let send = call(
            format!("bulk-{i:02}"),
            Workload::level("bulk").flow("batch"),
        );
        handles.push(tokio::spawn(send));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    handles.push(tokio::spawn(call(
        "chat".into(),
        Workload::level("interactive").flow("chat"),
    )));
    for h in handles {
        assert_eq!(h.await.unwrap().unwrap().status(), 200);
    }
    let order = stub.0.lock().unwrap().clone();
    assert_eq!(order.len(), 21);
    assert_eq!(
        order.iter().position(|j| j == "chat"),
        Some(1),
        "the interactive call is the next send: {order:?}"
    );
}
