//! `ratewise run`: a file of requests in, every result out, nothing paid
//! twice (the durable queue of `ratewise-run`).

use clap::{Args, ValueEnum};
use ratewise_run::{Options, ProgressMode};
use std::path::PathBuf;

/// `--progress`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ProgressArg {
    /// A bar on stderr when it is a terminal.
    Auto,
    /// One JSON object per second on stdout, then a summary.
    Json,
    /// Only the closing lines on stderr.
    Off,
}

/// The run's flags (keep these names: scripts depend on them).
#[derive(Debug, Args)]
#[command(
    after_help = "Exit codes (the first that applies): 0 all done; 2 usage or input error \
(bad lines included); 3 the store is locked by another run; 4 stopped (spend cap, billing, auth, \
budget); 5 interrupted (a signal, or the store could not be written); 6 some held_unknown; \
7 some failed or expired."
)]
pub struct RunArgs {
    /// The requests: an OpenAI Batch API file or Anthropic Message Batches
    /// requests, one JSON object per line.
    input: PathBuf,
    /// Where the results go (default: INPUT.results.jsonl).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The provider's base URL (default: https://api.openai.com or
    /// https://api.anthropic.com, by the input's shape).
    #[arg(long)]
    upstream: Option<String>,
    /// The store (default: INPUT.ratewise.db). Re-running with the same
    /// store resumes.
    #[arg(long)]
    db: Option<PathBuf>,
    /// A TOML file: upstream, api_key, window, deadline, budget_tokens,
    /// grace_s, synchronous, [limits].
    #[arg(long)]
    config: Option<PathBuf>,
    /// Input + output tokens the whole run may spend (spent plus the worst
    /// case of what is in flight never passes it).
    #[arg(long, value_name = "N")]
    budget_tokens: Option<u64>,
    /// Each job's deadline, from when it was first seen (default 24h).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    deadline: Option<std::time::Duration>,
    /// On SIGTERM or SIGINT, how long sends in flight get (default 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    grace: Option<std::time::Duration>,
    /// Progress: a bar on a terminal, JSON lines on stdout, or nothing.
    #[arg(long, value_enum, default_value = "auto")]
    progress: ProgressArg,
    /// Clear a kept stop (spend cap, billing, budget) and send again.
    #[arg(long)]
    resume_stopped: bool,
    /// Send each job held as unknown once more (it may be paid twice).
    #[arg(long)]
    retry_unknown: bool,
    /// Refuse the whole file when any line is bad.
    #[arg(long)]
    strict: bool,
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    ratewise_run::duration::parse(text)
        .ok_or_else(|| format!("{text:?} is not a duration (6h, 30m, 90s, 1h30m)"))
}

/// Runs the queue; its exit code.
pub fn run(args: &RunArgs) -> u8 {
    let mut options = Options::new(&args.input);
    options.out = args.out.clone();
    options.upstream = args.upstream.clone();
    options.db = args.db.clone();
    options.config = args.config.clone();
    options.budget_tokens = args.budget_tokens;
    options.deadline = args.deadline;
    options.grace = args.grace;
    options.progress = match args.progress {
        ProgressArg::Auto => ProgressMode::Auto,
        ProgressArg::Json => ProgressMode::Json,
        ProgressArg::Off => ProgressMode::Off,
    };
    options.resume_stopped = args.resume_stopped;
    options.retry_unknown = args.retry_unknown;
    options.strict = args.strict;
    ratewise_run::run(&options, &|v| std::env::var(v).ok())
}
