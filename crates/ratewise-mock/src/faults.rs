//! Faults to inject: what goes wrong, and when.
//!
//! A [`FaultRule`] pairs a [`Fault`] with a [`Trigger`] and optional filters.
//! Rules are checked in order for every request that passed the money checks
//! (billing and spend cap); the first that fires wins. Randomness comes from
//! a seeded generator inside the [`FaultPlan`], so a run is reproducible.
//!
//! In JSON (the config file and [`crate::MockServer::set_faults`]):
//!
//! ```json
//! {"fault": "overloaded", "when": {"nth": [1, 2]}}
//! {"fault": {"status": {"status": 502, "html": true}}, "when": {"probability": 0.1}}
//! {"fault": "reset", "when": "always", "provider": "openai"}
//! {"fault": {"stall": {"ms": 3000}}, "when": {"between": {"from_secs": 0, "until_secs": 60}}}
//! {"fault": {"stream_cut": {"after_events": 3}}, "when": "always"}
//! {"fault": {"stream_error": {"after_events": 0}}, "when": {"nth": [1]}}
//! {"fault": {"retry_after": {"format": "http_date", "secs": 2}}, "when": {"nth": [1]}}
//! {"fault": "upstream_rate_limited", "when": {"nth": [1]}}
//! {"fault": {"error_in_body": {"after_events": 3}}, "when": "always"}
//! ```

use ratewise_core::{Instant, Provider};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One thing that goes wrong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// Anthropic 529 `overloaded_error`; OpenAI 503 `server_is_overloaded`.
    Overloaded,
    /// Any other status (500, 502, 503, 504, 408, ...) with the provider's
    /// error body, or a proxy's HTML page when `html` is set.
    Status {
        /// HTTP status to answer.
        status: u16,
        /// Send an HTML body (as a proxy or load balancer would).
        #[serde(default)]
        html: bool,
    },
    /// Read the whole request, then drop the connection without writing a
    /// byte (TCP RST via `SO_LINGER 0`).
    Reset,
    /// Wait `ms` real milliseconds before answering normally, to outlast a
    /// client timeout. (Real time, not scaled: it is about client timers.)
    Stall {
        /// Real milliseconds to wait.
        ms: u64,
    },
    /// Streaming only: send the first `after_events` events of a successful
    /// stream, then end the body cleanly without `message_stop` / `[DONE]`.
    StreamCut {
        /// Events sent before the end.
        after_events: usize,
    },
    /// Streaming only: after `after_events` events (0 = as the first frame)
    /// send an in-band error (`event: error` with `overloaded_error`;
    /// OpenAI: a `data:` error object) and end the body.
    StreamError {
        /// Events sent before the error.
        after_events: usize,
    },
    /// A 429 from the model's upstream provider rather than the key's own
    /// limit: OpenRouter's `{"error":{"code":429,"message":"Provider
    /// returned error","metadata":{"provider_name":…,"raw":…}}}`
    /// ([`CompatibleConfig::upstream_provider`](crate::CompatibleConfig::upstream_provider));
    /// other flavors: their plain requests 429, without `retry-after`.
    UpstreamRateLimited,
    /// An error inside a successful answer, as OpenRouter sends one once
    /// the model started: a JSON request gets 200 with
    /// `{"error":{"code":502,"message":…}}`; a stream sends
    /// `after_events` events, then an error chunk (`finish_reason:
    /// "error"`) and ends. Anthropic and Gemini answer a plain 502.
    ErrorInBody {
        /// Stream events sent before the error chunk (default 2).
        #[serde(default = "two")]
        after_events: usize,
    },
    /// A 429 rate-limit answer whose `retry-after` is written in an unusual
    /// or broken form.
    RetryAfter {
        /// How the header is written.
        format: RetryAfterFormat,
        /// The wait it states, in real seconds (default 1).
        #[serde(default = "one")]
        secs: u64,
    },
}

fn one() -> u64 {
    1
}

fn two() -> usize {
    2
}

/// How a `retry-after` header is written by [`Fault::RetryAfter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryAfterFormat {
    /// Delta-seconds (`2`).
    Seconds,
    /// An HTTP-date `secs` from now (`Sun, 29 Nov 2026 12:00:02 GMT`).
    HttpDate,
    /// Not a number (`soon`).
    Garbage,
    /// A negative number (`-1`).
    Negative,
}

/// When a rule fires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// Every matching request.
    Always,
    /// Each matching request with this probability (seeded).
    Probability(f64),
    /// The n-th requests the server received (1-based, counting every API
    /// request, whatever its outcome).
    Nth(Vec<u64>),
    /// Requests arriving in this window of provider time since start.
    Between {
        /// Start, provider seconds since the server started (inclusive).
        from_secs: f64,
        /// End, provider seconds since the server started (exclusive).
        until_secs: f64,
    },
}

/// A fault, when it fires, and which requests it applies to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultRule {
    /// What goes wrong.
    pub fault: Fault,
    /// When.
    pub when: Trigger,
    /// Only requests to this provider's endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<Provider>,
    /// Only requests for this model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Fire at most this many times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

impl FaultRule {
    /// A rule that always fires, for any provider and model.
    pub fn always(fault: Fault) -> Self {
        Self::new(fault, Trigger::Always)
    }

    /// A rule firing on the given 1-based request numbers.
    pub fn nth(fault: Fault, nths: impl IntoIterator<Item = u64>) -> Self {
        Self::new(fault, Trigger::Nth(nths.into_iter().collect()))
    }

    /// A rule with the given trigger, for any provider and model.
    pub fn new(fault: Fault, when: Trigger) -> Self {
        FaultRule {
            fault,
            when,
            provider: None,
            model: None,
            limit: None,
        }
    }
}

/// The rules plus the seeded randomness and counters that evaluate them.
#[derive(Debug, Clone)]
pub struct FaultPlan {
    rules: Vec<(FaultRule, u64)>,
    rng: u64,
}

impl FaultPlan {
    /// A plan over `rules`, drawing randomness from `seed`.
    pub fn new(rules: Vec<FaultRule>, seed: u64) -> Self {
        FaultPlan {
            rules: rules.into_iter().map(|r| (r, 0)).collect(),
            rng: seed ^ 0x6a09_e667_f3bc_c909,
        }
    }

    /// Replaces the rules (the random stream continues).
    pub fn set_rules(&mut self, rules: Vec<FaultRule>) {
        self.rules = rules.into_iter().map(|r| (r, 0)).collect();
    }

    /// The rules in use.
    pub fn rules(&self) -> Vec<FaultRule> {
        self.rules.iter().map(|(r, _)| r.clone()).collect()
    }

    /// The fault for request number `nth` (1-based) to `provider` for
    /// `model`, arriving at provider time `now`, if any rule fires.
    pub fn pick(
        &mut self,
        nth: u64,
        provider: Provider,
        model: &str,
        now: Instant,
    ) -> Option<Fault> {
        for i in 0..self.rules.len() {
            let (rule, fired) = &self.rules[i];
            if rule.provider.is_some_and(|p| p != provider)
                || rule.model.as_deref().is_some_and(|m| m != model)
                || rule.limit.is_some_and(|l| *fired >= l)
            {
                continue;
            }
            let hit = match &rule.when {
                Trigger::Always => true,
                Trigger::Nth(ns) => ns.contains(&nth),
                Trigger::Probability(p) => {
                    let p = *p;
                    self.next_f64() < p
                }
                Trigger::Between {
                    from_secs,
                    until_secs,
                } => {
                    let t = now.since_origin();
                    secs(*from_secs) <= t && t < secs(*until_secs)
                }
            };
            if hit {
                self.rules[i].1 += 1;
                return Some(self.rules[i].0.fault.clone());
            }
        }
        None
    }

    /// splitmix64: small, seeded, good enough for fault dice.
    fn next_f64(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nth_filters_and_limits() {
        let mut rule = FaultRule::nth(Fault::Overloaded, [2, 3]);
        rule.limit = Some(1);
        let mut plan = FaultPlan::new(
            vec![
                rule,
                FaultRule {
                    provider: Some(Provider::Openai),
                    ..FaultRule::always(Fault::Reset)
                },
            ],
            1,
        );
        let t = Instant::ZERO;
        assert_eq!(plan.pick(1, Provider::Anthropic, "m", t), None);
        assert_eq!(
            plan.pick(2, Provider::Anthropic, "m", t),
            Some(Fault::Overloaded)
        );
        assert_eq!(plan.pick(3, Provider::Anthropic, "m", t), None);
        assert_eq!(plan.pick(4, Provider::Openai, "m", t), Some(Fault::Reset));
    }

    #[test]
    fn probability_is_seeded_and_roughly_right() {
        let rules = vec![FaultRule::new(
            Fault::Overloaded,
            Trigger::Probability(0.25),
        )];
        let run = |seed| {
            let mut p = FaultPlan::new(rules.clone(), seed);
            (1..=4000)
                .filter(|n| {
                    p.pick(*n, Provider::Anthropic, "m", Instant::ZERO)
                        .is_some()
                })
                .count()
        };
        assert_eq!(run(9), run(9));
        assert!((800..1200).contains(&run(9)), "{}", run(9));
    }

    #[test]
    fn schedule_uses_provider_time() {
        let rules = vec![FaultRule::new(
            Fault::Overloaded,
            Trigger::Between {
                from_secs: 10.0,
                until_secs: 20.0,
            },
        )];
        let mut p = FaultPlan::new(rules, 0);
        assert!(p
            .pick(1, Provider::Anthropic, "m", Instant::from_millis(9_999))
            .is_none());
        assert!(p
            .pick(2, Provider::Anthropic, "m", Instant::from_millis(10_000))
            .is_some());
        assert!(p
            .pick(3, Provider::Anthropic, "m", Instant::from_millis(20_000))
            .is_none());
    }

    #[test]
    fn rules_parse_from_json() {
        let r: FaultRule = serde_json::from_str(
            r#"{"fault": {"status": {"status": 502, "html": true}}, "when": {"probability": 0.1}, "provider": "openai"}"#,
        )
        .unwrap();
        assert_eq!(
            r.fault,
            Fault::Status {
                status: 502,
                html: true
            }
        );
        let r: FaultRule = serde_json::from_str(r#"{"fault": "reset", "when": "always"}"#).unwrap();
        assert_eq!(r.when, Trigger::Always);
        let r: FaultRule = serde_json::from_str(
            r#"{"fault": {"retry_after": {"format": "garbage"}}, "when": {"nth": [1]}}"#,
        )
        .unwrap();
        assert_eq!(
            r.fault,
            Fault::RetryAfter {
                format: RetryAfterFormat::Garbage,
                secs: 1
            }
        );
    }
}
