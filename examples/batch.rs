//! A hyper-util client sends a batch of jobs through `RetryLayer` to the
//! in-process mock provider (with injected overloads, resets, a 429 with
//! `retry-after` and a 404) and prints one line per job.
//!
//! ```text
//! cargo run --example batch --features tower
//! ```

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise::core::Provider;
use ratewise::tower::{Attempts, Config, JobId, RetryLayer};
use ratewise_mock::{Fault, FaultRule, MockConfig, MockServer, RetryAfterFormat};
use std::time::Duration;
use tower::{Service, ServiceBuilder, ServiceExt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // The mock: overloads on some requests, a reset, a 429 with retry-after,
    // a 404. Its limits are roomy so pacing does not slow the demo.
    let mut mock = MockConfig {
        faults: vec![
            FaultRule::nth(Fault::Overloaded, [2, 3, 9]),
            FaultRule::nth(Fault::Reset, [5]),
            FaultRule::nth(
                Fault::RetryAfter {
                    format: RetryAfterFormat::Seconds,
                    secs: 1,
                },
                [7],
            ),
            FaultRule::nth(
                Fault::Status {
                    status: 404,
                    html: false,
                },
                [12],
            ),
        ],
        ..MockConfig::default()
    };
    mock.anthropic_limits.requests_per_minute = Some(10_000);
    mock.anthropic_limits.input_tokens_per_minute = Some(10_000_000);
    mock.anthropic_limits.output_tokens_per_minute = Some(10_000_000);
    let server = MockServer::start(mock).await?;

    // The inner client makes exactly one attempt per call; the layer owns retries.
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut config = Config::default();
    config.policy.backoff.transient_base = Duration::from_millis(100);
    config.policy.default_deadline = Some(Duration::from_secs(30));
    config.provider = Some(Provider::Anthropic);
    let layer = RetryLayer::builder().config(config).build()?;
    let service = ServiceBuilder::new().layer(layer).service(client);

    let url = format!("{}/v1/messages", server.base_url());
    let mut tasks = Vec::new();
    for i in 1..=12 {
        let mut svc = service.clone();
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let body = serde_json::json!({
                "model": "claude-sonnet-4-5", "max_tokens": 128,
                "messages": [{"role": "user", "content": format!("job {i}")}]
            });
            let mut req = http::Request::post(url)
                .header("content-type", "application/json")
                .header("x-api-key", "sk-ant-demo")
                .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
                .unwrap();
            let id = format!("job-{i:02}");
            req.extensions_mut().insert(JobId::new(&id));
            // A short stagger keeps the mock's request numbers readable.
            tokio::time::sleep(Duration::from_millis(20 * i)).await;
            let row = match svc.ready().await.unwrap().call(req).await {
                Ok(resp) => {
                    let attempts = resp.extensions().get::<Attempts>().map_or(0, |a| a.0.len());
                    let status = resp.status().as_u16();
                    let mut body = resp.into_body();
                    while let Some(Ok(_)) = body.frame().await {}
                    let usage = body.metered().and_then(|m| m.usage());
                    format!(
                        "{id}  {:<12} {attempts:>2}  {status:>6}  {:<14} in={:<4} out={}",
                        "done",
                        "success",
                        usage.map_or(0, |u| u.input_tokens),
                        usage.map_or(0, |u| u.output_tokens)
                    )
                }
                Err(e) => format!(
                    "{id}  {:<12} {:>2}  {:>6}  {:<14} {}",
                    e.action().map_or("error", |a| a.as_str()),
                    e.attempts().len(),
                    e.status()
                        .map_or("-".to_owned(), |s| s.as_u16().to_string()),
                    e.classification().map_or("-", |c| c.cause.as_str()),
                    e.give_up_reason()
                        .map_or(String::new(), |r| format!("reason={r}"))
                ),
            };
            row
        }));
    }
    println!("job     outcome      att  status  cause          detail");
    for t in tasks {
        println!("{}", t.await?);
    }
    println!("\nsends the mock recorded: {}", server.records().len());
    server.shutdown().await;
    Ok(())
}
