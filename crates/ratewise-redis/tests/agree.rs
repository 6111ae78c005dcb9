//! The property the store exists for: processes sharing a key through
//! Redis decide as one in-memory store would. The same random sequence of
//! operations — admit, settle, release, a header view, a 429's pause, a
//! stop, a resume, time steps through the injected clock — goes to one
//! in-memory store and, spread at random over two processes with different
//! clock origins, to two Redis stores sharing a key. Every admission and
//! every wait is the same; there is no rounding to allow for (the record
//! keeps the core's exact integers).

mod common;

use common::at;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use ratewise_core::admit::{
    self, Admission, AdmitRequest, Controller, End, Limits, Observed, Reservation, Shared, Store,
    Update,
};
use ratewise_core::classify::{classify_response, Classification, ResponseView};
use ratewise_core::{Action, Cause, Decision, Instant, Now, Provider, Usage};
use ratewise_redis::{Clock, Config, RedisStore};
use std::time::{Duration, SystemTime};

const MODEL: &str = "claude-sonnet-4-5";
const RATE_LIMITED: &str = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
const OK: &str =
    r#"{"type":"message","content":[],"usage":{"input_tokens":10,"output_tokens":10}}"#;

fn admission() -> admit::Config {
    let mut c = admit::Config::default();
    c.limits = Limits {
        requests: Some(120),
        output_tokens: Some(20_000),
        ..Limits::NONE
    };
    // Jitter comes from each process's own source: none, to compare exactly.
    c.pause_jitter = Duration::ZERO;
    c.seed = Some(1);
    c
}

fn redis_config(prefix: &str) -> Config {
    let mut c = Config::default();
    c.admission = admission();
    c.prefix = prefix.to_owned();
    // The injected time, and waits as the buckets say them.
    c.clock = Clock::Caller;
    c.recheck = None;
    c
}

fn classify(status: u16, headers: &[(&str, String)], body: &str, now: Now) -> Classification {
    let mut h = HeaderMap::new();
    for (k, v) in headers {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    let view = ResponseView {
        status: StatusCode::from_u16(status).unwrap(),
        headers: &h,
        body: body.as_bytes(),
    };
    classify_response(Provider::Anthropic, &view, now.wall)
}

/// A process: its store, and how much later than the reference its
/// monotonic clock started.
struct Process {
    store: RedisStore,
    late: Duration,
}

impl Process {
    fn now(&self, reference: Now) -> Now {
        Now::new(
            Instant::from_origin(reference.instant.since_origin() - self.late),
            reference.wall,
        )
    }
}

#[derive(Debug, PartialEq)]
enum Seen {
    Go,
    Wait(SystemTime),
    Stopped(Cause),
    Other(String),
}

fn seen(a: &Admission, now: Now) -> Seen {
    match a {
        Admission::Go(_) => Seen::Go,
        Admission::Wait { until, .. } => Seen::Wait(now.wall_at(*until)),
        Admission::Stopped { cause, .. } => Seen::Stopped(*cause),
        other => Seen::Other(format!("{other:?}")),
    }
}

/// What ends a held reservation, the same on both sides.
enum Ending {
    Settle(Usage),
    Release,
    /// A success whose headers show the output bucket's remaining.
    View(u64, Usage),
    /// A 429 with a retry-after hint: the scope pauses.
    Pause(u64),
}

fn update(res: Reservation, ending: &Ending, now: Now) -> Update {
    match ending {
        Ending::Settle(u) => Update::ending(End::Settle {
            reservation: res,
            usage: *u,
        }),
        Ending::Release => Update::ending(End::Release { reservation: res }),
        Ending::View(remaining, u) => {
            let cl = classify(
                200,
                &[
                    ("content-type", "application/json".into()),
                    ("anthropic-ratelimit-output-tokens-limit", "20000".into()),
                    (
                        "anthropic-ratelimit-output-tokens-remaining",
                        remaining.to_string(),
                    ),
                ],
                OK,
                now,
            );
            let o = Observed::new(res.scope(), cl, Decision::new(Action::Done)).of_sent(res.sent());
            Update::answer(
                o,
                Some(End::Settle {
                    reservation: res,
                    usage: *u,
                }),
            )
        }
        Ending::Pause(hint) => {
            let cl = classify(429, &[("retry-after", hint.to_string())], RATE_LIMITED, now);
            let o = Observed::new(res.scope(), cl, Decision::new(Action::Done)).of_sent(res.sent());
            Update::answer(o, Some(End::Release { reservation: res }))
        }
    }
}

#[tokio::test]
#[ignore = "needs redis-server"]
async fn two_processes_on_redis_decide_as_one_in_memory_store() {
    let (url, _server) = ratewise_redis::testing::redis();
    let (mut goes, mut waits, mut stops) = (0, 0, 0);
    for seed in 0..12u64 {
        let mut r = fastrand::Rng::with_seed(seed);
        let prefix = ratewise_redis::testing::prefix();
        let one = Shared::new(Controller::new(admission()));
        let procs = [
            Process {
                store: RedisStore::connect(&url, redis_config(&prefix))
                    .await
                    .unwrap(),
                late: Duration::ZERO,
            },
            Process {
                store: RedisStore::connect(&url, redis_config(&prefix))
                    .await
                    .unwrap(),
                late: Duration::from_millis(r.u64(1..30_000)),
            },
        ];
        let mut t_ms = 40_000u64;
        // (process, the in-memory store's reservation, the process's).
        let mut held: Vec<(usize, Reservation, Reservation)> = Vec::new();
        for step in 0..250 {
            t_ms += r.u64(0..1_500);
            let t = at(t_ms);
            let p = r.usize(0..2);
            let pn = procs[p].now(t);
            let store = &procs[p].store;
            let ctx = format!("seed {seed} step {step}");
            match r.u8(0..40) {
                0..=19 => {
                    let max_tokens = r.u64(1..3_000);
                    let mut req = AdmitRequest::new(one.target("k", MODEL));
                    req.max_tokens = Some(max_tokens);
                    let single = one.admit(&req, t);
                    let mut req = AdmitRequest::new(store.target("k", MODEL).await);
                    req.max_tokens = Some(max_tokens);
                    let shared = store.admit(req, pn).await;
                    let s1 = seen(&single, t);
                    assert_eq!(s1, seen(&shared, pn), "{ctx}");
                    match s1 {
                        Seen::Go => goes += 1,
                        Seen::Wait(_) => waits += 1,
                        Seen::Stopped(_) => stops += 1,
                        Seen::Other(_) => {}
                    }
                    if let (Admission::Go(a), Admission::Go(b)) = (single, shared) {
                        held.push((p, a, b));
                    }
                }
                20..=33 if !held.is_empty() => {
                    let (p, a, b) = held.swap_remove(r.usize(0..held.len()));
                    let usage = Usage {
                        input_tokens: r.u64(0..500),
                        output_tokens: r.u64(0..3_000),
                        ..Usage::default()
                    };
                    let ending = match r.u8(0..10) {
                        0..=4 => Ending::Settle(usage),
                        5 => Ending::Release,
                        6..=8 => Ending::View(r.u64(0..20_000), usage),
                        _ => Ending::Pause(r.u64(1..10)),
                    };
                    let pn = procs[p].now(t);
                    let d1 = one.apply(update(a, &ending, t), t);
                    let d2 = procs[p].store.update(update(b, &ending, pn), pn).await;
                    assert_eq!(
                        d1.map(|a| (a.decision.action, a.retry_budget)),
                        d2.map(|a| (a.decision.action, a.retry_budget)),
                        "{ctx}"
                    );
                }
                34 => {
                    let scope = one.target("k", MODEL).scope;
                    one.lock().stop(scope, Cause::SpendCap, None, t);
                    store.stop("k", Cause::SpendCap, None, pn).await;
                }
                35..=37 => {
                    one.resume("k", t);
                    store.resume("k", pn).await;
                }
                _ => {}
            }
        }
        for (p, a, b) in held {
            let t = at(t_ms);
            one.lock().release(a, t);
            let pn = procs[p].now(t);
            procs[p]
                .store
                .update(Update::ending(End::Release { reservation: b }), pn)
                .await;
        }
        // Every reservation ended: nothing outstanding in either process.
        for p in &procs {
            let l = p.store.local().ledger();
            assert!(l.is_clean(), "{l:?}");
        }
        for p in &procs {
            let h = p.store.health();
            assert!(!h.degraded && h.errors == 0, "{h:?}");
        }
    }
    // Not a vacuous agreement: every kind of answer occurs, often.
    assert!(
        goes > 200 && waits > 300 && stops > 50,
        "{goes} admitted, {waits} waits, {stops} stopped"
    );
}
