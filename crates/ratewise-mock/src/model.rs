//! The provider model: pure decisions, no IO.
//!
//! [`ProviderModel::handle`] takes what the server knows about a request
//! ([`RequestMeta`]) and the provider time `now`, and says how a provider
//! would answer ([`Answer`]): success with a [`Grant`], a rate limit naming
//! the dimension, an acceleration `slow_down`, the spend cap, billing, or an
//! injected fault. [`ProviderModel::settle`] corrects the output charge to
//! the actual output when a success ends, and adds its cost to the spend.
//!
//! The order of checks, like a provider's: billing (402) → spend cap →
//! injected faults → acceleration → buckets. Money answers and faults
//! charge nothing; a success charges 1 request, the input tokens and
//! `max_tokens` of output at once (Anthropic's documented rule; OpenAI's
//! combined `tokens` bucket is charged input + `max_tokens` the same way),
//! corrected at the end.
//!
//! What providers leave open is configurable ([`MockConfig`]):
//!
//! * **Bucket capacity** ([`MockConfig::capacity_seconds`]): every bucket
//!   holds that many seconds of its per-minute refill (default 60). With 10
//!   s, a burst gets at most 10 s of the limit, and `*-reset` is at most 10 s
//!   away (unless the bucket is paying back a debt).
//! * **Oversize requests**: a request costing more than a bucket holds
//!   (`max_tokens` 4096 against an output bucket of 400) is admitted once
//!   that bucket is full, the whole cost is taken and the level goes
//!   negative: the refill pays the debt before anything else fits. So it is
//!   never refused forever, and the long-run rate stays the limit.
//! * **What the headers show** ([`MockConfig::remaining_rounding`]):
//!   Anthropic's token `*-remaining` are rounded to the nearest thousand by
//!   default, as documented; [`WindowView`] carries both the true level and
//!   what the headers report.
//! * **Biases the documentation does not describe** ([`MockConfig::bias`]):
//!   headers reporting more tokens than there are, buckets smaller than
//!   their headers imply, and a second client on the key. Off by default.
//! * **Rejected requests** ([`MockConfig::count_rejected`]): a request
//!   answered 429 for a rate limit (per-minute or acceleration) takes a
//!   request from the requests bucket — before its `retry-after` is
//!   computed, and with the headers showing it — but no tokens. Off by
//!   default.
//!
//! ```
//! use ratewise_core::{Instant, Provider};
//! use ratewise_mock::model::{Outcome, ProviderModel, RequestMeta};
//! use ratewise_mock::{Limits, MockConfig};
//!
//! let cfg = MockConfig {
//!     anthropic_limits: Limits { requests_per_minute: Some(1), ..Limits::default() },
//!     ..MockConfig::default()
//! };
//! let mut model = ProviderModel::new(&cfg);
//! let meta = RequestMeta::new(Provider::Anthropic, "k1", "claude-sonnet-4-5", 10, 100, 20);
//! let t0 = Instant::ZERO;
//! let Outcome::Success(grant) = model.handle(&meta, t0).outcome else { panic!() };
//! model.settle(&grant, 20, t0);
//! assert!(matches!(model.handle(&meta, t0).outcome, Outcome::RateLimited { .. }));
//! // a minute later the request bucket has refilled
//! let t60 = Instant::from_millis(60_000);
//! assert!(matches!(model.handle(&meta, t60).outcome, Outcome::Success(_)));
//! ```

use crate::bucket::Bucket;
use crate::config::{
    is_token_dimension, AccelerationConfig, BiasConfig, GeminiConfig, Limits, MockConfig,
    ModelPrice, RemainingRounding, SpendConfig,
};
use crate::faults::{Fault, FaultPlan, FaultRule};
use crate::flavor::{CompatibleConfig, Flavor};
use ratewise_core::{Dimension, Instant, Provider};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// What the model needs to know about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestMeta {
    /// Which API was called.
    pub provider: Provider,
    /// Who sent it: a key label or fingerprint (never the key itself).
    pub key: String,
    /// The requested model.
    pub model: String,
    /// Input tokens (see [`crate::tokens`]).
    pub input_tokens: u64,
    /// The request's `max_tokens`.
    pub max_tokens: u64,
    /// The output a success will produce (see [`crate::tokens::output_tokens_for`]).
    pub output_tokens: u64,
    /// Streaming requested.
    pub stream: bool,
}

impl RequestMeta {
    /// A non-streaming request.
    pub fn new(
        provider: Provider,
        key: impl Into<String>,
        model: impl Into<String>,
        input_tokens: u64,
        max_tokens: u64,
        output_tokens: u64,
    ) -> Self {
        RequestMeta {
            provider,
            key: key.into(),
            model: model.into(),
            input_tokens,
            max_tokens,
            output_tokens,
            stream: false,
        }
    }
}

/// A success's charge, to be settled with [`ProviderModel::settle`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Bucket set the charge went to.
    pub bucket: BucketKey,
    /// The requested model (what the answer is priced by).
    pub model: String,
    /// Input tokens charged.
    pub input_tokens: u64,
    /// Output tokens reserved (the request's `max_tokens`).
    pub reserved_output: u64,
    /// Output the answer will have.
    pub output_tokens: u64,
}

/// Identifies one (provider, key, model class) bucket set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BucketKey {
    /// Provider.
    pub provider: Provider,
    /// Key label or fingerprint.
    pub key: String,
    /// Model class.
    pub class: String,
}

/// How the provider answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// 200, charged per the grant.
    Success(Grant),
    /// 429 rate limit on `dimension`.
    RateLimited {
        /// The exceeded dimension.
        dimension: Dimension,
        /// Provider time until the request would fit (whole seconds, ≥ 1).
        retry_after: Duration,
        /// The dimension's per-minute limit.
        limit: u64,
        /// What was used of it: limit − remaining, as the headers say it
        /// (with a bucket shorter than a minute, the part of the limit not
        /// on offer counts as used; biases and rounding as in the headers).
        used: u64,
        /// What the request asked for.
        requested: u64,
    },
    /// 429 acceleration limit.
    SlowDown {
        /// Provider time until the ramp window ends (whole seconds, ≥ 1).
        retry_after: Duration,
    },
    /// 429 spend cap (Anthropic `enforced_spend_limit_reached`, OpenAI
    /// `insufficient_quota`).
    SpendCap,
    /// 402 `billing_error`.
    Billing,
    /// 401: the mock tracks no more keys (bounded memory).
    TooManyKeys,
    /// 429 (Gemini): the per-day request quota of the (key, model class)
    /// is used up ([`GeminiConfig::requests_per_day`]); it ends with the
    /// provider day.
    DailyQuota {
        /// The per-day limit.
        limit: u64,
        /// The small delay Google still gives beside a per-day quota:
        /// provider time to the next whole provider minute (exact, > 0).
        retry_after: Duration,
    },
    /// 429 (Gemini): a quota of 0, a model the key's tier does not have
    /// ([`GeminiConfig::limit_zero_models`]); no wait helps.
    QuotaNotGranted,
    /// 413 (Groq): the request alone (input + `max_tokens`) is more than
    /// the tokens-per-minute limit; it can never fit.
    RequestTooLarge {
        /// The tokens-per-minute limit.
        limit: u64,
        /// What the request asked for.
        requested: u64,
    },
    /// 429 (Mistral): the (key, model class)'s monthly tokens are spent
    /// ([`CompatibleConfig::tokens_per_month`]); it ends with the provider
    /// month.
    MonthlyQuota {
        /// The per-month token limit.
        limit: u64,
    },
    /// An injected fault answers instead (never a stall or stream fault).
    Fault(Fault),
}

/// One rate-limit window: what the headers report, and the true level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowView {
    /// Which bucket.
    pub dimension: Dimension,
    /// Per-minute limit.
    pub limit: u64,
    /// Whole units really left (the other client's consumption included):
    /// what a simulator's metrics and the oracle reason about.
    pub remaining: u64,
    /// What the `*-remaining` header says: `remaining`, plus what a
    /// capacity shortfall hides and [`BiasConfig::remaining_tokens_high`]
    /// (token dimensions), then rounded per
    /// [`MockConfig::remaining_rounding`].
    pub reported_remaining: u64,
    /// Provider time until the bucket is full again: at most its
    /// [`MockConfig::capacity_seconds`], more while it pays back a debt.
    pub reset: Duration,
}

/// The model's full answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// 1-based number of this request since the model was built.
    pub nth: u64,
    /// What is answered.
    pub outcome: Outcome,
    /// Rate-limit windows of the request's bucket set (after the charge),
    /// empty for money answers and faults.
    pub windows: Vec<WindowView>,
    /// Real time to wait before answering ([`Fault::Stall`]).
    pub stall: Option<Duration>,
    /// A stream fault to apply to a successful stream.
    pub stream_fault: Option<Fault>,
}

#[derive(Debug, Clone)]
struct Ramp {
    last: Instant,
    window_start: Instant,
    count: u64,
}

/// The provider model: buckets per (key, model class), acceleration,
/// spend, billing switch and the fault plan.
#[derive(Debug, Clone)]
pub struct ProviderModel {
    anthropic_limits: Limits,
    openai_limits: Limits,
    gemini_limits: Limits,
    bedrock_limits: Limits,
    gemini: GeminiConfig,
    /// Gemini's per-day request counts: (provider day, successes that day).
    days: HashMap<BucketKey, (u64, u64)>,
    /// The OpenAI surface's flavor and its settings.
    flavor: Flavor,
    compat: CompatibleConfig,
    /// Mistral's per-month token counts: (provider month, tokens).
    months: HashMap<BucketKey, (u64, u64)>,
    class_limits: BTreeMap<String, Limits>,
    model_classes: Vec<(String, String)>,
    acceleration: Option<AccelerationConfig>,
    capacity_secs: f64,
    count_rejected: bool,
    rounding: RemainingRounding,
    bias: BiasConfig,
    spend_cfg: SpendConfig,
    prices: Vec<ModelPrice>,
    usd_direct: f64,
    usd_batch: f64,
    billing: bool,
    max_keys: usize,
    buckets: HashMap<BucketKey, Vec<(Dimension, Bucket)>>,
    ramps: HashMap<(Provider, String), Ramp>,
    spend_usd: f64,
    settled: Settled,
    seen: u64,
    faults: FaultPlan,
}

/// Tokens the model billed for successes that ended: what a client's
/// accounting is compared against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settled {
    /// Successes settled (a cut or failed stream included).
    pub requests: u64,
    /// Input tokens billed.
    pub input_tokens: u64,
    /// Output tokens billed: what was generated and sent, so a stream cut
    /// after some events counts only the tokens of the events it sent.
    pub output_tokens: u64,
}

impl ProviderModel {
    /// A model with `config`'s limits, acceleration, spend, billing switch
    /// and faults.
    pub fn new(config: &MockConfig) -> Self {
        ProviderModel {
            anthropic_limits: config.anthropic_limits,
            openai_limits: config.openai_limits,
            gemini_limits: config.gemini_limits,
            bedrock_limits: config.bedrock_limits,
            gemini: config.gemini.clone(),
            days: HashMap::new(),
            flavor: config.flavor,
            compat: config.compatible.clone(),
            months: HashMap::new(),
            class_limits: config.class_limits.clone(),
            model_classes: config
                .model_classes
                .iter()
                .map(|r| (r.prefix.clone(), r.class.clone()))
                .collect(),
            acceleration: config.acceleration,
            capacity_secs: capacity_secs(config.capacity_seconds),
            count_rejected: config.count_rejected,
            rounding: config.remaining_rounding,
            bias: config.bias.clamped(),
            spend_cfg: config.spend,
            prices: config.prices.clone(),
            usd_direct: 0.0,
            usd_batch: 0.0,
            billing: config.billing_error,
            max_keys: config.max_keys,
            buckets: HashMap::new(),
            ramps: HashMap::new(),
            spend_usd: 0.0,
            settled: Settled::default(),
            seen: 0,
            faults: FaultPlan::new(config.faults.clone(), config.seed),
        }
    }

    /// Answer 402 to everything from now on (or stop).
    pub fn set_billing_error(&mut self, on: bool) {
        self.billing = on;
    }

    /// Sets or removes the spend cap (USD).
    pub fn set_spend_cap(&mut self, cap_usd: Option<f64>) {
        self.spend_cfg.cap_usd = cap_usd;
    }

    /// Sets or removes the acceleration limit (ramp state starts over).
    pub fn set_acceleration(&mut self, acceleration: Option<AccelerationConfig>) {
        self.acceleration = acceleration;
        self.ramps.clear();
    }

    /// Replaces the fault rules.
    pub fn set_faults(&mut self, rules: Vec<FaultRule>) {
        self.faults.set_rules(rules);
    }

    /// Total spend so far, USD (direct answers and batch items).
    pub fn spend_usd(&self) -> f64 {
        self.spend_usd
    }

    /// What the direct answers cost so far, USD.
    pub fn usd_direct(&self) -> f64 {
        self.usd_direct
    }

    /// What the batch items cost so far, USD (at the batch discount).
    pub fn usd_batch(&self) -> f64 {
        self.usd_batch
    }

    /// The price of `model` ([`MockConfig::prices`], else the flat
    /// [`SpendConfig`] prices).
    pub fn price_of(&self, model: &str) -> ModelPrice {
        crate::config::price_of(&self.prices, &self.spend_cfg, model)
    }

    /// Adds a batch item's cost (already discounted) to the spend: batch
    /// work charges no bucket but counts toward the spend cap.
    pub fn add_batch_cost(&mut self, usd: f64) {
        if usd.is_finite() && usd > 0.0 {
            self.usd_batch += usd;
            self.spend_usd += usd;
        }
    }

    /// What the model billed for the successes that ended so far.
    pub fn settled(&self) -> Settled {
        self.settled
    }

    /// Requests handled so far.
    pub fn requests_seen(&self) -> u64 {
        self.seen
    }

    /// The bucket class of `model`: the first matching configured prefix,
    /// else the model with a trailing `-YYYYMMDD` removed.
    pub fn model_class(&self, model: &str) -> String {
        for (prefix, class) in &self.model_classes {
            if model.starts_with(prefix.as_str()) {
                return class.clone();
            }
        }
        match model.rsplit_once('-') {
            Some((head, date)) if date.len() == 8 && date.bytes().all(|b| b.is_ascii_digit()) => {
                head.to_string()
            }
            _ => model.to_string(),
        }
    }

    fn limits_for(&self, provider: Provider, class: &str) -> Limits {
        if let Some(l) = self.class_limits.get(class) {
            return *l;
        }
        match provider {
            Provider::Openai => self.openai_limits,
            Provider::Gemini => self.gemini_limits,
            Provider::Bedrock => self.bedrock_limits,
            _ => self.anthropic_limits,
        }
    }

    fn spend_capped(&self) -> bool {
        self.spend_cfg
            .cap_usd
            .is_some_and(|cap| self.spend_usd >= cap)
    }

    /// Seconds of refill each bucket's headers imply (the configured
    /// [`MockConfig::capacity_seconds`], made valid); a
    /// [`BiasConfig::capacity_shortfall`] makes the real buckets smaller.
    pub fn capacity_seconds(&self) -> f64 {
        self.capacity_secs
    }

    /// The biases in effect ([`MockConfig::bias`], clamped).
    pub fn bias(&self) -> BiasConfig {
        self.bias
    }

    /// What a `*-remaining` header of `dimension` says for a bucket whose
    /// headers show `shown` units (the level plus a shortfall's hidden
    /// part): [`BiasConfig::remaining_tokens_high`] added to token
    /// dimensions, then rounded per [`MockConfig::remaining_rounding`].
    fn report(&self, provider: Provider, dimension: Dimension, shown: u64) -> u64 {
        let biased = if is_token_dimension(dimension) {
            shown.saturating_add(self.bias.remaining_tokens_high)
        } else {
            shown
        };
        self.rounding.show(provider, dimension, biased)
    }

    /// Decides the answer to one request at provider time `now`, charging
    /// the buckets on success (and a request on a rate-limit answer when
    /// [`MockConfig::count_rejected`] is set).
    pub fn handle(&mut self, meta: &RequestMeta, now: Instant) -> Answer {
        self.seen += 1;
        let mut answer = Answer {
            nth: self.seen,
            outcome: Outcome::SpendCap,
            windows: Vec::new(),
            stall: None,
            stream_fault: None,
        };
        if self.billing {
            answer.outcome = Outcome::Billing;
            return answer;
        }
        if self.spend_capped() {
            return answer;
        }
        match self.faults.pick(self.seen, meta.provider, &meta.model, now) {
            Some(Fault::Stall { ms }) => answer.stall = Some(Duration::from_millis(ms)),
            Some(
                f @ (Fault::StreamCut { .. }
                | Fault::StreamError { .. }
                | Fault::ErrorInBody { .. }),
            ) if meta.stream => {
                answer.stream_fault = Some(f);
            }
            // A stream fault leaves a non-streaming request alone.
            Some(Fault::StreamCut { .. } | Fault::StreamError { .. }) => {}
            Some(f) => {
                answer.outcome = Outcome::Fault(f);
                return answer;
            }
            None => {}
        }
        if meta.provider == Provider::Gemini && self.gemini.grants_nothing(&meta.model) {
            answer.outcome = Outcome::QuotaNotGranted;
            return answer;
        }
        let class = self.model_class(&meta.model);
        let bkey = BucketKey {
            provider: meta.provider,
            key: meta.key.clone(),
            class,
        };
        if !self.buckets.contains_key(&bkey) {
            if self.buckets.len() >= self.max_keys {
                answer.outcome = Outcome::TooManyKeys;
                return answer;
            }
            let limits = self.limits_for(meta.provider, &bkey.class);
            let set = new_buckets(limits, self.capacity_secs, self.bias, now);
            self.buckets.insert(bkey.clone(), set);
        }
        if let Some(slow) = self.acceleration_check(meta, now) {
            self.charge_rejected(&bkey, now);
            answer.outcome = slow;
            answer.windows = self.windows(&bkey, now);
            return answer;
        }
        if let Some(daily) = self.daily_quota(&bkey, now) {
            answer.outcome = daily;
            answer.windows = self.windows(&bkey, now);
            return answer;
        }
        if let Some(refused) = self.compatible_check(meta, &bkey, now) {
            answer.outcome = refused;
            answer.windows = self.windows(&bkey, now);
            return answer;
        }
        let set = self.buckets.get_mut(&bkey).expect("inserted above");
        if self.bias.burst_tokens > 0 && self.seen == self.bias.burst_at_request {
            // `BiasConfig::burst_tokens`: another client's one-off burst.
            for (dim, bucket) in set.iter_mut() {
                if is_token_dimension(*dim) {
                    bucket.take(self.bias.burst_tokens, now);
                }
            }
        }
        let refused = set.iter_mut().position(|(dim, bucket)| {
            !bucket.fits(charge(*dim, meta.input_tokens, meta.max_tokens), now)
        });
        if let Some(i) = refused {
            self.charge_rejected(&bkey, now);
            let set = self.buckets.get_mut(&bkey).expect("inserted above");
            let (dim, bucket) = &mut set[i];
            let dim = *dim;
            let need = charge(dim, meta.input_tokens, meta.max_tokens);
            let limit = bucket.limit();
            let retry_after = whole_secs(bucket.shown_wait_for(need, now));
            let shown = bucket.shown_remaining(now);
            answer.outcome = Outcome::RateLimited {
                dimension: dim,
                retry_after,
                limit,
                used: limit.saturating_sub(self.report(meta.provider, dim, shown)),
                requested: need,
            };
            answer.windows = self.windows(&bkey, now);
            return answer;
        }
        for (dim, bucket) in set.iter_mut() {
            bucket.take(charge(*dim, meta.input_tokens, meta.max_tokens), now);
        }
        self.count_day(&bkey, now);
        self.count_month(&bkey, meta, now);
        answer.windows = self.windows(&bkey, now);
        answer.outcome = Outcome::Success(Grant {
            bucket: bkey,
            model: meta.model.clone(),
            input_tokens: meta.input_tokens,
            reserved_output: meta.max_tokens,
            output_tokens: meta.output_tokens,
        });
        answer
    }

    /// Ends a success: corrects the output charge from `max_tokens` to
    /// `actual_output` and adds the request's cost to the spend.
    pub fn settle(&mut self, grant: &Grant, actual_output: u64, now: Instant) {
        if let Some(set) = self.buckets.get_mut(&grant.bucket) {
            for (dim, bucket) in set.iter_mut() {
                if matches!(dim, Dimension::OutputTokens | Dimension::Tokens) {
                    if actual_output <= grant.reserved_output {
                        bucket.give_back(grant.reserved_output - actual_output, now);
                    } else {
                        bucket.take(actual_output - grant.reserved_output, now);
                    }
                }
            }
        }
        self.settled.requests += 1;
        self.settled.input_tokens = self.settled.input_tokens.saturating_add(grant.input_tokens);
        self.settled.output_tokens = self.settled.output_tokens.saturating_add(actual_output);
        let usd = self
            .price_of(&grant.model)
            .cost(grant.input_tokens, actual_output);
        self.usd_direct += usd;
        self.spend_usd += usd;
    }

    /// The rate-limit windows of a bucket set at `now`: the true levels
    /// and what the headers report.
    pub fn windows(&mut self, bkey: &BucketKey, now: Instant) -> Vec<WindowView> {
        let Some(set) = self.buckets.get_mut(bkey) else {
            return Vec::new();
        };
        let raw: Vec<(Dimension, u64, u64, u64, Duration)> = set
            .iter_mut()
            .map(|(dim, b)| {
                (
                    *dim,
                    b.limit(),
                    b.remaining(now),
                    b.shown_remaining(now),
                    b.shown_until_full(now),
                )
            })
            .collect();
        raw.into_iter()
            .map(|(dimension, limit, remaining, shown, reset)| WindowView {
                dimension,
                limit,
                remaining,
                reported_remaining: self.report(bkey.provider, dimension, shown),
                reset,
            })
            .collect()
    }

    /// Would the next request be answered for money (the billing switch is
    /// on, or the spend cap is reached)? Read-only. Like
    /// [`ProviderModel::admission_at`], for the simulator's `oracle`, which
    /// reads the provider's true state: a money answer charges no bucket,
    /// so pacing alone would not hold such sends back.
    pub fn refuses_for_money(&self) -> bool {
        self.billing || self.spend_capped()
    }

    /// The money answer the next request would get ([`Outcome::Billing`]
    /// when the billing switch is on, else [`Outcome::SpendCap`] when the
    /// cap is reached), if any. Read-only: what a batch create is refused
    /// with.
    pub fn money_outcome(&self) -> Option<Outcome> {
        if self.billing {
            Some(Outcome::Billing)
        } else if self.spend_capped() {
            Some(Outcome::SpendCap)
        } else {
            None
        }
    }

    /// The earliest provider time at or after `now` at which [`handle`]
    /// would pass `meta` through the acceleration limit and every bucket,
    /// if nothing else were sent or settled in between. Read-only: no
    /// bucket, ramp, fault or counter changes.
    ///
    /// Why it exists: the simulator's `oracle` client reads the provider's
    /// true state through it, to measure the best any client could do — a
    /// yardstick, not something a client of a real provider can know.
    /// It reads the true state, so the biases of [`MockConfig::bias`] are
    /// in: a capacity shortfall (the real, smaller buckets) and a second
    /// client's share of the refill; a header reporting more tokens than
    /// there are changes nothing here.
    /// Gemini's per-day quota is in (the next provider day, when it is used
    /// up); a model the tier lacks ("limit: 0") is left out, like money.
    /// Money (billing, spend cap) and injected faults are left out: they
    /// are not pacing, and a fault draw is random. Both parts only get
    /// better with time (buckets refill; an acceleration window ends or a
    /// new one opens with room), so the later of the two is the answer.
    /// A ramp allowing no request at all (`max_requests` 0) is waited out
    /// to its window's end.
    ///
    /// ```
    /// use ratewise_core::{Instant, Provider};
    /// use ratewise_mock::model::{Outcome, ProviderModel, RequestMeta};
    /// use ratewise_mock::{Limits, MockConfig};
    ///
    /// let cfg = MockConfig {
    ///     anthropic_limits: Limits { requests_per_minute: Some(60), ..Limits::default() },
    ///     capacity_seconds: 1.0,
    ///     ..MockConfig::default()
    /// };
    /// let mut model = ProviderModel::new(&cfg);
    /// let meta = RequestMeta::new(Provider::Anthropic, "k", "claude-sonnet-4-5", 10, 10, 5);
    /// let t0 = Instant::ZERO;
    /// assert_eq!(model.admission_at(&meta, t0), t0);
    /// assert!(matches!(model.handle(&meta, t0).outcome, Outcome::Success(_)));
    /// // one request per second: the next fits a second later
    /// let next = model.admission_at(&meta, t0);
    /// assert!((next - t0).as_secs_f64() >= 1.0 && (next - t0).as_secs_f64() < 1.001);
    /// assert!(matches!(model.handle(&meta, next).outcome, Outcome::Success(_)));
    /// ```
    ///
    /// [`handle`]: ProviderModel::handle
    pub fn admission_at(&self, meta: &RequestMeta, now: Instant) -> Instant {
        let bkey = BucketKey {
            provider: meta.provider,
            key: meta.key.clone(),
            class: self.model_class(&meta.model),
        };
        let mut set = match self.buckets.get(&bkey) {
            Some(set) => set.clone(),
            None => new_buckets(
                self.limits_for(meta.provider, &bkey.class),
                self.capacity_secs,
                self.bias,
                now,
            ),
        };
        let wait = set
            .iter_mut()
            .map(|(dim, b)| b.wait_for(charge(*dim, meta.input_tokens, meta.max_tokens), now))
            .max()
            .unwrap_or(Duration::ZERO);
        let mut at = (now + wait)
            .max(self.ramp_admits_at(meta, now))
            .max(self.day_admits_at(&bkey, now));
        // The refill is floating point: step past a rounding that leaves a
        // bucket a hair short at the computed instant.
        for _ in 0..1_000 {
            let fits = set.iter().all(|(dim, b)| {
                b.clone()
                    .fits(charge(*dim, meta.input_tokens, meta.max_tokens), at)
            });
            if fits {
                break;
            }
            at = at + Duration::from_micros(1);
        }
        at
    }

    /// The earliest time at or after `now` the acceleration limit would
    /// let `meta` through (see [`ProviderModel::admission_at`]); the same
    /// rule as `acceleration_check`, evaluated without recording anything.
    fn ramp_admits_at(&self, meta: &RequestMeta, now: Instant) -> Instant {
        let Some(acc) = self.acceleration else {
            return now;
        };
        let (idle, window) = (secs(acc.idle_secs), secs(acc.window_secs));
        let ramp = self.ramps.get(&(meta.provider, meta.key.clone()));
        let admits = |t: Instant| {
            let (start, count) = match ramp {
                Some(r) if t.saturating_duration_since(r.last) < idle => (r.window_start, r.count),
                // No ramp yet, or idle long enough: a new window opens at t.
                _ => (t, 0),
            };
            t >= start.saturating_add(window) || count < acc.max_requests
        };
        let mut candidates = vec![now];
        if let Some(r) = ramp {
            candidates.push(r.window_start.saturating_add(window));
            candidates.push(r.last.saturating_add(idle));
        }
        candidates.retain(|t| *t >= now);
        candidates.sort();
        candidates
            .into_iter()
            .find(|t| admits(*t))
            .unwrap_or_else(|| now.saturating_add(window))
    }

    /// Gemini's per-day quota ([`GeminiConfig::requests_per_day`]): the
    /// 429 when the (key, model class) has used it up this provider day.
    fn daily_quota(&mut self, bkey: &BucketKey, now: Instant) -> Option<Outcome> {
        let limit = self.day_limit(bkey.provider)?;
        let day = provider_day(now);
        let used = match self.days.get(bkey) {
            Some(&(d, n)) if d == day => n,
            _ => 0,
        };
        (used >= limit).then(|| Outcome::DailyQuota {
            limit,
            retry_after: to_next_minute(now),
        })
    }

    /// Counts a success against the per-day quota (when there is one).
    fn count_day(&mut self, bkey: &BucketKey, now: Instant) {
        if self.day_limit(bkey.provider).is_none() {
            return;
        }
        let day = provider_day(now);
        let e = self.days.entry(bkey.clone()).or_insert((day, 0));
        if e.0 != day {
            *e = (day, 0);
        }
        e.1 += 1;
    }

    fn day_limit(&self, provider: Provider) -> Option<u64> {
        match (provider, self.flavor) {
            (Provider::Gemini, _) => self.gemini.requests_per_day,
            (Provider::Openai, Flavor::Azure | Flavor::Groq) => self.compat.requests_per_day,
            _ => None,
        }
    }

    fn month_limit(&self, provider: Provider) -> Option<u64> {
        match (provider, self.flavor) {
            (Provider::Openai, Flavor::Mistral) => self.compat.tokens_per_month,
            _ => None,
        }
    }

    /// The flavors' own refusals before the buckets: Groq's 413 for a
    /// request larger than its TPM limit, Mistral's spent month.
    fn compatible_check(
        &mut self,
        meta: &RequestMeta,
        bkey: &BucketKey,
        now: Instant,
    ) -> Option<Outcome> {
        if meta.provider != Provider::Openai {
            return None;
        }
        if self.flavor == Flavor::Groq {
            let requested = meta.input_tokens.saturating_add(meta.max_tokens);
            let tpm = self.buckets.get(bkey).and_then(|set| {
                set.iter()
                    .find(|(d, _)| *d == Dimension::Tokens)
                    .map(|(_, b)| b.limit())
            });
            if let Some(limit) = tpm.filter(|l| requested > *l) {
                return Some(Outcome::RequestTooLarge { limit, requested });
            }
        }
        let limit = self.month_limit(meta.provider)?;
        let used = self.month_used(bkey, now);
        (used >= limit).then_some(Outcome::MonthlyQuota { limit })
    }

    fn month_used(&self, bkey: &BucketKey, now: Instant) -> u64 {
        match self.months.get(bkey) {
            Some(&(m, n)) if m == provider_month(now) => n,
            _ => 0,
        }
    }

    /// Counts a success's tokens (input + its planned output) against the
    /// monthly quota (when there is one).
    fn count_month(&mut self, bkey: &BucketKey, meta: &RequestMeta, now: Instant) {
        if self.month_limit(bkey.provider).is_none() {
            return;
        }
        let month = provider_month(now);
        let e = self.months.entry(bkey.clone()).or_insert((month, 0));
        if e.0 != month {
            *e = (month, 0);
        }
        e.1 =
            e.1.saturating_add(meta.input_tokens.saturating_add(meta.output_tokens));
    }

    /// The per-day and per-month quotas of `meta`'s (key, model class) at
    /// `now`, when its provider has them: what Groq's
    /// `x-ratelimit-*-requests` and Mistral's `x-ratelimit-*-tokens-month`
    /// report. Read-only.
    pub fn long_quotas(&self, meta: &RequestMeta, now: Instant) -> LongQuotas {
        let bkey = BucketKey {
            provider: meta.provider,
            key: meta.key.clone(),
            class: self.model_class(&meta.model),
        };
        let day = self.day_limit(meta.provider).map(|limit| {
            let used = match self.days.get(&bkey) {
                Some(&(d, n)) if d == provider_day(now) => n,
                _ => 0,
            };
            let end = Duration::from_secs((provider_day(now) + 1).saturating_mul(DAY_SECS));
            LongQuota {
                limit,
                remaining: limit.saturating_sub(used),
                reset: end.saturating_sub(now.since_origin()),
            }
        });
        let month = self.month_limit(meta.provider).map(|limit| {
            let end = Duration::from_secs((provider_month(now) + 1).saturating_mul(MONTH_SECS));
            LongQuota {
                limit,
                remaining: limit.saturating_sub(self.month_used(&bkey, now)),
                reset: end.saturating_sub(now.since_origin()),
            }
        });
        LongQuotas { day, month }
    }

    /// When the per-day quota would let `bkey` in again: `now`, or the
    /// start of the next provider day.
    fn day_admits_at(&self, bkey: &BucketKey, now: Instant) -> Instant {
        let Some(limit) = self.day_limit(bkey.provider) else {
            return now;
        };
        let day = provider_day(now);
        match self.days.get(bkey) {
            Some(&(d, n)) if d == day && n >= limit => {
                let next = Duration::from_secs((day + 1).saturating_mul(DAY_SECS));
                Instant::ZERO.saturating_add(next).max(now)
            }
            _ => now,
        }
    }

    /// A rate-limit answer takes one request when rejected requests count.
    fn charge_rejected(&mut self, bkey: &BucketKey, now: Instant) {
        if !self.count_rejected {
            return;
        }
        if let Some(set) = self.buckets.get_mut(bkey) {
            for (dim, bucket) in set.iter_mut() {
                if *dim == Dimension::Requests {
                    bucket.take(1, now);
                }
            }
        }
    }

    fn acceleration_check(&mut self, meta: &RequestMeta, now: Instant) -> Option<Outcome> {
        let acc = self.acceleration?;
        let idle = secs(acc.idle_secs);
        let window = secs(acc.window_secs);
        let ramp = self
            .ramps
            .entry((meta.provider, meta.key.clone()))
            .or_insert(Ramp {
                last: now,
                window_start: now,
                count: 0,
            });
        if now - ramp.last >= idle {
            ramp.window_start = now;
            ramp.count = 0;
        }
        ramp.last = now;
        let end = ramp.window_start + window;
        if now >= end {
            return None;
        }
        ramp.count += 1;
        if ramp.count > acc.max_requests {
            Some(Outcome::SlowDown {
                retry_after: whole_secs(end - now),
            })
        } else {
            None
        }
    }
}

/// Seconds of a provider day (Gemini's per-day quota).
const DAY_SECS: u64 = 86_400;

/// Seconds of a provider month (Mistral's monthly quota): 30 days.
const MONTH_SECS: u64 = 30 * DAY_SECS;

/// The provider month `now` falls in, counted from the model's origin.
fn provider_month(now: Instant) -> u64 {
    now.since_origin().as_secs() / MONTH_SECS
}

/// A quota longer than a minute, as its headers report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongQuota {
    /// The limit (requests per day, tokens per month).
    pub limit: u64,
    /// What is left of it.
    pub remaining: u64,
    /// Provider time until the period ends.
    pub reset: Duration,
}

/// The per-day and per-month quotas of one (key, model class)
/// ([`ProviderModel::long_quotas`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LongQuotas {
    /// Requests per day (Gemini, Groq, Azure).
    pub day: Option<LongQuota>,
    /// Tokens per month (Mistral).
    pub month: Option<LongQuota>,
}

/// The provider day `now` falls in, counted from the model's origin.
fn provider_day(now: Instant) -> u64 {
    now.since_origin().as_secs() / DAY_SECS
}

/// Provider time from `now` to the next whole provider minute (60 s on one).
fn to_next_minute(now: Instant) -> Duration {
    let into = now.since_origin().as_nanos() % 60_000_000_000;
    Duration::from_nanos((60_000_000_000 - into) as u64)
}

/// Largest bucket capacity, seconds of refill (a day).
pub const MAX_CAPACITY_SECS: f64 = 86_400.0;

/// A configured capacity made valid: not a positive finite number → 60,
/// at most [`MAX_CAPACITY_SECS`].
fn capacity_secs(s: f64) -> f64 {
    if s.is_finite() && s > 0.0 {
        s.min(MAX_CAPACITY_SECS)
    } else {
        crate::bucket::MINUTE_SECS
    }
}

fn new_buckets(
    limits: Limits,
    capacity_secs: f64,
    bias: BiasConfig,
    now: Instant,
) -> Vec<(Dimension, Bucket)> {
    [
        (Dimension::Requests, limits.requests_per_minute),
        (Dimension::InputTokens, limits.input_tokens_per_minute),
        (Dimension::OutputTokens, limits.output_tokens_per_minute),
        (Dimension::Tokens, limits.tokens_per_minute),
    ]
    .into_iter()
    .filter_map(|(d, l)| {
        l.map(|l| {
            let b = Bucket::with_capacity_secs(l, capacity_secs, now)
                .biased(bias.capacity_shortfall, bias.other_client_share);
            (d, b)
        })
    })
    .collect()
}

/// What a request charges to one dimension at its start.
fn charge(dim: Dimension, input: u64, max_tokens: u64) -> u64 {
    match dim {
        Dimension::Requests => 1,
        Dimension::InputTokens => input,
        Dimension::OutputTokens => max_tokens,
        // `Tokens`, and any dimension added later: charge the most.
        _ => input.saturating_add(max_tokens),
    }
}

/// Rounds up to whole seconds, at least 1 (providers say whole seconds).
fn whole_secs(d: Duration) -> Duration {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    Duration::from_secs(s.max(1))
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(l: Limits) -> MockConfig {
        MockConfig {
            anthropic_limits: l,
            ..MockConfig::default()
        }
    }

    fn meta(input: u64, max: u64, out: u64) -> RequestMeta {
        RequestMeta::new(
            Provider::Anthropic,
            "k",
            "claude-sonnet-4-5-20250929",
            input,
            max,
            out,
        )
    }

    #[test]
    fn names_the_exceeded_dimension_and_when_it_fits() {
        let mut m = ProviderModel::new(&cfg(Limits {
            requests_per_minute: Some(100),
            input_tokens_per_minute: Some(600),
            output_tokens_per_minute: Some(6000),
            tokens_per_minute: None,
        }));
        let t0 = Instant::ZERO;
        assert!(matches!(
            m.handle(&meta(500, 10, 5), t0).outcome,
            Outcome::Success(_)
        ));
        match m.handle(&meta(300, 10, 5), t0).outcome {
            Outcome::RateLimited {
                dimension,
                retry_after,
                limit,
                used,
                requested,
            } => {
                assert_eq!(dimension, Dimension::InputTokens);
                // 200 more tokens at 10/s
                assert_eq!(retry_after, Duration::from_secs(20));
                // 100 left, which Anthropic's headers round to 0: used
                // is what the headers say
                assert_eq!((limit, used, requested), (600, 600, 300));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn output_is_charged_from_max_tokens_then_corrected() {
        let mut m = ProviderModel::new(&cfg(Limits {
            output_tokens_per_minute: Some(1000),
            ..Limits::default()
        }));
        let t0 = Instant::ZERO;
        let a = m.handle(&meta(1, 800, 100), t0);
        let Outcome::Success(g) = a.outcome else {
            panic!()
        };
        assert_eq!(a.windows[0].remaining, 200);
        // while the first runs, a second max_tokens=800 does not fit
        assert!(matches!(
            m.handle(&meta(1, 800, 100), t0).outcome,
            Outcome::RateLimited {
                dimension: Dimension::OutputTokens,
                ..
            }
        ));
        m.settle(&g, 100, t0);
        assert_eq!(m.windows(&g.bucket, t0)[0].remaining, 900);
        assert!(matches!(
            m.handle(&meta(1, 800, 100), t0).outcome,
            Outcome::Success(_)
        ));
    }

    fn openai(input: u64, max: u64, out: u64) -> RequestMeta {
        RequestMeta::new(Provider::Openai, "k", "gpt-4o-mini", input, max, out)
    }

    fn ok(o: &Outcome) -> bool {
        matches!(o, Outcome::Success(_))
    }

    #[test]
    fn a_ten_second_bucket_admits_ten_seconds_of_refill_in_a_burst() {
        let mut c = cfg(Limits {
            requests_per_minute: Some(120),
            ..Limits::default()
        });
        c.capacity_seconds = 10.0;
        let mut m = ProviderModel::new(&c);
        assert_eq!(m.capacity_seconds(), 10.0);
        // idle for an hour: still only 10 s of 2 per second on offer
        let t = Instant::from_millis(3_600_000);
        let admitted = (0..100)
            .filter(|_| ok(&m.handle(&meta(1, 1, 1), t).outcome))
            .count();
        assert_eq!(admitted, 20);
        let a = m.handle(&meta(1, 1, 1), t);
        let Outcome::RateLimited {
            retry_after,
            limit,
            used,
            ..
        } = a.outcome
        else {
            panic!("{:?}", a.outcome)
        };
        // one request refills in 0.5 s: whole seconds, at least 1
        assert_eq!(retry_after, Duration::from_secs(1));
        assert_eq!((limit, used), (120, 120));
        let w = a.windows[0];
        assert_eq!((w.limit, w.remaining), (120, 0));
        assert_eq!(w.reset, Duration::from_secs(10));
        // the rate is still the limit: 2 per second
        let t1 = t + Duration::from_secs(1);
        let more = (0..10)
            .filter(|_| ok(&m.handle(&meta(1, 1, 1), t1).outcome))
            .count();
        assert_eq!(more, 2);
        // a bucket never used reports a full 10 s bucket
        let fresh = BucketKey {
            provider: Provider::Anthropic,
            key: "k2".into(),
            class: "claude-sonnet-4-5".into(),
        };
        let mut r = meta(1, 1, 1);
        r.key = "k2".into();
        let a = m.handle(&r, t);
        assert!(ok(&a.outcome));
        assert_eq!(a.windows[0].remaining, 19);
        assert!(a.windows[0].reset <= Duration::from_secs(10));
        assert_eq!(
            m.windows(&fresh, t + Duration::from_secs(10))[0].remaining,
            20
        );
    }

    #[test]
    fn capacity_defaults_to_a_minute_and_nonsense_means_a_minute() {
        assert_eq!(
            ProviderModel::new(&MockConfig::default()).capacity_seconds(),
            60.0
        );
        for (bad, want) in [(0.0, 60.0), (-5.0, 60.0), (f64::NAN, 60.0), (1e9, 86_400.0)] {
            let c = MockConfig {
                capacity_seconds: bad,
                ..MockConfig::default()
            };
            assert_eq!(ProviderModel::new(&c).capacity_seconds(), want, "{bad}");
        }
    }

    #[test]
    fn rejected_requests_take_a_request_but_no_tokens_when_counted() {
        let limits = Limits {
            requests_per_minute: Some(60),
            tokens_per_minute: Some(600),
            ..Limits::default()
        };
        let t0 = Instant::ZERO;
        for counted in [false, true] {
            let c = MockConfig {
                openai_limits: limits,
                count_rejected: counted,
                ..MockConfig::default()
            };
            let mut m = ProviderModel::new(&c);
            // input + max_tokens = 500 of 600 tokens
            assert!(ok(&m.handle(&openai(100, 400, 10), t0).outcome));
            // refused on tokens, five times
            for _ in 0..5 {
                let a = m.handle(&openai(100, 400, 10), t0);
                assert!(matches!(
                    a.outcome,
                    Outcome::RateLimited {
                        dimension: Dimension::Tokens,
                        ..
                    }
                ));
            }
            let key = BucketKey {
                provider: Provider::Openai,
                key: "k".into(),
                class: "gpt-4o-mini".into(),
            };
            let w = m.windows(&key, t0);
            let requests = w
                .iter()
                .find(|w| w.dimension == Dimension::Requests)
                .unwrap();
            let tokens = w.iter().find(|w| w.dimension == Dimension::Tokens).unwrap();
            assert_eq!(
                requests.remaining,
                if counted { 54 } else { 59 },
                "{counted}"
            );
            assert_eq!(tokens.remaining, 100, "rejections never charge tokens");
        }
    }

    #[test]
    fn counted_rejections_dig_the_request_bucket_deeper() {
        let c = MockConfig {
            openai_limits: Limits {
                requests_per_minute: Some(60),
                ..Limits::default()
            },
            capacity_seconds: 2.0,
            count_rejected: true,
            ..MockConfig::default()
        };
        let mut m = ProviderModel::new(&c);
        let t0 = Instant::ZERO;
        assert!(ok(&m.handle(&openai(1, 1, 1), t0).outcome));
        assert!(ok(&m.handle(&openai(1, 1, 1), t0).outcome));
        // empty: each refusal takes a request and pushes its retry-after out
        let mut waits = Vec::new();
        for _ in 0..3 {
            let a = m.handle(&openai(1, 1, 1), t0);
            let Outcome::RateLimited {
                dimension,
                retry_after,
                ..
            } = a.outcome
            else {
                panic!("{:?}", a.outcome)
            };
            assert_eq!(dimension, Dimension::Requests);
            assert_eq!(a.windows[0].remaining, 0);
            waits.push(retry_after.as_secs());
        }
        assert_eq!(waits, vec![2, 3, 4]);
        // a client that waited 2 s, as the first answer said, is refused again
        assert!(!ok(&m
            .handle(&openai(1, 1, 1), t0 + Duration::from_secs(2))
            .outcome));
        // a client that stops knocking gets in once the debt is paid
        assert!(ok(&m
            .handle(&openai(1, 1, 1), t0 + Duration::from_secs(6))
            .outcome));
    }

    #[test]
    fn acceleration_refusals_count_when_rejected_requests_count() {
        let mut c = cfg(Limits {
            requests_per_minute: Some(60),
            ..Limits::default()
        });
        c.count_rejected = true;
        c.acceleration = Some(AccelerationConfig {
            idle_secs: 30.0,
            window_secs: 10.0,
            max_requests: 1,
        });
        let mut m = ProviderModel::new(&c);
        let t0 = Instant::ZERO;
        assert!(ok(&m.handle(&meta(1, 1, 1), t0).outcome));
        let a = m.handle(&meta(1, 1, 1), t0);
        assert!(matches!(a.outcome, Outcome::SlowDown { .. }));
        assert_eq!(a.windows[0].remaining, 58);
    }

    #[test]
    fn a_request_larger_than_the_bucket_is_admitted_by_a_full_bucket_with_a_debt() {
        // OTPM 12 000 over 2 s: 400 output tokens in the bucket
        let mut c = cfg(Limits {
            output_tokens_per_minute: Some(12_000),
            ..Limits::default()
        });
        c.capacity_seconds = 2.0;
        let mut m = ProviderModel::new(&c);
        let t0 = Instant::ZERO;
        let a = m.handle(&meta(10, 4096, 300), t0);
        let Outcome::Success(g) = a.outcome else {
            panic!("{:?}", a.outcome)
        };
        assert_eq!(a.windows[0].remaining, 0);
        // 3696 of debt plus 400 of bucket at 200 per second
        assert_eq!(a.windows[0].reset, Duration::from_millis(20_480));
        // the same again is refused until the bucket is full, and told when
        match m.handle(&meta(10, 4096, 300), t0).outcome {
            Outcome::RateLimited {
                dimension,
                retry_after,
                requested,
                ..
            } => {
                assert_eq!(dimension, Dimension::OutputTokens);
                assert_eq!(retry_after, Duration::from_secs(21));
                assert_eq!(requested, 4096);
            }
            other => panic!("{other:?}"),
        }
        // the answer's actual output (300) is what stays charged
        m.settle(&g, 300, t0);
        assert_eq!(m.windows(&g.bucket, t0)[0].remaining, 100);
        assert!(ok(&m
            .handle(&meta(10, 4096, 300), t0 + Duration::from_secs(2))
            .outcome));
        // without the settle's refund the debt would still be paid at the limit
        let mut m = ProviderModel::new(&c);
        assert!(ok(&m.handle(&meta(10, 4096, 300), t0).outcome));
        let at = |ms| t0 + Duration::from_millis(ms);
        assert!(!ok(&m.handle(&meta(10, 4096, 300), at(20_479)).outcome));
        // (1 ms past the reset: the refill is floating point)
        assert!(ok(&m.handle(&meta(10, 4096, 300), at(20_481)).outcome));
    }

    #[test]
    fn openai_charges_tpm_from_max_tokens_at_admission() {
        let c = MockConfig {
            openai_limits: Limits {
                tokens_per_minute: Some(60_000),
                ..Limits::default()
            },
            capacity_seconds: 2.0,
            ..MockConfig::default()
        };
        let mut m = ProviderModel::new(&c);
        let t0 = Instant::ZERO;
        // 2000 tokens in the bucket; input 500 + max_tokens 1024 is charged
        let a = m.handle(&openai(500, 1024, 100), t0);
        let Outcome::Success(g) = a.outcome else {
            panic!()
        };
        assert_eq!(a.windows[0].remaining, 476);
        m.settle(&g, 100, t0);
        assert_eq!(m.windows(&g.bucket, t0)[0].remaining, 1400);
        // input + max_tokens above the whole bucket waits for a full one
        assert!(!ok(&m.handle(&openai(1500, 1024, 100), t0).outcome));
        assert!(ok(&m
            .handle(&openai(1500, 1024, 100), t0 + Duration::from_secs(1))
            .outcome));
    }

    #[test]
    fn model_classes_share_buckets() {
        let mut m = ProviderModel::new(&cfg(Limits {
            requests_per_minute: Some(1),
            ..Limits::default()
        }));
        assert_eq!(
            m.model_class("claude-sonnet-4-5-20250929"),
            "claude-sonnet-4-5"
        );
        let t0 = Instant::ZERO;
        let mut a = meta(1, 1, 1);
        a.model = "claude-sonnet-4-5".into();
        assert!(matches!(m.handle(&a, t0).outcome, Outcome::Success(_)));
        assert!(matches!(
            m.handle(&meta(1, 1, 1), t0).outcome,
            Outcome::RateLimited { .. }
        ));
        let mut other_key = meta(1, 1, 1);
        other_key.key = "k2".into();
        assert!(matches!(
            m.handle(&other_key, t0).outcome,
            Outcome::Success(_)
        ));
    }

    #[test]
    fn acceleration_limits_bursts_after_idle_only() {
        let mut c = cfg(Limits::default());
        c.acceleration = Some(AccelerationConfig {
            idle_secs: 30.0,
            window_secs: 10.0,
            max_requests: 2,
        });
        let mut m = ProviderModel::new(&c);
        let t = |ms| Instant::from_millis(ms);
        assert!(matches!(
            m.handle(&meta(1, 1, 1), t(0)).outcome,
            Outcome::Success(_)
        ));
        assert!(matches!(
            m.handle(&meta(1, 1, 1), t(100)).outcome,
            Outcome::Success(_)
        ));
        assert_eq!(
            m.handle(&meta(1, 1, 1), t(2_500)).outcome,
            Outcome::SlowDown {
                retry_after: Duration::from_secs(8)
            }
        );
        // after the window, steady traffic is fine
        for i in 0..5 {
            assert!(matches!(
                m.handle(&meta(1, 1, 1), t(11_000 + i * 1000)).outcome,
                Outcome::Success(_)
            ));
        }
        // idle again, then a burst
        let base = 100_000;
        for i in 0..2 {
            assert!(matches!(
                m.handle(&meta(1, 1, 1), t(base + i)).outcome,
                Outcome::Success(_)
            ));
        }
        assert!(matches!(
            m.handle(&meta(1, 1, 1), t(base + 5)).outcome,
            Outcome::SlowDown { .. }
        ));
    }

    #[test]
    fn admission_at_is_the_first_instant_handle_admits() {
        let mut c = cfg(Limits {
            requests_per_minute: Some(60),
            output_tokens_per_minute: Some(600),
            ..Limits::default()
        });
        c.capacity_seconds = 2.0;
        c.acceleration = Some(AccelerationConfig {
            idle_secs: 30.0,
            window_secs: 10.0,
            max_requests: 3,
        });
        let mut m = ProviderModel::new(&c);
        let r = meta(1, 10, 5);
        let mut now = Instant::ZERO;
        let mut sent = Vec::new();
        for _ in 0..8 {
            let at = m.admission_at(&r, now);
            // a hair earlier is refused (on a copy: handle records)
            if at > now {
                let early = Instant::from_nanos(at.as_nanos() - 2_000);
                assert!(!ok(&m.clone().handle(&r, early.max(now)).outcome), "{at:?}");
            }
            assert!(ok(&m.handle(&r, at).outcome), "{at:?}");
            sent.push(at.since_origin().as_millis());
            now = at;
        }
        // 2 requests in the 2 s bucket, a third a second later; then the
        // acceleration window (3 requests in 10 s) holds the 4th to 10 s,
        // and the bucket paces one per second after it.
        assert_eq!(sent[..3], [0, 0, 1000]);
        assert_eq!(sent[3..], [10_000, 10_000, 11_000, 12_000, 13_000]);
        // a request larger than the output bucket (20 tokens) waits for a
        // full bucket, and the model agrees
        let big = meta(1, 50, 5);
        let at = m.admission_at(&big, now);
        assert!(!ok(&m
            .clone()
            .handle(&big, Instant::from_nanos(at.as_nanos() - 2_000))
            .outcome));
        assert!(ok(&m.handle(&big, at).outcome));
    }

    #[test]
    fn money_comes_first_and_stops_everything() {
        let mut c = cfg(Limits::default());
        c.spend.cap_usd = Some(0.000_1); // 100 USD-µ
        c.faults = vec![FaultRule::always(Fault::Overloaded)];
        let mut m = ProviderModel::new(&c);
        let t0 = Instant::ZERO;
        assert_eq!(
            m.handle(&meta(1, 1, 1), t0).outcome,
            Outcome::Fault(Fault::Overloaded)
        );
        m.set_faults(vec![]);
        let Outcome::Success(g) = m.handle(&meta(10, 10, 10), t0).outcome else {
            panic!()
        };
        m.settle(&g, 10, t0); // 10*3 + 10*15 = 180 µUSD
        assert!(m.spend_usd() > 0.000_1);
        assert_eq!(m.handle(&meta(1, 1, 1), t0).outcome, Outcome::SpendCap);
        m.set_billing_error(true);
        assert_eq!(m.handle(&meta(1, 1, 1), t0).outcome, Outcome::Billing);
        assert_eq!(m.requests_seen(), 4);
    }

    #[test]
    fn keys_are_bounded() {
        let mut c = cfg(Limits::default());
        c.max_keys = 2;
        let mut m = ProviderModel::new(&c);
        for (k, ok) in [("a", true), ("b", true), ("a", true), ("c", false)] {
            let mut r = meta(1, 1, 1);
            r.key = k.into();
            let out = m.handle(&r, Instant::ZERO).outcome;
            assert_eq!(matches!(out, Outcome::Success(_)), ok, "{k}: {out:?}");
        }
    }

    #[test]
    fn stream_faults_only_touch_streams() {
        let mut c = cfg(Limits::default());
        c.faults = vec![FaultRule::always(Fault::StreamCut { after_events: 2 })];
        let mut m = ProviderModel::new(&c);
        let a = m.handle(&meta(1, 1, 1), Instant::ZERO);
        assert_eq!(a.stream_fault, None);
        let mut s = meta(1, 1, 1);
        s.stream = true;
        let a = m.handle(&s, Instant::ZERO);
        assert_eq!(a.stream_fault, Some(Fault::StreamCut { after_events: 2 }));
        assert!(matches!(a.outcome, Outcome::Success(_)));
    }
}
