//! # ratewise-proxy
//!
//! `ratewise proxy`: a gateway any language's SDK points its base URL at,
//! with the SDK's own retries off. Each request is one job on the
//! [`RetryLayer`](ratewise_tower::RetryLayer): paced by the key's shared
//! buckets, retried no earlier than the server says, stopped when money
//! runs out, and answered in the provider's own error shape when it ends
//! without a success.
//!
//! ```text
//! ratewise proxy --listen 127.0.0.1:8787 --upstream https://api.anthropic.com
//!                [--config ratewise.toml] [--journal FILE] [--admin 127.0.0.1:8788]
//! ```
//!
//! ```python
//! client = anthropic.Anthropic(base_url="http://127.0.0.1:8787", max_retries=0)
//! ```
//!
//! * [`config`]: the flags and the TOML file.
//! * [`forward`]: the callers' side — one job per request, with its
//!   caller's timeout as its deadline.
//! * [`answer`]: what a caller gets when its job did not succeed.
//! * [`keys`]: callers' keys, fingerprinted.
//! * [`upstream`]: HTTP(S) clients and routing.
//! * [`admin`]: `/status`, `/resume`, `/stop`, `/metrics`, `/healthz` on
//!   their own listener.
//! * [`journal`]: attempts and stops written down, read back on start.
//! * [`forget`]: the key table kept within its bound.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod admin;
pub mod answer;
pub mod config;
pub mod forget;
pub mod forward;
pub mod journal;
pub mod keys;
pub mod metrics;
pub mod upstream;

use config::ProxyConfig;
use ratewise_core::admit::{Controller, Shared};
use ratewise_core::Cause;
use ratewise_tower::{RetryLayer, RetryService, TokioClock};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;
use tokio::net::TcpListener;
use tower::Layer;

/// Everything a request handler needs.
pub struct App {
    /// The configuration.
    pub config: ProxyConfig,
    /// The layer (shared state, queues, clock).
    pub layer: RetryLayer,
    /// This process's admission state: the store itself, or with
    /// `--redis` this process's view of the shared one (as of its last
    /// round trip), for `/status` and `/metrics`.
    pub store: Arc<Shared>,
    /// The shared store on Redis, with `--redis`.
    pub redis: Option<ratewise_redis::RedisStore>,
    /// One service per upstream, in the configuration's order.
    pub services: Vec<RetryService<upstream::Marking>>,
    /// Keys seen.
    pub keys: keys::Seen,
    /// Answers that stopped keys.
    pub stops: answer::StopAnswers,
    /// Counters.
    pub metrics: Arc<metrics::Metrics>,
    /// The journal file.
    pub journal: Option<Arc<journal::FileJournal>>,
    /// Attempts whose outcome is unknown: found unfinished at start, or
    /// sent with no answer during this run (at most the last 1,000).
    pub unknown: std::sync::Mutex<Vec<journal::Unknown>>,
    /// This run's prefix of job ids (its start, Unix milliseconds in hex).
    pub boot: String,
    /// Who may call the admin listener, and its token.
    pub admin: admin::guard::Guard,
}

impl App {
    /// Notes a job held as `outcome_unknown`: it was sent and no answer
    /// came, so it may have been processed.
    pub fn unknown_outcome(&self, e: &ratewise_tower::Error) {
        let Some(last) = e.attempts().last() else {
            return;
        };
        let at = ratewise_core::time::parse_rfc3339(&last.time_utc)
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as u64);
        let mut list = self.unknown.lock().unwrap_or_else(|p| p.into_inner());
        if list.len() >= 1000 {
            list.remove(0);
        }
        list.push(journal::Unknown {
            job_id: e.job_id().to_owned(),
            attempt: last.attempt,
            started_ms: at,
        });
    }

    /// A job ended stopped: the first time a stop of `key` is seen, it is
    /// noted, journaled and logged, with its cause — the job's own answer's,
    /// or the store's for a stop found at admission.
    pub fn stopped(&self, key: &str, e: &ratewise_tower::Error) {
        if self.stops.get(key).is_some() {
            return;
        }
        let cause = if answer::stopped_by_its_answer(e) {
            e.classification().map_or(Cause::Unknown, |c| c.cause)
        } else {
            self.stop_cause(key).unwrap_or(Cause::Unknown)
        };
        self.stops.note(key, cause, SystemTime::now(), e.until());
        if let Some(j) = &self.journal {
            j.stop(key, cause, e.until());
        }
        tracing::warn!(key, cause = cause.as_str(), "key stopped");
    }

    /// The cause of `key`'s stop in the store, when it is stopped.
    fn stop_cause(&self, key: &str) -> Option<Cause> {
        let now = self.layer.now();
        let mut c = self.store.lock();
        // The key's own scopes: never a pass over every key under the lock.
        c.scopes_of(key)
            .into_iter()
            .filter_map(|id| c.snapshot(id, now))
            .find_map(|s| s.stopped)
            .map(|st| st.cause)
    }

    /// Stops `key` (an operator, or a stop read back from the journal):
    /// for every process sharing it, with `--redis`.
    pub async fn stop_key(&self, key: &str, cause: Cause, until: Option<SystemTime>) {
        let now = self.layer.now();
        match &self.redis {
            Some(r) => r.stop(key, cause, until, now).await,
            None => {
                let mut c = self.store.lock();
                let scope = c.scope_of(key, "default");
                c.stop(scope, cause, until, now);
            }
        }
        self.stops.note(key, cause, SystemTime::now(), until);
    }
}

/// Why the proxy did not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum StartError {
    /// The configuration is wrong.
    Config(config::ConfigError),
    /// An upstream's TLS setup failed.
    Tls(upstream::TlsSetupError),
    /// A listener could not be bound.
    Bind(SocketAddr, std::io::Error),
    /// The journal could not be read or opened.
    Journal(std::path::PathBuf, std::io::Error),
    /// The Redis store could not be made (a URL it cannot use).
    Redis(ratewise_redis::Error),
    /// The admin token file could not be read or made.
    AdminToken(std::path::PathBuf, admin::token::TokenError),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Config(e) => write!(f, "configuration: {e}"),
            StartError::Tls(e) => write!(f, "{e}"),
            StartError::Bind(a, e) => write!(f, "cannot listen on {a}: {e}"),
            StartError::Journal(p, e) => write!(f, "journal {}: {e}", p.display()),
            StartError::Redis(e) => write!(f, "--redis: {e}"),
            StartError::AdminToken(p, e) => write!(f, "admin token file {}: {e}", p.display()),
        }
    }
}

impl std::error::Error for StartError {}

/// A running proxy.
pub struct Running {
    /// Where callers connect.
    pub addr: SocketAddr,
    /// The admin listener.
    pub admin_addr: SocketAddr,
    /// The shared state, for tests and embedding.
    pub app: Arc<App>,
    stop: tokio::sync::watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    admin: tokio::task::JoinHandle<()>,
    expiry: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops accepting, lets in-flight requests finish within the grace
    /// period, flushes the journal.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let grace = self.app.config.grace;
        let metrics = self.app.metrics.clone();
        let server = self.server;
        let abort = server.abort_handle();
        // The callers' connections, then the jobs that run on without a
        // caller (their answers read so their usage settles).
        let drained = tokio::time::timeout(grace, async move {
            let _ = server.await;
            while metrics.in_flight.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                grace_s = grace.as_secs(),
                "in-flight jobs cut at the end of the grace period"
            );
            abort.abort();
        }
        self.admin.abort();
        self.expiry.abort();
        // The last settles reach the other replicas.
        if let Some(r) = &self.app.redis {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), r.flush()).await;
        }
        if let Some(j) = &self.app.journal {
            j.sync();
        }
    }
}

/// The shared store on Redis. A Redis that does not answer at start is not
/// fatal: the proxy paces on its share of the limits until it does.
async fn redis_store(
    settings: &config::RedisSettings,
    admission: &ratewise_core::admit::Config,
) -> Result<ratewise_redis::RedisStore, StartError> {
    let mut rc = ratewise_redis::Config::default();
    rc.admission = admission.clone();
    if let Some(p) = &settings.prefix {
        rc.prefix = p.clone();
    }
    rc.fallback_share = settings.fallback_share;
    if let Some(ttl) = settings.record_ttl {
        rc.record_ttl = ttl;
    }
    match ratewise_redis::RedisStore::connect(&settings.url, rc.clone()).await {
        Ok(r) => {
            tracing::info!("keys' limits shared through Redis");
            Ok(r)
        }
        Err(e @ ratewise_redis::Error::Url) => Err(StartError::Redis(e)),
        Err(e) => {
            tracing::warn!(error = %e, "Redis unavailable at start: pacing on this process's share of the limits until it answers");
            ratewise_redis::RedisStore::new(&settings.url, rc).map_err(StartError::Redis)
        }
    }
}

/// Starts the proxy: reads the journal, binds both listeners, serves.
/// Nothing is sent anywhere at start.
pub async fn start(config: ProxyConfig) -> Result<Running, StartError> {
    let mut recovered = journal::Recovered::default();
    let journal = match &config.journal {
        Some(path) => {
            recovered = journal::recover(path).map_err(|e| StartError::Journal(path.clone(), e))?;
            Some(Arc::new(
                journal::FileJournal::open(path)
                    .map_err(|e| StartError::Journal(path.clone(), e))?,
            ))
        }
        None => None,
    };
    let (store, redis, state): (Arc<Shared>, _, Arc<dyn ratewise_tower::State>) =
        match &config.redis {
            None => {
                let s = Arc::new(Shared::new(Controller::new(config.layer.admission.clone())));
                (s.clone(), None, s)
            }
            Some(settings) => {
                let r = redis_store(settings, &config.layer.admission).await?;
                (r.local().clone(), Some(r.clone()), Arc::new(r))
            }
        };
    let metrics = Arc::new(metrics::Metrics::default());
    let hook = Arc::new(metrics::Hook {
        metrics: metrics.clone(),
        file: journal.clone(),
    });
    let layer = RetryLayer::from_parts(config.layer.clone(), state, Arc::new(TokioClock::new()))
        .with_journal(hook);
    let mut services = Vec::new();
    for up in &config.upstreams {
        let client = upstream::client(up).map_err(StartError::Tls)?;
        services.push(layer.layer(upstream::Marking(client)));
    }
    config
        .admin_access
        .check_address(config.admin)
        .map_err(|e| StartError::Config(config::ConfigError::Invalid(e)))?;
    let token = admin_token(&config.admin_access.token)?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| StartError::Bind(config.listen, e))?;
    let admin_listener = TcpListener::bind(config.admin)
        .await
        .map_err(|e| StartError::Bind(config.admin, e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| StartError::Bind(config.listen, e))?;
    let admin_addr = admin_listener
        .local_addr()
        .map_err(|e| StartError::Bind(config.admin, e))?;

    let guard = admin::guard::Guard::new(
        token,
        admin_addr,
        &config.admin_access.allowed_hosts,
        config.admin_access.open_metrics,
    );
    let app = Arc::new(App {
        admin: guard,
        config,
        layer,
        store,
        redis,
        services,
        keys: keys::Seen::default(),
        stops: answer::StopAnswers::default(),
        metrics,
        journal,
        unknown: std::sync::Mutex::new(recovered.unknown.clone()),
        boot: format!(
            "{:x}",
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis())
        ),
    });
    for u in &recovered.unknown {
        tracing::warn!(job_id = %u.job_id, attempt = u.attempt, started_ms = u.started_ms,
            "outcome_unknown: an attempt started before a restart and never ended; it may have been processed");
        if let Some(j) = &app.journal {
            j.close_unknown(u);
        }
    }
    for s in &recovered.stops {
        if app.redis.is_some() {
            // The shared record decides: another replica may have resumed
            // the key since this one stopped.
            tracing::warn!(key = %s.key, cause = s.cause.as_str(), "a stop in the journal from before the restart; the shared record decides whether it holds");
            continue;
        }
        tracing::warn!(key = %s.key, cause = s.cause.as_str(), "stop still in force from before the restart");
        app.stop_key(&s.key, s.cause, s.until).await;
    }
    if recovered.unreadable > 0 {
        tracing::warn!(
            lines = recovered.unreadable,
            "journal lines that could not be read were skipped"
        );
    }

    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let router = axum::Router::new()
        .fallback(forward::forward)
        .with_state(app.clone());
    let mut rx = stop_rx.clone();
    let server = tokio::spawn(async move {
        let shutdown = async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "proxy listener failed");
        }
    });
    let admin_router = admin::router(app.clone());
    let mut rx = stop_rx;
    let admin = tokio::spawn(async move {
        let shutdown = async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let _ = axum::serve(admin_listener, admin_router)
            .with_graceful_shutdown(shutdown)
            .await;
    });
    // The lease backstop: a reservation no job ended (a bug, a store that
    // lost an update) goes back after the lease.
    let lease_app = app.clone();
    let expiry = tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(30));
        loop {
            tick.tick().await;
            let now = lease_app.layer.now();
            let n = match &lease_app.redis {
                Some(r) => r.expire(now).await,
                None => lease_app.store.lock().expire(now),
            };
            if n > 0 {
                tracing::warn!(
                    reservations = n,
                    "reservations released at the end of their lease"
                );
            }
        }
    });
    if !admin_addr.ip().is_loopback() {
        tracing::warn!(%admin_addr, "the admin listener is not on loopback (allow_remote): its token travels in clear unless TLS is put in front");
    }
    tokio::spawn(forget::sweep(Arc::downgrade(&app)));
    tracing::info!(%addr, %admin_addr, upstreams = app.config.upstreams.len(), "ratewise proxy listening");
    Ok(Running {
        addr,
        admin_addr,
        app,
        stop,
        server,
        admin,
        expiry,
    })
}

/// The admin token from its source: the path is logged, never the token.
fn admin_token(source: &admin::settings::TokenSource) -> Result<String, StartError> {
    use admin::settings::TokenSource;
    match source {
        TokenSource::Given(t) => Ok(t.clone()),
        TokenSource::File(path) => {
            let (t, made) = admin::token::load_or_create(path)
                .map_err(|e| StartError::AdminToken(path.clone(), e))?;
            if made {
                tracing::info!(path = %path.display(), "admin token generated (mode 0600): send it as Authorization: Bearer");
            } else {
                tracing::info!(path = %path.display(), "admin token read");
            }
            Ok(t)
        }
        TokenSource::Memory => {
            tracing::warn!("no file for the admin token (no journal, no HOME): it lives in memory only; set [admin] token or token_file to call /status, /stop, /resume");
            admin::token::generate().map_err(|e| StartError::AdminToken("<memory>".into(), e))
        }
    }
}

/// Runs the proxy until SIGINT or SIGTERM, then shuts down gracefully.
/// Returns the process's exit code.
pub async fn run(config: ProxyConfig) -> i32 {
    let running = match start(config).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ratewise proxy: {e}");
            return 2;
        }
    };
    eprintln!(
        "ratewise proxy on http://{} (admin http://{}): point an SDK's base_url here, with its retries off",
        running.addr, running.admin_addr
    );
    wait_for_signal().await;
    tracing::info!("shutting down: no new requests; in-flight ones finish");
    running.shutdown().await;
    0
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        match term {
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
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Sets up logging to stderr: text or JSON lines, no secrets, no bodies
/// (the layer's events carry allow-listed fields only). `RUST_LOG`-style
/// filtering is not pulled in: `info` and above.
pub fn init_logging(format: config::LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::INFO);
    let _ = match format {
        config::LogFormat::Text => builder.try_init(),
        config::LogFormat::Json => builder.json().try_init(),
    };
}
