//! The 10 s-bucket OpenAI workload of `bench/proxy_sdk.sh` (RPM 500, TPM
//! 200k charged from `max_tokens` at admission, rejected requests
//! counted, buckets holding 10 s, `Content-Length` bodies, latency; 150
//! jobs of 500–1 500 input tokens and `max_tokens` 512, 16 at a time)
//! through three Rust clients, each against a fresh mock:
//!
//! 1. `reqwest` + `RatewiseMiddleware` (reqwest-middleware);
//! 2. async-openai over `OpenAiLayer` (`Client::with_http_service`);
//! 3. async-openai's default stack (its own backoff), for comparison.
//!
//! Each ratewise client must finish every job with ≤ 1 % of sends
//! answered 429 and ≥ 0.9 of the binding limit (tokens) used:
//! `used = tokens answered / (capacity + limit × span)`, as
//! `bench/proxy_sdk.py` counts it. The default stack is printed, not
//! judged. Exits 1 naming what missed.
//!
//! ```text
//! cargo run -q -p ratewise-reqwest --features async-openai --example bench_clients
//! ```

use async_openai::config::OpenAIConfig;
use async_openai::middleware::ReqwestService;
use async_openai::types::chat::{
    ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequest,
    CreateChatCompletionRequestArgs,
};
use futures::stream::{self, StreamExt};
use ratewise_mock::{Framing, LatencyConfig, MockConfig, MockServer, OutputRange, RequestRecord};
use ratewise_reqwest::{reqwest, reqwest_middleware, OpenAiLayer, RatewiseMiddleware};
use ratewise_tower::{Policy, RetryLayer};
use std::time::{Duration, Instant};

const JOBS: usize = 150;
const CONCURRENCY: usize = 16;
const TPM: u64 = 200_000;
const CAPACITY_S: f64 = 10.0;
const MAX_TOKENS: u32 = 512;

fn mock_config() -> MockConfig {
    let mut c = MockConfig {
        seconds_per_minute: 60.0,
        capacity_seconds: CAPACITY_S,
        count_rejected: true,
        framing: Framing::ContentLength,
        output_tokens: OutputRange { min: 100, max: 400 },
        latency: LatencyConfig {
            first_byte_ms: 150,
            per_output_token_ms: 1.0,
        },
        ..MockConfig::default()
    };
    c.openai_limits.requests_per_minute = Some(500);
    c.openai_limits.tokens_per_minute = Some(TPM);
    c
}

/// Input sizes in tokens, 500–1 500, seeded.
fn sizes() -> Vec<usize> {
    let mut rng = fastrand::Rng::with_seed(20_261_202);
    (0..JOBS).map(|_| rng.usize(500..=1500)).collect()
}

/// A prompt the mock counts as about `tokens` input tokens (4 bytes each).
fn prompt(i: usize, tokens: usize) -> String {
    let mut p = format!("job {i}: ");
    while p.len() < tokens * 4 {
        p.push_str("lorem ipsum dolor sit amet ");
    }
    p.truncate(tokens * 4);
    p
}

struct Figures {
    done: usize,
    sends: usize,
    answered_429: usize,
    used: f64,
    wall: Duration,
}

fn judge(records: &[RequestRecord], done: usize, wall: Duration) -> Figures {
    let ok: Vec<&RequestRecord> = records.iter().filter(|r| r.status == Some(200)).collect();
    let tokens: u64 = ok.iter().map(|r| r.input_tokens + r.output_tokens).sum();
    let times: Vec<u64> = records.iter().map(|r| r.provider_ms).collect();
    let span_min = match (times.iter().min(), times.iter().max()) {
        (Some(a), Some(b)) => (b - a) as f64 / 60_000.0,
        _ => 0.0,
    };
    let offered = TPM as f64 * CAPACITY_S / 60.0 + TPM as f64 * span_min;
    Figures {
        done,
        sends: records.len(),
        answered_429: records.iter().filter(|r| r.status == Some(429)).count(),
        used: if offered > 0.0 {
            tokens as f64 / offered
        } else {
            0.0
        },
        wall,
    }
}

async fn with_middleware(server: &MockServer) -> usize {
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(RatewiseMiddleware::from_layer(RetryLayer::new(
            Policy::default(),
        )))
        .build();
    let url = format!("{}/v1/chat/completions", server.base_url());
    let sizes = sizes();
    stream::iter(sizes.into_iter().enumerate())
        .map(|(i, n)| {
            let client = client.clone();
            let url = url.clone();
            async move {
                let body = serde_json::json!({
                    "model": "gpt-4o-mini",
                    "max_tokens": MAX_TOKENS,
                    "messages": [{"role": "user", "content": prompt(i, n)}],
                });
                let Ok(resp) = client
                    .post(&url)
                    .header("authorization", "Bearer sk-bench")
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await
                else {
                    return false;
                };
                resp.status() == 200 && resp.bytes().await.is_ok()
            }
        })
        .buffer_unordered(CONCURRENCY)
        .filter(|ok| std::future::ready(*ok))
        .count()
        .await
}

fn chat(i: usize, n: usize) -> CreateChatCompletionRequest {
    CreateChatCompletionRequestArgs::default()
        .model("gpt-4o-mini")
        .max_completion_tokens(MAX_TOKENS)
        .messages([ChatCompletionRequestUserMessageArgs::default()
            .content(prompt(i, n))
            .build()
            .expect("a message")
            .into()])
        .build()
        .expect("a request")
}

async fn with_async_openai<C: async_openai::config::Config + Clone + Send + Sync + 'static>(
    client: async_openai::Client<C>,
) -> usize {
    stream::iter(sizes().into_iter().enumerate())
        .map(|(i, n)| {
            let client = client.clone();
            async move { client.chat().create(chat(i, n)).await.is_ok() }
        })
        .buffer_unordered(CONCURRENCY)
        .filter(|ok| std::future::ready(*ok))
        .count()
        .await
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut misses = Vec::new();
    for label in [
        "reqwest + RatewiseMiddleware",
        "async-openai + OpenAiLayer",
        "async-openai default stack",
    ] {
        let server = MockServer::start(mock_config()).await.expect("the mock");
        let config = OpenAIConfig::new()
            .with_api_base(format!("{}/v1", server.base_url()))
            .with_api_key("sk-bench");
        let started = Instant::now();
        let done = match label {
            "reqwest + RatewiseMiddleware" => with_middleware(&server).await,
            "async-openai + OpenAiLayer" => {
                let service = tower::ServiceBuilder::new()
                    .layer(OpenAiLayer::from_layer(RetryLayer::new(Policy::default())))
                    .service(ReqwestService::new(reqwest::Client::new()));
                with_async_openai(
                    async_openai::Client::with_config(config).with_http_service(service),
                )
                .await
            }
            _ => with_async_openai(async_openai::Client::with_config(config)).await,
        };
        let f = judge(&server.records(), done, started.elapsed());
        let share = f.answered_429 as f64 / f.sends.max(1) as f64;
        println!(
            "{label:30} | {}/{JOBS} done | {} sends | {} answered 429 ({:.2} %) | used {:.3} of the binding limit | {:.1} s",
            f.done,
            f.sends,
            f.answered_429,
            100.0 * share,
            f.used,
            f.wall.as_secs_f64()
        );
        if label != "async-openai default stack" {
            if f.done < JOBS {
                misses.push(format!("{label}: {}/{JOBS} done", f.done));
            }
            if share > 0.01 {
                misses.push(format!(
                    "{label}: {:.2} % answered 429 > 1 %",
                    100.0 * share
                ));
            }
            if f.used < 0.9 {
                misses.push(format!(
                    "{label}: used {:.3} < 0.9 of the binding limit",
                    f.used
                ));
            }
        }
        server.shutdown().await;
    }
    if misses.is_empty() {
        println!("bench_clients: every ratewise client passed");
        std::process::ExitCode::SUCCESS
    } else {
        for m in &misses {
            println!("FAIL: {m}");
        }
        std::process::ExitCode::FAILURE
    }
}
