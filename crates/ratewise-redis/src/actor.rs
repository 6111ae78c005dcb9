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
//!   at this process's share of the limits, and Redis is tried again at
//!   most once per [`Config::reconnect_every`]. A stop known before the
//!   outage stays; a stop learned during it is written back when Redis
//!   returns.
//!
//! Nothing but this task writes the controller, so a status page may read
//! it ([`RedisStore::local`](crate::RedisStore::local)) at any time.

use crate::clock::ClockSync;
use crate::ops::{Op, Outcome, Reply, Request};
use crate::script::{self, READ};
use crate::{Config, Error, HealthCell};
use ratewise_core::admit::{Admission, Controller, End, Shared, Update};
use ratewise_core::{Cause, Now};
use redis::aio::MultiplexedConnection;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant as TokioInstant;

/// Refused writes in a row before a batch is applied here and written
/// with the next one (a key so contended that every write loses).
const MAX_ATTEMPTS: u32 = 16;

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
    /// Processes seen on each key in the last call.
    pub peers: HashMap<String, u32>,
    /// While Redis is unreachable: when to try it again.
    pub retry_at: Option<TokioInstant>,
    /// A reconnection under way in the background.
    pub probe: Option<oneshot::Receiver<Option<MultiplexedConnection>>>,
    /// Keys not read back since an outage: their first refused write
    /// keeps the stops this process learned meanwhile.
    pub stale: HashSet<String>,
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
                None => self.apply_here(vec![op]),
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
        let nows: Vec<Now> = ops.iter().map(|o| self.clock.adjust(o.now)).collect();
        let now = nows
            .iter()
            .copied()
            .max_by_key(|n| n.instant)
            .unwrap_or(ops[0].now);
        if self.retry_at.is_some() && !self.try_return(&key, now).await {
            return self.apply_here(ops);
        }
        // A key this process has not read yet: its record first (one round
        // trip, once per key), so that an operation on a key it has not
        // used — a resume, say — acts on the shared state.
        let unread = !self.versions.contains_key(&key);
        if unread || !ops.iter().any(|o| o.req.writes()) {
            match self.call(&key, READ, "").await {
                Ok(r) => self.absorb(&key, r, now),
                Err(e) => {
                    self.lose(e, now);
                    return self.apply_here(ops);
                }
            }
        }
        if !ops.iter().any(|o| o.req.writes()) {
            return self.apply_here(ops);
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
                // Nothing to write (cannot happen for a known key).
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
                    self.versions.insert(key, r.version);
                    *self.mirror.lock() = trial;
                    return self.deliver(ops, outcomes);
                }
                Ok(r) => {
                    self.health.conflicts.fetch_add(1, Ordering::Relaxed);
                    if attempt >= 2 {
                        let us = fastrand::u64(0..200 * u64::from(attempt.min(8)));
                        tokio::time::sleep(std::time::Duration::from_micros(us)).await;
                    }
                    self.absorb(&key, r, now);
                }
                Err(e) => {
                    self.lose(e, now);
                    return self.apply_here(ops);
                }
            }
        }
        tracing::debug!(
            "a batch lost {MAX_ATTEMPTS} writes in a row; applied here, written with the next"
        );
        self.apply_here(ops);
    }

    /// Applies operations to the controller itself, with no round trip.
    fn apply_here(&mut self, ops: Vec<Op>) {
        let outcomes = {
            let mut c = self.mirror.lock();
            ops.iter()
                .map(|o| o.req.apply(&mut c, self.clock.adjust(o.now)))
                .collect()
        };
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
                        self.pending.push_front(Op {
                            req: Request::Update(Box::new(Update::ending(End::Release {
                                reservation,
                            }))),
                            now: op.now,
                            reply: Reply::Decision(None),
                        });
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
                    let _ = tx.send(s);
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

    /// A refused write's (or a read's) reply: its record becomes this
    /// process's view of the key.
    fn absorb(&mut self, key: &str, r: script::Reply, now: Now) {
        self.note_peers(key, r.peers);
        let before = self.versions.insert(key.to_owned(), r.version);
        let reset = before.is_some_and(|v| r.version < v);
        let keep_stop = reset || self.stale.remove(key);
        if reset {
            tracing::warn!(
                "the Redis record of a key went back to an older version (Redis restarted \
                 without its data?); this process's view of the key is written back"
            );
        }
        if r.unreadable {
            tracing::warn!("a key's Redis record could not be read; it is overwritten with this process's view");
        }
        let Some(rec) = r.record else {
            return;
        };
        let mut c = self.mirror.lock();
        let kept = if keep_stop {
            stop_of(&mut c, key, now)
        } else {
            None
        };
        c.import_key(&rec, now);
        if let Some((cause, until)) = kept {
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
        self.stale = self.versions.keys().cloned().collect();
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
            Err(_) => {
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
        match self.cfg.fallback_share {
            Some(f) if f.is_finite() && f > 0.0 => ((f.min(1.0) * 1000.0) as u32).max(1),
            _ => {
                let peers = self.peers.values().copied().max().unwrap_or(1).max(1);
                (1000 / peers).max(1)
            }
        }
    }

    /// One call of the script, with the connection made when there is
    /// none, each step bounded by [`Config::timeout`].
    async fn call(&mut self, key: &str, version: i64, blob: &str) -> Result<script::Reply, Error> {
        let mut conn = match &self.conn {
            Some(c) => c.clone(),
            None => {
                let c = tokio::time::timeout(
                    self.cfg.timeout,
                    self.client.get_multiplexed_async_connection(),
                )
                .await
                .map_err(|_| Error::Timeout)?
                .map_err(Error::Redis)?;
                self.conn = Some(c.clone());
                c
            }
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
            .arg(self.cfg.alive.as_millis() as u64);
        let value: redis::Value =
            tokio::time::timeout(self.cfg.timeout, inv.invoke_async(&mut conn))
                .await
                .map_err(|_| Error::Timeout)?
                .map_err(Error::Redis)?;
        let rtt = started.elapsed();
        let reply = script::parse(&value).ok_or(Error::Reply)?;
        self.clock.sample(sent, rtt, reply.redis_ns);
        Ok(reply)
    }
}

/// The stop in force on `key`, if any.
fn stop_of(c: &mut Controller, key: &str, now: Now) -> Option<(Cause, Option<SystemTime>)> {
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
