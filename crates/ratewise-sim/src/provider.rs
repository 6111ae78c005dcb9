//! The simulated provider: the mock's pure [`ProviderModel`] answering in
//! virtual time, each answer rendered into the exact status, headers and
//! body the mock server would send, so clients read real responses.

use crate::scenario::Scenario;
use crate::workload::Job;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use ratewise_core::{Dimension, Instant, Provider};
use ratewise_mock::model::{BucketKey, Grant, Outcome, ProviderModel, RequestMeta};
use ratewise_mock::render::{render_answer, RenderCtx};
use ratewise_mock::{Fault, Silent};
use std::time::{Duration, SystemTime};

/// The wall clock at the run's t = 0 (2026-12-01T00:00:00Z minus a day:
/// a fixed date keeps runs reproducible, including reset headers).
pub const WALL_ORIGIN_SECS: u64 = 1_796_342_400;

/// Provider time added to the run's clock when the key starts warm: a
/// warm-up request went out at provider time 0 and the acceleration window
/// (10 s) is over when the run begins.
pub const WARM_OFFSET: Duration = Duration::from_secs(11);

/// What reached the client.
#[derive(Debug, Clone)]
pub enum Delivery {
    /// An HTTP response.
    Response {
        /// Status.
        status: StatusCode,
        /// Headers.
        headers: HeaderMap,
        /// Body.
        body: Vec<u8>,
    },
    /// The connection reset after the request was sent: no status.
    Reset,
}

impl Delivery {
    /// The status, when there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            Delivery::Response { status, .. } => Some(status.as_u16()),
            Delivery::Reset => None,
        }
    }
}

/// What the provider did with one send, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// 2xx: charged.
    Success,
    /// 429 on a per-minute limit.
    RateLimited,
    /// 429 acceleration limit.
    SlowDown,
    /// Spend cap or billing: money.
    Money,
    /// An injected overload.
    Overloaded,
    /// An injected reset.
    Reset,
    /// Anything else.
    Other,
}

/// One send's answer, with what the provider charged.
#[derive(Debug, Clone)]
pub struct Answered {
    /// What reaches the client.
    pub delivery: Delivery,
    /// How the provider saw it.
    pub verdict: Verdict,
    /// The charge to correct when the answer completes (successes).
    pub grant: Option<Grant>,
    /// Time from send to answer.
    pub latency: Duration,
}

/// The provider of one run.
#[derive(Debug)]
pub struct SimProvider {
    model: ProviderModel,
    provider: Provider,
    model_name: String,
    seed: u64,
    offset: Duration,
    base: Duration,
    error: Duration,
    per_token_ms: f64,
    bucket: BucketKey,
    capacity_secs: f64,
    silent: Silent,
}

impl SimProvider {
    /// The provider of `scenario`, warmed up when the scenario starts warm.
    pub fn new(scenario: &Scenario) -> Self {
        let cfg = scenario.mock_config();
        let rules = cfg.faults.clone();
        let mut no_faults = cfg.clone();
        no_faults.faults = Vec::new();
        let mut model = ProviderModel::new(&no_faults);
        let mut offset = Duration::ZERO;
        let model_name = scenario.model_name().to_owned();
        if scenario.warm {
            // The key was in use just before the run: a request on another
            // model class at provider time 0 (acceleration state is per
            // key, buckets per class), and the run starts once the
            // acceleration window is over.
            let meta = RequestMeta::new(scenario.provider, KEY, "ratewise-sim-warmup", 1, 1, 1);
            if let Outcome::Success(g) = model.handle(&meta, Instant::ZERO).outcome {
                model.settle(&g, 0, Instant::ZERO);
            }
            offset = WARM_OFFSET;
        }
        if let Some(cap) = scenario.faults.spend_cap_after_tokens {
            // The cap counts the run's own tokens only.
            model.set_spend_cap(Some(model.spend_usd() + cap as f64 / 1e6));
        }
        model.set_faults(rules);
        let bucket = BucketKey {
            provider: scenario.provider,
            key: KEY.to_owned(),
            class: model.model_class(&model_name),
        };
        SimProvider {
            capacity_secs: model.capacity_seconds(),
            silent: cfg.silent,
            model,
            provider: scenario.provider,
            model_name,
            seed: scenario.seed,
            offset,
            base: Duration::from_millis(scenario.latency.base_ms),
            error: Duration::from_millis(scenario.latency.error_ms),
            per_token_ms: scenario.latency.per_output_token_ms,
            bucket,
        }
    }

    fn ptime(&self, t: Instant) -> Instant {
        t + self.offset
    }

    /// The wall clock at run time `t`.
    pub fn wall(t: Instant) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(WALL_ORIGIN_SECS) + t.since_origin()
    }

    /// What the provider model is told of one send of `job`.
    fn meta(&self, job: &Job) -> RequestMeta {
        RequestMeta::new(
            self.provider,
            KEY,
            self.model_name.clone(),
            job.input_tokens,
            job.max_tokens,
            job.output_tokens,
        )
    }

    /// Handles one send of `job` at run time `now`.
    pub fn send(&mut self, job: &Job, now: Instant) -> Answered {
        let meta = self.meta(job);
        let answer = self.model.handle(&meta, self.ptime(now));
        let (verdict, grant, latency) = match &answer.outcome {
            Outcome::Success(g) => (
                Verdict::Success,
                Some(g.clone()),
                self.base
                    + Duration::try_from_secs_f64(g.output_tokens as f64 * self.per_token_ms / 1e3)
                        .unwrap_or(Duration::ZERO),
            ),
            Outcome::RateLimited { .. } => (Verdict::RateLimited, None, self.error),
            Outcome::SlowDown { .. } => (Verdict::SlowDown, None, self.error),
            Outcome::SpendCap | Outcome::Billing => (Verdict::Money, None, self.error),
            Outcome::Fault(Fault::Overloaded) => (Verdict::Overloaded, None, self.error),
            Outcome::Fault(Fault::Reset) => (Verdict::Reset, None, self.error),
            _ => (Verdict::Other, None, self.error),
        };
        let delivery = if verdict == Verdict::Reset {
            Delivery::Reset
        } else {
            let mut ctx = RenderCtx::new(
                self.provider,
                &self.model_name,
                self.seed,
                answer.nth,
                Self::wall(now),
            );
            // A silent scenario's answers leave out what the mock server's
            // would (`MockConfig::silent`): clients read the same bytes.
            ctx.silent = self.silent;
            let r = render_answer(&ctx, &answer);
            let mut headers = HeaderMap::with_capacity(r.headers.len());
            for (name, value) in &r.headers {
                if let (Ok(n), Ok(v)) = (
                    HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(value),
                ) {
                    headers.append(n, v);
                }
            }
            Delivery::Response {
                status: StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                headers,
                body: r.body,
            }
        };
        Answered {
            delivery,
            verdict,
            grant,
            latency,
        }
    }

    /// The answer of a success completes at `now`: its output charge is
    /// corrected to the actual output and its cost added to the spend.
    pub fn complete(&mut self, grant: &Grant, now: Instant) {
        let at = self.ptime(now);
        self.model.settle(grant, grant.output_tokens, at);
    }

    /// The first run time at or after `now` at which the provider would
    /// admit `job` on every dimension, the acceleration limit included,
    /// if nothing else were sent or settled before then (faults and money
    /// left out). The provider's true state, read through
    /// [`ProviderModel::admission_at`]: only the `oracle` strategy uses it,
    /// as the yardstick no real client can reach.
    pub fn admission_at(&self, job: &Job, now: Instant) -> Instant {
        let meta = self.meta(job);
        let at = self.model.admission_at(&meta, self.ptime(now));
        Instant::from_nanos(at.as_nanos().saturating_sub(self.offset.as_nanos() as u64)).max(now)
    }

    /// True once every send would be answered for money (billing, spend
    /// cap): the provider's true state, for the `oracle` strategy only.
    pub fn refuses_for_money(&self) -> bool {
        self.model.refuses_for_money()
    }

    /// Whole units really left in the run's bucket of `dimension` at `now`
    /// (a full bucket, `limit × capacity_seconds / 60 × (1 − shortfall)`
    /// rounded down, when the bucket was never used). The truth, not what
    /// the headers report: rounding and biases are left out.
    pub fn level(&mut self, dimension: Dimension, limit: u64, now: Instant) -> u64 {
        let at = self.ptime(now);
        let real = 1.0 - self.model.bias().capacity_shortfall;
        let full = (limit as f64 * self.capacity_secs / 60.0 * real).floor() as u64;
        let windows = self.model.windows(&self.bucket, at);
        windows
            .iter()
            .find(|w| w.dimension == dimension)
            .map_or(full, |w| w.remaining)
    }
}

/// The key label every simulated request uses.
pub const KEY: &str = "sim-key";

#[cfg(test)]
mod tests {
    use super::*;
    use ratewise_core::parse::message::try_again_in;

    fn scenario(provider: &str, silent: &str) -> Scenario {
        Scenario::from_json(&format!(
            r#"{{"provider": "{provider}", "limits": {{"requests_per_min": 2}}, "silent": "{silent}",
                "jobs": {{"count": 1, "input_tokens": [10, 10], "max_tokens": 10, "output_tokens": [5, 5]}}}}"#
        ))
        .unwrap()
    }

    fn job() -> Job {
        Job {
            id: 0,
            arrival: Instant::ZERO,
            input_tokens: 10,
            max_tokens: 10,
            output_tokens: 5,
            group: 0,
        }
    }

    /// Three sends at once against 2 requests a minute: what each said.
    fn three(s: &Scenario) -> Vec<(Verdict, HeaderMap, Vec<u8>)> {
        let mut p = SimProvider::new(s);
        (0..3)
            .map(|_| {
                let a = p.send(&job(), Instant::ZERO);
                let Delivery::Response { headers, body, .. } = a.delivery else {
                    panic!("no fault injected")
                };
                (a.verdict, headers, body)
            })
            .collect()
    }

    fn ratelimit_names(h: &HeaderMap) -> Vec<String> {
        h.keys()
            .map(|n| n.as_str().to_owned())
            .filter(|n| {
                n.contains("ratelimit")
                    || n.ends_with("-limit")
                    || n.contains("remaining")
                    || n.contains("reset")
            })
            .collect()
    }

    fn message(body: &[u8]) -> String {
        let v: serde_json::Value = serde_json::from_slice(body).unwrap();
        v["error"]["message"].as_str().unwrap().to_owned()
    }

    #[test]
    fn a_silent_scenario_renders_what_the_silent_mock_sends() {
        for provider in ["anthropic", "openai"] {
            let loud = three(&scenario(provider, "off"));
            assert!(!ratelimit_names(&loud[0].1).is_empty(), "{provider}");
            for silent in ["retry_after", "message"] {
                let quiet = three(&scenario(provider, silent));
                // The same decisions; the bodies as the mock renders them.
                let verdicts =
                    |r: &[(Verdict, HeaderMap, Vec<u8>)]| r.iter().map(|x| x.0).collect::<Vec<_>>();
                assert_eq!(verdicts(&quiet), verdicts(&loud), "{provider} {silent}");
                assert_eq!(
                    verdicts(&quiet),
                    [Verdict::Success, Verdict::Success, Verdict::RateLimited]
                );
                for (_, h, _) in &quiet {
                    assert_eq!(
                        ratelimit_names(h),
                        Vec::<String>::new(),
                        "{provider} {silent}"
                    );
                }
                let (_, h, body) = &quiet[2];
                let msg = message(body);
                if silent == "retry_after" {
                    assert_eq!(h.get("retry-after").unwrap(), "30");
                    assert_eq!(body, &loud[2].2, "{provider}: the usual body");
                } else {
                    assert!(h.get("retry-after").is_none());
                    assert_eq!(try_again_in(&msg), Some(Ok(Duration::from_secs(30))));
                }
            }
        }
    }
}
