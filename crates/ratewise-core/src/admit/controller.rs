//! The [`Controller`]: buckets, ramp, pauses, stops and budgets for many
//! (key, model class) scopes, composed behind one `&mut self` API.
//!
//! This file holds what every concern shares — the configuration, the
//! request and admission types, the per-key and per-scope state, and the
//! controller's construction — so that each concern can be read alone.
//! Each concern is one `impl Controller` file under `controller/`, roughly
//! in the order a request meets them:
//!
//! * `registry` — names to scopes and prices, scopes created on first use;
//! * `admission` — the admission order ([`Controller::admit`],
//!   [`Controller::predict`]);
//! * `headers` — header sync: what an answer's rate-limit headers teach;
//! * `answers` — what a classified answer does (surprises, pauses, ramp
//!   cuts, stops) and [`Controller::apply`], one job event in one step;
//! * `accounting` — how a reservation ends (settle, release, hold, expire);
//! * `pace` — ramp steps, buckets rebuilt to the effective limits and share;
//! * `records` — the store hooks
//!   ([`StoreHooks`](super::store_kit::StoreHooks)): records, disowning,
//!   shares;
//! * `introspection` — snapshots and counters, read-only;
//! * `forget` — forgetting idle keys.

use super::belief::{
    share_of, silent_dimensions, Belief, Beliefs, EstimateState, LimitSource, Sample,
    SilentEstimate,
};
use super::belief::{CreditMark, Level, ServerView};
use super::bucket::{capacity_for, Bucket};
use super::estimate::{input_from_bytes, MaxTokens, OutputEstimator};
use super::limits::{headers_describe, index, Burst, Limits, DIMENSIONS};
use super::model_class::ModelClasses;
use super::profile::{Profile, Rounding};
use super::ramp::{Ramp, RampConfig};
use super::reservation::{
    Amounts, Exit, Ledger, PriceId, Removed, Reservation, ReservationId, Sent, Slab,
};
use super::retry_budget::{RetryBudget, RetryBudgetConfig};
use super::spend::{Price, PriceTable, SpendConfig, SpendTotals};
use super::spend_budget::{SpendBudget, SpendCheck};
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

mod accounting;
mod admission;
mod answers;
mod forget;
mod headers;
mod introspection;
mod memory;
mod pace;
mod records;
mod registry;
mod silent;

pub use introspection::ScopeSnapshot;
use pace::{apply_ramp, credit_capacities, grow_ramp, restart_ramp};
use silent::{climbing, estimated, follow_estimates, share_changed, silent_ended, silent_took};

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
    /// a margin kept free in that bucket. Off, a
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
    /// Requests of one key (or key group) in flight at once, from admission
    /// to the end of its answer (a held unknown outcome counts: it may
    /// still be generating); `None` (the default): no such limit. For a
    /// provider that limits concurrency rather than, or beside, a rate
    /// (DeepSeek: per-account concurrency, a request counting "from send
    /// to the end of its answer"). Per process: replicas sharing a key
    /// through a store each hold their own count, so give each its share.
    pub max_in_flight: Option<u32>,
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
            max_in_flight: None,
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

/// One request asking to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmitRequest {
    /// Where it goes.
    pub target: Target,
    /// An explicit input estimate (e.g. a `count_tokens` result).
    pub input_estimate: Option<u64>,
    /// Size of the request body, for the byte heuristic when no estimate:
    /// one token per 4 bytes, rounded up (the usual rule of thumb for
    /// English text and JSON with both providers' tokenizers).
    pub body_bytes: u64,
    /// The request's `max_tokens`.
    pub max_tokens: Option<u64>,
    /// A retry (counts against the retry budget) or a first attempt.
    pub is_retry: bool,
    /// A retry after a rate signal the job waits out
    /// ([`paced`](crate::decide::paced)): the retry budget neither bounds
    /// nor counts it, since the provider said when it would have room.
    pub paced: bool,
    /// The caller's deadline for the answer's first byte. The last moment
    /// to send is this less the longer of [`attempt_time`](Self::attempt_time)
    /// and the scope's learned time to the first byte with a margin
    /// (`last_send`); a wait past that is refused at once with
    /// `give_up(deadline)`.
    pub deadline: Option<Instant>,
    /// The least time the caller believes an attempt takes (the job
    /// machine passes `Policy::expected_attempt_time`; zero: only what the
    /// scope has learned). The longer of the two counts, never their sum:
    /// a slow model's learned ten seconds and a configured fifty are one
    /// attempt, not sixty seconds cut from the deadline.
    pub attempt_time: Duration,
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
            paced: false,
            deadline: None,
            attempt_time: Duration::ZERO,
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
    /// The key has [`Config::max_in_flight`] requests out; `until` is a
    /// recheck (one ends when its answer does, at no known time).
    InFlight,
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
    /// The store does not know the request's scope: its target came from
    /// another store (or a store that lost its state). Nothing is sent;
    /// a person must look (`inspect`), since no wait can help.
    UnknownScope,
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
    /// Its reservations admitted under [`Config::max_in_flight`], pruned
    /// of the ended ones at each admission.
    in_flight: Vec<ReservationId>,
}

#[derive(Debug, Clone)]
struct ScopeState {
    key: u32,
    class: String,
    /// What is believed of the provider's limits, per dimension: the one
    /// place they live ([`Beliefs`]); the buckets are rebuilt from them
    /// in one place ([`believe`](ScopeState::believe)).
    beliefs: Beliefs,
    buckets: [Option<Bucket>; 4],
    /// Per bucket, what is believed of its level beyond the arithmetic
    /// (corrections on the server's word, the learned margin): reset with
    /// its bucket.
    levels: [Level; 4],
    ramp: Ramp,
    paused_until: Option<Instant>,
    /// A stop of this model class alone (a quota the key's tier does not
    /// have for it: Gemini's "limit: 0"): nothing more is sent for it
    /// until the key is resumed; the key's other classes go on.
    class_stop: Option<Cause>,
    last_call: Option<Instant>,
    /// Running total of units given back unused (never charged by the
    /// server), per bucket: a response's view is read net of what was
    /// given back since its request was admitted.
    released: [u64; 4],
    /// Running total of units this process is taken to have been charged
    /// by the provider, per dimension (takes, less what was given back,
    /// plus settles' differences; wrapping): two views of a bucket shared
    /// with processes it cannot see are read net of its own charges
    /// between them (`Share`).
    charged: [u64; 4],
    /// Whether this scope's state has been read back from a store
    /// (`import_key`): its peers' charges are then in its buckets but not
    /// in `charged`, so the drain beyond `charged` is not only what
    /// clients outside the store take, and `Others` is not read.
    imported: bool,
    /// The request out to learn the limits while none is known.
    probes: Vec<ReservationId>,
    /// How many requests may be out while no limit is known or estimated:
    /// one until an answer is heard, then one more per success (TCP's
    /// slow start) but at most `e`-fold per [`SLOW_START_EFOLD`], halved
    /// by a 429 that taught no estimate; past [`SLOW_START_END`] nothing
    /// holds them back. A provider that states its limits ends it with
    /// its first answer; a silent one is not flooded by every waiting job
    /// at once before its first 429 has been read.
    probe_cap: u32,
    /// When the slow start's growth was last bounded, and the width then:
    /// it may be `e`-fold wider per [`SLOW_START_EFOLD`] since. Set at the
    /// first success and at each halving.
    probe_base: Option<(Instant, u32)>,

    /// An answer from the server has been read for this scope: with no
    /// limit known after it, the provider publishes none and there is
    /// nothing to wait for.
    heard: bool,
    /// The learned time from a send to its answer's head, non-streamed
    /// `[0]` and streamed `[1]`: quick to rise, slow to fall.
    head_latency: [Option<Duration>; 2],
    /// Surprises per bucket (see [`ScopeSnapshot::surprises`]).
    surprises: [u64; 4],
    /// When the beliefs it paces on were learned, while they are
    /// remembered ones (recalled through `store_kit::Memory::recall`); cleared when a belief
    /// moves on live evidence.
    remembered: Option<SystemTime>,
    /// See [`ScopeSnapshot::output_reserved`].
    output_reserved: Option<u64>,
    /// The output tokens the scope's requests used, on average (see
    /// [`ScopeState::learn_output`]), and how many answers taught it: what
    /// the pace is charged for a request's output once an answer taught it
    /// (`admission::Takes` says where it is not).
    output_mean: Option<u64>,
    output_answers: u32,
}

impl ScopeState {
    /// The capacity a bucket is sized by: the proven one, or the
    /// hypothesis above it.
    fn capacity_taken(&self, i: usize) -> u64 {
        self.beliefs.stated[i].capacity.taken()
    }
}

/// The margin kept before the caller's deadline beyond the expected time
/// to the first byte: at least this, or a tenth of that time.
pub(crate) const SEND_MARGIN: Duration = Duration::from_secs(1);

impl ScopeState {
    /// The last moment to send for the first byte to come by `deadline`:
    /// less the learned time to the first byte and a margin. Never a send
    /// at 599 s of a 600 s timeout, which the provider would bill after
    /// the caller has gone.
    fn last_send(&self, deadline: Instant, streamed: bool, attempt: Duration) -> Instant {
        let head = self.head_latency[usize::from(streamed)].unwrap_or(Duration::ZERO);
        let before = head.saturating_add(SEND_MARGIN.max(head / 10)).max(attempt);
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

    /// Learns from a settle that a request used `output` tokens of
    /// output: the plain mean of the first [`OUTPUT_MEAN_WEIGHT`] answers,
    /// then a mean moving an eighth of the way per answer (up at once past
    /// twice the mean, so that a change to longer answers does not leave
    /// the pace charged a fraction of them for long).
    fn learn_output(&mut self, output: u64) {
        let n = self.output_answers.saturating_add(1);
        self.output_answers = n;
        self.output_mean = Some(match self.output_mean {
            Some(m) if n > OUTPUT_MEAN_WEIGHT && output > m.saturating_mul(2) => output,
            Some(m) => {
                let weight = i128::from(n.min(OUTPUT_MEAN_WEIGHT));
                let m = i128::from(m);
                (m + (i128::from(output) - m) / weight).max(0) as u64
            }
            None => output,
        });
    }

    /// A success in the slow start: one more request may be out, unless
    /// that would grow the width more than `e`-fold per
    /// [`SLOW_START_EFOLD`] since [`probe_base`](Self::probe_base).
    fn slow_start_success(&mut self, t: Instant) {
        let (since, width) = *self.probe_base.get_or_insert((t, self.probe_cap));
        let elapsed = t.saturating_duration_since(since).as_secs_f64();
        let bound = f64::from(width) * (elapsed / SLOW_START_EFOLD.as_secs_f64()).exp();
        if f64::from(self.probe_cap) + 1.0 <= bound.max(2.0) {
            self.probe_cap = self.probe_cap.saturating_add(1);
        }
    }

    /// A 429 that taught no estimate in the slow start: half as many out,
    /// growing again from there.
    fn slow_start_halve(&mut self, t: Instant) {
        self.probe_cap = (self.probe_cap / 2).max(1);
        self.probe_base = Some((t, self.probe_cap));
    }

    /// Whether admissions must wait for a first answer: no limit is
    /// configured or learned, and none has been heard yet.
    fn needs_probe(&self) -> bool {
        self.probe_cap < SLOW_START_END
            && self.beliefs.known() == Limits::NONE
            && !self.beliefs.any_estimate()
    }

    /// Every dimension's limit and where it comes from, at `t`, for a
    /// process pacing at `share_permille` of the key's limits.
    fn limits_at(&self, t: Instant, share_permille: u32) -> [Option<(u64, LimitSource)>; 4] {
        self.beliefs.effective(share_permille, t)
    }
}

/// The first answers' output is learned as their plain mean, later ones
/// move it an eighth of the way (see [`ScopeState::learn_output`]).
const OUTPUT_MEAN_WEIGHT: u32 = 8;

/// The slow start into limits nobody states ends at this many requests
/// out at once (see `probe_cap`).
pub(crate) const SLOW_START_END: u32 = 64;

/// The slow start grows by one request out per success, but at most by
/// one per this time divided by the number out: at most `e`-fold per this
/// time, however quick the answers. The requests sent while a silent
/// provider's first 429 is on its way back are answered 429 too, and
/// their number is the pace at that moment times the 429's latency; a
/// provider's bucket holding `C` requests runs dry at about `C / E` sends
/// a second, so the bound keeps that pace low where answers are quick.
/// It costs little: the provider's bucket is spent whole either way, and
/// answers that take seconds grow the slow start no faster than this
/// anyway. Measured on the simulator (the proxy bench's Anthropic-like
/// silent shape, 40 seeds): 429s per 150 jobs 3.2 on average and 5 at
/// most with one step per five successes and no time bound, 2.5 and 3
/// with one per success and this bound; the shipped `silent-openai`
/// scenario's goodput 0.91 → 0.93.
pub(crate) const SLOW_START_EFOLD: Duration = Duration::from_secs(8);

/// How often a request waiting on a scope's probe asks again, as a bound:
/// drivers wake waiters when a reservation ends, so this matters only for
/// a driver that does not.
pub(crate) const PROBE_RECHECK: Duration = Duration::from_millis(200);
/// How often a request held by [`Config::max_in_flight`] asks again.
pub(crate) const IN_FLIGHT_RECHECK: Duration = Duration::from_millis(100);

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
            rng: fastrand::Rng::with_seed(cfg.seed.unwrap_or_else(crate::rng::entropy_seed)),
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
}
