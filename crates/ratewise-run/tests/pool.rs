//! `Run` through a pool of two mock upstreams (issue #40): every job done
//! across both members, each attempt naming its member; a spend cap on one
//! member leaves every job to the other without stopping the run; both
//! members capped stop it, naming both; a held unknown outcome stays on
//! its member; a pool refuses what it replaces before anything is sent;
//! no key in the results, the store or an error.

use ratewise_core::Cause;
use ratewise_mock::{Fault, FaultRule, LatencyConfig, MockConfig, MockServer, RequestRecord};
use ratewise_run::batch::Via;
use ratewise_run::progress::Ignore;
use ratewise_run::store::StopCause;
use ratewise_run::{Ending, Finished, PoolError, Run, RunError};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const MAIN: &str = "sk-ant-POOL-MAIN-SECRET";
const BACKUP: &str = "sk-ant-POOL-BACKUP-SECRET";

fn env(var: &str) -> Option<String> {
    match var {
        "RW_POOL_MAIN" => Some(MAIN.to_owned()),
        "RW_POOL_BACKUP" => Some(BACKUP.to_owned()),
        // Never read with a pool: a run that did would send it.
        "ANTHROPIC_API_KEY" => Some("sk-ant-THE-SINGLE-KEY".to_owned()),
        _ => None,
    }
}

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "rw-pool-{name}-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn input(dir: &Path, n: usize) -> PathBuf {
    let text: String = (0..n)
        .map(|i| {
            format!(
                "{{\"custom_id\":\"r{i:03}\",\"params\":{{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":16,\"messages\":[{{\"role\":\"user\",\"content\":\"hi {i}\"}}]}}}}\n"
            )
        })
        .collect();
    let path = dir.join("in.jsonl");
    std::fs::write(&path, text).unwrap();
    path
}

fn roomy(latency_ms: u64) -> MockConfig {
    let mut c = MockConfig {
        latency: LatencyConfig {
            first_byte_ms: latency_ms,
            per_output_token_ms: 0.0,
        },
        ..MockConfig::default()
    };
    c.anthropic_limits.requests_per_minute = Some(1_000_000);
    c.anthropic_limits.input_tokens_per_minute = Some(100_000_000);
    c.anthropic_limits.output_tokens_per_minute = Some(100_000_000);
    c
}

/// A config with one pool of `a` and `b` (and `extra` lines before it).
fn config(dir: &Path, a: &MockServer, b: &MockServer, extra: &str) -> PathBuf {
    let text = format!(
        r#"{extra}
[[pools]]
name = "claude"
provider = "anthropic"
[[pools.members]]
upstream = "{}"
key_env = "RW_POOL_MAIN"
[[pools.members]]
upstream = "{}"
key_env = "RW_POOL_BACKUP"
"#,
        a.base_url(),
        b.base_url()
    );
    let path = dir.join("pools.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn run_of(input: &Path, config: &Path) -> Run {
    Run::new(input).config(config).key_from(env)
}

async fn execute(run: Run) -> Result<Finished, RunError> {
    let (_tx, rx) = tokio::sync::watch::channel(false);
    run.execute(rx, Arc::new(Ignore)).await
}

fn results(finished: &Finished) -> Vec<Value> {
    std::fs::read_to_string(&finished.out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn members(v: &Value) -> Vec<String> {
    v["ratewise"]["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["member"].as_str().expect("a member").to_owned())
        .collect()
}

/// No key in the files of `dir` (the results, the store and its WAL), in
/// any form the keys were given.
fn assert_no_key(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        for key in [MAIN, BACKUP, "POOL-MAIN", "POOL-BACKUP", "THE-SINGLE-KEY"] {
            assert!(!text.contains(key), "{key} in {}", path.display());
        }
    }
}

/// Each mock saw one key, and not the other's.
fn one_key_each(a: &[RequestRecord], b: &[RequestRecord]) {
    let keys = |r: &[RequestRecord]| {
        let mut k: Vec<String> = r.iter().map(|r| r.key.clone()).collect();
        k.sort();
        k.dedup();
        k
    };
    let (ka, kb) = (keys(a), keys(b));
    assert!(ka.len() <= 1 && kb.len() <= 1, "{ka:?} {kb:?}");
    assert_ne!(ka, kb);
}

/// Waits until `done` holds (the run goes on in its task).
async fn until(done: impl Fn() -> bool) {
    for _ in 0..2_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_is_done_across_both_members_each_attempt_naming_its_member() {
    let a = MockServer::start(roomy(2)).await.unwrap();
    let b = MockServer::start(roomy(2)).await.unwrap();
    let dir = temp("both");
    let path = input(&dir, 40);
    let cfg = config(&dir, &a, &b, "window = 8");
    let finished = execute(run_of(&path, &cfg)).await.unwrap();
    assert_eq!(finished.exit_code(), 0, "{:?}", finished.report.ending);
    assert_eq!(finished.report.counts.done, 40);
    let (ra, rb) = (a.records(), b.records());
    assert_eq!(ra.len() + rb.len(), 40, "one send per job");
    assert!(
        !ra.is_empty() && !rb.is_empty(),
        "both used: {} {}",
        ra.len(),
        rb.len()
    );
    one_key_each(&ra, &rb);
    // The pool's members as the run ended: sends per member, no stop.
    let pool = finished
        .pool
        .clone()
        .expect("a pooled run reports its pool");
    assert_eq!(pool.name, "claude");
    assert_eq!(pool.members.len(), 2);
    assert_eq!(pool.members[0].sends as usize, ra.len());
    assert_eq!(pool.members[1].sends as usize, rb.len());
    assert!(pool.members.iter().all(|m| m.stopped.is_none()));
    let labels: Vec<String> = pool
        .members
        .iter()
        .map(|m| format!("{}#{}", m.upstream, m.key))
        .collect();
    // Each result names the member of its attempt, by fingerprint.
    let lines = results(&finished);
    assert_eq!(lines.len(), 40);
    let mut used = [0usize; 2];
    for v in &lines {
        assert_eq!(v["ratewise"]["outcome"], "done");
        let m = members(v);
        assert_eq!(m.len(), 1);
        assert!(m[0].contains("#fp-"), "{m:?}");
        let i = labels.iter().position(|l| *l == m[0]).expect("a member");
        used[i] += 1;
    }
    assert_eq!((used[0], used[1]), (ra.len(), rb.len()));
    let summary = finished.summary();
    assert_eq!(summary["pool"]["members"].as_array().unwrap().len(), 2);
    assert!(!summary.to_string().contains("SECRET"));
    assert!(!format!("{finished:?}").contains("SECRET"));
    assert_no_key(&dir);
    a.shutdown().await;
    b.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spend_cap_on_one_member_leaves_every_job_to_the_other_and_the_run_goes_on() {
    let a = MockServer::start(roomy(15)).await.unwrap();
    let b = MockServer::start(roomy(15)).await.unwrap();
    let dir = temp("one-cap");
    let path = input(&dir, 60);
    let window = 4;
    let cfg = config(&dir, &a, &b, &format!("window = {window}"));
    let task = tokio::spawn(execute(run_of(&path, &cfg)));
    // Mid-run: the first member's cap is reached.
    until(|| a.records().len() >= 5).await;
    a.set_spend_cap(Some(0.0));
    let finished = task.await.unwrap().unwrap();
    assert_eq!(finished.report.ending, Ending::Finished);
    assert_eq!(finished.exit_code(), 0);
    assert_eq!(finished.report.counts.done, 60);
    let ra = a.records();
    let first_cap = ra
        .iter()
        .position(|r| r.cause == Cause::SpendCap)
        .expect("a spend-cap answer");
    // After its cap, the member got only what was already on its way to
    // it (each answered with the cap): nothing was sent to it afterwards.
    let after = &ra[first_cap..];
    assert!(
        after.iter().all(|r| r.cause == Cause::SpendCap),
        "{after:?}"
    );
    assert!(after.len() <= window, "{} sends after the cap", after.len());
    let rb = b.records();
    one_key_each(&ra, &rb);
    let pool = finished.pool.clone().unwrap();
    let stop = pool.members[0].stopped.clone().expect("member 1 stopped");
    assert_eq!(stop.cause, "spend_cap");
    assert!(pool.members[1].stopped.is_none());
    // Every job done; a job whose attempt met the cap finished on the
    // other member, both named in its record.
    let labels: Vec<String> = pool
        .members
        .iter()
        .map(|m| format!("{}#{}", m.upstream, m.key))
        .collect();
    let mut moved = 0;
    for v in results(&finished) {
        assert_eq!(v["ratewise"]["outcome"], "done");
        let m = members(&v);
        if m.len() > 1 {
            moved += 1;
            assert_eq!(m[0], labels[0]);
            assert_eq!(m[1], labels[1]);
            assert_eq!(v["ratewise"]["attempts"][0]["cause"], "spend_cap");
        }
    }
    assert_eq!(moved, after.len(), "each capped send's job moved once");
    assert_no_key(&dir);
    a.shutdown().await;
    b.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_members_capped_stop_the_run_naming_both_and_the_stop_is_kept() {
    let a = MockServer::start(roomy(15)).await.unwrap();
    let b = MockServer::start(roomy(15)).await.unwrap();
    let dir = temp("both-cap");
    let path = input(&dir, 60);
    let cfg = config(&dir, &a, &b, "window = 4");
    let task = tokio::spawn(execute(run_of(&path, &cfg)));
    until(|| a.records().len() + b.records().len() >= 10).await;
    a.set_spend_cap(Some(0.0));
    until(|| a.records().iter().any(|r| r.cause == Cause::SpendCap)).await;
    b.set_spend_cap(Some(0.0));
    let finished = task.await.unwrap().unwrap();
    assert_eq!(finished.exit_code(), ratewise_run::EXIT_STOPPED);
    let Ending::Stopped(stop) = &finished.report.ending else {
        panic!("{:?}", finished.report.ending)
    };
    assert_eq!(stop.cause, StopCause::Provider(Cause::SpendCap));
    let pool = finished.pool.clone().unwrap();
    assert!(pool.members.iter().all(|m| m.stopped.is_some()));
    for m in &pool.members {
        let label = format!("{}#{}", m.upstream, m.key);
        assert!(
            stop.message.contains(&format!("{label} spend_cap")),
            "{label} not in {}",
            stop.message
        );
    }
    assert!(stop.message.contains("every member"), "{}", stop.message);
    assert!(!stop.message.contains("SECRET"), "{}", stop.message);
    let c = &finished.report.counts;
    assert!(c.done >= 10 && c.stopped > 0, "{c:?}");
    assert_eq!(c.done + c.stopped, 60, "{c:?}");
    // Nothing was sent to a member after its cap but what was on its way.
    for m in [&a, &b] {
        let r = m.records();
        let first = r.iter().position(|r| r.cause == Cause::SpendCap).unwrap();
        assert!(r[first..].iter().all(|r| r.cause == Cause::SpendCap));
    }
    let summary = finished.summary();
    assert_eq!(summary["stop"]["cause"], "spend_cap");
    // The stop is kept: a re-run sends nothing until resumed.
    let sent = a.records().len() + b.records().len();
    let again = execute(run_of(&path, &cfg)).await.unwrap();
    assert_eq!(again.exit_code(), ratewise_run::EXIT_STOPPED);
    assert_eq!(a.records().len() + b.records().len(), sent);
    // Both caps lifted, --resume-stopped finishes on both members.
    a.set_spend_cap(None);
    b.set_spend_cap(None);
    let resumed = execute(run_of(&path, &cfg).resume_stopped(true))
        .await
        .unwrap();
    assert_eq!(resumed.exit_code(), 0, "{:?}", resumed.report.ending);
    assert_eq!(resumed.report.counts.done, 60);
    let jobs = ratewise_mock::sends_per_job(
        &[a.records(), b.records()]
            .concat()
            .into_iter()
            .filter(|r| r.cause == Cause::Success)
            .collect::<Vec<_>>(),
    );
    assert!(jobs.values().all(|n| *n == 1), "a job paid twice: {jobs:?}");
    assert_no_key(&dir);
    a.shutdown().await;
    b.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_outcome_is_held_on_its_member_and_never_sent_to_the_other() {
    let a = MockServer::start(roomy(2)).await.unwrap();
    let b = MockServer::start(roomy(2)).await.unwrap();
    // Every request the first member reads, it answers with nothing.
    a.set_faults(vec![FaultRule::always(Fault::Reset)]);
    let dir = temp("held");
    let path = input(&dir, 20);
    let cfg = config(&dir, &a, &b, "window = 4");
    let finished = execute(run_of(&path, &cfg)).await.unwrap();
    let c = &finished.report.counts;
    assert!(c.held > 0, "{c:?}");
    assert_eq!(c.held + c.done, 20, "{c:?}");
    assert_eq!(finished.exit_code(), ratewise_run::EXIT_HELD);
    let (ra, rb) = (a.records(), b.records());
    assert_eq!(ra.len() as u64, c.held, "one send per held job");
    let on_a = ratewise_mock::sends_per_job(&ra);
    let on_b = ratewise_mock::sends_per_job(&rb);
    assert!(
        on_a.keys().all(|j| !on_b.contains_key(j)),
        "re-sent elsewhere"
    );
    let label_a = {
        let p = finished.pool.clone().unwrap();
        format!("{}#{}", p.members[0].upstream, p.members[0].key)
    };
    for v in results(&finished) {
        if v["ratewise"]["outcome"] == "held_unknown" {
            assert_eq!(members(&v), vec![label_a.clone()]);
        }
    }
    // A re-run sends none of them again.
    let again = execute(run_of(&path, &cfg)).await.unwrap();
    assert_eq!(again.report.counts.held, c.held);
    assert_eq!(a.records().len() + b.records().len(), ra.len() + rb.len());
    assert_no_key(&dir);
    a.shutdown().await;
    b.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_budget_counts_every_member() {
    let a = MockServer::start(roomy(0)).await.unwrap();
    let b = MockServer::start(roomy(0)).await.unwrap();
    let dir = temp("budget");
    let path = input(&dir, 40);
    let cfg = config(&dir, &a, &b, "");
    let budget = 400;
    let finished = execute(run_of(&path, &cfg).budget_tokens(budget))
        .await
        .unwrap();
    let Ending::Stopped(stop) = &finished.report.ending else {
        panic!("{:?}", finished.report.ending)
    };
    assert_eq!(stop.cause, StopCause::Budget);
    let c = &finished.report.counts;
    assert!(c.spent <= budget, "{c:?}");
    assert!(c.done > 1 && c.done < 40, "{c:?}");
    assert_eq!(
        (a.records().len() + b.records().len()) as u64,
        c.done,
        "{c:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_refuses_what_it_replaces_before_anything_is_sent() {
    let a = MockServer::start(roomy(0)).await.unwrap();
    let b = MockServer::start(roomy(0)).await.unwrap();
    let dir = temp("refused");
    let path = input(&dir, 3);
    let cfg = config(&dir, &a, &b, "");
    let pool_error = |e: RunError| match e {
        RunError::Pool(p) => p,
        other => panic!("{other:?}"),
    };
    let conflict = |e: RunError| match pool_error(e) {
        PoolError::Conflict { setting, .. } => setting,
        other => panic!("{other:?}"),
    };
    // Flags and settings of the one key the pool replaces.
    let e = execute(run_of(&path, &cfg).upstream(a.base_url()))
        .await
        .unwrap_err();
    assert_eq!(e.exit_code(), ratewise_run::EXIT_INPUT);
    assert!(e.to_string().contains("--upstream"), "{e}");
    assert_eq!(conflict(e), "--upstream");
    let e = execute(run_of(&path, &cfg).api_key("sk-ant-given"))
        .await
        .unwrap_err();
    assert!(!e.to_string().contains("sk-ant-given"), "{e}");
    conflict(e);
    let with_key = config(&dir, &a, &b, "api_key = \"sk-ant-in-file\"");
    let e = execute(run_of(&path, &with_key)).await.unwrap_err();
    assert!(!e.to_string().contains("sk-ant-in-file"), "{e}");
    assert_eq!(conflict(e), "api_key in --config");
    let cfg = config(&dir, &a, &b, "");
    // The batch APIs are per key.
    for via in [Via::Batch, Via::Auto] {
        let e = execute(run_of(&path, &cfg).via(via)).await.unwrap_err();
        assert!(
            matches!(pool_error(e), PoolError::Via { via: v, .. } if v == via),
            "{via:?}"
        );
    }
    // A key variable not set: named, never a value.
    let e = execute(
        Run::new(&path)
            .config(&cfg)
            .key_from(|v| (v == "RW_POOL_MAIN").then(|| MAIN.to_owned())),
    )
    .await
    .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("RW_POOL_BACKUP"), "{text}");
    assert!(!text.contains("SECRET"), "{text}");
    assert!(matches!(pool_error(e), PoolError::Spec(_)));
    // Several pools: --pool picks one; without it, or naming none, refused.
    let two = dir.join("two.toml");
    let one = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &two,
        format!("{one}\n{}", one.replace("\"claude\"", "\"other\"")),
    )
    .unwrap();
    let e = execute(run_of(&path, &two)).await.unwrap_err();
    assert!(matches!(pool_error(e), PoolError::Ambiguous { .. }));
    let e = execute(run_of(&path, &two).pool("nope")).await.unwrap_err();
    assert!(matches!(pool_error(e), PoolError::Unknown { .. }));
    // A member that does not speak the input's format.
    let openai = dir.join("openai.toml");
    std::fs::write(
        &openai,
        format!(
            "[[pools]]\nname = \"gpt\"\nprovider = \"openai\"\n[[pools.members]]\nupstream = \"{}\"\nkey_env = \"RW_POOL_MAIN\"\n",
            a.base_url()
        ),
    )
    .unwrap();
    let e = execute(run_of(&path, &openai)).await.unwrap_err();
    assert!(matches!(
        pool_error(e),
        PoolError::Dialect { member: 1, .. }
    ));
    assert!(a.records().is_empty() && b.records().is_empty());
    // With --pool the named one runs.
    let finished = execute(run_of(&path, &two).pool("other")).await.unwrap();
    assert_eq!(finished.exit_code(), 0);
    assert_eq!(finished.pool.unwrap().name, "other");
    assert_no_key(&dir);
    a.shutdown().await;
    b.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A send cut by a crash (here: the run's future dropped while its
/// requests are on the wire) is held as unknown on the next run, and its
/// record names the member it was sent to, as every answered attempt's
/// does (the layer's journal is told the member before the send:
/// `Journal::attempt_started_on`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_cut_by_a_crash_names_its_member() {
    let a = MockServer::start(roomy(0)).await.unwrap();
    let b = MockServer::start(roomy(0)).await.unwrap();
    for m in [&a, &b] {
        m.set_faults(vec![FaultRule::always(Fault::Stall { ms: 1_500 })]);
    }
    let dir = temp("cut");
    let path = input(&dir, 4);
    let cfg = config(&dir, &a, &b, "window = 4");
    let task = tokio::spawn(execute(run_of(&path, &cfg)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    task.abort();
    let _ = task.await;
    let again = execute(run_of(&path, &cfg)).await.unwrap();
    assert!(again.report.counts.held > 0, "{:?}", again.report.counts);
    for v in results(&again) {
        if v["ratewise"]["outcome"] != "held_unknown" {
            continue;
        }
        let attempts = v["ratewise"]["attempts"].as_array().unwrap();
        let cut = attempts.last().unwrap();
        assert_eq!(cut["cause"], "outcome_unknown");
        assert!(cut["member"].is_string(), "no member: {cut}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
