//! The discipline driven against a simple token bucket over simulated
//! time (no clock): the figures DESIGN principle 20 promises.
//!
//! One bucket of `LIMIT` tokens per minute holding ten seconds' worth;
//! every flow keeps a few jobs waiting (a permanent backlog); the head is
//! admitted as soon as the bucket holds its tokens, and time jumps to that
//! instant. Each flow's admitted tokens are counted over a measured span.

use super::*;
use crate::admit::{Amounts, Limits};
use crate::time::Instant;
use std::collections::HashMap;

const LIMIT: u64 = 120_000;

/// A flow of the simulation: its workload, the tokens each job takes, and
/// from when to when (seconds) it has work.
struct Source {
    workload: Workload,
    tokens: u64,
    from: u64,
    until: u64,
}

/// Tokens admitted per flow within `[measure_from, measure_until)`
/// seconds of a run of `until` seconds.
fn run(
    sources: &[Source],
    levels: Levels,
    measure: (u64, u64),
    until: u64,
) -> HashMap<String, u64> {
    run_logged(sources, levels, measure, until).0
}

/// [`run`], and every admission: (ms, flow).
fn run_logged(
    sources: &[Source],
    levels: Levels,
    measure: (u64, u64),
    until: u64,
) -> (HashMap<String, u64>, Vec<(u64, String)>) {
    let mut log = Vec::new();
    let limits = Limits::per_minute().tokens(LIMIT);
    let rate = LIMIT as f64 / 60_000.0; // per ms
    let capacity = LIMIT as f64 / 6.0;
    let mut bucket = capacity;
    let mut t_ms: u64 = 0;
    let mut d = Discipline::new(levels);
    let mut seq = 0u64;
    let mut owner: HashMap<Place, usize> = HashMap::new();
    let mut queued = vec![0usize; sources.len()];
    let mut got: HashMap<String, u64> = HashMap::new();
    const BACKLOG: usize = 4;
    while t_ms < until * 1000 {
        for (i, s) in sources.iter().enumerate() {
            let active = (s.from * 1000..s.until * 1000).contains(&t_ms);
            while active && queued[i] < BACKLOG {
                seq += 1;
                let p = Place {
                    arrived: Instant::from_millis(t_ms),
                    seq,
                };
                d.join(p, &s.workload);
                owner.insert(p, i);
                queued[i] += 1;
            }
            if !active {
                // The flow's work is over: its waiting jobs leave.
                let gone: Vec<Place> = owner
                    .iter()
                    .filter(|(_, o)| **o == i)
                    .map(|(p, _)| *p)
                    .collect();
                for p in gone {
                    d.leave(p);
                    owner.remove(&p);
                    queued[i] -= 1;
                }
            }
        }
        let Some(h) = d.head() else {
            t_ms += 100;
            bucket = (bucket + 100.0 * rate).min(capacity);
            continue;
        };
        let i = owner[&h];
        let tokens = sources[i].tokens;
        if bucket >= tokens as f64 {
            bucket -= tokens as f64;
            let amounts = Amounts {
                requests: 1,
                input: tokens,
                output: 0,
            };
            let cost = Cost::dominant(&amounts, &limits);
            d.admitted(h, cost, Instant::from_millis(t_ms)).unwrap();
            owner.remove(&h);
            queued[i] -= 1;
            log.push((t_ms, sources[i].workload.flow.clone()));
            if (measure.0 * 1000..measure.1 * 1000).contains(&t_ms) {
                *got.entry(sources[i].workload.flow.clone()).or_default() += tokens;
            }
        } else {
            let need = ((tokens as f64 - bucket) / rate).ceil().max(1.0);
            t_ms += need as u64;
            bucket = (bucket + need * rate).min(capacity);
        }
    }
    (got, log)
}

fn limit_over(secs: u64) -> f64 {
    LIMIT as f64 * secs as f64 / 60.0
}

#[test]
fn two_bulk_flows_weighted_two_to_one_get_tokens_two_to_one() {
    let l = Levels::default();
    let bulk = l.level("bulk").unwrap();
    // Different sizes: the heavier-weighted flow sends small jobs, the
    // other jobs three times larger; tokens, not requests, split 2:1.
    let sources = [
        Source {
            workload: Workload::new(bulk, "a").weight(2),
            tokens: 1_000,
            from: 0,
            until: 600,
        },
        Source {
            workload: Workload::new(bulk, "b").weight(1),
            tokens: 3_000,
            from: 0,
            until: 600,
        },
    ];
    let got = run(&sources, l, (60, 600), 600);
    let ratio = got["a"] as f64 / got["b"] as f64;
    let used = (got["a"] + got["b"]) as f64 / limit_over(540);
    println!("weighted 2:1 -> tokens a:b = {ratio:.3}, limit used {used:.3}");
    assert!((1.8..=2.2).contains(&ratio), "ratio {ratio}");
    assert!(used >= 0.95, "used {used}");
}

#[test]
fn a_lone_flow_gets_the_whole_limit() {
    let l = Levels::default();
    let (i, bulk) = (l.level("interactive").unwrap(), l.level("bulk").unwrap());
    // Others used the key heavily for five minutes (an interactive flood,
    // another bulk tenant); then `lone` is the only one with work.
    let sources = [
        Source {
            workload: Workload::new(i, "chat"),
            tokens: 800,
            from: 0,
            until: 300,
        },
        Source {
            workload: Workload::new(bulk, "other"),
            tokens: 2_000,
            from: 0,
            until: 300,
        },
        Source {
            workload: Workload::new(bulk, "lone"),
            tokens: 2_500,
            from: 0,
            until: 900,
        },
    ];
    let got = run(&sources, l, (300, 900), 900);
    let share = got["lone"] as f64 / limit_over(600);
    println!("lone flow -> {share:.3} of the limit");
    assert!(share >= 0.95, "share {share}");
}

#[test]
fn a_permanent_interactive_flood_leaves_bulk_its_minimum_share() {
    let l = Levels::default();
    let (i, bulk) = (l.level("interactive").unwrap(), l.level("bulk").unwrap());
    let sources = [
        Source {
            workload: Workload::new(i, "chat"),
            tokens: 1_000,
            from: 0,
            until: 900,
        },
        Source {
            workload: Workload::new(i, "search"),
            tokens: 400,
            from: 0,
            until: 900,
        },
        Source {
            workload: Workload::new(bulk, "batch"),
            tokens: 3_000,
            from: 0,
            until: 900,
        },
    ];
    let got = run(&sources, l, (120, 900), 900);
    let total: u64 = got.values().sum();
    let bulk_share = got["batch"] as f64 / total as f64;
    let used = total as f64 / limit_over(780);
    println!("interactive flood -> bulk share {bulk_share:.3}, limit used {used:.3}");
    assert!((0.09..=0.11).contains(&bulk_share), "bulk {bulk_share}");
    assert!(used >= 0.95, "used {used}");
}

#[test]
fn interactive_jobs_pass_queued_bulk_jobs_under_load() {
    let l = Levels::default();
    let (i, bulk) = (l.level("interactive").unwrap(), l.level("bulk").unwrap());
    // A bulk backlog saturates the key; one interactive job arrives at
    // 120 s and must wait at most for the bucket, not for the backlog.
    let sources = [
        Source {
            workload: Workload::new(bulk, "batch"),
            tokens: 2_000,
            from: 0,
            until: 300,
        },
        Source {
            workload: Workload::new(i, "chat"),
            tokens: 1_000,
            from: 120,
            until: 121,
        },
    ];
    let (_, log) = run_logged(&sources, l, (0, 300), 300);
    let chat: Vec<usize> = (0..log.len()).filter(|k| log[*k].1 == "chat").collect();
    assert!(!chat.is_empty());
    // The first chat job went with at most one bulk job admitted after it
    // arrived (the one the bucket had already been refilling for); the
    // bulk backlog (four waiting) did not go first.
    let first = chat[0];
    let bulk_between = log[..first].iter().filter(|(t, _)| *t >= 120_000).count();
    assert!(
        bulk_between <= 1,
        "{:?}",
        &log[first.saturating_sub(5)..first + 1]
    );
    // And every chat job went before any bulk job that was waiting with it.
    let last_chat = *chat.last().unwrap();
    let bulk_among = log[first..last_chat]
        .iter()
        .filter(|(_, f)| f == "batch")
        .count();
    println!("interactive passes bulk -> {bulk_between} bulk job(s) after arrival, {bulk_among} among {} chat jobs", chat.len());
    assert!(
        bulk_among * 10 <= chat.len() + 10,
        "{bulk_among} bulk among {} chat",
        chat.len()
    );
}
