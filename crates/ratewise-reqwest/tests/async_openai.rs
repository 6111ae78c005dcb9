//! `OpenAiLayer` with the real async-openai against the mock's OpenAI
//! endpoint.

mod common;

use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::ReqwestService;
use async_openai::types::chat::{
    ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequest,
    CreateChatCompletionRequestArgs,
};
use async_openai::Client;
use common::*;
use ratewise_mock::{Fault, FaultRule, MockConfig, MockServer};
use ratewise_reqwest::{openai_ratewise_error, OpenAiLayer};
use ratewise_tower::RetryLayer;

fn openai_client(server: &MockServer, layer: &RetryLayer) -> Client<OpenAIConfig> {
    let service = tower::ServiceBuilder::new()
        .layer(OpenAiLayer::from_layer(layer.clone()))
        .service(ReqwestService::new(reqwest::Client::new()));
    let config = OpenAIConfig::new()
        .with_api_base(format!("{}/v1", server.base_url()))
        .with_api_key(OPENAI_KEY);
    Client::with_config(config).with_http_service(service)
}

fn chat() -> CreateChatCompletionRequest {
    CreateChatCompletionRequestArgs::default()
        .model("gpt-4o-mini")
        .max_completion_tokens(64u32)
        .messages([ChatCompletionRequestUserMessageArgs::default()
            .content("say hello")
            .build()
            .unwrap()
            .into()])
        .build()
        .unwrap()
}

#[tokio::test]
async fn async_openai_retries_through_ratewise_alone_and_usage_settles() {
    let server = mock(MockConfig {
        faults: vec![FaultRule::nth(Fault::Overloaded, [1, 2])],
        ..roomy()
    })
    .await;
    let layer = layer();
    let client = openai_client(&server, &layer);
    let answer = client.chat().create(chat()).await.expect("a completion");
    assert!(answer.usage.expect("usage").completion_tokens > 0);
    // Three sends: ratewise's, none of async-openai's own retry layer
    // (with_http_service replaces it).
    assert_eq!(server.records().len(), 3);
    let ledger = clean(&layer).await;
    assert!(ledger.charged.output > 0, "{ledger:?}");
}

#[tokio::test]
async fn a_spend_cap_reaches_async_openai_as_api_error_with_the_code() {
    let server = mock(roomy()).await;
    server.set_spend_cap(Some(0.0));
    let layer = layer();
    let client = openai_client(&server, &layer);
    match client.chat().create(chat()).await {
        Err(OpenAIError::ApiError(e)) => {
            assert_eq!(e.status_code.as_u16(), 429);
            assert_eq!(e.api_error.code.as_deref(), Some("insufficient_quota"));
        }
        other => panic!("expected the provider's ApiError, got {other:?}"),
    }
    // The key is stopped: nothing more is sent, and async-openai raises
    // the provider's error again from the kept answer.
    match client.chat().create(chat()).await {
        Err(OpenAIError::ApiError(e)) => {
            assert_eq!(e.api_error.code.as_deref(), Some("insufficient_quota"))
        }
        other => panic!("expected the kept ApiError, got {other:?}"),
    }
    // A layer that kept no answer (another one on the same RetryLayer):
    // the decision, boxed.
    let other = openai_client(&server, &layer);
    let err = other.chat().create(chat()).await.expect_err("stopped");
    let e = openai_ratewise_error(&err).expect("ratewise's decision");
    assert!(e.is_stop_queue(), "{e}");
    assert_eq!(server.records().len(), 1);
    clean(&layer).await;
}
