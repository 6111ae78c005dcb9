use ratewise_core::admit::{
    AdmissionState, AdmitRequest, Config, Controller, Limits, RampConfig, Shared,
};
use ratewise_core::{Instant, Now, Usage};
use std::time::SystemTime;
fn main() {
    const HUGE: u64 = 1_000_000_000_000;
    let mut c = Controller::new(Config {
        limits: Limits {
            requests: Some(HUGE),
            input_tokens: Some(HUGE),
            output_tokens: Some(HUGE),
            tokens: None,
        },
        ramp: RampConfig {
            start: 1000,
            ..RampConfig::default()
        },
        ..Config::default()
    });
    let target = c.target("key", "claude-sonnet-4-5");
    let shared = Shared::new(c);
    let mut req = AdmitRequest::new(target);
    req.input_estimate = Some(1_200);
    req.max_tokens = Some(1_024);
    let usage = Usage {
        input_tokens: 1_100,
        output_tokens: 300,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
    };
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let origin = std::time::Instant::now();
    let mut ok = 0u64;
    let t0 = std::time::Instant::now();
    for _ in 0..n {
        let now = Now::new(
            Instant::from_origin(origin.elapsed()),
            SystemTime::UNIX_EPOCH,
        );
        if let Some(r) = shared.admit(std::hint::black_box(&req), now).go() {
            shared.settle(r, std::hint::black_box(&usage), now);
            ok += 1;
        }
    }
    let el = t0.elapsed();
    let gov = governor::RateLimiter::direct(governor::Quota::per_second(std::num::NonZeroU32::MAX));
    let t0 = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(gov.check().is_ok());
    }
    let g = t0.elapsed();
    println!(
        "{ok} ratewise {:.1} ns/pair, governor {:.1} ns, ratio {:.2}",
        el.as_nanos() as f64 / n as f64,
        g.as_nanos() as f64 / n as f64,
        el.as_secs_f64() / g.as_secs_f64()
    );
}
