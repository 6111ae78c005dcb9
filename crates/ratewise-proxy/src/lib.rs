//! # ratewise-proxy
//!
//! `ratewise proxy`: a gateway any language's SDK points its base URL at,
//! with the SDK's own retries off. Each request is one job on the
//! [`ratewise_tower::RetryLayer`]: paced by the key's shared
//! buckets, retried no earlier than the server says, stopped when money
//! runs out, and answered in the provider's own error shape when it ends
//! without a success.
//!
//! ```text
//! ratewise proxy --listen 127.0.0.1:8787 --upstream https://api.anthropic.com
//!                [--provider NAME] [--config ratewise.toml] [--journal FILE]
//!                [--admin 127.0.0.1:8788] [--grace SECONDS]
//! ```
//!
//! ```python
//! client = anthropic.Anthropic(base_url="http://127.0.0.1:8787", max_retries=0)
//! ```
//!
//! The proxy speaks each provider's own paths and key headers: Anthropic's
//! and OpenAI's, the OpenAI-compatible APIs', Azure OpenAI's deployments
//! (`/openai/deployments/{deployment}/chat/completions`, `api-key`), and
//! Gemini's native API (`/v1beta/models/{model}:generateContent` and
//! `:streamGenerateContent?alt=sse`, `x-goog-api-key` or `?key=`). Which
//! provider an upstream is comes from `--provider`, else its host (see
//! [`config`], "Providers"); the model of a Gemini or Azure request from
//! its path ([`route`]).
//!
//! ```python
//! client = genai.Client(api_key=KEY, http_options={"base_url": "http://127.0.0.1:8787"})
//! ```
//!
//! * [`config`]: the flags and the TOML file.
//! * [`forward`]: the callers' side — one job per request, with its
//!   caller's timeout as its deadline.
//! * [`answer`]: what a caller gets when its job did not succeed.
//! * [`evidence`]: what a stop keeps (journal, Redis note) so every
//!   replica, and this process after a restart, answers it alike.
//! * [`jobs`]: jobs in flight by id (`x-ratewise-job`), with what the
//!   journal says of their attempts.
//! * [`keys`]: callers' keys, fingerprinted (and a path's `key=` redacted
//!   wherever it is logged).
//! * [`route`]: what a path says — the provider's API, a model named in
//!   the path (Gemini, Azure), a Gemini body's output cap.
//! * [`upstream`]: HTTP(S) clients and routing.
//! * [`pools`]: `[[pools]]`, several upstreams and keys as one, selected
//!   by the key a caller presents.
//! * [`admin`]: `/status`, `/resume`, `/stop`, `/unknown/ack`, `/metrics`,
//!   `/healthz` on their own listener.
//! * [`journal`]: attempts, stops and acknowledgements written down, read
//!   back on start, compacted to what a restart needs.
//! * [`serve`]: the listeners, bounded (connections, header and idle
//!   timeouts).
//! * [`drain`]: the shutdown (SIGTERM, SIGINT) and its grace.
//! * [`forget`]: the key table kept within its bound.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod admin;
pub mod answer;
pub mod config;
pub mod drain;
pub mod evidence;
pub mod forget;
pub mod forward;
pub mod jobs;
pub mod journal;
pub mod keys;
pub mod memory;
pub mod metrics;
pub mod pools;
pub mod priority;
pub mod route;
pub mod serve;
pub mod upstream;

use config::ProxyConfig;
use evidence::Evidence;
use ratewise_core::admit::{Controller, Shared};
use ratewise_core::{Cause, Provider};
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
    /// The layer (shared state, queues, clock) that reads each answer's
    /// provider from the answer itself.
    pub layer: RetryLayer,
    /// The layers that read answers as one provider's (its classification,
    /// its streams' events): one per provider the upstreams are read as,
    /// and Gemini's. All share the store (buckets, pauses, stops), the
    /// clock and the journal; each has its own waiting queues, so
    /// `bounds.max_waiting` and the arrival order hold per provider read
    /// (a key is one provider's: its jobs meet in one layer).
    pub layers: Vec<(Provider, RetryLayer)>,
    /// This process's admission state: the store itself, or with
    /// `--redis` this process's view of the shared one (as of its last
    /// round trip), for `/status` and `/metrics`.
    pub store: Arc<Shared>,
    /// The shared store on Redis, with `--redis`.
    pub redis: Option<ratewise_redis::RedisStore>,
    /// One client per upstream, in the configuration's order.
    pub clients: Vec<upstream::Marking>,
    /// The pools, in the configuration's order: each its layer and client.
    pub pools: Vec<pools::PoolRoute>,
    /// Keys seen.
    pub keys: keys::Seen,
    /// Answers that stopped keys.
    pub stops: Arc<answer::StopAnswers>,
    /// Counters.
    pub metrics: Arc<metrics::Metrics>,
    /// The journal file.
    pub journal: Option<Arc<journal::FileJournal>>,
    /// Attempts whose outcome is unknown, until an operator acknowledges
    /// them: kept in the journal from before this start, or sent with no
    /// answer during this run (at most [`journal::MAX_UNKNOWN`], the
    /// latest).
    pub unknown: std::sync::Mutex<Vec<journal::Unknown>>,
    /// This run's prefix of job ids (its start, Unix milliseconds in hex).
    pub boot: String,
    /// The shutdown's state: draining, cut, and the gate of every send.
    pub drain: drain::Drain,
    /// Bytes of request bodies that may be held at once
    /// (`bounds.max_body_memory`).
    pub body_memory: Arc<tokio::sync::Semaphore>,
    /// Jobs in flight, by id.
    pub jobs: Arc<jobs::Jobs>,
    /// Requests that named a priority level this proxy does not know.
    pub unknown_levels: priority::UnknownLevels,
    /// Who may call the admin listener, and its token.
    pub admin: admin::guard::Guard,
}

impl App {
    /// The service sending to upstream `ui` whose answers are read as
    /// `provider`'s (`None`: each answer's own shape).
    pub fn service(
        &self,
        ui: usize,
        provider: Option<Provider>,
    ) -> RetryService<upstream::Marking> {
        let layer = provider
            .and_then(|p| self.layers.iter().find(|(q, _)| *q == p))
            .map_or(&self.layer, |(_, l)| l);
        layer.layer(self.clients[ui].clone())
    }

    /// The service sending through pool `pi`: each attempt rewritten for
    /// the member it goes to.
    pub fn pool_service(&self, pi: usize) -> RetryService<upstream::Marking> {
        let p = &self.pools[pi];
        p.layer.layer(p.client.clone())
    }

    /// A pooled job ended stopped: every member of its pool is. Its own
    /// answer (the one that stopped the last member) is kept under the
    /// pool's label, here only, for the jobs that then find every member
    /// stopped before sending anything; the members' own stops are the
    /// store's, and their evidence is in `/status`'s `pools`. A send
    /// through the pool forgets it (see [`metrics::Hook`]).
    pub fn pool_stopped(&self, label: &str, e: &ratewise_tower::Error) {
        if !answer::stopped_by_its_answer(e) {
            return;
        }
        let cause = e.classification().map_or(Cause::Unknown, |c| c.cause);
        let body = e.body().map(|b| b.as_ref());
        let mut ev = Evidence::of_answer(cause, e.status(), body, SystemTime::now(), e.until());
        ev.raw = e.body().map(|b| {
            let ct = e
                .headers()
                .and_then(|h| h.get(http::header::CONTENT_TYPE).cloned());
            (b.clone(), ct)
        });
        tracing::warn!(
            pool = label,
            cause = ev.cause_word(),
            "every member of the pool is stopped"
        );
        self.stops.keep(label, ev);
    }

    /// Lifts `key`'s stop, once, in the store every layer shares. No job
    /// waits on a stopped key in any layer (a stop hands its waiters back
    /// at once), so there is nobody to wake in the others — and a second
    /// resume could lift a stop another replica made in between.
    pub async fn resume(&self, key: &str) {
        self.layer.resume(key).await;
    }

    /// Notes a job held as `outcome_unknown`: it was sent and no answer
    /// came, so it may have been processed. Its key, model and the last
    /// upstream request id seen come with it.
    pub fn unknown_outcome(&self, e: &ratewise_tower::Error) {
        let Some(last) = e.attempts().last() else {
            return;
        };
        let at = ratewise_core::time::parse_rfc3339(&last.time_utc)
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as u64);
        let ctx = self.jobs.context(e.job_id()).unwrap_or_default();
        let request_id = e
            .attempts()
            .iter()
            .rev()
            .find_map(|r| r.request_id.clone())
            .or(ctx.request_id);
        let mut list = self.unknown.lock().unwrap_or_else(|p| p.into_inner());
        if list.len() >= journal::MAX_UNKNOWN {
            list.remove(0);
        }
        list.push(journal::Unknown {
            job_id: e.job_id().to_owned(),
            attempt: last.attempt,
            started_ms: at,
            key: ctx.key,
            model: ctx.model,
            request_id,
            member: last.member.clone(),
        });
    }

    /// A job whose send was on the wire at the end of the shutdown's grace:
    /// noted, journaled and logged as an unknown outcome (it may have been
    /// processed and billed).
    pub fn cut_unknown(&self, u: journal::Unknown) {
        self.drain.note_cut();
        tracing::warn!(job_id = %u.job_id, attempt = u.attempt, started_ms = u.started_ms,
            "outcome_unknown: a send was on the wire at the end of the shutdown's grace; it may have been processed");
        if let Some(j) = &self.journal {
            j.close_unknown(&u);
        }
        let mut list = self.unknown.lock().unwrap_or_else(|p| p.into_inner());
        if list.len() >= journal::MAX_UNKNOWN {
            list.remove(0);
        }
        list.push(u);
    }

    /// An operator acknowledges unknown outcomes (`POST /unknown/ack`):
    /// those of `job`, or all of them (`None`). Each job is journaled
    /// before it leaves the list, so a restart no longer reports it; the
    /// jobs acknowledged are returned. An error says the journal could not
    /// be written: the jobs not yet written stay listed.
    pub fn acknowledge_unknown(&self, job: Option<&str>) -> Result<Vec<String>, std::io::Error> {
        let mut listed: Vec<journal::Unknown> = self
            .unknown
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // The journal may keep one this process's list does not (a job
        // whose caller had left before its answer).
        if let Some(j) = &self.journal {
            listed.extend(j.unknown());
        }
        let mut jobs: Vec<String> = Vec::new();
        for u in listed {
            if job.is_none_or(|j| j == u.job_id) && !jobs.contains(&u.job_id) {
                jobs.push(u.job_id);
            }
        }
        let mut done = Vec::with_capacity(jobs.len());
        for id in jobs {
            if let Some(j) = &self.journal {
                j.acknowledge(&id)?;
            }
            self.unknown
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|u| u.job_id != id);
            tracing::warn!(job_id = %id, "outcome_unknown acknowledged by an operator");
            done.push(id);
        }
        Ok(done)
    }

    /// A job ended stopped. The first time a stop of `key` is seen here,
    /// its evidence is kept, journaled and logged: the job's own answer
    /// (then also written for the other replicas, with `--redis`), or, for
    /// a stop found at admission, the evidence another replica wrote, or
    /// the store's cause alone (looked for again on the next stopped job,
    /// with `--redis`: the evidence may not be readable yet).
    pub async fn stopped(&self, key: &str, e: &ratewise_tower::Error) {
        let own = answer::stopped_by_its_answer(e);
        // The evidence kept here counts only for the stop the store holds
        // (its cause): one of an earlier stop is replaced.
        let local = self
            .stops
            .get(key)
            .filter(|k| self.stop_cause(key).is_none_or(|c| c == k.cause));
        if let Some(k) = &local {
            // With `--redis`, a stop found at admission looks at the shared
            // evidence again now and then (at most once a second per key):
            // the key may have been resumed and stopped again elsewhere.
            let recheck = self.redis.is_some()
                && !own
                && (k.provisional || k.checked.is_none_or(|t| t.elapsed() >= NOTE_RECHECK));
            if !recheck {
                return;
            }
        }
        let now = SystemTime::now();
        let ev = if own {
            let cause = e.classification().map_or(Cause::Unknown, |c| c.cause);
            let body = e.body().map(|b| b.as_ref());
            let mut ev = Evidence::of_answer(cause, e.status(), body, now, e.until());
            // Replayed as it came in this process.
            ev.raw = e.body().map(|b| {
                let ct = e
                    .headers()
                    .and_then(|h| h.get(http::header::CONTENT_TYPE).cloned());
                (b.clone(), ct)
            });
            ev
        } else if let Some(mut ev) = self.shared_evidence(key).await {
            ev.checked = Some(std::time::Instant::now());
            if let Some(k) = local.filter(|k| k.same_stop(&ev)) {
                // Still the stop known here.
                self.stops.keep(
                    key,
                    Evidence {
                        checked: ev.checked,
                        ..k
                    },
                );
                return;
            }
            ev
        } else if let Some(k) = local {
            self.stops.keep(
                key,
                Evidence {
                    checked: Some(std::time::Instant::now()),
                    ..k
                },
            );
            return;
        } else {
            let cause = self.stop_cause(key).unwrap_or(Cause::Unknown);
            Evidence {
                provisional: self.redis.is_some(),
                checked: Some(std::time::Instant::now()),
                ..Evidence::bare(cause, now, e.until())
            }
        };
        self.keep_stop(key, ev, own).await;
    }

    /// Keeps `ev` as `key`'s stop here, in the journal, and (when this
    /// process is its source) in the shared note.
    async fn keep_stop(&self, key: &str, ev: Evidence, source: bool) {
        tracing::warn!(key, cause = ev.cause_word(), "key stopped");
        if !ev.provisional {
            if let Some(j) = &self.journal {
                j.stop_with(key, &ev);
            }
        }
        if let (true, Some(r)) = (source, &self.redis) {
            let ttl = ev
                .until
                .and_then(|u| u.duration_since(SystemTime::now()).ok())
                .unwrap_or(NOTE_TTL)
                .max(std::time::Duration::from_secs(1));
            if !r.put_stop_note(key, &ev.to_json(), ttl).await {
                tracing::warn!(key, "the stop's evidence could not be written to Redis; other replicas answer for its cause alone");
            }
        }
        self.stops.keep(key, ev);
    }

    /// The evidence another replica wrote for `key`'s stop, when it is the
    /// stop in force (same cause).
    async fn shared_evidence(&self, key: &str) -> Option<Evidence> {
        let r = self.redis.as_ref()?;
        let ev = Evidence::from_json(&r.stop_note(key).await?)?;
        let cause = self.stop_cause(key)?;
        (ev.cause == cause).then_some(ev)
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

    /// Stops `key` (a stop read back, or an embedder's): for every
    /// process sharing it, with `--redis`. Nothing is journaled.
    pub async fn stop_key(&self, key: &str, cause: Cause, until: Option<SystemTime>) {
        self.hold_stop(key, Evidence::bare(cause, SystemTime::now(), until))
            .await;
    }

    /// An operator's stop (`POST /stop`): until resumed, for every process
    /// sharing the key, journaled with its evidence, and answered as an
    /// operator's stop by every replica.
    pub async fn operator_stop(&self, key: &str) {
        let ev = Evidence::operator(SystemTime::now());
        self.store_stop(key, &ev).await;
        self.keep_stop(key, ev, true).await;
    }

    /// Holds a stop read back: in the store and here.
    async fn hold_stop(&self, key: &str, ev: Evidence) {
        self.store_stop(key, &ev).await;
        self.stops.keep(key, ev);
    }

    async fn store_stop(&self, key: &str, ev: &Evidence) {
        let now = self.layer.now();
        match &self.redis {
            Some(r) => r.stop(key, ev.cause, ev.until, now).await,
            None => {
                let mut c = self.store.lock();
                let scope = c.scope_of(key, "default");
                c.stop(scope, ev.cause, ev.until, now);
            }
        }
    }
}

/// How often, at most, a replica reads a stopped key's shared evidence
/// again.
const NOTE_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a stop's evidence note lives in Redis when the stop has no
/// end: as long as the key's record does by default (7 days unused).
const NOTE_TTL: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

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
    server: serve::Served,
    admin: serve::Served,
    expiry: tokio::task::JoinHandle<()>,
    store_watch: tokio::task::JoinHandle<()>,
    /// The periodic write of what the keys learned: stopped before the
    /// shutdown's own last write.
    remembering: tokio::task::JoinHandle<()>,
}

/// How long, once the grace is over, the cut answers (504s, a stream's
/// `error` event) get to be written before the connections close.
const CUT_WRITE: std::time::Duration = std::time::Duration::from_secs(2);

/// How a shutdown ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stopped {
    /// Answers cut at the end of the grace: callers answered 504
    /// `hold_unknown`, streams ended with an `error` event, and sends of
    /// callers that had left still on the wire. 0: nothing was cut.
    pub cut: usize,
}

/// The exit code of a shutdown that cut something at the end of its grace.
pub const EXIT_CUT: i32 = 3;

/// The exit code when a second signal ended the shutdown at once.
pub const EXIT_SECOND_SIGNAL: i32 = 4;

/// `GET /healthz` on the admin listener: `ok`; `degraded: <reason>`
/// (still 200: the proxy serves, so a load balancer keeps sending) while
/// the Redis store is unavailable and this process paces alone on its
/// share of the limits; 503 `draining` once a shutdown has started.
pub async fn healthz(
    axum::extract::State(app): axum::extract::State<Arc<App>>,
) -> (http::StatusCode, String) {
    if app.drain.is_draining() {
        return (http::StatusCode::SERVICE_UNAVAILABLE, "draining\n".into());
    }
    match store_degraded(&app) {
        Some(reason) => (http::StatusCode::OK, format!("degraded: {reason}\n")),
        None => (http::StatusCode::OK, "ok\n".into()),
    }
}

/// Why the store is degraded, while it is.
fn store_degraded(app: &App) -> Option<String> {
    let h = app.redis.as_ref()?.health();
    h.degraded.then(|| {
        format!(
            "Redis unavailable: the keys' limits are not shared; this process paces on its share of them ({}%) until Redis answers ({} failed round trips so far)",
            f64::from(h.share_permille) / 10.0,
            h.errors
        )
    })
}

/// How often the store's health is looked at (and, while it is degraded,
/// Redis tried through a read of one key, so that its return shows with
/// no traffic).
const STORE_CHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// How often a degraded store is said again in the log.
const DEGRADED_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// While the Redis store is degraded: a WARN line a minute (the store
/// says when it goes and when it comes back), and a read of one key every
/// [`STORE_CHECK`], which tries Redis again.
async fn watch_store(app: Arc<App>) {
    let Some(r) = app.redis.clone() else {
        return;
    };
    let mut tick = tokio::time::interval(STORE_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Since when it has been degraded, and when that was last said.
    let mut since: Option<(std::time::Instant, std::time::Instant)> = None;
    loop {
        tick.tick().await;
        let h = r.health();
        if !h.degraded {
            since = None;
            continue;
        }
        let now = std::time::Instant::now();
        // The store's own line says it first.
        let (from, said) = since.get_or_insert((now, now));
        if now.duration_since(*said) >= DEGRADED_LOG_EVERY {
            *said = now;
            tracing::warn!(
                for_s = now.duration_since(*from).as_secs(),
                share_percent = f64::from(h.share_permille) / 10.0,
                errors = h.errors,
                "Redis still unavailable: the keys' limits are not shared; pacing on this process's share of them until it answers"
            );
        }
        let one = app.store.lock().scopes().first().copied();
        if let Some(id) = one {
            let _ = ratewise_core::admit::Store::snapshot(&r, id, app.layer.now()).await;
        }
    }
}

impl Running {
    /// Drains (see [`drain`]): the callers' listener answers every new
    /// request 503 at once, jobs not yet sent get the same, no send starts;
    /// sends on the wire and answers being written finish within the grace
    /// (`--grace`, `bounds.grace_s`); what is left then is cut. Then both
    /// listeners close, the last settles reach Redis and the journal is
    /// flushed.
    pub async fn shutdown(mut self) -> Stopped {
        let app = self.app.clone();
        app.drain.start();
        let grace = app.config.grace;
        let server = &self.server;
        let settled = tokio::time::timeout(grace, async {
            while app.drain.wire.on_wire() > 0 || server.active() > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
        .await
        .is_ok();
        let mut lost = 0;
        if !settled {
            app.drain.cut_now();
            // The cut answers are written; callers that left have nobody
            // to answer.
            let _ = tokio::time::timeout(CUT_WRITE, async {
                while server.active() > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            })
            .await;
            lost = app.drain.wire.on_wire();
            tracing::warn!(
                grace_s = grace.as_secs_f64(),
                cut = app.drain.cut() + lost,
                "the shutdown's grace is over: what was still in flight was cut"
            );
        }
        self.server.close().await;
        self.admin.close().await;
        self.expiry.abort();
        self.store_watch.abort();
        self.remembering.abort();
        let _ = (&mut self.remembering).await;
        // The last settles reach the other replicas.
        if let Some(r) = &app.redis {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), r.flush()).await;
        }
        // What the keys learned, for the next start.
        memory::once(&app);
        if let Some(j) = &app.journal {
            j.sync();
        }
        Stopped {
            cut: app.drain.cut() + lost,
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
    let (r, unanswered) = ratewise_redis::RedisStore::open(&settings.url, rc)
        .await
        .map_err(StartError::Redis)?;
    match unanswered {
        None => tracing::info!("keys' limits shared through Redis"),
        Some(e) => {
            tracing::warn!(error = %e, share_percent = f64::from(r.health().share_permille) / 10.0,
                "Redis unavailable at start: degraded, pacing on this process's share of the limits until it answers");
        }
    }
    Ok(r)
}

/// Raises the descriptor limit to its hard limit (as servers do), works
/// the connection cap out again from it unless it is configured, and
/// logs the cap with its source.
fn descriptors(config: &mut ProxyConfig) {
    match config::raise_descriptor_limit() {
        Ok(Some((from, to))) => {
            tracing::info!(from, to, "descriptor limit raised to its hard limit");
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(error = %e, "the descriptor limit could not be raised to its hard limit");
        }
    }
    if config.max_connections_source != config::CapSource::Configured {
        (config.max_connections, config.max_connections_source) = config::connection_cap();
    }
    tracing::info!(
        max_connections = config.max_connections,
        source = %config.max_connections_source,
        "connection cap per listener: {} ({}); at the cap the connections idle longest are closed for new ones",
        config.max_connections,
        config.max_connections_source,
    );
}

/// Starts the proxy: raises the descriptor limit to its hard limit, reads
/// the journal, binds both listeners, serves. Nothing is sent anywhere at
/// start.
pub async fn start(config: ProxyConfig) -> Result<Running, StartError> {
    start_with(config, journal::FileJournal::open).await
}

/// [`start`], its journal (when it has one) opened by `open`: a test's
/// slow or failing disk. In its phases: the descriptor limit
/// ([`descriptors`]), the journal read back ([`open_journal`]), the
/// admission store ([`Stores::open`]), the layers ([`Layers`]), the
/// upstreams' clients ([`clients`]) and the pools' routes
/// ([`pool_routes`]), both listeners bound ([`Listeners::bind`]), the
/// app, what the journal recovered put back ([`recover`]), and serving
/// ([`serve_all`]). Nothing is sent anywhere.
pub(crate) async fn start_with(
    mut config: ProxyConfig,
    open: impl FnOnce(&std::path::Path) -> std::io::Result<(journal::FileJournal, journal::Recovered)>,
) -> Result<Running, StartError> {
    descriptors(&mut config);
    let (journal, recovered) = open_journal(&config, open)?;
    let stores = Stores::open(&config).await?;
    let metrics = Arc::new(metrics::Metrics::default());
    let jobs = Arc::new(jobs::Jobs::default());
    let stops = Arc::new(answer::StopAnswers::default());
    let hook = Arc::new(metrics::Hook {
        metrics: metrics.clone(),
        file: journal.clone(),
        jobs: jobs.clone(),
        stops: stops.clone(),
    });
    let layers = Layers::new(&config, stores.state.clone(), hook);
    let (layer, by_provider) = layers.per_provider(&config);
    let drain = drain::Drain::default();
    // The configuration's old spellings, said once (read all the same).
    for w in &config.warnings {
        tracing::warn!("{w}");
    }
    let clients = clients(&config, &drain)?;
    let pools = pool_routes(&config, &layers, &layer, &drain)?;
    let (listeners, token) = Listeners::bind(&config).await?;

    let body_memory = Arc::new(tokio::sync::Semaphore::new(config.max_body_memory));
    let guard = admin::guard::Guard::new(
        token,
        listeners.admin_addr,
        &config.admin_access.allowed_hosts,
        config.admin_access.open_metrics,
    );
    let app = Arc::new(App {
        admin: guard,
        config,
        drain,
        body_memory,
        layer,
        layers: by_provider,
        store: stores.store,
        redis: stores.redis,
        clients,
        pools,
        keys: keys::Seen::default(),
        stops,
        metrics,
        journal,
        unknown: std::sync::Mutex::new(recovered.unknown.clone()),
        boot: format!(
            "{:x}",
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis())
        ),
        jobs,
        unknown_levels: priority::UnknownLevels::default(),
    });
    recover(&app, &recovered).await;
    Ok(serve_all(app, listeners))
}

/// The journal, when one is kept: read back and compacted to what is
/// live, before anything else reads the state it holds (stops, unknown
/// outcomes, what the keys learned). No journal: nothing recovered.
fn open_journal(
    config: &ProxyConfig,
    open: impl FnOnce(&std::path::Path) -> std::io::Result<(journal::FileJournal, journal::Recovered)>,
) -> Result<(Option<Arc<journal::FileJournal>>, journal::Recovered), StartError> {
    match &config.journal {
        Some(path) => {
            let (j, r) = open(path).map_err(|e| StartError::Journal(path.clone(), e))?;
            Ok((Some(Arc::new(j)), r))
        }
        None => Ok((None, journal::Recovered::default())),
    }
}

/// The admission state, three views of one store: this process's own
/// (for `/status` and `/metrics`), the Redis store when shared, and the
/// one the layers admit through.
struct Stores {
    store: Arc<Shared>,
    redis: Option<ratewise_redis::RedisStore>,
    state: Arc<dyn ratewise_tower::State>,
}

impl Stores {
    /// A store of this process alone, or with `--redis` the shared one
    /// ([`redis_store`]: a Redis that does not answer is not fatal). Made
    /// from `config.layer.admission`.
    async fn open(config: &ProxyConfig) -> Result<Stores, StartError> {
        Ok(match &config.redis {
            None => {
                let s = Arc::new(Shared::new(Controller::new(config.layer.admission.clone())));
                Stores {
                    store: s.clone(),
                    redis: None,
                    state: s,
                }
            }
            Some(settings) => {
                let r = redis_store(settings, &config.layer.admission).await?;
                Stores {
                    store: r.local().clone(),
                    redis: Some(r.clone()),
                    state: Arc::new(r),
                }
            }
        })
    }
}

/// What every layer is built from: one store, one clock, one journal
/// hook, and the layer's configuration without admission settings (the
/// store was made from them: see [`Stores::open`]).
struct Layers {
    config: ratewise_tower::Config,
    state: Arc<dyn ratewise_tower::State>,
    clock: Arc<dyn ratewise_tower::Clock>,
    hook: Arc<metrics::Hook>,
}

impl Layers {
    fn new(
        config: &ProxyConfig,
        state: Arc<dyn ratewise_tower::State>,
        hook: Arc<metrics::Hook>,
    ) -> Layers {
        let mut layer_config = config.layer.clone();
        layer_config.admission = ratewise_core::admit::Config::default();
        Layers {
            config: layer_config,
            state,
            clock: Arc::new(TokioClock::new()),
            hook,
        }
    }

    /// The builder of a layer reading answers as `provider`'s (`None`:
    /// each answer's own shape).
    fn builder(&self, provider: Option<Provider>) -> ratewise_tower::Builder {
        let mut c = self.config.clone();
        c.provider = provider;
        RetryLayer::builder()
            .config(c)
            .store(self.state.clone())
            .clock(self.clock.clone())
            .journal(self.hook.clone())
    }

    /// The layer that reads each answer's provider from the answer, and
    /// one per provider read: the upstreams' own, and Gemini's (a Gemini
    /// path's answers are Gemini's whatever the upstream), in the order
    /// of their words.
    fn per_provider(&self, config: &ProxyConfig) -> (RetryLayer, Vec<(Provider, RetryLayer)>) {
        // This one first, then one per provider, waiting in its queues:
        // a key's jobs meet in one queue whatever layer reads them.
        let layer = self
            .builder(None)
            .build()
            .expect("a store with no admission settings beside it builds");
        let build = |provider: Option<Provider>| {
            self.builder(provider)
                .waiting_with(&layer)
                .build()
                .expect("a store with no admission settings beside it builds")
        };
        let mut read: Vec<Provider> = config.upstreams.iter().filter_map(|u| u.provider).collect();
        read.push(Provider::Gemini);
        read.sort_by_key(|p| p.as_str());
        read.dedup();
        let layers = read.into_iter().map(|p| (p, build(Some(p)))).collect();
        (layer, layers)
    }
}

/// One client per upstream, in the configuration's order, each marking
/// its sends on the wire for the drain; each upstream's start line says
/// what it is read as.
fn clients(
    config: &ProxyConfig,
    drain: &drain::Drain,
) -> Result<Vec<upstream::Marking>, StartError> {
    let mut clients = Vec::new();
    for up in &config.upstreams {
        let client = upstream::client(up).map_err(StartError::Tls)?;
        clients.push(upstream::Marking(client, drain.wire.clone()));
        tracing::info!(upstream = %up.name, provider = up.provider.map_or("generic", |p| p.as_str()), "{}", up.provider_line());
    }
    Ok(clients)
}

/// Each pool's route: its layer (each attempt read as its member's
/// provider's) and client, its members logged. A pool the layer refuses
/// is a configuration error naming it.
fn pool_routes(
    config: &ProxyConfig,
    layers: &Layers,
    base: &RetryLayer,
    drain: &drain::Drain,
) -> Result<Vec<pools::PoolRoute>, StartError> {
    let mut pools = Vec::with_capacity(config.pools.len());
    for p in &config.pools {
        // Each attempt is read as its member's provider's; its jobs wait
        // in the proxy's one queue per key (two pools on one key are two
        // tenants of it).
        let layer = layers
            .builder(None)
            .waiting_with(base)
            .pool(p.pool.clone())
            .build()
            .map_err(|e| {
                StartError::Config(config::ConfigError::Invalid(format!(
                    "pool {:?}: {e}",
                    p.name
                )))
            })?;
        let client = upstream::pool_client(&p.name).map_err(StartError::Tls)?;
        for m in p.pool.members() {
            let core = m.core();
            tracing::info!(pool = %p.name, upstream = %core.upstream, key = %core.key,
                provider = core.provider.as_str(), weight = core.weight, "pool member");
        }
        pools.push(pools::PoolRoute {
            workload: p.workload.clone(),
            name: p.name.clone(),
            caller: p.caller.clone(),
            layer,
            client: upstream::Marking(client, drain.wire.clone()),
        });
    }
    Ok(pools)
}

/// Both listeners, bound, with the addresses they got (a port 0 is
/// given one).
struct Listeners {
    callers: TcpListener,
    admin: TcpListener,
    addr: SocketAddr,
    admin_addr: SocketAddr,
}

impl Listeners {
    /// The admin's address checked against who may call it, its token
    /// read (returned beside them), then the callers' listener bound and
    /// the admin's.
    async fn bind(config: &ProxyConfig) -> Result<(Listeners, String), StartError> {
        config
            .admin_access
            .check_address(config.admin)
            .map_err(|e| StartError::Config(config::ConfigError::Invalid(e)))?;
        let token = admin_token(&config.admin_access.token)?;
        let callers = TcpListener::bind(config.listen)
            .await
            .map_err(|e| StartError::Bind(config.listen, e))?;
        let admin = TcpListener::bind(config.admin)
            .await
            .map_err(|e| StartError::Bind(config.admin, e))?;
        let addr = callers
            .local_addr()
            .map_err(|e| StartError::Bind(config.listen, e))?;
        let admin_addr = admin
            .local_addr()
            .map_err(|e| StartError::Bind(config.admin, e))?;
        Ok((
            Listeners {
                callers,
                admin,
                addr,
                admin_addr,
            },
            token,
        ))
    }
}

/// What the journal recovered, put back before the first request: the
/// unknown outcomes said, the stops from before the restart held again
/// (with Redis, the shared record decides), what the keys learned
/// recalled, unreadable lines counted.
async fn recover(app: &App, recovered: &journal::Recovered) {
    warn_unknown(&recovered.unknown);
    for s in &recovered.stops {
        if app.redis.is_some() {
            // The shared record decides: another replica may have resumed
            // the key since this one stopped.
            tracing::warn!(key = %s.key, cause = s.evidence.cause_word(), "a stop in the journal from before the restart; the shared record decides whether it holds");
            continue;
        }
        tracing::warn!(key = %s.key, cause = s.evidence.cause_word(), "stop still in force from before the restart");
        // Its evidence and since come back with it: the same answer as
        // before the restart.
        app.hold_stop(&s.key, s.evidence.clone()).await;
    }
    memory::recall(app, &recovered.beliefs);
    if recovered.unreadable > 0 {
        tracing::warn!(
            lines = recovered.unreadable,
            "journal lines that could not be read were skipped"
        );
    }
}

/// Serves both listeners with their bounds (the admin's at most
/// [`ADMIN_MAX_CONNECTIONS`] connections), and starts the background
/// tasks: the lease backstop ([`expire_leases`]), the store's watch, the
/// key table's sweep and the memory of what the keys learned.
fn serve_all(app: Arc<App>, listeners: Listeners) -> Running {
    let Listeners {
        callers,
        admin,
        addr,
        admin_addr,
    } = listeners;
    let bounds = serve::Bounds {
        header_read_timeout: app.config.header_read_timeout,
        idle_timeout: app.config.idle_timeout,
        max_connections: app.config.max_connections,
    };
    let router = axum::Router::new()
        .fallback(forward::forward)
        .with_state(app.clone());
    let server = serve::serve(callers, router, bounds, "callers");
    let admin = serve::serve(
        admin,
        admin::router(app.clone()),
        serve::Bounds {
            max_connections: ADMIN_MAX_CONNECTIONS.min(bounds.max_connections),
            ..bounds
        },
        "admin",
    );
    let expiry = tokio::spawn(expire_leases(app.clone()));
    if !admin_addr.ip().is_loopback() {
        tracing::warn!(%admin_addr, "the admin listener is not on loopback (allow_remote): its token travels in clear unless TLS is put in front");
    }
    let store_watch = tokio::spawn(watch_store(app.clone()));
    tokio::spawn(forget::sweep(Arc::downgrade(&app)));
    let remembering = tokio::spawn(memory::remember(Arc::downgrade(&app)));
    tracing::info!(%addr, %admin_addr, upstreams = app.config.upstreams.len(), pools = app.pools.len(), "ratewise proxy listening");
    Running {
        addr,
        admin_addr,
        app,
        server,
        admin,
        expiry,
        store_watch,
        remembering,
    }
}

/// The lease backstop, every 30 s: a reservation no job ended (a bug, a
/// store that lost an update) goes back after the lease.
async fn expire_leases(app: Arc<App>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(30));
    loop {
        tick.tick().await;
        let now = app.layer.now();
        let n = match &app.redis {
            Some(r) => r.expire(now).await,
            None => app.store.lock().expire(now),
        };
        if n > 0 {
            tracing::warn!(
                reservations = n,
                "reservations released at the end of their lease"
            );
        }
    }
}

/// How many unknown outcomes the start log details, and how many job ids
/// its summary names.
const LOG_UNKNOWN: usize = 20;

/// At every start, while unknown outcomes are not acknowledged: a WARN
/// for each of the first [`LOG_UNKNOWN`] (job, attempt, key, model,
/// request id) and one naming the first [`LOG_UNKNOWN`] jobs, with the
/// count.
fn warn_unknown(unknown: &[journal::Unknown]) {
    if unknown.is_empty() {
        return;
    }
    for u in unknown.iter().take(LOG_UNKNOWN) {
        tracing::warn!(job_id = %u.job_id, attempt = u.attempt, started_ms = u.started_ms,
            key = u.key.as_deref(), model = u.model.as_deref(), request_id = u.request_id.as_deref(),
            "outcome_unknown: an attempt that may have been processed, not acknowledged");
    }
    let mut ids: Vec<&str> = Vec::new();
    for u in unknown {
        if !ids.contains(&u.job_id.as_str()) {
            ids.push(&u.job_id);
        }
    }
    let jobs = ids.len();
    let mut named = ids
        .iter()
        .take(LOG_UNKNOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(",");
    if jobs > LOG_UNKNOWN {
        named.push_str(&format!(",… ({} more)", jobs - LOG_UNKNOWN));
    }
    tracing::warn!(count = unknown.len(), jobs, job_ids = %named,
        "outcome_unknown: unknown outcomes kept from before this start, until acknowledged (POST /unknown/ack?job=ID or ?all=true on the admin listener)");
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

/// Connections the admin listener serves at once.
const ADMIN_MAX_CONNECTIONS: usize = 64;

/// Runs the proxy until SIGINT or SIGTERM (alike), then shuts down (see
/// [`Running::shutdown`]); a second signal during the shutdown ends the
/// process at once. Returns the process's exit code:
///
/// * `0`: shut down with nothing cut;
/// * `2`: did not start;
/// * [`EXIT_CUT`] (`3`): the grace ended with answers cut (callers
///   answered 504 `hold_unknown`, streams ended with an `error` event,
///   sends of callers that had left still on the wire);
/// * [`EXIT_SECOND_SIGNAL`] (`4`): a second signal ended the shutdown.
pub async fn run(config: ProxyConfig) -> i32 {
    // Listened to before anything starts, so no signal is lost between
    // the first and the second.
    let mut signals = Signals::new();
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
    signals.next().await;
    let grace = running.app.config.grace;
    tracing::warn!(
        grace_s = grace.as_secs_f64(),
        "shutting down: new requests and jobs not yet sent are answered 503; sends in flight finish within the grace; a second signal exits at once"
    );
    tokio::select! {
        stopped = running.shutdown() => {
            if stopped.cut == 0 {
                tracing::info!("shut down: nothing was cut");
                0
            } else {
                EXIT_CUT
            }
        }
        _ = signals.next() => {
            tracing::warn!("a second signal: exiting at once");
            EXIT_SECOND_SIGNAL
        }
    }
}

/// SIGINT and SIGTERM, listened to for the process's life.
struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Signals {
                term: signal(SignalKind::terminate()).ok(),
                int: signal(SignalKind::interrupt()).ok(),
            }
        }
        #[cfg(not(unix))]
        {
            Signals {}
        }
    }

    /// The next SIGINT or SIGTERM.
    async fn next(&mut self) {
        #[cfg(unix)]
        {
            async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
                match s {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                _ = recv(&mut self.term) => {}
                _ = recv(&mut self.int) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
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

#[cfg(test)]
mod start_tests {
    use super::*;

    #[tokio::test]
    async fn a_layer_per_provider_read_and_geminis_always_each_once() {
        let flags = config::Flags {
            upstream: Some("https://api.anthropic.com".into()),
            ..config::Flags::default()
        };
        let toml = "[[upstream]]\nurl = \"https://generativelanguage.googleapis.com\"\npaths = [\"/v1beta\"]\n\
                    [[upstream]]\nurl = \"https://api.anthropic.com\"\npaths = [\"/other\"]\n";
        let config = ProxyConfig::from_toml(&flags, toml, |_| None).unwrap();
        let state = Arc::new(Shared::new(Controller::new(config.layer.admission.clone())));
        let hook = Arc::new(metrics::Hook {
            metrics: Arc::default(),
            file: None,
            jobs: Arc::default(),
            stops: Arc::default(),
        });
        let (_, layers) = Layers::new(&config, state, hook).per_provider(&config);
        let read: Vec<&str> = layers.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(read, ["anthropic", "gemini"]);
    }
}
