//! Re-runs as a new user meets them (issue #49): a line the provider
//! refused runs once it is fixed; an upstream nothing listens on fails no
//! job; `waited_ms` is the time a job waited; an interrupted batch run
//! names the batches still running at the provider.

use ratewise_mock::{Fault, FaultRule, LatencyConfig, MockConfig, MockServer};
use ratewise_run::batch::Via;
use ratewise_run::progress::{Event, Ignore};
use ratewise_run::{Ending, Run};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "rw-rerun-{name}-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// An Anthropic line of `id` for `model`.
fn line(id: &str, model: &str) -> String {
    format!(
        "{{\"custom_id\":\"{id}\",\"params\":{{\"model\":\"{model}\",\"max_tokens\":16,\"messages\":[{{\"role\":\"user\",\"content\":\"hi {id}\"}}]}}}}\n"
    )
}

fn write_input(dir: &Path, lines: &[String]) -> PathBuf {
    let path = dir.join("in.jsonl");
    std::fs::write(&path, lines.concat()).unwrap();
    path
}

fn roomy() -> MockConfig {
    let mut c = MockConfig {
        latency: LatencyConfig {
            first_byte_ms: 0,
            per_output_token_ms: 0.0,
        },
        ..MockConfig::default()
    };
    c.anthropic_limits.requests_per_minute = Some(1_000_000);
    c.anthropic_limits.input_tokens_per_minute = Some(100_000_000);
    c.anthropic_limits.output_tokens_per_minute = Some(100_000_000);
    c
}

fn run_of(path: &Path, upstream: &str) -> Run {
    Run::new(path)
        .upstream(upstream)
        .key_from(|var| (var == "ANTHROPIC_API_KEY").then(|| "sk-ant-test".to_owned()))
}

/// The results file's `ratewise` object of each line, by `custom_id`.
fn results(path: &Path) -> std::collections::BTreeMap<String, serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["custom_id"].as_str().unwrap().to_owned(),
                v["ratewise"].clone(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_the_provider_refused_runs_once_it_is_fixed() {
    let mut config = roomy();
    let mut refuse = FaultRule::always(Fault::Status {
        status: 400,
        html: false,
    });
    refuse.model = Some("claude-typo".into());
    config.faults = vec![refuse];
    let mock = MockServer::start(config).await.unwrap();
    let dir = temp("fixed");
    let ok = "claude-sonnet-4-5";
    let path = write_input(
        &dir,
        &[line("a", ok), line("b", "claude-typo"), line("c", ok)],
    );
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let first = run_of(&path, &mock.base_url())
        .execute(rx.clone(), Arc::new(Ignore))
        .await
        .unwrap();
    assert_eq!(first.exit_code(), ratewise_run::EXIT_FAILED);
    assert_eq!(
        (first.report.counts.done, first.report.counts.failed),
        (2, 1)
    );
    let sent_first = mock.records().len();
    // The line is fixed: its job runs, the others are not sent again.
    write_input(&dir, &[line("a", ok), line("b", ok), line("c", ok)]);
    let second = run_of(&path, &mock.base_url())
        .execute(rx, Arc::new(Ignore))
        .await
        .unwrap_or_else(|e| panic!("the fixed line is refused: {e}"));
    assert_eq!(second.exit_code(), 0, "{:?}", second.report);
    assert_eq!(second.report.counts.done, 3);
    let again = &mock.records()[sent_first..];
    assert_eq!(again.len(), 1, "only the fixed job is sent");
    assert_eq!(again[0].model, ok);
    assert_eq!(results(&second.out)["b"]["outcome"], "done");
    mock.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A loopback address nothing listens on.
fn nothing_listening() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_nothing_listens_on_fails_no_job_and_a_rerun_with_the_right_one_sends_them() {
    let mock = MockServer::start(roomy()).await.unwrap();
    let dir = temp("unreached");
    let ok = "claude-sonnet-4-5";
    let path = write_input(&dir, &[line("a", ok), line("b", ok), line("c", ok)]);
    let wrong = nothing_listening();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let first = run_of(&path, &wrong)
        .execute(rx.clone(), Arc::new(Ignore))
        .await
        .unwrap();
    match &first.report.ending {
        Ending::Unreachable { upstream, cause } => {
            assert_eq!(upstream, &wrong);
            assert_eq!(cause, "connection refused");
        }
        other => panic!("the run ends {other:?}, not naming the upstream"),
    }
    let c = &first.report.counts;
    assert_eq!((c.failed, c.pending), (0, 3), "{c:?}");
    assert_eq!(first.report.sends, 0, "no attempt reached a server");
    assert_eq!(first.exit_code(), ratewise_run::EXIT_INTERRUPTED);
    assert_eq!(first.summary()["unreachable"]["upstream"], wrong.as_str());
    // The same command with the right upstream sends them.
    let second = run_of(&path, &mock.base_url())
        .execute(rx, Arc::new(Ignore))
        .await
        .unwrap();
    assert_eq!(second.exit_code(), 0, "{:?}", second.report);
    assert_eq!(second.report.counts.done, 3);
    assert_eq!((mock.records().len(), second.report.sends), (3, 3));
    for (id, r) in results(&second.out) {
        assert_eq!(r["outcome"], "done", "{id}");
    }
    mock.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waited_ms_is_the_time_from_the_run_s_start_to_the_job_s_last_send() {
    // One job in the layer at a time, each answered after 300 ms: the
    // third job cannot be sent before two answers came back, so it waited
    // at least 600 ms (no retry, no delay: the old count said 0).
    let mut config = roomy();
    config.latency.first_byte_ms = 300;
    let mock = MockServer::start(config).await.unwrap();
    let dir = temp("waited");
    let ok = "claude-sonnet-4-5";
    let path = write_input(&dir, &[line("a", ok), line("b", ok), line("c", ok)]);
    let conf = dir.join("run.toml");
    std::fs::write(&conf, "window = 1\n").unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let finished = run_of(&path, &mock.base_url())
        .config(&conf)
        .execute(rx, Arc::new(Ignore))
        .await
        .unwrap();
    assert_eq!(finished.exit_code(), 0, "{:?}", finished.report);
    let r = results(&finished.out);
    let waited = |id: &str| r[id]["waited_ms"].as_u64().unwrap();
    assert!(waited("b") >= 300, "b waited {} ms", waited("b"));
    assert!(waited("c") >= 600, "c waited {} ms", waited("c"));
    assert!(waited("c") >= waited("b"), "{r:?}");
    mock.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_batch_run_names_its_running_batches_and_a_rerun_picks_them_up() {
    // Ten items at five a second: the batch runs two seconds at the
    // provider, and the signal comes at its first poll.
    let mut config = roomy();
    config.batch.items_per_second = 5.0;
    config.batch.validating_seconds = 0.0;
    let mock = MockServer::start(config).await.unwrap();
    let dir = temp("batch-signal");
    let ok = "claude-sonnet-4-5";
    let lines: Vec<String> = (0..10).map(|i| line(&format!("j{i}"), ok)).collect();
    let path = write_input(&dir, &lines);
    let (tx, rx) = tokio::sync::watch::channel(false);
    let tx = Arc::new(tx);
    let signal = Arc::clone(&tx);
    let first = run_of(&path, &mock.base_url())
        .via(Via::Batch)
        .batch_poll(std::time::Duration::from_millis(100))
        .execute(
            rx,
            Arc::new(move |e: Event| {
                if matches!(e, Event::Batch(_)) {
                    let _ = signal.send(true);
                }
            }),
        )
        .await
        .unwrap();
    let made = mock.batches();
    assert_eq!(made.len(), 1);
    assert_eq!(first.exit_code(), ratewise_run::EXIT_INTERRUPTED);
    assert_eq!(first.running_batches, vec![made[0].id.clone()]);
    let summary = first.summary();
    assert_eq!(summary["batches_running"]["ids"][0], made[0].id.as_str());
    assert_eq!(
        summary["batches_running"]["db"],
        path.with_extension("jsonl.ratewise.db")
            .display()
            .to_string()
    );
    // The same store: the batch is polled to its end, none is made again.
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let second = run_of(&path, &mock.base_url())
        .via(Via::Batch)
        .batch_poll(std::time::Duration::from_millis(100))
        .execute(rx, Arc::new(Ignore))
        .await
        .unwrap();
    assert_eq!(second.exit_code(), 0, "{:?}", second.report);
    assert_eq!(mock.batches().len(), 1, "a second batch was made");
    assert!(second.running_batches.is_empty());
    assert_eq!(second.report.counts.done, 10);
    assert!(mock.records().is_empty(), "direct sends made");
    mock.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}
