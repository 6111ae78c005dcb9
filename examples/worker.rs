//! A worker that keeps its jobs: `defer` puts a job back with its
//! not-before time, `stop_queue` parks the whole queue until a human
//! resumes (here: the demo raises the mock's spend cap and calls
//! `resume`). No job is lost; each ends in exactly one outcome.
//!
//! ```text
//! cargo run --example worker --features tower
//! ```

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise::core::Provider;
use ratewise::tower::{Config, JobId, KeyLabel, RetryLayer};
use ratewise_mock::{Fault, FaultRule, MockConfig, MockServer, RetryAfterFormat};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant, SystemTime};
use tower::{Layer, Service, ServiceExt};

struct Job {
    id: String,
    not_before: Instant,
    deferrals: u32,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // A 429 asking for 2 s (longer than the worker holds a job inline) and
    // a spend cap that a handful of requests crosses.
    let mut cfg = MockConfig {
        faults: vec![FaultRule::nth(
            Fault::RetryAfter {
                format: RetryAfterFormat::Seconds,
                secs: 2,
            },
            [3],
        )],
        ..MockConfig::default()
    };
    cfg.anthropic_limits.requests_per_minute = Some(10_000);
    cfg.anthropic_limits.input_tokens_per_minute = Some(10_000_000);
    cfg.anthropic_limits.output_tokens_per_minute = Some(10_000_000);
    cfg.spend.cap_usd = Some(0.0005);
    let server = MockServer::start(cfg).await?;

    let mut config = Config::default();
    config.policy.max_inline_wait = Duration::from_millis(500);
    config.policy.default_deadline = Some(Duration::from_secs(60));
    config.provider = Some(Provider::Anthropic);
    let layer = RetryLayer::builder().config(config).build()?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut svc = layer.layer(client);
    let url = format!("{}/v1/messages", server.base_url());

    let mut queue: VecDeque<Job> = (1..=10)
        .map(|i| Job {
            id: format!("job-{i:02}"),
            not_before: Instant::now(),
            deferrals: 0,
        })
        .collect();
    let mut outcomes: BTreeMap<String, String> = BTreeMap::new();
    let mut stops = 0;

    while let Some(mut job) = queue.pop_front() {
        tokio::time::sleep_until(job.not_before.into()).await;
        let body = br#"{"model":"claude-sonnet-4-5","max_tokens":256,"messages":[{"role":"user","content":"work"}]}"#;
        let mut req = http::Request::post(&url)
            .header("content-type", "application/json")
            .header("x-api-key", "sk-ant-demo")
            .body(Full::new(Bytes::from_static(body)))?;
        req.extensions_mut().insert(JobId::new(&job.id));
        match svc.ready().await?.call(req).await {
            Ok(resp) => {
                let _ = resp.into_body().collect().await;
                outcomes.insert(
                    job.id.clone(),
                    format!("done (deferred {}x)", job.deferrals),
                );
            }
            Err(e) if e.is_defer() => {
                let wait = e
                    .until()
                    .and_then(|u| u.duration_since(SystemTime::now()).ok())
                    .unwrap_or_default();
                println!(
                    "{}: deferred for {} ms — back in the queue",
                    job.id,
                    wait.as_millis()
                );
                job.not_before = Instant::now() + wait;
                job.deferrals += 1;
                queue.push_back(job);
            }
            Err(e) if e.is_stop_queue() => {
                stops += 1;
                println!(
                    "{}: queue stopped ({}) — {} jobs kept{}",
                    job.id,
                    e.classification()
                        .map_or("key already stopped", |c| c.cause.as_str()),
                    queue.len() + 1,
                    if e.was_sent() { "" } else { ", nothing sent" }
                );
                queue.push_front(job);
                if stops > 1 {
                    // A stopped key answers at once, without a send; the
                    // demo's "human" fixes the cap and resumes.
                    println!("(a human raises the spend cap and resumes the key)");
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    server.set_spend_cap(None);
                    // No KeyLabel on the requests: they are paced under their
                    // key's fingerprint, which is what is resumed.
                    layer
                        .resume(KeyLabel::fingerprint("sk-ant-demo").as_str())
                        .await;
                }
            }
            Err(e) => {
                outcomes.insert(job.id.clone(), e.to_string());
            }
        }
    }

    println!("\njob     outcome");
    for (id, outcome) in &outcomes {
        println!("{id}  {outcome}");
    }
    println!("spend: {:.6} USD", server.spend_usd());
    println!(
        "\n{} jobs, {} outcomes, {} sends recorded by the mock",
        10,
        outcomes.len(),
        server.records().len()
    );
    server.shutdown().await;
    Ok(())
}
