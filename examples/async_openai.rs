//! async-openai with ratewise as its one retry owner: `OpenAiLayer` over
//! async-openai's `ReqwestService`, installed with
//! `Client::with_http_service` (which replaces async-openai's own retry
//! layer). Runs against the in-process mock; no network, no key.
//!
//! ```text
//! cargo run --example async_openai --features async-openai
//! ```

use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::ReqwestService;
use async_openai::types::chat::{
    ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequest,
    CreateChatCompletionRequestArgs,
};
use async_openai::Client;
use ratewise::reqwest::reqwest;
use ratewise::reqwest::{openai_ratewise_error, OpenAiLayer};
use ratewise::tower::{Policy, RetryLayer};
use ratewise_mock::{Fault, FaultRule, MockConfig, MockServer};

fn chat() -> Result<CreateChatCompletionRequest, OpenAIError> {
    CreateChatCompletionRequestArgs::default()
        .model("gpt-4o-mini")
        .max_completion_tokens(64u32)
        .messages([ChatCompletionRequestUserMessageArgs::default()
            .content("say hello")
            .build()?
            .into()])
        .build()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // The mock answers the first request "overloaded" (503).
    let server = MockServer::start(MockConfig {
        faults: vec![FaultRule::nth(Fault::Overloaded, [1])],
        ..MockConfig::default()
    })
    .await?;

    // What to write: the layer over async-openai's reqwest service.
    let layer = RetryLayer::new(Policy::default());
    let service = tower::ServiceBuilder::new()
        .layer(OpenAiLayer::from_layer(layer))
        .service(ReqwestService::new(reqwest::Client::new()));
    let config = OpenAIConfig::new()
        .with_api_base(format!("{}/v1", server.base_url()))
        .with_api_key("sk-example");
    let client = Client::with_config(config).with_http_service(service);

    let answer = client.chat().create(chat()?).await?;
    let usage = answer.usage.map(|u| u.completion_tokens).unwrap_or(0);
    println!(
        "answered after {} send(s), {usage} output tokens",
        server.records().len()
    );

    // A spend cap: async-openai raises the provider's ApiError, code and
    // all; ratewise stops the key, so the next call sends nothing.
    server.set_spend_cap(Some(0.0));
    match client.chat().create(chat()?).await {
        Err(OpenAIError::ApiError(e)) => println!(
            "provider said {} ({})",
            e.status_code,
            e.api_error.code.as_deref().unwrap_or("no code")
        ),
        other => return Err(format!("expected the provider's ApiError, got {other:?}").into()),
    }
    // The key is stopped: the next call raises the same ApiError from the
    // answer ratewise kept, with nothing sent.
    let sent = server.records().len();
    match client.chat().create(chat()?).await {
        Err(OpenAIError::ApiError(e)) => println!(
            "next call: {} again, sends still {sent}",
            e.api_error.code.as_deref().unwrap_or("no code")
        ),
        Err(e) => match openai_ratewise_error(&e) {
            Some(decision) => println!("next call: {decision}"),
            None => return Err(e.into()),
        },
        Ok(_) => return Err("expected the stop".into()),
    }
    assert_eq!(server.records().len(), sent);
    server.shutdown().await;
    Ok(())
}
