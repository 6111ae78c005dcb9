//! The proxy's configuration: the command line (`--listen`, `--upstream`,
//! `--provider`, `--config`, `--redis`, `--journal`, `--admin`) and an
//! optional TOML file for everything else. Flags win over the file.
//!
//! Every key of the file, with its default and meaning, is in
//! `docs/proxy.md`, "The configuration file, key by key": one place for
//! the words a user writes (the test
//! `every_key_the_reader_accepts_is_in_docs_proxy_md` reads the keys
//! from this reader's own structs and fails when one is missing there).
//! Which provider an upstream is read as (`--provider`, `provider =`,
//! `auto` from the host) is in the same file, "Which provider an upstream
//! is read as". An upstream's URL is read by [`UpstreamUrl`], as
//! `ratewise run` reads one: a trailing `/v1` names the same upstream.
//!
//! A job's first-byte deadline is its caller's: `x-ratewise-deadline-ms`,
//! else the read timeout the official SDKs send, else
//! `policy.default_deadline_ms`; whichever it is, at most
//! `policy.max_deadline_ms` (see [`crate::forward::caller_deadline`]).

use crate::keys::fingerprint;
use ratewise_core::admit::{self, KeyLimits, Limits, SpendConfig};
use ratewise_core::Provider;
use ratewise_tower::pool::{Pool, PoolSpec};
use ratewise_tower::{UpstreamUrl, UpstreamUrlError};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// What went wrong reading the configuration; the proxy does not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    Read(PathBuf, std::io::Error),
    /// The file is not valid TOML for this schema.
    Parse(PathBuf, String),
    /// A value is wrong (which and why).
    Invalid(String),
    /// An upstream's URL (`--upstream`, an `[[upstream]]`'s `url`) cannot
    /// be read.
    Upstream(UpstreamUrlError),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::Read(p, e) => write!(f, "cannot read {}: {e}", p.display()),
            ConfigError::Parse(p, e) => write!(f, "{}: {e}", p.display()),
            ConfigError::Invalid(why) => f.write_str(why),
            ConfigError::Upstream(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ConfigError {}

fn invalid(why: impl Into<String>) -> ConfigError {
    ConfigError::Invalid(why.into())
}

/// The command line's part.
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// `--listen`.
    pub listen: Option<String>,
    /// `--upstream`.
    pub upstream: Option<String>,
    /// `--config`.
    pub config: Option<PathBuf>,
    /// `--redis`.
    pub redis: Option<String>,
    /// `--journal`.
    pub journal: Option<PathBuf>,
    /// `--admin`.
    pub admin: Option<String>,
    /// `--provider`: how `--upstream`'s answers are read and its callers
    /// answered (a [`Provider`] word, or `auto`: from its host).
    pub provider: Option<String>,
}

/// How logs are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (default).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Which roots an HTTPS upstream's certificate is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Roots {
    /// Mozilla's roots, built in (default).
    #[default]
    Webpki,
    /// The operating system's store.
    Native,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    listen: Option<String>,
    admin: Option<AdminEntry>,
    log: Option<LogFormat>,
    journal: Option<PathBuf>,
    redis: Option<RedisFile>,
    #[serde(default)]
    upstream: Vec<UpstreamFile>,
    policy: Option<PolicyFile>,
    limits: Option<LimitsFile>,
    #[serde(default)]
    class: Vec<ClassFile>,
    #[serde(default)]
    key: Vec<KeyFile>,
    #[serde(default)]
    group: Vec<GroupFile>,
    spend: Option<SpendFile>,
    bounds: Option<BoundsFile>,
    key_table: Option<KeyTableFile>,
    /// `[[pools]]`, read by the tower layer's own reader.
    #[serde(default)]
    pools: Vec<PoolSpec>,
    priority: Option<crate::priority::PriorityFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyTableFile {
    max_keys: Option<usize>,
    idle_s: Option<u64>,
}

/// The key table's bounds ([`Controller::forget_idle`](ratewise_core::admit::Controller::forget_idle)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyTable {
    /// Most keys kept (default 10,000): beyond it the least recently used
    /// that may go are forgotten at once, whatever their idle time.
    pub max_keys: usize,
    /// A key unused this long is forgotten (default 15 min).
    pub idle: Duration,
}

impl Default for KeyTable {
    fn default() -> Self {
        KeyTable {
            max_keys: 10_000,
            idle: Duration::from_secs(900),
        }
    }
}

/// `admin = "127.0.0.1:8788"`, or an `[admin]` table with its `address`
/// and who may call it.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum AdminEntry {
    Address(String),
    Table(crate::admin::settings::AdminFile),
}

/// `redis = "redis://…"`, or a table with the URL and its options.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RedisFile {
    Url(String),
    Table(RedisTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RedisTable {
    url: String,
    prefix: Option<String>,
    /// Share of the limits paced at while Redis is unreachable, in (0, 1].
    fallback_share: Option<f64>,
    /// Seconds a key's record outlives its last write (default 7 days).
    record_ttl_s: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpstreamFile {
    name: Option<String>,
    url: String,
    provider: Option<String>,
    #[serde(default)]
    paths: Vec<String>,
    ca_file: Option<PathBuf>,
    #[serde(default)]
    roots: Roots,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    max_attempts: Option<u32>,
    default_deadline_ms: Option<u64>,
    max_deadline_ms: Option<u64>,
    max_inline_wait_ms: Option<u64>,
    send_timeout_ms: Option<u64>,
    learn_margins: Option<bool>,
}

/// A `[limits]` table (and each `[[class]]`'s, `[[key]]`'s and
/// `[[group]]`'s `limits`). Its words are `ratewise run`'s:
/// `requests_per_minute`, `input_tokens_per_minute`,
/// `output_tokens_per_minute`, `tokens_per_minute`. The proxy's first
/// words (`requests`, `input_tokens`, `output_tokens`, `tokens`) are
/// still read, with a warning at start, so a file written for them keeps
/// its limits.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsFile {
    requests_per_minute: Option<u64>,
    input_tokens_per_minute: Option<u64>,
    output_tokens_per_minute: Option<u64>,
    tokens_per_minute: Option<u64>,
    /// Old spelling of `requests_per_minute`.
    requests: Option<u64>,
    /// Old spelling of `input_tokens_per_minute`.
    input_tokens: Option<u64>,
    /// Old spelling of `output_tokens_per_minute`.
    output_tokens: Option<u64>,
    /// Old spelling of `tokens_per_minute`.
    tokens: Option<u64>,
    /// Requests of one key in flight at once (top-level `[limits]` only).
    in_flight: Option<u32>,
}

impl LimitsFile {
    /// The limits, each from its word or its old spelling (a warning for
    /// `where_`, e.g. `[limits]`, in `warnings`); both spellings of one
    /// limit in one table are an error, since which was meant is unknown.
    fn limits(self, where_: &str, warnings: &mut Vec<String>) -> Result<Limits, ConfigError> {
        let mut one = |word: &str, new: Option<u64>, old_word: &str, old: Option<u64>| {
            match (new, old) {
                (Some(_), Some(_)) => Err(invalid(format!(
                    "{where_}: both {word} and {old_word} are given: say {word} alone ({old_word} is its old spelling)"
                ))),
                (None, Some(v)) => {
                    warnings.push(format!(
                        "{where_}: {old_word} is the old spelling of {word} (the word ratewise run reads too): read as {word} = {v}; say {word}"
                    ));
                    Ok(Some(v))
                }
                (new, None) => Ok(new),
            }
        };
        Ok(Limits {
            requests: one(
                "requests_per_minute",
                self.requests_per_minute,
                "requests",
                self.requests,
            )?,
            input_tokens: one(
                "input_tokens_per_minute",
                self.input_tokens_per_minute,
                "input_tokens",
                self.input_tokens,
            )?,
            output_tokens: one(
                "output_tokens_per_minute",
                self.output_tokens_per_minute,
                "output_tokens",
                self.output_tokens,
            )?,
            tokens: one(
                "tokens_per_minute",
                self.tokens_per_minute,
                "tokens",
                self.tokens,
            )?,
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClassFile {
    /// A model-name prefix that makes the class (`claude-sonnet`), and its
    /// limits.
    name: String,
    limits: LimitsFile,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    fingerprint: Option<String>,
    env: Option<String>,
    group: Option<String>,
    limits: Option<LimitsFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupFile {
    name: String,
    limits: Option<LimitsFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpendFile {
    window_s: Option<u64>,
    max_tokens: Option<u64>,
    max_micros: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BoundsFile {
    max_request_body: Option<usize>,
    max_waiting: Option<usize>,
    grace_s: Option<u64>,
    body_timeout_ms: Option<u64>,
    header_read_timeout_ms: Option<u64>,
    idle_timeout_ms: Option<u64>,
    max_connections: Option<usize>,
    max_body_memory: Option<usize>,
}

/// One upstream.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// Its name (for `x-ratewise-upstream` and logs).
    pub name: String,
    /// Its base URL, without a trailing slash (`https://api.anthropic.com`).
    pub url: String,
    /// How its answers are read (`None`: detected per answer).
    pub provider: Option<Provider>,
    /// Where [`provider`](Self::provider) came from.
    pub provider_source: ProviderSource,
    /// Path prefixes routed to it.
    pub paths: Vec<String>,
    /// Extra root certificates (PEM), e.g. a test CA.
    pub ca_file: Option<PathBuf>,
    /// Which roots its certificate is checked against.
    pub roots: Roots,
}

/// Where an upstream's provider came from (said in the start log).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ProviderSource {
    /// `--provider` on the command line.
    Flag,
    /// `provider = …` in its `[[upstream]]`.
    File,
    /// Its URL's host is a provider's documented API host
    /// ([`Provider::from_host`]).
    Host,
    /// Its host is no provider's: each answer's own shape is read
    /// (`None`), generic rules when it has none.
    #[default]
    Unknown,
}

/// The words `--provider` and `provider = …` take: every [`Provider`]
/// word, and `auto` (from the URL's host, the default).
pub fn provider_words() -> String {
    let mut w: Vec<&str> = Provider::ALL.iter().map(|p| p.as_str()).collect();
    w.push("auto");
    w.join(", ")
}

/// Reads a provider word: `Ok(None)` for `auto`.
pub fn provider_word(word: &str) -> Result<Option<Provider>, String> {
    let w = word.trim().to_ascii_lowercase();
    if w == "auto" {
        return Ok(None);
    }
    Provider::from_word(&w)
        .map(Some)
        .ok_or_else(|| format!("provider {word:?} is none of {}", provider_words()))
}

/// The provider an upstream at `url` is read as: `given` (from the flag or
/// the file, with its source), else its host's ([`Provider::from_host`]),
/// else `None` (each answer's own shape).
fn resolve_provider(
    url: &str,
    given: Option<Provider>,
    source: ProviderSource,
) -> (Option<Provider>, ProviderSource) {
    if let Some(p) = given {
        return (Some(p), source);
    }
    let host = url.parse::<http::Uri>().ok();
    match host
        .as_ref()
        .and_then(|u| u.host())
        .and_then(Provider::from_host)
    {
        Some(p) => (Some(p), ProviderSource::Host),
        None => (None, ProviderSource::Unknown),
    }
}

impl Upstream {
    /// The start log's line for it: `upstream https://… read as gemini
    /// (from its host)`. The URL is shown without any user or password.
    pub fn provider_line(&self) -> String {
        let word = self.provider.map_or("generic", |p| p.as_str());
        let why = match self.provider_source {
            ProviderSource::Flag => "(--provider)",
            ProviderSource::File => "(provider in --config)",
            ProviderSource::Host => "(from its host)",
            ProviderSource::Unknown => {
                "(unknown host: generic rules where an answer does not show its provider; say --provider)"
            }
        };
        format!("upstream {} read as {word} {why}", self.shown_url())
    }

    /// Its URL as logs show it: scheme, host, port and path, never a
    /// user or password.
    pub fn shown_url(&self) -> String {
        match self.url.parse::<http::Uri>() {
            Ok(u) => {
                let scheme = u.scheme_str().unwrap_or("http");
                let host = u.host().unwrap_or("");
                let port = u.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
                let path = u.path().trim_end_matches('/');
                format!("{scheme}://{host}{port}{path}")
            }
            Err(_) => "<url>".to_owned(),
        }
    }

    /// `scheme://host:port` of it ([`UpstreamUrl::origin`]): what an
    /// answer about a connection that could not be made names. Never a
    /// user, password, path or query.
    pub fn origin(&self) -> String {
        UpstreamUrl::parse(&self.url)
            .map_or_else(|_| "<upstream>".to_owned(), |u| u.origin().to_owned())
    }

    /// Whether it is reached over TLS.
    pub fn is_https(&self) -> bool {
        self.url.starts_with("https://")
    }
}

/// The proxy's whole configuration, checked.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Where callers connect.
    pub listen: SocketAddr,
    /// The admin listener (never the callers' port).
    pub admin: SocketAddr,
    /// The upstreams; the first is the default. None when every caller
    /// is routed to a pool.
    pub upstreams: Vec<Upstream>,
    /// The pools (`[[pools]]`), each selected by the key its callers
    /// present.
    pub pools: Vec<PoolEntry>,
    /// The layer: policy, admission (limits per key, group and class,
    /// spend), bounds.
    pub layer: ratewise_tower::Config,
    /// The journal file, when one is kept.
    pub journal: Option<PathBuf>,
    /// The shared store on Redis, when several processes share the keys'
    /// limits.
    pub redis: Option<RedisSettings>,
    /// Log format.
    pub log: LogFormat,
    /// How long in-flight jobs may take to finish on shutdown.
    pub grace: Duration,
    /// How long a caller may take to send its request body (default 30 s).
    pub body_timeout: Duration,
    /// The longest first-byte deadline a job gets, whatever its caller
    /// asks (`policy.max_deadline_ms`, default [`MAX_DEADLINE`]).
    pub max_deadline: Duration,
    /// How long a connection may take to send a request's head, from the
    /// first byte of it (`bounds.header_read_timeout_ms`, default
    /// [`HEADER_READ_TIMEOUT`], at most 30 s): a slow caller ties up a
    /// connection for no longer.
    pub header_read_timeout: Duration,
    /// How long a connection with no request in progress stays open
    /// (`bounds.idle_timeout_ms`, default [`IDLE_TIMEOUT`]). A request
    /// waiting for its turn, or streaming its answer, is in progress.
    pub idle_timeout: Duration,
    /// Connections each listener serves at once (`bounds.max_connections`;
    /// default: see [`connection_cap`]). At the cap, the connections idle
    /// longest (no request in progress) are closed to admit new ones; only
    /// while every connection has a request in progress do new ones wait
    /// in the listen backlog (see [`crate::serve`]).
    pub max_connections: usize,
    /// Where [`max_connections`](Self::max_connections) came from (said in
    /// the start log). Unless configured, [`crate::start`] works it out
    /// again once it has raised the descriptor limit.
    pub max_connections_source: CapSource,
    /// Bytes of request bodies held at once, all callers together
    /// (`bounds.max_body_memory`, default [`MAX_BODY_MEMORY`]). Over it a
    /// request waits up to the body timeout, then gets a 503.
    pub max_body_memory: usize,
    /// Who may call the admin listener (`[admin]`).
    pub admin_access: crate::admin::settings::AdminSettings,
    /// How many keys are kept, and for how long unused (`[key_table]`).
    pub key_table: KeyTable,
    /// Whether callers name their priority and flow, and each flow's
    /// weight and floor (`[priority]`; the levels are the layer's).
    pub priority: crate::priority::PrioritySettings,
    /// What the file says that is read but should be said otherwise (an
    /// old spelling, and its word today): a WARN line each at start.
    pub warnings: Vec<String>,
}

/// The default of `bounds.header_read_timeout_ms`.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest `bounds.header_read_timeout_ms` accepted.
pub const MAX_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The default of `bounds.idle_timeout_ms`.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The default of `bounds.max_body_memory`: 256 MiB.
pub const MAX_BODY_MEMORY: usize = 256 << 20;

/// The connection cap used when the descriptor limit cannot be read.
pub const FALLBACK_MAX_CONNECTIONS: usize = 1024;

/// Where a listener's connection cap came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CapSource {
    /// `bounds.max_connections`.
    Configured,
    /// A third of this soft descriptor limit (`RLIMIT_NOFILE`).
    DescriptorLimit(u64),
    /// The descriptor limit is unlimited or could not be read:
    /// [`FALLBACK_MAX_CONNECTIONS`].
    Fallback,
}

impl std::fmt::Display for CapSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CapSource::Configured => f.write_str("bounds.max_connections"),
            CapSource::DescriptorLimit(n) => {
                write!(f, "a third of the descriptor limit, {n}")
            }
            CapSource::Fallback => f.write_str("the descriptor limit is unlimited or unknown"),
        }
    }
}

/// The default connection cap of each listener: a third of the soft
/// descriptor limit (`RLIMIT_NOFILE`), so that the callers' connections,
/// one upstream connection per send and the admin's still fit, and at
/// least 16; [`FALLBACK_MAX_CONNECTIONS`] where the limit cannot be read
/// (not Unix) or is unlimited.
pub fn default_max_connections() -> usize {
    connection_cap().0
}

/// [`default_max_connections`] and where it came from.
pub fn connection_cap() -> (usize, CapSource) {
    match descriptor_limit() {
        Some(n) => (
            usize::try_from(n / 3).unwrap_or(usize::MAX).max(16),
            CapSource::DescriptorLimit(n),
        ),
        None => (FALLBACK_MAX_CONNECTIONS, CapSource::Fallback),
    }
}

/// The soft descriptor limit in force (`None`: unlimited, or not Unix).
pub fn descriptor_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        rustix::process::getrlimit(rustix::process::Resource::Nofile).current
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Raises the soft descriptor limit (`RLIMIT_NOFILE`) to the hard limit,
/// as servers do at start (a soft limit of 1,024 is many systems'
/// default, the hard one far above). `Ok(Some((from, to)))` when raised;
/// `Ok(None)` when there is nothing to raise (already at the hard limit,
/// an unlimited hard limit, not Unix); `Err` when the system refused.
pub fn raise_descriptor_limit() -> std::io::Result<Option<(u64, u64)>> {
    #[cfg(unix)]
    {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let now = getrlimit(Resource::Nofile);
        match (now.current, now.maximum) {
            (Some(soft), Some(hard)) if soft < hard => {
                setrlimit(
                    Resource::Nofile,
                    Rlimit {
                        current: Some(hard),
                        maximum: Some(hard),
                    },
                )?;
                Ok(Some((soft, hard)))
            }
            _ => Ok(None),
        }
    }
    #[cfg(not(unix))]
    {
        Ok(None)
    }
}

/// Where and how the keys' state is shared through Redis.
#[derive(Clone, PartialEq)]
pub struct RedisSettings {
    /// `redis://host:port/db` (may hold a password: never logged).
    pub url: String,
    /// Prefix of the Redis keys (default `ratewise`).
    pub prefix: Option<String>,
    /// Share of the limits paced at while Redis is unreachable (default:
    /// one over the processes Redis last saw on the key).
    pub fallback_share: Option<f64>,
    /// How long a key's record outlives its last write in Redis (default
    /// 7 days): the records of keys nobody uses any more — forgotten by
    /// every process — go by themselves.
    pub record_ttl: Option<Duration>,
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password.
        f.debug_struct("RedisSettings")
            .field("prefix", &self.prefix)
            .field("fallback_share", &self.fallback_share)
            .field("record_ttl", &self.record_ttl)
            .finish_non_exhaustive()
    }
}

/// The default deadline of a job when nothing sets one.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(120);

/// The longest deadline a caller may ask for, when the file does not say
/// (`policy.max_deadline_ms`).
pub const MAX_DEADLINE: Duration = Duration::from_secs(3600);

impl ProxyConfig {
    /// The configuration from the flags and the file they name; `env`
    /// looks up the variables that `[[key]] env = …` names.
    pub fn load(
        flags: &Flags,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ProxyConfig, ConfigError> {
        let file = match &flags.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| ConfigError::Read(path.clone(), e))?;
                toml::from_str::<File>(&text)
                    .map_err(|e| ConfigError::Parse(path.clone(), e.to_string()))?
            }
            None => File::default(),
        };
        Self::from_parts(flags, file, env)
    }

    /// The configuration from a TOML text (tests, embedding).
    pub fn from_toml(
        flags: &Flags,
        text: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ProxyConfig, ConfigError> {
        let file = toml::from_str::<File>(text)
            .map_err(|e| ConfigError::Parse(PathBuf::from("<config>"), e.to_string()))?;
        Self::from_parts(flags, file, env)
    }

    /// The configuration from the flags and the file, read in the order
    /// of its phases: the addresses, the upstreams and pools, the layer
    /// (policy, bounds, admission), then Redis, the journal, the admin's
    /// access and the key table. Each phase checks its own part; the
    /// first error found is the one reported.
    fn from_parts(
        flags: &Flags,
        file: File,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ProxyConfig, ConfigError> {
        let File {
            listen,
            admin,
            log,
            journal,
            redis,
            upstream,
            policy,
            limits,
            class,
            key,
            group,
            spend,
            bounds,
            key_table,
            pools: pool_specs,
            priority,
        } = file;
        let addresses = Addresses::read(flags, listen.as_deref(), admin)?;
        let upstreams = upstreams(flags, upstream)?;
        if upstreams.is_empty() && pool_specs.is_empty() {
            return Err(invalid(
                "no upstream: give --upstream URL, or an [[upstream]] or a [[pools]] in --config",
            ));
        }
        let pools = pools(&pool_specs, &env)?;

        // What the file says in words the reader still takes but would
        // rather not (old spellings): logged at start.
        let mut warnings = Vec::new();
        let mut layer = ratewise_tower::Config::default();
        let policy = policy.unwrap_or_default();
        apply_policy(&policy, &mut layer)?;
        let bounds = bounds.unwrap_or_default();
        let checked = apply_bounds(&bounds, &mut layer)?;
        let admission = AdmissionFile {
            learn_margins: policy.learn_margins,
            limits,
            class,
            group,
            key,
            spend,
        };
        admission.apply(&mut layer.admission, &env, &mut warnings)?;
        let (levels, priority) = priority.unwrap_or_default().read().map_err(invalid)?;
        check_pool_levels(&pools, &levels)?;
        layer.levels = levels;

        let redis = redis_settings(redis, flags.redis.as_deref())?;
        let journal = flags.journal.clone().or(journal);
        let admin_access = crate::admin::settings::AdminSettings::from_file(
            addresses.admin_file,
            addresses.admin,
            journal.as_deref(),
            &env,
        )?;
        let key_table = key_table_of(key_table)?;
        let (max_connections, max_connections_source) = match bounds.max_connections {
            Some(n) => (n, CapSource::Configured),
            None => connection_cap(),
        };
        Ok(ProxyConfig {
            priority,
            warnings,
            admin_access,
            key_table,
            listen: addresses.listen,
            admin: addresses.admin,
            upstreams,
            pools,
            layer,
            journal,
            redis,
            log: log.unwrap_or_default(),
            grace: Duration::from_secs(bounds.grace_s.unwrap_or(30)),
            body_timeout: Duration::from_millis(bounds.body_timeout_ms.unwrap_or(30_000).max(1)),
            max_deadline: policy
                .max_deadline_ms
                .map_or(MAX_DEADLINE, Duration::from_millis),
            header_read_timeout: checked.header_read_timeout,
            idle_timeout: bounds
                .idle_timeout_ms
                .map_or(IDLE_TIMEOUT, Duration::from_millis),
            max_connections,
            max_connections_source,
            max_body_memory: checked.max_body_memory,
        })
    }
}

/// The two listeners' addresses, and the rest of the `[admin]` table (who
/// may call it), read first: everything after may name the admin's
/// address (its access settings do).
struct Addresses {
    /// `--listen`, else `listen =`, else 127.0.0.1:8787.
    listen: SocketAddr,
    /// `--admin`, else `admin =` (or `[admin] address`), else
    /// 127.0.0.1:8788.
    admin: SocketAddr,
    /// The `[admin]` table without its address.
    admin_file: crate::admin::settings::AdminFile,
}

impl Addresses {
    /// Flags win over the file; the admin listener may not share the
    /// callers' address (a port 0 each is two ports).
    fn read(
        flags: &Flags,
        listen: Option<&str>,
        admin: Option<AdminEntry>,
    ) -> Result<Addresses, ConfigError> {
        let listen = address(
            flags.listen.as_deref().or(listen),
            "127.0.0.1:8787",
            "listen",
        )?;
        let (admin_address, admin_file) = match admin {
            None => (None, Default::default()),
            Some(AdminEntry::Address(a)) => (Some(a), Default::default()),
            Some(AdminEntry::Table(mut t)) => (t.address.take(), t),
        };
        let admin = address(
            flags.admin.as_deref().or(admin_address.as_deref()),
            "127.0.0.1:8788",
            "admin",
        )?;
        if admin == listen && listen.port() != 0 {
            return Err(invalid(
                "--admin must not be the callers' address (--listen)",
            ));
        }
        Ok(Addresses {
            listen,
            admin,
            admin_file,
        })
    }
}

/// The upstreams: `--upstream` first (named `default`, read as
/// `--provider` says), then each `[[upstream]]` in the file's order. Each
/// upstream's provider is resolved here ([`resolve_provider`]), so the
/// start log can say where it came from.
fn upstreams(flags: &Flags, file: Vec<UpstreamFile>) -> Result<Vec<Upstream>, ConfigError> {
    let mut upstreams = Vec::new();
    let flag_provider = match flags.provider.as_deref() {
        None => None,
        Some(w) => provider_word(w).map_err(|e| invalid(format!("--provider: {e}")))?,
    };
    if flags.provider.is_some() && flags.upstream.is_none() {
        return Err(invalid(
            "--provider names the provider of --upstream: give --upstream too (in --config, say provider = … in each [[upstream]])",
        ));
    }
    if let Some(url) = &flags.upstream {
        let url = base_url(url)?;
        let (provider, provider_source) =
            resolve_provider(&url, flag_provider, ProviderSource::Flag);
        upstreams.push(Upstream {
            name: "default".into(),
            url,
            provider,
            provider_source,
            paths: Vec::new(),
            ca_file: None,
            roots: Roots::Webpki,
        });
    }
    for (i, u) in file.into_iter().enumerate() {
        let given = match u.provider.as_deref() {
            None => None,
            Some(p) => provider_word(p).map_err(|e| invalid(format!("upstream {}: {e}", i + 1)))?,
        };
        for p in &u.paths {
            if !p.starts_with('/') {
                return Err(invalid(format!("upstream path {p:?} must start with /")));
            }
        }
        let url = base_url(&u.url)?;
        let (provider, provider_source) = resolve_provider(&url, given, ProviderSource::File);
        upstreams.push(Upstream {
            name: u.name.unwrap_or_else(|| format!("upstream-{}", i + 1)),
            url,
            provider,
            provider_source,
            paths: u.paths,
            ca_file: u.ca_file,
            roots: u.roots,
        });
    }
    Ok(upstreams)
}

/// `[policy]` into the layer's policy: attempts, the default deadline
/// (none in the file: [`DEFAULT_DEADLINE`]), the inline wait and the send
/// timeout. A zero attempt count or duration is refused rather than read
/// as "never". The provider is left unset: it is read per upstream.
fn apply_policy(
    policy: &PolicyFile,
    layer: &mut ratewise_tower::Config,
) -> Result<(), ConfigError> {
    if let Some(n) = policy.max_attempts {
        if n == 0 {
            return Err(invalid("policy.max_attempts must be at least 1"));
        }
        layer.policy.max_attempts = n;
    }
    for (name, v) in [
        ("policy.default_deadline_ms", policy.default_deadline_ms),
        ("policy.max_deadline_ms", policy.max_deadline_ms),
        ("policy.send_timeout_ms", policy.send_timeout_ms),
    ] {
        if v == Some(0) {
            return Err(invalid(format!("{name} must be more than 0")));
        }
    }
    layer.policy.default_deadline = Some(
        policy
            .default_deadline_ms
            .map_or(DEFAULT_DEADLINE, Duration::from_millis),
    );
    if let Some(ms) = policy.max_inline_wait_ms {
        layer.policy.max_inline_wait = Duration::from_millis(ms);
    }
    layer.policy.send_timeout = policy.send_timeout_ms.map(Duration::from_millis);
    // The provider is read per upstream, from the answer when unset.
    layer.provider = None;
    Ok(())
}

/// The `[bounds]` values checked here that are not read straight into the
/// [`ProxyConfig`] (see [`apply_bounds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CheckedBounds {
    header_read_timeout: Duration,
    max_body_memory: usize,
}

/// `[bounds]` checked, and the layer's part of it applied (the largest
/// body, the waiting bound). No bound may be 0; the header timeout is at
/// most [`MAX_HEADER_READ_TIMEOUT`]; the body memory must hold one
/// largest body and fit the semaphore's u32 (a request acquires its
/// body's place in one piece).
fn apply_bounds(
    bounds: &BoundsFile,
    layer: &mut ratewise_tower::Config,
) -> Result<CheckedBounds, ConfigError> {
    for (name, v) in [
        ("bounds.max_request_body", bounds.max_request_body),
        ("bounds.max_waiting", bounds.max_waiting),
        (
            "bounds.body_timeout_ms",
            bounds.body_timeout_ms.map(|v| v as usize),
        ),
    ] {
        if v == Some(0) {
            return Err(invalid(format!("{name} must be more than 0")));
        }
    }
    for (name, v) in [
        (
            "bounds.header_read_timeout_ms",
            bounds.header_read_timeout_ms,
        ),
        ("bounds.idle_timeout_ms", bounds.idle_timeout_ms),
        (
            "bounds.max_connections",
            bounds.max_connections.map(|v| v as u64),
        ),
        (
            "bounds.max_body_memory",
            bounds.max_body_memory.map(|v| v as u64),
        ),
    ] {
        if v == Some(0) {
            return Err(invalid(format!("{name} must be more than 0")));
        }
    }
    let header_read_timeout = bounds
        .header_read_timeout_ms
        .map_or(HEADER_READ_TIMEOUT, Duration::from_millis);
    if header_read_timeout > MAX_HEADER_READ_TIMEOUT {
        return Err(invalid(
            "bounds.header_read_timeout_ms must be at most 30000",
        ));
    }
    if let Some(n) = bounds.max_request_body {
        layer.max_request_body = n;
    }
    // Acquired in one piece per request: one body must fit, and the
    // count fits the semaphore's u32.
    let max_body_memory = bounds.max_body_memory.unwrap_or(MAX_BODY_MEMORY);
    if max_body_memory < layer.max_request_body || max_body_memory > u32::MAX as usize {
        return Err(invalid(format!(
            "bounds.max_body_memory must be at least bounds.max_request_body ({}) and below 4 GiB",
            layer.max_request_body
        )));
    }
    layer.max_waiting = bounds.max_waiting;
    Ok(CheckedBounds {
        header_read_timeout,
        max_body_memory,
    })
}

/// The file's admission part: `[limits]`, `[[class]]`, `[[group]]`,
/// `[[key]]`, `[spend]` and `policy.learn_margins`, read together since
/// the limits of classes, groups and keys are one list in the end.
struct AdmissionFile {
    learn_margins: Option<bool>,
    limits: Option<LimitsFile>,
    class: Vec<ClassFile>,
    group: Vec<GroupFile>,
    key: Vec<KeyFile>,
    spend: Option<SpendFile>,
}

impl AdmissionFile {
    /// Applies it to `adm`, in the order the errors are reported: the
    /// top-level limits, `in_flight` anywhere else (refused), the classes,
    /// the groups, the keys ([`key_fingerprint`]), the spend. Old limit
    /// spellings add to `warnings`.
    fn apply(
        self,
        adm: &mut admit::Config,
        env: &impl Fn(&str) -> Option<String>,
        warnings: &mut Vec<String>,
    ) -> Result<(), ConfigError> {
        if let Some(on) = self.learn_margins {
            adm.learn_margins = on;
        }
        if let Some(l) = self.limits {
            adm.limits = l.limits("[limits]", warnings)?;
            adm.max_in_flight = l.in_flight.filter(|n| *n > 0);
        }
        if self.in_flight_below_the_top() {
            return Err(invalid(
                "limits.in_flight applies to every key alike: give it in the top-level [limits] only"
                    .to_owned(),
            ));
        }
        for c in self.class {
            let limits = c
                .limits
                .limits(&format!("class {:?} limits", c.name), warnings)?;
            adm.classes.set(c.name.clone(), c.name.clone());
            adm.class_limits.push((c.name, limits));
        }
        for g in &self.group {
            if let Some(l) = g.limits {
                adm.key_limits.push(KeyLimits {
                    key: g.name.clone(),
                    class: None,
                    limits: l.limits(&format!("group {:?} limits", g.name), warnings)?,
                });
            }
        }
        for (i, k) in self.key.into_iter().enumerate() {
            let fp = key_fingerprint(i, &k, env)?;
            if let Some(g) = &k.group {
                adm.key_groups.push((fp.clone(), g.clone()));
            }
            if let Some(l) = k.limits {
                adm.key_limits.push(KeyLimits {
                    key: k.group.clone().unwrap_or(fp),
                    class: None,
                    limits: l.limits(&format!("key {} limits", i + 1), warnings)?,
                });
            }
        }
        if let Some(s) = self.spend {
            let mut sc = SpendConfig::default();
            if let Some(w) = s.window_s {
                sc.window = Duration::from_secs(w.max(1));
            }
            sc.max_tokens = s.max_tokens;
            sc.max_micros = s.max_micros;
            adm.spend = Some(sc);
        }
        // Limits the operator gave are known: the ramp starts warm only for
        // learned ones (admit's default).
        let _: &admit::Config = adm;
        Ok(())
    }

    /// Whether a class, group or key gives `limits.in_flight`: it bounds
    /// every key alike, so only the top-level `[limits]` may.
    fn in_flight_below_the_top(&self) -> bool {
        self.class.iter().any(|c| c.limits.in_flight.is_some())
            || self
                .group
                .iter()
                .any(|g| g.limits.is_some_and(|l| l.in_flight.is_some()))
            || self
                .key
                .iter()
                .any(|k| k.limits.is_some_and(|l| l.in_flight.is_some()))
    }
}

/// The fingerprint the `i`th `[[key]]` (from 0) names: its `fingerprint`
/// (normalized), or that of the key in the variable its `env` names —
/// exactly one of them. The key itself is never kept, nor said in an
/// error.
fn key_fingerprint(
    i: usize,
    k: &KeyFile,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    match (&k.fingerprint, &k.env) {
        (Some(fp), None) => crate::keys::normalized(fp).ok_or_else(|| {
            invalid(format!(
                "key {}: a fingerprint looks like fp-0123456789abcdef (see /status)",
                i + 1
            ))
        }),
        (None, Some(var)) => match env(var) {
            Some(key) if !key.trim().is_empty() => Ok(fingerprint(key.trim())),
            _ => Err(invalid(format!(
                "key {}: environment variable {var} is not set",
                i + 1
            ))),
        },
        _ => Err(invalid(format!(
            "key {}: give exactly one of fingerprint or env",
            i + 1
        ))),
    }
}

/// Redis, from `redis =` (a URL or a table) and `--redis` (its URL wins,
/// the table's options stay). The table's options are checked, then the
/// URL, whichever gave it.
fn redis_settings(
    file: Option<RedisFile>,
    flag: Option<&str>,
) -> Result<Option<RedisSettings>, ConfigError> {
    let mut redis = match file {
        None => None,
        Some(RedisFile::Url(url)) => Some(RedisSettings::at(url)),
        Some(RedisFile::Table(t)) => Some(RedisSettings::of_table(t)?),
    };
    if let Some(url) = flag {
        match &mut redis {
            Some(r) => r.url = url.to_owned(),
            None => redis = Some(RedisSettings::at(url.to_owned())),
        }
    }
    if let Some(r) = &redis {
        if !(r.url.starts_with("redis://")
            || r.url.starts_with("redis+unix://")
            || r.url.starts_with("unix://"))
        {
            return Err(invalid(
                "redis: not a Redis URL (redis://host:port/db)".to_owned(),
            ));
        }
    }
    Ok(redis)
}

impl RedisSettings {
    /// At `url`, every option its default.
    fn at(url: String) -> RedisSettings {
        RedisSettings {
            url,
            prefix: None,
            fallback_share: None,
            record_ttl: None,
        }
    }

    /// A `[redis]` table, its options checked: a share in (0, 1], a
    /// prefix that is no Redis Cluster hash tag, a record TTL above 0.
    fn of_table(t: RedisTable) -> Result<RedisSettings, ConfigError> {
        if let Some(f) = t.fallback_share {
            if !(f > 0.0 && f <= 1.0) {
                return Err(invalid(format!(
                    "redis.fallback_share: {f} is not a share in (0, 1]"
                )));
            }
        }
        if t.prefix
            .as_deref()
            .is_some_and(|p| p.is_empty() || p.contains(['{', '}']))
        {
            return Err(invalid(
                "redis.prefix: must be non-empty and without braces (Redis Cluster hash tags)",
            ));
        }
        Ok(RedisSettings {
            url: t.url,
            prefix: t.prefix,
            fallback_share: t.fallback_share,
            record_ttl: match t.record_ttl_s {
                Some(0) => return Err(invalid("redis.record_ttl_s must be more than 0")),
                s => s.map(Duration::from_secs),
            },
        })
    }
}

/// `[key_table]`, its unset bounds [`KeyTable::default`]'s; neither may
/// be 0.
fn key_table_of(file: Option<KeyTableFile>) -> Result<KeyTable, ConfigError> {
    let kt = file.unwrap_or_default();
    if kt.max_keys == Some(0) || kt.idle_s == Some(0) {
        return Err(invalid("key_table.max_keys and idle_s must be more than 0"));
    }
    let defaults = KeyTable::default();
    Ok(KeyTable {
        max_keys: kt.max_keys.unwrap_or(defaults.max_keys),
        idle: kt.idle_s.map_or(defaults.idle, Duration::from_secs),
    })
}

/// One `[[pools]]` table, checked and built: the callers presenting its
/// `caller_key` are served by its members.
#[derive(Clone)]
pub struct PoolEntry {
    /// Its name (`/status`, `/metrics`, logs).
    pub name: String,
    /// The fingerprint of its `caller_key` ([`fingerprint`]): a caller's
    /// key is matched by fingerprint, and the key itself is not kept.
    pub caller: String,
    /// Its members, each with its own key (read from its `key_env`).
    pub pool: Pool,
    /// Its callers as one tenant: their flow (the pool's name), level,
    /// weight and floor.
    pub workload: crate::priority::PoolWorkload,
}

impl std::fmt::Debug for PoolEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The pool's own Debug names its members' keys by fingerprint.
        f.debug_struct("PoolEntry")
            .field("name", &self.name)
            .field("caller", &self.caller)
            .field("pool", &self.pool)
            .finish()
    }
}

/// The `[[pools]]` tables built ([`PoolSpec::build`], each member's key
/// read through `env`) and checked: every pool has a name of its own and
/// a `caller_key` no other pool has. The errors name the pool, the member
/// and the variable, never a key.
fn pools(
    specs: &[PoolSpec],
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Vec<PoolEntry>, ConfigError> {
    let mut out: Vec<PoolEntry> = Vec::with_capacity(specs.len());
    for spec in specs {
        let name = spec.name.trim();
        if out.iter().any(|p| p.name == name) {
            return Err(invalid(format!(
                "pools: two pools are named {name:?}: give each its own name"
            )));
        }
        let caller = match spec.caller_key.as_deref().map(str::trim) {
            Some(k) if !k.is_empty() => fingerprint(k),
            _ => {
                return Err(invalid(format!(
                    "pool {name:?}: caller_key is required: a caller is routed to a pool by the key it presents"
                )))
            }
        };
        if let Some(other) = out.iter().find(|p| p.caller == caller) {
            return Err(invalid(format!(
                "pools {:?} and {name:?} have the same caller_key: a caller's key must select one pool",
                other.name
            )));
        }
        let pool = spec
            .build(env)
            .map_err(|e| invalid(format!("pools: {e}")))?;
        if spec.weight == Some(0) {
            return Err(invalid(format!(
                "pool {name:?}: weight = 0: a weight is at least 1"
            )));
        }
        if let Some(f) = spec
            .floor
            .filter(|f| !(f.is_finite() && (0.0..1.0).contains(f)))
        {
            return Err(invalid(format!(
                "pool {name:?}: floor = {f}: a share is at least 0 and below 1"
            )));
        }
        out.push(PoolEntry {
            workload: crate::priority::PoolWorkload {
                flow: name.to_owned(),
                level: spec.level.clone(),
                weight: spec.weight,
                floor: spec.floor,
            },
            name: name.to_owned(),
            caller,
            pool,
        });
    }
    Ok(out)
}

/// Every pool's `level` is one of the levels.
fn check_pool_levels(
    pools: &[PoolEntry],
    levels: &ratewise_tower::Levels,
) -> Result<(), ConfigError> {
    for p in pools {
        if let Some(l) = p
            .workload
            .level
            .as_deref()
            .filter(|l| levels.level(l).is_none())
        {
            return Err(invalid(format!(
                "pool {:?}: level = {l:?} is not one of the priority levels",
                p.name
            )));
        }
    }
    Ok(())
}

fn address(given: Option<&str>, default: &str, what: &str) -> Result<SocketAddr, ConfigError> {
    let text = given.unwrap_or(default);
    text.parse().map_err(|_| {
        invalid(format!(
            "{what}: {text:?} is not an address like 127.0.0.1:8787"
        ))
    })
}

/// An upstream's base URL, read as `ratewise run` reads one
/// ([`UpstreamUrl`]): `https://api.openai.com/v1` is
/// `https://api.openai.com`, since the callers' paths carry the `/v1`.
fn base_url(url: &str) -> Result<String, ConfigError> {
    UpstreamUrl::parse(url)
        .map(UpstreamUrl::into_string)
        .map_err(ConfigError::Upstream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_comes_from_the_descriptor_limit_raised_to_the_hard_one() {
        let raised = raise_descriptor_limit();
        assert!(raised.is_ok(), "{raised:?}");
        let (cap, source) = connection_cap();
        assert!(cap >= 16);
        match source {
            CapSource::DescriptorLimit(n) => {
                assert_eq!(cap as u64, (n / 3).max(16));
                assert_eq!(Some(n), descriptor_limit());
                // Raised: nothing more to raise.
                assert!(matches!(raise_descriptor_limit(), Ok(None)));
            }
            CapSource::Fallback => assert_eq!(cap, FALLBACK_MAX_CONNECTIONS),
            CapSource::Configured => panic!("not configured"),
        }
        assert!(source.to_string().contains("descriptor limit"), "{source}");
    }

    #[test]
    fn the_bounds_have_defaults_and_limits() {
        let c = ProxyConfig::from_toml(&flags("http://127.0.0.1:9"), "", |_| None).unwrap();
        assert_eq!(c.header_read_timeout, HEADER_READ_TIMEOUT);
        assert_eq!(c.idle_timeout, IDLE_TIMEOUT);
        assert_eq!(c.max_body_memory, MAX_BODY_MEMORY);
        assert!(c.max_connections > 0);
        for bad in [
            "[bounds]\nheader_read_timeout_ms = 30001",
            "[bounds]\nheader_read_timeout_ms = 0",
            "[bounds]\nidle_timeout_ms = 0",
            "[bounds]\nmax_connections = 0",
            "[bounds]\nmax_request_body = 2000\nmax_body_memory = 1000",
        ] {
            assert!(
                ProxyConfig::from_toml(&flags("http://127.0.0.1:9"), bad, |_| None).is_err(),
                "{bad}"
            );
        }
        let c = ProxyConfig::from_toml(
            &flags("http://127.0.0.1:9"),
            "[bounds]\nheader_read_timeout_ms = 500\nidle_timeout_ms = 700\nmax_connections = 5\nmax_body_memory = 40000000",
            |_| None,
        )
        .unwrap();
        assert_eq!(c.header_read_timeout, Duration::from_millis(500));
        assert_eq!(c.idle_timeout, Duration::from_millis(700));
        assert_eq!(c.max_connections, 5);
        assert_eq!(c.max_connections_source, CapSource::Configured);
        assert_eq!(c.max_body_memory, 40_000_000);
    }

    #[test]
    fn a_key_is_named_by_its_fingerprint_or_its_variable_never_both() {
        let key = |fingerprint: Option<&str>, env: Option<&str>| KeyFile {
            fingerprint: fingerprint.map(str::to_owned),
            env: env.map(str::to_owned),
            group: None,
            limits: None,
        };
        let env = |v: &str| (v == "K").then(|| " sk-secret ".to_owned());
        assert_eq!(
            key_fingerprint(0, &key(None, Some("K")), &env).unwrap(),
            fingerprint("sk-secret")
        );
        let fp = fingerprint("sk-secret");
        assert_eq!(key_fingerprint(0, &key(Some(&fp), None), &env).unwrap(), fp);
        for (k, why) in [
            (
                key(Some("fp-nope"), None),
                "key 2: a fingerprint looks like",
            ),
            (
                key(None, Some("UNSET")),
                "key 2: environment variable UNSET",
            ),
            (key(None, None), "key 2: give exactly one"),
            (key(Some(&fp), Some("K")), "key 2: give exactly one"),
        ] {
            let e = key_fingerprint(1, &k, &env).unwrap_err().to_string();
            assert!(e.starts_with(why), "{e}");
            assert!(!e.contains("sk-secret"), "{e}");
        }
    }

    #[test]
    fn the_redis_flag_keeps_the_tables_options_and_its_url_is_checked() {
        let table = || {
            RedisFile::Table(RedisTable {
                url: "redis://file:6379".into(),
                prefix: Some("rw".into()),
                fallback_share: Some(0.5),
                record_ttl_s: Some(60),
            })
        };
        assert_eq!(redis_settings(None, None).unwrap(), None);
        let r = redis_settings(Some(table()), Some("redis://flag:6379"))
            .unwrap()
            .unwrap();
        assert_eq!(r.url, "redis://flag:6379");
        assert_eq!(r.prefix.as_deref(), Some("rw"));
        assert_eq!(r.fallback_share, Some(0.5));
        assert_eq!(r.record_ttl, Some(Duration::from_secs(60)));
        let r = redis_settings(None, Some("unix:///tmp/r.sock"))
            .unwrap()
            .unwrap();
        assert_eq!(r, RedisSettings::at("unix:///tmp/r.sock".into()));
        assert!(redis_settings(Some(table()), Some("http://flag")).is_err());
        assert!(redis_settings(Some(RedisFile::Url("file:6379".into())), None).is_err());
    }

    #[test]
    fn a_zero_in_policy_or_bounds_is_refused_not_read_as_never() {
        let mut layer = ratewise_tower::Config::default();
        let policy = PolicyFile {
            send_timeout_ms: Some(0),
            ..PolicyFile::default()
        };
        let e = apply_policy(&policy, &mut layer).unwrap_err().to_string();
        assert_eq!(e, "policy.send_timeout_ms must be more than 0");
        apply_policy(&PolicyFile::default(), &mut layer).unwrap();
        assert_eq!(layer.policy.default_deadline, Some(DEFAULT_DEADLINE));
        let bounds = BoundsFile {
            max_waiting: Some(0),
            ..BoundsFile::default()
        };
        let e = apply_bounds(&bounds, &mut layer).unwrap_err().to_string();
        assert_eq!(e, "bounds.max_waiting must be more than 0");
        let checked = apply_bounds(&BoundsFile::default(), &mut layer).unwrap();
        assert_eq!(
            checked,
            CheckedBounds {
                header_read_timeout: HEADER_READ_TIMEOUT,
                max_body_memory: MAX_BODY_MEMORY,
            }
        );
        assert!(key_table_of(Some(KeyTableFile {
            max_keys: Some(0),
            idle_s: None
        }))
        .is_err());
        assert_eq!(key_table_of(None).unwrap(), KeyTable::default());
    }

    fn flags(upstream: &str) -> Flags {
        Flags {
            upstream: Some(upstream.into()),
            ..Flags::default()
        }
    }

    #[test]
    fn two_flags_are_enough() {
        let c = ProxyConfig::from_toml(&flags("https://api.anthropic.com/"), "", |_| None).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8787");
        assert_eq!(c.admin.to_string(), "127.0.0.1:8788");
        assert_eq!(c.upstreams[0].url, "https://api.anthropic.com");
        assert!(c.upstreams[0].is_https());
        assert_eq!(c.layer.policy.default_deadline, Some(DEFAULT_DEADLINE));
        assert_eq!(c.max_deadline, MAX_DEADLINE);
    }

    #[test]
    fn the_file_sets_keys_groups_limits_and_policy() {
        let text = r#"
            [[upstream]]
            name = "openai"
            url = "http://127.0.0.1:9"
            provider = "openai"
            paths = ["/v1/chat/completions"]
            [policy]
            max_attempts = 5
            default_deadline_ms = 30000
            max_deadline_ms = 900000
            [limits]
            requests = 50
            [[key]]
            env = "TEAM_KEY"
            group = "acme"
            [[key]]
            fingerprint = "fp-0123456789abcdef"
            limits = { requests = 4000 }
            [[group]]
            name = "acme"
            limits = { requests = 1000 }
            [bounds]
            max_waiting = 10
        "#;
        let c = ProxyConfig::from_toml(&flags("http://127.0.0.1:8"), text, |v| {
            (v == "TEAM_KEY").then(|| "sk-team".to_owned())
        })
        .unwrap();
        assert_eq!(c.upstreams.len(), 2);
        assert_eq!(c.upstreams[1].provider, Some(Provider::Openai));
        assert_eq!(c.layer.policy.max_attempts, 5);
        assert_eq!(c.max_deadline, Duration::from_secs(900));
        assert_eq!(c.layer.max_waiting, Some(10));
        let adm = &c.layer.admission;
        assert_eq!(adm.limits.requests, Some(50));
        assert_eq!(
            adm.key_groups,
            vec![(fingerprint("sk-team"), "acme".to_owned())]
        );
        assert!(adm
            .key_limits
            .iter()
            .any(|k| k.key == "acme" && k.limits.requests == Some(1000)));
        assert!(adm
            .key_limits
            .iter()
            .any(|k| k.key == "fp-0123456789abcdef" && k.limits.requests == Some(4000)));
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let cases = [
            ("", "ftp://x", "http:// or https://"),
            ("", "not a url", "URL"),
            (
                "[[key]]\nenv = \"MISSING\"",
                "http://x",
                "MISSING is not set",
            ),
            ("[[key]]\nfingerprint = \"abc\"", "http://x", "fp-"),
            ("[policy]\nmax_attempts = 0", "http://x", "at least 1"),
            (
                "[policy]\ndefault_deadline_ms = 0",
                "http://x",
                "more than 0",
            ),
            (
                "[policy]\nmax_deadline_ms = 0",
                "http://x",
                "max_deadline_ms must be more than 0",
            ),
            ("[bounds]\nmax_waiting = 0", "http://x", "more than 0"),
            (
                "[redis]\nurl = \"redis://127.0.0.1:1\"\nrecord_ttl_s = 0",
                "http://x",
                "record_ttl_s",
            ),
            ("[key_table]\nmax_keys = 0", "http://x", "key_table"),
            ("[admin]\ntoken = \"short\"", "http://x", "16 to 512"),
            (
                "[admin]\nstatus_max_keys = 0",
                "http://x",
                "status_max_keys",
            ),
            ("unknown = 1", "http://x", "unknown"),
            (
                "[[upstream]]\nurl = \"http://x\"\nprovider = \"acme\"",
                "http://y",
                "provider",
            ),
        ];
        for (text, up, want) in cases {
            let e = ProxyConfig::from_toml(&flags(up), text, |_| None).unwrap_err();
            assert!(e.to_string().contains(want), "{text:?}: {e}");
        }
        let same = Flags {
            listen: Some("127.0.0.1:9000".into()),
            admin: Some("127.0.0.1:9000".into()),
            ..flags("http://x")
        };
        assert!(ProxyConfig::from_toml(&same, "", |_| None).is_err());
        let c = ProxyConfig::from_toml(
            &flags("http://x"),
            "[redis]\nurl = \"redis://127.0.0.1:1\"\nrecord_ttl_s = 3600\n[key_table]\nmax_keys = 5\nidle_s = 60\n[admin]\naddress = \"127.0.0.1:9999\"\nallowed_hosts = [\"Proxy.LAN\"]",
            |_| None,
        )
        .unwrap();
        assert_eq!(c.redis.unwrap().record_ttl, Some(Duration::from_secs(3600)));
        assert_eq!(
            c.key_table,
            KeyTable {
                max_keys: 5,
                idle: Duration::from_secs(60)
            }
        );
        assert_eq!(c.admin.to_string(), "127.0.0.1:9999");
        assert_eq!(c.admin_access.allowed_hosts, vec!["proxy.lan".to_owned()]);
        let d = ProxyConfig::from_toml(&flags("http://x"), "", |_| None).unwrap();
        assert_eq!(d.key_table, KeyTable::default());
        assert_eq!(d.key_table.max_keys, 10_000);
        let none = ProxyConfig::from_toml(&Flags::default(), "", |_| None).unwrap_err();
        assert!(none.to_string().contains("no upstream"), "{none}");
    }

    #[test]
    fn the_provider_comes_from_the_flag_the_file_or_the_host() {
        let with = |up: &str, p: Option<&str>| Flags {
            provider: p.map(Into::into),
            ..flags(up)
        };
        let read = |f: &Flags, text: &str| {
            let c = ProxyConfig::from_toml(f, text, |_| None).unwrap();
            c.upstreams
                .iter()
                .map(|u| (u.provider, u.provider_source))
                .collect::<Vec<_>>()
        };
        let host = |url: &str| read(&with(url, None), "")[0];
        assert_eq!(
            host("https://generativelanguage.googleapis.com"),
            (Some(Provider::Gemini), ProviderSource::Host)
        );
        assert_eq!(
            host("https://my-res.openai.azure.com/"),
            (Some(Provider::Azure), ProviderSource::Host)
        );
        assert_eq!(
            host("https://api.groq.com/openai"),
            (Some(Provider::Groq), ProviderSource::Host)
        );
        assert_eq!(host("http://127.0.0.1:9"), (None, ProviderSource::Unknown));
        for auto in ["auto", "AUTO"] {
            assert_eq!(
                read(&with("https://api.anthropic.com", Some(auto)), "")[0],
                (Some(Provider::Anthropic), ProviderSource::Host)
            );
        }
        for p in Provider::ALL {
            assert_eq!(
                read(&with("http://127.0.0.1:9", Some(p.as_str())), "")[0],
                (Some(*p), ProviderSource::Flag),
                "{p:?}"
            );
        }
        // The flag wins over the host.
        assert_eq!(
            read(&with("https://api.openai.com", Some("generic")), "")[0],
            (Some(Provider::Generic), ProviderSource::Flag)
        );
        let file = r#"
            [[upstream]]
            url = "https://generativelanguage.googleapis.com"
            [[upstream]]
            url = "http://127.0.0.1:7"
            provider = "mistral"
            [[upstream]]
            url = "http://127.0.0.1:8"
            [[upstream]]
            url = "http://127.0.0.1:6"
            provider = "auto"
        "#;
        assert_eq!(
            read(&Flags::default(), file),
            vec![
                (Some(Provider::Gemini), ProviderSource::Host),
                (Some(Provider::Mistral), ProviderSource::File),
                (None, ProviderSource::Unknown),
                (None, ProviderSource::Unknown),
            ]
        );
        for (f, text, want) in [
            (with("http://x", Some("acme")), "", "--provider"),
            (
                Flags {
                    provider: Some("gemini".into()),
                    ..Flags::default()
                },
                "[[upstream]]\nurl = \"http://x\"",
                "--upstream",
            ),
            (
                Flags::default(),
                "[[upstream]]\nurl = \"http://x\"\nprovider = \"acme\"",
                "upstream 1",
            ),
        ] {
            let e = ProxyConfig::from_toml(&f, text, |_| None).unwrap_err();
            assert!(e.to_string().contains(want), "{e}");
            if text.is_empty() || text.contains("acme") {
                assert!(e.to_string().contains("gemini, bedrock"), "{e}");
            }
        }
    }

    #[test]
    fn the_start_line_says_what_an_upstream_is_read_as_and_why() {
        let line = |f: Flags| {
            ProxyConfig::from_toml(&f, "", |_| None).unwrap().upstreams[0].provider_line()
        };
        assert_eq!(
            line(flags("https://generativelanguage.googleapis.com/")),
            "upstream https://generativelanguage.googleapis.com read as gemini (from its host)"
        );
        assert_eq!(
            line(Flags {
                provider: Some("azure".into()),
                ..flags("http://user:pw@127.0.0.1:9/base")
            }),
            "upstream http://127.0.0.1:9/base read as azure (--provider)"
        );
        assert!(line(flags("http://127.0.0.1:9"))
            .starts_with("upstream http://127.0.0.1:9 read as generic (unknown host"));
    }

    #[test]
    fn in_flight_bounds_every_key_and_only_at_the_top() {
        let c = ProxyConfig::from_toml(
            &flags("http://127.0.0.1:8"),
            "[limits]\nin_flight = 4\n",
            |_| None,
        )
        .unwrap();
        assert_eq!(c.layer.admission.max_in_flight, Some(4));
        let err = ProxyConfig::from_toml(
            &flags("http://127.0.0.1:8"),
            "[[key]]\nfingerprint = \"fp-0123456789abcdef\"\nlimits = { in_flight = 2 }\n",
            |_| None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("top-level [limits]"), "{err}");
    }

    #[test]
    fn limits_take_the_per_minute_words_and_the_old_ones_with_a_warning() {
        let read = |text: &str| {
            ProxyConfig::from_toml(&flags("http://127.0.0.1:8"), text, |v| {
                (v == "TEAM_KEY").then(|| "sk-team".to_owned())
            })
        };
        let new = read(
            "[limits]\nrequests_per_minute = 50\ninput_tokens_per_minute = 30000\noutput_tokens_per_minute = 8000\ntokens_per_minute = 9000\n\
             [[class]]\nname = \"claude-sonnet\"\nlimits = { requests_per_minute = 7 }\n\
             [[key]]\nenv = \"TEAM_KEY\"\ngroup = \"acme\"\n\
             [[key]]\nfingerprint = \"fp-0123456789abcdef\"\nlimits = { output_tokens_per_minute = 4 }\n\
             [[group]]\nname = \"acme\"\nlimits = { input_tokens_per_minute = 1000 }\n",
        )
        .unwrap();
        let old = read(
            "[limits]\nrequests = 50\ninput_tokens = 30000\noutput_tokens = 8000\ntokens = 9000\n\
             [[class]]\nname = \"claude-sonnet\"\nlimits = { requests = 7 }\n\
             [[key]]\nenv = \"TEAM_KEY\"\ngroup = \"acme\"\n\
             [[key]]\nfingerprint = \"fp-0123456789abcdef\"\nlimits = { output_tokens = 4 }\n\
             [[group]]\nname = \"acme\"\nlimits = { input_tokens = 1000 }\n",
        )
        .unwrap();
        let want = Limits {
            requests: Some(50),
            input_tokens: Some(30_000),
            output_tokens: Some(8_000),
            tokens: Some(9_000),
        };
        for c in [&new, &old] {
            let adm = &c.layer.admission;
            assert_eq!(adm.limits, want);
            assert_eq!(adm.class_limits[0].1.requests, Some(7));
            assert!(adm
                .key_limits
                .iter()
                .any(|k| k.key == "acme" && k.limits.input_tokens == Some(1000)));
            assert!(adm
                .key_limits
                .iter()
                .any(|k| k.key == "fp-0123456789abcdef" && k.limits.output_tokens == Some(4)));
        }
        assert!(new.warnings.is_empty(), "{:?}", new.warnings);
        // One warning per old word, naming where, the old word and the new.
        assert_eq!(old.warnings.len(), 7, "{:#?}", old.warnings);
        let all = old.warnings.join("\n");
        for (word, old_word) in [
            ("requests_per_minute", "requests"),
            ("input_tokens_per_minute", "input_tokens"),
            ("output_tokens_per_minute", "output_tokens"),
            ("tokens_per_minute", "tokens"),
        ] {
            assert!(
                all.contains(&format!(
                    "[limits]: {old_word} is the old spelling of {word}"
                )),
                "{all}"
            );
        }
        assert!(
            all.contains("class \"claude-sonnet\" limits: requests is the old spelling"),
            "{all}"
        );
        assert!(
            all.contains("key 2 limits: output_tokens is the old spelling"),
            "{all}"
        );
        assert!(
            all.contains("group \"acme\" limits: input_tokens is the old spelling"),
            "{all}"
        );
        // Both spellings of one limit in one table: which was meant is unknown.
        for text in [
            "[limits]\nrequests = 5\nrequests_per_minute = 6\n",
            "[[group]]\nname = \"g\"\nlimits = { tokens = 1, tokens_per_minute = 2 }\n",
        ] {
            let e = read(text).unwrap_err().to_string();
            assert!(e.contains("both") && e.contains("say"), "{e}");
        }
    }

    #[test]
    fn an_upstream_url_is_read_as_ratewise_run_reads_it() {
        for given in [
            "http://127.0.0.1:9",
            "http://127.0.0.1:9/",
            "http://127.0.0.1:9/v1",
            "http://127.0.0.1:9/v1/",
        ] {
            let c = ProxyConfig::from_toml(
                &flags(given),
                &format!("[[upstream]]\nname = \"b\"\nurl = \"{given}\""),
                |_| None,
            )
            .unwrap();
            for up in &c.upstreams {
                assert_eq!(up.url, "http://127.0.0.1:9", "{given}");
                assert_eq!(up.origin(), "http://127.0.0.1:9");
            }
        }
        let e = ProxyConfig::from_toml(&flags("ftp://h"), "", |_| None).unwrap_err();
        assert!(
            matches!(e, ConfigError::Upstream(UpstreamUrlError::Scheme { .. })),
            "{e:?}"
        );
        let e = ProxyConfig::from_toml(&flags("https://u:pw@h/v1?key=SECRET"), "", |_| None)
            .unwrap_err();
        assert!(
            matches!(e, ConfigError::Upstream(UpstreamUrlError::Query { .. })),
            "{e:?}"
        );
        assert!(
            !e.to_string().contains("SECRET") && !e.to_string().contains("pw"),
            "{e}"
        );
    }

    /// A reader of one table's struct: `Err` with serde's message.
    type Parse = fn(&str) -> Result<(), String>;

    /// A key no table has: each table's struct refuses it, and serde's
    /// error lists the keys the table takes.
    const PROBE: &str = "zz_probe";

    /// The keys `parse`'s error on `text` lists as expected, when it
    /// refuses [`PROBE`] ("unknown field `zz_probe`, expected one of `a`,
    /// `b`"; "expected `a`"; "there are no fields").
    fn refused(text: &str, parse: Parse) -> Option<Vec<String>> {
        let e = parse(text).err()?;
        let at = e.find(&format!("unknown field `{PROBE}`"))?;
        Some(
            e[at..]
                .split('`')
                .skip(3)
                .step_by(2)
                .map(str::to_owned)
                .collect(),
        )
    }

    /// The TOML that puts [`PROBE`] inside the table at `path` (each
    /// step a key, and whether it is an array of tables).
    fn nested(path: &[(String, bool)]) -> String {
        let mut inner = format!("{{ {PROBE} = 0 }}");
        for (i, (name, array)) in path.iter().enumerate().rev() {
            let value = if *array { format!("[{inner}]") } else { inner };
            inner = if i == 0 {
                format!("{name} = {value}")
            } else {
                format!("{{ {name} = {value} }}")
            };
        }
        if path.is_empty() {
            format!("{PROBE} = 0")
        } else {
            inner
        }
    }

    /// Every table the reader takes under `path` (dotted, `""` the top),
    /// with its keys: read from the reader's own refusals, following each
    /// key whose value is a table or an array of tables. Keys whose value
    /// is an untagged enum (a string or a table) hide their table's keys:
    /// they are returned in `untagged`.
    fn walk(
        path: &[(String, bool)],
        parse: Parse,
        tables: &mut std::collections::BTreeMap<String, Vec<String>>,
        untagged: &mut Vec<String>,
    ) {
        let keys = refused(&nested(path), parse)
            .unwrap_or_else(|| panic!("{:?} is not refused as a table's", nested(path)));
        let dotted = |p: &[(String, bool)]| {
            p.iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(".")
        };
        tables.insert(dotted(path), keys.clone());
        for k in keys {
            for array in [false, true] {
                let mut p = path.to_vec();
                p.push((k.clone(), array));
                if refused(&nested(&p), parse).is_some() {
                    walk(&p, parse, tables, untagged);
                    break;
                }
                let e = parse(&nested(&p)).err().unwrap_or_default();
                if e.contains("untagged enum") && !array {
                    untagged.push(dotted(&p));
                    break;
                }
            }
        }
    }

    fn parse_as<T: serde::de::DeserializeOwned>(text: &str) -> Result<(), String> {
        toml::from_str::<T>(text)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Every key `--config` accepts, by table (`""` the top level,
    /// `pools.members`, `key.limits`), derived from the reader itself.
    fn accepted_keys() -> std::collections::BTreeMap<String, Vec<String>> {
        let mut tables = std::collections::BTreeMap::new();
        let mut untagged = Vec::new();
        walk(&[], parse_as::<File>, &mut tables, &mut untagged);
        // `admin = "ADDRESS"` or an `[admin]` table; `redis = "URL"` or a
        // `[redis]` table: their tables' own structs. A new key of that
        // kind must be added here, or this fails.
        let by_type: [(&str, Parse); 2] = [
            ("admin", parse_as::<crate::admin::settings::AdminFile>),
            ("redis", parse_as::<RedisTable>),
        ];
        untagged.sort();
        assert_eq!(
            untagged,
            by_type
                .iter()
                .map(|(k, _)| k.to_string())
                .collect::<Vec<_>>(),
            "a key whose value is a string or a table: name its table's struct here"
        );
        for (key, parse) in by_type {
            let mut inner = std::collections::BTreeMap::new();
            walk(&[], parse, &mut inner, &mut Vec::new());
            for (path, keys) in inner {
                let full = if path.is_empty() {
                    key.to_owned()
                } else {
                    format!("{key}.{path}")
                };
                tables.insert(full, keys);
            }
        }
        tables
    }

    #[test]
    fn the_accepted_keys_are_read_from_the_reader() {
        let t = accepted_keys();
        // A few known ones, so that a probe that stopped finding anything
        // does not pass as "nothing to document".
        for (table, key) in [
            ("", "listen"),
            ("", "pools"),
            ("upstream", "url"),
            ("limits", "requests_per_minute"),
            ("limits", "requests"),
            ("limits", "in_flight"),
            ("key.limits", "tokens_per_minute"),
            ("class.limits", "output_tokens_per_minute"),
            ("group.limits", "input_tokens_per_minute"),
            ("admin", "token_file"),
            ("redis", "record_ttl_s"),
            ("pools.members", "key_env"),
            ("bounds", "max_body_memory"),
        ] {
            assert!(
                t.get(table).is_some_and(|k| k.iter().any(|k| k == key)),
                "{table}.{key} not found in {t:#?}"
            );
        }
        // Not tables: a string, a list, a map, an enum.
        for leaf in ["journal", "log", "upstream.paths", "pools.members.models"] {
            assert!(!t.contains_key(leaf), "{leaf}");
        }
    }

    /// docs/proxy.md's "The configuration file, key by key": its text
    /// before the first `###` (the top level), and each `###` heading with
    /// the text under it.
    fn reference_sections(doc: &str) -> (String, Vec<(String, String)>) {
        let start = doc
            .find("\n## The configuration file, key by key")
            .expect("docs/proxy.md has the section \"The configuration file, key by key\"");
        let rest = &doc[start + 1..];
        let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
        let section = &rest[..end];
        let mut parts = section.split("\n### ");
        let top = parts.next().unwrap_or_default().to_owned();
        let subs = parts
            .map(|p| {
                let (heading, body) = p.split_once('\n').unwrap_or((p, ""));
                (heading.to_owned(), body.to_owned())
            })
            .collect();
        (top, subs)
    }

    #[test]
    fn every_key_the_reader_accepts_is_in_docs_proxy_md() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/proxy.md"))
                .expect("docs/proxy.md");
        let (top, subs) = reference_sections(&doc);
        let tables = accepted_keys();
        // The text that documents a table: the top level's, or the
        // `###` whose heading names it as TOML does (`[bounds]`,
        // `[[pools.members]]`, `[key.limits]`).
        let text_of = |table: &str| -> Option<&str> {
            if table.is_empty() {
                return Some(top.as_str());
            }
            subs.iter()
                .find(|(h, _)| {
                    h.contains(&format!("`[{table}]`")) || h.contains(&format!("`[[{table}]]`"))
                })
                .map(|(_, body)| body.as_str())
        };
        let mut missing = Vec::new();
        for (table, keys) in &tables {
            let Some(text) = text_of(table) else {
                missing.push(format!("a ### heading for [{table}]"));
                continue;
            };
            for key in keys {
                let sub = if table.is_empty() {
                    key.clone()
                } else {
                    format!("{table}.{key}")
                };
                let row = text.contains(&format!("\n| `{key}` |"));
                if !row && !tables.contains_key(&sub) {
                    missing.push(format!("[{table}] {key}"));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "docs/proxy.md, \"The configuration file, key by key\", lacks: {missing:#?}"
        );
        // And documents no key the reader refuses.
        for (heading, body) in &subs {
            let named: Vec<&String> = tables
                .keys()
                .filter(|t| {
                    heading.contains(&format!("`[{t}]`")) || heading.contains(&format!("`[[{t}]]`"))
                })
                .collect();
            assert!(
                !named.is_empty(),
                "### {heading}: names no table the reader takes"
            );
            for line in body.lines() {
                let Some(key) = line
                    .strip_prefix("| `")
                    .and_then(|l| l.split_once("` |"))
                    .map(|(k, _)| k)
                else {
                    continue;
                };
                assert!(
                    named.iter().any(|t| tables[*t].iter().any(|k| k == key)),
                    "### {heading}: `{key}` is not a key the reader accepts there"
                );
            }
        }
    }
}
