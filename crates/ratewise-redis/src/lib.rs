//! One API key's limits shared by every process, on Redis.
//!
//! An API key's limits belong to an organisation, not a process: four
//! workers that each pace on their own send four times too much, and a
//! spend cap one of them hits must stop all of them. [`RedisStore`] is
//! ratewise's admission [`Store`] kept in Redis, so every process using a
//! key admits against the same buckets, pauses on the same 429 and stops on
//! the same spend cap.
//!
//! # How it works
//!
//! Each key (or key group) is one Redis hash: the core's
//! [`KeyRecord`](ratewise_core::admit::store_kit::KeyRecord) — per model class the
//! bucket levels, the pause, the ramp, the learned limits; the key's stop —
//! and a version. Every operation runs the core's own controller on this
//! process's copy of the record and writes the result back with one
//! compare-and-set script, **one round trip** when nobody else wrote
//! meanwhile. When somebody did, the refusal carries the fresh record and
//! the operation is applied again to it: no answer is given on stale
//! state. The arithmetic and the policy exist once, in the core, exact
//! (integers, no floating point), so processes sharing a key decide as one
//! in-memory store would (the property test in `tests/agree.rs`). Under
//! load, operations queued on one key share a round trip.
//!
//! * **Keys** are hash-tagged by the key's fingerprint alone
//!   (`ratewise:{fp-…}:record`), so every class of one key and its stop
//!   live in one Redis Cluster slot. A key name is fingerprinted with
//!   SHA-256 unless it already is one (`fp-` and 16 hex digits, as
//!   `ratewise proxy` names keys); key names are never secrets.
//! * **Time** is Redis's `TIME` by default ([`Clock::Redis`]): each reply
//!   carries it and this process reads the record's times against it, so
//!   hosts whose clocks disagree still agree on a bucket's level.
//! * **Reservations** stay with the process that took them. A process that
//!   crashes leaves its takes charged at their estimates — the provider may
//!   have run them — and the buckets refill them at the key's rate. A
//!   reservation a live process abandons is given back by its own lease
//!   ([`RedisStore::expire`]); a settle that arrives after it corrects to
//!   the actual usage and never counts twice.
//! * **Stops and pauses** are in the record: the next operation of every
//!   process sees them, and a wait is never longer than
//!   [`Config::recheck`] (1 s), so a process waiting on a key another
//!   process stopped learns it within a second.
//! * **Redis unavailable**: nothing panics and no job is lost. The process
//!   paces on its own at its share of the limits ([`Config::fallback_share`];
//!   by default one over the number of processes Redis last saw on the
//!   key), says so in its logs and in [`RedisStore::health`], and goes back
//!   to Redis when it answers. A stop known before the outage stays in
//!   force, and a stop learned during it is written back.
//!
//! # What it does not do
//!
//! * **One task per process.** Operations on different keys take turns
//!   (each batch is one round trip); with many busy keys in one process,
//!   an operation can wait for the other keys' round trips.
//! * **Separate processes flat out on one key** lose writes to each other:
//!   each refusal costs a round trip, and the store backs off after the
//!   second, so 16 separate stores on one key make several times fewer
//!   admit + settle pairs a second than 16 tasks of one process.
//!   `cargo bench -p ratewise-redis --bench pairs` prints both (the
//!   README gives its measured figures).
//! * **The spend budget** ([`admit::Config::spend`](ratewise_core::admit::Config::spend))
//!   stays per process: N processes may spend N budgets. A spend cap the
//!   *provider* reports stops every process.
//! * **Key names are the namespace.** Applications sharing one Redis share
//!   a key's record when their key names (the tower layer's key labels,
//!   `"default"` when unset) and [`Config::prefix`] agree: give each
//!   application its own prefix or its own labels.
//! * **While Redis is away**, the share is one over the most processes
//!   seen on any key this process used, for all its keys; a process that
//!   never reached Redis ([`RedisStore::unreached`]), or saw no key on it,
//!   paces at one half unless [`Config::fallback_share`] says otherwise.
//! * **Leases** are each process's own (10 minutes by default): a stream
//!   longer than that is given back early, and its settle then charges its
//!   actual usage, never twice.
//!
//! # Example
//!
//! ```no_run
//! use ratewise_redis::{Config, RedisStore};
//! use ratewise_tower::RetryLayer;
//! use std::sync::Arc;
//!
//! # async fn run() -> Result<(), ratewise_redis::Error> {
//! let mut config = Config::default();
//! config.admission.limits.requests = Some(4_000);
//! let store = RedisStore::connect("redis://127.0.0.1:6379/", config).await?;
//! let layer = RetryLayer::builder().store(Arc::new(store)).build();
//! # let _ = layer;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod actor;
mod clock;
mod demand;
mod notes;
mod ops;
mod script;
mod side;
#[cfg(feature = "testing")]
pub mod testing;

pub use clock::Clock;
pub use notes::MAX_NOTE;

use ops::{Op, Reply, Request};
use ratewise_core::admit::store_kit::StoreHooks;
use ratewise_core::admit::{
    Admission, AdmitRequest, Applied, Controller, ScopeId, ScopeSnapshot, Shared, Store,
    StoreFuture, Target, Update, DEMAND_FRESH,
};
use ratewise_core::{Cause, Now};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, oneshot};

/// How a [`RedisStore`] behaves. Start from [`Config::default`] and set
/// what differs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// The admission settings (limits, classes, ramp, lease…) this process
    /// runs the shared record with. Every process sharing a key should
    /// configure the same limits.
    pub admission: ratewise_core::admit::Config,
    /// Prefix of every Redis key (default `ratewise`).
    pub prefix: String,
    /// Whose wall clock the record's times are read against (default
    /// Redis's).
    pub clock: Clock,
    /// The longest wait an admission answers (default 1 s): a waiting
    /// process asks again at least this often, and so learns a stop, a
    /// pause or a resume made by another process within it. `None`: waits
    /// as long as the buckets say.
    pub recheck: Option<Duration>,
    /// Bound on connecting and on each round trip (default 500 ms); past
    /// it Redis counts as unavailable.
    pub timeout: Duration,
    /// While Redis is unavailable, how often it is tried again (default
    /// 1 s).
    pub reconnect_every: Duration,
    /// The share of the limits this process paces at while Redis is
    /// unavailable, in (0, 1]. `None` (the default): one over the number of
    /// processes Redis last saw using the key; one half when Redis was
    /// never reached or saw no key of this process's.
    pub fallback_share: Option<f64>,
    /// A process counts towards that number for this long after its last
    /// call (default 60 s).
    pub alive: Duration,
    /// Records of keys nobody used for this long are dropped by Redis
    /// (default 7 days).
    pub record_ttl: Duration,
    /// Most operations on one key sharing one round trip (default 64).
    pub max_batch: usize,
    /// How long a process's published waiting demand counts for the
    /// others (default [`DEMAND_FRESH`], 3 s): priorities across processes
    /// ([`Store::demand`]).
    pub demand_fresh: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            admission: ratewise_core::admit::Config::default(),
            prefix: "ratewise".to_owned(),
            clock: Clock::Redis,
            recheck: Some(Duration::from_secs(1)),
            timeout: Duration::from_millis(500),
            reconnect_every: Duration::from_secs(1),
            fallback_share: None,
            alive: Duration::from_secs(60),
            record_ttl: Duration::from_secs(7 * 24 * 3600),
            max_batch: 64,
            demand_fresh: DEMAND_FRESH,
        }
    }
}

impl Config {
    /// The same, with values that would break the store raised to the
    /// least that works (a zero time to live would delete each record as
    /// it is written).
    fn sanitized(mut self) -> Config {
        self.record_ttl = self.record_ttl.max(Duration::from_secs(1));
        self.alive = self.alive.max(Duration::from_secs(1));
        self.timeout = self.timeout.max(Duration::from_millis(1));
        self.reconnect_every = self.reconnect_every.max(Duration::from_millis(1));
        self.max_batch = self.max_batch.max(1);
        self.demand_fresh = self.demand_fresh.max(Duration::from_millis(1));
        if self.prefix.is_empty() || self.prefix.contains(['{', '}']) {
            self.prefix = Config::default().prefix;
        }
        self
    }
}

/// Why a store could not be made.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The URL is not a Redis URL (it is not repeated here: it may hold a
    /// password).
    Url,
    /// Not called inside a tokio runtime, which runs the store's task.
    NoRuntime,
    /// Redis answered with an error, or the connection failed.
    Redis(RedisError),
    /// Redis did not answer within [`Config::timeout`].
    Timeout,
    /// Redis answered something that is not the script's reply.
    Reply,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Url => f.write_str("not a Redis URL (redis://host:port/db)"),
            Error::NoRuntime => f.write_str("a RedisStore must be made inside a tokio runtime"),
            Error::Redis(e) => write!(f, "Redis: {e}"),
            Error::Timeout => f.write_str("Redis did not answer in time"),
            Error::Reply => f.write_str("Redis answered something other than the store's script"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            Error::Url | Error::NoRuntime | Error::Timeout | Error::Reply => None,
        }
    }
}

/// What Redis (or the connection to it) said, opaque so that the `redis`
/// client's types stay out of this crate's API and a new client version is
/// not a breaking change here. Its `Display` is the detail without anything
/// that could echo the URL (Redis's own code and message, or "connection
/// refused", "timed out", "connection lost"); its
/// [`source`](std::error::Error::source) is the client's error, boxed.
#[derive(Debug)]
pub struct RedisError {
    /// Out of reach (lost or refused connection, timeout), as against
    /// Redis answering with an error of its own.
    transport: bool,
    /// The detail, without the URL.
    detail: String,
    /// The client's error.
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl std::fmt::Display for RedisError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.detail)
    }
}

impl std::error::Error for RedisError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

impl Error {
    /// Wraps the client's error, reading what is needed of it now.
    pub(crate) fn redis(e: redis::RedisError) -> Self {
        Error::Redis(RedisError {
            transport: e.is_io_error()
                || e.is_connection_refusal()
                || e.is_connection_dropped()
                || e.is_timeout(),
            detail: describe(&e),
            source: Box::new(e),
        })
    }

    /// Whether Redis is out of reach (a lost or refused connection, a
    /// timeout), as against Redis answering with an error of its own.
    pub fn is_transport(&self) -> bool {
        match self {
            Error::Timeout => true,
            Error::Redis(e) => e.transport,
            Error::Url | Error::NoRuntime | Error::Reply => false,
        }
    }
}

/// The error without any detail that could echo a URL.
fn describe(e: &redis::RedisError) -> String {
    if e.is_connection_refusal() {
        "connection refused".to_owned()
    } else if e.is_timeout() {
        "timed out".to_owned()
    } else if e.is_io_error() || e.is_connection_dropped() {
        "connection lost".to_owned()
    } else {
        // Redis's own error (WRONGTYPE, OOM, NOPERM…): its code and
        // message, which never carry the URL.
        match (e.code(), e.detail()) {
            (Some(code), Some(detail)) => format!("{code} {detail}"),
            (Some(code), None) => code.to_owned(),
            _ => format!("{:?}", e.kind()),
        }
    }
}

/// How the store is doing, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// Redis is unavailable and this process paces on its own.
    pub degraded: bool,
    /// The per-mille of the limits it paces at (1,000 unless degraded).
    pub share_permille: u32,
    /// Processes Redis last saw on a key this process uses (the most over
    /// its keys).
    pub peers: u32,
    /// Writes accepted.
    pub writes: u64,
    /// Writes refused because another process wrote first (each costs one
    /// more round trip).
    pub conflicts: u64,
    /// Round trips that failed (connection lost, timeout).
    pub errors: u64,
}

#[derive(Debug)]
pub(crate) struct HealthCell {
    degraded: AtomicBool,
    share_permille: AtomicU32,
    peers: AtomicU32,
    writes: AtomicU64,
    conflicts: AtomicU64,
    errors: AtomicU64,
}

/// Admission state shared through Redis. See the [crate docs](crate).
///
/// Cheap to clone: clones share one connection and one task. The task
/// ends when the last clone is dropped.
#[derive(Clone)]
pub struct RedisStore {
    tx: mpsc::UnboundedSender<Op>,
    mirror: Arc<Shared>,
    health: Arc<HealthCell>,
    notes: Arc<notes::Notes>,
    demand: Arc<demand::Demand>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("health", &self.health())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store on the Redis at `url`, connecting on first use. An
    /// unreachable Redis is not an error here: the store paces on its own
    /// until Redis answers. Must be called inside a tokio runtime.
    pub fn new(url: &str, config: Config) -> Result<RedisStore, Error> {
        let client = redis::Client::open(url).map_err(|_| Error::Url)?;
        Self::start(client, None, config, false)
    }

    /// A store on the Redis at `url` that did not answer at start
    /// ([`connect`](Self::connect) failed): degraded from this moment —
    /// [`health`](Self::health) says so before any operation — and pacing
    /// at [`Config::fallback_share`], by default **one half** (how many
    /// processes share the key is unknown until Redis answers). Redis is
    /// tried again in the background, never holding up an operation, and
    /// used as soon as it answers. Must be called inside a tokio runtime.
    pub fn unreached(url: &str, config: Config) -> Result<RedisStore, Error> {
        let client = redis::Client::open(url).map_err(|_| Error::Url)?;
        Self::start(client, None, config, true)
    }

    /// A store on the Redis at `url`, after one successful round trip: an
    /// unreachable Redis is an error.
    pub async fn connect(url: &str, config: Config) -> Result<RedisStore, Error> {
        let client = redis::Client::open(url).map_err(|_| Error::Url)?;
        let mut conn =
            tokio::time::timeout(config.timeout, client.get_multiplexed_async_connection())
                .await
                .map_err(|_| Error::Timeout)?
                .map_err(Error::redis)?;
        let script = redis::Script::new(script::CAS);
        tokio::time::timeout(
            config.timeout,
            script.prepare_invoke().load_async(&mut conn),
        )
        .await
        .map_err(|_| Error::Timeout)?
        .map_err(Error::redis)?;
        Self::start(client, Some(conn), config, false)
    }

    /// A store on the Redis at `url` as a process starting on it wants one
    /// (`ratewise proxy --redis`, `ratewise run --redis`): connected
    /// ([`connect`](Self::connect)), or — when Redis does not answer —
    /// [`unreached`](Self::unreached), degraded and pacing at its share
    /// until it does, with why Redis did not answer (for the caller to
    /// say). A URL that is not a Redis URL ([`Error::Url`]) is an error:
    /// nothing can fix it by waiting.
    pub async fn open(url: &str, config: Config) -> Result<(RedisStore, Option<Error>), Error> {
        match Self::connect(url, config.clone()).await {
            Ok(store) => Ok((store, None)),
            Err(e @ (Error::Url | Error::NoRuntime)) => Err(e),
            Err(e) => Ok((Self::unreached(url, config)?, Some(e))),
        }
    }

    fn start(
        client: redis::Client,
        conn: Option<redis::aio::MultiplexedConnection>,
        config: Config,
        unreached: bool,
    ) -> Result<RedisStore, Error> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let config = config.sanitized();
        let (tx, rx) = mpsc::unbounded_channel();
        let mirror = Arc::new(Shared::new(Controller::new(config.admission.clone())));
        let share = if unreached {
            let share = actor::fallback_permille(config.fallback_share, None);
            // No scope exists yet: the time is not read.
            mirror.lock().set_share(share, NO_TIME);
            share
        } else {
            1000
        };
        let health = Arc::new(HealthCell {
            degraded: AtomicBool::new(unreached),
            share_permille: AtomicU32::new(share),
            peers: AtomicU32::new(1),
            writes: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        });
        let side = Arc::new(side::Side::new(client.clone(), config.timeout));
        let notes = Arc::new(notes::Notes::new(side.clone(), config.prefix.clone()));
        let proc_id = format!("{:016x}", fastrand::u64(..));
        let demand = Arc::new(demand::Demand::new(
            side,
            config.prefix.clone(),
            proc_id.clone(),
            config.demand_fresh,
        ));
        let actor = actor::Actor {
            rx,
            pending: VecDeque::new(),
            mirror: mirror.clone(),
            health: health.clone(),
            client,
            conn,
            script: redis::Script::new(script::CAS),
            clock: clock::ClockSync::new(config.clock),
            cfg: config,
            proc_id,
            versions: HashMap::new(),
            peers: HashMap::new(),
            // Unreached: the next operation tries Redis in the background.
            retry_at: unreached.then(tokio::time::Instant::now),
            probe: None,
            epochs: HashMap::new(),
            unwritten_stops: HashMap::new(),
            local_only: HashMap::new(),
            server_error_logged: None,
        };
        handle.spawn(actor.run());
        Ok(RedisStore {
            tx,
            mirror,
            health,
            notes,
            demand,
        })
    }

    /// This process's view: the controller the store runs, as of its last
    /// round trip. For status pages and metrics (levels, stops,
    /// outstanding reservations); write through the store, never here.
    pub fn local(&self) -> &Arc<Shared> {
        &self.mirror
    }

    /// How the store is doing.
    pub fn health(&self) -> Health {
        let h = &self.health;
        Health {
            degraded: h.degraded.load(Ordering::Relaxed),
            share_permille: h.share_permille.load(Ordering::Relaxed),
            peers: h.peers.load(Ordering::Relaxed),
            writes: h.writes.load(Ordering::Relaxed),
            conflicts: h.conflicts.load(Ordering::Relaxed),
            errors: h.errors.load(Ordering::Relaxed),
        }
    }

    /// Stops `key` for every process (an operator's stop): until `until`,
    /// or until [`resume`](Store::resume).
    pub async fn stop(&self, key: &str, cause: Cause, until: Option<SystemTime>, now: Now) {
        let req = Request::Stop {
            key: key.to_owned(),
            cause,
            until,
        };
        self.ask(req, now, Reply::Done, move |c, now| {
            let scope = c.scope_of(key, "default");
            c.stop(scope, cause, until, now);
        })
        .await
    }

    /// Forgets what `key` learned — stated limits, capacities, estimates —
    /// in the shared record, for every process: the key is learned again
    /// from its next answers ([`Controller::forget_beliefs`](ratewise_core::admit::Controller::forget_beliefs)).
    pub async fn forget(&self, key: &str, now: Now) {
        self.ask(
            Request::Forget(key.to_owned()),
            now,
            Reply::Done,
            move |c, now| {
                c.forget_beliefs(key, now);
            },
        )
        .await
    }

    /// Writes `note` beside `key`'s record for the other processes (see
    /// the `notes` module: the proxy keeps a stop's evidence there), for
    /// `ttl`. `false` when it was not written: longer than [`MAX_NOTE`],
    /// or Redis unavailable.
    pub async fn put_stop_note(&self, key: &str, note: &str, ttl: Duration) -> bool {
        if note.len() > MAX_NOTE || self.health().degraded {
            return false;
        }
        let name = self.mirror.lock().key_name(key).to_owned();
        self.notes.put(&name, note, ttl).await.is_ok()
    }

    /// The note beside `key`'s record, if any (at most [`MAX_NOTE`] bytes;
    /// `None` while Redis is unavailable).
    pub async fn stop_note(&self, key: &str) -> Option<String> {
        if self.health().degraded {
            return None;
        }
        let name = self.mirror.lock().key_name(key).to_owned();
        self.notes.get(&name).await.ok().flatten()
    }

    /// Waits until every operation queued before it has been applied (and
    /// written, when Redis is reachable): for a graceful shutdown, so that
    /// the last settles reach the others.
    pub async fn flush(&self) {
        self.ask(Request::Flush, NO_TIME, Reply::Done, |_, _| ())
            .await
    }

    /// Gives back this process's reservations held past their lease (their
    /// owner went away without ending them). The give-back is written with
    /// the key's next operation; should another process write first, the
    /// reservations stay charged at their estimates, as a crashed
    /// process's do. Returns how many.
    pub async fn expire(&self, now: Now) -> usize {
        self.ask(Request::Expire, now, Reply::Count, |c, now| c.expire(now))
            .await
    }

    /// Queues an operation; hands it back when the task is gone (its
    /// runtime shut down), for the caller to apply here.
    fn send(&self, req: Request, now: Now, reply: Reply) -> Option<Op> {
        match self.tx.send(Op { req, now, reply }) {
            Ok(()) => None,
            Err(mpsc::error::SendError(op)) => Some(op),
        }
    }

    /// Sends `req` and awaits its answer. When the task is gone (its
    /// runtime shut down) the answer is worked out here by `lost`, on this
    /// process's controller, so nothing waits forever.
    async fn ask<T>(
        &self,
        req: Request,
        now: Now,
        reply: impl FnOnce(oneshot::Sender<T>) -> Reply,
        lost: impl FnOnce(&mut Controller, Now) -> T,
    ) -> T {
        let (tx, rx) = oneshot::channel();
        if self.send(req, now, reply(tx)).is_none() {
            if let Ok(v) = rx.await {
                return v;
            }
        }
        lost(&mut self.mirror.lock(), now)
    }
}

/// An admission's answer on its way: dropped unread (the caller gave up
/// while it travelled), a reservation in it is given back.
struct Answer {
    rx: Option<oneshot::Receiver<Admission>>,
    tx: mpsc::UnboundedSender<Op>,
    now: Now,
}

impl Drop for Answer {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if let Ok(Admission::Go(reservation)) = rx.try_recv() {
                let _ = self.tx.send(actor::release(reservation, self.now));
            }
        }
    }
}

/// `now` for a request that does not read the time (resolving a target).
const NO_TIME: Now = Now::new(ratewise_core::Instant::ZERO, SystemTime::UNIX_EPOCH);

impl Store for RedisStore {
    fn target<'a>(&'a self, key: &'a str, model: &'a str) -> StoreFuture<'a, Target> {
        let req = Request::Target {
            key: key.to_owned(),
            model: model.to_owned(),
        };
        StoreFuture::new(self.ask(req, NO_TIME, Reply::Target, move |c, _| {
            c.target(key, model)
        }))
    }

    fn admit(&self, req: AdmitRequest, now: Now) -> StoreFuture<'_, Admission> {
        let (tx, rx) = oneshot::channel();
        if self
            .send(Request::Admit(req), now, Reply::Admission(tx))
            .is_some()
        {
            // The task is gone (its runtime shut down): answered here.
            return StoreFuture::ready(self.mirror.lock().admit(&req, now));
        }
        // Whoever drops the answer unread gives its reservation back.
        let mut answer = Answer {
            rx: Some(rx),
            tx: self.tx.clone(),
            now,
        };
        StoreFuture::new(async move {
            let a = match answer.rx.as_mut() {
                Some(rx) => rx.await.ok(),
                None => None,
            };
            // Read: nothing for the drop to give back.
            drop(answer.rx.take());
            match a {
                Some(a) => a,
                // The task ended with the request queued (its runtime shut
                // down): answered here.
                None => self.mirror.lock().admit(&req, now),
            }
        })
    }

    fn update(&self, update: Update, now: Now) -> StoreFuture<'_, Option<Applied>> {
        // Queued before the first await: applied even if the caller drops
        // the answer's future.
        let (tx, rx) = oneshot::channel();
        if let Some(op) = self.send(
            Request::Update(Box::new(update)),
            now,
            Reply::Decision(Some(tx)),
        ) {
            let out = op.req.apply(&mut self.mirror.lock(), now);
            return StoreFuture::ready(match out {
                ops::Outcome::Decision(d) => d,
                _ => None,
            });
        }
        StoreFuture::new(async move { rx.await.unwrap_or(None) })
    }

    fn update_detached(&self, update: Update, now: Now) {
        if let Some(op) = self.send(
            Request::Update(Box::new(update)),
            now,
            Reply::Decision(None),
        ) {
            let _ = op.req.apply(&mut self.mirror.lock(), now);
        }
    }

    /// Lifts the stop in the record, and deletes the stop's note.
    fn resume<'a>(&'a self, key: &'a str, now: Now) -> StoreFuture<'a, ()> {
        StoreFuture::new(async move {
            self.ask(
                Request::Resume(key.to_owned()),
                now,
                Reply::Done,
                move |c, now| c.resume(key, now),
            )
            .await;
            if !self.health().degraded {
                let name = self.mirror.lock().key_name(key).to_owned();
                let _ = self.notes.delete(&name).await;
            }
        })
    }

    fn snapshot(&self, scope: ScopeId, now: Now) -> StoreFuture<'_, Option<ScopeSnapshot>> {
        StoreFuture::new(self.ask(
            Request::Snapshot(scope),
            now,
            Reply::Snapshot,
            move |c, now| c.snapshot(scope, now),
        ))
    }

    /// Published beside the key's record (see the `demand` module); while
    /// Redis is unavailable nothing is published and no demand is foreign.
    fn demand(
        &self,
        scope: ScopeId,
        waiting: Option<u8>,
        _now: Now,
    ) -> StoreFuture<'_, Option<u8>> {
        let names = self
            .mirror
            .lock()
            .names_of(scope)
            .map(|(k, c)| (k.to_owned(), c.to_owned()));
        let Some((key, class)) = names else {
            return StoreFuture::ready(None);
        };
        if self.health().degraded {
            return StoreFuture::ready(None);
        }
        StoreFuture::new(async move {
            match self.demand.publish(&key, &class, waiting).await {
                Ok(top) => top,
                Err(e) => {
                    tracing::debug!(error = %e, "waiting demand not published");
                    None
                }
            }
        })
    }
}

/// The tag a key's Redis keys carry: its fingerprint
/// ([`key::tag`](ratewise_core::key::tag): the name itself,
/// lower-cased, when it already is one; else `fp-` and the first 16 hex
/// digits of its SHA-256), so every process, the proxy and the tower
/// layer file one key under one tag.
pub fn key_tag(name: &str) -> String {
    ratewise_core::key::tag(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_tagged_by_its_fingerprint_alone() {
        assert_eq!(key_tag("fp-0123456789abcdef"), "fp-0123456789abcdef");
        // Read back upper-cased, it is the same key's tag.
        assert_eq!(key_tag("fp-0123456789ABCDEF"), "fp-0123456789abcdef");
        let t = key_tag("team-a");
        assert!(t.starts_with("fp-") && t.len() == 19, "{t}");
        assert_ne!(t, key_tag("team-b"));
        assert!(!key_tag("sk-ant-secret").contains("secret"));
        // Not a fingerprint: fingerprinted, braces and all.
        assert_ne!(key_tag("fp-{x}"), "fp-{x}");
    }

    #[test]
    fn a_bad_url_is_refused_without_echoing_it() {
        let e = RedisStore::new("http://user:hunter2@host", Config::default()).unwrap_err();
        assert!(matches!(e, Error::Url));
        assert!(!e.to_string().contains("hunter2"));
    }
}
