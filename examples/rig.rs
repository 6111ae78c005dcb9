//! A rig agent with ratewise in its HTTP stack: rig-core's OpenAI chat
//! model on rig-reqwest's `ReqwestMiddlewareClient`, whose
//! reqwest-middleware stack holds `RatewiseMiddleware`. Runs against the
//! in-process mock; no network, no key.
//!
//! ```text
//! cargo run --example rig --features rig
//! ```

use ratewise::reqwest::reqwest;
use ratewise::reqwest::reqwest_middleware::ClientBuilder;
use ratewise::reqwest::rig_agent::AgentBuilder;
use ratewise::reqwest::rig_core::providers::openai::OpenAIConfig;
use ratewise::reqwest::rig_reqwest::ReqwestMiddlewareClient;
use ratewise::reqwest::RatewiseMiddleware;
use ratewise::tower::{Policy, RetryLayer};
use ratewise_mock::{Fault, FaultRule, MockConfig, MockServer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // The mock answers the first request "overloaded" (503).
    let server = MockServer::start(MockConfig {
        faults: vec![FaultRule::nth(Fault::Overloaded, [1])],
        ..MockConfig::default()
    })
    .await?;

    // What to write: ratewise in the middleware stack rig sends through.
    let layer = RetryLayer::new(Policy::default());
    let http = ClientBuilder::new(reqwest::Client::new())
        .with(RatewiseMiddleware::from_layer(layer))
        .build();
    let openai = OpenAIConfig::new("sk-example")
        .with_base_url(format!("{}/v1", server.base_url()))
        .connect(ReqwestMiddlewareClient::from(http));
    let agent = AgentBuilder::new(openai.chat("gpt-4o-mini"))
        .preamble("Be concise.")
        .max_tokens(64)
        .build();

    let answer = agent.prompt("say hello").await?;
    println!(
        "answered after {} send(s): {} content part(s), {} output tokens",
        server.records().len(),
        answer.content.len(),
        answer.usage.output_tokens.unwrap_or(0)
    );
    server.shutdown().await;
    Ok(())
}
