//! The command's options and its config file.
//!
//! ```toml
//! # all optional
//! upstream = "https://api.openai.com"   # else --upstream, else the shape's (a trailing /v1 is fine)
//! api_key = "sk-..."                    # else OPENAI_API_KEY / ANTHROPIC_API_KEY
//! window = 64                           # most jobs in the layer at once
//! deadline = "24h"                      # each job's, from when first seen
//! budget_tokens = 5000000               # input + output, cumulative over every run of the store
//! grace_s = 30                          # on a signal, for sends on the wire
//! synchronous = "normal"                # "full": survive a power loss too
//!
//! [limits]                              # else learned from the headers
//! requests_per_minute = 500
//! input_tokens_per_minute = 200000
//! output_tokens_per_minute = 40000
//! tokens_per_minute = 200000
//!
//! [[pools]]                             # several keys as one (see `crate::pool`)
//! name = "claude"
//! provider = "anthropic"
//! [[pools.members]]
//! upstream = "https://api.anthropic.com"
//! key_env = "ANTHROPIC_KEY_MAIN"        # the key's variable, never the key
//! weight = 70
//! [[pools.members]]
//! upstream = "https://api.anthropic.com"
//! key_env = "ANTHROPIC_KEY_BACKUP"
//! weight = 30
//! ```
//!
//! * `window`: most jobs handed to the tower layer at once (default 64);
//!   the rest wait in the store. It bounds memory and what a signal or a
//!   stop finds in flight, not the pace: the layer paces with the limits.
//! * `[limits]`: the provider's limits per minute, when they are known and
//!   its headers do not say them (or say more than the key may use); each
//!   one not given is learned from the answers' headers (or from 429s).
//!   `tokens_per_minute` is OpenAI's combined TPM; Anthropic's are the
//!   input and output ones.
//! * `budget_tokens` / `--budget-tokens`: input + output tokens charged to
//!   the **store**, across every run of it: a re-run with the same budget
//!   sends only what the budget has left.
//! * `[[pools]]`: several keys (and upstreams) spent as one; see
//!   [`crate::pool`]. `[limits]` then applies to each member's key.

use crate::input::Shape;
use crate::journal::StoreJournal;
use crate::queue::Settings;
use crate::sqlite::Synchronous;
use crate::store::Store;
use ratewise_tower::pool::{Pool, PoolSpec};
use ratewise_tower::{Limits, Provider, RetryLayer};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The command line.
#[derive(Debug, Clone)]
pub struct Options {
    /// The input file.
    pub input: PathBuf,
    /// `--out` (default: `<input>.results.jsonl`).
    pub out: Option<PathBuf>,
    /// `--upstream`.
    pub upstream: Option<String>,
    /// `--db` (default: `<input>.ratewise.db`).
    pub db: Option<PathBuf>,
    /// `--config`.
    pub config: Option<PathBuf>,
    /// `--budget-tokens`.
    pub budget_tokens: Option<u64>,
    /// `--deadline`.
    pub deadline: Option<Duration>,
    /// `--grace`.
    pub grace: Option<Duration>,
    /// `--resume-stopped`.
    pub resume_stopped: bool,
    /// `--retry-unknown`.
    pub retry_unknown: bool,
    /// `--retry-expired`.
    pub retry_expired: bool,
    /// `--strict`.
    pub strict: bool,
    /// `--via`: every job sent directly (the default), through the
    /// provider's batch API, or by deadline.
    pub via: crate::batch::Via,
    /// `--batch-poll`: how often a submitted batch is polled.
    pub batch_poll: Option<Duration>,
    /// `--retry-failed`: items a batch ended `errored` or `expired` are
    /// sent again (in a new batch, or directly with `--via direct`).
    pub retry_failed: bool,
    /// `--pool`: which `[[pools]]` table of the config the run spends
    /// (needed when it has several).
    pub pool: Option<String>,
}

impl Options {
    /// Options for `input`, every flag at its default.
    pub fn new(input: impl Into<PathBuf>) -> Options {
        Options {
            input: input.into(),
            out: None,
            upstream: None,
            db: None,
            config: None,
            budget_tokens: None,
            deadline: None,
            grace: None,
            resume_stopped: false,
            retry_unknown: false,
            retry_expired: false,
            strict: false,
            via: crate::batch::Via::Direct,
            batch_poll: None,
            retry_failed: false,
            pool: None,
        }
    }

    fn beside_input(&self, suffix: &str) -> PathBuf {
        let mut name = self.input.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    }

    /// The store: `--db`, else `<input>.ratewise.db` beside the input.
    pub fn db_path(&self) -> PathBuf {
        self.db
            .clone()
            .unwrap_or_else(|| self.beside_input(".ratewise.db"))
    }

    /// The results: `--out`, else `<input>.results.jsonl`.
    pub fn out_path(&self) -> PathBuf {
        self.out
            .clone()
            .unwrap_or_else(|| self.beside_input(".results.jsonl"))
    }

    /// The queue's settings: flags over the file over the defaults.
    pub fn settings(
        &self,
        file: &FileConfig,
        shape: Shape,
        api_key: String,
    ) -> Result<Settings, String> {
        let mut s = Settings::new(shape, api_key);
        if let Some(up) = self.upstream.clone().or_else(|| file.upstream.clone()) {
            s.upstream = crate::queue::normalize_upstream(&up).map_err(|e| e.to_string())?;
        }
        if let Some(w) = file.window {
            if w == 0 {
                return Err("window = 0: at least one job must be sendable".into());
            }
            s.window = w;
        }
        if let Some(d) = self.deadline {
            s.deadline = d;
        } else if let Some(text) = &file.deadline {
            s.deadline = crate::duration::parse(text)
                .ok_or_else(|| format!("deadline {text:?}: not a duration (6h, 30m, 90s)"))?;
        }
        s.budget_tokens = self.budget_tokens.or(file.budget_tokens);
        if let Some(g) = self.grace {
            s.grace = g;
        } else if let Some(g) = file.grace_s {
            s.grace = Duration::try_from_secs_f64(g)
                .map_err(|_| format!("grace_s {g}: not a number of seconds"))?;
        }
        Ok(s)
    }

    /// The tower layer: the run's deadline, the file's limits (else
    /// learned), journaling to `store`.
    pub fn layer(
        &self,
        file: &FileConfig,
        settings: &Settings,
        store: Arc<dyn Store>,
    ) -> Result<RetryLayer, String> {
        self.pooled_layer(file, settings, store, None)
    }

    /// The same, every attempt sent through `pool` when there is one (its
    /// members' keys and upstreams; `[limits]` then applies to each
    /// member's key).
    pub fn pooled_layer(
        &self,
        file: &FileConfig,
        settings: &Settings,
        store: Arc<dyn Store>,
        pool: Option<Pool>,
    ) -> Result<RetryLayer, String> {
        let mut b = RetryLayer::builder()
            .deadline(settings.deadline)
            .provider(provider_of(settings))
            // The window bounds what waits in the layer; nothing of the
            // queue's is ever shed.
            .max_waiting(settings.window.saturating_mul(2).max(1024))
            .journal(Arc::new(StoreJournal(store)));
        if let Some(l) = &file.limits {
            let mut limits = Limits::NONE;
            limits.requests = l.requests_per_minute;
            limits.input_tokens = l.input_tokens_per_minute;
            limits.output_tokens = l.output_tokens_per_minute;
            limits.tokens = l.tokens_per_minute;
            b = b.limits(limits);
        }
        if let Some(pool) = pool {
            b = b.pool(pool);
        }
        b.build().map_err(|e| e.to_string())
    }
}

/// Whose rules read the answers: the profile the upstream's host names
/// when it speaks the file's format (`https://api.groq.com/openai` for
/// OpenAI-format lines reads as Groq), else the format's own provider.
fn provider_of(settings: &Settings) -> Provider {
    let format = match settings.shape {
        Shape::OpenAi => Provider::Openai,
        Shape::Anthropic => Provider::Anthropic,
    };
    settings
        .upstream
        .parse::<http::Uri>()
        .ok()
        .and_then(|u| u.host().and_then(Provider::from_host))
        .filter(|p| p.dialect() == format)
        .unwrap_or(format)
}

/// `--config FILE` (TOML; see the module's docs).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The provider's base URL.
    pub upstream: Option<String>,
    /// The API key (else the environment).
    pub api_key: Option<String>,
    /// Most jobs in the layer at once.
    pub window: Option<usize>,
    /// Each job's deadline.
    pub deadline: Option<String>,
    /// The run's token budget.
    pub budget_tokens: Option<u64>,
    /// The grace on a signal, in seconds.
    pub grace_s: Option<f64>,
    /// `normal` or `full`.
    pub synchronous: Option<String>,
    /// Limits per minute, else learned.
    pub limits: Option<LimitsConfig>,
    /// `[[pools]]`: several keys spent as one (the tower layer's
    /// [`PoolSpec`], as `ratewise proxy --config` reads it).
    #[serde(default)]
    pub pools: Vec<PoolSpec>,
}

/// `[limits]` of the config.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Requests per minute.
    pub requests_per_minute: Option<u64>,
    /// Input tokens per minute.
    pub input_tokens_per_minute: Option<u64>,
    /// Output tokens per minute.
    pub output_tokens_per_minute: Option<u64>,
    /// Combined tokens per minute (OpenAI's TPM).
    pub tokens_per_minute: Option<u64>,
}

impl FileConfig {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<FileConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The store's `synchronous` setting.
    pub fn synchronous(&self) -> Result<Synchronous, String> {
        match self.synchronous.as_deref() {
            None | Some("normal") => Ok(Synchronous::Normal),
            Some("full") => Ok(Synchronous::Full),
            Some(other) => Err(format!(
                "synchronous = {other:?}: \"normal\" (survives a crash) or \"full\" (survives a power loss)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstreams_host_names_the_profile_when_it_speaks_the_format() {
        let at = |shape, url: &str| {
            let mut s = Settings::new(shape, "k");
            s.upstream = url.to_owned();
            provider_of(&s)
        };
        assert_eq!(
            at(Shape::OpenAi, "https://api.groq.com/openai"),
            Provider::Groq
        );
        assert_eq!(
            at(Shape::OpenAi, "https://api.deepseek.com"),
            Provider::Deepseek
        );
        // A host of another format, or none known: the format's provider.
        assert_eq!(
            at(Shape::Anthropic, "https://api.groq.com/openai"),
            Provider::Anthropic
        );
        assert_eq!(at(Shape::OpenAi, "http://127.0.0.1:9"), Provider::Openai);
    }
}
