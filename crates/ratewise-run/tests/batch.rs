//! The batch path against the mock's batch APIs (loopback only): both
//! formats to the end, a run killed right after the create call, an
//! Anthropic recovery that cannot tell two batches apart, errored and
//! expired items, a spend cap on create, and `auto`'s split by deadline.

use ratewise_core::Cause;
use ratewise_mock::{BatchConfig, MockConfig, MockServer, SpendConfig};
use ratewise_run::batch::{
    route, run_batches, BatchEnding, BatchError, BatchReport, BatchSettings, BatchStatus, Limits,
    Route, Via,
};
use ratewise_run::input::Shape;
use ratewise_run::store::{
    BatchEnd, BatchIntent, BatchJob, BatchRef, BatchRow, Counts, End, Ended, NewJob, Pending,
    StopCause, StopRecord,
};
use ratewise_run::{SqliteStore, State, Store, StoreError, Synchronous};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const OPENAI_KEY: &str = "sk-openai-test";
const ANTHROPIC_KEY: &str = "sk-ant-test";

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "rw-batch-{name}-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn total(c: &ratewise_mock::batch::ItemCounts) -> u64 {
    c.processing + c.succeeded + c.errored + c.canceled + c.expired
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A provider minute is 0.6 s (100× real time).
fn fast() -> MockConfig {
    MockConfig {
        seconds_per_minute: 0.6,
        batch: BatchConfig {
            items_per_second: 100.0,
            validating_seconds: 0.0,
            ..BatchConfig::default()
        },
        ..MockConfig::default()
    }
}

fn body(shape: Shape, i: usize) -> String {
    match shape {
        Shape::OpenAi => format!(
            r#"{{"model":"gpt-4o-mini","max_completion_tokens":16,"messages":[{{"role":"user","content":"job {i}"}}]}}"#
        ),
        Shape::Anthropic => format!(
            r#"{{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{{"role":"user","content":"job {i}"}}]}}"#
        ),
    }
}

fn job(shape: Shape, i: usize, body: String, first_seen_ms: i64) -> NewJob {
    let (path, model) = match shape {
        Shape::OpenAi => ("/v1/chat/completions", "gpt-4o-mini"),
        Shape::Anthropic => ("/v1/messages", "claude-sonnet-4-5"),
    };
    NewJob {
        line: i as u64 + 1,
        custom_id: format!("c{i}"),
        path: path.into(),
        model: Some(model.into()),
        input_estimate: (body.len() as u64).div_ceil(4),
        max_tokens: 16,
        body: body.into_bytes(),
        first_seen_ms,
    }
}

fn jobs(shape: Shape, n: usize) -> Vec<NewJob> {
    (0..n)
        .map(|i| job(shape, i, body(shape, i), now_ms()))
        .collect()
}

fn open_store(dir: &std::path::Path) -> Arc<SqliteStore> {
    Arc::new(SqliteStore::open(&dir.join("run.db"), Synchronous::Normal).unwrap())
}

fn settings(shape: Shape, server: &MockServer) -> BatchSettings {
    let key = match shape {
        Shape::OpenAi => OPENAI_KEY,
        Shape::Anthropic => ANTHROPIC_KEY,
    };
    let mut s = BatchSettings::new(shape, key);
    s.upstream = server.base_url();
    s.poll_interval = Duration::from_millis(20);
    s.request_timeout = Duration::from_secs(10);
    // The mock's clock runs 100× real time: its creation times are
    // wall-clock, but give recovery room.
    s.clock_skew = Duration::from_secs(600);
    s.settle = Duration::from_millis(50);
    s
}

async fn run(
    store: Arc<dyn Store>,
    settings: BatchSettings,
) -> (Result<BatchReport, BatchError>, Vec<BatchStatus>) {
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let mut seen = Vec::new();
    let r = run_batches(
        store,
        ratewise_run::client().unwrap(),
        settings,
        |_: &Pending| true,
        rx,
        |s| seen.push(s),
    )
    .await;
    (r, seen)
}

/// The output's lines by custom_id (each must appear once).
fn output(store: &dyn Store, shape: Shape, dir: &std::path::Path) -> HashMap<String, Value> {
    let out = dir.join("out.jsonl");
    ratewise_run::output::write_results(store, shape, &out).unwrap();
    let mut by_id = HashMap::new();
    for line in std::fs::read_to_string(&out).unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let id = v["custom_id"].as_str().unwrap().to_owned();
        assert!(by_id.insert(id.clone(), v).is_none(), "{id} twice");
    }
    by_id
}

async fn to_the_end(shape: Shape) {
    let server = MockServer::start(fast()).await.unwrap();
    let dir = temp("end");
    let store = open_store(&dir);
    store.import(jobs(shape, 6)).unwrap();
    let (r, seen) = run(store.clone(), settings(shape, &server)).await;
    let r = r.unwrap();
    assert_eq!(r.ending, BatchEnding::Finished);
    assert_eq!(r.created.len(), 1, "{r:?}");
    assert_eq!(r.counts.done, 6, "{:?}", r.counts);
    assert_eq!(server.batches().len(), 1);
    let id = &r.created[0];
    assert!(seen.iter().any(|s| &s.batch_id == id));
    let last = seen.last().unwrap();
    assert_eq!(last.counts.succeeded, 6);
    assert_eq!(last.eta, Some(Duration::ZERO));
    let lines = output(store.as_ref(), shape, &dir);
    assert_eq!(lines.len(), 6);
    for (cid, v) in &lines {
        assert_eq!(v["ratewise"]["batch_id"], id.as_str(), "{cid}");
        assert_eq!(v["ratewise"]["price_basis"], "batch");
        assert_eq!(v["ratewise"]["outcome"], "done");
        assert!(v["ratewise"]["charged_tokens"].as_u64().unwrap() > 0);
        match shape {
            Shape::OpenAi => {
                assert!(v["id"].as_str().unwrap().starts_with("batch_req_"), "{v}");
                assert_eq!(v["response"]["status_code"], 200);
                assert!(v["response"]["body"]["usage"].is_object());
            }
            Shape::Anthropic => {
                assert_eq!(v["result"]["type"], "succeeded");
                assert!(v["result"]["message"]["usage"].is_object());
            }
        }
    }
    // A re-run finds nothing to do and creates nothing.
    let (again, _) = run(store.clone(), settings(shape, &server)).await;
    assert!(again.unwrap().created.is_empty());
    assert_eq!(server.batches().len(), 1);
    server.shutdown().await;
}

#[tokio::test]
async fn an_openai_file_runs_through_one_batch_to_the_end() {
    to_the_end(Shape::OpenAi).await;
}

#[tokio::test]
async fn an_anthropic_file_runs_through_one_batch_to_the_end() {
    to_the_end(Shape::Anthropic).await;
}

#[tokio::test]
async fn openai_batches_split_by_model_and_count() {
    let server = MockServer::start(fast()).await.unwrap();
    let dir = temp("split");
    let store = open_store(&dir);
    let mut js = jobs(Shape::OpenAi, 5);
    for j in js.iter_mut().skip(3) {
        let b = String::from_utf8(j.body.clone())
            .unwrap()
            .replace("gpt-4o-mini", "gpt-4o");
        j.body = b.into_bytes();
        j.model = Some("gpt-4o".into());
    }
    store.import(js).unwrap();
    let mut s = settings(Shape::OpenAi, &server);
    s.limits = Limits {
        max_requests: 2,
        max_bytes: 1 << 20,
    };
    let (r, _) = run(store.clone(), s).await;
    let r = r.unwrap();
    // gpt-4o-mini: 2 + 1; gpt-4o: 2.
    assert_eq!(r.created.len(), 3, "{r:?}");
    let totals: Vec<u64> = server.batches().iter().map(|b| total(&b.counts)).collect();
    assert_eq!(totals.iter().sum::<u64>(), 5, "{totals:?}");
    assert_eq!(output(store.as_ref(), Shape::OpenAi, &dir).len(), 5);
    server.shutdown().await;
}

/// A store whose write of the batch id fails once: the process "dies"
/// right after the create call was answered.
struct DiesAfterCreate {
    inner: Arc<SqliteStore>,
    armed: AtomicBool,
}

impl Store for DiesAfterCreate {
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
    fn next_pending(&self, a: i64, n: i64, l: usize, b: usize) -> Result<Vec<Pending>, StoreError> {
        self.inner.next_pending(a, n, l, b)
    }
    fn next_due(&self) -> Result<Option<i64>, StoreError> {
        self.inner.next_due()
    }
    fn started(&self, id: &str) -> Result<(), StoreError> {
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
    fn batch_intent(&self, i: &BatchIntent) -> Result<(), StoreError> {
        self.inner.batch_intent(i)
    }
    fn batch_submitted(&self, nonce: &str, id: &str) -> Result<(), StoreError> {
        if self.armed.swap(false, Ordering::SeqCst) {
            return Err(StoreError::new("killed right after the create call"));
        }
        self.inner.batch_submitted(nonce, id)
    }
    fn batch_not_created(&self, nonce: &str) -> Result<u64, StoreError> {
        self.inner.batch_not_created(nonce)
    }
    fn batch_cancel_requested(&self, nonce: &str, at: i64) -> Result<(), StoreError> {
        self.inner.batch_cancel_requested(nonce, at)
    }
    fn batches(&self) -> Result<Vec<BatchRow>, StoreError> {
        self.inner.batches()
    }
    fn batch_jobs(&self, nonce: &str) -> Result<Vec<BatchJob>, StoreError> {
        self.inner.batch_jobs(nonce)
    }
    fn batch_results(
        &self,
        nonce: &str,
        ends: Vec<BatchEnd>,
        close: Option<&str>,
    ) -> Result<(), StoreError> {
        self.inner.batch_results(nonce, ends, close)
    }
    fn batch_hold(&self, nonce: &str, cause: &str, message: &str) -> Result<u64, StoreError> {
        self.inner.batch_hold(nonce, cause, message)
    }
    fn release_batch_failed(&self) -> Result<u64, StoreError> {
        self.inner.release_batch_failed()
    }
    fn each_job_with_batch(
        &self,
        f: &mut dyn FnMut(Ended, Option<BatchRef>) -> std::io::Result<()>,
    ) -> Result<(), StoreError> {
        self.inner.each_job_with_batch(f)
    }
}

/// Runs once with a store that "dies" after the create call; returns the
/// store (its intent recorded, no batch id) and the server.
async fn killed_after_create(
    shape: Shape,
    n: usize,
    dir: &std::path::Path,
) -> (Arc<SqliteStore>, MockServer) {
    let server = MockServer::start(fast()).await.unwrap();
    let store = open_store(dir);
    store.import(jobs(shape, n)).unwrap();
    let dying = Arc::new(DiesAfterCreate {
        inner: store.clone(),
        armed: AtomicBool::new(true),
    });
    let (r, _) = run(dying, settings(shape, &server)).await;
    assert!(matches!(r, Err(BatchError::Store(_))), "{r:?}");
    assert_eq!(server.batches().len(), 1, "the create call was made");
    let rows = store.batches().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].state.as_str(), rows[0].batch_id.as_deref()),
        ("intent", None)
    );
    assert_eq!(
        store.counts().unwrap().sending,
        n as u64,
        "its jobs are batched"
    );
    (store, server)
}

async fn found_again(shape: Shape) {
    let dir = temp("killed");
    let (store, server) = killed_after_create(shape, 4, &dir).await;
    let (r, _) = run(store.clone(), settings(shape, &server)).await;
    let r = r.unwrap();
    let mock: Vec<String> = server.batches().iter().map(|b| b.id.clone()).collect();
    assert_eq!(mock.len(), 1, "exactly one batch on the mock");
    assert_eq!(r.recovered, mock);
    assert!(r.created.is_empty());
    assert_eq!(r.counts.done, 4, "{:?}", r.counts);
    let lines = output(store.as_ref(), shape, &dir);
    assert_eq!(lines.len(), 4);
    assert!(lines
        .values()
        .all(|v| v["ratewise"]["batch_id"] == mock[0].as_str()));
    server.shutdown().await;
}

#[tokio::test]
async fn openai_a_run_killed_after_the_create_call_finds_its_batch_by_metadata() {
    found_again(Shape::OpenAi).await;
}

#[tokio::test]
async fn anthropic_a_run_killed_after_the_create_call_finds_its_batch_by_time_and_count() {
    found_again(Shape::Anthropic).await;
}

#[tokio::test]
async fn anthropic_recovery_with_two_candidates_holds_the_jobs_and_creates_none() {
    let dir = temp("twins");
    let (store, server) = killed_after_create(Shape::Anthropic, 3, &dir).await;
    // Someone else's batch of the same size, at the same time.
    let twin = {
        let twin_dir = temp("twin");
        let other = open_store(&twin_dir);
        other.import(jobs(Shape::Anthropic, 3)).unwrap();
        let (r, _) = run(other, settings(Shape::Anthropic, &server)).await;
        r.unwrap().created
    };
    assert_eq!(twin.len(), 1);
    assert_eq!(server.batches().len(), 2);
    let (r, _) = run(store.clone(), settings(Shape::Anthropic, &server)).await;
    let r = r.unwrap();
    assert_eq!(r.held, 3, "{r:?}");
    assert!(r.created.is_empty() && r.recovered.is_empty());
    assert_eq!(server.batches().len(), 2, "no batch created");
    assert_eq!(r.counts.held, 3);
    let lines = output(store.as_ref(), Shape::Anthropic, &dir);
    for v in lines.values() {
        assert_eq!(v["ratewise"]["outcome"], "held_unknown");
        assert_eq!(v["ratewise"]["price_basis"], "batch");
        assert!(v["ratewise"]["batch_id"].is_null());
        assert_eq!(v["result"]["error"]["error"]["type"], "outcome_unknown");
    }
    // A re-run sends nothing again.
    let (again, _) = run(store.clone(), settings(Shape::Anthropic, &server)).await;
    assert!(again.unwrap().created.is_empty());
    assert_eq!(server.batches().len(), 2);
    server.shutdown().await;
}

#[tokio::test]
async fn errored_and_expired_items_are_reported_and_resent_only_with_retry_failed() {
    for shape in [Shape::Anthropic, Shape::OpenAi] {
        errored_and_expired(shape).await;
    }
}

async fn errored_and_expired(shape: Shape) {
    // 2 items per provider second, a 2-second window: some expire.
    let cfg = MockConfig {
        seconds_per_minute: 0.6,
        batch: BatchConfig {
            items_per_second: 2.0,
            window_seconds: 2.0,
            validating_seconds: 0.0,
            ..BatchConfig::default()
        },
        ..MockConfig::default()
    };
    let server = MockServer::start(cfg).await.unwrap();
    let dir = temp("errored");
    let store = open_store(&dir);
    let mut js = jobs(shape, 10);
    // The provider refuses it: Anthropic without max_tokens, OpenAI with a
    // negative cap.
    js[0].body = match shape {
        Shape::Anthropic => {
            br#"{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"no cap"}]}"#
                .to_vec()
        }
        Shape::OpenAi => {
            br#"{"model":"gpt-4o-mini","max_completion_tokens":-1,"messages":[{"role":"user","content":"bad cap"}]}"#
                .to_vec()
        }
    };
    store.import(js).unwrap();
    let s = settings(shape, &server);
    let (r, _) = run(store.clone(), s.clone()).await;
    let r = r.unwrap();
    let c = &r.counts;
    assert!(c.failed >= 1 && c.expired >= 1, "{c:?}");
    assert_eq!(c.done + c.failed + c.expired, 10, "{c:?}");
    let lines = output(store.as_ref(), shape, &dir);
    match shape {
        Shape::Anthropic => {
            assert_eq!(lines["c0"]["result"]["type"], "errored");
            assert!(lines["c0"]["result"]["error"]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("max_tokens"));
        }
        Shape::OpenAi => {
            assert_eq!(lines["c0"]["response"]["status_code"], 400);
            assert!(lines["c0"]["id"]
                .as_str()
                .unwrap()
                .starts_with("batch_req_"));
        }
    }
    assert_eq!(lines["c0"]["ratewise"]["outcome"], "failed");
    let expired: Vec<&Value> = lines
        .values()
        .filter(|v| v["ratewise"]["outcome"] == "expired")
        .collect();
    assert_eq!(expired.len() as u64, c.expired);
    for v in &expired {
        assert_eq!(v["ratewise"]["cause"], "batch_expired");
        match shape {
            Shape::Anthropic => assert_eq!(v["result"]["type"], "expired"),
            Shape::OpenAi => assert_eq!(v["error"]["code"], "batch_expired"),
        }
    }
    let again_failed = c.failed + c.expired;

    // Not asked: nothing is resent.
    let (r2, _) = run(store.clone(), s.clone()).await;
    let r2 = r2.unwrap();
    assert!(r2.created.is_empty());
    assert_eq!(r2.released, 0);
    assert_eq!(server.batches().len(), 1);

    // Asked: exactly those, in a new batch.
    let mut retry = s.clone();
    retry.retry_failed = true;
    let (r3, _) = run(store.clone(), retry).await;
    let r3 = r3.unwrap();
    assert_eq!(r3.released, again_failed);
    assert_eq!(r3.created.len(), 1);
    let batches = server.batches();
    assert_eq!(batches.len(), 2);
    assert_eq!(total(&batches[1].counts), again_failed);
    server.shutdown().await;
}

#[tokio::test]
async fn a_spend_cap_on_create_stops_the_queue_with_its_cause() {
    for shape in [Shape::Anthropic, Shape::OpenAi] {
        let server = MockServer::start(MockConfig {
            spend: SpendConfig {
                cap_usd: Some(0.0),
                ..SpendConfig::default()
            },
            ..fast()
        })
        .await
        .unwrap();
        let dir = temp("cap");
        let store = open_store(&dir);
        store.import(jobs(shape, 3)).unwrap();
        let (r, _) = run(store.clone(), settings(shape, &server)).await;
        let r = r.unwrap();
        let BatchEnding::Stopped(stop) = &r.ending else {
            panic!("{shape:?}: {r:?}");
        };
        assert!(
            [Cause::SpendCap, Cause::Billing]
                .map(StopCause::Provider)
                .contains(&stop.cause),
            "{shape:?}: {stop:?}"
        );
        assert_eq!(stop.status, Some(429));
        assert_eq!(store.stopped().unwrap().as_ref(), Some(stop));
        assert_eq!(r.counts.stopped, 3, "{shape:?}");
        assert!(server.batches().is_empty());
        let lines = output(store.as_ref(), shape, &dir);
        assert!(lines.values().all(|v| v["ratewise"]["outcome"] == "stopped"
            && v["ratewise"]["cause"] == stop.cause.as_str()));
        server.shutdown().await;
    }
}

#[tokio::test]
async fn a_stop_cancels_the_submitted_batch_and_accounts_what_may_still_be_billed() {
    for shape in [Shape::Anthropic, Shape::OpenAi] {
        stop_cancels(shape).await;
    }
}

async fn stop_cancels(shape: Shape) {
    // Slow items: the first batch is still running when the second create
    // is refused.
    let server = MockServer::start(MockConfig {
        seconds_per_minute: 0.6,
        batch: BatchConfig {
            items_per_second: 0.2,
            validating_seconds: 0.0,
            cancel_finishes: 1,
            ..BatchConfig::default()
        },
        ..MockConfig::default()
    })
    .await
    .unwrap();
    let dir = temp("cancel");
    let store = open_store(&dir);
    store.import(jobs(shape, 6)).unwrap();
    let mut s = settings(shape, &server);
    s.limits = Limits {
        max_requests: 5,
        max_bytes: 1 << 20,
    };
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let server_ref = &server;
    let r = run_batches(
        store.clone(),
        ratewise_run::client().unwrap(),
        s,
        |_: &Pending| true,
        rx,
        move |_st| server_ref.set_spend_cap(Some(0.0)),
    )
    .await
    .unwrap();
    let BatchEnding::Stopped(stop) = &r.ending else {
        panic!("{shape:?}: {r:?}")
    };
    assert!(
        [Cause::SpendCap, Cause::Billing]
            .map(StopCause::Provider)
            .contains(&stop.cause),
        "{shape:?}: {stop:?}"
    );
    assert_eq!(r.created.len(), 1);
    assert!(r.possibly_billed > 0, "{r:?}");
    let b = server.batches();
    assert_eq!(b.len(), 1);
    let c = &r.counts;
    assert_eq!(c.done + c.stopped + c.held, 6, "{c:?}");
    assert!(
        c.stopped >= 2,
        "the canceled items and the one never batched: {c:?}"
    );
    let lines = output(store.as_ref(), shape, &dir);
    assert_eq!(lines.len(), 6);
    server.shutdown().await;
}

#[tokio::test]
async fn auto_batches_only_the_jobs_whose_deadline_leaves_room() {
    let server = MockServer::start(fast()).await.unwrap();
    let dir = temp("auto");
    let store = open_store(&dir);
    let hour = 3_600_000i64;
    // A 48 h deadline: jobs first seen now have 48 h (batch); jobs first
    // seen 30 h ago have 18 h (direct).
    let js: Vec<NewJob> = (0..6)
        .map(|i| {
            let seen = if i % 2 == 0 {
                now_ms()
            } else {
                now_ms() - 30 * hour
            };
            job(Shape::OpenAi, i, body(Shape::OpenAi, i), seen)
        })
        .collect();
    store.import(js).unwrap();
    let deadline = Duration::from_secs(48 * 3600);
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let r = run_batches(
        store.clone(),
        ratewise_run::client().unwrap(),
        settings(Shape::OpenAi, &server),
        move |p: &Pending| {
            route(
                Via::Auto,
                p.first_seen_ms,
                deadline,
                now_ms(),
                ratewise_run::batch::via::BATCH_WINDOW,
                ratewise_run::batch::via::DEFAULT_MARGIN,
            ) == Route::Batch
        },
        rx,
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(r.created.len(), 1);
    assert_eq!(total(&server.batches()[0].counts), 3);
    assert_eq!(r.counts.done, 3);
    assert_eq!(r.counts.pending, 3, "left for the direct path");
    let lines = output(store.as_ref(), Shape::OpenAi, &dir);
    // Every custom_id has its line; the direct ones are unfinished here.
    let mut done: Vec<&String> = lines
        .iter()
        .filter(|(_, v)| v["ratewise"]["outcome"] == "done")
        .map(|(k, _)| k)
        .collect();
    done.sort();
    assert_eq!(done, ["c0", "c2", "c4"]);
    assert_eq!(lines.len(), 6);
    let _ = State::Batched;
    server.shutdown().await;
}

#[tokio::test]
async fn a_budget_creates_only_the_batch_that_fits_then_stops() {
    // Items slow enough that a cancel would catch them.
    let server = MockServer::start(MockConfig {
        seconds_per_minute: 0.6,
        batch: BatchConfig {
            items_per_second: 1.0,
            validating_seconds: 0.0,
            ..BatchConfig::default()
        },
        ..MockConfig::default()
    })
    .await
    .unwrap();
    let dir = temp("budget");
    let store = open_store(&dir);
    store.import(jobs(Shape::Anthropic, 6)).unwrap();
    let worst: Vec<u64> = store
        .next_pending(i64::MIN, i64::MAX, 100, 1 << 20)
        .unwrap()
        .iter()
        .map(Pending::worst_case)
        .collect();
    let mut s = settings(Shape::Anthropic, &server);
    // Room for the first three jobs' worst case, not the fourth.
    s.budget_tokens = Some(worst[..3].iter().sum::<u64>() + worst[3] / 2);
    let (r, _) = run(store.clone(), s).await;
    let r = r.unwrap();
    let BatchEnding::Stopped(stop) = &r.ending else {
        panic!("{r:?}")
    };
    assert_eq!(stop.cause, StopCause::Budget);
    assert_eq!(r.created.len(), 1);
    assert_eq!(total(&server.batches()[0].counts), 3);
    assert_eq!((r.counts.done, r.counts.stopped), (3, 3), "{:?}", r.counts);
    assert_eq!(r.possibly_billed, 0, "the budget cancels nothing");
    assert_eq!(server.batches()[0].counts.canceled, 0);
    server.shutdown().await;
}

#[tokio::test]
async fn a_signal_leaves_the_batch_running_and_a_rerun_resumes_it() {
    let server = MockServer::start(MockConfig {
        seconds_per_minute: 0.6,
        batch: BatchConfig {
            items_per_second: 0.5,
            validating_seconds: 0.0,
            ..BatchConfig::default()
        },
        ..MockConfig::default()
    })
    .await
    .unwrap();
    let dir = temp("signal");
    let store = open_store(&dir);
    store.import(jobs(Shape::OpenAi, 4)).unwrap();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let r = run_batches(
        store.clone(),
        ratewise_run::client().unwrap(),
        settings(Shape::OpenAi, &server),
        |_: &Pending| true,
        rx,
        move |_| {
            let _ = tx.send(true);
        },
    )
    .await
    .unwrap();
    assert_eq!(r.ending, BatchEnding::Interrupted);
    assert_eq!(r.created.len(), 1);
    assert_eq!(
        r.counts.sending, 4,
        "still inside the batch: {:?}",
        r.counts
    );
    let b = server.batches();
    assert_eq!(b.len(), 1);
    assert!(
        !format!("{:?}", b[0].phase).contains("Cancel"),
        "{:?}",
        b[0].phase
    );
    let (again, seen) = run(store.clone(), settings(Shape::OpenAi, &server)).await;
    let again = again.unwrap();
    assert!(again.created.is_empty());
    assert_eq!(again.ending, BatchEnding::Finished);
    assert_eq!(again.counts.done, 4);
    assert_eq!(server.batches().len(), 1);
    assert!(seen.iter().all(|s| s.batch_id == r.created[0]));
    assert_eq!(output(store.as_ref(), Shape::OpenAi, &dir).len(), 4);
    server.shutdown().await;
}

/// The run can be spawned on a multi-thread runtime.
#[test]
fn the_batch_path_is_a_send_future() {
    fn assert_send<T: Send>(_: &T) {}
    let dir = temp("send");
    let store: Arc<dyn Store> = open_store(&dir);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let fut = run_batches(
        store,
        ratewise_run::client().unwrap(),
        BatchSettings::new(Shape::OpenAi, "k"),
        |_: &Pending| true,
        rx,
        |_| {},
    );
    assert_send(&fut);
    assert!(format!("{:?}", BatchSettings::new(Shape::OpenAi, "sk-secret")).contains("<redacted>"));
    assert!(!format!("{:?}", BatchSettings::new(Shape::OpenAi, "sk-secret")).contains("sk-secret"));
}

/// A loopback proxy to `target` that forwards everything, but never
/// answers the first `POST hang_path` (after the mock has answered it):
/// the create call's answer is lost on the way back.
async fn losing_proxy(target: String, hang_path: &'static str) -> String {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Incoming;
    use hyper_util::rt::TokioIo;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let lost = Arc::new(AtomicBool::new(false));
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<bytes::Bytes>>();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (target, lost, client) = (target.clone(), lost.clone(), client.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                    let (target, lost, client) = (target.clone(), lost.clone(), client.clone());
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await?.to_bytes();
                        let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
                        let mut b = http::Request::builder()
                            .method(parts.method.clone())
                            .uri(format!("{target}{pq}"));
                        for (k, v) in &parts.headers {
                            if k != http::header::HOST {
                                b = b.header(k, v);
                            }
                        }
                        let resp = client
                            .request(b.body(Full::new(body)).unwrap())
                            .await
                            .unwrap();
                        let status = resp.status();
                        let headers = resp.headers().clone();
                        let body = resp.into_body().collect().await?.to_bytes();
                        if parts.method == http::Method::POST
                            && parts.uri.path() == hang_path
                            && !lost.swap(true, Ordering::SeqCst)
                        {
                            std::future::pending::<()>().await;
                        }
                        let mut out = http::Response::new(Full::new(body));
                        *out.status_mut() = status;
                        *out.headers_mut() = headers;
                        Ok::<_, hyper::Error>(out)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn a_create_call_whose_answer_is_lost_is_found_again_in_the_same_run() {
    for (shape, path) in [
        (Shape::OpenAi, "/v1/batches"),
        (Shape::Anthropic, "/v1/messages/batches"),
    ] {
        let server = MockServer::start(fast()).await.unwrap();
        let dir = temp("lost");
        let store = open_store(&dir);
        store.import(jobs(shape, 3)).unwrap();
        let mut s = settings(shape, &server);
        s.upstream = losing_proxy(server.base_url(), path).await;
        s.request_timeout = Duration::from_millis(500);
        let (r, _) = run(store.clone(), s).await;
        let r = r.unwrap();
        let mock: Vec<String> = server.batches().iter().map(|b| b.id.clone()).collect();
        assert_eq!(mock.len(), 1, "{shape:?}: one batch");
        assert_eq!(r.recovered, mock, "{shape:?}: {r:?}");
        assert!(r.created.is_empty());
        assert_eq!(r.counts.done, 3, "{shape:?}: {:?}", r.counts);
        assert_eq!(output(store.as_ref(), shape, &dir).len(), 3);
        server.shutdown().await;
    }
}

#[test]
fn the_store_keeps_an_intent_whole_or_not_at_all() {
    let dir = temp("intent");
    let store = open_store(&dir);
    store.import(jobs(Shape::Anthropic, 3)).unwrap();
    let seqs: Vec<i64> = store
        .next_pending(i64::MIN, i64::MAX, 10, 1 << 20)
        .unwrap()
        .iter()
        .map(|p| p.seq)
        .collect();
    let intent = |nonce: &str, seqs: Vec<i64>| BatchIntent {
        nonce: nonce.into(),
        shape: "anthropic".into(),
        model: None,
        endpoint: "/v1/messages".into(),
        intent_ms: now_ms(),
        seqs,
        bytes: 10,
    };
    store
        .batch_intent(&intent("a", seqs[..2].to_vec()))
        .unwrap();
    // Job 2 is batched already: the whole intent is refused, job 3 stays
    // pending.
    assert!(store
        .batch_intent(&intent("b", seqs[1..].to_vec()))
        .is_err());
    let rows = store.batches().unwrap();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].is_open());
    assert_eq!(
        store
            .next_pending(i64::MIN, i64::MAX, 10, 1 << 20)
            .unwrap()
            .len(),
        1
    );
    let jobs = store.batch_jobs("a").unwrap();
    assert!(jobs.iter().all(|j| j.state == State::Batched));
    // No batch was created: its jobs are pending again, the row closed.
    assert_eq!(store.batch_not_created("a").unwrap(), 2);
    assert_eq!(store.batches().unwrap()[0].state, "not_created");
    assert_eq!(store.counts().unwrap().pending, 3);
    // Batched jobs are not cut by `hold_cut` (they are not on the wire of
    // the direct path).
    store.batch_intent(&intent("c", seqs.clone())).unwrap();
    assert_eq!(store.hold_cut().unwrap(), 0);
    assert_eq!(
        store
            .batch_hold("c", "outcome_unknown", "two candidates")
            .unwrap(),
        3
    );
    let c = store.counts().unwrap();
    assert_eq!(c.held, 3);
    assert!(c.spent > 0, "held jobs are charged their worst case");
}

#[tokio::test]
async fn creating_first_then_polling_beside_the_direct_queue() {
    let server = MockServer::start(fast()).await.unwrap();
    let dir = temp("phases");
    let store = open_store(&dir);
    store.import(jobs(Shape::Anthropic, 4)).unwrap();
    let mut create = settings(Shape::Anthropic, &server);
    create.poll_to_end = false;
    let (r, _) = run(store.clone(), create).await;
    let r = r.unwrap();
    assert_eq!(r.ending, BatchEnding::Submitted);
    assert_eq!(r.created.len(), 1);
    assert_eq!(
        (r.counts.pending, r.counts.sending),
        (0, 4),
        "none left for the direct queue"
    );
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let polled = run_batches(
        store.clone(),
        ratewise_run::client().unwrap(),
        settings(Shape::Anthropic, &server),
        |_: &Pending| false,
        rx,
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(polled.ending, BatchEnding::Finished);
    assert!(polled.created.is_empty());
    assert_eq!(polled.counts.done, 4);
    assert_eq!(server.batches().len(), 1);
    server.shutdown().await;
}
