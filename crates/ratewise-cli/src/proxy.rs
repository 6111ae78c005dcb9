//! `ratewise proxy`: the gateway an SDK points its base URL at.

use clap::Args;
use ratewise_proxy::config::{Flags, ProxyConfig};
use std::path::PathBuf;

/// The proxy's flags (keep these names: scripts depend on them).
#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// Where callers connect (default 127.0.0.1:8787).
    #[arg(long)]
    listen: Option<String>,
    /// The provider's base URL (`https://api.anthropic.com`); more, and
    /// routing between them, in --config (optional when --config has
    /// `[[pools]]`).
    #[arg(long)]
    upstream: Option<String>,
    /// How --upstream's answers are read and its callers answered:
    /// anthropic, openai, gemini, bedrock, azure, groq, mistral, deepseek,
    /// openrouter, xai, generic, or auto (the default: from the URL's
    /// host; an unknown host's answers are read by their own shape,
    /// generic rules when they show none).
    #[arg(long, value_name = "NAME")]
    provider: Option<String>,
    /// A TOML file: upstreams, pools (several keys as one, selected by the
    /// caller's key), limits per key or group and class, policy,
    /// spend budget, bounds, log format.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Share each key's limits with other processes through Redis.
    #[arg(long)]
    redis: Option<String>,
    /// Write every attempt and stop to this file; read it back on start
    /// (unknown outcomes are kept until acknowledged; the file is compacted
    /// to what a restart needs on start and past 1 MiB).
    #[arg(long)]
    journal: Option<PathBuf>,
    /// The admin listener: /status, /resume, /stop, /unknown/ack, /metrics,
    /// /healthz
    /// (default 127.0.0.1:8788). Every call but /healthz needs the admin
    /// token as `Authorization: Bearer` (`[admin]` in --config; by default
    /// generated into a 0600 file whose path the start log gives).
    #[arg(long)]
    admin: Option<String>,
    /// On SIGTERM or SIGINT, how long sends in flight get to finish, in
    /// seconds (default 30, or `bounds.grace_s`); a second signal exits at
    /// once.
    #[arg(long, value_name = "SECONDS")]
    grace: Option<f64>,
}

/// Runs the proxy until SIGINT or SIGTERM; its exit code (see
/// `ratewise_proxy::run`: 0 nothing cut, 2 did not start, 3 answers cut at
/// the end of the grace, 4 a second signal), or why it could not be
/// configured.
pub fn run(args: &ProxyArgs) -> Result<u8, String> {
    let flags = Flags {
        listen: args.listen.clone(),
        upstream: args.upstream.clone(),
        config: args.config.clone(),
        redis: args.redis.clone(),
        journal: args.journal.clone(),
        admin: args.admin.clone(),
        provider: args.provider.clone(),
    };
    let mut config =
        ProxyConfig::load(&flags, |v| std::env::var(v).ok()).map_err(|e| e.to_string())?;
    if let Some(g) = args.grace {
        config.grace = std::time::Duration::try_from_secs_f64(g)
            .map_err(|_| format!("--grace {g}: not a number of seconds"))?;
    }
    ratewise_proxy::init_logging(config.log);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let code = rt.block_on(ratewise_proxy::run(config));
    // Tasks still running (a send cut at the end of the grace) are not
    // waited for.
    rt.shutdown_background();
    Ok(u8::try_from(code).unwrap_or(1))
}
