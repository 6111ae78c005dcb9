//! A rig agent (rig-agent over rig-core's OpenAI chat model) over
//! rig-reqwest's `ReqwestMiddlewareClient` with ratewise in its stack,
//! against the mock's OpenAI endpoint.

mod common;

use common::*;
use ratewise_mock::{Fault, FaultRule, MockConfig, MockServer};
use ratewise_reqwest::RatewiseMiddleware;
use ratewise_tower::RetryLayer;
use rig_agent::AgentBuilder;
use rig_core::providers::openai::OpenAIConfig;
use rig_reqwest::ReqwestMiddlewareClient;

fn agent(server: &MockServer, layer: &RetryLayer) -> rig_agent::Agent {
    let http = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(RatewiseMiddleware::from_layer(layer.clone()))
        .build();
    let openai = OpenAIConfig::new(OPENAI_KEY)
        .with_base_url(format!("{}/v1", server.base_url()))
        .connect(ReqwestMiddlewareClient::from(http));
    AgentBuilder::new(openai.chat("gpt-4o-mini"))
        .preamble("Be concise.")
        .max_tokens(64)
        .build()
}

#[tokio::test]
async fn a_rig_agent_retries_through_ratewise_and_usage_settles() {
    let server = mock(MockConfig {
        faults: vec![FaultRule::nth(Fault::Overloaded, [1])],
        ..roomy()
    })
    .await;
    let layer = layer();
    let agent = agent(&server, &layer);
    let response = agent.prompt("say hello").await.expect("an answer");
    assert!(!response.content.is_empty());
    // The 503 and the answer: ratewise's one retry, nothing else's.
    assert_eq!(server.records().len(), 2);
    let ledger = clean(&layer).await;
    assert!(ledger.charged.output > 0, "{ledger:?}");
}

#[tokio::test]
async fn a_spend_cap_stops_a_rig_agent_with_no_further_send() {
    let server = mock(roomy()).await;
    server.set_spend_cap(Some(0.0));
    let layer = layer();
    let agent = agent(&server, &layer);
    let first = agent.prompt("say hello").await.expect_err("spend cap");
    assert!(
        format!("{first:?}").contains("insufficient_quota"),
        "the provider's code reaches rig: {first:?}"
    );
    let second = agent.prompt("say hello").await.expect_err("stopped");
    assert!(
        format!("{second:?}").contains("insufficient_quota"),
        "the kept answer: {second:?}"
    );
    assert_eq!(server.records().len(), 1);
    clean(&layer).await;
}
