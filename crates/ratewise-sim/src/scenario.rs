//! Scenario files: the provider's limits, the workload and the faults.
//!
//! A scenario is JSON. Every field but `limits` and `jobs` has a default;
//! unknown fields are rejected so a typo never silently changes a run.
//!
//! ```
//! let s = ratewise_sim::Scenario::from_json(r#"{
//!     "provider": "anthropic",
//!     "seed": 7,
//!     "limits": {"requests_per_min": 50, "input_tokens_per_min": 30000, "output_tokens_per_min": 8000},
//!     "jobs": {"count": 500, "arrival": "burst", "input_tokens": [200, 4000], "max_tokens": 1024, "output_tokens": [50, 600]},
//!     "faults": {"overload_rate": 0.02, "reset_after_send_rate": 0.005, "spend_cap_after_tokens": null, "acceleration": true},
//!     "deadline_ms": 600000
//! }"#).unwrap();
//! assert_eq!(s.jobs.count, 500);
//! assert!((s.fault_rate() - 0.025).abs() < 1e-12);
//! ```
//!
//! | field | meaning | default |
//! |---|---|---|
//! | `name` | label in tables and JSON | `"scenario"` |
//! | `description` | one line for humans | `""` |
//! | `provider` | `anthropic` or `openai`: response shapes and header families | `anthropic` |
//! | `model` | model name sent (its class names the bucket) | per provider |
//! | `seed` | seeds the workload, the faults, and every strategy's jitter | `0` |
//! | `limits` | per-minute limits: `requests_per_min`, `input_tokens_per_min`, `output_tokens_per_min`, `tokens_per_min` (any subset) | required |
//! | `limits.capacity_seconds` | seconds of refill each of the provider's buckets holds: a per-minute limit enforced over a shorter interval (Anthropic documents 60 RPM as 1 request per second) | `60` |
//! | `limits.configured` | the `ratewise` strategy is given the limits (a user configured them for their tier); `false` = it learns them from the provider's rate-limit headers | `false` |
//! | `jobs.count` | number of jobs | required |
//! | `jobs.arrival` | `"burst"` (all at t = 0) or `{"per_sec": N}` (evenly spaced) | `"burst"` |
//! | `jobs.input_tokens` | uniform `[min, max]` input tokens per job | required |
//! | `jobs.max_tokens` | the request's `max_tokens` | required |
//! | `jobs.output_tokens` | uniform `[min, max]` actual output (capped by `max_tokens`) | required |
//! | `faults.overload_rate` | per-send probability of 529 `overloaded_error` (OpenAI: 503) | `0` |
//! | `faults.reset_after_send_rate` | per-send probability that the connection resets after the request was sent | `0` |
//! | `faults.spend_cap_after_tokens` | the provider's spend cap, in billed tokens (input + output); `null` = none | `null` |
//! | `faults.acceleration` | the provider's acceleration limit (after 60 s idle, 5 requests in the next 10 s) | `false` |
//! | `faults.count_rejected` | a request answered 429 for a rate limit still takes a request from the provider's requests bucket (OpenAI documents this); no tokens | `false` |
//! | `remaining_rounding` | what the token `*-remaining` headers show: `"documented"` (Anthropic's input, output and combined token values rounded to the nearest thousand, half up, as Anthropic documents; OpenAI's and requests exact) or `"exact"` (every value exact, the mock before issue #24). Only the headers change, never the buckets | `"documented"` |
//! | `bias` | departures from the documentation, each off when absent: `{"remaining_tokens_high": 400, "capacity_shortfall": 0.2, "other_client_share": 0.3}` (see [`ratewise_mock::BiasConfig`]); the `oracle` reads the true state, so it accounts for them | `null` (none) |
//! | `bias.remaining_tokens_high` | every token `*-remaining` header reports this many tokens above the truth, before rounding | `0` |
//! | `bias.capacity_shortfall` | in `[0, 0.99]`: every bucket really holds `(1 − x)` of `capacity_seconds`, while its headers (remaining, reset) imply the full capacity | `0` |
//! | `bias.burst_tokens`, `bias.burst_at_request` | once, just before the provider's request number `burst_at_request`, a second client takes `burst_tokens` from each token bucket of the key | `0` (never) |
//! | `bias.other_client_share` | in `[0, 0.99]`: a second client on the key takes this share of every per-minute limit, continuously, taking only what is there; seen only in the headers | `0` |
//! | `silent` | the provider states no limits, as Gemini, Vertex, Bedrock and most OpenAI-compatible hosts do: `"off"` (every rate-limit header as documented), `"retry_after"` (no `*-limit` / `*-remaining` / `*-reset` header on any answer; a 429 keeps `retry-after` and its usual body) or `"message"` (no rate-limit header and no `retry-after`: a 429's wait is only in its message, "Please try again in 8s."). The buckets are the same either way: only what the answers say changes (see [`ratewise_mock::Silent`]); the `oracle` reads the true state, so it is unaffected | `"off"` |
//! | `learn_margins` | the `ratewise` strategy learns from 429s its model did not expect (`false`: without, for comparison) | `true` |
//! | `warm` | the key was busy just before the run (the acceleration window is already over); `false` = a cold start after idle | `true` |
//! | `deadline_ms` | each job's deadline, counted from its arrival; `null` = none | `null` |
//! | `latency` | `{"base_ms": 300, "per_output_token_ms": 4, "error_ms": 100}`: a success answers after `base_ms + output × per_output_token_ms`, an error or reset after `error_ms` | as shown |
//! | `workers` | concurrent jobs an application runs (every strategy) | `32` |
//! | `replicas` | processes sharing the key with no store between them (the `ratewise` strategy runs one controller and one queue per process) | `1` |
//! | `jobs.level`, `jobs.flow`, `jobs.weight` | the jobs' workload for the admission queue's discipline: a level of `interactive`, `default`, `bulk`; a flow (tenant) name; the flow's weight in its level | `default`, the level's name, `1` |
//! | `jobs.start_ms` | the first arrival, ms after the run starts | `0` |
//! | `jobs.workers` | this group's own worker pool | the scenario's `workers` |
//! | `jobs.process` | the process (`0..replicas`) that runs this group | in turn |
//! | `groups` | further job groups, each shaped like `jobs` (all of the fields above): a tenants scenario's levels and flows, each with its own arrivals, sizes, workers and process | `[]` |
//! | `targets` | a tenants scenario's claims, checked by `--check`: `wait_p95_s` (per flow or level name, seconds), `cost_ratio` (`{"flows": [a, b], "ratio": 2, "tolerance": 0.1}`: admitted cost while both wait), `min_share` (per level: share of the admitted cost while every level waits), `limit_used` (least goodput ratio), `oracle_share` (least share of the oracle's goodput, instead of 0.9); see [`crate::targets::tenants`] | none |
//!
//! Time is provider time: a minute of the scenario is a minute of the
//! limits. The simulation runs it in virtual time; `--real` runs it on a
//! scaled clock.
//!
//! The provider is the mock's model ([`ratewise_mock::model`]): every
//! bucket starts full, holds `capacity_seconds` of its refill, and admits a
//! request costing more than it holds once it is full, leaving a debt. A
//! success charges input tokens and `max_tokens` at admission (OpenAI's
//! `tokens_per_min` too: input + `max_tokens`), corrected to the actual
//! output when the answer ends.

use ratewise_core::admit::Limits as CoreLimits;
use ratewise_core::{Dimension, Provider};
use ratewise_mock::config::MAX_SHARE;
use ratewise_mock::model::MAX_CAPACITY_SECS;
use ratewise_mock::{
    AccelerationConfig, BiasConfig, FaultRule, Limits as MockLimits, MockConfig, RemainingRounding,
    Silent, Trigger,
};
use serde::{Deserialize, Serialize};

/// The largest job count a scenario may ask for (bounds memory and time).
pub const MAX_JOBS: u64 = 1_000_000;

/// One scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Label.
    #[serde(default = "default_name")]
    pub name: String,
    /// One line for humans.
    #[serde(default)]
    pub description: String,
    /// Which API shape the provider answers with.
    #[serde(default = "default_provider")]
    pub provider: Provider,
    /// Model sent in every request.
    #[serde(default)]
    pub model: Option<String>,
    /// Seed of everything random.
    #[serde(default)]
    pub seed: u64,
    /// The provider's per-minute limits.
    pub limits: ScenarioLimits,
    /// The workload.
    pub jobs: JobsSpec,
    /// Faults the provider injects.
    #[serde(default)]
    pub faults: FaultsSpec,
    /// What the provider's token `*-remaining` headers show (default:
    /// as documented, Anthropic's rounded to the nearest thousand).
    #[serde(default)]
    pub remaining_rounding: RemainingRounding,
    /// Biases of the provider the documentation does not describe
    /// (default none).
    #[serde(default)]
    pub bias: Option<BiasConfig>,
    /// Which rate-limit signals the provider leaves out of its answers
    /// (default none: [`Silent::Off`]). A silent provider is one whose
    /// limits a client can learn only from its 429s (issue #35).
    #[serde(default)]
    pub silent: Silent,
    /// The key was busy just before the run.
    #[serde(default = "yes")]
    pub warm: bool,
    /// The `ratewise` strategy learns from 429s its model did not expect
    /// (`Config::learn_margins`; default true): `false` runs it without,
    /// to measure what learning costs or gains.
    #[serde(default = "yes")]
    pub learn_margins: bool,
    /// Each job's deadline from its arrival, milliseconds.
    #[serde(default)]
    pub deadline_ms: Option<u64>,
    /// Response latency.
    #[serde(default)]
    pub latency: LatencySpec,
    /// Concurrent jobs of the application.
    #[serde(default = "default_workers")]
    pub workers: u32,
    /// Processes sharing the key with no shared store between them
    /// (default 1): the `ratewise` strategy runs this many controllers,
    /// each cut off from the others and pacing at
    /// [`REPLICA_SHARE_PERMILLE`] of what it learns until its own 429s
    /// teach its share (as a proxy whose Redis is unreachable does); jobs
    /// are handed to them in turn. The other strategies run one client
    /// for the whole key (the oracle: the best the key allows).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub replicas: u32,
    /// Further job groups beside `jobs` (default none), each shaped like
    /// `jobs` and drawn after it: a tenants scenario's levels and flows,
    /// each with its own arrivals, sizes, workers and process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<JobsSpec>,
    /// A tenants scenario's own claims, checked by `--check` beside the
    /// usual ones (see [`crate::targets::check`]; default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets: Option<TenantTargets>,
}

/// The most job groups a scenario has (`jobs` and its `groups`).
pub const MAX_GROUPS: usize = 16;

/// A tenants scenario's claims (issue #49), checked on the `ratewise`
/// strategy's report beside the usual targets, every job done included.
/// Names are flows' or levels' (a group's `flow`, else its `level`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TenantTargets {
    /// Most p95 wait (arrival to the send that succeeded), seconds, per
    /// level or flow name.
    #[serde(default)]
    pub wait_p95_s: std::collections::BTreeMap<String, f64>,
    /// Two flows' admitted cost (dominant share of the true limits, per
    /// weight) in this ratio, within a relative tolerance, while both
    /// wait.
    #[serde(default)]
    pub cost_ratio: Option<CostRatio>,
    /// Least share of the admitted cost a level keeps while every level
    /// waits, per level name.
    #[serde(default)]
    pub min_share: std::collections::BTreeMap<String, f64>,
    /// Least goodput ratio (share of the binding limit used while work
    /// waits), whatever the oracle's.
    #[serde(default)]
    pub limit_used: Option<f64>,
    /// Least share of the oracle's goodput (replaces
    /// [`crate::targets::ORACLE_SHARE`] for this scenario).
    #[serde(default)]
    pub oracle_share: Option<f64>,
}

/// Two flows' admitted cost in a ratio.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostRatio {
    /// The two flows, by name.
    pub flows: [String; 2],
    /// The first's admitted cost over the second's.
    pub ratio: f64,
    /// Relative tolerance (`0.1`: ± 10 %).
    pub tolerance: f64,
}

/// The share of the key each replica paces at while it has seen no peer:
/// the default of a Redis store that cannot reach Redis.
pub const REPLICA_SHARE_PERMILLE: u32 = 500;

/// The most replicas a scenario may ask for.
pub const MAX_REPLICAS: u32 = 16;

fn one() -> u32 {
    1
}
fn is_one(n: &u32) -> bool {
    *n == 1
}

fn default_name() -> String {
    "scenario".to_owned()
}
fn default_provider() -> Provider {
    Provider::Anthropic
}
fn yes() -> bool {
    true
}
fn default_workers() -> u32 {
    32
}

/// Per-minute limits (`null` or absent = unlimited), how the provider
/// enforces them, and whether the `ratewise` strategy is told them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioLimits {
    /// Requests per minute.
    #[serde(default)]
    pub requests_per_min: Option<u64>,
    /// Input tokens per minute.
    #[serde(default)]
    pub input_tokens_per_min: Option<u64>,
    /// Output tokens per minute.
    #[serde(default)]
    pub output_tokens_per_min: Option<u64>,
    /// Combined tokens per minute (OpenAI's TPM).
    #[serde(default)]
    pub tokens_per_min: Option<u64>,
    /// Seconds of refill each provider bucket holds (default 60: a minute
    /// of the limit).
    #[serde(default = "minute")]
    pub capacity_seconds: f64,
    /// The `ratewise` strategy is configured with these limits (default
    /// false: it learns them from the provider's headers).
    #[serde(default)]
    pub configured: bool,
}

fn minute() -> f64 {
    60.0
}

impl Default for ScenarioLimits {
    /// No limit, a minute's capacity, not configured.
    fn default() -> Self {
        ScenarioLimits {
            requests_per_min: None,
            input_tokens_per_min: None,
            output_tokens_per_min: None,
            tokens_per_min: None,
            capacity_seconds: minute(),
            configured: false,
        }
    }
}

impl ScenarioLimits {
    /// The limit of one dimension.
    pub fn get(&self, d: Dimension) -> Option<u64> {
        match d {
            Dimension::Requests => self.requests_per_min,
            Dimension::InputTokens => self.input_tokens_per_min,
            Dimension::OutputTokens => self.output_tokens_per_min,
            Dimension::Tokens => self.tokens_per_min,
            // A dimension scenarios cannot configure: no limit.
            _ => None,
        }
    }

    /// As the mock's limits.
    pub fn to_mock(self) -> MockLimits {
        MockLimits {
            requests_per_minute: self.requests_per_min,
            input_tokens_per_minute: self.input_tokens_per_min,
            output_tokens_per_minute: self.output_tokens_per_min,
            tokens_per_minute: self.tokens_per_min,
        }
    }

    /// As ratewise's admission limits (what a user configures for a tier),
    /// whether or not the scenario gives them to the `ratewise` strategy.
    pub fn to_core(self) -> CoreLimits {
        CoreLimits {
            requests: self.requests_per_min,
            input_tokens: self.input_tokens_per_min,
            output_tokens: self.output_tokens_per_min,
            tokens: self.tokens_per_min,
        }
    }
}

/// How jobs arrive.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Arrival {
    /// `"burst"`: every job at t = 0.
    Named(ArrivalName),
    /// `{"per_sec": N}`: evenly spaced, N per second.
    Rate {
        /// Jobs per second.
        per_sec: f64,
    },
}

/// Named arrival patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalName {
    /// Every job at t = 0.
    Burst,
}

/// The workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobsSpec {
    /// Number of jobs.
    pub count: u64,
    /// Arrival pattern.
    #[serde(default = "burst")]
    pub arrival: Arrival,
    /// Uniform `[min, max]` input tokens.
    pub input_tokens: [u64; 2],
    /// The request's `max_tokens`.
    pub max_tokens: u64,
    /// Uniform `[min, max]` actual output tokens (capped by `max_tokens`).
    pub output_tokens: [u64; 2],
    /// The jobs' priority level, a name of
    /// [`Levels::default`](ratewise_core::admit::fair::Levels)
    /// (`interactive`, `default`, `bulk`); none: `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    /// The jobs' flow (tenant) within their level; none: the level's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<String>,
    /// The flow's weight within its level.
    #[serde(default = "weight_one", skip_serializing_if = "is_one")]
    pub weight: u32,
    /// The first arrival, milliseconds after the run starts.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub start_ms: u64,
    /// Concurrent jobs of this group (its own worker pool); none: the
    /// scenario's `workers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<u32>,
    /// The process (replica, `0..replicas`) that runs this group's jobs;
    /// none: jobs are handed to the processes in turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<u32>,
}

fn weight_one() -> u32 {
    1
}
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl JobsSpec {
    /// The group's level name (`default` when it names none).
    pub fn level_name(&self) -> &str {
        self.level.as_deref().unwrap_or("default")
    }

    /// The group's flow name: its `flow`, else its level's name.
    pub fn flow_name(&self) -> &str {
        self.flow.as_deref().unwrap_or(self.level_name())
    }

    /// Checks one group's ranges; `at` names it in the message.
    fn validate(&self, at: &str, replicas: u32) -> Result<(), ScenarioError> {
        let bad = |m: &str| Err(ScenarioError::Invalid(format!("{at}.{m}")));
        if self.count == 0 || self.count > MAX_JOBS {
            return bad("count must be 1..=1000000");
        }
        let [a, b] = self.input_tokens;
        if a > b || b > 10_000_000 {
            return bad("input_tokens must be [min, max] with min <= max <= 10000000");
        }
        let [a, b] = self.output_tokens;
        if a > b || b > 10_000_000 {
            return bad("output_tokens must be [min, max] with min <= max <= 10000000");
        }
        if self.max_tokens == 0 || self.max_tokens > 10_000_000 {
            return bad("max_tokens must be 1..=10000000");
        }
        if let Arrival::Rate { per_sec } = self.arrival {
            if !(per_sec.is_finite() && per_sec > 0.0 && per_sec <= 100_000.0) {
                return bad("arrival.per_sec must be in (0, 100000]");
            }
        }
        let levels = ratewise_core::admit::fair::Levels::default();
        if self
            .level
            .as_deref()
            .is_some_and(|l| levels.level(l).is_none())
        {
            return bad("level must be interactive, default or bulk");
        }
        if self
            .flow
            .as_ref()
            .is_some_and(|f| f.is_empty() || f.len() > 64)
        {
            return bad("flow must be 1..=64 bytes");
        }
        if self.weight == 0 || self.weight > ratewise_core::admit::fair::MAX_WEIGHT {
            return bad("weight must be 1..=1000000");
        }
        if self.start_ms > 30 * 86_400_000 {
            return bad("start_ms must be at most 30 days");
        }
        if self.workers.is_some_and(|w| w == 0 || w > 10_000) {
            return bad("workers must be 1..=10000");
        }
        if self.process.is_some_and(|p| p >= replicas) {
            return bad("process must be below replicas");
        }
        Ok(())
    }
}

fn burst() -> Arrival {
    Arrival::Named(ArrivalName::Burst)
}

/// Injected faults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FaultsSpec {
    /// Per-send probability of an overload answer.
    #[serde(default)]
    pub overload_rate: f64,
    /// Per-send probability of a reset after the request was sent.
    #[serde(default)]
    pub reset_after_send_rate: f64,
    /// The provider's spend cap in billed tokens.
    #[serde(default)]
    pub spend_cap_after_tokens: Option<u64>,
    /// The provider's acceleration limit.
    #[serde(default)]
    pub acceleration: bool,
    /// A request answered 429 for a rate limit still takes a request.
    #[serde(default)]
    pub count_rejected: bool,
}

/// Time from send to answer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencySpec {
    /// Before the first byte of a success.
    #[serde(default = "base_ms")]
    pub base_ms: u64,
    /// An error answer (429, 529, 402, ...) or a reset: providers refuse
    /// quickly, before any generation.
    #[serde(default = "error_ms")]
    pub error_ms: u64,
    /// Per output token of a success.
    #[serde(default = "per_token_ms")]
    pub per_output_token_ms: f64,
}

fn base_ms() -> u64 {
    300
}
fn error_ms() -> u64 {
    100
}
fn per_token_ms() -> f64 {
    4.0
}

impl Default for LatencySpec {
    fn default() -> Self {
        LatencySpec {
            base_ms: base_ms(),
            error_ms: error_ms(),
            per_output_token_ms: per_token_ms(),
        }
    }
}

/// Why a scenario was refused.
#[derive(Debug)]
pub enum ScenarioError {
    /// Not JSON of the right shape.
    Json(serde_json::Error),
    /// A value out of range.
    Invalid(String),
}

impl std::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScenarioError::Json(e) => {
                write!(f, "scenario is not valid JSON of the expected shape: {e}")
            }
            ScenarioError::Invalid(m) => write!(f, "invalid scenario: {m}"),
        }
    }
}

impl std::error::Error for ScenarioError {}

/// The scenario `ratewise simulate` runs without `--scenario`: a burst of
/// mixed-size jobs (this crate's `scenarios/burst-mixed.json`).
pub const DEFAULT_SCENARIO: &str = include_str!("../scenarios/burst-mixed.json");

/// Every scenario shipped in this crate's `scenarios/`, by file name.
pub const SHIPPED: &[(&str, &str)] = &[
    (
        "burst-mixed.json",
        include_str!("../scenarios/burst-mixed.json"),
    ),
    (
        "generous-max-tokens.json",
        include_str!("../scenarios/generous-max-tokens.json"),
    ),
    (
        "overload-storm.json",
        include_str!("../scenarios/overload-storm.json"),
    ),
    (
        "spend-cap.json",
        include_str!("../scenarios/spend-cap.json"),
    ),
    (
        "cold-start.json",
        include_str!("../scenarios/cold-start.json"),
    ),
    (
        "short-buckets-10s.json",
        include_str!("../scenarios/short-buckets-10s.json"),
    ),
    (
        "short-buckets-2s.json",
        include_str!("../scenarios/short-buckets-2s.json"),
    ),
    (
        "cold-key-5s.json",
        include_str!("../scenarios/cold-key-5s.json"),
    ),
    (
        "anthropic-tier1.json",
        include_str!("../scenarios/anthropic-tier1.json"),
    ),
    (
        "bias-remaining-high.json",
        include_str!("../scenarios/bias-remaining-high.json"),
    ),
    (
        "bias-capacity-short.json",
        include_str!("../scenarios/bias-capacity-short.json"),
    ),
    (
        "bias-second-client.json",
        include_str!("../scenarios/bias-second-client.json"),
    ),
    (
        "silent-anthropic.json",
        include_str!("../scenarios/silent-anthropic.json"),
    ),
    (
        "silent-openai.json",
        include_str!("../scenarios/silent-openai.json"),
    ),
];

/// The tenants family (issue #49), this crate's `scenarios/tenants/`:
/// many workloads on one key — levels, weights, a flood, a lone flow, two
/// processes — each with its own `targets`, checked against the oracle
/// that applies the same ordering rules with the provider's true state.
pub const TENANTS: &[(&str, &str)] = &[
    (
        "tenants/levels.json",
        include_str!("../scenarios/tenants/levels.json"),
    ),
    (
        "tenants/weights.json",
        include_str!("../scenarios/tenants/weights.json"),
    ),
    (
        "tenants/flood.json",
        include_str!("../scenarios/tenants/flood.json"),
    ),
    (
        "tenants/lone.json",
        include_str!("../scenarios/tenants/lone.json"),
    ),
    (
        "tenants/two-processes.json",
        include_str!("../scenarios/tenants/two-processes.json"),
    ),
];

impl Scenario {
    /// Parses and validates a scenario.
    pub fn from_json(text: &str) -> Result<Scenario, ScenarioError> {
        let s: Scenario = serde_json::from_str(text).map_err(ScenarioError::Json)?;
        s.validate()?;
        Ok(s)
    }

    /// The embedded default scenario.
    pub fn default_scenario() -> Scenario {
        Scenario::from_json(DEFAULT_SCENARIO).expect("the embedded scenario is valid")
    }

    /// Checks ranges: untrusted files never panic the simulator or make it
    /// allocate without a bound.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let bad = |m: &str| Err(ScenarioError::Invalid(m.to_owned()));
        if self.replicas == 0 || self.replicas > MAX_REPLICAS {
            return bad("replicas must be 1..=16");
        }
        self.validate_groups()?;
        for (name, p) in [
            ("faults.overload_rate", self.faults.overload_rate),
            (
                "faults.reset_after_send_rate",
                self.faults.reset_after_send_rate,
            ),
        ] {
            if !(p.is_finite() && (0.0..0.9).contains(&p)) {
                return Err(ScenarioError::Invalid(format!(
                    "{name} must be in [0, 0.9)"
                )));
            }
        }
        if self.fault_rate() >= 0.9 {
            return bad("overload_rate + reset_after_send_rate must be below 0.9");
        }
        let l = &self.limits;
        let all = [
            l.requests_per_min,
            l.input_tokens_per_min,
            l.output_tokens_per_min,
            l.tokens_per_min,
        ];
        if all.iter().all(Option::is_none) {
            return bad("limits must set at least one per-minute limit");
        }
        if all.iter().flatten().any(|v| *v == 0 || *v > 1_000_000_000) {
            return bad("limits must be 1..=1000000000 per minute");
        }
        let cap = l.capacity_seconds;
        if !(cap.is_finite() && cap > 0.0 && cap <= MAX_CAPACITY_SECS) {
            return bad("limits.capacity_seconds must be in (0, 86400]");
        }
        if let Some(b) = &self.bias {
            for (name, x) in [
                ("bias.capacity_shortfall", b.capacity_shortfall),
                ("bias.other_client_share", b.other_client_share),
            ] {
                if !(x.is_finite() && (0.0..=MAX_SHARE).contains(&x)) {
                    return Err(ScenarioError::Invalid(format!(
                        "{name} must be in [0, {MAX_SHARE}]"
                    )));
                }
            }
        }
        if self.workers == 0 || self.workers > 10_000 {
            return bad("workers must be 1..=10000");
        }
        if self.latency.base_ms > 600_000
            || self.latency.error_ms > 600_000
            || !(self.latency.per_output_token_ms.is_finite()
                && (0.0..=1000.0).contains(&self.latency.per_output_token_ms))
        {
            return bad("latency must be base_ms <= 600000, per_output_token_ms in [0, 1000]");
        }
        if self
            .deadline_ms
            .is_some_and(|d| d == 0 || d > 30 * 86_400_000)
        {
            return bad("deadline_ms must be 1..=30 days");
        }
        if self
            .model
            .as_ref()
            .is_some_and(|m| m.is_empty() || m.len() > 128)
        {
            return bad("model must be 1..=128 bytes");
        }
        if self.name.len() > 128 || self.description.len() > 4096 {
            return bad("name (128) or description (4096) too long");
        }
        Ok(())
    }

    /// Checks `jobs` and `groups`: each group's ranges, their number, the
    /// total of jobs, distinct flow names per level, and the targets'
    /// names.
    fn validate_groups(&self) -> Result<(), ScenarioError> {
        let bad = |m: &str| Err(ScenarioError::Invalid(m.to_owned()));
        self.jobs.validate("jobs", self.replicas)?;
        for (i, g) in self.groups.iter().enumerate() {
            g.validate(&format!("groups[{i}]"), self.replicas)?;
        }
        if self.groups.len() >= MAX_GROUPS {
            return bad("groups must be at most 15");
        }
        if self.total_jobs() > MAX_JOBS {
            return bad("jobs in all groups must be at most 1000000");
        }
        let mut flows: Vec<&str> = self.job_groups().map(JobsSpec::flow_name).collect();
        let n = flows.len();
        flows.sort_unstable();
        flows.dedup();
        if flows.len() < n && self.job_groups().any(|g| g.flow.is_some()) {
            return bad("each group needs a flow name of its own");
        }
        let Some(t) = &self.targets else {
            return Ok(());
        };
        let known = |name: &str| {
            self.job_groups()
                .any(|g| g.flow_name() == name || g.level_name() == name)
        };
        let ratio_names = t.cost_ratio.iter().flat_map(|c| c.flows.iter());
        let names = t
            .wait_p95_s
            .keys()
            .chain(t.min_share.keys())
            .chain(ratio_names);
        for name in names {
            if !known(name) {
                return Err(ScenarioError::Invalid(format!(
                    "targets name {name:?}, no group's flow or level"
                )));
            }
        }
        Ok(())
    }

    /// The job groups: `jobs`, then `groups`.
    pub fn job_groups(&self) -> impl Iterator<Item = &JobsSpec> {
        std::iter::once(&self.jobs).chain(self.groups.iter())
    }

    /// Jobs in every group.
    pub fn total_jobs(&self) -> u64 {
        self.job_groups().map(|g| g.count).sum()
    }

    /// Whether the scenario's jobs carry workloads the queue discipline
    /// tells apart (more than one group, or a level, flow or weight set):
    /// a tenants scenario.
    pub fn has_workloads(&self) -> bool {
        !self.groups.is_empty()
            || self.jobs.level.is_some()
            || self.jobs.flow.is_some()
            || self.jobs.weight != 1
    }

    /// Whether the provider's headers are biased in a way the
    /// documentation does not describe (a nonzero `bias`).
    pub fn is_biased(&self) -> bool {
        self.bias.is_some_and(|b| {
            b.remaining_tokens_high > 0 || b.capacity_shortfall > 0.0 || b.other_client_share > 0.0
        })
    }

    /// Whether the provider states no limits in its headers (a `silent`
    /// other than `"off"`): a client can learn them only from its 429s.
    pub fn is_silent(&self) -> bool {
        self.silent.hides_ratelimit_headers()
    }

    /// The injected per-send fault probability: overloads plus resets.
    pub fn fault_rate(&self) -> f64 {
        self.faults.overload_rate + self.faults.reset_after_send_rate
    }

    /// The fewest sends per done job any client can make: every send fails
    /// independently with [`fault_rate`](Self::fault_rate), an overload is
    /// retried and a reset is held (not retried), so sends / done jobs is
    /// `1 / (1 − fault_rate)` whatever the retry policy.
    pub fn min_sends_per_done_job(&self) -> f64 {
        1.0 / (1.0 - self.fault_rate())
    }

    /// The model requests name.
    pub fn model_name(&self) -> &str {
        match (&self.model, self.provider) {
            (Some(m), _) => m,
            (None, Provider::Openai) => "gpt-4o-mini",
            (None, _) => "claude-sonnet-4-5-20250929",
        }
    }

    /// [`mock_config`](Self::mock_config) for a mock on a real clock,
    /// where a provider minute lasts `seconds_per_minute` seconds: its
    /// latency in real milliseconds and the workload's output lengths.
    /// `ratewise-real` runs the mock this way, and `ratewise simulate
    /// --print-mock-config` prints it at a minute a minute (the
    /// black-box bench).
    pub fn mock_config_real(&self, seconds_per_minute: f64) -> MockConfig {
        let mut cfg = self.mock_config();
        cfg.seconds_per_minute = seconds_per_minute;
        let [min, max] = self.jobs.output_tokens;
        cfg.output_tokens = ratewise_mock::OutputRange { min, max };
        let real_ms = |provider_ms: f64| provider_ms * seconds_per_minute / 60.0;
        cfg.latency = ratewise_mock::LatencyConfig {
            first_byte_ms: real_ms(self.latency.base_ms as f64).round() as u64,
            per_output_token_ms: real_ms(self.latency.per_output_token_ms),
        };
        cfg
    }

    /// The mock configuration that makes the provider follow this scenario
    /// (prices of one micro-dollar per token make the spend cap a token
    /// count).
    pub fn mock_config(&self) -> MockConfig {
        let mut cfg = MockConfig {
            seed: self.seed,
            ..MockConfig::default()
        };
        match self.provider {
            Provider::Openai => cfg.openai_limits = self.limits.to_mock(),
            _ => cfg.anthropic_limits = self.limits.to_mock(),
        }
        cfg.acceleration = self.faults.acceleration.then(AccelerationConfig::default);
        cfg.capacity_seconds = self.limits.capacity_seconds;
        cfg.count_rejected = self.faults.count_rejected;
        cfg.remaining_rounding = self.remaining_rounding;
        cfg.bias = self.bias.unwrap_or_default();
        cfg.silent = self.silent;
        cfg.spend.input_usd_per_mtok = 1.0;
        cfg.spend.output_usd_per_mtok = 1.0;
        cfg.spend.cap_usd = self.faults.spend_cap_after_tokens.map(|t| t as f64 / 1e6);
        let mut rules = Vec::new();
        // One die per send: overload first, then reset, so that each has
        // exactly its stated per-send probability.
        let o = self.faults.overload_rate;
        let r = self.faults.reset_after_send_rate;
        if o > 0.0 {
            rules.push(FaultRule::new(
                ratewise_mock::Fault::Overloaded,
                Trigger::Probability(o),
            ));
        }
        if r > 0.0 {
            // Conditional on no overload: P(reset) = r / (1 − o).
            rules.push(FaultRule::new(
                ratewise_mock::Fault::Reset,
                Trigger::Probability(r / (1.0 - o)),
            ));
        }
        cfg.faults = rules;
        cfg.latency = ratewise_mock::LatencyConfig {
            first_byte_ms: self.latency.base_ms,
            per_output_token_ms: self.latency.per_output_token_ms,
        };
        cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_scenarios_parse() {
        for (name, text) in SHIPPED {
            let s = Scenario::from_json(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!s.description.is_empty(), "{name}");
        }
        assert_eq!(Scenario::default_scenario().name, "burst-mixed");
    }

    #[test]
    fn new_fields_default_to_the_old_provider_with_learned_limits() {
        let s = Scenario::from_json(
            r#"{"limits": {"requests_per_min": 50}, "jobs": {"count": 1, "input_tokens": [1, 2], "max_tokens": 10, "output_tokens": [1, 2]}}"#,
        )
        .unwrap();
        assert_eq!(s.limits.capacity_seconds, 60.0);
        assert!(!s.limits.configured);
        assert!(!s.faults.count_rejected);
        assert_eq!(ScenarioLimits::default().capacity_seconds, 60.0);
        let cfg = s.mock_config();
        assert_eq!((cfg.capacity_seconds, cfg.count_rejected), (60.0, false));
        assert_eq!(s.remaining_rounding, RemainingRounding::Documented);
        assert_eq!(s.bias, None);
        assert_eq!(cfg.remaining_rounding, RemainingRounding::Documented);
        assert_eq!(cfg.bias, BiasConfig::default());
        assert_eq!((s.silent, cfg.silent), (Silent::Off, Silent::Off));
        assert!(!s.is_silent());
    }

    #[test]
    fn tenants_scenarios_parse_and_groups_are_checked() {
        for (name, text) in TENANTS {
            let s = Scenario::from_json(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(s.has_workloads() && s.targets.is_some(), "{name}");
        }
        let base = |patch: &str| {
            format!(
                r#"{{"limits": {{"requests_per_min": 50}}, "jobs": {{"count": 1, "input_tokens": [1, 2], "max_tokens": 10, "output_tokens": [1, 2], "level": "bulk", "flow": "a"}}{patch}}}"#
            )
        };
        let g = r#"{"count": 2, "input_tokens": [1, 2], "max_tokens": 10, "output_tokens": [1, 2]"#;
        let ok = Scenario::from_json(&base(&format!(
            r#", "groups": [{g}, "level": "interactive", "flow": "b", "weight": 3, "start_ms": 5, "workers": 2}}]"#
        )))
        .unwrap();
        assert_eq!(ok.total_jobs(), 3);
        assert_eq!(ok.groups[0].flow_name(), "b");
        assert_eq!(ok.groups[0].weight, 3);
        // Without groups or workloads: not a tenants scenario, and it
        // prints as before (no new field).
        let plain = Scenario::default_scenario();
        assert!(!plain.has_workloads());
        let text = serde_json::to_string(&plain).unwrap();
        for field in [
            "groups", "level", "flow", "weight", "start_ms", "process", "targets",
        ] {
            assert!(!text.contains(field), "{field}");
        }
        for patch in [
            format!(r#", "groups": [{g}, "level": "urgent"}}]"#),
            format!(r#", "groups": [{g}, "flow": "a"}}]"#),
            format!(r#", "groups": [{g}, "weight": 0}}]"#),
            format!(r#", "groups": [{g}, "process": 1}}]"#),
            format!(r#", "groups": [{g}, "workers": 0}}]"#),
            format!(r#", "groups": [{g}, "typo": 1}}]"#),
            r#", "targets": {"wait_p95_s": {"nobody": 1.0}}"#.to_owned(),
            r#", "targets": {"typo": 1}"#.to_owned(),
        ] {
            assert!(Scenario::from_json(&base(&patch)).is_err(), "{patch}");
        }
    }

    #[test]
    fn silent_reaches_the_provider() {
        let base = |patch: &str| {
            format!(
                r#"{{"limits": {{"requests_per_min": 50}}, "jobs": {{"count": 1, "input_tokens": [1, 2], "max_tokens": 10, "output_tokens": [1, 2]}}{patch}}}"#
            )
        };
        for (patch, want) in [
            (r#", "silent": "off""#, Silent::Off),
            (r#", "silent": "retry_after""#, Silent::RetryAfter),
            (r#", "silent": "message""#, Silent::Message),
        ] {
            let s = Scenario::from_json(&base(patch)).unwrap();
            assert_eq!(s.silent, want, "{patch}");
            assert_eq!(s.mock_config().silent, want, "{patch}");
            assert_eq!(s.is_silent(), want != Silent::Off, "{patch}");
            // Silence is not a bias: the headers that are sent tell the truth.
            assert!(!s.is_biased());
        }
        for patch in [
            r#", "silent": true"#,
            r#", "silent": "retry-after""#,
            r#", "silent": null"#,
        ] {
            assert!(Scenario::from_json(&base(patch)).is_err(), "{patch}");
        }
    }

    #[test]
    fn rounding_and_bias_reach_the_provider() {
        let s = Scenario::from_json(
            r#"{"limits": {"requests_per_min": 50},
                "jobs": {"count": 1, "input_tokens": [1, 2], "max_tokens": 10, "output_tokens": [1, 2]},
                "remaining_rounding": "exact",
                "bias": {"remaining_tokens_high": 400, "capacity_shortfall": 0.2, "other_client_share": 0.3}}"#,
        )
        .unwrap();
        let cfg = s.mock_config();
        assert_eq!(cfg.remaining_rounding, RemainingRounding::Exact);
        assert_eq!(
            cfg.bias,
            BiasConfig {
                remaining_tokens_high: 400,
                capacity_shortfall: 0.2,
                other_client_share: 0.3,
                ..BiasConfig::default()
            }
        );
        // a partial bias leaves the rest off
        let s = Scenario::from_json(
            r#"{"limits": {"requests_per_min": 50},
                "jobs": {"count": 1, "input_tokens": [1, 2], "max_tokens": 10, "output_tokens": [1, 2]},
                "bias": {"other_client_share": 0.3}}"#,
        )
        .unwrap();
        assert_eq!(s.mock_config().bias.capacity_shortfall, 0.0);
        assert_eq!(s.mock_config().bias.other_client_share, 0.3);
    }

    #[test]
    fn new_fields_reach_the_provider() {
        let s = Scenario::from_json(
            r#"{"provider": "openai",
                "limits": {"requests_per_min": 500, "tokens_per_min": 60000, "capacity_seconds": 2, "configured": true},
                "jobs": {"count": 1, "input_tokens": [1, 2], "max_tokens": 10, "output_tokens": [1, 2]},
                "faults": {"count_rejected": true}}"#,
        )
        .unwrap();
        assert!(s.limits.configured);
        let cfg = s.mock_config();
        assert_eq!((cfg.capacity_seconds, cfg.count_rejected), (2.0, true));
        assert_eq!(cfg.openai_limits.tokens_per_minute, Some(60_000));
    }

    #[test]
    fn rejects_out_of_range_values() {
        let base = |patch: &str| {
            format!(
                r#"{{"limits": {{"requests_per_min": 50}}, "jobs": {{"count": 1, "input_tokens": [1, 2], "max_tokens": 10, "output_tokens": [1, 2]}}{patch}}}"#
            )
        };
        assert!(Scenario::from_json(&base("")).is_ok());
        for patch in [
            r#", "faults": {"overload_rate": 1.5}"#,
            r#", "faults": {"overload_rate": -0.1}"#,
            r#", "workers": 0"#,
            r#", "typo": 1"#,
            r#", "deadline_ms": 0"#,
            r#", "faults": {"count_rejected": true, "typo": 1}"#,
            r#", "remaining_rounding": "nearest""#,
            r#", "bias": {"capacity_shortfall": 1.0}"#,
            r#", "bias": {"capacity_shortfall": -0.1}"#,
            r#", "bias": {"other_client_share": 1.5}"#,
            r#", "bias": {"remaining_tokens_high": -1}"#,
            r#", "bias": {"typo": 1}"#,
        ] {
            assert!(Scenario::from_json(&base(patch)).is_err(), "{patch}");
        }
        assert!(Scenario::from_json(r#"{"limits": {}, "jobs": {"count": 1, "input_tokens": [1, 2], "max_tokens": 10, "output_tokens": [1, 2]}}"#).is_err());
        let limits = |patch: &str| {
            format!(
                r#"{{"limits": {{"requests_per_min": 50{patch}}}, "jobs": {{"count": 1, "input_tokens": [1, 2], "max_tokens": 10, "output_tokens": [1, 2]}}}}"#
            )
        };
        assert!(Scenario::from_json(&limits(r#", "capacity_seconds": 86400"#)).is_ok());
        for patch in [
            r#", "capacity_seconds": 0"#,
            r#", "capacity_seconds": -1"#,
            r#", "capacity_seconds": 86401"#,
            r#", "capacity_seconds": null"#,
            r#", "configured": "yes""#,
            r#", "capacity_secs": 10"#,
        ] {
            assert!(Scenario::from_json(&limits(patch)).is_err(), "{patch}");
        }
        assert!(Scenario::from_json(r#"{"limits": {"requests_per_min": 5}, "jobs": {"count": 0, "input_tokens": [1, 2], "max_tokens": 10, "output_tokens": [1, 2]}}"#).is_err());
        assert!(Scenario::from_json(r#"{"limits": {"requests_per_min": 5}, "jobs": {"count": 5, "arrival": {"per_sec": -1}, "input_tokens": [1, 2], "max_tokens": 10, "output_tokens": [1, 2]}}"#).is_err());
    }
}
