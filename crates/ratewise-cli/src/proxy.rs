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
    /// The provider's base URL (https://api.anthropic.com); more, and
    /// routing between them, in --config.
    #[arg(long)]
    upstream: Option<String>,
    /// A TOML file: upstreams, limits per key or group and class, policy,
    /// spend budget, bounds, log format.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Share each key's limits with other processes through Redis.
    #[arg(long)]
    redis: Option<String>,
    /// Write every attempt and stop to this file; read it back on start.
    #[arg(long)]
    journal: Option<PathBuf>,
    /// The admin listener: /status, /resume, /stop, /metrics, /healthz
    /// (default 127.0.0.1:8788). Every call but /healthz needs the admin
    /// token as `Authorization: Bearer` ([admin] in --config; by default
    /// generated into a 0600 file whose path the start log gives).
    #[arg(long)]
    admin: Option<String>,
}

/// Runs the proxy until SIGINT or SIGTERM.
pub fn run(args: &ProxyArgs) -> Result<(), String> {
    let flags = Flags {
        listen: args.listen.clone(),
        upstream: args.upstream.clone(),
        config: args.config.clone(),
        redis: args.redis.clone(),
        journal: args.journal.clone(),
        admin: args.admin.clone(),
    };
    let config = ProxyConfig::load(&flags, |v| std::env::var(v).ok()).map_err(|e| e.to_string())?;
    ratewise_proxy::init_logging(config.log);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    match rt.block_on(ratewise_proxy::run(config)) {
        0 => Ok(()),
        _ => Err("the proxy did not start".into()),
    }
}
