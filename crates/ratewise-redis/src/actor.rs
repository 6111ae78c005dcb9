//! The task that owns the store's connection and applies operations.
//!
//! Operations queue on a channel. The task takes the oldest, gathers every
//! queued operation on the same key (a *batch*: under load one round trip
//! carries many), applies them to a copy of this process's controller,
//! exports the key's record and writes it with the compare-and-set script.
//!
//! * Accepted: the copy becomes the controller and the answers go out.
//! * Refused (another process wrote first): the reply's fresh record is
//!   imported and the batch is applied again to it. Nothing was answered
//!   yet, so nobody saw the stale answers.
//! * Redis unreachable: the batch is applied here, the controller paces
//!   at this process's share of the limits, and Redis is tried again in the
//!   background at most once per [`Config::reconnect_every`].
//!
//! What this process did without writing it (while Redis was away, or when
//! a write could not be made) is kept apart until it is written:
//!
//! * a stop it learned is put back over every record it imports, and so
//!   reaches the others with its next write — a stop the others lifted
//!   meanwhile is not: only one learned here, unwritten, is kept;
//! * a take the shared record never held is *disowned* when a record is
//!   imported over it ([`StoreHooks::disown`](ratewise_core::admit::store_kit::StoreHooks::disown)): its end charges what it
//!   used and gives back nothing it never took from the others. When Redis
//!   lost the record (its epoch changed) every take outstanding here is
//!   disowned: the new record may not hold them, and charging one twice
//!   for a while is better than crediting one that was never taken.
//!
//! Nothing but this task writes the controller, so a status page may read
//! it ([`RedisStore::local`](crate::RedisStore::local)) at any time.

use crate::clock::ClockSync;
use crate::ops::{Op, Outcome, Reply, Request};
use crate::script::{self, READ};
use crate::{Config, Error, HealthCell};
use ratewise_core::admit::store_kit::StoreHooks;
use ratewise_core::admit::{Admission, Controller, End, ReservationId, Shared, Update};
use ratewise_core::{Cause, Now};
use redis::aio::MultiplexedConnection;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant as TokioInstant;

/// Refused writes in a row before a batch is applied here and written
/// with the next one (a key so contended that every write loses).
const MAX_ATTEMPTS: u32 = 16;

/// Most model classes a record read from Redis may hold.
const MAX_CLASSES: usize = 256;

/// At most one warning per this long for Redis's own errors.
const SERVER_ERROR_LOG_EVERY: Duration = Duration::from_secs(60);

/// A stop: its cause and end.
type StopState = (Cause, Option<SystemTime>);

pub(crate) struct Actor {
    pub rx: mpsc::UnboundedReceiver<Op>,
    pub pending: VecDeque<Op>,
    pub mirror: Arc<Shared>,
    pub health: Arc<HealthCell>,
    pub client: redis::Client,
    pub conn: Option<MultiplexedConnection>,
    pub script: redis::Script,
    pub cfg: Config,
    pub clock: ClockSync,
    pub proc_id: String,
    /// The record version this process's controller holds, per key.
    pub versions: HashMap<String, u64>,
    /// The epoch of each key's record as last read.
    pub epochs: HashMap<String, String>,
    /// Processes seen on each key in the last call.
    pub peers: HashMap<String, u32>,
    /// While Redis is unreachable: when to try it again.
    pub retry_at: Option<TokioInstant>,
    /// A reconnection under way in the background.
    pub probe: Option<oneshot::Receiver<Option<MultiplexedConnection>>>,
    /// Stops learned here and not yet written, per key.
    pub unwritten_stops: HashMap<String, StopState>,
    /// Reservations taken here and not yet written, per key.
    pub local_only: HashMap<String, Vec<ReservationId>>,
    /// When Redis's own error was last logged.
    pub server_error_logged: Option<TokioInstant>,
}

impl Actor {
    pub(crate) async fn run(mut self) {
        loop {
            let op = match self.pending.pop_front() {
                Some(op) => op,
                None => match self.rx.recv().await {
                    Some(op) => op,
                    None => return,
                },
            };
            while let Ok(o) = self.rx.try_recv() {
                self.pending.push_back(o);
            }
            let key = op.req.key(&self.mirror.lock());
            match key {
                None => self.apply_here(vec![op], None),
                Some(key) => {
                    let batch = self.gather(op, &key);
                    self.run_batch(key, batch).await;
                }
            }
        }
    }

    /// `first` and the queued operations on the same key, in order; the
    /// others keep their order in the queue.
    fn gather(&mut self, first: Op, key: &str) -> Vec<Op> {
        let mut batch = vec![first];
        let c = self.mirror.lock();
        let mut rest = VecDeque::with_capacity(self.pending.len());
        while let Some(op) = self.pending.pop_front() {
            if batch.len() < self.cfg.max_batch && op.req.key(&c).as_deref() == Some(key) {
                batch.push(op);
            } else {
                rest.push_back(op);
            }
        }
        drop(c);
        self.pending = rest;
        batch
    }

    async fn run_batch(&mut self, key: String, ops: Vec<Op>) {
        // Connected first, so that the clock offset is known before the
        // batch's times are read against it.
        if self.conn.is_none() && self.retry_at.is_none() {
            if let Err(e) = self.connect().await {
                self.failed(e, ops[0].now);
            }
        }
        let nows: Vec<Now> = ops.iter().map(|o| self.clock.adjust(o.now)).collect();
        let now = nows
            .iter()
            .copied()
            .max_by_key(|n| n.instant)
            .unwrap_or(ops[0].now);
        if self.retry_at.is_some() && !self.try_return(&key, now).await {
            return self.apply_here(ops, Some(&key));
        }
        // A key this process has not read yet: its record first (one round
        // trip, once per key), so that an operation on a key it has not
        // used — a resume, say — acts on the shared state.
        // A key this process forgot when idle (`Controller::forget_idle`)
        // is read again too: its version here is of state it dropped.
        let unread = !self.versions.contains_key(&key) || !self.mirror.lock().knows_key(&key);
        self.prune_forgotten();
        let writes = ops.iter().any(|o| o.req.writes()) || self.unwritten_stops.contains_key(&key);
        if unread || !writes {
            match self.call(&key, READ, "").await {
                Ok(r) => self.absorb(&key, r, now),
                Err(e) => {
                    self.failed(e, now);
                    return self.apply_here(ops, Some(&key));
                }
            }
        }
        if !writes {
            return self.apply_here(ops, None);
        }
        for attempt in 0..MAX_ATTEMPTS {
            let mut trial = self.mirror.lock().clone();
            let outcomes: Vec<Outcome> = ops
                .iter()
                .zip(&nows)
                .map(|(o, n)| o.req.apply(&mut trial, *n))
                .collect();
            let blob = match trial
                .export_key(&key, now)
                .map(|r| serde_json::to_string(&r))
            {
                Some(Ok(b)) => b,
                // No record to write: the key has no state here (a resume
                // of a key nobody used).
                _ => {
                    *self.mirror.lock() = trial;
                    return self.deliver(ops, outcomes);
                }
            };
            let version = self.versions.get(&key).copied().unwrap_or(0);
            match self.call(&key, version as i64, &blob).await {
                Ok(r) if r.written => {
                    self.health.writes.fetch_add(1, Ordering::Relaxed);
                    self.note_peers(&key, r.peers);
                    self.versions.insert(key.clone(), r.version);
                    self.epochs.insert(key.clone(), r.epoch);
                    // Everything this process held of the key is written.
                    self.unwritten_stops.remove(&key);
                    self.local_only.remove(&key);
                    *self.mirror.lock() = trial;
                    return self.deliver(ops, outcomes);
                }
                Ok(r) => {
                    self.health.conflicts.fetch_add(1, Ordering::Relaxed);
                    if attempt >= 2 {
                        // A herd of writers on one key: spread out.
                        let us = fastrand::u64(0..200 * u64::from(attempt.min(8)));
                        tokio::time::sleep(Duration::from_micros(us)).await;
                    }
                    self.absorb(&key, r, now);
                }
                Err(e) => {
                    self.failed(e, now);
                    return self.apply_here(ops, Some(&key));
                }
            }
        }
        tracing::debug!(
            "a batch lost {MAX_ATTEMPTS} writes in a row; applied here, written with the next"
        );
        self.apply_here(ops, Some(&key));
    }

    /// Drops what is kept per key for keys the controller forgot, once
    /// these maps hold twice as many keys as it does (amortised: one pass
    /// per doubling).
    fn prune_forgotten(&mut self) {
        let c = self.mirror.lock();
        if self.versions.len() <= 2 * c.key_count() + 1024 {
            return;
        }
        self.versions.retain(|k, _| c.knows_key(k));
        self.epochs.retain(|k, _| c.knows_key(k));
        self.peers.retain(|k, _| c.knows_key(k));
    }

    /// Applies operations to the controller itself, with no round trip.
    /// With `unwritten` (a keyed batch that could not be written), the
    /// stops it learned and the takes it made are kept apart until a write
    /// of the key carries them.
    fn apply_here(&mut self, ops: Vec<Op>, unwritten: Option<&str>) {
        let outcomes: Vec<Outcome> = {
            let mut c = self.mirror.lock();
            let before = unwritten.and_then(|k| stop_of(&mut c, k, ops[0].now));
            let outcomes = ops
                .iter()
                .map(|o| o.req.apply(&mut c, self.clock.adjust(o.now)))
                .collect();
            if let Some(key) = unwritten {
                let after = stop_of(&mut c, key, ops[0].now);
                if after.is_some() && after != before {
                    self.unwritten_stops
                        .insert(key.to_owned(), after.unwrap_or((Cause::Unknown, None)));
                }
            }
            outcomes
        };
        if let Some(key) = unwritten {
            let ids = outcomes.iter().filter_map(|o| match o {
                Outcome::Admission(Admission::Go(r)) => Some(r.id()),
                _ => None,
            });
            self.local_only
                .entry(key.to_owned())
                .or_default()
                .extend(ids);
        }
        self.deliver(ops, outcomes);
    }

    fn deliver(&mut self, ops: Vec<Op>, outcomes: Vec<Outcome>) {
        for (op, out) in ops.into_iter().zip(outcomes) {
            match (op.reply, out) {
                (Reply::Admission(tx), Outcome::Admission(a)) => {
                    let a = self.recheck(a, op.now);
                    if let Err(Admission::Go(reservation)) = tx.send(a) {
                        // The caller left while its admission travelled:
                        // the reservation goes straight back.
                        self.pending.push_front(release(reservation, op.now));
                    }
                }
                (Reply::Decision(tx), Outcome::Decision(d)) => {
                    if let Some(tx) = tx {
                        let _ = tx.send(d);
                    }
                }
                (Reply::Target(tx), Outcome::Target(t)) => {
                    let _ = tx.send(t);
                }
                (Reply::Count(tx), Outcome::Count(n)) => {
                    let _ = tx.send(n);
                }
                (Reply::Done(tx), Outcome::Done) => {
                    let _ = tx.send(());
                }
                (Reply::Snapshot(tx), Outcome::Snapshot(s)) => {
                    let _ = tx.send(*s);
                }
                // A request answers in its own kind (ops.rs).
                (_, _) => {}
            }
        }
    }

    /// A wait longer than the recheck interval is cut to it, so that a
    /// process waiting on a scope another process stopped (or paused, or
    /// resumed) learns it within the interval.
    fn recheck(&self, a: Admission, now: Now) -> Admission {
        match (a, self.cfg.recheck) {
            (Admission::Wait { until, reason }, Some(r)) => Admission::Wait {
                until: until.min(now.instant + r),
                reason,
            },
            (a, _) => a,
        }
    }

    /// A refused write's (or a read's) reply: its record, when it is news,
    /// becomes this process's view of the key.
    fn absorb(&mut self, key: &str, r: script::Reply, now: Now) {
        self.note_peers(key, r.peers);
        let reset = self.epochs.get(key).is_some_and(|e| *e != r.epoch);
        let held = self.versions.insert(key.to_owned(), r.version);
        if r.epoch.is_empty() {
            self.epochs.remove(key);
        } else {
            self.epochs.insert(key.to_owned(), r.epoch.clone());
        }
        if reset {
            tracing::warn!(
                "a key's Redis record was lost (Redis restarted without its data, or the \
                 key was deleted); this process's view of the key is written back"
            );
            // The record lost the stop this process holds: write it back.
            let stop = stop_of(&mut self.mirror.lock(), key, now);
            if let Some(stop) = stop {
                self.unwritten_stops.entry(key.to_owned()).or_insert(stop);
            }
        } else if held == Some(r.version) {
            // Nothing written since this process's copy: keep it (with
            // whatever it holds unwritten).
            return;
        }
        let rec = match r.record {
            Some(rec) if rec.key() == key && rec.classes() <= MAX_CLASSES => rec,
            Some(_) => {
                tracing::warn!("a key's Redis record belongs to another key or is too large; it is overwritten with this process's view");
                return;
            }
            None => {
                if r.unreadable {
                    tracing::warn!("a key's Redis record could not be read; it is overwritten with this process's view");
                }
                return;
            }
        };
        let mut c = self.mirror.lock();
        // Takes this record never held: made here and not written, or, when
        // the record was lost and another process wrote a new one, every
        // take outstanding here.
        let mut never_held = self.local_only.remove(key).unwrap_or_default();
        if reset {
            never_held.extend(c.outstanding_on(key));
        }
        for id in never_held {
            c.disown(id, now);
        }
        c.import_key(&rec, now);
        if let Some((cause, until)) = self.unwritten_stops.get(key).copied() {
            if stop_of(&mut c, key, now).is_none() {
                let scope = c.scope_of(key, "default");
                c.stop(scope, cause, until, now);
            }
        }
    }

    fn note_peers(&mut self, key: &str, peers: u32) {
        if self.peers.get(key) != Some(&peers) {
            self.peers.insert(key.to_owned(), peers);
        }
        let most = self.peers.values().copied().max().unwrap_or(1);
        self.health.peers.store(most, Ordering::Relaxed);
    }

    /// A round trip failed. Lost connections, timeouts and connections
    /// that could not be made (a wrong password too) mean Redis is
    /// unavailable: this process paces alone, at its share, until it
    /// returns. Redis's own errors on a live connection (a wrong type under
    /// the key, out of memory) are logged and the batch is applied here.
    fn failed(&mut self, e: Error, now: Now) {
        if e.is_transport() || self.conn.is_none() {
            self.lose(e, now);
        } else {
            self.health.errors.fetch_add(1, Ordering::Relaxed);
            let due = self
                .server_error_logged
                .is_none_or(|t| t.elapsed() >= SERVER_ERROR_LOG_EVERY);
            if due {
                self.server_error_logged = Some(TokioInstant::now());
                tracing::warn!(error = %e, "Redis refused the store's script; operations are applied on this process's view until it accepts");
            }
        }
    }

    /// Redis did not answer: pace here, at this process's share.
    fn lose(&mut self, e: Error, now: Now) {
        self.conn = None;
        self.health.errors.fetch_add(1, Ordering::Relaxed);
        self.retry_at = Some(TokioInstant::now() + self.cfg.reconnect_every);
        if self.health.degraded.swap(true, Ordering::Relaxed) {
            return;
        }
        let share = self.share_permille();
        self.mirror.lock().set_share(share, now);
        self.health.share_permille.store(share, Ordering::Relaxed);
        tracing::warn!(
            error = %e,
            share_percent = f64::from(share) / 10.0,
            "Redis unavailable: pacing on this process's share of the limits until it returns"
        );
    }

    /// While Redis is unreachable: `true` once it answers again (the key's
    /// record is read back, full limits again). The reconnection is tried
    /// in the background, at most once per [`Config::reconnect_every`], so
    /// a Redis that does not answer at all (no route, a dropped packet)
    /// never holds up the operations paced here meanwhile.
    async fn try_return(&mut self, key: &str, now: Now) -> bool {
        match self.probe.as_mut().map(|rx| rx.try_recv()) {
            None => {
                if self.retry_at.is_none_or(|t| TokioInstant::now() >= t) {
                    self.probe = Some(self.spawn_probe());
                }
                return false;
            }
            Some(Err(oneshot::error::TryRecvError::Empty)) => return false,
            Some(Ok(Some(conn))) => {
                self.probe = None;
                self.conn = Some(conn);
            }
            Some(_) => {
                self.probe = None;
                self.health.errors.fetch_add(1, Ordering::Relaxed);
                self.retry_at = Some(TokioInstant::now() + self.cfg.reconnect_every);
                return false;
            }
        }
        match self.call(key, READ, "").await {
            Ok(r) => {
                self.retry_at = None;
                self.health.degraded.store(false, Ordering::Relaxed);
                self.health.share_permille.store(1000, Ordering::Relaxed);
                self.mirror.lock().set_share(1000, now);
                self.absorb(key, r, now);
                tracing::warn!("Redis is back: limits are shared again");
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "Redis answered a ping but not the store's read");
                self.health.errors.fetch_add(1, Ordering::Relaxed);
                self.conn = None;
                self.retry_at = Some(TokioInstant::now() + self.cfg.reconnect_every);
                false
            }
        }
    }

    /// Connects and pings in a task of its own; the connection, if Redis
    /// answered, comes back on the channel.
    fn spawn_probe(&self) -> oneshot::Receiver<Option<MultiplexedConnection>> {
        let (tx, rx) = oneshot::channel();
        let client = self.client.clone();
        let timeout = self.cfg.timeout;
        tokio::spawn(async move {
            let conn = async {
                let mut c =
                    tokio::time::timeout(timeout, client.get_multiplexed_async_connection())
                        .await
                        .ok()?
                        .ok()?;
                let pong: redis::RedisResult<String> =
                    tokio::time::timeout(timeout, redis::cmd("PING").query_async(&mut c))
                        .await
                        .ok()?;
                pong.ok().map(|_| c)
            };
            let _ = tx.send(conn.await);
        });
        rx
    }

    fn share_permille(&self) -> u32 {
        fallback_permille(self.cfg.fallback_share, self.peers.values().copied().max())
    }

    /// A new connection, and Redis's clock read on it.
    async fn connect(&mut self) -> Result<MultiplexedConnection, Error> {
        let mut c = tokio::time::timeout(
            self.cfg.timeout,
            self.client.get_multiplexed_async_connection(),
        )
        .await
        .map_err(|_| Error::Timeout)?
        .map_err(Error::redis)?;
        let sent = SystemTime::now();
        let started = std::time::Instant::now();
        let time: (String, String) =
            tokio::time::timeout(self.cfg.timeout, redis::cmd("TIME").query_async(&mut c))
                .await
                .map_err(|_| Error::Timeout)?
                .map_err(Error::redis)?;
        if let (Ok(s), Ok(us)) = (time.0.parse::<i128>(), time.1.parse::<i128>()) {
            self.clock
                .sample(sent, started.elapsed(), s * 1_000_000_000 + us * 1_000);
        }
        self.conn = Some(c.clone());
        Ok(c)
    }

    /// One call of the script, with the connection made when there is
    /// none, each step bounded by [`Config::timeout`].
    async fn call(&mut self, key: &str, version: i64, blob: &str) -> Result<script::Reply, Error> {
        let mut conn = match &self.conn {
            Some(c) => c.clone(),
            None => self.connect().await?,
        };
        let tag = crate::key_tag(key);
        let record_key = format!("{}:{{{tag}}}:record", self.cfg.prefix);
        let procs_key = format!("{}:{{{tag}}}:procs", self.cfg.prefix);
        let sent = SystemTime::now();
        let started = std::time::Instant::now();
        let mut inv = self.script.key(record_key);
        inv.key(procs_key)
            .arg(version)
            .arg(blob)
            .arg(self.cfg.record_ttl.as_millis() as u64)
            .arg(&self.proc_id)
            .arg(self.cfg.alive.as_millis() as u64)
            .arg(format!("{:016x}", fastrand::u64(..)))
            .arg(self.epochs.get(key).map_or("", String::as_str));
        let value: redis::Value =
            tokio::time::timeout(self.cfg.timeout, inv.invoke_async(&mut conn))
                .await
                .map_err(|_| Error::Timeout)?
                .map_err(Error::redis)?;
        let rtt = started.elapsed();
        let reply = script::parse(&value).ok_or(Error::Reply)?;
        self.clock.sample(sent, rtt, reply.redis_ns);
        Ok(reply)
    }
}

/// The share paced at while Redis is away: the configured one, else one
/// over the most processes Redis last saw on a key (`peers`), else — Redis
/// never reached, or no key seen on it — one half: alone is the one guess
/// sure to be wrong when replicas exist, and a half keeps two of them
/// within the limit.
pub(crate) fn fallback_permille(configured: Option<f64>, peers: Option<u32>) -> u32 {
    match configured {
        Some(f) if f.is_finite() && f > 0.0 => ((f.min(1.0) * 1000.0) as u32).max(1),
        _ => match peers {
            Some(p) => (1000 / p.max(1)).max(1),
            None => 500,
        },
    }
}

/// The operation that gives a reservation back.
pub(crate) fn release(reservation: ratewise_core::admit::Reservation, now: Now) -> Op {
    Op {
        req: Request::Update(Box::new(Update::ending(End::Release { reservation }))),
        now,
        reply: Reply::Decision(None),
    }
}

/// The stop in force on `key`, if any.
fn stop_of(c: &mut Controller, key: &str, now: Now) -> Option<StopState> {
    let scopes: Vec<_> = c
        .scopes()
        .into_iter()
        .filter(|s| c.key_of(*s) == Some(key))
        .collect();
    scopes
        .into_iter()
        .filter_map(|s| c.snapshot(s, now))
        .find_map(|s| s.stopped.map(|st| (st.cause, st.until)))
}
