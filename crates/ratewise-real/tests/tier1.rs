//! The most common key there is — Anthropic tier 1 (50 RPM, 40,000 ITPM,
//! 8,000 OTPM; buckets holding 10 s of refill) — through `RetryLayer` with
//! the default policy (no deadline, the 60 s inline limit): 80 jobs with
//! `max_tokens` 1,024, 16 at a time, on a cold key. Every call is done:
//! none is handed back. Before the wait was predicted at the pace the ramp
//! will reach, 78 of 80 ended `defer` at once ("admission wait 76.8 s
//! exceeds the inline limit").
//!
//! Time scale: one provider minute = 3 real seconds; nothing asserts on
//! wall-clock speed.

use ratewise_real::{run_real, RealOptions};
use ratewise_sim::Scenario;
use std::time::Duration;

const TIER1: &str = r#"{
  "name": "anthropic-tier-1",
  "description": "Anthropic tier 1, 10 s buckets, 80 jobs at 16, max_tokens 1024, cold key",
  "provider": "anthropic",
  "seed": 7,
  "limits": {
    "requests_per_min": 50,
    "input_tokens_per_min": 40000,
    "output_tokens_per_min": 8000,
    "capacity_seconds": 10
  },
  "jobs": {
    "count": 80,
    "arrival": "burst",
    "input_tokens": [200, 1500],
    "max_tokens": 1024,
    "output_tokens": [50, 400]
  },
  "faults": {
    "overload_rate": 0.0,
    "reset_after_send_rate": 0.0,
    "spend_cap_after_tokens": null,
    "acceleration": false
  },
  "deadline_ms": null,
  "workers": 16
}"#;

#[test]
fn a_tier_1_key_through_the_layer_with_the_default_policy_does_every_call() {
    let scenario = Scenario::from_json(TIER1).unwrap();
    let options = RealOptions {
        seconds_per_minute: 3.0,
        max_real: Duration::from_secs(400),
    };
    let real = run_real(&scenario, &options, &mut |_, _| {}).unwrap();
    let r = &real.report;
    eprintln!(
        "tier 1: done {}/{}, handed back {}, sends {}, 429s {}, goodput {:.3}, real {:?}",
        r.jobs_done,
        r.jobs_total,
        real.handed_back,
        r.sends,
        r.sends_429,
        r.goodput_ratio,
        real.real_elapsed
    );
    assert_eq!(r.jobs_done, 80, "{r:?}");
    assert_eq!(real.handed_back, 0, "a call ended `defer`");
    assert_eq!(r.jobs_lost, 0);
}
