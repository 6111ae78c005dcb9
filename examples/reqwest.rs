//! reqwest with ratewise: `RatewiseMiddleware` in a reqwest-middleware
//! stack. Each call is one job: paced, retried after the decided wait
//! (`Retry-After` honoured), its usage settled when the body is read.
//! Runs against the in-process mock; no network, no key.
//!
//! ```text
//! cargo run --example reqwest --features reqwest
//! ```

use ratewise::reqwest::reqwest;
use ratewise::reqwest::reqwest_middleware::ClientBuilder;
use ratewise::reqwest::{ratewise_error, Outcome, RatewiseMiddleware, ACTION_HEADER};
use ratewise::tower::{Deadline, JobId, Policy, RetryLayer};
use ratewise_mock::{Fault, FaultRule, MockConfig, MockServer, RetryAfterFormat};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // The first request is answered 429 with `retry-after: 1`.
    let server = MockServer::start(MockConfig {
        faults: vec![FaultRule::nth(
            Fault::RetryAfter {
                format: RetryAfterFormat::Seconds,
                secs: 1,
            },
            [1],
        )],
        ..MockConfig::default()
    })
    .await?;

    // What to write: the middleware first in the stack (no other retrier).
    let layer = RetryLayer::new(Policy::default());
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(RatewiseMiddleware::from_layer(layer))
        .build();

    let body = serde_json::json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "say hello"}]
    });
    let response = client
        .post(format!("{}/v1/messages", server.base_url()))
        .header("x-api-key", "sk-ant-example")
        .header("content-type", "application/json")
        .with_extension(JobId::new("hello"))
        .body(serde_json::to_vec(&body)?)
        .send()
        .await?;
    let sends = response
        .extensions()
        .get::<Outcome>()
        .map_or(0, |o| o.attempts().len());
    println!(
        "{} {} after {sends} send(s) ({})",
        response.status(),
        response.url(),
        response
            .headers()
            .get(ACTION_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    );
    let answer: serde_json::Value = serde_json::from_slice(&response.bytes().await?)?;
    println!("usage: {}", answer["usage"]);

    // Billing off: the provider's 402 comes back as it is, and the key is
    // stopped: the next call gets that answer again at once, nothing sent.
    server.set_billing_error(true);
    let send = || {
        client
            .post(format!("{}/v1/messages", server.base_url()))
            .header("x-api-key", "sk-ant-example")
            .body(serde_json::to_vec(&body).unwrap_or_default())
            .send()
    };
    let refused = send().await?;
    println!(
        "{} ({:?})",
        refused.status(),
        refused.headers().get(ACTION_HEADER)
    );
    let sent = server.records().len();
    let again = send().await?;
    println!(
        "next call: {} ({:?}), sends still {sent}",
        again.status(),
        again.headers().get(ACTION_HEADER)
    );
    assert_eq!(server.records().len(), sent);

    // A call that ends with no answer to give (here: past its deadline
    // before a send) is an error carrying ratewise's decision.
    server.set_billing_error(false);
    let err = client
        .post(format!("{}/v1/messages", server.base_url()))
        .header("x-api-key", "sk-ant-other")
        .with_extension(Deadline(std::time::Duration::ZERO))
        .body(serde_json::to_vec(&body)?)
        .send()
        .await
        .err()
        .ok_or("expected no send")?;
    match ratewise_error(&err) {
        Some(e) => println!("no answer: {e}"),
        None => println!("transport: {err}"),
    }
    server.shutdown().await;
    Ok(())
}
