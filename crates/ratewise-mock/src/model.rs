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
//! `max_tokens` of output at once (Anthropic's documented rule), corrected at
//! the end.
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
use crate::config::{AccelerationConfig, Limits, MockConfig, SpendConfig};
use crate::faults::{Fault, FaultPlan, FaultRule};
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
        /// What was used of it (limit − remaining).
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
    /// An injected fault answers instead (never a stall or stream fault).
    Fault(Fault),
}

/// One rate-limit window as the headers report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowView {
    /// Which bucket.
    pub dimension: Dimension,
    /// Per-minute limit.
    pub limit: u64,
    /// Whole units left.
    pub remaining: u64,
    /// Provider time until the bucket is full again.
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
    class_limits: BTreeMap<String, Limits>,
    model_classes: Vec<(String, String)>,
    acceleration: Option<AccelerationConfig>,
    spend_cfg: SpendConfig,
    billing: bool,
    max_keys: usize,
    buckets: HashMap<BucketKey, Vec<(Dimension, Bucket)>>,
    ramps: HashMap<(Provider, String), Ramp>,
    spend_usd: f64,
    seen: u64,
    faults: FaultPlan,
}

impl ProviderModel {
    /// A model with `config`'s limits, acceleration, spend, billing switch
    /// and faults.
    pub fn new(config: &MockConfig) -> Self {
        ProviderModel {
            anthropic_limits: config.anthropic_limits,
            openai_limits: config.openai_limits,
            class_limits: config.class_limits.clone(),
            model_classes: config
                .model_classes
                .iter()
                .map(|r| (r.prefix.clone(), r.class.clone()))
                .collect(),
            acceleration: config.acceleration,
            spend_cfg: config.spend,
            billing: config.billing_error,
            max_keys: config.max_keys,
            buckets: HashMap::new(),
            ramps: HashMap::new(),
            spend_usd: 0.0,
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

    /// Total spend so far, USD.
    pub fn spend_usd(&self) -> f64 {
        self.spend_usd
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
            _ => self.anthropic_limits,
        }
    }

    fn spend_capped(&self) -> bool {
        self.spend_cfg
            .cap_usd
            .is_some_and(|cap| self.spend_usd >= cap)
    }

    /// Decides the answer to one request at provider time `now`, charging
    /// the buckets on success.
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
            Some(f @ (Fault::StreamCut { .. } | Fault::StreamError { .. })) if meta.stream => {
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
            self.buckets.insert(bkey.clone(), new_buckets(limits, now));
        }
        if let Some(slow) = self.acceleration_check(meta, now) {
            answer.outcome = slow;
            answer.windows = self.windows(&bkey, now);
            return answer;
        }
        let set = self.buckets.get_mut(&bkey).expect("inserted above");
        for (dim, bucket) in set.iter_mut() {
            let need = charge(*dim, meta.input_tokens, meta.max_tokens);
            if !bucket.fits(need, now) {
                let retry_after = whole_secs(bucket.wait_for(need, now));
                let limit = bucket.limit();
                let used = limit.saturating_sub(bucket.remaining(now));
                answer.outcome = Outcome::RateLimited {
                    dimension: *dim,
                    retry_after,
                    limit,
                    used,
                    requested: need,
                };
                answer.windows = self.windows(&bkey, now);
                return answer;
            }
        }
        for (dim, bucket) in set.iter_mut() {
            bucket.take(charge(*dim, meta.input_tokens, meta.max_tokens), now);
        }
        answer.windows = self.windows(&bkey, now);
        answer.outcome = Outcome::Success(Grant {
            bucket: bkey,
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
        self.spend_usd += grant.input_tokens as f64 * self.spend_cfg.input_usd_per_mtok / 1e6
            + actual_output as f64 * self.spend_cfg.output_usd_per_mtok / 1e6;
    }

    /// The rate-limit windows of a bucket set at `now`.
    pub fn windows(&mut self, bkey: &BucketKey, now: Instant) -> Vec<WindowView> {
        let Some(set) = self.buckets.get_mut(bkey) else {
            return Vec::new();
        };
        set.iter_mut()
            .map(|(dim, b)| WindowView {
                dimension: *dim,
                limit: b.limit(),
                remaining: b.remaining(now),
                reset: b.until_full(now),
            })
            .collect()
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

fn new_buckets(limits: Limits, now: Instant) -> Vec<(Dimension, Bucket)> {
    [
        (Dimension::Requests, limits.requests_per_minute),
        (Dimension::InputTokens, limits.input_tokens_per_minute),
        (Dimension::OutputTokens, limits.output_tokens_per_minute),
        (Dimension::Tokens, limits.tokens_per_minute),
    ]
    .into_iter()
    .filter_map(|(d, l)| l.map(|l| (d, Bucket::per_minute(l, now))))
    .collect()
}

/// What a request charges to one dimension at its start.
fn charge(dim: Dimension, input: u64, max_tokens: u64) -> u64 {
    match dim {
        Dimension::Requests => 1,
        Dimension::InputTokens => input,
        Dimension::OutputTokens => max_tokens,
        Dimension::Tokens => input.saturating_add(max_tokens),
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
                assert_eq!((limit, used, requested), (600, 500, 300));
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
