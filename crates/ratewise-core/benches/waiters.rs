//! Admission where it matters: jobs waiting on a scope at the provider's
//! pace, not an idle limiter with room to spare.
//!
//! `cargo bench -p ratewise-core --bench waiters` (a few seconds). A plain
//! binary that prints figures; nothing is asserted. Time is an explicit
//! fake [`Now`] shared by the threads (`std::time::Instant` only times the
//! runs), so the admission decisions do not depend on the machine; the
//! wall-clock rates do, and vary with its load.
//!
//! The scope: an output-token bucket holding [`IN_FLIGHT`] jobs' worth of
//! `max_tokens` ([`MAX_TOKENS`]), full ramp. A job uses [`USED`] output
//! tokens and takes [`LATENCY`] of fake time, exactly the refill of what it
//! used, so a settle gives back the room of one job: the next can go.
//!
//! 1. **Paced pairs**, 2 threads: each thread repeatedly admits (on `Wait`
//!    it moves the shared clock to `until` and asks again) and settles at
//!    once. Every admission is at the pace; the figure is admissions plus
//!    settles per second of `Shared`'s own work, and asks per admission.
//! 2. **1,000 waiting jobs**, 2 threads, each driving 500 of them: a thread
//!    settles its oldest job in flight, then wakes waiters. *Wake all* is
//!    what `ratewise-tower` did before its per-scope FIFO queues
//!    (`notify(usize::MAX)` to every waiter on every settle): every waiting job of each thread asks again once per
//!    wave (a wave after any settle since its last, by either thread;
//!    settles during a wave coalesce into the next one, as a listener
//!    notified twice before it runs asks once, so with two threads a
//!    settle costs about one thread's 500 asks, not 1,000).
//!    *Wake exact* (what the layer's queues do now: the head asks, and
//!    hands the turn on when admitted) stops a wave at the first `Wait`: the jobs that could be
//!    admitted, plus the one that learns there is no more room. A thread
//!    with nothing in flight and nothing admitted sleeps until the earliest
//!    `until` (the clock moves there: a timer wave).
//! 3. The same with one thread and 1,000 waiting jobs: deterministic counts
//!    of re-asks per settle against admissions per settle.

use ratewise_core::admit::{
    Admission, AdmitRequest, Burst, Config, Controller, Limits, RampConfig, Reservation, Shared,
    Target,
};
use ratewise_core::{Instant, Now, Usage};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// Jobs whose `max_tokens` the output bucket holds.
const IN_FLIGHT: u64 = 8;
/// Each job's `max_tokens` (what admission reserves).
const MAX_TOKENS: u64 = 1_000;
/// Output tokens a job actually uses.
const USED: u64 = 100;
/// Output tokens per minute: the pace bucket (20 s) holds `IN_FLIGHT` jobs.
const LIMIT: u64 = IN_FLIGHT * MAX_TOKENS * 3;
/// Fake time per job: the refill of `USED` tokens.
const LATENCY: Duration = Duration::from_nanos(USED * 60_000_000_000 / LIMIT);
/// Waiting jobs in the herd runs.
const WAITING: usize = 1_000;
/// Runs per figure (the median is printed).
const RUNS: usize = 5;

fn shared() -> (Shared, Target) {
    let burst = Duration::from_secs(20);
    let mut c = Controller::new({
        let mut config = Config::default();
        config.limits = Limits {
            output_tokens: Some(LIMIT),
            ..Limits::NONE
        };
        config.burst = Burst::uniform(burst).with_known_credit(burst);
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp.peak = 1000;
            ramp.warm_start = true;
            ramp
        };
        config.seed = Some(7);
        config
    });
    let target = c.target("key", "claude-sonnet-4-5");
    (Shared::new(c), target)
}

fn request(target: Target) -> AdmitRequest {
    let mut req = AdmitRequest::new(target);
    req.input_estimate = Some(500);
    req.max_tokens = Some(MAX_TOKENS);
    req
}

const USAGE: Usage = Usage {
    input_tokens: 500,
    output_tokens: USED,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
};

/// The fake clock, in ns since the origin.
struct Clock(AtomicU64);

impl Clock {
    fn new() -> Self {
        Clock(AtomicU64::new(0))
    }
    fn now(&self) -> Now {
        at(self.0.load(Ordering::Acquire))
    }
    /// Moves the clock to at least `t`.
    fn reach(&self, t: Instant) -> Now {
        let t = t.as_nanos();
        at(self.0.fetch_max(t, Ordering::AcqRel).max(t))
    }
    /// Moves the clock on by `d`.
    fn advance(&self, d: Duration) -> Now {
        let d = d.as_nanos() as u64;
        at(self.0.fetch_add(d, Ordering::AcqRel) + d)
    }
}

fn at(ns: u64) -> Now {
    Now::new(Instant::from_nanos(ns), SystemTime::UNIX_EPOCH)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

/// Counts of one run.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    asks: u64,
    admitted: u64,
    settles: u64,
    /// Waves after a settle (wake) and after a timer.
    waves: u64,
    timer_waves: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.asks += o.asks;
        self.admitted += o.admitted;
        self.settles += o.settles;
        self.waves += o.waves;
        self.timer_waves += o.timer_waves;
    }
}

/// Part 1: `per_thread` admit + settle pairs on each of 2 threads.
fn paced_pairs(per_thread: u64) -> (Counts, Duration) {
    let (s, target) = shared();
    let req = request(target);
    let clock = Clock::new();
    let start = std::time::Instant::now();
    let counts = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                sc.spawn(|| {
                    let mut n = Counts::default();
                    for _ in 0..per_thread {
                        let mut now = clock.now();
                        let r = loop {
                            n.asks += 1;
                            match s.admit(&req, now) {
                                Admission::Go(r) => break r,
                                Admission::Wait { until, .. } => now = clock.reach(until),
                                other => panic!("{other:?}"),
                            }
                        };
                        n.admitted += 1;
                        s.lock().settle(r, &USAGE, now);
                        n.settles += 1;
                    }
                    n
                })
            })
            .collect();
        let mut total = Counts::default();
        for h in hs {
            total.add(&h.join().unwrap());
        }
        total
    });
    let elapsed = start.elapsed();
    assert!(s.lock().ledger().is_clean());
    (counts, elapsed)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    /// Every waiting job asks again (`notify(usize::MAX)`).
    All,
    /// Asks stop at the first `Wait`.
    Exact,
}

/// Parts 2 and 3: `threads` threads each drive `WAITING / threads` jobs
/// until they have settled `settles_per_thread`.
fn herd(threads: usize, wake: Wake, settles_per_thread: u64) -> (Counts, Duration) {
    let (s, target) = shared();
    let req = request(target);
    let clock = Clock::new();
    // Settles so far, by any thread: the notification.
    let notified = AtomicU64::new(0);
    let jobs = WAITING / threads;
    let start = std::time::Instant::now();
    let counts = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                sc.spawn(|| {
                    let mut n = Counts::default();
                    let mut flying: VecDeque<Reservation> = VecDeque::new();
                    // The first wave runs at once (the jobs arrive).
                    let mut seen = u64::MAX;
                    let mut earliest: Option<Instant> = None;
                    while n.settles < settles_per_thread {
                        if let Some(r) = flying.pop_front() {
                            let now = clock.advance(LATENCY);
                            s.lock().settle(r, &USAGE, now);
                            n.settles += 1;
                            notified.fetch_add(1, Ordering::AcqRel);
                        }
                        let g = notified.load(Ordering::Acquire);
                        let timer = g == seen && flying.is_empty();
                        if g == seen && !timer {
                            continue;
                        }
                        if timer {
                            // Nothing in flight here and no settle since
                            // the last wave: sleep until the earliest
                            // `until` (or yield to the other thread).
                            match earliest.take() {
                                Some(t) => {
                                    clock.reach(t);
                                }
                                None => {
                                    std::thread::yield_now();
                                    continue;
                                }
                            }
                            n.timer_waves += 1;
                        }
                        seen = g;
                        n.waves += 1;
                        let now = clock.now();
                        let waiting = jobs - flying.len();
                        for _ in 0..waiting {
                            n.asks += 1;
                            match s.admit(&req, now) {
                                Admission::Go(r) => {
                                    n.admitted += 1;
                                    flying.push_back(r);
                                }
                                Admission::Wait { until, .. } => {
                                    earliest = Some(earliest.map_or(until, |e| e.min(until)));
                                    if wake == Wake::Exact {
                                        break;
                                    }
                                }
                                other => panic!("{other:?}"),
                            }
                        }
                    }
                    for r in flying {
                        s.lock().release(r, clock.now());
                    }
                    n
                })
            })
            .collect();
        let mut total = Counts::default();
        for h in hs {
            total.add(&h.join().unwrap());
        }
        total
    });
    let elapsed = start.elapsed();
    assert!(s.lock().ledger().is_clean());
    (counts, elapsed)
}

fn per_sec(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn main() {
    // `cargo bench` passes `--bench`; a filter is not supported.
    println!(
        "scope: output bucket of {IN_FLIGHT} jobs x {MAX_TOKENS} max_tokens, \
         {USED} used per job, {LATENCY:?} of fake time per job; median of {RUNS} runs"
    );

    // 1. Paced pairs.
    let per_thread = 200_000;
    let mut rates = Vec::new();
    let mut last = Counts::default();
    for _ in 0..RUNS {
        let (c, d) = paced_pairs(per_thread);
        rates.push(per_sec(c.admitted + c.settles, d));
        last = c;
    }
    let rate = median(rates);
    println!("paced pairs, 2 threads ({per_thread} admit+settle pairs each):");
    println!(
        "  {:>10.0} admissions+settles/s ({:.0} ns per admit+settle pair), {:.2} asks per admission",
        rate,
        2e9 / rate,
        last.asks as f64 / last.admitted as f64
    );

    // 2. and 3. Waiting jobs.
    for (threads, settles) in [(2usize, 5_000u64), (1, 5_000)] {
        for wake in [Wake::All, Wake::Exact] {
            let mut rates = Vec::new();
            let mut asks = Vec::new();
            let mut last = Counts::default();
            for _ in 0..RUNS {
                let (c, d) = herd(threads, wake, settles);
                rates.push(per_sec(c.admitted + c.settles, d));
                asks.push(per_sec(c.asks, d));
                last = c;
            }
            let (rate, ask_rate) = (median(rates), median(asks));
            let per_settle = |x: u64| x as f64 / last.settles as f64;
            println!(
                "{WAITING} waiting jobs, {threads} thread(s), wake {}: {} settles",
                match wake {
                    Wake::All => "all (before the FIFO queues)",
                    Wake::Exact => "exact",
                },
                last.settles
            );
            println!(
                "  {:>10.0} admissions+settles/s, {:>10.0} asks/s",
                rate, ask_rate
            );
            println!(
                "  per settle: {:.1} asks, {:.3} admitted, {:.3} waves ({} timer waves in all)",
                per_settle(last.asks),
                per_settle(last.admitted),
                per_settle(last.waves),
                last.timer_waves
            );
        }
    }
}
