//! `ratewise`: explain what a provider response means, and what to do next.
#![forbid(unsafe_code)]

mod explain;
mod http_text;
mod matrix;
mod proxy;
mod run;
mod simulate;

use clap::{Parser, Subcommand};

/// The proxy serves many requests on every worker thread; mimalloc keeps
/// their allocations off one global lock.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::process::ExitCode;

/// Read LLM API responses whole and act on them.
#[derive(Debug, Parser)]
#[command(name = "ratewise", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Classify one response (as `curl -si` prints it) and show the decision.
    Explain(explain::ExplainArgs),
    /// Simulate a workload against a rate-limited provider with ratewise and
    /// common retry strategies side by side (virtual time, reproducible).
    Simulate(simulate::SimulateArgs),
    /// Serve as the gateway any SDK points its base URL at (retries off in
    /// the SDK): one retry owner, shared pacing per key.
    Proxy(proxy::ProxyArgs),
    /// Run a file of requests (OpenAI Batch API or Anthropic Message
    /// Batches lines) through the job machine: paced, retried, crash-safe,
    /// every result out once.
    Run(run::RunArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match &cli.command {
        Command::Explain(args) => explain::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Run(args) => return ExitCode::from(run::run(args)),
        Command::Proxy(args) => match proxy::run(args) {
            Ok(code) => return ExitCode::from(code),
            Err(message) => Err(message),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("ratewise: {message}");
            ExitCode::from(2)
        }
    }
}
