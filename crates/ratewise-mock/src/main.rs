//! `ratewise-mock --config FILE [--addr 127.0.0.1:0]`: runs the mock
//! provider and prints its bound address (`127.0.0.1:PORT`) as the first
//! line on stdout, then serves until killed. On SIGINT or SIGTERM it
//! prints a one-line JSON summary on stderr (`ratewise-mock summary: {…}`:
//! requests, `usd_direct`, `usd_batch`, `usd_total`, batches and batch
//! items by state) and exits 0.

use clap::Parser;
use ratewise_mock::{MockConfig, MockServer};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

/// A fault-injecting mock LLM provider (Anthropic Messages, OpenAI Chat and its
/// compatible flavors, Gemini, Bedrock Converse, Claude on Vertex AI).
#[derive(Debug, Parser)]
#[command(name = "ratewise-mock", version)]
struct Args {
    /// JSON config file (every field optional); defaults when absent.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            MockConfig::from_json(&text)
                .map_err(|e| format!("bad config {}: {e}", path.display()))?
        }
        None => MockConfig::default(),
    };
    let server = MockServer::bind(config, args.addr).await?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", server.addr())?;
    out.flush()?;
    drop(out);
    shutdown_signal().await;
    let totals = server.batch_totals();
    let summary = serde_json::json!({
        "requests": server.records().len() as u64 + server.unrecorded(),
        "usd_direct": server.usd_direct(),
        "usd_batch": server.usd_batch(),
        "usd_total": server.spend_usd(),
        "batches": totals.batches,
        "batch_items": totals.items,
    });
    eprintln!("ratewise-mock summary: {summary}");
    server.shutdown().await;
    Ok(())
}

#[cfg(unix)]
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(not(unix))]
async fn shutdown_signal() {
    let _ = tokio::signal::ctrl_c().await;
}
