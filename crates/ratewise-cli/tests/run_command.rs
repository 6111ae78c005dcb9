//! `ratewise run` as a process against the in-process mock provider: both
//! batch formats to completion; `kill -9` at random points and a re-run
//! each time (every `custom_id` once in the output, no job sent twice but
//! those held and released by `--retry-unknown`); a spend cap mid-run; a
//! token budget; bad input of every kind; a locked store; a changed input;
//! a signal.

#![cfg(unix)]

use ratewise_mock::{Fault, FaultRule, LatencyConfig, MockConfig, MockServer, RequestRecord};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// A mock on its own runtime, alive as long as this value.
struct Mock {
    server: Option<MockServer>,
    rt: tokio::runtime::Runtime,
}

impl Mock {
    fn start(config: MockConfig) -> Mock {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let server = rt.block_on(MockServer::start(config)).unwrap();
        Mock {
            server: Some(server),
            rt,
        }
    }

    fn server(&self) -> &MockServer {
        self.server.as_ref().unwrap()
    }

    fn url(&self) -> String {
        self.server().base_url()
    }

    fn records(&self) -> Vec<RequestRecord> {
        self.server().records()
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            self.rt.block_on(s.shutdown());
        }
    }
}

/// Roomy limits: nothing here is about pacing.
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
    c.openai_limits.requests_per_minute = Some(1_000_000);
    c.openai_limits.tokens_per_minute = Some(100_000_000);
    c
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Shape {
    OpenAi,
    Anthropic,
}

fn request_line(shape: Shape, id: &str, max_tokens: u64) -> Value {
    let body = json!({
        "model": if shape == Shape::OpenAi { "gpt-4o-mini" } else { "claude-sonnet-4-5" },
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": format!("summarise document {id} please")}],
    });
    match shape {
        Shape::OpenAi => {
            json!({"custom_id": id, "method": "POST", "url": "/v1/chat/completions", "body": body})
        }
        Shape::Anthropic => json!({"custom_id": id, "params": body}),
    }
}

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let p = std::env::temp_dir().join(format!(
            "rw-run-{name}-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
    fn path(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write_input(path: &Path, shape: Shape, n: usize) -> Vec<String> {
    let ids: Vec<String> = (0..n).map(|i| format!("doc-{i:04}")).collect();
    let text: String = ids
        .iter()
        .map(|id| format!("{}\n", request_line(shape, id, 64)))
        .collect();
    std::fs::write(path, text).unwrap();
    ids
}

fn command(dir: &Dir, mock: &Mock, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ratewise"));
    c.arg("run")
        .arg(dir.path("in.jsonl"))
        .arg("--out")
        .arg(dir.path("out.jsonl"))
        .args(if extra.contains(&"--upstream") {
            Vec::new()
        } else {
            vec!["--upstream".to_owned(), mock.url()]
        })
        .args(if extra.contains(&"--progress") {
            &[][..]
        } else {
            &["--progress", "off"][..]
        })
        .args(extra)
        .env("OPENAI_API_KEY", "sk-test-run")
        .env("ANTHROPIC_API_KEY", "sk-ant-test-run")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn run(dir: &Dir, mock: &Mock, extra: &[&str]) -> (i32, String) {
    let Output { status, stderr, .. } = command(dir, mock, extra).output().unwrap();
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

fn results(dir: &Dir) -> Vec<Value> {
    std::fs::read_to_string(dir.path("out.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn by_id(results: &[Value]) -> BTreeMap<String, Value> {
    let mut m = BTreeMap::new();
    for r in results {
        let id = r["custom_id"].as_str().unwrap().to_owned();
        assert!(
            m.insert(id.clone(), r.clone()).is_none(),
            "{id} twice in the output"
        );
    }
    m
}

fn outcome(v: &Value) -> &str {
    v["ratewise"]["outcome"].as_str().unwrap()
}

fn sends_by_job(records: &[RequestRecord]) -> BTreeMap<String, usize> {
    ratewise_mock::sends_per_job(records)
}

#[test]
fn both_formats_run_to_completion_each_job_once() {
    for shape in [Shape::OpenAi, Shape::Anthropic] {
        let mock = Mock::start(roomy(20));
        let dir = Dir::new("complete");
        let ids = write_input(&dir.path("in.jsonl"), shape, 40);
        let (code, err) = run(&dir, &mock, &[]);
        assert_eq!(code, 0, "{shape:?}: {err}");
        let out = by_id(&results(&dir));
        assert_eq!(out.keys().cloned().collect::<Vec<_>>(), ids);
        for v in out.values() {
            assert_eq!(outcome(v), "done");
            match shape {
                Shape::OpenAi => {
                    assert_eq!(v["response"]["status_code"], 200);
                    assert!(v["response"]["body"]["choices"].is_array(), "{v}");
                }
                Shape::Anthropic => {
                    assert_eq!(v["result"]["type"], "succeeded");
                    assert_eq!(v["result"]["message"]["type"], "message", "{v}");
                }
            }
            assert!(v["ratewise"]["usage"]["output_tokens"].as_u64().unwrap() > 0);
        }
        let sends = sends_by_job(&mock.records());
        assert_eq!(sends.len(), 40);
        assert!(sends.values().all(|n| *n == 1), "{sends:?}");
        // A re-run sends nothing and writes the same results again.
        let before = mock.records().len();
        let (code, _) = run(&dir, &mock, &[]);
        assert_eq!(code, 0);
        assert_eq!(mock.records().len(), before);
        assert_eq!(by_id(&results(&dir)).len(), 40);
        // No key anywhere in what was written.
        for f in [
            "out.jsonl",
            "in.jsonl.ratewise.db",
            "in.jsonl.ratewise.db-wal",
        ] {
            if let Ok(bytes) = std::fs::read(dir.path(f)) {
                let text = String::from_utf8_lossy(&bytes);
                assert!(!text.contains("sk-test-run") && !text.contains("sk-ant-test-run"));
            }
        }
    }
}

fn kill9(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-9", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

#[test]
fn kill_9_at_random_points_and_a_rerun_each_time_pays_nothing_twice() {
    for (shape, seed) in [(Shape::OpenAi, 7u64), (Shape::Anthropic, 11u64)] {
        let mut rng = fastrand::Rng::with_seed(seed);
        // Answers take 300 ms and a run of 300 jobs some seconds, so each
        // kill finds sends on the wire.
        let mock = Mock::start(roomy(300));
        let dir = Dir::new("kill9");
        let ids = write_input(&dir.path("in.jsonl"), shape, 300);
        for _ in 0..4 {
            let mut child = command(&dir, &mock, &[]).spawn().unwrap();
            std::thread::sleep(Duration::from_millis(rng.u64(250..1200)));
            kill9(&mut child);
        }
        // A re-run to the end: held jobs stay held, nothing sent twice.
        let (code, err) = run(&dir, &mock, &[]);
        let out = by_id(&results(&dir));
        assert_eq!(out.keys().cloned().collect::<Vec<_>>(), ids, "{err}");
        let held: BTreeSet<String> = out
            .iter()
            .filter(|(_, v)| outcome(v) == "held_unknown")
            .map(|(k, _)| k.clone())
            .collect();
        assert!(out
            .values()
            .all(|v| matches!(outcome(v), "done" | "held_unknown")));
        // A held job's line keeps the attempt that was on the wire.
        for id in &held {
            let rw = &out[id]["ratewise"];
            assert_eq!(
                rw["attempts"].as_array().unwrap().len() as u64,
                rw["sends"].as_u64().unwrap(),
                "{id}: {rw}"
            );
        }
        // The kills cut sends on the wire: the path under test was taken.
        assert!(
            !held.is_empty(),
            "{shape:?}: no kill found a send on the wire"
        );
        assert_eq!(code, if held.is_empty() { 0 } else { 6 }, "{err}");
        let sends = sends_by_job(&mock.records());
        assert!(sends.values().all(|n| *n == 1), "{shape:?}: {sends:?}");
        // Then the held are released once: only they are sent again.
        let (code, err) = run(&dir, &mock, &["--retry-unknown"]);
        assert_eq!(code, 0, "{err}");
        let out = by_id(&results(&dir));
        assert_eq!(out.len(), ids.len());
        assert!(out.values().all(|v| outcome(v) == "done"));
        let records = mock.records();
        let sends = sends_by_job(&records);
        for (job, n) in &sends {
            let allowed = if held.contains(job) { 2 } else { 1 };
            assert!(
                *n <= allowed,
                "{job} sent {n} times (held: {})",
                held.contains(job)
            );
        }
        for id in &held {
            assert_eq!(out[id]["ratewise"]["possible_double_spend"], true);
        }
        let completions = records.iter().filter(|r| r.status == Some(200)).count();
        assert!(completions <= ids.len() + held.len());
        eprintln!(
            "{shape:?}: {} held after 4 kills, {} sends for {} jobs",
            held.len(),
            records.len(),
            ids.len()
        );
    }
}

#[test]
fn a_spend_cap_mid_run_stops_every_send_until_resumed() {
    let mock = Mock::start(roomy(30));
    let dir = Dir::new("cap");
    let ids = write_input(&dir.path("in.jsonl"), Shape::Anthropic, 30);
    std::fs::write(dir.path("rw.toml"), "window = 1\n").unwrap();
    let config = dir.path("rw.toml");
    let config = config.to_str().unwrap();
    // The cap is reached once ten requests were answered.
    let child = command(&dir, &mock, &["--config", config]).spawn().unwrap();
    while mock.records().len() < 10 {
        std::thread::sleep(Duration::from_millis(5));
    }
    mock.server().set_spend_cap(Some(0.0));
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    let records = mock.records();
    let first_cap = records
        .iter()
        .position(|r| r.cause == ratewise_core::Cause::SpendCap)
        .expect("a spend-cap answer");
    assert_eq!(
        records.len(),
        first_cap + 1,
        "sends after the cap: {records:?}"
    );
    let res = by_id(&results(&dir));
    assert_eq!(res.len(), ids.len());
    let stopped = res.values().filter(|v| outcome(v) == "stopped").count();
    assert!(stopped >= 19, "{stopped}");
    for v in res.values().filter(|v| outcome(v) == "stopped") {
        assert_eq!(v["result"]["type"], "canceled");
        assert_eq!(v["ratewise"]["cause"], "spend_cap");
    }
    // A re-run sends nothing while the stop is kept.
    let (code, _) = run(&dir, &mock, &["--config", config]);
    assert_eq!(code, 4);
    assert_eq!(mock.records().len(), records.len());
    // The cap lifted, --resume-stopped goes on to the end.
    mock.server().set_spend_cap(None);
    let (code, err) = run(&dir, &mock, &["--config", config, "--resume-stopped"]);
    assert_eq!(code, 0, "{err}");
    let res = by_id(&results(&dir));
    assert!(res.values().all(|v| outcome(v) == "done"));
    assert!(sends_by_job(&mock.records()).values().all(|n| *n <= 2));
}

#[test]
fn the_token_budget_is_never_passed() {
    let mock = Mock::start(roomy(0));
    let dir = Dir::new("budget");
    write_input(&dir.path("in.jsonl"), Shape::OpenAi, 40);
    // Each job's worst case is ~20 input + 64 output tokens.
    let budget = 1_500u64;
    let (code, err) = run(&dir, &mock, &["--budget-tokens", &budget.to_string()]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("budget"), "{err}");
    let res = by_id(&results(&dir));
    assert_eq!(res.len(), 40);
    let spent: u64 = res
        .values()
        .map(|v| v["ratewise"]["charged_tokens"].as_u64().unwrap())
        .sum();
    let used: u64 = res
        .values()
        .filter_map(|v| {
            let u = &v["ratewise"]["usage"];
            Some(u["input_tokens"].as_u64()? + u["output_tokens"].as_u64()?)
        })
        .sum();
    assert!(spent <= budget && used <= budget, "{spent} {used}");
    let done = res.values().filter(|v| outcome(v) == "done").count();
    assert!(done > 5 && done < 40, "{done}");
    assert_eq!(mock.records().len(), done);
}

#[test]
fn bad_lines_are_reported_by_number_and_the_rest_run() {
    let mock = Mock::start(roomy(0));
    let dir = Dir::new("bad");
    let good = |id: &str| request_line(Shape::OpenAi, id, 16).to_string();
    let mut long = String::from("{\"custom_id\":\"long\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"x\":\"");
    long.push_str(&"y".repeat(33 * 1024 * 1024));
    long.push_str("\"}}");
    let lines = [
        good("a"),                                                            // 1
        "not json".into(),                                                    // 2
        r#"{"method":"POST","url":"/v1/chat/completions","body":{}}"#.into(), // 3 no custom_id
        good("a"),                                                            // 4 duplicate
        request_line(Shape::Anthropic, "b", 16).to_string(),                  // 5 other shape
        r#"{"custom_id":"s","method":"POST","url":"/v1/chat/completions","body":{"stream":true}}"#
            .into(), // 6
        long,                                                                 // 7
        good("c"),                                                            // 8
    ];
    std::fs::write(dir.path("in.jsonl"), lines.join("\n")).unwrap();
    let (code, err) = run(&dir, &mock, &[]);
    assert_eq!(code, 2, "{err}");
    for (n, what) in [
        (2, "not a JSON"),
        (3, "custom_id"),
        (4, "earlier line"),
        (5, "anthropic"),
        (6, "stream"),
        (7, "longer than"),
    ] {
        assert!(
            err.lines()
                .any(|l| l.contains(&format!(":{n}: ")) && l.contains(what)),
            "line {n} ({what}) not reported: {err}"
        );
    }
    let res = by_id(&results(&dir));
    assert_eq!(res.keys().cloned().collect::<Vec<_>>(), ["a", "c"]);
    assert_eq!(mock.records().len(), 2);

    // --strict refuses the whole file: nothing sent.
    let mock = Mock::start(roomy(0));
    let dir2 = Dir::new("strict");
    std::fs::copy(dir.path("in.jsonl"), dir2.path("in.jsonl")).unwrap();
    let (code, err) = run(&dir2, &mock, &["--strict"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--strict"), "{err}");
    assert!(mock.records().is_empty());
}

#[test]
fn an_unreadable_input_a_missing_key_a_changed_input_and_a_locked_store_are_refused() {
    let mock = Mock::start(roomy(0));
    let dir = Dir::new("refuse");
    // Unreadable.
    let (code, err) = run(&dir, &mock, &[]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot read"), "{err}");
    // No key: nothing sent.
    write_input(&dir.path("in.jsonl"), Shape::OpenAi, 5);
    let out = command(&dir, &mock, &[])
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("OPENAI_API_KEY"));
    assert!(mock.records().is_empty());
    // A run, then the input changes: a line whose job was sent and whose
    // request changed is refused by its number, nothing sent; a line
    // removed leaves the store as it is; a line added runs.
    let (code, _) = run(&dir, &mock, &[]);
    assert_eq!(code, 0);
    let sent = mock.records().len();
    let text = std::fs::read_to_string(dir.path("in.jsonl")).unwrap();
    std::fs::write(
        dir.path("in.jsonl"),
        text.replacen("summarise document doc-0001", "summarise doc-0001", 1),
    )
    .unwrap();
    let (code, err) = run(&dir, &mock, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("line 2") && err.contains("doc-0001"), "{err}");
    assert_eq!(mock.records().len(), sent);
    let removed: String = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.path("in.jsonl"), &removed).unwrap();
    let (code, err) = run(&dir, &mock, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(mock.records().len(), sent);
    // The removed line's job was sent: its result stays.
    assert_eq!(by_id(&results(&dir)).len(), 5);
    std::fs::write(
        dir.path("in.jsonl"),
        format!("{text}{}\n", request_line(Shape::OpenAi, "new", 16)),
    )
    .unwrap();
    let (code, err) = run(&dir, &mock, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(mock.records().len(), sent + 1);
    std::fs::write(dir.path("in.jsonl"), &text).unwrap();
    // A second run on a locked store exits 3, naming the holder.
    let db = dir.path("in.jsonl.ratewise.db");
    let _held = ratewise_run::lock::lock(&db).unwrap();
    let (code, err) = run(&dir, &mock, &[]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains(&format!("pid {}", std::process::id())),
        "{err}"
    );
}

#[test]
fn a_held_job_is_never_sent_again_unless_released() {
    let mut config = roomy(0);
    // The third request is read whole and its connection reset: sent, no
    // answer.
    config.faults = vec![FaultRule::nth(Fault::Reset, [3])];
    let mock = Mock::start(config);
    let dir = Dir::new("held");
    std::fs::write(dir.path("rw.toml"), "window = 1\n").unwrap();
    let cfg = dir.path("rw.toml");
    let cfg = cfg.to_str().unwrap();
    write_input(&dir.path("in.jsonl"), Shape::OpenAi, 6);
    let (code, err) = run(&dir, &mock, &["--config", cfg]);
    assert_eq!(code, 6, "{err}");
    let res = by_id(&results(&dir));
    let held: Vec<&String> = res
        .iter()
        .filter(|(_, v)| outcome(v) == "held_unknown")
        .map(|(k, _)| k)
        .collect();
    assert_eq!(held.len(), 1, "{res:?}");
    let held = held[0].clone();
    assert_eq!(res[&held]["error"]["code"], "outcome_unknown");
    // Its line keeps the attempt that was sent.
    let attempts = res[&held]["ratewise"]["attempts"].as_array().unwrap();
    assert_eq!(
        attempts.len() as u64,
        res[&held]["ratewise"]["sends"].as_u64().unwrap()
    );
    assert!(attempts[0]["sent_at"].is_string(), "{attempts:?}");
    let sent = mock.records().len();
    let (code, _) = run(&dir, &mock, &["--config", cfg]);
    assert_eq!(code, 6);
    assert_eq!(mock.records().len(), sent, "a held job was sent again");
    let (code, err) = run(&dir, &mock, &["--config", cfg, "--retry-unknown"]);
    assert_eq!(code, 0, "{err}");
    let res = by_id(&results(&dir));
    assert_eq!(outcome(&res[&held]), "done");
    assert_eq!(res[&held]["ratewise"]["possible_double_spend"], true);
    assert_eq!(sends_by_job(&mock.records())[&held], 2);
}

#[test]
fn a_signal_drains_what_is_on_the_wire_and_the_rerun_finishes() {
    let mock = Mock::start(roomy(300));
    let dir = Dir::new("signal");
    let ids = write_input(&dir.path("in.jsonl"), Shape::OpenAi, 200);
    let child = command(&dir, &mock, &["--grace", "10s"]).spawn().unwrap();
    while mock.records().len() < 5 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    // Within the grace every send on the wire was answered: none held;
    // the jobs not sent are in the results as unfinished.
    let res = by_id(&results(&dir));
    assert_eq!(res.len(), ids.len());
    assert!(
        res.values()
            .all(|v| matches!(outcome(v), "done" | "pending")),
        "{err}"
    );
    assert!(res.values().any(|v| outcome(v) == "pending"));
    let (code, err) = run(&dir, &mock, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(by_id(&results(&dir)).len(), ids.len());
    assert!(sends_by_job(&mock.records()).values().all(|n| *n == 1));
}

#[test]
fn a_job_past_its_deadline_expires_unsent() {
    let mock = Mock::start(roomy(0));
    let dir = Dir::new("expired");
    write_input(&dir.path("in.jsonl"), Shape::Anthropic, 5);
    let (code, err) = run(&dir, &mock, &["--deadline", "1ms"]);
    assert_eq!(code, 7, "{err}");
    let res = by_id(&results(&dir));
    assert_eq!(res.len(), 5);
    for v in res.values() {
        assert_eq!(outcome(v), "expired");
        assert_eq!(v["result"]["type"], "expired");
    }
    assert!(mock.records().is_empty());
}

#[test]
fn progress_json_reports_each_second_and_ends_with_a_summary() {
    let mock = Mock::start(roomy(100));
    let dir = Dir::new("progress");
    // Two models in one file: each class paced on its own.
    let text: String = (0..30)
        .map(|i| {
            let mut line = request_line(Shape::OpenAi, &format!("doc-{i}"), 64);
            if i % 2 == 1 {
                line["body"]["model"] = "gpt-4o".into();
            }
            format!("{line}\n")
        })
        .collect();
    std::fs::write(dir.path("in.jsonl"), text).unwrap();
    let out = command(&dir, &mock, &["--progress", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (summary, ticks) = lines.split_last().unwrap();
    assert_eq!(summary["event"], "summary");
    assert_eq!(
        (summary["done"].as_u64(), summary["exit"].as_u64()),
        (Some(30), Some(0))
    );
    assert_eq!(summary["sends"], 30);
    assert!(!ticks.is_empty());
    for t in ticks {
        assert_eq!(t["event"], "progress");
        for f in [
            "done",
            "total",
            "failed",
            "held",
            "stopped",
            "sends",
            "answered_429",
            "input_tokens_per_min",
            "output_tokens_per_min",
            "limits",
            "binding",
            "budget_spent",
            "eta_s",
        ] {
            assert!(t.get(f).is_some(), "{f} missing: {t}");
        }
    }
    // Once the provider's headers were read, the limits are the learned
    // ones and the ETA comes from them.
    let last = ticks.last().unwrap();
    assert_eq!(last["eta_s"], 0);
    let limits = last["limits"].as_object().unwrap();
    let classes: BTreeSet<&str> = limits
        .keys()
        .map(|k| k.rsplit('/').next().unwrap())
        .collect();
    assert_eq!(classes.len(), 2, "{limits:?}");
    assert!(
        limits.values().any(|l| l["requests"] == 1_000_000),
        "{limits:?}"
    );
}

/// A silent OpenAI-like provider (issue #35): `bench/proxy_sdk.sh`'s
/// `silent-openai` shape (RPM 500, TPM 200k charged from `max_tokens`,
/// rejected requests counted, buckets of 10 s, 150 ms to the first byte and
/// 1 ms per output token), with no rate-limit header on any answer and the
/// wait only in the 429's message. `ratewise run` learns the limits from the
/// 429s alone: every job done, at most 3 % of sends answered 429 (measured
/// 2026-12-03 on 150 jobs: 3 of 153).
#[test]
fn a_silent_provider_is_paced_from_its_429s_alone() {
    let mut c = MockConfig {
        latency: LatencyConfig {
            first_byte_ms: 150,
            per_output_token_ms: 1.0,
        },
        silent: ratewise_mock::Silent::Message,
        capacity_seconds: 10.0,
        count_rejected: true,
        output_tokens: ratewise_mock::OutputRange { min: 100, max: 400 },
        ..MockConfig::default()
    };
    c.openai_limits.requests_per_minute = Some(500);
    c.openai_limits.tokens_per_minute = Some(200_000);
    let mock = Mock::start(c);
    let dir = Dir::new("silent");
    // 300 jobs (the bench's 150, twice: learning costs a few 429s once,
    // whatever the run's length) of 500-1 500 input tokens (seeded) with
    // max_tokens 512.
    let mut rng = fastrand::Rng::with_seed(35);
    let ids: Vec<String> = (0..300).map(|i| format!("doc-{i:04}")).collect();
    let text: String = ids
        .iter()
        .map(|id| {
            let words = rng.usize(500..1500);
            let body = json!({
                "model": "gpt-4o-mini",
                "max_tokens": 512,
                "messages": [{"role": "user", "content": "word ".repeat(words)}],
            });
            format!(
                "{}\n",
                json!({"custom_id": id, "method": "POST", "url": "/v1/chat/completions", "body": body})
            )
        })
        .collect();
    std::fs::write(dir.path("in.jsonl"), text).unwrap();
    let (code, err) = run(&dir, &mock, &[]);
    assert_eq!(code, 0, "{err}");
    let out = by_id(&results(&dir));
    assert_eq!(out.keys().cloned().collect::<Vec<_>>(), ids);
    assert!(out.values().all(|v| outcome(v) == "done"), "{err}");
    let records = mock.records();
    let throttled = records.iter().filter(|r| r.status == Some(429)).count();
    let share = throttled as f64 / records.len() as f64;
    eprintln!(
        "silent provider: {} sends for {} jobs, {throttled} answered 429 ({:.1} %)",
        records.len(),
        ids.len(),
        share * 100.0
    );
    assert!(
        share <= 0.03,
        "{throttled} of {} sends answered 429",
        records.len()
    );
}

fn summary_of(stdout: &[u8]) -> Value {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["event"] == "summary")
        .expect("a summary line")
}

/// Jobs paced inside the layer are not on the wire: after a signal none
/// of them is sent (issue: 53 sends after SIGINT, for ~17 s).
#[test]
fn a_signal_stops_new_sends_at_once_and_the_results_hold_every_job() {
    let mock = Mock::start(roomy(50));
    let dir = Dir::new("signal-now");
    let ids = write_input(&dir.path("in.jsonl"), Shape::OpenAi, 100);
    // Two requests a second: the window's jobs wait in the layer.
    std::fs::write(dir.path("rw.toml"), "[limits]\nrequests_per_minute = 120\n").unwrap();
    let cfg = dir.path("rw.toml");
    let child = command(
        &dir,
        &mock,
        &[
            "--grace",
            "10s",
            "--config",
            cfg.to_str().unwrap(),
            "--progress",
            "json",
        ],
    )
    .spawn()
    .unwrap();
    while mock.records().len() < 3 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let at_signal = mock.records().len();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    let after = mock.records().len();
    assert!(
        after <= at_signal + 2,
        "{} new sends after the signal: {err}",
        after - at_signal
    );
    // Every custom_id is in the results; the unfinished ones say so.
    let res = by_id(&results(&dir));
    assert_eq!(res.keys().cloned().collect::<Vec<_>>(), ids, "{err}");
    let unfinished = res.values().filter(|v| outcome(v) == "pending").count();
    assert!(unfinished > 50, "{unfinished}");
    for v in res.values().filter(|v| outcome(v) == "pending") {
        assert_eq!(v["error"]["code"], "unfinished", "{v}");
        assert!(v["response"].is_null());
    }
    let summary = summary_of(&out.stdout);
    assert_eq!(summary["complete"], false, "{summary}");
    assert!(err.contains("incomplete"), "{err}");
    // The re-run finishes: nothing sent twice.
    let (code, err) = run(&dir, &mock, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(by_id(&results(&dir)).values().all(|v| outcome(v) == "done"));
    assert!(sends_by_job(&mock.records()).values().all(|n| *n == 1));
}

/// A spend cap with jobs waiting in the layer: the stop names the job whose
/// answer stopped the queue (one that was sent) and the cause in words;
/// every stopped line carries the cause.
#[test]
fn a_stop_names_the_job_that_was_answered_and_its_cause() {
    let mock = Mock::start(roomy(30));
    let dir = Dir::new("cap-named");
    write_input(&dir.path("in.jsonl"), Shape::Anthropic, 60);
    std::fs::write(dir.path("rw.toml"), "[limits]\nrequests_per_minute = 600\n").unwrap();
    let cfg = dir.path("rw.toml");
    let child = command(
        &dir,
        &mock,
        &["--config", cfg.to_str().unwrap(), "--progress", "json"],
    )
    .spawn()
    .unwrap();
    while mock.records().len() < 5 {
        std::thread::sleep(Duration::from_millis(5));
    }
    mock.server().set_spend_cap(Some(0.0));
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("spend cap"), "{err}");
    let summary = summary_of(&out.stdout);
    let stop = &summary["stop"];
    assert_eq!(stop["cause"], "spend_cap", "{summary}");
    let who = stop["custom_id"].as_str().unwrap().to_owned();
    assert!(err.contains(&who), "{err}");
    let capped: BTreeSet<String> = mock
        .records()
        .iter()
        .filter(|r| r.cause == ratewise_core::Cause::SpendCap)
        .filter_map(|r| r.job.clone())
        .collect();
    assert!(
        capped.contains(&who),
        "{who} was not answered with the cap: {capped:?}"
    );
    let res = by_id(&results(&dir));
    assert!(res.values().any(|v| outcome(v) == "stopped"));
    for v in res.values().filter(|v| outcome(v) == "stopped") {
        assert_eq!(v["ratewise"]["cause"], "spend_cap", "{v}");
    }
}

/// Roomy limits do not bind: no `binding`, and the ETA comes from the
/// observed throughput; a configured limit that binds names itself.
#[test]
fn the_eta_and_binding_come_from_the_limit_that_binds() {
    let ticks_of = |stdout: &[u8]| -> Vec<Value> {
        String::from_utf8_lossy(stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["event"] == "progress")
            .collect()
    };
    let mock = Mock::start(roomy(200));
    let dir = Dir::new("eta-roomy");
    write_input(&dir.path("in.jsonl"), Shape::OpenAi, 40);
    std::fs::write(dir.path("rw.toml"), "window = 4\n").unwrap();
    let cfg = dir.path("rw.toml");
    let out = command(
        &dir,
        &mock,
        &["--config", cfg.to_str().unwrap(), "--progress", "json"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ticks = ticks_of(&out.stdout);
    let mid: Vec<&Value> = ticks
        .iter()
        .filter(|t| t["done"].as_u64().unwrap() > 0 && t["done"].as_u64() < t["total"].as_u64())
        .collect();
    assert!(!mid.is_empty(), "{ticks:?}");
    for t in &mid {
        assert!(t["binding"].is_null(), "{t}");
        let left = t["total"].as_u64().unwrap() - t["done"].as_u64().unwrap();
        // 4 at a time, 200 ms each: about 20 a second.
        let eta = t["eta_s"].as_u64().expect("an ETA from the throughput");
        assert!(eta >= 1 && eta <= left, "{t}");
    }
    // One request a second binds.
    let mock = Mock::start(roomy(0));
    let dir = Dir::new("eta-bound");
    write_input(&dir.path("in.jsonl"), Shape::OpenAi, 5);
    std::fs::write(dir.path("rw.toml"), "[limits]\nrequests_per_minute = 60\n").unwrap();
    let cfg = dir.path("rw.toml");
    let out = command(
        &dir,
        &mock,
        &["--config", cfg.to_str().unwrap(), "--progress", "json"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ticks = ticks_of(&out.stdout);
    let mid: Vec<&Value> = ticks
        .iter()
        .filter(|t| t["done"].as_u64() < t["total"].as_u64())
        .collect();
    assert!(!mid.is_empty());
    assert!(mid.iter().any(|t| t["binding"] == "requests"), "{mid:?}");
}

/// A bad line fixed after a run runs; an unchanged line is never sent
/// again; an added line runs; a line changed after it was sent is refused
/// by its number.
#[test]
fn an_input_edited_after_a_run_runs_what_changed() {
    let mock = Mock::start(roomy(0));
    let dir = Dir::new("edited");
    let line = |id: &str| request_line(Shape::OpenAi, id, 16).to_string();
    let mut lines = vec![line("a"), line("b"), "not json".to_owned(), line("d")];
    let write =
        |lines: &[String]| std::fs::write(dir.path("in.jsonl"), lines.join("\n") + "\n").unwrap();
    write(&lines);
    let (code, err) = run(&dir, &mock, &[]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(mock.records().len(), 3);
    // The bad line fixed: only it is sent.
    lines[2] = line("c");
    write(&lines);
    let (code, err) = run(&dir, &mock, &[]);
    assert_eq!(code, 0, "{err}");
    let sends = sends_by_job(&mock.records());
    assert_eq!(sends.len(), 4, "{sends:?}");
    assert!(sends.values().all(|n| *n == 1), "{sends:?}");
    assert_eq!(by_id(&results(&dir)).len(), 4);
    // A line added: it runs.
    lines.push(line("e"));
    write(&lines);
    let (code, err) = run(&dir, &mock, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(mock.records().len(), 5);
    // A line sent and then changed: refused by its number, nothing sent.
    lines[1] = request_line(Shape::OpenAi, "b", 99).to_string();
    write(&lines);
    let (code, err) = run(&dir, &mock, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("line 2") && err.contains("\"b\""), "{err}");
    assert_eq!(mock.records().len(), 5);
}

#[test]
fn expired_jobs_are_revived_by_a_later_deadline_or_retry_expired() {
    let mock = Mock::start(roomy(0));
    let dir = Dir::new("revive");
    write_input(&dir.path("in.jsonl"), Shape::Anthropic, 4);
    let (code, _) = run(&dir, &mock, &["--deadline", "1ms"]);
    assert_eq!(code, 7);
    assert!(mock.records().is_empty());
    // A later deadline: they expired only because of the old one.
    let (code, err) = run(&dir, &mock, &["--deadline", "1h"]);
    assert_eq!(code, 0, "{err}");
    assert!(by_id(&results(&dir)).values().all(|v| outcome(v) == "done"));
    assert_eq!(mock.records().len(), 4);
    // --retry-expired: a fresh deadline from now.
    let dir = Dir::new("revive2");
    write_input(&dir.path("in.jsonl"), Shape::Anthropic, 3);
    let (code, _) = run(&dir, &mock, &["--deadline", "1ms"]);
    assert_eq!(code, 7);
    std::thread::sleep(Duration::from_millis(30));
    let (code, _) = run(&dir, &mock, &["--deadline", "20ms"]);
    assert_eq!(code, 7);
    let (code, err) = run(&dir, &mock, &["--deadline", "20s", "--retry-expired"]);
    assert_eq!(code, 0, "{err}");
    assert!(by_id(&results(&dir)).values().all(|v| outcome(v) == "done"));
}

#[test]
fn the_upstream_works_with_or_without_v1_and_openai_ids_are_batch_req() {
    for suffix in ["", "/", "/v1", "/v1/"] {
        let mock = Mock::start(roomy(0));
        let dir = Dir::new("v1");
        write_input(&dir.path("in.jsonl"), Shape::OpenAi, 2);
        let url = format!("{}{suffix}", mock.url());
        let out = command(&dir, &mock, &["--upstream", &url])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{suffix}: {err}");
        for v in results(&dir) {
            assert_eq!(outcome(&v), "done", "{suffix}: {v}");
            assert!(v["id"].as_str().unwrap().starts_with("batch_req_"), "{v}");
        }
    }
}

/// `--redis` with a URL that is not a Redis URL: refused before anything
/// is sent, the URL (it may hold a password) not repeated.
#[test]
fn a_redis_url_that_is_not_one_is_refused_before_anything_is_sent() {
    let mock = Mock::start(roomy(0));
    let dir = Dir::new("redis-url");
    write_input(&dir.path("in.jsonl"), Shape::Anthropic, 3);
    let (code, err) = run(&dir, &mock, &["--redis", "http://u:hunter2@127.0.0.1:1/"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--redis: not a Redis URL"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    assert!(mock.records().is_empty());
}

#[test]
fn help_documents_the_config_and_the_budget_is_cumulative_across_runs() {
    let out = Command::new(env!("CARGO_BIN_EXE_ratewise"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for word in [
        "window",
        "[limits]",
        "requests_per_minute",
        "cumulative",
        "--redis",
    ] {
        assert!(help.contains(word), "{word} not in --help: {help}");
    }
    let mock = Mock::start(roomy(0));
    let dir = Dir::new("budget-again");
    write_input(&dir.path("in.jsonl"), Shape::OpenAi, 20);
    let (code, err) = run(&dir, &mock, &["--budget-tokens", "400"]);
    assert_eq!(code, 4, "{err}");
    let sent = mock.records().len();
    // The same budget on a re-run: what was spent counts.
    let (code, err) = run(&dir, &mock, &["--budget-tokens", "400", "--resume-stopped"]);
    assert_eq!(code, 4, "{err}");
    assert_eq!(mock.records().len(), sent);
}

#[test]
fn a_bad_key_or_upstream_is_refused_before_anything_is_sent() {
    let mock = Mock::start(roomy(0));
    let dir = Dir::new("badkey");
    write_input(&dir.path("in.jsonl"), Shape::OpenAi, 3);
    let out = command(&dir, &mock, &[])
        .env("OPENAI_API_KEY", "sk-two\nlines")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("API key"), "{err}");
    assert!(!err.contains("sk-two"), "the key leaked: {err}");
    assert!(mock.records().is_empty());
    let (code, err) = run(&dir, &mock, &["--upstream", "http://bad host:99"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("upstream"), "{err}");
    assert!(mock.records().is_empty());
}

/// Jobs expire in file order: once the layer finds a job cannot be sent
/// before its deadline (the jobs ahead of it take the time left), no later
/// line is sent in its place (issue: one expired at 55 s of a 60 s deadline
/// while later lines were still sent).
#[test]
fn jobs_expire_in_file_order_and_no_later_line_is_sent_in_their_place() {
    let mock = Mock::start(roomy(0));
    let dir = Dir::new("in-order");
    write_input(&dir.path("in.jsonl"), Shape::OpenAi, 40);
    std::fs::write(
        dir.path("rw.toml"),
        "window = 16\n[limits]\nrequests_per_minute = 60\n",
    )
    .unwrap();
    let cfg = dir.path("rw.toml");
    let (code, err) = run(
        &dir,
        &mock,
        &["--config", cfg.to_str().unwrap(), "--deadline", "8s"],
    );
    assert_eq!(code, 7, "{err}");
    let res = by_id(&results(&dir));
    let states: Vec<&str> = res.values().map(outcome).collect();
    let first_expired = states.iter().position(|s| *s == "expired").unwrap();
    assert!(first_expired > 0, "{states:?}");
    assert!(
        states[first_expired..].iter().all(|s| *s == "expired"),
        "a later line was sent after an earlier one expired: {states:?}"
    );
    assert!(states[..first_expired].iter().all(|s| *s == "done"));
    assert_eq!(mock.records().len(), first_expired);
}

/// Roomy limits and a batch surface that ends `items_per_second` items a
/// second (real time).
fn with_batches(items_per_second: f64) -> MockConfig {
    let mut c = roomy(0);
    c.batch.items_per_second = items_per_second;
    c.batch.validating_seconds = 0.2;
    c
}

#[test]
fn via_batch_runs_both_formats_through_one_batch_at_the_batch_price() {
    for shape in [Shape::OpenAi, Shape::Anthropic] {
        let mock = Mock::start(with_batches(1000.0));
        let dir = Dir::new("via-batch");
        let ids = write_input(&dir.path("in.jsonl"), shape, 30);
        let (code, stderr) = run(&dir, &mock, &["--via", "batch", "--batch-poll", "200ms"]);
        assert_eq!(code, 0, "{shape:?}: {stderr}");
        let out = by_id(&results(&dir));
        assert_eq!(out.keys().cloned().collect::<Vec<_>>(), ids, "{shape:?}");
        let batches = mock.server().batches();
        assert_eq!(batches.len(), 1, "{shape:?}: one batch for 30 jobs");
        for v in out.values() {
            assert_eq!(outcome(v), "done", "{shape:?}: {v}");
            assert_eq!(v["ratewise"]["price_basis"], "batch");
            assert_eq!(v["ratewise"]["batch_id"], batches[0].id.as_str());
        }
        if shape == Shape::OpenAi {
            assert!(out.values().all(|v| v["id"]
                .as_str()
                .is_some_and(|id| id.starts_with("batch_req_"))));
        }
        // Nothing went the direct way: no direct send, nothing billed at
        // the list price; the batch was billed at its discount.
        assert!(mock.records().is_empty(), "{shape:?}: direct sends made");
        assert_eq!(mock.server().usd_direct(), 0.0);
        assert!(mock.server().usd_batch() > 0.0);
        assert!(stderr.contains(&batches[0].id), "{stderr}");
    }
}

#[test]
fn kill_9_right_after_the_batch_is_created_then_a_rerun_makes_no_second_batch() {
    for shape in [Shape::OpenAi, Shape::Anthropic] {
        let mock = Mock::start(with_batches(10.0));
        let dir = Dir::new("via-batch-kill");
        let ids = write_input(&dir.path("in.jsonl"), shape, 20);
        let mut child = command(&dir, &mock, &["--via", "batch", "--batch-poll", "200ms"])
            .spawn()
            .unwrap();
        let t0 = std::time::Instant::now();
        while mock.server().batches().is_empty() {
            assert!(t0.elapsed() < Duration::from_secs(30), "no batch created");
            std::thread::sleep(Duration::from_millis(5));
        }
        kill9(&mut child);
        let (code, stderr) = run(&dir, &mock, &["--via", "batch", "--batch-poll", "200ms"]);
        assert_eq!(code, 0, "{shape:?}: {stderr}");
        assert_eq!(
            mock.server().batches().len(),
            1,
            "{shape:?}: a second batch"
        );
        let out = by_id(&results(&dir));
        assert_eq!(out.keys().cloned().collect::<Vec<_>>(), ids);
        assert!(out.values().all(|v| outcome(v) == "done"), "{out:?}");
        assert!(mock.records().is_empty(), "{shape:?}: direct sends made");
    }
}

/// A signal during `--via batch`: the batch goes on at the provider, and
/// the run says so, naming it and the store a re-run picks it up from;
/// the re-run does, making no second batch.
#[test]
fn a_signal_during_a_batch_run_names_the_batch_left_at_the_provider() {
    let mock = Mock::start(with_batches(5.0));
    let dir = Dir::new("via-batch-signal");
    let ids = write_input(&dir.path("in.jsonl"), Shape::Anthropic, 20);
    let child = command(&dir, &mock, &["--via", "batch", "--batch-poll", "200ms"])
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while mock.server().batches().is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(30), "no batch created");
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    let batch = mock.server().batches()[0].id.clone();
    let said = err
        .lines()
        .find(|l| l.contains("still running at the provider"))
        .unwrap_or_else(|| panic!("the batch left running is not named: {err}"));
    assert!(said.contains(&batch), "{said}");
    assert!(said.contains("in.jsonl.ratewise.db"), "{said}");
    let (code, err) = run(&dir, &mock, &["--via", "batch", "--batch-poll", "200ms"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(mock.server().batches().len(), 1, "a second batch: {err}");
    assert!(!err.contains("still running at the provider"), "{err}");
    let out = by_id(&results(&dir));
    assert_eq!(out.keys().cloned().collect::<Vec<_>>(), ids);
    assert!(out.values().all(|v| outcome(v) == "done"), "{out:?}");
    assert!(mock.records().is_empty(), "direct sends made");
}

#[test]
fn a_spend_cap_on_the_batch_api_stops_the_run_with_its_cause() {
    let mut config = with_batches(1000.0);
    config.spend.cap_usd = Some(0.0);
    let mock = Mock::start(config);
    let dir = Dir::new("via-batch-cap");
    write_input(&dir.path("in.jsonl"), Shape::Anthropic, 5);
    let (code, stderr) = run(&dir, &mock, &["--via", "batch", "--batch-poll", "200ms"]);
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("spend"), "{stderr}");
    assert!(mock.server().batches().is_empty());
    let out = by_id(&results(&dir));
    assert_eq!(out.len(), 5, "every custom_id has its line");
    assert!(mock.records().is_empty());
}

#[test]
fn via_auto_sends_by_deadline_the_old_jobs_directly_and_the_new_in_a_batch() {
    let mock = Mock::start(with_batches(1000.0));
    let dir = Dir::new("via-auto");
    let input = dir.path("in.jsonl");
    // Five jobs first seen now, kept pending by a budget that stops the
    // run before any send.
    let old = write_input(&input, Shape::OpenAi, 5);
    let (code, stderr) = run(&dir, &mock, &["--budget-tokens", "1"]);
    assert_eq!(code, 4, "{stderr}");
    assert!(mock.records().is_empty());
    std::thread::sleep(Duration::from_secs(4));
    // Five more lines; a deadline of 25 h + 2 s leaves the batch window
    // (24 h) and its margin (1 h) to the new jobs only: the old ones have
    // lived 4 s of theirs (2 s of slack either side for a loaded machine).
    let mut text = std::fs::read_to_string(&input).unwrap();
    let new: Vec<String> = (0..5).map(|i| format!("new-{i}")).collect();
    for id in &new {
        text.push_str(&format!("{}\n", request_line(Shape::OpenAi, id, 64)));
    }
    std::fs::write(&input, text).unwrap();
    let (code, stderr) = run(
        &dir,
        &mock,
        &[
            "--via",
            "auto",
            "--deadline",
            "90002s",
            "--resume-stopped",
            "--batch-poll",
            "200ms",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let out = by_id(&results(&dir));
    for id in &old {
        assert_eq!(out[id]["ratewise"]["price_basis"], "direct", "{id}");
        assert_eq!(outcome(&out[id]), "done");
    }
    for id in &new {
        assert_eq!(out[id]["ratewise"]["price_basis"], "batch", "{id}");
        assert_eq!(outcome(&out[id]), "done");
    }
    let sent: BTreeSet<String> = sends_by_job(&mock.records()).into_keys().collect();
    assert_eq!(sent, old.iter().cloned().collect::<BTreeSet<_>>());
    let batches = mock.server().batches();
    assert_eq!(batches.len(), 1);
}

/// `--config` with a `[[pools]]` table of two mock upstreams, each
/// member's key read from its own variable: every job done, spread over
/// both members, each attempt naming its member; no key in the results,
/// the store, stdout or stderr. Flags the pool replaces are refused.
#[test]
fn a_pool_in_the_config_spends_both_keys_and_writes_none() {
    const KEY_A: &str = "sk-cli-POOL-KEY-AAAA";
    const KEY_B: &str = "sk-cli-POOL-KEY-BBBB";
    let help = Command::new(env!("CARGO_BIN_EXE_ratewise"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for word in [
        "[[pools]]",
        "key_env",
        "--pool <NAME>",
        "conflict with a pool",
    ] {
        assert!(help.contains(word), "{word} not in --help: {help}");
    }
    let a = Mock::start(roomy(5));
    let b = Mock::start(roomy(5));
    let dir = Dir::new("pool");
    let ids = write_input(&dir.path("in.jsonl"), Shape::OpenAi, 30);
    std::fs::write(
        dir.path("pools.toml"),
        format!(
            "window = 8\n\n[[pools]]\nname = \"gpt\"\nprovider = \"openai\"\n\
             [[pools.members]]\nupstream = \"{}\"\nkey_env = \"RW_CLI_POOL_A\"\n\
             [[pools.members]]\nupstream = \"{}/v1\"\nkey_env = \"RW_CLI_POOL_B\"\n",
            a.url(),
            b.url()
        ),
    )
    .unwrap();
    let pooled = |extra: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ratewise"));
        c.arg("run")
            .arg(dir.path("in.jsonl"))
            .arg("--out")
            .arg(dir.path("out.jsonl"))
            .arg("--config")
            .arg(dir.path("pools.toml"))
            .args(extra)
            .env("RW_CLI_POOL_A", KEY_A)
            .env("RW_CLI_POOL_B", KEY_B)
            .env("OPENAI_API_KEY", "sk-cli-NOT-THE-POOLS")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c.output().unwrap()
    };
    // What the pool replaces is refused, nothing sent.
    for (extra, says) in [
        (
            &["--upstream", "http://127.0.0.1:9"][..],
            "--upstream conflicts",
        ),
        (&["--via", "batch"][..], "--via batch conflicts"),
        (&["--pool", "claude"][..], "no such pool"),
    ] {
        let out = pooled(extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(says), "{extra:?}: {err}");
    }
    assert!(a.records().is_empty() && b.records().is_empty());

    let out = pooled(&["--progress", "json"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}");
    let res = by_id(&results(&dir));
    assert_eq!(res.keys().cloned().collect::<Vec<_>>(), ids);
    let mut members = BTreeSet::new();
    for v in res.values() {
        assert_eq!(outcome(v), "done");
        assert_eq!(v["response"]["status_code"], 200);
        for attempt in v["ratewise"]["attempts"].as_array().unwrap() {
            let m = attempt["member"].as_str().expect("the attempt's member");
            assert!(m.contains("#fp-"), "{m}");
            members.insert(m.to_owned());
        }
    }
    assert_eq!(members.len(), 2, "both members used: {members:?}");
    let (ra, rb) = (a.records(), b.records());
    assert!(!ra.is_empty() && !rb.is_empty());
    assert_eq!(ra.len() + rb.len(), 30);
    assert!(sends_by_job(&[ra.clone(), rb.clone()].concat())
        .values()
        .all(|n| *n == 1));
    // Each upstream saw one key, not the other's.
    let key_of = |r: &[RequestRecord]| r.iter().map(|r| r.key.clone()).collect::<BTreeSet<_>>();
    let (ka, kb) = (key_of(&ra), key_of(&rb));
    assert!(ka.len() == 1 && kb.len() == 1 && ka != kb, "{ka:?} {kb:?}");
    // The end: a line per member, and the pool in the summary.
    assert!(err.contains("pool \"gpt\""), "{err}");
    let summary = summary_of(&out.stdout);
    let pool = summary["pool"]["members"].as_array().unwrap();
    assert_eq!(pool.len(), 2);
    let sends: u64 = pool.iter().map(|m| m["sends"].as_u64().unwrap()).sum();
    assert_eq!(sends, 30);
    // No key anywhere.
    let mut written = vec![err, stdout];
    for f in [
        "out.jsonl",
        "in.jsonl.ratewise.db",
        "in.jsonl.ratewise.db-wal",
    ] {
        if let Ok(bytes) = std::fs::read(dir.path(f)) {
            written.push(String::from_utf8_lossy(&bytes).into_owned());
        }
    }
    for text in &written {
        for key in [KEY_A, KEY_B, "POOL-KEY", "NOT-THE-POOLS"] {
            assert!(!text.contains(key), "{key} written");
        }
    }
}
