//! A key's shared state as a record (`StoreHooks::export_key` /
//! `import_key`): what a store shared between processes keeps. Two
//! processes with their own clocks' origins, each running the core's own
//! controller on the record it loads and writing it back (compare-and-set),
//! decide exactly as one controller shared by both.

mod common;

use ratewise_core::admit::store_kit::{KeyRecord, StoreHooks};
use ratewise_core::admit::Observed;

use common::{classify, now_at};
use ratewise_core::admit::{Admission, AdmitRequest, Config, Controller, Limits, Reservation};
use ratewise_core::{Decision, Instant, Now, Provider, Usage};
use std::time::{Duration, SystemTime};

fn config() -> Config {
    let mut c = Config::default();
    c.limits = Limits {
        requests: Some(120),
        output_tokens: Some(20_000),
        ..Limits::NONE
    };
    // Jitter comes from each process's own source; none here, so that
    // the two runs can be compared exactly.
    c.pause_jitter = Duration::ZERO;
    c.seed = Some(1);
    c
}

/// A process: its controller and its monotonic clock's origin, as an
/// offset from the reference clock of `now_at`.
struct Process {
    c: Controller,
    /// This process started this long after the reference origin.
    late: Duration,
}

impl Process {
    /// `now` on this process's clocks: same wall time, its own instants.
    fn now(&self, reference: Now) -> Now {
        Now::new(
            Instant::from_origin(reference.instant.since_origin() - self.late),
            reference.wall,
        )
    }
}

/// A store of one record with a version: compare-and-set, as a remote
/// store's script would apply it.
#[derive(Default)]
struct RecordStore {
    json: Option<String>,
    version: u64,
}

impl RecordStore {
    /// Runs `op` on process `p` against the latest record, writes the
    /// result back.
    fn run<T>(
        &mut self,
        p: &mut Process,
        reference: Now,
        op: impl FnOnce(&mut Controller, Now) -> T,
    ) -> T {
        let now = p.now(reference);
        let seen = self.version;
        if let Some(json) = &self.json {
            let rec: KeyRecord = serde_json::from_str(json).expect("a record reads back");
            p.c.import_key(&rec, now);
        }
        let out = op(&mut p.c, now);
        let rec = p.c.export_key("k", now).expect("the key exists");
        assert_eq!(self.version, seen, "no one else wrote meanwhile");
        self.json = Some(serde_json::to_string(&rec).unwrap());
        self.version += 1;
        out
    }
}

/// An admission as comparable across processes: waits as wall times.
#[derive(Debug, PartialEq)]
enum Seen {
    Go,
    Wait(SystemTime),
    Other(String),
}

fn seen(a: &Admission, now: Now) -> Seen {
    match a {
        Admission::Go(_) => Seen::Go,
        Admission::Wait { until, .. } => Seen::Wait(now.wall_at(*until)),
        other => Seen::Other(format!("{other:?}")),
    }
}

const RATE_LIMITED: &str = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;

#[test]
fn a_record_round_trips_through_json_and_decides_alike() {
    let mut a = Controller::new(config());
    let t = now_at(0);
    let target = a.target("k", "claude-sonnet-4-5");
    let mut req = AdmitRequest::new(target);
    req.max_tokens = Some(1000);
    for _ in 0..3 {
        let _ = a.admit(&req, t);
    }
    let rec = a.export_key("k", t).unwrap();
    let json = serde_json::to_string(&rec).unwrap();
    assert!(!json.contains("sk-"), "no secret in a record");
    let back: KeyRecord = serde_json::from_str(&json).unwrap();
    assert_eq!(back, rec);
    let mut b = Controller::new(config());
    b.import_key(&back, t);
    let tb = b.target("k", "claude-sonnet-4-5");
    assert_eq!(
        a.snapshot(target.scope, t).unwrap().levels,
        b.snapshot(tb.scope, t).unwrap().levels
    );
    let later = now_at(700);
    let mut rb = req;
    rb.target = tb;
    assert_eq!(
        seen(&a.admit(&req, later), later),
        seen(&b.admit(&rb, later), later)
    );
}

#[test]
fn a_stop_and_a_pause_seen_by_one_process_hold_for_the_other() {
    let mut store = RecordStore::default();
    let mut p1 = Process {
        c: Controller::new(config()),
        late: Duration::ZERO,
    };
    let mut p2 = Process {
        c: Controller::new(config()),
        late: Duration::from_secs(7),
    };
    let t = now_at(10_000);
    let res = store.run(&mut p1, t, |c, now| {
        let target = c.target("k", "claude-sonnet-4-5");
        c.admit(&AdmitRequest::new(target), now).go().unwrap()
    });
    // A 429 with a 20 s hint, seen by process 1.
    store.run(&mut p1, t, |c, now| {
        let cl = classify(
            Provider::Anthropic,
            429,
            &[("retry-after", "20")],
            RATE_LIMITED,
            now,
        );
        let sent = res.sent();
        c.observe(
            &Observed::new(
                sent.scope(),
                cl.clone(),
                Decision::new(ratewise_core::Action::Done),
            )
            .of_sent(sent),
            now,
        );
        c.release(res, now);
    });
    // Process 2, whose clock started 7 s later, waits until the same wall
    // time.
    let wait = store.run(&mut p2, t, |c, now| {
        let target = c.target("k", "claude-sonnet-4-5");
        seen(&c.admit(&AdmitRequest::new(target), now), now)
    });
    assert_eq!(wait, Seen::Wait(t.wall + Duration::from_secs(20)));
    // A spend cap stops the key for both.
    store.run(&mut p2, t, |c, now| {
        let target = c.target("k", "claude-sonnet-4-5");
        c.stop(target.scope, ratewise_core::Cause::SpendCap, None, now);
    });
    let stopped = store.run(&mut p1, now_at(40_000), |c, now| {
        let target = c.target("k", "claude-sonnet-4-5");
        seen(&c.admit(&AdmitRequest::new(target), now), now)
    });
    assert!(
        matches!(stopped, Seen::Other(ref s) if s.contains("Stopped")),
        "{stopped:?}"
    );
}

/// The same random sequence of admissions, settles, releases and 429s,
/// against one controller and against two processes sharing a record:
/// every admission and every wait is the same.
#[test]
fn two_processes_sharing_a_record_decide_as_one_controller() {
    let (mut goes, mut waits) = (0, 0);
    for seed in 0..20u64 {
        let mut r = fastrand::Rng::with_seed(seed);
        let mut one = Controller::new(config());
        let mut store = RecordStore::default();
        let mut procs = [
            Process {
                c: Controller::new(config()),
                late: Duration::ZERO,
            },
            Process {
                c: Controller::new(config()),
                late: Duration::from_millis(r.u64(1..30_000)),
            },
        ];
        let mut t_ms = 30_000u64;
        // Reservations held: (process, in the single run, in the shared run).
        let mut held: Vec<(usize, Reservation, Reservation)> = Vec::new();
        for step in 0..300 {
            t_ms += r.u64(0..1_500);
            let t = now_at(t_ms);
            let p = r.usize(0..2);
            match r.u8(0..10) {
                0..=4 => {
                    let max_tokens = r.u64(1..3_000);
                    let single = {
                        let target = one.target("k", "claude-sonnet-4-5");
                        let mut req = AdmitRequest::new(target);
                        req.max_tokens = Some(max_tokens);
                        one.admit(&req, t)
                    };
                    let shared = store.run(&mut procs[p], t, |c, now| {
                        let target = c.target("k", "claude-sonnet-4-5");
                        let mut req = AdmitRequest::new(target);
                        req.max_tokens = Some(max_tokens);
                        c.admit(&req, now)
                    });
                    let pn = procs[p].now(t);
                    let s1 = seen(&single, t);
                    assert_eq!(s1, seen(&shared, pn), "seed {seed} step {step}");
                    match s1 {
                        Seen::Go => goes += 1,
                        Seen::Wait(_) => waits += 1,
                        Seen::Other(_) => {}
                    }
                    if let (Admission::Go(a), Admission::Go(b)) = (single, shared) {
                        held.push((p, a, b));
                    }
                }
                5..=7 if !held.is_empty() => {
                    let (p, a, b) = held.swap_remove(r.usize(0..held.len()));
                    let usage = Usage {
                        input_tokens: r.u64(0..500),
                        output_tokens: r.u64(0..3_000),
                        ..Usage::default()
                    };
                    one.settle(a, &usage, t);
                    store.run(&mut procs[p], t, |c, now| c.settle(b, &usage, now));
                }
                8 if !held.is_empty() => {
                    let (p, a, b) = held.swap_remove(r.usize(0..held.len()));
                    let hint = r.u64(1..10).to_string();
                    let cl = |now| {
                        classify(
                            Provider::Anthropic,
                            429,
                            &[("retry-after", hint.as_str())],
                            RATE_LIMITED,
                            now,
                        )
                    };
                    let d = || Decision::new(ratewise_core::Action::Done);
                    one.observe(
                        &Observed::new(a.sent().scope(), cl(t), d()).of_sent(a.sent()),
                        t,
                    );
                    one.release(a, t);
                    store.run(&mut procs[p], t, |c, now| {
                        c.observe(
                            &Observed::new(b.sent().scope(), cl(now), d()).of_sent(b.sent()),
                            now,
                        );
                        c.release(b, now);
                    });
                }
                _ => {}
            }
        }
    }
    // Not a vacuous agreement: both answers occur often.
    assert!(goes > 500 && waits > 500, "{goes} admitted, {waits} waits");
}

/// A take made while cut off from the shared record, then a fresh record
/// imported: the buckets no longer hold it, so its end must not give it
/// back (a release is nothing, a settle charges what was used).
#[test]
fn a_disowned_reservations_end_charges_only_its_usage() {
    let mut cfg = config();
    cfg.ramp.warm_start = true;
    cfg.limits.output_tokens = None;
    let mut c = Controller::new(cfg);
    let (t, t2) = (now_at(5_000), now_at(6_000));
    let target = c.target("k", "claude-sonnet-4-5");
    let req = AdmitRequest::new(target);
    let level = |c: &mut Controller| c.snapshot(target.scope, t2).unwrap().credits[0].unwrap();
    let a = c.admit(&req, t).go().unwrap();
    let b = c.admit(&req, t2).go().unwrap();
    let taken = level(&mut c);
    assert!(c.disown(a.id(), t2));
    assert!(!c.disown(a.id(), t2), "once");
    // Disowning changes no level: the caller's record decides them.
    assert_eq!(level(&mut c), taken);
    c.release(a, t2);
    assert_eq!(
        level(&mut c),
        taken,
        "a disowned release gives nothing back"
    );
    assert!(c.disown(b.id(), t2));
    c.settle(b, &Usage::default(), t2);
    assert_eq!(
        level(&mut c),
        taken - 1,
        "a disowned settle charges its usage (one request)"
    );
    let l = c.ledger();
    assert!(l.is_clean(), "the late ends are no second ends: {l:?}");
}

/// The provider's requests bucket in `others_on_the_key`: 600 a minute in
/// a bucket of 10 s (100 requests), another client taking `others` of
/// each second's refill.
struct ProviderBucket {
    level: f64,
    at_ms: u64,
    others: f64,
}

impl ProviderBucket {
    fn at(&mut self, t_ms: u64) {
        let refill = (t_ms - self.at_ms) as f64 / 100.0;
        self.level = (self.level + refill * (1.0 - self.others)).min(100.0);
        self.at_ms = t_ms;
    }

    /// Anthropic's headers for a success now: what is left and when the
    /// bucket is full again (at the whole rate: the provider's promise).
    fn headers(&self, now: Now) -> Vec<(String, String)> {
        let to_full = Duration::from_secs_f64((100.0 - self.level).max(0.0) / 10.0);
        vec![
            ("anthropic-ratelimit-requests-limit".into(), "600".into()),
            (
                "anthropic-ratelimit-requests-remaining".into(),
                (self.level.floor() as u64).to_string(),
            ),
            (
                "anthropic-ratelimit-requests-reset".into(),
                ratewise_core::time::format_rfc3339(now.wall + to_full),
            ),
        ]
    }
}

/// `processes` controllers (on one shared record when `shared`) send as
/// fast as they are admitted for 90 s into [`ProviderBucket`], each
/// success's headers read; returns the requests limit each paces at.
fn others_on_the_key(processes: usize, shared: bool, others: f64) -> Vec<Option<u64>> {
    let config = || {
        let mut c = Config::default();
        c.pause_jitter = Duration::ZERO;
        c.seed = Some(1);
        c
    };
    let mut procs: Vec<Process> = (0..processes)
        .map(|i| Process {
            c: Controller::new(config()),
            late: Duration::from_millis(700 * i as u64),
        })
        .collect();
    let mut store = RecordStore::default();
    let mut bucket = ProviderBucket {
        level: 100.0,
        at_ms: 30_000,
        others,
    };
    let mut t_ms = 30_000u64;
    while t_ms < 120_000 {
        t_ms += 50;
        bucket.at(t_ms);
        let t = now_at(t_ms);
        for p in procs.iter_mut() {
            let mut op = |c: &mut Controller, now: Now| {
                let target = c.target("k", "claude-sonnet-4-5");
                let mut req = AdmitRequest::new(target);
                req.max_tokens = Some(10);
                let Admission::Go(r) = c.admit(&req, now) else {
                    return;
                };
                let ok = bucket.level >= 1.0;
                let (status, body) = if ok {
                    bucket.level -= 1.0;
                    (200, "{}")
                } else {
                    (429, RATE_LIMITED)
                };
                let headers = bucket.headers(now);
                let h: Vec<(&str, &str)> = headers
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let cl = classify(Provider::Anthropic, status, &h, body, now);
                let d = Decision::new(ratewise_core::Action::Done);
                c.observe(
                    &Observed::new(r.sent().scope(), cl, d).of_sent(r.sent()),
                    now,
                );
                if ok {
                    c.settle(r, &Usage::default(), now);
                } else {
                    c.release(r, now);
                }
            };
            if shared {
                store.run(p, t, |c, now| op(c, now));
            } else {
                let now = p.now(t);
                op(&mut p.c, now);
            }
        }
    }
    let t = now_at(t_ms);
    procs
        .iter_mut()
        .map(|p| {
            let now = p.now(t);
            let target = p.c.target("k", "claude-sonnet-4-5");
            p.c.snapshot(target.scope, now)
                .and_then(|s| s.limits.requests)
        })
        .collect()
}

#[test]
fn a_lone_process_beside_another_client_paces_at_what_it_leaves() {
    // The other client takes 30 % of a 10 s bucket: 180 of 600 a minute.
    let limit = others_on_the_key(1, false, 0.3)[0].expect("a limit");
    assert!((400..=440).contains(&limit), "{limit}");
}

#[test]
fn processes_on_a_shared_record_do_not_read_each_other_as_others() {
    // Each one's charges are not its peer's, but the record they share
    // holds both: the drain beyond its own charges is mostly its peer's,
    // which read as another client's would cut the limit twice over (to
    // about a third). The drain is left unread on a shared record: the
    // other client's 30 % is met by each view's correction of the level.
    for limit in others_on_the_key(2, true, 0.3) {
        assert_eq!(limit, Some(600));
    }
}
