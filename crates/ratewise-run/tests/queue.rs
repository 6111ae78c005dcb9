//! The queue over the store, driven in-process against the mock: a store
//! whose writes start failing (a full disk) stops the sends without losing
//! a record; the SQLite store's job life (started, cut, held, released,
//! stopped, resumed) and its grouped writes from many threads.

use bytes::Bytes;
use http_body_util::Full;
use ratewise_mock::{LatencyConfig, MockConfig, MockServer};
use ratewise_run::output::Partial;
use ratewise_run::store::{Counts, End, Ended, NewJob, Pending, StopCause, StopRecord};
use ratewise_run::{
    Ending, Queue, Settings, SqliteStore, State, Store, StoreError, StoreJournal, Synchronous,
};
use ratewise_tower::{RetryLayer, RetryService};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "rw-queue-{name}-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn jobs(n: usize) -> Vec<NewJob> {
    (0..n)
        .map(|i| NewJob {
            line: i as u64 + 1,
            custom_id: format!("j{i}"),
            path: "/v1/messages".into(),
            model: Some("claude-sonnet-4-5".into()),
            input_estimate: 10,
            max_tokens: 32,
            body: format!(
                r#"{{"model":"claude-sonnet-4-5","max_tokens":32,"messages":[{{"role":"user","content":"job {i}"}}]}}"#
            )
            .into_bytes(),
            first_seen_ms: now_ms(),
        })
        .collect()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A store whose `started` fails from the `fail_from`-th call on: the
/// disk filled up.
struct FullDisk {
    inner: SqliteStore,
    started: AtomicUsize,
    fail_from: usize,
}

impl Store for FullDisk {
    fn meta(&self, k: &str) -> Result<Option<String>, StoreError> {
        self.inner.meta(k)
    }
    fn set_meta(&self, k: &str, v: &str) -> Result<(), StoreError> {
        self.inner.set_meta(k, v)
    }
    fn reset(&self) -> Result<(), StoreError> {
        self.inner.reset()
    }
    fn import(&self, jobs: Vec<NewJob>) -> Result<Vec<bool>, StoreError> {
        self.inner.import(jobs)
    }
    fn bad_lines(&self, l: Vec<(u64, String)>) -> Result<(), StoreError> {
        self.inner.bad_lines(l)
    }
    fn list_bad_lines(&self) -> Result<Vec<(u64, String)>, StoreError> {
        self.inner.list_bad_lines()
    }
    fn next_pending(
        &self,
        after: i64,
        now: i64,
        limit: usize,
        bytes: usize,
    ) -> Result<Vec<Pending>, StoreError> {
        self.inner.next_pending(after, now, limit, bytes)
    }
    fn next_due(&self) -> Result<Option<i64>, StoreError> {
        self.inner.next_due()
    }
    fn started(&self, id: &str) -> Result<(), StoreError> {
        if self.started.fetch_add(1, Ordering::SeqCst) + 1 >= self.fail_from {
            return Err(StoreError::new("database or disk is full"));
        }
        self.inner.started(id)
    }
    fn between_attempts(&self, id: &str) -> Result<(), StoreError> {
        self.inner.between_attempts(id)
    }
    fn ended(&self, seq: i64, end: End) -> Result<(), StoreError> {
        self.inner.ended(seq, end)
    }
    fn put_back(&self, seq: i64, nb: i64, e: End) -> Result<(), StoreError> {
        self.inner.put_back(seq, nb, e)
    }
    fn stop(&self, s: &StopRecord) -> Result<(), StoreError> {
        self.inner.stop(s)
    }
    fn stopped(&self) -> Result<Option<StopRecord>, StoreError> {
        self.inner.stopped()
    }
    fn resume_stopped(&self) -> Result<u64, StoreError> {
        self.inner.resume_stopped()
    }
    fn hold_cut(&self) -> Result<u64, StoreError> {
        self.inner.hold_cut()
    }
    fn release_unknown(&self) -> Result<u64, StoreError> {
        self.inner.release_unknown()
    }
    fn counts(&self) -> Result<Counts, StoreError> {
        self.inner.counts()
    }
    fn each_ended(
        &self,
        f: &mut dyn FnMut(Ended) -> std::io::Result<()>,
    ) -> Result<(), StoreError> {
        self.inner.each_ended(f)
    }
}

async fn run_queue(
    store: Arc<dyn Store>,
    base: &str,
    dir: &std::path::Path,
) -> ratewise_run::Report {
    let mut settings = Settings::new(ratewise_run::input::Shape::Anthropic, "sk-ant-test");
    settings.upstream = base.to_owned();
    settings.window = 4;
    let layer = RetryLayer::builder()
        .deadline(settings.deadline)
        .journal(Arc::new(StoreJournal(Arc::clone(&store))))
        .build()
        .unwrap();
    let service = RetryService::new(ratewise_run::client().unwrap(), layer);
    let queue = Queue::new(store, service, settings);
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let mut partial = Partial::open(&dir.join("out.partial")).unwrap();
    queue
        .run(rx, &mut partial, &ratewise_run::progress::Ignore)
        .await
        .unwrap()
}

/// [`run_queue`] over a client that asks for gzip: the answers come
/// compressed, and only the layer (which decodes a copy on the side) can
/// read their usage.
async fn run_queue_gzip(store: Arc<dyn Store>, base: &str, dir: &std::path::Path) {
    let mut settings = Settings::new(ratewise_run::input::Shape::Anthropic, "sk-ant-test");
    settings.upstream = base.to_owned();
    settings.window = 4;
    let layer = RetryLayer::builder()
        .deadline(settings.deadline)
        .journal(Arc::new(StoreJournal(Arc::clone(&store))))
        .build()
        .unwrap();
    fn gzip(mut r: http::Request<Full<Bytes>>) -> http::Request<Full<Bytes>> {
        r.headers_mut().insert(
            http::header::ACCEPT_ENCODING,
            http::HeaderValue::from_static("gzip"),
        );
        r
    }
    let client = tower::ServiceExt::map_request(
        ratewise_run::client().unwrap(),
        gzip as fn(http::Request<Full<Bytes>>) -> http::Request<Full<Bytes>>,
    );
    let service = RetryService::new(client, layer);
    let queue = Queue::new(store, service, settings);
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let mut partial = Partial::open(&dir.join("out.partial")).unwrap();
    let report = queue
        .run(rx, &mut partial, &ratewise_run::progress::Ignore)
        .await
        .unwrap();
    assert_eq!(report.ending, Ending::Finished);
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
async fn a_full_disk_stops_the_sends_and_loses_no_record() {
    let mock = MockServer::start(roomy()).await.unwrap();
    let dir = temp("full");
    let db = dir.join("q.db");
    let sqlite = SqliteStore::open(&db, Synchronous::Normal).unwrap();
    sqlite.import(jobs(30)).unwrap();
    let store = Arc::new(FullDisk {
        inner: sqlite,
        started: AtomicUsize::new(0),
        fail_from: 9,
    });
    let report = run_queue(store.clone(), &mock.base_url(), &dir).await;
    assert!(
        matches!(report.ending, Ending::StoreFailed(ref why) if why.contains("disk is full")),
        "{:?}",
        report.ending
    );
    // Eight sends were recorded, eight made; the rest wait, none lost.
    let records = mock.records();
    assert_eq!(records.len(), 8);
    let c = store.counts().unwrap();
    assert_eq!((c.done, c.pending, c.held, c.total), (8, 22, 0, 30));
    let mut done = Vec::new();
    store
        .each_ended(&mut |e| {
            done.push(e.custom_id);
            Ok(())
        })
        .unwrap();
    let mut sent: Vec<String> = records.iter().filter_map(|r| r.job.clone()).collect();
    sent.sort();
    done.sort();
    assert_eq!(sent, done);
    // The disk freed, the same store finishes; nothing is sent twice.
    let healthy: Arc<dyn Store> = Arc::new(SqliteStore::open(&db, Synchronous::Full).unwrap());
    let report = run_queue(healthy.clone(), &mock.base_url(), &dir).await;
    assert_eq!(report.ending, Ending::Finished);
    assert_eq!(healthy.counts().unwrap().done, 30);
    assert!(ratewise_mock::sends_per_job(&mock.records())
        .values()
        .all(|n| *n == 1));
    mock.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_usage_charged_is_the_one_the_layer_read_at_the_body_s_end() {
    let mut cfg = roomy();
    cfg.compression = true;
    let mock = MockServer::start(cfg).await.unwrap();
    let dir = temp("usage");
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(&dir.join("q.db"), Synchronous::Normal).unwrap());
    store.import(jobs(3)).unwrap();
    run_queue_gzip(Arc::clone(&store), &mock.base_url(), &dir).await;
    let records = mock.records();
    assert_eq!(records.len(), 3);
    let mut ended = Vec::new();
    store
        .each_ended(&mut |e| {
            ended.push(e);
            Ok(())
        })
        .unwrap();
    assert_eq!(ended.len(), 3);
    for e in ended {
        let r = records
            .iter()
            .find(|r| r.job.as_deref() == Some(e.custom_id.as_str()))
            .unwrap();
        // The answer kept is the compressed one: the runner could not
        // have read its usage itself.
        let body = e.response.as_deref().unwrap();
        assert_eq!(&body[..2], &[0x1f, 0x8b], "{}: gzip", e.custom_id);
        assert_eq!(
            e.usage,
            Some((r.input_tokens, r.output_tokens)),
            "{}: the usage the mock reported, as the layer read it",
            e.custom_id
        );
        assert_eq!(e.charged, r.input_tokens + r.output_tokens);
    }
    mock.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_job_on_the_wire_when_the_process_died_is_held_and_charged_its_worst_case() {
    let dir = temp("life");
    let store = SqliteStore::open(&dir.join("q.db"), Synchronous::Normal).unwrap();
    assert_eq!(store.import(jobs(3)).unwrap(), vec![true; 3]);
    // A duplicate custom_id is refused.
    assert_eq!(store.import(jobs(1)).unwrap(), vec![false]);
    store.started("j0").unwrap();
    store.started("j1").unwrap();
    // j1 was answered 429: nothing generated, pending between attempts.
    store.between_attempts("j1").unwrap();
    drop(store);
    let store = SqliteStore::open(&dir.join("q.db"), Synchronous::Normal).unwrap();
    assert_eq!(store.hold_cut().unwrap(), 1);
    let c = store.counts().unwrap();
    assert_eq!((c.held, c.pending, c.spent), (1, 2, 42));
    // Held jobs are not pending: the queue never sees them...
    let pending = store.next_pending(0, now_ms(), 10, 1 << 20).unwrap();
    let ids: Vec<&str> = pending.iter().map(|p| p.custom_id.as_str()).collect();
    assert_eq!(ids, ["j1", "j2"]);
    // ...until released, marked as a possible double spend.
    assert_eq!(store.release_unknown().unwrap(), 1);
    let pending = store.next_pending(0, now_ms(), 10, 1 << 20).unwrap();
    assert!(pending[0].double_spend && pending[0].custom_id == "j0");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_stop_is_kept_and_only_resume_lifts_it() {
    let dir = temp("stop");
    let store = SqliteStore::open(&dir.join("q.db"), Synchronous::Normal).unwrap();
    store.import(jobs(4)).unwrap();
    store
        .ended(
            1,
            End {
                state: Some(State::Done),
                status: Some(200),
                ..End::default()
            },
        )
        .unwrap();
    let stop = StopRecord {
        cause: StopCause::Provider(ratewise_core::Cause::SpendCap),
        at: "now".into(),
        status: Some(429),
        message: "cap".into(),
        custom_id: Some("j1".into()),
    };
    store.stop(&stop).unwrap();
    drop(store);
    let store = SqliteStore::open(&dir.join("q.db"), Synchronous::Normal).unwrap();
    assert_eq!(store.stopped().unwrap(), Some(stop));
    let c = store.counts().unwrap();
    assert_eq!((c.done, c.stopped, c.pending), (1, 3, 0));
    assert!(store
        .next_pending(0, now_ms(), 10, 1 << 20)
        .unwrap()
        .is_empty());
    assert_eq!(store.resume_stopped().unwrap(), 3);
    assert_eq!(store.stopped().unwrap(), None);
    assert_eq!(
        store.next_pending(0, now_ms(), 10, 1 << 20).unwrap().len(),
        3
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_put_back_job_waits_for_its_time_and_the_window_bounds_bytes() {
    let dir = temp("due");
    let store = SqliteStore::open(&dir.join("q.db"), Synchronous::Normal).unwrap();
    store.import(jobs(3)).unwrap();
    let later = now_ms() + 60_000;
    store.put_back(1, later, End::default()).unwrap();
    let ids = |v: Vec<Pending>| v.into_iter().map(|p| p.custom_id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.next_pending(0, now_ms(), 10, 1 << 20).unwrap()),
        ["j1", "j2"]
    );
    assert_eq!(store.next_due().unwrap(), Some(0));
    assert_eq!(
        ids(store.next_pending(0, later, 10, 1 << 20).unwrap()),
        ["j0", "j1", "j2"]
    );
    // One body's bytes: one job (never none).
    assert_eq!(store.next_pending(0, later, 10, 1).unwrap().len(), 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn writes_from_many_threads_are_grouped_and_none_is_lost() {
    let dir = temp("group");
    let store = Arc::new(SqliteStore::open(&dir.join("q.db"), Synchronous::Full).unwrap());
    store.import(jobs(400)).unwrap();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let s = Arc::clone(&store);
            std::thread::spawn(move || {
                for i in (t..400).step_by(8) {
                    s.started(&format!("j{i}")).unwrap();
                    s.ended(
                        i as i64 + 1,
                        End {
                            state: Some(State::Done),
                            charged: 1,
                            ..End::default()
                        },
                    )
                    .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let c = store.counts().unwrap();
    assert_eq!((c.done, c.spent, c.pending, c.sending), (400, 400, 0, 0));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_held_jobs_line_keeps_its_attempt() {
    let dir = temp("held-attempts");
    let store = SqliteStore::open(&dir.join("q.db"), Synchronous::Normal).unwrap();
    store.import(jobs(2)).unwrap();
    store.started("j0").unwrap();
    drop(store);
    let store = SqliteStore::open(&dir.join("q.db"), Synchronous::Normal).unwrap();
    assert_eq!(store.hold_cut().unwrap(), 1);
    let mut held = Vec::new();
    store
        .each_ended(&mut |e| {
            held.push(e);
            Ok(())
        })
        .unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].sends, 1);
    let attempts: serde_json::Value = serde_json::from_str(&held[0].attempts).unwrap();
    let attempts = attempts.as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert!(
        attempts[0]["sent_at"].as_str().unwrap().ends_with('Z'),
        "{attempts:?}"
    );
    assert_eq!(attempts[0]["attempt"], 1);
    assert_eq!(attempts[0]["cause"], "outcome_unknown");
    let _ = std::fs::remove_dir_all(dir);
}
