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
    /// `--redis`: the keys' limits (buckets, stops, beliefs) shared through
    /// this Redis with every proxy and run using it.
    pub redis: Option<RedisUrl>,
    /// `--priority`: the level of the run's jobs in their key's queue
    /// (default `bulk`: a proxy's interactive calls on the same key go
    /// first; see `ratewise_tower::Workload`).
    pub priority: Option<String>,
}

/// A Redis URL (`redis://[:password@]host:port/db`). It may hold a
/// password: its `Debug` shows none of it, and no error repeats it.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl(pub String);

impl std::fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedisUrl(<not shown>)")
    }
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
            redis: None,
            priority: None,
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
        self.shared_layer(file, settings, store, pool, None)
    }

    /// The admission settings a run's keys are paced with: the file's
    /// `[limits]` (else learned). A [`ratewise_redis::RedisStore`] shared
    /// by `--redis` is made from them.
    pub fn admission(&self, file: &FileConfig) -> Result<ratewise_core::admit::Config, String> {
        let mut admission = ratewise_core::admit::Config::default();
        if let Some(l) = &file.limits {
            admission.limits = l.limits()?;
        }
        Ok(admission)
    }

    /// [`Options::pooled_layer`], admitting through `shared` when given
    /// (`--redis`: made from [`Options::admission`], so it holds the
    /// file's limits) instead of a store of this process alone.
    pub fn shared_layer(
        &self,
        file: &FileConfig,
        settings: &Settings,
        store: Arc<dyn Store>,
        pool: Option<Pool>,
        shared: Option<ratewise_redis::RedisStore>,
    ) -> Result<RetryLayer, String> {
        // The usage is read once, by the layer, from every answer the
        // queue keeps (up to its own bound): not only the first 4 MiB.
        let mut base = ratewise_tower::Config::default();
        base.max_metered_body = crate::queue::MAX_ANSWER;
        let mut b = RetryLayer::builder()
            .config(base)
            .deadline(settings.deadline)
            .provider(provider_of(settings))
            // The window bounds what waits in the layer; nothing of the
            // queue's is ever shed.
            .max_waiting(settings.window.saturating_mul(2).max(1024))
            .journal(Arc::new(StoreJournal(store)));
        match shared {
            Some(redis) => b = b.store(Arc::new(redis)),
            None => b = b.admission(self.admission(file)?),
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

/// `[limits]` of the config. Its words are the proxy's too
/// (`ratewise proxy --config`'s `[limits]`): `requests_per_minute`,
/// `input_tokens_per_minute`, `output_tokens_per_minute`,
/// `tokens_per_minute`. The proxy's first words (`requests`,
/// `input_tokens`, `output_tokens`, `tokens`) are read as well, with a
/// warning ([`FileConfig::warnings`]), so a table copied from a proxy's
/// file keeps its limits.
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
    /// Old spelling of `requests_per_minute` (read, with a warning).
    pub requests: Option<u64>,
    /// Old spelling of `input_tokens_per_minute` (read, with a warning).
    pub input_tokens: Option<u64>,
    /// Old spelling of `output_tokens_per_minute` (read, with a warning).
    pub output_tokens: Option<u64>,
    /// Old spelling of `tokens_per_minute` (read, with a warning).
    pub tokens: Option<u64>,
}

impl LimitsConfig {
    /// Each limit's word, its value, its old spelling and that one's value.
    fn words(&self) -> [(&'static str, Option<u64>, &'static str, Option<u64>); 4] {
        [
            (
                "requests_per_minute",
                self.requests_per_minute,
                "requests",
                self.requests,
            ),
            (
                "input_tokens_per_minute",
                self.input_tokens_per_minute,
                "input_tokens",
                self.input_tokens,
            ),
            (
                "output_tokens_per_minute",
                self.output_tokens_per_minute,
                "output_tokens",
                self.output_tokens,
            ),
            (
                "tokens_per_minute",
                self.tokens_per_minute,
                "tokens",
                self.tokens,
            ),
        ]
    }

    /// The limits, each from its word or its old spelling; both spellings
    /// of one limit are an error (which was meant is unknown).
    pub fn limits(&self) -> Result<Limits, String> {
        let mut read = [None; 4];
        for (slot, (word, new, old_word, old)) in read.iter_mut().zip(self.words()) {
            if new.is_some() && old.is_some() {
                return Err(format!(
                    "[limits]: both {word} and {old_word} are given: say {word} alone ({old_word} is its old spelling)"
                ));
            }
            *slot = new.or(old);
        }
        let mut limits = Limits::NONE;
        limits.requests = read[0];
        limits.input_tokens = read[1];
        limits.output_tokens = read[2];
        limits.tokens = read[3];
        Ok(limits)
    }

    /// A warning for each old spelling used.
    fn warnings(&self) -> Vec<String> {
        self.words()
            .into_iter()
            .filter_map(|(word, new, old_word, old)| match (new, old) {
                (None, Some(v)) => Some(format!(
                    "[limits]: {old_word} is the old spelling of {word} (the word ratewise proxy reads too): read as {word} = {v}; say {word}"
                )),
                _ => None,
            })
            .collect()
    }
}

impl FileConfig {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<FileConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::from_toml(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Reads and checks a TOML text (see the module's docs).
    pub fn from_toml(text: &str) -> Result<FileConfig, String> {
        let file: FileConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        if let Some(l) = &file.limits {
            l.limits()?;
        }
        Ok(file)
    }

    /// What the file says that is read but should be said otherwise (an
    /// old spelling of a `[limits]` word): a run tells each as
    /// [`Event::ConfigWarning`](crate::progress::Event::ConfigWarning).
    pub fn warnings(&self) -> Vec<String> {
        self.limits
            .as_ref()
            .map(LimitsConfig::warnings)
            .unwrap_or_default()
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

    #[test]
    fn limits_take_the_per_minute_words_and_the_proxys_old_ones_with_a_warning() {
        let new = FileConfig::from_toml(
            "[limits]\nrequests_per_minute = 50\ninput_tokens_per_minute = 30000\noutput_tokens_per_minute = 8000\ntokens_per_minute = 9000\n",
        )
        .unwrap();
        let old = FileConfig::from_toml(
            "[limits]\nrequests = 50\ninput_tokens = 30000\noutput_tokens = 8000\ntokens = 9000\n",
        )
        .unwrap();
        let mut want = Limits::NONE;
        want.requests = Some(50);
        want.input_tokens = Some(30_000);
        want.output_tokens = Some(8_000);
        want.tokens = Some(9_000);
        for f in [&new, &old] {
            assert_eq!(f.limits.as_ref().unwrap().limits().unwrap(), want);
        }
        assert!(new.warnings().is_empty(), "{:?}", new.warnings());
        let warned = old.warnings();
        assert_eq!(warned.len(), 4, "{warned:#?}");
        for (w, (word, old_word)) in warned.iter().zip([
            ("requests_per_minute", "requests"),
            ("input_tokens_per_minute", "input_tokens"),
            ("output_tokens_per_minute", "output_tokens"),
            ("tokens_per_minute", "tokens"),
        ]) {
            assert!(
                w.starts_with(&format!(
                    "[limits]: {old_word} is the old spelling of {word}"
                )),
                "{w}"
            );
            assert!(w.ends_with(&format!("say {word}")), "{w}");
        }
        // Both spellings of one limit: which was meant is unknown.
        let e = FileConfig::from_toml("[limits]\ntokens = 1\ntokens_per_minute = 2\n").unwrap_err();
        assert!(e.contains("both tokens_per_minute and tokens"), "{e}");
        // Anything else is still refused.
        let e = FileConfig::from_toml("[limits]\nrpm = 1\n").unwrap_err();
        assert!(e.contains("rpm"), "{e}");
    }

    #[test]
    fn the_upstream_is_read_as_the_proxy_reads_it() {
        let o = Options::new("in.jsonl");
        for given in [
            "http://127.0.0.1:9",
            "http://127.0.0.1:9/",
            "http://127.0.0.1:9/v1",
            "http://127.0.0.1:9/v1/",
        ] {
            let file = FileConfig {
                upstream: Some(given.to_owned()),
                ..FileConfig::default()
            };
            let s = o.settings(&file, Shape::OpenAi, "k".into()).unwrap();
            assert_eq!(
                s.upstream,
                ratewise_tower::UpstreamUrl::parse(given).unwrap().as_str()
            );
            assert_eq!(s.upstream, "http://127.0.0.1:9");
        }
        let file = FileConfig {
            upstream: Some("https://h/v1?key=SECRET".to_owned()),
            ..FileConfig::default()
        };
        let e = o.settings(&file, Shape::OpenAi, "k".into()).unwrap_err();
        assert!(e.starts_with("upstream") && e.contains("query"), "{e}");
        assert!(!e.contains("SECRET"), "{e}");
    }
}
