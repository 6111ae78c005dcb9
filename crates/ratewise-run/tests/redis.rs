//! `ratewise run --redis`: a key's limits shared with every process on
//! the same Redis. Tests that need a Redis are `#[ignore = "needs
//! redis-server"]` (`.ci/run` runs them with `--include-ignored`; see
//! `ratewise_redis::testing`).

use ratewise_mock::{LatencyConfig, MockConfig, MockServer};
use ratewise_run::progress::{Event, Ignore};
use ratewise_run::{Run, RunError};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The limit the key has, per minute: ten requests a second.
const RPM: u64 = 600;

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "rw-redis-{name}-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `n` Anthropic lines, ids prefixed with `tag`, in `dir/in.jsonl`.
fn input(dir: &Path, tag: &str, n: usize) -> PathBuf {
    let text: String = (0..n)
        .map(|i| {
            format!(
                "{{\"custom_id\":\"{tag}{i}\",\"params\":{{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":16,\"messages\":[{{\"role\":\"user\",\"content\":\"hi {i}\"}}]}}}}\n"
            )
        })
        .collect();
    let path = dir.join("in.jsonl");
    std::fs::write(&path, text).unwrap();
    path
}

/// The key's limit at the mock too; tokens roomy, answers at once.
fn provider() -> MockConfig {
    let mut c = MockConfig {
        latency: LatencyConfig {
            first_byte_ms: 0,
            per_output_token_ms: 0.0,
        },
        ..MockConfig::default()
    };
    c.anthropic_limits.requests_per_minute = Some(RPM);
    c.anthropic_limits.input_tokens_per_minute = Some(100_000_000);
    c.anthropic_limits.output_tokens_per_minute = Some(100_000_000);
    c
}

/// The most requests the mock saw in any `window_ms`.
fn busiest(at_ms: &[u64], window_ms: u64) -> usize {
    at_ms
        .iter()
        .map(|&t| {
            at_ms
                .iter()
                .filter(|&&u| u >= t && u < t + window_ms)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server"]
async fn two_runs_on_one_redis_share_one_key_s_requests_per_minute() {
    let (url, _server) = ratewise_redis::testing::redis();
    let mock = MockServer::start(provider()).await.unwrap();
    // A key no other test uses: its record in Redis is this test's alone.
    let key = format!("sk-ant-redis-{:016x}", fastrand::u64(..));
    let told: Arc<Mutex<Vec<String>>> = Arc::default();
    let run = |tag: &'static str| {
        let dir = temp(tag);
        let path = input(&dir, tag, 40);
        let conf = dir.join("run.toml");
        std::fs::write(&conf, format!("[limits]\nrequests_per_minute = {RPM}\n")).unwrap();
        let told = Arc::clone(&told);
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let run = Run::new(&path)
            .upstream(mock.base_url())
            .api_key(key.clone())
            .config(&conf)
            .redis(url.clone());
        async move {
            let observer = Arc::new(move |e: Event| {
                if let Event::RedisUnavailable(why) = e {
                    told.lock().unwrap().push(why);
                }
            });
            let finished = run.execute(rx, observer).await;
            let _ = std::fs::remove_dir_all(dir);
            finished
        }
    };
    let (a, b) = tokio::join!(run("a"), run("b"));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(
        told.lock().unwrap().is_empty(),
        "{:?}",
        told.lock().unwrap()
    );
    assert_eq!((a.exit_code(), b.exit_code()), (0, 0));
    assert_eq!(a.report.counts.done + b.report.counts.done, 80);
    let at: Vec<u64> = mock.records().iter().map(|r| r.at_ms).collect();
    assert_eq!(at.len(), 80, "each job sent once");
    // Together within the key's ten a second: in any two seconds, the
    // twenty the limit refills plus the one second of credit a bucket
    // starts with (and one for the edges of the window). Two runs each
    // pacing alone (each its own bucket and ramp, each to ten a second)
    // send near forty in their busiest two seconds.
    let per_2s = (RPM / 30) as usize;
    let most = busiest(&at, 2_000);
    assert!(
        most <= per_2s + (RPM / 60) as usize + 1,
        "{most} requests in two seconds against a limit of {RPM}/min"
    );
    mock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_url_that_is_not_one_is_a_typed_error_before_anything_is_sent() {
    let mock = MockServer::start(provider()).await.unwrap();
    let dir = temp("bad-url");
    let path = input(&dir, "x", 2);
    let db = dir.join("store.db");
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let err = Run::new(&path)
        .upstream(mock.base_url())
        .api_key("sk-ant-test")
        .db(&db)
        .redis("http://user:hunter2@127.0.0.1:6379/")
        .execute(rx, Arc::new(Ignore))
        .await
        .unwrap_err();
    assert!(
        matches!(err, RunError::Redis(ratewise_redis::Error::Url)),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), ratewise_run::EXIT_INPUT);
    assert!(!err.to_string().contains("hunter2"), "{err}");
    assert!(!format!("{err:?}").contains("hunter2"), "{err:?}");
    assert!(mock.records().is_empty());
    assert!(!db.exists(), "a store was made before the URL was read");
    mock.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_does_not_answer_is_told_and_the_run_goes_on_at_its_share() {
    let mock = MockServer::start(provider()).await.unwrap();
    let dir = temp("no-redis");
    let path = input(&dir, "x", 3);
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let told: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&told);
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let finished = Run::new(&path)
        .upstream(mock.base_url())
        .api_key("sk-ant-test")
        .redis(format!("redis://:hunter2@127.0.0.1:{port}/"))
        .execute(
            rx,
            Arc::new(move |e: Event| {
                if let Event::RedisUnavailable(why) = e {
                    seen.lock().unwrap().push(why);
                }
            }),
        )
        .await
        .unwrap();
    assert_eq!(finished.exit_code(), 0, "{:?}", finished.report);
    assert_eq!(finished.report.counts.done, 3);
    let told = told.lock().unwrap().clone();
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(!told[0].contains("hunter2"), "{told:?}");
    mock.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}
