//! Fair admission within a process: per scope, the jobs that wait for
//! admission, ordered by the core's queue discipline
//! ([`ratewise_core::admit::fair`]), and the signals that hand them their
//! turn.
//!
//! A job joins its scope's queue (the `Target`'s scope: key × model class)
//! before it asks for admission, with its workload (priority level and
//! flow, from the request's [`Workload`](crate::Workload) extension) and
//! its place: its arrival instant, ties broken by a sequence number. A
//! retry joins again at its job's arrival, so it keeps its place ahead of
//! later arrivals of its (level, flow). The discipline says whose turn it
//! is: the higher level first (a lower level keeps its minimum share),
//! flows of a level by cost, oldest first within a (level, flow); with
//! every job of one level and one flow, that is arrival order (a FIFO).
//! Only the head asks; the others wait for their turn. The [`Ticket`] is
//! the job's place: dropping it (admitted, ended, or the call future
//! dropped) leaves the queue and, when that changes the head, wakes the
//! new head so it asks in turn (a chain). A job that joins and becomes the
//! head (an interactive job behind bulk ones) asks at once; the head it
//! displaced waits for its turn again once its admission wait ends.
//!
//! Admission is told to the discipline with the reservation's cost (its
//! dominant share of the scope's limits, read from the store's snapshot
//! every [`LIMITS_EVERY`] admissions), and the reservation's settlement
//! corrects the flow by what it used (see `crate::wake`).
//!
//! Capacity coming back (a settle, a release, a resolved unknown outcome,
//! a resume, a stop) wakes only the heads ([`Queues::wake_heads`]), not
//! every waiter: a settle that frees room for one job wakes about one job
//! (it is admitted, leaves, and wakes the next, which asks and, without
//! room, waits). Heads of every scope are woken, not only the settled
//! one's: key-wide budgets (spend, the key's stop) are shared by the
//! key's classes, and heads are few. A stop ends the whole queue through
//! the same chain: each head asks, is told the key is stopped, ends and
//! hands the turn on, with no wait in between.
//!
//! The head still wakes at the instant admission computed (its `until`);
//! a waiter that is not the head wakes at its admission deadline at the
//! latest and then asks out of turn, so a queue never holds a job past its
//! deadline (the machine ends it, or admits it if there is room), whatever
//! its level.
//!
//! **A large job at the head waits.** Smaller jobs behind it do not pass,
//! even when the bucket has room for them: letting them pass is what
//! starves large jobs (there is always a smaller one that fits), and the
//! head's own wait is bounded — the controller computes when the bucket
//! refills enough for it, and its deadline bounds the rest. The cost is
//! some idle room while a large head waits for its refill.

use event_listener::{Event, EventListener};
use ratewise_core::admit::fair::{Charged, Cost, Discipline, Levels, Place, Workload};
use ratewise_core::admit::{Amounts, Limits, ReservationId, ScopeId, WaitReason};
use ratewise_core::{Instant, Usage};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Admissions between two reads of a scope's limits (the cost of a job is
/// its share of them): limits change rarely (a header, a 429), and a read
/// is a store call, a round trip for a store shared between processes.
pub(crate) const LIMITS_EVERY: u32 = 32;

/// Admitted reservations followed to their settlement at most: past it,
/// those followed are forgotten (their flows keep the charges made at
/// admission), so reservations that never settle here (a lease that
/// expired) cannot grow the map.
const MAX_FOLLOWED: usize = 16_384;

/// Empty scopes kept (with their flows' standing) at most: past it, the
/// empty ones are forgotten.
const MAX_IDLE_SCOPES: usize = 256;

/// How often a waiting head publishes this process's demand and reads the
/// others' (a store shared between processes: [`Store::demand`]); well
/// within [`DEMAND_FRESH`], so a live process's demand never lapses.
///
/// [`Store::demand`]: ratewise_core::admit::Store::demand
/// [`DEMAND_FRESH`]: ratewise_core::admit::DEMAND_FRESH
pub(crate) const DEMAND_EVERY: Duration = Duration::from_millis(500);

/// How long a head that yields to another process's higher demand waits
/// before it looks again (a local signal wakes it sooner).
pub(crate) const YIELD_RECHECK: Duration = Duration::from_millis(250);

/// One scope's waiting jobs: the discipline that orders them and the
/// signal of each.
struct Scope {
    discipline: Discipline,
    signals: rustc_hash::FxHashMap<Place, Arc<Event>>,
    /// The scope's limits as last read, and admissions since.
    limits: Option<Limits>,
    since_limits: u32,
    /// Demand across processes: what this process last published (the
    /// rank of its highest waiting level), when, and the highest the
    /// others had published then.
    published: Option<u8>,
    published_at: Option<Instant>,
    foreign: Option<u8>,
    /// What the head waits for on admission, and until when.
    head_wait: Option<(WaitReason, Instant)>,
    /// The latest admission waits per (level, flow).
    waits: crate::queue_status::Waits,
    /// What each (level, flow) was admitted lately, per limit.
    shares: crate::queue_status::Shares,
}

impl Scope {
    /// The rank of the highest level waiting here.
    fn top_rank(&self) -> Option<u8> {
        self.discipline
            .top_waiting()
            .and_then(|l| u8::try_from(l.index()).ok())
    }
}

impl Scope {
    fn head_signal(&self) -> Option<Arc<Event>> {
        self.discipline
            .head()
            .and_then(|h| self.signals.get(&h).cloned())
    }
}

/// A reservation followed to its settlement: where its flow was charged,
/// against which limits.
struct Followed {
    scope: ScopeId,
    charged: Charged,
    limits: Limits,
    /// What was reserved (the settlement corrects the shares of each
    /// limit by what was used instead).
    amounts: Amounts,
}

#[derive(Default)]
struct Waiting {
    scopes: rustc_hash::FxHashMap<ScopeId, Scope>,
    followed: rustc_hash::FxHashMap<ReservationId, Followed>,
}

/// The waiting queues of every scope of one layer (and of the layers
/// derived from it).
pub(crate) struct Queues {
    levels: Levels,
    waiting: Mutex<Waiting>,
    seq: AtomicU64,
}

impl Default for Queues {
    fn default() -> Self {
        Queues::new(Levels::default())
    }
}

impl Queues {
    /// Queues whose jobs are ordered over `levels`.
    pub fn new(levels: Levels) -> Self {
        Queues {
            levels,
            waiting: Mutex::new(Waiting::default()),
            seq: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The levels jobs are ordered over.
    pub fn levels(&self) -> &Levels {
        &self.levels
    }

    /// A place for a job that arrived at `arrived`, to keep across its
    /// retries (the sequence number breaks ties among equal arrivals).
    pub fn place(&self, arrived: Instant) -> Place {
        Place {
            arrived,
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Joins `scope`'s queue at `place` as `workload`.
    pub fn join(self: &Arc<Self>, scope: ScopeId, place: Place, workload: &Workload) -> Ticket {
        let signal = Arc::new(Event::new());
        let displaced = {
            let mut w = self.lock();
            if w.scopes.len() >= MAX_IDLE_SCOPES && !w.scopes.contains_key(&scope) {
                w.scopes.retain(|_, s| !s.discipline.is_empty());
            }
            let s = w.scopes.entry(scope).or_insert_with(|| Scope {
                discipline: Discipline::new(self.levels.clone()),
                signals: Default::default(),
                limits: None,
                since_limits: 0,
                published: None,
                published_at: None,
                foreign: None,
                head_wait: None,
                waits: Default::default(),
                shares: Default::default(),
            });
            let before = s.discipline.head();
            s.discipline.join(place, workload);
            s.signals.insert(place, signal.clone());
            let after = s.discipline.head();
            // The joiner sees its own turn; another job whose turn a join
            // made (a flow's floor raised by its latest job) is told.
            (after != before && after != Some(place))
                .then(|| s.head_signal())
                .flatten()
        };
        if let Some(next) = displaced {
            next.notify(usize::MAX);
        }
        Ticket {
            queues: self.clone(),
            scope,
            place,
            signal,
        }
    }

    /// Wakes the head of every scope's queue: capacity came back (or the
    /// key stopped), and the head asks again.
    pub fn wake_heads(&self) {
        let heads: Vec<Arc<Event>> = self
            .lock()
            .scopes
            .values()
            .filter_map(Scope::head_signal)
            .collect();
        for h in heads {
            h.notify(usize::MAX);
        }
    }

    /// Whether `scope`'s limits are due to be read before its next
    /// admission is charged (never read, or [`LIMITS_EVERY`] admissions
    /// ago).
    pub fn limits_due(&self, scope: ScopeId) -> bool {
        self.lock()
            .scopes
            .get(&scope)
            .is_some_and(|s| s.limits.is_none() || s.since_limits >= LIMITS_EVERY)
    }

    /// `scope`'s limits, as just read from the store.
    pub fn set_limits(&self, scope: ScopeId, limits: Limits) {
        if let Some(s) = self.lock().scopes.get_mut(&scope) {
            s.limits = Some(limits);
            s.since_limits = 0;
        }
    }

    /// A reservation followed since its admission ended: its flow is
    /// corrected from the cost charged to the cost of `usage` (`None`:
    /// released, never sent — one request's cost). The heads are woken
    /// by the caller (a reservation's end gives capacity back).
    pub fn settled(&self, id: ReservationId, usage: Option<&Usage>, now: Instant) {
        let mut w = self.lock();
        let Some(f) = w.followed.remove(&id) else {
            return;
        };
        let used = usage.copied().unwrap_or_default();
        let actual = Cost::of_usage(&used, &f.limits);
        if let Some(s) = w.scopes.get_mut(&f.scope) {
            s.discipline.settled(&f.charged, actual, now);
            // Released (never sent): nothing of it counts, not even the
            // request.
            let requests = u64::from(usage.is_some());
            let was = crate::queue_status::amounts_of(
                f.amounts.requests,
                f.amounts.input,
                f.amounts.output,
            );
            let is = crate::queue_status::amounts_of(
                requests,
                used.rate_limited_input(),
                used.output_tokens,
            );
            let diff: [f64; 4] = std::array::from_fn(|i| is[i] - was[i]);
            let level = f.charged.level().index();
            s.shares.add(level, f.charged.flow(), diff, &f.limits, now);
        }
    }

    /// This process's demand on `scope` (the rank of its highest waiting
    /// level) when it is due to be published: it changed since it was,
    /// or [`DEMAND_EVERY`] passed while something waits. `None`: not due.
    pub fn demand_due(&self, scope: ScopeId, now: Instant) -> Option<Option<u8>> {
        let w = self.lock();
        let s = w.scopes.get(&scope)?;
        let top = s.top_rank();
        let stale = s
            .published_at
            .is_none_or(|at| now.saturating_duration_since(at) >= DEMAND_EVERY);
        (top != s.published || (top.is_some() && stale)).then_some(top)
    }

    /// `published` was published at `now`, and the others' highest
    /// demand read back.
    pub fn demand_published(
        &self,
        scope: ScopeId,
        published: Option<u8>,
        foreign: Option<u8>,
        now: Instant,
    ) {
        if let Some(s) = self.lock().scopes.get_mut(&scope) {
            s.published = published;
            s.published_at = Some(now);
            s.foreign = foreign;
        }
    }

    /// The head of `scope`'s queue waits on admission for `reason` until
    /// `until` (for [`status`](Self::status)).
    pub fn head_waits(&self, scope: ScopeId, reason: WaitReason, until: Instant) {
        if let Some(s) = self.lock().scopes.get_mut(&scope) {
            s.head_wait = Some((reason, until));
        }
    }

    /// Every scope with jobs waiting or admitted lately, as a status page
    /// shows it (see [`crate::QueueStatus`]).
    pub fn status(&self, now: Instant) -> Vec<crate::QueueStatus> {
        use crate::{FlowStatus, LevelStatus, QueueStatus};
        let w = self.lock();
        let mut out: Vec<QueueStatus> = w
            .scopes
            .iter()
            .map(|(scope, s)| {
                let levels = s
                    .discipline
                    .view(now)
                    .into_iter()
                    .map(|l| {
                        let i = l.level.index();
                        let (wait_p50, wait_p95) = s.waits.quantiles(i, None);
                        LevelStatus {
                            level: self.levels.name(l.level).to_owned(),
                            waiting: l.waiting,
                            used_of_limit: l.used_of_limit,
                            used_of_each_limit: s.shares.of(i, None, now),
                            wait_p50,
                            wait_p95,
                            flows: l
                                .flows
                                .into_iter()
                                .map(|f| {
                                    let (wait_p50, wait_p95) = s.waits.quantiles(i, Some(&f.flow));
                                    FlowStatus {
                                        used_of_each_limit: s.shares.of(i, Some(&f.flow), now),
                                        oldest_wait: f
                                            .oldest
                                            .map(|a| now.saturating_duration_since(a)),
                                        flow: f.flow,
                                        waiting: f.waiting,
                                        weight: f.weight,
                                        used_of_limit: f.used_of_limit,
                                        wait_p50,
                                        wait_p95,
                                    }
                                })
                                .collect(),
                        }
                    })
                    .collect();
                QueueStatus {
                    scope: *scope,
                    head_waits: s
                        .head_wait
                        .filter(|(_, until)| *until > now && !s.discipline.is_empty())
                        .map(|(r, until)| (r, until.saturating_duration_since(now))),
                    levels,
                }
            })
            .collect();
        out.sort_by_key(|q| q.scope);
        out
    }

    /// Jobs waiting in `scope`'s queue.
    #[cfg(test)]
    pub fn len(&self, scope: ScopeId) -> usize {
        self.lock()
            .scopes
            .get(&scope)
            .map_or(0, |s| s.discipline.len())
    }

    /// Reservations followed to their settlement.
    #[cfg(test)]
    pub fn followed(&self) -> usize {
        self.lock().followed.len()
    }
}

/// A job's place in its scope's queue; dropping it leaves the queue and
/// hands the turn on.
pub(crate) struct Ticket {
    queues: Arc<Queues>,
    scope: ScopeId,
    place: Place,
    signal: Arc<Event>,
}

impl Ticket {
    /// Whether this job is the head of its queue (its turn to ask).
    pub fn is_head(&self) -> bool {
        self.queues
            .lock()
            .scopes
            .get(&self.scope)
            .is_some_and(|s| s.discipline.is_head(self.place))
    }

    /// About how many jobs wait ahead of this one in its queue (exact
    /// when every job has one level and flow; see
    /// [`Discipline::ahead`]).
    pub fn ahead(&self) -> usize {
        self.queues
            .lock()
            .scopes
            .get(&self.scope)
            .map_or(0, |s| s.discipline.ahead(self.place))
    }

    /// Whether this job, at the head, leaves the tokens to another
    /// process: one sharing the scope published a higher level waiting
    /// (as last read), and this job's level has had at least its minimum
    /// share of the limit lately — a level under it keeps its share
    /// whoever else waits.
    pub fn yields(&self, now: Instant) -> bool {
        let w = self.queues.lock();
        let Some(s) = w.scopes.get(&self.scope) else {
            return false;
        };
        let Some(level) = s.discipline.level_of(self.place) else {
            return false;
        };
        let higher_elsewhere = s.foreign.is_some_and(|f| usize::from(f) < level.index());
        higher_elsewhere
            && s.discipline.used_of_limit(level, now) >= self.queues.levels.min_share(level)
    }

    /// A listener for this job's next signal (its turn, or capacity back
    /// while it is the head). Listen before checking, then await.
    pub fn listen(&self) -> EventListener {
        self.signal.listen()
    }

    /// The job was admitted at `now` with a reservation of `amounts`: it
    /// leaves the queue, its flow is charged the reservation's cost, and
    /// the reservation (`id`, when known) is followed to its settlement.
    /// The next head is woken.
    pub fn admitted(self, amounts: Amounts, id: Option<ReservationId>, now: Instant) {
        let next = {
            let mut w = self.queues.lock();
            let Waiting { scopes, followed } = &mut *w;
            let Some(s) = scopes.get_mut(&self.scope) else {
                return;
            };
            s.signals.remove(&self.place);
            s.head_wait = None;
            let limits = s.limits.unwrap_or(Limits::NONE);
            if let Some((level, flow)) = s.discipline.workload_of(self.place) {
                let waited = now.saturating_duration_since(self.place.arrived);
                s.waits.record(level.index(), flow, waited);
                let reserved = crate::queue_status::amounts_of(
                    amounts.requests,
                    amounts.input,
                    amounts.output,
                );
                s.shares.add(level.index(), flow, reserved, &limits, now);
            }
            let before = s.discipline.head();
            s.since_limits = s.since_limits.saturating_add(1);
            let cost = Cost::dominant(&amounts, &limits);
            let charged = s.discipline.admitted(self.place, cost, now);
            if let (Some(charged), Some(id)) = (charged, id) {
                if followed.len() >= MAX_FOLLOWED {
                    // Reservations that ended out of sight (a lease run
                    // out): forgotten, their flows keep their charges.
                    followed.clear();
                }
                followed.insert(
                    id,
                    Followed {
                        scope: self.scope,
                        charged,
                        limits,
                        amounts,
                    },
                );
            }
            let next = s.discipline.head();
            (next != before).then(|| s.head_signal()).flatten()
        };
        // The drop that follows finds the place gone: nothing more.
        if let Some(next) = next {
            next.notify(usize::MAX);
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let next = {
            let mut w = self.queues.lock();
            let Some(s) = w.scopes.get_mut(&self.scope) else {
                return;
            };
            s.signals.remove(&self.place);
            let before = s.discipline.head();
            if !s.discipline.leave(self.place) {
                return;
            }
            let next = s.discipline.head();
            (next != before).then(|| s.head_signal()).flatten()
        };
        if let Some(next) = next {
            next.notify(usize::MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn scope() -> ScopeId {
        let mut c = ratewise_core::admit::Controller::new(ratewise_core::admit::Config::default());
        c.target("k", "m").scope
    }

    /// One level, one flow: the queue is a FIFO.
    fn w() -> Workload {
        Workload::new(Levels::default().default_level(), "k")
    }

    #[test]
    fn oldest_first_and_leaving_hands_the_turn_on() {
        let q = Arc::new(Queues::default());
        let s = scope();
        let t0 = Instant::ZERO;
        let late = q.join(s, q.place(t0 + Duration::from_secs(2)), &w());
        let early = q.join(s, q.place(t0 + Duration::from_secs(1)), &w());
        assert!(early.is_head() && !late.is_head());
        let turn = late.listen();
        drop(early);
        assert!(late.is_head());
        // The next head was signalled.
        assert!(futures::FutureExt::now_or_never(turn).is_some());
        drop(late);
        assert_eq!(q.len(s), 0, "an empty scope is forgotten");
    }

    #[test]
    fn equal_arrivals_keep_their_joining_order() {
        let q = Arc::new(Queues::default());
        let s = scope();
        let a = q.join(s, q.place(Instant::ZERO), &w());
        let b = q.join(s, q.place(Instant::ZERO), &w());
        assert!(a.is_head() && !b.is_head());
        // A dropped waiter behind the head hands nothing on.
        drop(b);
        assert!(a.is_head());
    }

    #[test]
    fn ahead_counts_the_jobs_before_not_behind() {
        let q = Arc::new(Queues::default());
        let s = scope();
        let at = |ms: u64| Instant::from_millis(ms);
        let a = q.join(s, q.place(at(10)), &w());
        let b = q.join(s, q.place(at(20)), &w());
        let late = q.join(s, q.place(at(30)), &w());
        assert_eq!(late.ahead(), 2);
        // A retry of an older job has none ahead: it keeps its place.
        let old = q.join(s, q.place(at(5)), &w());
        assert_eq!(old.ahead(), 0);
        assert!(old.is_head());
        drop((a, b, late, old));
        assert_eq!(q.len(s), 0);
    }

    fn levels() -> Levels {
        Levels::default()
    }

    #[test]
    fn an_interactive_job_behind_twenty_bulk_jobs_is_admitted_next() {
        let q = Arc::new(Queues::default());
        let s = scope();
        let bulk = Workload::new(levels().level("bulk").unwrap(), "batch");
        let waiting: Vec<Ticket> = (0..20)
            .map(|i| q.join(s, q.place(Instant::from_millis(i)), &bulk))
            .collect();
        assert!(waiting[0].is_head());
        let interactive = Workload::new(levels().level("interactive").unwrap(), "chat");
        let chat = q.join(s, q.place(Instant::from_millis(100)), &interactive);
        assert!(chat.is_head(), "the interactive job's turn comes first");
        assert!(!waiting[0].is_head());
        assert_eq!(chat.ahead(), 0);
        assert_eq!(waiting[0].ahead(), 1);
        let turn = waiting[0].listen();
        let amounts = Amounts {
            requests: 1,
            input: 100,
            output: 100,
        };
        chat.admitted(amounts, None, Instant::from_millis(100));
        // The bulk queue resumes in arrival order, its head woken.
        assert!(waiting[0].is_head());
        assert!(futures::FutureExt::now_or_never(turn).is_some());
        drop(waiting);
        assert_eq!(q.len(s), 0);
    }

    #[test]
    fn admissions_of_two_flows_weighted_two_to_one_follow_cost_two_to_one() {
        let q = Arc::new(Queues::default());
        let s = scope();
        let bulk = levels().level("bulk").unwrap();
        // `a` weighs 2 and sends 1 000-token jobs; `b` weighs 1 and sends
        // 3 000-token jobs: tokens (the cost), not requests, go 2:1.
        let flows = [
            (Workload::new(bulk, "a").weight(2), 1_000u64),
            (Workload::new(bulk, "b").weight(1), 3_000u64),
        ];
        let mut waiting: Vec<(usize, Ticket)> = Vec::new();
        let mut t = 0u64;
        for (i, (w, _)) in flows.iter().enumerate() {
            for _ in 0..3 {
                t += 1;
                waiting.push((i, q.join(s, q.place(Instant::from_millis(t)), w)));
            }
        }
        assert!(q.limits_due(s));
        q.set_limits(s, Limits::per_minute().tokens(100_000));
        assert!(!q.limits_due(s));
        let mut tokens = [0u64; 2];
        for _ in 0..300 {
            let k = waiting.iter().position(|(_, t)| t.is_head()).unwrap();
            let (i, ticket) = waiting.swap_remove(k);
            let amounts = Amounts {
                requests: 1,
                input: flows[i].1,
                output: 0,
            };
            ticket.admitted(amounts, None, Instant::from_millis(t));
            tokens[i] += flows[i].1;
            t += 1;
            waiting.push((i, q.join(s, q.place(Instant::from_millis(t)), &flows[i].0)));
        }
        let ratio = tokens[0] as f64 / tokens[1] as f64;
        assert!((1.8..=2.2).contains(&ratio), "{tokens:?}");
        // The limits are read again after LIMITS_EVERY admissions.
        assert!(q.limits_due(s));
    }

    #[test]
    fn a_settled_reservation_corrects_its_flow() {
        use ratewise_core::admit::{Admission, AdmitRequest, Config, Controller};
        let mut c = Controller::new(Config::default());
        let target = c.target("k", "m");
        let s = target.scope;
        let now = ratewise_core::Now::new(Instant::ZERO, std::time::SystemTime::UNIX_EPOCH);
        let Admission::Go(res) = c.admit(&AdmitRequest::new(target), now) else {
            panic!("no limits: admitted")
        };
        let q = Arc::new(Queues::default());
        let def = levels().default_level();
        let a1 = q.join(
            s,
            q.place(Instant::from_millis(1)),
            &Workload::new(def, "a"),
        );
        let b1 = q.join(
            s,
            q.place(Instant::from_millis(2)),
            &Workload::new(def, "b"),
        );
        let a2 = q.join(
            s,
            q.place(Instant::from_millis(3)),
            &Workload::new(def, "a"),
        );
        let b2 = q.join(
            s,
            q.place(Instant::from_millis(4)),
            &Workload::new(def, "b"),
        );
        let big = Amounts {
            requests: 1,
            input: 0,
            output: 4_000,
        };
        // `a` reserves 4 000 output tokens (its max_tokens), `b` 1 000.
        a1.admitted(big, Some(res.id()), Instant::ZERO);
        assert_eq!(q.followed(), 1);
        b1.admitted(
            Amounts {
                output: 1_000,
                ..big
            },
            None,
            Instant::ZERO,
        );
        assert!(b2.is_head(), "a used more so far: b's turn");
        // `a`'s answer was short: 10 tokens.
        let usage = Usage {
            output_tokens: 10,
            ..Usage::default()
        };
        q.settled(res.id(), Some(&usage), Instant::ZERO);
        assert_eq!(q.followed(), 0);
        assert!(a2.is_head(), "corrected, a used less: its turn");
        c.settle(res, &usage, now);
        drop((a2, b2));
    }

    #[test]
    fn a_join_that_makes_another_job_the_head_wakes_it() {
        let q = Arc::new(Queues::default());
        let s = scope();
        let def = levels().default_level();
        let at = |ms| Instant::from_millis(ms);
        let a1 = q.join(s, q.place(at(1)), &Workload::new(def, "a"));
        let b1 = q.join(s, q.place(at(2)), &Workload::new(def, "b"));
        let a2 = q.join(s, q.place(at(3)), &Workload::new(def, "a"));
        let one = Amounts {
            requests: 1,
            input: 0,
            output: 0,
        };
        a1.admitted(one, None, at(4));
        assert!(b1.is_head());
        b1.admitted(one, None, at(5));
        let b2 = q.join(s, q.place(at(6)), &Workload::new(def, "b"));
        // `a` and `b` are even; `a2` is older: its turn.
        assert!(a2.is_head());
        // `b`'s latest job gives it a floor of 90 % (it had 50 %): `b2`'s
        // turn now, and it is told.
        let turn = b2.listen();
        let b3 = q.join(s, q.place(at(7)), &Workload::new(def, "b").floor(0.9));
        assert!(b2.is_head(), "b is below its floor now");
        assert!(futures::FutureExt::now_or_never(turn).is_some());
        drop((a2, b2, b3));
    }
}
