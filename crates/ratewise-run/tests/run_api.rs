//! `Run` as a library: typed errors before anything is sent, events to an
//! observer instead of prints, a store error that keeps its source.

use ratewise_mock::{LatencyConfig, MockConfig, MockServer};
use ratewise_run::progress::{Event, Ignore};
use ratewise_run::{Run, RunError, SqliteStore, Synchronous};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "rw-api-{name}-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn input(dir: &std::path::Path, n: usize) -> PathBuf {
    let text: String = (0..n)
        .map(|i| {
            format!(
                "{{\"custom_id\":\"r{i}\",\"params\":{{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":16,\"messages\":[{{\"role\":\"user\",\"content\":\"hi {i}\"}}]}}}}\n"
            )
        })
        .collect();
    let path = dir.join("in.jsonl");
    std::fs::write(&path, text).unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_or_upstream_that_cannot_be_sent_is_a_typed_error_and_nothing_is_sent() {
    let mock = MockServer::start(roomy()).await.unwrap();
    let dir = temp("bad");
    let path = input(&dir, 3);
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let err = Run::new(&path)
        .upstream(mock.base_url())
        .api_key("sk-ant-one\r\nX-Injected: yes")
        .execute(rx.clone(), Arc::new(Ignore))
        .await
        .unwrap_err();
    assert!(matches!(err, RunError::InvalidKey(_)), "{err:?}");
    assert_eq!(err.exit_code(), ratewise_run::EXIT_INPUT);
    assert!(!err.to_string().contains("sk-ant-one"), "{err}");
    let err = Run::new(&path)
        .upstream("http://exa mple.com/v1")
        .api_key("sk-ant-fine")
        .execute(rx.clone(), Arc::new(Ignore))
        .await
        .unwrap_err();
    assert!(matches!(err, RunError::InvalidUpstream(_)), "{err:?}");
    let err = Run::new(&path)
        .upstream(mock.base_url())
        .key_from(|_| None)
        .execute(rx, Arc::new(Ignore))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            RunError::NoKey {
                variable: "ANTHROPIC_API_KEY"
            }
        ),
        "{err:?}"
    );
    assert!(mock.records().is_empty());
    mock.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_reports_to_its_observer_and_ends_in_a_summary() {
    let mock = MockServer::start(roomy()).await.unwrap();
    let dir = temp("ok");
    let path = input(&dir, 5);
    let events: Arc<Mutex<Vec<Event>>> = Arc::default();
    let seen = Arc::clone(&events);
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let finished = Run::new(&path)
        .upstream(format!("{}/v1", mock.base_url()))
        .key_from(|var| (var == "ANTHROPIC_API_KEY").then(|| "sk-ant-test".to_owned()))
        .execute(rx, Arc::new(move |e: Event| seen.lock().unwrap().push(e)))
        .await
        .unwrap();
    assert_eq!(finished.exit_code(), 0);
    assert!(finished.complete());
    assert_eq!((finished.report.counts.done, finished.written), (5, 5));
    let summary = finished.summary();
    assert_eq!(summary["complete"], true);
    assert_eq!(summary["exit"], 0);
    let last_done = events
        .lock()
        .unwrap()
        .iter()
        .any(|e| matches!(e, Event::Progress(s) if s.done == 5));
    assert!(last_done);
    mock.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_store_error_keeps_the_sqlite_error_as_its_source() {
    let dir = temp("source");
    // A directory is not a database.
    let err = SqliteStore::open(&dir, Synchronous::Normal)
        .err()
        .expect("a directory cannot be opened as a store");
    let source = std::error::Error::source(&err).expect("the SQLite error");
    assert!(!source.to_string().is_empty());
    let plain = ratewise_run::StoreError::new("disk full");
    assert!(std::error::Error::source(&plain).is_none());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_run_can_be_spawned() {
    fn send<T: Send + 'static>(_: &T) {}
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let run = Run::new("in.jsonl").execute(rx, Arc::new(Ignore));
    send(&run);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_starts_from_what_the_last_run_on_its_store_learned() {
    let mut config = roomy();
    config.anthropic_limits.requests_per_minute = Some(50_000);
    let mock = MockServer::start(config).await.unwrap();
    let dir = temp("remember");
    let db = dir.join("run.db");
    let run = |path: PathBuf, events: Arc<Mutex<Vec<Event>>>| {
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let db = db.clone();
        let upstream = format!("{}/v1", mock.base_url());
        async move {
            Run::new(&path)
                .upstream(upstream)
                .db(db)
                .key_from(|var| (var == "ANTHROPIC_API_KEY").then(|| "sk-ant-test".to_owned()))
                .execute(rx, Arc::new(move |e: Event| events.lock().unwrap().push(e)))
                .await
                .unwrap()
        }
    };
    let first: Arc<Mutex<Vec<Event>>> = Arc::default();
    let finished = run(input(&dir, 3), Arc::clone(&first)).await;
    assert_eq!(finished.report.counts.done, 3);
    let remembered = |events: &Arc<Mutex<Vec<Event>>>| {
        events.lock().unwrap().iter().find_map(|e| match e {
            Event::Remembered(n) => Some(*n),
            _ => None,
        })
    };
    assert_eq!(remembered(&first), None, "a new store remembers nothing");
    // The store keeps what the key's headers stated, and no key.
    let store = SqliteStore::open(&db, Synchronous::Normal).unwrap();
    let kept = ratewise_run::store::Store::meta(&store, "beliefs")
        .unwrap()
        .expect("the run's beliefs kept");
    assert!(kept.contains("50000"), "{kept}");
    assert!(!kept.contains("sk-ant-test"), "no key in the store");
    drop(store);
    // A re-run (one more line) starts from them.
    let second: Arc<Mutex<Vec<Event>>> = Arc::default();
    let finished = run(input(&dir, 4), Arc::clone(&second)).await;
    assert_eq!(finished.report.counts.done, 4);
    assert_eq!(remembered(&second), Some(1));
    mock.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// `[limits]` in the proxy's first words (`requests`) is read as
/// `requests_per_minute`, and the run tells its observer so, once, before
/// the first send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_limits_word_is_read_and_told_as_a_config_warning() {
    let mock = MockServer::start(roomy()).await.unwrap();
    let dir = temp("words");
    let path = input(&dir, 2);
    let config = dir.join("rw.toml");
    std::fs::write(&config, "[limits]\nrequests = 600\n").unwrap();
    let events: Arc<Mutex<Vec<Event>>> = Arc::default();
    let seen = Arc::clone(&events);
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let finished = Run::new(&path)
        .upstream(mock.base_url())
        .config(&config)
        .key_from(|var| (var == "ANTHROPIC_API_KEY").then(|| "sk-ant-test".to_owned()))
        .execute(rx, Arc::new(move |e: Event| seen.lock().unwrap().push(e)))
        .await
        .unwrap();
    assert_eq!(finished.exit_code(), 0);
    let events = events.lock().unwrap().clone();
    let warnings: Vec<&String> = events
        .iter()
        .filter_map(|e| match e {
            Event::ConfigWarning(w) => Some(w),
            _ => None,
        })
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("requests is the old spelling of requests_per_minute"),
        "{}",
        warnings[0]
    );
    // Told before anything else the run did.
    assert!(
        matches!(events[0], Event::ConfigWarning(_)),
        "{:?}",
        events[0]
    );
    mock.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// An upstream on loopback that answers every request with a success of
/// more than 4 MiB (the layer's default bound on what it reads for usage),
/// its usage at the end.
async fn big_answers() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let text = "x".repeat(5 << 20);
    let body = format!(
        r#"{{"id":"msg_big","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{{"type":"text","text":"{text}"}}],"stop_reason":"end_turn","usage":{{"input_tokens":1,"output_tokens":2}}}}"#
    );
    let answer = Arc::new(format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ));
    tokio::spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else {
                return;
            };
            let answer = Arc::clone(&answer);
            tokio::spawn(async move {
                // The request: its head, then as many body bytes as it says.
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                let wanted = loop {
                    let Ok(n) = tcp.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
                        let length = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        break end + 4 + length;
                    }
                };
                while seen.len() < wanted {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = tcp.write_all(answer.as_bytes()).await;
                let _ = tcp.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_usage_of_an_answer_over_4_mib_is_read_and_charged() {
    let upstream = big_answers().await;
    let dir = temp("big");
    let path = input(&dir, 2);
    let out = dir.join("out.jsonl");
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let finished = Run::new(&path)
        .upstream(upstream)
        .out(&out)
        .key_from(|var| (var == "ANTHROPIC_API_KEY").then(|| "sk-ant-test".to_owned()))
        .execute(rx, Arc::new(Ignore))
        .await
        .unwrap();
    assert_eq!(finished.report.counts.done, 2);
    // Charged what the provider reported (1 + 2 a job), not the worst
    // case (the input's estimate and `max_tokens` 16).
    assert_eq!(finished.report.counts.spent, 6);
    let text = std::fs::read_to_string(&out).unwrap();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(
            v["ratewise"]["usage"],
            serde_json::json!({"input_tokens": 1, "output_tokens": 2}),
            "{}",
            &line[..200.min(line.len())]
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
