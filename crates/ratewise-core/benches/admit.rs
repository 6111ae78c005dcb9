//! Admission cost: `admit` + `settle` on the three-bucket limiter versus
//! `governor`'s single-bucket `check`, uncontended and with two threads
//! sharing one limiter. No target: a lock-free lane in `Shared` once ran
//! these at 1.9–2.3× of governor uncontended and 1.05–1.4× with two
//! threads, and was removed, because at the provider's pace it made every
//! other admission slower (`benches/waiters.rs`). Through its lock,
//! `Shared` is about 3× of governor here; the printed ratios say so.
//!
//! `cargo bench -p ratewise-core --bench admit` (about 30 s: warm-up 1 s and
//! measurement 3 s per benchmark are set below). At the end it prints the
//! ratios of this run's means.
//!
//! The limiter is [`Shared`], what workers share: the [`Controller`] behind
//! a mutex, one lock session per `admit` and per `settle`. The bare
//! [`Controller`] line is the state machine alone, without the lock.
//!
//! This is a micro-benchmark of an idle limiter with room to spare: at the
//! provider's pace the sends are limited to its rate anyway, and what a
//! job waits for is the pace and how waiters are woken. `benches/waiters.rs`
//! measures that.
//!
//! Both sides read a monotonic clock per operation (governor reads its own;
//! ratewise is sans-IO, so the benchmark reads `std::time::Instant` and
//! passes it in), so the comparison includes the same clock cost. Limits are
//! high enough that every operation is admitted: this measures the
//! bookkeeping, not waiting. A second pair runs without reading a clock
//! (a virtual clock for ratewise, governor's `FakeRelativeClock`) to compare
//! the arithmetic alone.

use criterion::{criterion_group, Criterion};
use governor::{Quota, RateLimiter};
use ratewise_core::admit::{AdmitRequest, Config, Controller, Limits, RampConfig, Shared, Target};
use ratewise_core::{Instant, Now, Usage};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, SystemTime};

const HUGE: u64 = 1_000_000_000_000;

const CONTROLLER: &str = "ratewise admit+settle, 3 buckets, bare Controller";
const SHARED: &str = "ratewise admit+settle, 3 buckets, Shared";
const GOVERNOR: &str = "governor check, 1 bucket";
const CONTROLLER_VIRTUAL: &str = "ratewise admit+settle, 3 buckets, bare Controller, virtual clock";
const GOVERNOR_FAKE: &str = "governor check, 1 bucket, fake clock";
const SHARED_2: &str = "ratewise admit+settle, 3 buckets, Shared, 2 threads";
const GOVERNOR_2: &str = "governor check, 1 bucket, 2 threads";

fn controller() -> (Controller, Target) {
    let mut c = Controller::new({
        let mut config = Config::default();
        config.limits = Limits {
            requests: Some(HUGE),
            input_tokens: Some(HUGE),
            output_tokens: Some(HUGE),
            tokens: None,
        };
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        config
    });
    let target = c.target("key", "claude-sonnet-4-5");
    (c, target)
}

fn request(target: Target) -> AdmitRequest {
    let mut req = AdmitRequest::new(target);
    req.input_estimate = Some(1_200);
    req.max_tokens = Some(1_024);
    req
}

const USAGE: Usage = Usage {
    input_tokens: 1_100,
    output_tokens: 300,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
};

fn now(origin: std::time::Instant) -> Now {
    Now::new(
        Instant::from_origin(origin.elapsed()),
        SystemTime::UNIX_EPOCH,
    )
}

fn governor_limiter() -> governor::DefaultDirectRateLimiter {
    RateLimiter::direct(Quota::per_second(NonZeroU32::MAX))
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("admission");
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(3));

    // Uncontended.
    let (mut ctl, target) = controller();
    let req = request(target);
    let origin = std::time::Instant::now();
    g.bench_function(CONTROLLER, |b| {
        b.iter(|| {
            let n = now(origin);
            if let Some(r) = ctl.admit(black_box(&req), n).go() {
                ctl.settle(r, black_box(&USAGE), n);
            }
        })
    });
    let (ctl, target) = controller();
    let shared = Shared::new(ctl);
    let req = request(target);
    g.bench_function(SHARED, |b| {
        b.iter(|| {
            let n = now(origin);
            if let Some(r) = shared.admit(black_box(&req), n).go() {
                shared.lock().settle(r, black_box(&USAGE), n);
            }
        })
    });
    let gov = governor_limiter();
    g.bench_function(GOVERNOR, |b| b.iter(|| black_box(gov.check().is_ok())));

    // The arithmetic alone, no clock read: ratewise steps a virtual clock
    // by 1 µs per operation (so the buckets refill and every call is
    // admitted); governor's fake clock stands still (its burst is 2³²).
    let (mut ctl, target) = controller();
    let req = request(target);
    let mut virtual_ns = 0u64;
    g.bench_function(CONTROLLER_VIRTUAL, |b| {
        b.iter(|| {
            virtual_ns += 1_000;
            let n = Now::new(
                Instant::from_origin(Duration::from_nanos(virtual_ns)),
                SystemTime::UNIX_EPOCH,
            );
            let r = ctl.admit(black_box(&req), n).go().expect("admitted");
            ctl.settle(r, black_box(&USAGE), n);
        })
    });
    let fake = RateLimiter::direct_with_clock(
        Quota::per_second(NonZeroU32::MAX),
        governor::clock::FakeRelativeClock::default(),
    );
    g.bench_function(GOVERNOR_FAKE, |b| {
        b.iter(|| black_box(fake.check().is_ok()))
    });

    // Two threads sharing one limiter: each thread does `iters` operations;
    // the time reported is wall time per pair of concurrent operations.
    let (ctl, target) = controller();
    let shared = Shared::new(ctl);
    let req = request(target);
    g.bench_function(SHARED_2, |b| {
        b.iter_custom(|iters| {
            let start = std::time::Instant::now();
            std::thread::scope(|s| {
                for _ in 0..2 {
                    s.spawn(|| {
                        for _ in 0..iters {
                            let n = now(origin);
                            if let Some(r) = shared.admit(black_box(&req), n).go() {
                                shared.lock().settle(r, black_box(&USAGE), n);
                            }
                        }
                    });
                }
            });
            start.elapsed()
        })
    });
    // Reference, on request (`ADMIT_BENCH_UNSHARED=1`): each thread its own
    // limiter, nothing shared. What two threads cost on this machine before
    // any contention; on a loaded 2-core box it is far above the
    // uncontended figure.
    if std::env::var_os("ADMIT_BENCH_UNSHARED").is_some() {
        let (c1, target) = controller();
        let (c2, _) = controller();
        let sh = [Shared::new(c1), Shared::new(c2)];
        let req = request(target);
        g.bench_function("reference: 2 threads, one limiter each", |b| {
            b.iter_custom(|iters| {
                let start = std::time::Instant::now();
                std::thread::scope(|s| {
                    for shared in &sh {
                        let req = &req;
                        s.spawn(move || {
                            for _ in 0..iters {
                                let n = now(origin);
                                if let Some(r) = shared.admit(black_box(req), n).go() {
                                    shared.lock().settle(r, black_box(&USAGE), n);
                                }
                            }
                        });
                    }
                });
                start.elapsed()
            })
        });
    }
    let gov = governor_limiter();
    g.bench_function(GOVERNOR_2, |b| {
        b.iter_custom(|iters| {
            let start = std::time::Instant::now();
            std::thread::scope(|s| {
                for _ in 0..2 {
                    s.spawn(|| {
                        for _ in 0..iters {
                            black_box(gov.check().is_ok());
                        }
                    });
                }
            });
            start.elapsed()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    print_ratios();
}

/// This run's time of one benchmark of the group, in ns: criterion's
/// estimate it prints as `time:` (the slope where it fits one, else the
/// mean); `None` when the benchmark was filtered out.
fn time_ns(name: &str) -> Option<f64> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let path = target
        .join("criterion/admission")
        .join(name)
        .join("new/estimates.json");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    ["slope", "mean"]
        .iter()
        .find_map(|k| json[k]["point_estimate"].as_f64())
}

fn print_ratios() {
    let pairs = [
        ("uncontended", SHARED, GOVERNOR),
        ("2 threads", SHARED_2, GOVERNOR_2),
        ("uncontended, bare Controller", CONTROLLER, GOVERNOR),
        (
            "no clock, bare Controller",
            CONTROLLER_VIRTUAL,
            GOVERNOR_FAKE,
        ),
    ];
    println!("ratewise / governor, this run's figures:");
    for (case, ours, theirs) in pairs {
        if let (Some(a), Some(b)) = (time_ns(ours), time_ns(theirs)) {
            println!("  {case:<30} {a:>7.1} ns / {b:>6.1} ns = {:.2}x", a / b);
        }
    }
}
