//! The [`Controller`]: buckets, ramp, pauses, stops and budgets for many
//! (key, model class) scopes, composed behind one `&mut self` API.

use super::bucket::{capacity_for, Bucket, CreditMark, ServerView};
use super::estimate::{input_from_bytes, MaxTokens, OutputEstimator};
use super::limits::{headers_describe, index, Burst, Limits, DIMENSIONS};
use super::model_class::ModelClasses;
use super::profile::{Profile, Rounding};
use super::ramp::{Ramp, RampConfig};
use super::reservation::{Amounts, Exit, Ledger, Removed, Reservation, ReservationId, Sent, Slab};
use super::retry_budget::{RetryBudget, RetryBudgetConfig};
use super::spend::{Price, PriceTable, SpendBudget, SpendCheck, SpendConfig, SpendTotals};
use super::stop::Stop;
use super::table::Table;
use super::ScopeId;
use crate::classify::Classification;
use crate::decision::{Action, Decision};
use crate::parse::ratelimit::{RateLimitSnapshot, Reset};
use crate::time::{Instant, Now};
use crate::usage::Usage;
use crate::vocab::{Cause, Dimension, GiveUpReason, Provider, Scope as CScope};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

mod forget;

/// Everything the controller is configured with.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// Limits of every class without its own entry (default: none).
    pub limits: Limits,
    /// Limits per model class (overrides `limits`).
    pub class_limits: Vec<(String, Limits)>,
    /// Limits per key (or key group), for every class or one: the most
    /// specific entry wins — (key, class), then key, then `class_limits`,
    /// then `limits`. An API key's limits belong to its organisation and
    /// tier, so two keys of one process may well differ.
    pub key_limits: Vec<KeyLimits>,
    /// Keys that share one organisation's limits: (key, group). Grouped
    /// keys share one set of buckets per class, their pauses and their
    /// stops, under the group's name (`key_limits` then names the group).
    pub key_groups: Vec<(String, String)>,
    /// How much of a minute's refill a bucket may hold.
    pub burst: Burst,
    /// Model name → bucket class.
    pub classes: ModelClasses,
    /// Ramp-up.
    pub ramp: RampConfig,
    /// Queue-wide retry budget.
    pub retry_budget: RetryBudgetConfig,
    /// Queue-wide spend budget (none by default).
    pub spend: Option<SpendConfig>,
    /// Prices for the money budget.
    pub prices: PriceTable,
    /// Output tokens to reserve.
    pub output: Arc<dyn OutputEstimator>,
    /// A reservation neither settled, released nor held for this long is
    /// released by [`Controller::expire`] (default 10 min). Its owner's
    /// end within one more lease is still taken (a settle charges its
    /// usage); a later one is refused and counted in
    /// [`Ledger::refused_ends`].
    pub lease: Duration,
    /// Up to this much is added to a pause for each waiting job, so
    /// released jobs do not stampede (default 500 ms).
    pub pause_jitter: Duration,
    /// Learn from surprises (default on): a 429 on a dimension the model
    /// believed had room lowers the credit to what the 429 proves and grows
    /// a margin kept free in that bucket ([`Bucket::surprise`]). Off, a
    /// 429 teaches only through its headers and its hint (the behaviour
    /// before margins existed; for comparisons), and no capacity is taken
    /// from a sibling bucket's horizon: a hypothesis (a rounded `remaining`
    /// leaves a capacity bracketed; inside the bracket it is sized at the
    /// refill horizon its exactly read siblings show) that only surprises
    /// can correct.
    pub learn_margins: bool,
    /// Seed of the jitter source: `None` (the default) draws one from the
    /// operating system's entropy when the controller is built, so replicas
    /// of a fleet spread their jitter; a fixed seed makes every decision
    /// reproducible (tests, the simulator).
    pub seed: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            limits: Limits::NONE,
            class_limits: Vec::new(),
            key_limits: Vec::new(),
            key_groups: Vec::new(),
            burst: Burst::default(),
            classes: ModelClasses::default(),
            ramp: RampConfig::default(),
            retry_budget: RetryBudgetConfig::default(),
            spend: None,
            prices: PriceTable::default(),
            output: Arc::new(MaxTokens::default()),
            lease: Duration::from_secs(600),
            pause_jitter: Duration::from_millis(500),
            learn_margins: true,
            seed: None,
        }
    }
}

/// Limits configured for one key or key group: for every model class
/// (`class: None`) or one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLimits {
    /// The key (as the caller names it) or the group.
    pub key: String,
    /// One class, or every class of the key.
    pub class: Option<String>,
    /// The limits.
    pub limits: Limits,
}

/// A resolved (key, model): the scope and the model's price, looked up once
/// per job rather than per admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The (key, class) scope.
    pub scope: ScopeId,
    /// The model's price, when the table has one.
    pub price: Option<PriceId>,
}

/// A price interned by its controller (keeps reservations small: an
/// `Option<PriceId>` is 4 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PriceId(std::num::NonZeroU32);

impl PriceId {
    /// The id of table index `i` (`None` past 2³² − 2 prices, which no
    /// table reaches: each is a distinct price in memory).
    fn at(i: usize) -> Option<PriceId> {
        let n = u32::try_from(i).ok()?.checked_add(1)?;
        std::num::NonZeroU32::new(n).map(PriceId)
    }

    /// Its index in the controller's table.
    #[inline]
    fn index(self) -> usize {
        (self.0.get() - 1) as usize
    }
}

/// One request asking to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmitRequest {
    /// Where it goes.
    pub target: Target,
    /// An explicit input estimate (e.g. a `count_tokens` result).
    pub input_estimate: Option<u64>,
    /// Size of the request body, for the byte heuristic when no estimate.
    pub body_bytes: u64,
    /// The request's `max_tokens`.
    pub max_tokens: Option<u64>,
    /// A retry (counts against the retry budget) or a first attempt.
    pub is_retry: bool,
    /// The caller's deadline for the answer's first byte (the job machine
    /// passes its deadline less the policy's `expected_attempt_time`). The
    /// last moment to send is this less the scope's learned time to the
    /// first byte and a margin ([`Controller::last_send`]); a wait past that
    /// is refused at once with `give_up(deadline)`.
    pub deadline: Option<Instant>,
    /// Whether the answer streams: its first byte comes with the first
    /// token. A non-streamed answer's head comes after the whole
    /// generation, and its time to first byte is learned apart.
    pub streamed: bool,
}

impl AdmitRequest {
    /// A first attempt with no estimate, no `max_tokens`, no deadline.
    pub fn new(target: Target) -> Self {
        AdmitRequest {
            target,
            input_estimate: None,
            body_bytes: 0,
            max_tokens: None,
            is_retry: false,
            deadline: None,
            streamed: false,
        }
    }
}

/// Why a request must wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitReason {
    /// A bucket of this dimension has no room yet.
    Bucket(Dimension),
    /// The scope is paused by a 429's hint.
    Paused,
    /// The spend budget is committed to in-flight requests.
    SpendInFlight,
    /// No limit is known for the scope yet and one request is out to learn
    /// them from its answer's headers (a cold start into unknown limits
    /// sends one request, not the whole backlog). Waiters are woken when
    /// it ends; `until` is a recheck.
    Probe,
    /// Jobs queued ahead of this one go first: a prediction of when its
    /// turn comes ([`Controller::predict`]).
    Queue,
}

/// The answer to [`Controller::admit`].
#[derive(Debug, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum Admission {
    /// Send now; settle or release the reservation afterwards.
    Go(Reservation),
    /// Ask again at `until`. Waiting burns no attempt.
    Wait {
        /// When to ask again.
        until: Instant,
        /// Why.
        reason: WaitReason,
    },
    /// The scope is stopped: keep the job, send nothing.
    Stopped {
        /// What stopped it.
        cause: Cause,
        /// When it lifts by itself, or `None` until [`Controller::resume`].
        until: Option<SystemTime>,
    },
    /// Not admitted and waiting cannot help: `give_up(reason)` —
    /// `deadline` (admission would come too late) or `retry_budget`.
    Refused {
        /// Which bound.
        reason: GiveUpReason,
        /// For `deadline`: the instant it could have been admitted (the
        /// predicted wait), so the answer can say when it could have gone.
        earliest: Option<Instant>,
    },
}

impl Admission {
    /// The reservation of a `Go`.
    #[inline]
    pub fn go(self) -> Option<Reservation> {
        match self {
            Admission::Go(r) => Some(r),
            _ => None,
        }
    }
}

/// What one scope looks like now (for the CLI, tests and metrics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeSnapshot {
    /// The key's name.
    pub key: String,
    /// The model class.
    pub class: String,
    /// Effective limits (configured ∧ learned).
    pub limits: Limits,
    /// Whole units a take could have now in each bucket (requests, input,
    /// output, combined): the lower of the pace and the credit.
    pub levels: [Option<i64>; 4],
    /// Whole units of the provider's credit, as modelled, in each bucket:
    /// what header sync corrects.
    pub credits: [Option<i64>; 4],
    /// The learned margin of each bucket, in whole units: kept free in the
    /// credit beyond each request's amount, because 429s showed the model
    /// above the provider's level.
    pub margins: [Option<u64>; 4],
    /// 429s on a dimension the model believed had room (surprises), per
    /// bucket, since the scope was created in this process.
    pub surprises: [u64; 4],
    /// The credit capacity of each bucket: what the provider's bucket is
    /// taken to hold.
    pub capacities: [Option<u64>; 4],
    /// Output tokens the last admitted request reserved (its `max_tokens`,
    /// which the providers charge when a request starts).
    pub output_reserved: Option<u64>,
    /// Ramp factor, per-mille.
    pub ramp_permille: u32,
    /// Pause end.
    pub paused_until: Option<Instant>,
    /// The key's stop.
    pub stopped: Option<Stop>,
}

impl ScopeSnapshot {
    /// Advice a user can act on where the provider's own rule binds rather
    /// than ratewise: a request's `max_tokens` is charged in full when it
    /// starts (Anthropic: "estimated based on `max_tokens` at the
    /// beginning", see [`Profile`]), so when one reservation takes half the
    /// output bucket or more, at most one or two requests fit at once and
    /// the output limit is reached in reservations, not in tokens
    /// generated. `None` when nothing binds that way.
    ///
    /// ```
    /// # use ratewise_core::admit::{ScopeSnapshot, Limits};
    /// # let mut s = ScopeSnapshot {
    /// #     key: "k".into(), class: "c".into(), limits: Limits::NONE,
    /// #     levels: [None; 4], credits: [None; 4], margins: [None; 4],
    /// #     surprises: [0; 4], capacities: [None, None, Some(1_667), None],
    /// #     output_reserved: Some(1_024), ramp_permille: 1000,
    /// #     paused_until: None, stopped: None,
    /// # };
    /// let advice = s.advice().unwrap();
    /// assert!(advice.contains("max_tokens 1024"), "{advice}");
    /// s.output_reserved = Some(400);
    /// assert_eq!(s.advice(), None);
    /// ```
    pub fn advice(&self) -> Option<String> {
        let cap = self.capacities[2]?;
        let reserved = self.output_reserved?;
        if cap == 0 || reserved.saturating_mul(2) < cap {
            return None;
        }
        let fit = cap / reserved.max(1);
        Some(format!(
            "max_tokens {reserved} reserves {}% of the output bucket ({cap} tokens): the provider \
             charges max_tokens when a request starts, so {fit} request(s) fit at once and the \
             output limit binds on reservations, not on tokens generated; a max_tokens closer \
             to the outputs you expect sends more at a time",
            reserved.saturating_mul(100) / cap
        ))
    }
}

#[derive(Debug, Clone)]
struct KeyState {
    name: String,
    stop: Option<Stop>,
    scopes: Vec<u32>,
    /// A success was read for the key in this process: an authentication
    /// stop on a key that never worked may be forgotten, one on a key
    /// that did is evidence kept.
    succeeded: bool,
    /// The last time it was asked for an admission or ended a
    /// reservation; `None` until then, or until a sweep first saw it
    /// ([`Controller::forget_idle`]).
    used: Option<Instant>,
}

#[derive(Debug, Clone)]
struct ScopeState {
    key: u32,
    class: String,
    configured: Limits,
    learned: Limits,
    buckets: [Option<Bucket>; 4],
    ramp: Ramp,
    paused_until: Option<Instant>,
    last_call: Option<Instant>,
    /// Running total of units given back unused (never charged by the
    /// server), per bucket: a response's view is read net of what was
    /// given back since its request was admitted.
    released: [u64; 4],
    /// Per bucket, the most the server has shown its bucket to hold (its
    /// largest `*-remaining`, plus the request itself where it was
    /// charged): a lower bound on the provider's capacity, which sizes the
    /// credit ([`Burst::credit_units`]).
    seen: [u64; 4],
    /// The request out to learn the limits while none is known.
    probe: Option<ReservationId>,
    /// An answer from the server has been read for this scope: with no
    /// limit known after it, the provider publishes none and there is
    /// nothing to wait for.
    heard: bool,
    /// The learned time from a send to its answer's head, non-streamed
    /// `[0]` and streamed `[1]`: quick to rise, slow to fall.
    head_latency: [Option<Duration>; 2],
    /// Surprises per bucket (see [`ScopeSnapshot::surprises`]).
    surprises: [u64; 4],
    /// See [`ScopeSnapshot::output_reserved`].
    output_reserved: Option<u64>,
    /// A capacity cut by a surprise: header evidence above it is not
    /// believed while the bucket's learned margin lasts.
    ceiling: [Option<u64>; 4],
    /// Per bucket, the least capacity the views allow as the most it can
    /// be (see [`capacity_bound`]): with `seen`, a bracket that rounded
    /// `remaining` values leave wide.
    upper: [Option<u64>; 4],
    /// Per bucket, a capacity above `seen` taken from a sibling bucket's
    /// horizon (see [`sibling_horizon`]): a hypothesis, recomputed at
    /// every view, always inside the bracket.
    guess: [Option<u64>; 4],
}

impl ScopeState {
    /// The capacity a bucket is sized by: the proven one, or the
    /// hypothesis above it.
    fn capacity_taken(&self, i: usize) -> u64 {
        self.guess[i].map_or(self.seen[i], |g| g.max(self.seen[i]))
    }
}

/// A 429 the model did not expect, between its lowering and the margin's
/// learning.
#[derive(Debug, Clone, Copy)]
struct Surprise {
    /// Which bucket.
    bucket: usize,
    /// Its corrections total before the lowering.
    corrected: i128,
}

/// The margin kept before the caller's deadline beyond the expected time
/// to the first byte: at least this, or a tenth of that time.
pub const SEND_MARGIN: Duration = Duration::from_secs(1);

impl ScopeState {
    /// The last moment to send for the first byte to come by `deadline`:
    /// less the learned time to the first byte and a margin. Never a send
    /// at 599 s of a 600 s timeout, which the provider would bill after
    /// the caller has gone.
    fn last_send(&self, deadline: Instant, streamed: bool) -> Instant {
        let head = self.head_latency[usize::from(streamed)].unwrap_or(Duration::ZERO);
        let before = head.saturating_add(SEND_MARGIN.max(head / 10));
        Instant::from_origin(deadline.since_origin().saturating_sub(before))
    }

    /// Learns the time from a send to its answer's head: a slower answer
    /// is believed at once (a deadline missed costs a billed answer nobody
    /// reads), a faster one moves the estimate an eighth of the way.
    fn learn_head_latency(&mut self, took: Duration, streamed: bool) {
        let slot = &mut self.head_latency[usize::from(streamed)];
        *slot = Some(match *slot {
            Some(est) if took < est => est - (est - took) / 8,
            _ => took,
        });
    }

    /// Whether admissions must wait for a first answer: no limit is
    /// configured or learned, and none has been heard yet.
    fn needs_probe(&self) -> bool {
        !self.heard && Limits::combine(&self.configured, &self.learned) == Limits::NONE
    }
}

/// How often a request waiting on a scope's probe asks again, as a bound:
/// drivers wake waiters when a reservation ends, so this matters only for
/// a driver that does not.
pub const PROBE_RECHECK: Duration = Duration::from_millis(200);

/// Admission control for many (key, model class) scopes. Plain `&mut self`
/// and explicit time: wrap it in a lock (see
/// [`Shared`](super::shared::Shared)) to share it between threads.
///
/// It is `Clone` so that a store shared between processes can run a batch
/// of operations on a copy and keep the copy only when its write is
/// accepted (`ratewise-redis`); the configuration is shared, not copied.
#[derive(Debug, Clone)]
pub struct Controller {
    cfg: Arc<Config>,
    /// Per-mille of every effective limit this process paces at (1,000:
    /// the whole; a store cut off from its peers paces at its share).
    share_permille: u32,
    keys: Table<KeyState>,
    key_index: HashMap<String, u32>,
    scopes: Table<ScopeState>,
    scope_index: HashMap<(u32, String), u32>,
    slab: Slab,
    retry: RetryBudget,
    spend: Option<SpendBudget>,
    prices: Vec<Price>,
    rng: fastrand::Rng,
}

impl Controller {
    /// A controller with no scopes yet.
    pub fn new(cfg: Config) -> Self {
        Controller {
            retry: RetryBudget::new(cfg.retry_budget),
            spend: cfg.spend.map(SpendBudget::new),
            rng: fastrand::Rng::with_seed(cfg.seed.unwrap_or_else(crate::decide::entropy_seed)),
            keys: Table::default(),
            key_index: HashMap::new(),
            scopes: Table::default(),
            scope_index: HashMap::new(),
            slab: Slab::default(),
            prices: Vec::new(),
            share_permille: 1000,
            cfg: Arc::new(cfg),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Resolves (key, model) to its scope and price, creating the scope on
    /// first use. Keys are any caller-chosen name (never the secret itself).
    pub fn target(&mut self, key: &str, model: &str) -> Target {
        let class = self.cfg.classes.class_of(model).to_owned();
        let scope = self.scope_of(key, &class);
        Target {
            scope,
            price: self
                .cfg
                .prices
                .price_of(model)
                .and_then(|p| self.intern_price(p)),
        }
    }

    fn intern_price(&mut self, p: Price) -> Option<PriceId> {
        match self.prices.iter().position(|q| *q == p) {
            Some(i) => PriceId::at(i),
            None => {
                let id = PriceId::at(self.prices.len())?;
                self.prices.push(p);
                Some(id)
            }
        }
    }

    /// The price behind an id from [`target`](Self::target).
    pub fn price(&self, id: PriceId) -> Option<Price> {
        self.prices.get(id.index()).copied()
    }

    /// The name state is kept under for `key`: its group's, when it is in
    /// one ([`Config::key_groups`]), else its own.
    pub fn key_name<'a>(&'a self, key: &'a str) -> &'a str {
        self.cfg
            .key_groups
            .iter()
            .find(|(k, _)| k == key)
            .map_or(key, |(_, g)| g.as_str())
    }

    /// The configured limits of (key or group, class): the most specific
    /// entry of [`Config::key_limits`], else the class's, else the
    /// default.
    fn configured_limits(&self, key: &str, class: &str) -> Limits {
        let per_key = |want: Option<&str>| {
            self.cfg
                .key_limits
                .iter()
                .find(|e| e.key == key && e.class.as_deref() == want)
                .map(|e| e.limits)
        };
        per_key(Some(class))
            .or_else(|| per_key(None))
            .or_else(|| {
                self.cfg
                    .class_limits
                    .iter()
                    .find(|(c, _)| c == class)
                    .map(|(_, l)| *l)
            })
            .unwrap_or(self.cfg.limits)
    }

    /// The scope of (key, class), created on first use. A grouped key
    /// resolves to its group's scope.
    pub fn scope_of(&mut self, key: &str, class: &str) -> ScopeId {
        let key = self.key_name(key).to_owned();
        let key = key.as_str();
        let k = match self.key_index.get(key) {
            Some(k) => *k,
            None => {
                let k = self.keys.push(KeyState {
                    name: key.to_owned(),
                    stop: None,
                    scopes: Vec::new(),
                    succeeded: false,
                    used: None,
                });
                self.key_index.insert(key.to_owned(), k);
                k
            }
        };
        if let Some(s) = self.scope_index.get(&(k, class.to_owned())) {
            return ScopeId(*s);
        }
        let configured = self.configured_limits(key, class);
        let ramp = Ramp::new(&self.cfg.ramp);
        let mut st = ScopeState {
            key: k,
            class: class.to_owned(),
            configured,
            learned: Limits::NONE,
            buckets: [None, None, None, None],
            ramp,
            paused_until: None,
            last_call: None,
            released: [0; 4],
            seen: [0; 4],
            upper: [None; 4],
            guess: [None; 4],
            probe: None,
            heard: false,
            head_latency: [None; 2],
            surprises: [0; 4],
            output_reserved: None,
            ceiling: [None; 4],
        };
        rebuild_buckets(&mut st, self.cfg.burst, self.share_permille, Instant::ZERO);
        let id = self.scopes.push(st);
        self.keys[k as usize].scopes.push(id);
        self.scope_index.insert((k, class.to_owned()), id);
        ScopeId(id)
    }

    /// Replaces the configured limits of one scope (e.g. per key).
    pub fn set_limits(&mut self, scope: ScopeId, limits: Limits, now: Now) {
        if let Some(s) = self.scopes.get_mut(scope.0 as usize) {
            s.configured = limits;
            rebuild_buckets(s, self.cfg.burst, self.share_permille, now.instant);
        }
    }

    /// Asks to send one request now.
    ///
    /// Order: stop → retry budget → pause → buckets → spend budget. A wait
    /// that would end past the request's deadline is `Refused(deadline)`.
    pub fn admit(&mut self, req: &AdmitRequest, now: Now) -> Admission {
        let t = now.instant;
        let Some(s) = self.scopes.get_mut(req.target.scope.0 as usize) else {
            return Admission::Refused {
                reason: GiveUpReason::Deadline,
                earliest: None,
            };
        };
        let key = &mut self.keys[s.key as usize];
        key.used = Some(t);
        if let Some(stop) = key.stop {
            if stop.expired(t) {
                key.stop = None;
                let ids = key.scopes.clone();
                for id in ids {
                    restart_ramp(&mut self.scopes[id as usize], &self.cfg.ramp, t);
                }
            } else {
                return Admission::Stopped {
                    cause: stop.cause,
                    until: stop.until,
                };
            }
        }
        let s = &mut self.scopes[req.target.scope.0 as usize];
        let deadline = req.deadline.map(|d| s.last_send(d, req.streamed));
        if deadline.is_some_and(|d| t > d) {
            // Past the last moment to send: the answer could not come in
            // time, whatever the buckets hold.
            return Admission::Refused {
                reason: GiveUpReason::Deadline,
                earliest: None,
            };
        }
        if req.is_retry && !self.retry.can_retry(t) {
            return Admission::Refused {
                reason: GiveUpReason::RetryBudget,
                earliest: None,
            };
        }
        let idle = s
            .last_call
            .is_some_and(|c| t.saturating_duration_since(c) > self.cfg.ramp.idle_after);
        s.last_call = Some(t);
        if let Some(p) = s.paused_until {
            if t < p {
                let jitter = jitter(&mut self.rng, self.cfg.pause_jitter);
                return wait_or_refuse(p + jitter, WaitReason::Paused, deadline);
            }
            s.paused_until = None;
        }
        let probing = s.needs_probe();
        if probing {
            if let Some(p) = s.probe {
                if self.slab.is_live(p) {
                    return wait_or_refuse(t + PROBE_RECHECK, WaitReason::Probe, deadline);
                }
            }
        }
        if idle {
            restart_ramp(s, &self.cfg.ramp, t);
        } else {
            grow_ramp(s, &self.cfg.ramp, t);
        }
        let amounts = amounts_of(&self.cfg, req);
        for b in s.buckets.iter_mut().flatten() {
            b.refill(t);
        }
        let wait = bucket_wait(&s.buckets, &amounts, t)
            .map(|w| ramped_wait(&s.buckets, s.ramp, &self.cfg.ramp, &amounts, t, w));
        if let Some((until, i)) = wait {
            return wait_or_refuse(until, WaitReason::Bucket(DIMENSIONS[i]), deadline);
        }
        let cost = req
            .target
            .price
            .and_then(|p| self.prices.get(p.index()))
            .map(|p| p.worst_case(&amounts))
            .unwrap_or(0);
        if let Some(sp) = &mut self.spend {
            match sp.check(amounts.tokens(), cost, t) {
                SpendCheck::Fits => sp.reserve(amounts.tokens(), cost, t),
                SpendCheck::InFlight => {
                    let until = t + sp.config().recheck;
                    return wait_or_refuse(until, WaitReason::SpendInFlight, deadline);
                }
                SpendCheck::Spent { until } => {
                    return Admission::Stopped {
                        cause: Cause::UserLimit,
                        until: Some(now.wall_at(until)),
                    }
                }
            }
        }
        let mut marks = [CreditMark::NONE; 4];
        for (i, b) in s.buckets.iter_mut().enumerate() {
            if let Some(b) = b {
                b.take(amounts.by_index(i));
                marks[i] = b.mark();
            }
        }
        if req.is_retry {
            self.retry.record_retry(t);
        } else {
            self.retry.record_first(t);
        }
        let id = self.slab.insert(req.target.scope, amounts, cost, t);
        s.output_reserved = Some(amounts.output);
        if probing {
            s.probe = Some(id);
        }
        Admission::Go(Reservation {
            id,
            scope: req.target.scope,
            amounts,
            cost,
            price: req.target.price,
            admitted_at: t,
            streamed: req.streamed,
            marks,
            released: s.released.map(|r| r as u32),
        })
    }

    /// When a request with `ahead` requests like it queued before it (this
    /// process's FIFO for the scope) will have its turn, at the pace the
    /// buckets and the ramp will really go: `Wait { until, reason: Queue }`,
    /// or — when that is past its last moment to send — `Refused` with
    /// `give_up(deadline)` and `earliest`, so a job that cannot be sent in
    /// time is answered at once instead of at its deadline. Each job ahead
    /// is assumed to cost what this one does. Nothing is taken and nothing
    /// changes. `None` where there is nothing to predict: an unknown scope,
    /// a stop, a probe out into unknown limits (the head learns those).
    pub fn predict(&self, req: &AdmitRequest, ahead: u32, now: Now) -> Option<Admission> {
        let t = now.instant;
        let s = self.scopes.get(req.target.scope.0 as usize)?;
        if self.keys[s.key as usize]
            .stop
            .is_some_and(|stop| !stop.expired(t))
            || s.needs_probe()
        {
            return None;
        }
        let mut s = s.clone();
        grow_ramp(&mut s, &self.cfg.ramp, t);
        for b in s.buckets.iter_mut().flatten() {
            b.refill(t);
        }
        let one = amounts_of(&self.cfg, req);
        // The jobs ahead go first: each takes its amounts (a debt, when
        // the bucket has less), then this one waits for its own room, as
        // the head of the queue will.
        for (i, b) in s.buckets.iter_mut().enumerate() {
            if let Some(b) = b {
                b.take(one.by_index(i).saturating_mul(u64::from(ahead)));
            }
        }
        let paused = s.paused_until.filter(|p| *p > t);
        let bucket = bucket_wait(&s.buckets, &one, t)
            .map(|w| ramped_wait(&s.buckets, s.ramp, &self.cfg.ramp, &one, t, w).0);
        let until = match (paused, bucket) {
            (Some(p), Some(b)) => p.max(b),
            (p, b) => p.or(b).unwrap_or(t),
        };
        let deadline = req.deadline.map(|d| s.last_send(d, req.streamed));
        Some(wait_or_refuse(until, WaitReason::Queue, deadline))
    }

    /// Corrects a reservation to the actual usage of its response: input
    /// counts `input_tokens + cache_creation_input_tokens` (not cache
    /// reads), output counts `output_tokens`; the spend window gets the
    /// billed total. Like an admission, a settle lets the ramp take the
    /// growth steps of the calm time since its last change.
    ///
    /// A reservation that already ended is not charged again: the settle
    /// is refused and counted in [`Ledger::refused_ends`]. The exception
    /// is the owner's one end of a reservation that ended without it
    /// (lease expired, [`disown`](Self::disown)ed): that settle charges
    /// the actual usage, which was spent all the same.
    pub fn settle(&mut self, res: Reservation, usage: &Usage, now: Now) {
        self.settle_ref(&res, usage, now);
    }

    fn settle_ref(&mut self, res: &Reservation, usage: &Usage, now: Now) {
        let t = now.instant;
        let actual = Amounts {
            requests: 1,
            input: usage.rate_limited_input(),
            output: usage.output_tokens,
        };
        let removed = self.slab.remove(res.id, Exit::Settled);
        let live = removed.is_some();
        // Not live: the owner's late end of a reservation that ended
        // without it (lease expired, disowned) charges its usage, once;
        // any other end of an ended reservation is refused and counted —
        // a second settle never charges twice.
        if !live && !self.slab.end_stale(res.id) {
            return;
        }
        self.touch(res.scope, t);
        if let Some(s) = self.scopes.get_mut(res.scope.0 as usize) {
            // The probe's reservation ended. An answer teaches through
            // `observe` (which marks the scope heard); a settle alone —
            // a caller that left before the answer, a send cut with no
            // answer, charged at its estimate — taught nothing: the next
            // request becomes the probe, and nothing else goes out into
            // limits still unknown.
            if s.probe == Some(res.id) {
                s.probe = None;
            }
        }
        // A held reservation's buckets may have part of it back already.
        let refunded = removed.map_or([0; 4], |r| r.refunded);
        let Some(s) = self.scopes.get_mut(res.scope.0 as usize) else {
            return;
        };
        for (i, b) in s.buckets.iter_mut().enumerate() {
            if let Some(b) = b {
                let reserved = if live {
                    res.amounts.by_index(i).saturating_sub(refunded[i])
                } else {
                    0
                };
                let act = actual.by_index(i);
                if act < reserved {
                    b.put_back(reserved - act, t);
                } else if act > reserved {
                    b.charge(act - reserved, t);
                }
            }
        }
        self.slab.charge(&actual);
        if let Some(sp) = &mut self.spend {
            if live {
                sp.unreserve(res.amounts.tokens(), res.cost, t);
            }
            let cost = res
                .price
                .and_then(|p| self.prices.get(p.index()))
                .map(|p| p.cost(usage))
                .unwrap_or(0);
            sp.settle(usage.total_tokens(), cost, t);
        }
        grow_ramp(s, &self.cfg.ramp, t);
    }

    /// Releases a reservation that was never sent (or whose send provably
    /// did not reach the provider): everything it held goes back. A
    /// release of a reservation that already ended gives nothing back and,
    /// unless it is the owner's end of one that ended without it, is
    /// counted in [`Ledger::refused_ends`].
    pub fn release(&mut self, res: Reservation, now: Now) {
        self.release_ref(&res, now);
    }

    fn release_ref(&mut self, res: &Reservation, now: Now) {
        match self.slab.remove(res.id, Exit::Released) {
            Some(e) => {
                self.touch(res.scope, now.instant);
                self.give_back(&e, now.instant)
            }
            // Already ended: an orphan's late release gives nothing back
            // (its end gave it back); any other is refused and counted.
            None => {
                self.slab.end_stale(res.id);
            }
        }
    }

    fn give_back(&mut self, e: &Removed, t: Instant) {
        let Removed {
            scope,
            amounts,
            cost,
            refunded,
        } = *e;
        if let Some(s) = self.scopes.get_mut(scope.0 as usize) {
            for (i, b) in s.buckets.iter_mut().enumerate() {
                if let Some(b) = b {
                    let back = amounts.by_index(i).saturating_sub(refunded[i]);
                    b.put_back(back, t);
                    s.released[i] = s.released[i].wrapping_add(back);
                }
            }
        }
        if let Some(sp) = &mut self.spend {
            sp.unreserve(amounts.tokens(), cost, t);
        }
    }

    /// Marks a reservation's outcome as unknown: it keeps its worst-case
    /// cost (buckets and spend) and is exempt from lease expiry until
    /// [`resolve_unknown`](Self::resolve_unknown).
    pub fn hold_unknown(&mut self, res: &Reservation, _now: Now) {
        self.slab.hold(res.id);
        // A probe with no answer taught nothing: the next request probes.
        if let Some(s) = self.scopes.get_mut(res.scope.0 as usize) {
            if s.probe == Some(res.id) {
                s.probe = None;
            }
        }
    }

    /// Resolves an unknown outcome: with usage it is settled, without (the
    /// provider confirmed nothing was generated) it is released.
    pub fn resolve_unknown(&mut self, res: Reservation, usage: Option<&Usage>, now: Now) {
        match usage {
            Some(u) => self.settle(res, u, now),
            None => self.release(res, now),
        }
    }

    /// Releases every reservation older than the lease that is not held as
    /// unknown (abandoned: its owner went away). Returns how many.
    pub fn expire(&mut self, now: Now) -> usize {
        let t = now.instant;
        let Some(cutoff) = t.since_origin().checked_sub(self.cfg.lease) else {
            return 0;
        };
        let ids = self.slab.expired(Instant::from_origin(cutoff));
        let n = ids.len();
        for id in ids {
            if let Some(e) = self.slab.remove(id, Exit::Orphaned(t)) {
                self.give_back(&e, t);
            }
        }
        // An owner gets one more lease after its reservation ended without
        // it to end it (a late settle charges its usage); after that it is
        // taken as gone.
        self.slab.forget_orphans(Instant::from_origin(cutoff));
        n
    }

    /// Header sync: learns `*-limit` values and lowers local credits to the
    /// server's view where it is lower (every value read as the provider
    /// documents it: its [`Profile`], e.g. Anthropic's token counts rounded
    /// to the nearest thousand). The server's
    /// view is the lower of
    ///
    /// * its `*-remaining`, and
    /// * what its `*-reset` implies: the bucket is full again at the reset
    ///   and refills at its limit per minute, so it holds about
    ///   `limit − limit/min · (reset − now)` now
    ///   ([`Bucket::sync_reset`]).
    ///
    /// So with `remaining` below a request's need, the request waits until
    /// the server's line reaches its need; and a remaining rounded up to
    /// thousands is corrected by the reset. Neither ever raises a level, so
    /// nothing oscillates. A reset that has passed (or is "now"), or is
    /// further away than [`RESET_HORIZON`] (more than a per-minute bucket
    /// needs to refill: a per-day limit, a wrong clock, garbage), is
    /// ignored; a whole-second reset is read in the server's favour by the
    /// second it may be off ([`Profile::reset_uncertainty`]).
    pub fn sync_headers(
        &mut self,
        scope: ScopeId,
        snap: &RateLimitSnapshot,
        provider: Provider,
        now: Now,
    ) {
        self.sync_view(scope, None, true, snap, provider, now);
    }

    /// Header sync for the response to the request admitted as `sent`:
    /// like [`sync_headers`](Self::sync_headers), but the server's view —
    /// taken when the server received the request — is compared with each
    /// bucket's credit at that admission rather than now
    /// ([`Bucket::sync`]), and a reset instant is read from the admission's
    /// wall time. Compared with the credit now, a view looks lower than it
    /// is by the refill of the response's latency, and lowering to it
    /// wastes that much capacity on every correction. `charged`: whether
    /// the view counts the request itself (a success does; an error
    /// answer's view is of the bucket without it).
    ///
    /// Evidence that a held send was never charged gives its bucket part
    /// back (see the crate's admission docs).
    pub fn sync_headers_sent(
        &mut self,
        sent: &Sent,
        charged: bool,
        snap: &RateLimitSnapshot,
        provider: Provider,
        now: Now,
    ) {
        self.sync_view(sent.scope, Some(sent), charged, snap, provider, now);
    }

    fn sync_view(
        &mut self,
        scope: ScopeId,
        sent: Option<&Sent>,
        charged: bool,
        snap: &RateLimitSnapshot,
        provider: Provider,
        now: Now,
    ) {
        let t = now.instant;
        let burst = self.cfg.burst;
        let share = self.share_permille;
        let profile = Profile::of(provider);
        let learn = self.cfg.learn_margins;
        let rounding = |d: Dimension| {
            if d == Dimension::Requests {
                Rounding::Exact
            } else {
                profile.token_remaining
            }
        };
        let Some(s) = self.scopes.get_mut(scope.0 as usize) else {
            return;
        };
        let learned = Limits::from_snapshot(snap, provider);
        let mut merged = s.learned;
        for d in DIMENSIONS {
            if let Some(v) = learned.get(d) {
                merged.set(d, Some(v));
            }
        }
        // A reset instant counts from when the server took its view.
        let view_wall = match sent {
            Some(x) => {
                let ago = t.saturating_duration_since(x.admitted_at);
                now.wall.checked_sub(ago).unwrap_or(now.wall)
            }
            None => now.wall,
        };
        let mut grown = [0u64; 4];
        for d in DIMENSIONS
            .into_iter()
            .filter(|d| headers_describe(*d, provider))
        {
            let i = index(d);
            let w = snap.window(d);
            let limit = w.limit.or_else(|| merged.get(d)).filter(|l| *l > 0);
            let until_full = w.reset.and_then(|r| reset_wait(r, view_wall, profile));
            let lowest = w.remaining.map(|r| rounding(d).range(r).0);
            // A level that may be zero may be a debt, unless the view is of
            // a success whose own charge there was smaller than the
            // capacity already known: the provider admitted it on a level
            // that held it, so it left no debt behind.
            let no_debt = charged && sent.is_some_and(|x| x.amounts.by_index(i) < s.seen[i].max(1));
            let evidence = capacity_evidence(lowest, until_full, limit, charged, no_debt, d);
            let highest = w.remaining.map(|r| rounding(d).range(r).1 - 1);
            let slack = w
                .reset
                .map_or(Duration::ZERO, |r| profile.reset_uncertainty(r));
            if let Some(ub) = capacity_bound(highest, until_full, slack, limit, charged, d) {
                s.upper[i] = Some(s.upper[i].map_or(ub, |u| u.min(ub)));
            }
            if s.ceiling[i].is_some() && s.buckets[i].as_ref().is_none_or(|b| b.margin(t) == 0) {
                // Calm long enough that the margin is gone: headers are
                // believed again.
                s.ceiling[i] = None;
            }
            if let Some(seen) = evidence.map(|e| s.ceiling[i].map_or(e, |c| e.min(c))) {
                if seen > s.seen[i] {
                    grown[i] = seen - s.seen[i];
                    s.seen[i] = seen;
                }
            }
            if s.upper[i].is_some_and(|u| u < s.seen[i]) {
                // The views disagree: the capacity changed. Bracket anew.
                s.upper[i] = None;
            }
        }
        let limits = std::array::from_fn(|i| {
            snap.window(DIMENSIONS[i])
                .limit
                .or_else(|| merged.get(DIMENSIONS[i]))
                .filter(|l| *l > 0)
        });
        // A hypothesis, taken only where surprises can correct it.
        let guess = if learn {
            sibling_horizon(s, &limits)
        } else {
            [None; 4]
        };
        let guessed = guess != s.guess;
        s.guess = guess;
        if merged != s.learned || guessed || grown.iter().any(|g| *g > 0) {
            s.learned = merged;
            let before = credit_capacities(s);
            rebuild_buckets(s, burst, share, t);
            let after = credit_capacities(s);
            for i in 0..4 {
                grown[i] = match (before[i], after[i]) {
                    (Some(b), Some(a)) => a.saturating_sub(b),
                    _ => 0,
                };
            }
        }
        let mut surplus: [Option<u64>; 4] = [None; 4];
        for d in DIMENSIONS
            .into_iter()
            .filter(|d| headers_describe(*d, provider))
        {
            let i = index(d);
            let Some(b) = &mut s.buckets[i] else {
                continue;
            };
            let w = snap.window(d);
            let view = ServerView {
                remaining: w.remaining,
                until_full: w
                    .reset
                    .and_then(|r| reset_wait(r, view_wall, profile))
                    .map(|until| {
                        let limit = w.limit.filter(|l| *l > 0).unwrap_or(b.limit());
                        (limit, until)
                    }),
            };
            let dead_band = rounding(d);
            // An error answer's view does not count the request itself.
            let mark = sent.and_then(|x| {
                let own = if charged { 0 } else { x.amounts.by_index(i) };
                x.marks[i].get().map(|m| m.plus(own))
            });
            b.sync(&view, mark, dead_band, t);
            if let (Some(x), Some(m)) = (sent, mark) {
                // What the server held beyond the credit at the send, less
                // what was given back since (uncharged sends counted then).
                let since = u64::from((s.released[i] as u32).wrapping_sub(x.released[i]));
                surplus[i] = b
                    .surplus(&view, m, dead_band)
                    .map(|u| u.saturating_sub(since));
            }
            if grown[i] > 0 {
                // A capacity learned larger: the credit was held below the
                // server's level by the old, smaller capacity; it rises by
                // what the server showed beyond it (against the credit at
                // the send, or now without one), at most by the growth, so
                // a reordered view cannot raise it further than that.
                let up = match &mut surplus[i] {
                    Some(u) => {
                        let up = (*u).min(grown[i]);
                        *u -= up;
                        up
                    }
                    None if mark.is_none() => b
                        .surplus(&view, b.mark(), dead_band)
                        .map_or(0, |u| u.min(grown[i])),
                    None => 0,
                };
                if up > 0 {
                    b.raise_credit(up, t);
                }
            }
        }
        if let Some(x) = sent {
            self.refund_unconfirmed(x, surplus, t);
        }
    }

    /// A 429 on the request admitted as `sent` is evidence: the provider's
    /// level on the dimension it names (with none named, or one this scope
    /// has no bucket for, the bucket that was most loaded at the send) was
    /// below this request's charge there. When the model believed it had
    /// room, the credit is lowered at once ([`Bucket::surprise`]); the
    /// margin learns after the 429's headers have had their say
    /// ([`learn_from_surprise`](Self::learn_from_surprise)).
    fn surprise(&mut self, sent: &Sent, named: Option<Dimension>, now: Now) -> Option<Surprise> {
        let s = self.scopes.get_mut(sent.scope.0 as usize)?;
        let has = |i: usize| s.buckets[i].is_some() && sent.marks[i].get().is_some();
        let i = match named.map(index) {
            Some(i) if has(i) => i,
            _ => (0..4).filter(|i| has(*i)).min_by_key(|i| {
                s.buckets[*i]
                    .as_ref()
                    .map_or(i128::MAX, |b| b.room_permille(sent.marks[*i]))
            })?,
        };
        let b = s.buckets[i].as_mut()?;
        let corrected = b.corrected_total();
        b.surprise(sent.amounts.by_index(i), sent.marks[i], now.instant)?;
        Some(Surprise {
            bucket: i,
            corrected,
        })
    }

    /// After a surprise and the 429's headers: the margin grows by all the
    /// model turned out to be over; the surprise is counted; and the
    /// capacity learned from headers is cut by as much (never below the
    /// request) and held there while the margin lasts — headers that imply
    /// more than the provider holds would teach it again. A cut that was
    /// not needed (the level, not the capacity, was wrong) costs a smaller
    /// burst until the margin decays, never a 429.
    fn learn_from_surprise(&mut self, sent: &Sent, x: Surprise, now: Now) -> (Dimension, u64) {
        let t = now.instant;
        let burst = self.cfg.burst;
        let share = self.share_permille;
        let i = x.bucket;
        let Some(s) = self.scopes.get_mut(sent.scope.0 as usize) else {
            return (DIMENSIONS[i], 0);
        };
        let Some(b) = s.buckets[i].as_mut() else {
            return (DIMENSIONS[i], 0);
        };
        let over = b.lowered_since(x.corrected);
        b.learn_margin(over, t);
        s.surprises[i] = s.surprises[i].saturating_add(1);
        let amount = sent.amounts.by_index(i);
        let taken = s.capacity_taken(i);
        if taken > 0 {
            let mut cut = taken.saturating_sub(over).max(amount.min(taken));
            if taken > s.seen[i] {
                // A hypothesis was in use: it goes, and the proof stands.
                // Of what the model was over, the guess explains all it
                // can; the rest is the level (a late timer, a send the
                // model did not see), which the margin already learns. A
                // proof that is itself wrong (headers biased high) meets
                // the next 429 with no guess above it, and is cut then.
                cut = cut.max(s.seen[i]);
            }
            if cut < taken {
                // The ceiling holds the hypothesis (and the proof) down
                // while the margin lasts.
                s.seen[i] = s.seen[i].min(cut);
                s.guess[i] = None;
                s.ceiling[i] = Some(cut);
                rebuild_buckets(s, burst, share, t);
            }
        }
        (DIMENSIONS[i], over)
    }

    /// An outcome held as unknown keeps its worst case, in case the server
    /// charged it. When a later response shows that the server held, at
    /// that request's admission, more than the credit then (less what was
    /// given back since), the difference was never charged: that much of
    /// the held reservations' bucket part is given back, oldest first, per
    /// bucket, never more than they hold. The spend budget keeps the worst
    /// case until the outcome is resolved.
    ///
    /// Without this a held send that the server never saw costs its
    /// reservation for the rest of a backlog. Evidence that is wrong (a
    /// reordered send) only makes the credit too high by at most the held
    /// amounts, and the next view lowers it again.
    fn refund_unconfirmed(&mut self, sent: &Sent, mut surplus: [Option<u64>; 4], t: Instant) {
        if self.slab.held_live == 0 || surplus.iter().all(Option::is_none) {
            return;
        }
        let Some(s) = self.scopes.get_mut(sent.scope.0 as usize) else {
            return;
        };
        for (id, left) in self.slab.unconfirmed_in(sent.scope, sent.admitted_at) {
            let mut refund = [0u64; 4];
            for (i, b) in s.buckets.iter_mut().enumerate() {
                let (Some(b), Some(u)) = (b, &mut surplus[i]) else {
                    continue;
                };
                let r = left[i].min(*u);
                // A correction: views taken before it count it.
                b.refund(r, t);
                *u -= r;
                refund[i] = r;
            }
            self.slab.add_refund(id, refund);
        }
    }

    /// Pauses a scope for every job until `until` (a 429's hint), and
    /// empties the limited dimension's bucket (all buckets when unknown) so
    /// that the backlog is released at the refill rate, not in a burst.
    pub fn pause(
        &mut self,
        scope: ScopeId,
        until: Instant,
        dimension: Option<Dimension>,
        now: Now,
    ) {
        self.pause_synced(scope, until, dimension, [false; 4], now);
    }

    /// [`pause`](Self::pause), leaving the credit of each bucket whose view
    /// the 429 itself reported (`synced`) to that view: only its pace is
    /// held ([`Bucket::hold_pace_until`]).
    fn pause_synced(
        &mut self,
        scope: ScopeId,
        until: Instant,
        dimension: Option<Dimension>,
        synced: [bool; 4],
        now: Now,
    ) {
        let t = now.instant;
        let Some(s) = self.scopes.get_mut(scope.0 as usize) else {
            return;
        };
        s.paused_until = Some(s.paused_until.map_or(until, |p| p.max(until)));
        for (i, b) in s.buckets.iter_mut().enumerate() {
            if let Some(b) = b {
                if synced[i] {
                    b.hold_pace_until(until, t);
                } else if dimension.is_none_or(|d| index(d) == i) {
                    b.drain_until(until, t);
                }
            }
        }
    }

    /// An acceleration 429: cuts the scope's ramp factor.
    pub fn slow_down(&mut self, scope: ScopeId, now: Now) {
        if let Some(s) = self.scopes.get_mut(scope.0 as usize) {
            s.ramp.slow_down(&self.cfg.ramp, now.instant);
            apply_ramp(s, now.instant);
        }
    }

    /// Stops the scope's key (every class on it).
    pub fn stop(&mut self, scope: ScopeId, cause: Cause, until: Option<SystemTime>, now: Now) {
        let Some(s) = self.scopes.get(scope.0 as usize) else {
            return;
        };
        let stop = Stop {
            cause,
            until,
            until_instant: until.map(|u| now.instant_at(u)),
        };
        let key = &mut self.keys[s.key as usize];
        match &mut key.stop {
            Some(existing) => existing.merge(stop),
            None => key.stop = Some(stop),
        }
    }

    /// Applies what one response said to the shared state, and returns the
    /// decision, amended where a queue-wide bound overrides it:
    ///
    /// * rate-limit headers sync the buckets ([`sync_headers`](Self::sync_headers));
    /// * a `rate_limited` response with a wait hint pauses the bucket (the
    ///   key's buckets when the scope is `key`) for every job until the hint
    ///   passes ([`pause`](Self::pause));
    /// * an `acceleration_limited` response cuts the ramp of the key's
    ///   scopes ([`slow_down`](Self::slow_down)), and pauses them on a hint;
    /// * a `stop_queue` decision stops the key with its `until`
    ///   ([`stop`](Self::stop));
    /// * a `retry` when the retry budget is spent becomes
    ///   `give_up(retry_budget)`.
    ///
    /// Reconciling the reservation stays with the caller, who holds it:
    /// `settle` on `done` (and on any response with usage), `release` when
    /// nothing was sent, `hold_unknown` on `hold_unknown`.
    pub fn observe(
        &mut self,
        scope: ScopeId,
        c: &Classification,
        d: Decision,
        now: Now,
    ) -> Decision {
        self.observe_view(scope, None, c, d, now)
    }

    /// [`observe`](Self::observe) for the response to the request admitted
    /// as `sent` ([`Reservation::sent`]): the header sync reads the
    /// server's view against the admission
    /// ([`sync_headers_sent`](Self::sync_headers_sent)). Prefer it whenever
    /// the response belongs to an admitted request.
    pub fn observe_sent(
        &mut self,
        sent: &Sent,
        c: &Classification,
        d: Decision,
        now: Now,
    ) -> Decision {
        self.observe_view(sent.scope, Some(sent), c, d, now)
    }

    fn observe_view(
        &mut self,
        scope: ScopeId,
        sent: Option<&Sent>,
        c: &Classification,
        mut d: Decision,
        now: Now,
    ) -> Decision {
        if let (Some(sent), Some(_)) = (sent, c.status) {
            // An answer's head came: how long that took, per kind of answer.
            let took = now.instant.saturating_duration_since(sent.admitted_at);
            if let Some(s) = self.scopes.get_mut(scope.0 as usize) {
                s.learn_head_latency(took, sent.streamed);
            }
        }
        // The 429 itself first: what it proves, then what its headers say;
        // the margin learns from both.
        let mut surprised = None;
        if let (Cause::RateLimited, Some(sent), true) = (c.cause, sent, self.cfg.learn_margins) {
            surprised = self.surprise(sent, c.dimension, now);
        }
        if !c.hints.ratelimit.is_empty() {
            // Only a success was charged; an error answer's view is of the
            // bucket without it.
            let charged = c.cause == Cause::Success;
            self.sync_view(scope, sent, charged, &c.hints.ratelimit, c.provider, now);
        }
        if let (Some(sent), Some(x)) = (sent, surprised) {
            let (dim, over) = self.learn_from_surprise(sent, x, now);
            d.notes.push(
                format!(
                    "admission: {} 429 where the model was {over} over the provider's level; margin learned",
                    dim.as_str()
                )
                .into(),
            );
        }
        // The probe's question is answered by any success, and by any
        // answer that carried rate-limit headers; an error without them
        // (a gateway's 502) says nothing about the limits.
        if c.cause == Cause::Success || !c.hints.ratelimit.is_empty() {
            if let Some(s) = self.scopes.get_mut(scope.0 as usize) {
                s.heard = true;
                s.probe = None;
                if c.cause == Cause::Success {
                    self.keys[s.key as usize].succeeded = true;
                }
            }
        }
        let affected = match c.scope {
            CScope::Key | CScope::Provider => self.scopes_on_key(scope),
            CScope::Bucket | CScope::Request => vec![scope],
        };
        let hint_end = c.hints.wait.map(|h| now.instant + h.wait);
        match c.cause {
            Cause::RateLimited => {
                if let Some(until) = hint_end {
                    // The answer's own view corrected those credits, and
                    // a surprise corrected its bucket to what the 429
                    // proves: their pace alone is held to the hint, so the
                    // wait is the longer of the hint and the evidence.
                    let mut synced = [false; 4];
                    for d in DIMENSIONS {
                        let w = c.hints.ratelimit.window(d);
                        synced[index(d)] = headers_describe(d, c.provider)
                            && (w.remaining.is_some() || w.reset.is_some());
                    }
                    if let Some(x) = surprised {
                        synced[x.bucket] = true;
                    }
                    for s in &affected {
                        let own = if *s == scope { synced } else { [false; 4] };
                        self.pause_synced(*s, until, c.dimension, own, now);
                    }
                    d.notes.push(
                        format!(
                            "admission: bucket paused for every job for {} ms",
                            (until - now.instant).as_millis()
                        )
                        .into(),
                    );
                }
            }
            Cause::AccelerationLimited => {
                for s in self.scopes_on_key(scope) {
                    self.slow_down(s, now);
                    if let Some(until) = hint_end {
                        self.pause(s, until, None, now);
                    }
                }
                if let Some(s) = self.scopes.get(scope.0 as usize) {
                    d.notes
                        .push(format!("admission: rate cut to {}%", s.ramp.permille() / 10).into());
                }
            }
            _ => {}
        }
        match d.action {
            Action::StopQueue { until } => {
                self.stop(scope, c.cause, until, now);
                d.notes.push("admission: key stopped".into());
            }
            Action::Retry { .. } if !self.retry.can_retry(now.instant) => {
                let (firsts, retries) = self.retry.counts(now.instant);
                d.action = Action::GiveUp {
                    reason: GiveUpReason::RetryBudget,
                };
                d.notes.push(format!(
                    "retry budget spent: {retries} retries for {firsts} first attempts in the window"
                ).into());
            }
            _ => {}
        }
        d
    }

    /// Applies one job event ([`Update`](super::Update)) in one step: the
    /// answer's evidence first ([`observe_sent`](Self::observe_sent), or
    /// [`observe`](Self::observe) for an answer to no admission), then the
    /// reservation's end ([`settle`](Self::settle) or
    /// [`release`](Self::release)). Behind one lock this leaves no window
    /// in which capacity is back but the pause the same answer reported is
    /// not yet in force. Returns the amended decision when the update
    /// carried an answer.
    pub fn apply(&mut self, update: super::Update, now: Now) -> Option<Decision> {
        let super::Update { observed, end } = update;
        let decision = observed.map(|o| {
            self.observe_view(o.scope, o.sent.as_ref(), &o.classification, o.decision, now)
        });
        match end {
            Some(super::End::Settle { reservation, usage }) => {
                self.settle(reservation, &usage, now)
            }
            Some(super::End::Release { reservation }) => self.release(reservation, now),
            None => {}
        }
        decision
    }

    /// [`apply`](Self::apply) without consuming the event: for a store
    /// that runs an operation on a copy of the controller and may have to
    /// run the same event again on a fresher record when its
    /// compare-and-set loses (`ratewise-redis`). On one controller, apply
    /// an event once: the reservation it ends is gone after the first.
    pub fn apply_ref(&mut self, update: &super::Update, now: Now) -> Option<Decision> {
        let decision = update.observed.as_ref().map(|o| {
            self.observe_view(
                o.scope,
                o.sent.as_ref(),
                &o.classification,
                o.decision.clone(),
                now,
            )
        });
        match &update.end {
            Some(super::End::Settle { reservation, usage }) => {
                self.settle_ref(reservation, usage, now)
            }
            Some(super::End::Release { reservation }) => self.release_ref(reservation, now),
            None => {}
        }
        decision
    }

    /// Forgets an outstanding reservation without giving anything back:
    /// for a store whose shared record replaced the buckets the take was
    /// made from (a take made while cut off from the others, then a fresh
    /// record imported), so the buckets never held it. Its end then
    /// charges what it used and gives back nothing: a release is a no-op,
    /// a settle charges the actual usage. Returns whether it was
    /// outstanding.
    pub fn disown(&mut self, id: ReservationId, now: Now) -> bool {
        let Some(e) = self.slab.remove(id, Exit::Orphaned(now.instant)) else {
            return false;
        };
        // The spend budget is this process's own: its hold goes, and the
        // end settles the actual cost.
        if let Some(sp) = &mut self.spend {
            sp.unreserve(e.amounts.tokens(), e.cost, now.instant);
        }
        true
    }

    /// The outstanding reservations on `key` (or its group): for a store
    /// that learns its shared record was lost and replaced by one that
    /// never held them (to [`disown`](Self::disown) them).
    pub fn outstanding_on(&self, key: &str) -> Vec<ReservationId> {
        let Some(k) = self.key_index.get(self.key_name(key)) else {
            return Vec::new();
        };
        let scopes: Vec<ScopeId> = self.keys[*k as usize]
            .scopes
            .iter()
            .map(|i| ScopeId(*i))
            .collect();
        self.slab.live_on(&scopes)
    }

    /// Paces every scope at `permille` of its effective limits (1,000 by
    /// default): what a process cut off from the store it shares a key
    /// through may use alone — its share of the key, when N processes
    /// share it. Bucket levels are kept (clamped to the smaller capacity).
    pub fn set_share(&mut self, permille: u32, now: Now) {
        let permille = permille.clamp(1, 1000);
        if permille == self.share_permille {
            return;
        }
        self.share_permille = permille;
        for s in self.scopes.iter_mut() {
            rebuild_buckets(s, self.cfg.burst, permille, now.instant);
        }
    }

    /// The per-mille of its limits this process paces at
    /// ([`set_share`](Self::set_share)).
    pub fn share_permille(&self) -> u32 {
        self.share_permille
    }

    /// The shared state of `key` (or its group) as a record, with times
    /// made absolute at `now` (see [`KeyRecord`](super::KeyRecord)); `None`
    /// when the key has not been used.
    pub fn export_key(&self, key: &str, now: Now) -> Option<super::KeyRecord> {
        use super::record::{limits_array, ramp_record, ScopeRecord, StopRecord, TimeBase};
        let name = self.key_name(key);
        let k = *self.key_index.get(name)?;
        let ks = &self.keys[k as usize];
        let base = TimeBase::at(now);
        let scopes = ks
            .scopes
            .iter()
            .map(|id| {
                let s = &self.scopes[*id as usize];
                let (ramp_permille, ramp_last_step) = ramp_record(&s.ramp, base);
                ScopeRecord {
                    class: s.class.clone(),
                    learned: limits_array(&s.learned),
                    buckets: std::array::from_fn(|i| {
                        s.buckets[i].as_ref().map(|b| b.to_record(base.shift()))
                    }),
                    ramp_permille,
                    ramp_last_step,
                    paused_until: s.paused_until.map(|t| base.out(t)),
                    last_call: s.last_call.map(|t| base.out(t)),
                    released: s.released,
                    seen: s.seen,
                    ceiling: s.ceiling,
                    upper: s.upper,
                    guess: s.guess,
                    heard: s.heard,
                }
            })
            .collect();
        Some(super::KeyRecord {
            format: super::record::RECORD_FORMAT,
            key: ks.name.clone(),
            stop: ks.stop.as_ref().map(StopRecord::of),
            scopes,
        })
    }

    /// Replaces the shared state of the record's key with the record's
    /// (read at `now`), creating its scopes as needed; this process's own
    /// state — its configured limits, its reservations, a probe in flight
    /// — stays. Scope ids stay valid. A malformed bucket in the record is
    /// left as this process had it.
    pub fn import_key(&mut self, rec: &super::KeyRecord, now: Now) {
        use super::record::{limits_of, TimeBase};
        let base = TimeBase::at(now);
        let burst = self.cfg.burst;
        let share = self.share_permille;
        for sr in &rec.scopes {
            let id = self.scope_of(&rec.key, &sr.class);
            let s = &mut self.scopes[id.0 as usize];
            s.learned = limits_of(sr.learned);
            for (i, b) in sr.buckets.iter().enumerate() {
                match b {
                    Some(r) => {
                        if let Some(b) = Bucket::from_record(r, base.shift()) {
                            s.buckets[i] = Some(b);
                        }
                    }
                    None => s.buckets[i] = None,
                }
            }
            s.ramp = Ramp::restored(sr.ramp_permille, sr.ramp_last_step.map(|t| base.back(t)));
            s.paused_until = sr.paused_until.map(|t| base.back(t));
            s.last_call = sr.last_call.map(|t| base.back(t));
            s.released = sr.released;
            s.seen = sr.seen;
            s.ceiling = sr.ceiling;
            s.upper = sr.upper;
            s.guess = sr.guess;
            s.heard = sr.heard;
            // This process's configured limits decide which buckets exist.
            rebuild_buckets(s, burst, share, now.instant);
        }
        if let Some(k) = self.key_index.get(rec.key.as_str()).copied() {
            self.keys[k as usize].stop = rec.stop.as_ref().map(|st| st.to_stop(now));
        }
    }

    /// Lifts a key's stop (a human resumed): its scopes restart the ramp.
    pub fn resume(&mut self, key: &str, now: Now) {
        let key = self.key_name(key).to_owned();
        let Some(k) = self.key_index.get(key.as_str()).copied() else {
            return;
        };
        let ks = &mut self.keys[k as usize];
        ks.stop = None;
        for id in ks.scopes.clone() {
            restart_ramp(&mut self.scopes[id as usize], &self.cfg.ramp, now.instant);
        }
    }

    /// Whether the retry budget allows one more retry now.
    pub fn retry_allowed(&mut self, now: Now) -> bool {
        self.retry.can_retry(now.instant)
    }

    /// (first attempts, retries) in the retry budget's window.
    pub fn retry_counts(&mut self, now: Now) -> (u64, u64) {
        self.retry.counts(now.instant)
    }

    /// The spend window's totals, when a spend budget is configured.
    pub fn spend_totals(&mut self, now: Now) -> Option<SpendTotals> {
        self.spend.as_mut().map(|s| s.totals(now.instant))
    }

    /// The reservation counters ([`Ledger::is_clean`]: every reservation
    /// ended, none twice).
    pub fn ledger(&self) -> Ledger {
        self.slab.ledger()
    }

    /// Whether a reservation is still outstanding.
    pub fn is_outstanding(&mut self, res: &Reservation) -> bool {
        self.slab.is_live(res.id)
    }

    /// The scope's key (stop state lives per key).
    pub fn key_of(&self, scope: ScopeId) -> Option<&str> {
        let s = self.scopes.get(scope.0 as usize)?;
        Some(self.keys[s.key as usize].name.as_str())
    }

    /// Every scope, in the order they were made (for a status page).
    pub fn scopes(&self) -> Vec<ScopeId> {
        self.scopes.ids().map(ScopeId).collect()
    }

    /// Every scope on the same key as `scope` (including it).
    pub fn scopes_on_key(&self, scope: ScopeId) -> Vec<ScopeId> {
        match self.scopes.get(scope.0 as usize) {
            Some(s) => self.keys[s.key as usize]
                .scopes
                .iter()
                .map(|i| ScopeId(*i))
                .collect(),
            None => Vec::new(),
        }
    }

    /// The next instant at which state changes by itself: a pause ends, a
    /// stop lifts, or a lease expires. Bucket waits are returned by
    /// [`admit`](Self::admit) itself. A fake-clock driver steps to the
    /// earliest of these and of the waits it was given.
    pub fn next_wakeup(&self, now: Now) -> Option<Instant> {
        let t = now.instant;
        let pauses = self.scopes.iter().filter_map(|s| s.paused_until);
        let stops = self
            .keys
            .iter()
            .filter_map(|k| k.stop.and_then(|s| s.until_instant));
        let lease = self.slab.oldest().map(|a| a + self.cfg.lease);
        pauses.chain(stops).chain(lease).filter(|x| *x > t).min()
    }

    /// What a scope looks like now.
    pub fn snapshot(&mut self, scope: ScopeId, now: Now) -> Option<ScopeSnapshot> {
        let s = self.scopes.get_mut(scope.0 as usize)?;
        let mut levels = [None; 4];
        let mut credits = [None; 4];
        let mut margins = [None; 4];
        let mut capacities = [None; 4];
        for (i, b) in s.buckets.iter_mut().enumerate() {
            levels[i] = b.as_mut().map(|b| b.level(now.instant));
            credits[i] = b.as_mut().map(|b| b.credit_level(now.instant));
            margins[i] = b.as_ref().map(|b| b.margin(now.instant));
            capacities[i] = b.as_ref().map(Bucket::credit_capacity);
        }
        let key = &self.keys[s.key as usize];
        Some(ScopeSnapshot {
            key: key.name.clone(),
            class: s.class.clone(),
            limits: Limits::combine(&s.configured, &s.learned),
            levels,
            credits,
            margins,
            surprises: s.surprises,
            capacities,
            output_reserved: s.output_reserved,
            ramp_permille: s.ramp.permille(),
            paused_until: s.paused_until.filter(|p| *p > now.instant),
            stopped: key.stop.filter(|st| !st.expired(now.instant)),
        })
    }
}

pub use super::bucket::EDGE_MARGIN;

/// The furthest `*-reset` header sync trusts: a per-minute bucket is full
/// again within a minute of being empty, so a reset further away is a
/// per-day window, a wrong clock or garbage, and is ignored (a minute, plus
/// a few seconds for clock skew).
pub const RESET_HORIZON: Duration = Duration::from_secs(65);

/// How long until the server's bucket is full, when the reset is usable:
/// `None` when it has passed (or is now) or lies beyond [`RESET_HORIZON`].
/// Taken in the server's favour by as much as the value may be off
/// ([`Profile::reset_uncertainty`]: a second for a whole-second value, a
/// millisecond for one with sub-second digits) — never a fixed second,
/// which on a 5 s bucket is a fifth of it.
fn reset_wait(r: Reset, wall: SystemTime, profile: &Profile) -> Option<Duration> {
    let wait = r.wait_from(wall);
    if wait.is_zero() || wait > RESET_HORIZON {
        return None;
    }
    Some(wait.saturating_sub(profile.reset_uncertainty(r)))
}

/// What `req` reserves: one request, its input estimate (the byte
/// heuristic without one), and the configured output estimate.
fn amounts_of(cfg: &Config, req: &AdmitRequest) -> Amounts {
    let input = req
        .input_estimate
        .unwrap_or_else(|| input_from_bytes(req.body_bytes));
    Amounts {
        requests: 1,
        input,
        output: cfg.output.output_estimate(req.max_tokens, input),
    }
}

fn wait_or_refuse(until: Instant, reason: WaitReason, deadline: Option<Instant>) -> Admission {
    if deadline.is_some_and(|d| until > d) {
        Admission::Refused {
            reason: GiveUpReason::Deadline,
            earliest: Some(until),
        }
    } else {
        Admission::Wait { until, reason }
    }
}

fn jitter(rng: &mut fastrand::Rng, max: Duration) -> Duration {
    let max_ns = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    if max_ns == 0 {
        Duration::ZERO
    } else {
        Duration::from_nanos(rng.u64(0..=max_ns))
    }
}

/// The latest of the buckets' waits for `amounts` (levels refilled to
/// `t`), with the bucket it is for; `None` when every bucket has room.
fn bucket_wait(
    buckets: &[Option<Bucket>; 4],
    amounts: &Amounts,
    t: Instant,
) -> Option<(Instant, usize)> {
    let mut wait: Option<(Instant, usize)> = None;
    for (i, b) in buckets.iter().enumerate() {
        if let Some(w) = b.as_ref().and_then(|b| b.wait_for(amounts.by_index(i), t)) {
            if wait.is_none_or(|(x, _)| w > x) {
                wait = Some((w, i));
            }
        }
    }
    wait
}

/// The wait that will happen, not the wait at this instant's pace: while
/// the ramp is below its peak it grows at every calm step, and the pace
/// (rate and capacity) with it. A cold scope's first large request at the
/// start fraction — 1,024 output tokens at 10 % of 8,000 a minute — would
/// be predicted at 76.8 s, when the ramp reaches full rate within six
/// seconds and the request goes after about ten; a prediction that long
/// turned jobs away (a defer, a refused deadline) that could have waited.
/// Replays the ramp's steps on copies of the buckets until the wait ends
/// before the next step (at most 64 steps: the ramp is at its peak long
/// before). An acceleration 429 meanwhile cuts the ramp; the waiting job
/// then asks again and gets the longer wait.
fn ramped_wait(
    buckets: &[Option<Bucket>; 4],
    ramp: Ramp,
    cfg: &RampConfig,
    amounts: &Amounts,
    t: Instant,
    first: (Instant, usize),
) -> (Instant, usize) {
    let mut wait = first;
    let Some(mut next) = ramp.next_step(cfg) else {
        return wait;
    };
    if wait.0 <= next {
        return wait;
    }
    // The provider's credit is not scaled by the ramp: its wait stands.
    let credit = buckets
        .iter()
        .enumerate()
        .filter_map(|(i, b)| {
            b.as_ref()?
                .credit_wait_for(amounts.by_index(i), t)
                .map(|w| (w, i))
        })
        .max();
    let mut buckets = buckets.clone();
    let mut ramp = ramp;
    for _ in 0..64 {
        let at = next.max(t);
        ramp.calm(cfg, at);
        for b in buckets.iter_mut().flatten() {
            b.set_permille(ramp.permille(), at);
        }
        wait = bucket_wait(&buckets, amounts, at).unwrap_or((at, wait.1));
        match ramp.next_step(cfg) {
            Some(n) if wait.0 > n => next = n,
            _ => break,
        }
    }
    match credit {
        Some(c) if c.0 > wait.0 => c,
        _ => wait,
    }
}

/// Lets the ramp take the growth steps due by `t`, one at a time: the
/// buckets refill at each step's pace up to the step, then at the next
/// one's. Growth follows the clock, so the pace between two admissions is
/// what it was at each instant — the same pace [`ramped_wait`] predicts —
/// not the start fraction until someone asks.
fn grow_ramp(s: &mut ScopeState, cfg: &RampConfig, t: Instant) {
    if s.ramp.permille() >= cfg.peak() {
        return;
    }
    if s.ramp.last_step().is_none() {
        // The first call starts the ramp's clock.
        s.ramp.calm(cfg, t);
        return;
    }
    for _ in 0..64 {
        match s.ramp.next_step(cfg) {
            Some(at) if at <= t => {
                s.ramp.calm(cfg, at);
                apply_ramp(s, at);
            }
            _ => return,
        }
    }
    // Past 64 steps the ramp is at its peak whatever remains.
    if s.ramp.calm(cfg, t) {
        apply_ramp(s, t);
    }
}

fn apply_ramp(s: &mut ScopeState, t: Instant) {
    let p = s.ramp.permille();
    for b in s.buckets.iter_mut().flatten() {
        b.set_permille(p, t);
    }
}

fn restart_ramp(s: &mut ScopeState, cfg: &RampConfig, t: Instant) {
    s.ramp.restart(cfg, t);
    apply_ramp(s, t);
}

/// Makes the buckets match the effective limits: new dimensions get a full
/// bucket (at the ramp factor), changed ones keep their level, dropped ones
/// go.
fn rebuild_buckets(s: &mut ScopeState, burst: Burst, share_permille: u32, t: Instant) {
    let eff = Limits::combine(&s.configured, &s.learned);
    let p = s.ramp.permille();
    let share = |v: u64| {
        if share_permille >= 1000 {
            v
        } else {
            let part = u128::from(v) * u128::from(share_permille) / 1000;
            u64::try_from(part).unwrap_or(u64::MAX).max(1)
        }
    };
    for d in DIMENSIONS {
        let i = index(d);
        let taken = s.capacity_taken(i);
        let seen = if taken == 0 { 0 } else { share(taken) };
        match (eff.get(d).map(share), &mut s.buckets[i]) {
            (None, slot) => *slot = None,
            (Some(l), Some(b)) => {
                let credit = burst.credit_units(l, seen);
                if b.limit() != l {
                    b.set_limit(l, capacity_for(l, burst.of(d)), credit, t);
                } else if b.credit_capacity() != credit {
                    b.set_credit_capacity(credit, t);
                }
            }
            (Some(l), slot) => {
                let pace = capacity_for(l, burst.of(d));
                let credit = burst.credit_units(l, seen);
                *slot = Some(Bucket::with_credit(l, pace, credit, p, t));
            }
        }
    }
}

/// What one view shows of the provider's bucket capacity, a lower bound:
///
/// * the server held at least the lowest level its `remaining` allows
///   (read through the provider's rounding: Anthropic's 12,000 is at least
///   11,500), plus the request itself in
///   the requests bucket when the view counts it (tokens are not added:
///   what the server has charged for them by then — an estimate from
///   `max_tokens`, the input as it counts it — is not known);
/// * with a reset and a level above zero (or `no_debt`: a level of zero may
///   be a debt), `remaining` plus the refill until the bucket is full again
///   (`until_full` already has the reset's uncertainty taken off in the
///   server's favour, which also covers clock skew and the upload time
///   between the admission and the server's view).
///
/// A low guess is cheap (a smaller burst, the same rate); a high one sends
/// into a 429, so nothing here rounds up.
fn capacity_evidence(
    remaining: Option<u64>,
    until_full: Option<Duration>,
    limit: Option<u64>,
    charged: bool,
    no_debt: bool,
    d: Dimension,
) -> Option<u64> {
    let r = remaining?;
    let own = u64::from(charged && d == Dimension::Requests);
    let refill = match (until_full, limit) {
        // A bucket that may be empty may be in debt (a request larger than
        // it was admitted on a full bucket): its reset counts the debt's
        // refill too, and says nothing of the capacity — unless the caller
        // knows there is no debt.
        (Some(_), Some(_)) if r == 0 && !no_debt => 0,
        (Some(u), Some(l)) => {
            let units = u128::from(l) * u.as_nanos() / super::bucket::NS_PER_MIN;
            u64::try_from(units).unwrap_or(u64::MAX)
        }
        _ => 0,
    };
    Some(r.saturating_add(own.max(refill)))
}

/// What one view shows of the provider's bucket capacity, an upper bound:
/// the highest level its `remaining` allows plus the refill until full,
/// with the reset read against the server (`until_full` had its
/// uncertainty taken off; twice `slack` puts it on the other side). Holds
/// in debt too: a level below zero is reported as zero. `None` without a
/// level, a reset and a limit.
fn capacity_bound(
    highest: Option<u64>,
    until_full: Option<Duration>,
    slack: Duration,
    limit: Option<u64>,
    charged: bool,
    d: Dimension,
) -> Option<u64> {
    let (h, u, l) = (highest?, until_full?, limit?);
    let own = u64::from(charged && d == Dimension::Requests);
    let u = u.saturating_add(slack.saturating_mul(2));
    let units = u128::from(l) * u.as_nanos() / super::bucket::NS_PER_MIN;
    let units = u64::try_from(units).unwrap_or(u64::MAX);
    Some(
        h.saturating_add(own)
            .saturating_add(units)
            .saturating_add(1),
    )
}

/// A bracket no wider than this share of its low end is narrow.
const NARROW_BRACKET: u64 = 32;

/// Capacities raised within their brackets to the refill horizon of a
/// sibling bucket known precisely (per bucket, where above the proof).
///
/// A rounded `remaining` can leave a capacity bracketed for as long as a
/// run lasts: with Anthropic's output tokens rounded to the nearest
/// thousand, `max_tokens` charged at the start, and requests sent as soon
/// as the model has room, every view lands in the same rounding step, and
/// a 1,667-token bucket stays learned as 1,499 (a tenth of the goodput of
/// a cold key on 5 s buckets). Its sibling buckets, read exactly (the
/// requests) or from varied charges (the input), show how many seconds of
/// refill the provider's buckets hold. Neither provider documents that a
/// key's buckets share one horizon; it is a hypothesis, so it is taken
/// only inside what the views allow (below the bracket's top), never above
/// a ceiling a surprise set, and the shortest horizon known is the one
/// used. Should the provider differ, the first 429 the model did not expect
/// cuts the capacity and holds it ([`Controller::surprise`]).
fn sibling_horizon(s: &ScopeState, limits: &[Option<u64>; 4]) -> [Option<u64>; 4] {
    let narrow = |i: usize| {
        let seen = s.seen[i];
        seen > 0 && s.upper[i].is_some_and(|u| u.saturating_sub(seen) <= seen / NARROW_BRACKET + 1)
    };
    // The shortest horizon among the narrow brackets, as (units, limit).
    let horizon = (0..4)
        .filter(|i| narrow(*i))
        .filter_map(|i| limits[i].map(|l| (s.seen[i], l)))
        .min_by(|a, b| {
            (u128::from(a.0) * u128::from(b.1)).cmp(&(u128::from(b.0) * u128::from(a.1)))
        });
    let Some((units, per)) = horizon else {
        return [None; 4];
    };
    std::array::from_fn(|i| {
        if narrow(i) {
            return None;
        }
        let (limit, upper) = (limits[i]?, s.upper[i]?);
        let at = u128::from(limit) * u128::from(units) / u128::from(per);
        let at = u64::try_from(at)
            .unwrap_or(u64::MAX)
            .min(upper.saturating_sub(1));
        let at = s.ceiling[i].map_or(at, |c| at.min(c));
        (at > s.seen[i]).then_some(at)
    })
}

/// The credit capacity of each bucket, for what a rebuild changed.
fn credit_capacities(s: &ScopeState) -> [Option<u64>; 4] {
    std::array::from_fn(|i| s.buckets[i].as_ref().map(Bucket::credit_capacity))
}
