//! Priorities across processes (issue #49): a process publishes the
//! highest level it has waiting on a scope, and a head of a lower level
//! leaves the tokens to a higher level waiting in another process — beyond
//! its own minimum share, which it keeps whoever waits. The other
//! process is a store that says what it published (`Foreign`); paused
//! tokio time.

mod common;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use ratewise_core::admit::{
    Admission, AdmitRequest, Applied, ScopeId, ScopeSnapshot, Shared, Store, StoreFuture, Target,
    Update,
};
use ratewise_core::Now;
use ratewise_tower::{Deadline, JobId, RetryLayer, TokioClock, Workload, JOB_HEADER};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::{service_fn, Layer, ServiceExt};

const OK: &str = r#"{"type":"message","content":[],"usage":{"input_tokens":3,"output_tokens":4}}"#;

/// The in-memory store, and another process on the same key: what it
/// published as waiting (`foreign`), and what this one published.
struct Foreign {
    inner: Arc<Shared>,
    foreign: Mutex<Option<u8>>,
    published: Mutex<Vec<Option<u8>>>,
}

impl Store for Foreign {
    fn target<'a>(&'a self, key: &'a str, model: &'a str) -> StoreFuture<'a, Target> {
        Store::target(&*self.inner, key, model)
    }
    fn admit(&self, req: AdmitRequest, now: Now) -> StoreFuture<'_, Admission> {
        Store::admit(&*self.inner, req, now)
    }
    fn update(&self, update: Update, now: Now) -> StoreFuture<'_, Option<Applied>> {
        Store::update(&*self.inner, update, now)
    }
    fn update_detached(&self, update: Update, now: Now) {
        Store::update_detached(&*self.inner, update, now)
    }
    fn resume<'a>(&'a self, key: &'a str, now: Now) -> StoreFuture<'a, ()> {
        Store::resume(&*self.inner, key, now)
    }
    fn snapshot(&self, scope: ScopeId, now: Now) -> StoreFuture<'_, Option<ScopeSnapshot>> {
        Store::snapshot(&*self.inner, scope, now)
    }
    fn demand(&self, _: ScopeId, waiting: Option<u8>, _: Now) -> StoreFuture<'_, Option<u8>> {
        self.published.lock().unwrap().push(waiting);
        StoreFuture::ready(*self.foreign.lock().unwrap())
    }
}

fn request(job: &str) -> Request<Full<Bytes>> {
    let mut req = Request::post("http://provider.invalid/v1/messages")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"claude-sonnet-4-5","max_tokens":100}"#,
        )))
        .unwrap();
    req.extensions_mut().insert(JobId::new(job));
    // Long enough that no job here gives up waiting (a deadline still
    // rules: a job that could not be sent in time would be answered).
    req.extensions_mut()
        .insert(Deadline(Duration::from_secs(600)));
    req.extensions_mut()
        .insert(Workload::level("bulk").flow("batch"));
    req
}

#[tokio::test(start_paused = true)]
async fn a_bulk_head_leaves_the_tokens_to_interactive_work_waiting_elsewhere_beyond_its_share() {
    // One send per 100 ms (600 a minute).
    let store = Arc::new(Foreign {
        inner: common::paced_state(600),
        foreign: Mutex::new(None),
        published: Mutex::new(Vec::new()),
    });
    let layer = RetryLayer::builder()
        .config(common::anthropic_config())
        .store(store.clone())
        .clock(Arc::new(TokioClock::new()))
        .build()
        .unwrap();
    let seen: Arc<Mutex<Vec<(String, tokio::time::Instant)>>> = Arc::default();
    let provider = {
        let seen = seen.clone();
        service_fn(move |req: Request<Full<Bytes>>| {
            let seen = seen.clone();
            async move {
                let job = req.headers()[JOB_HEADER].to_str().unwrap().to_owned();
                seen.lock()
                    .unwrap()
                    .push((job, tokio::time::Instant::now()));
                Ok::<_, std::io::Error>(
                    Response::builder()
                        .status(200)
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from_static(OK.as_bytes())))
                        .unwrap(),
                )
            }
        })
    };
    let svc = layer.layer(provider);
    let mut calls = Vec::new();
    for i in 0..400 {
        let call = svc.clone().oneshot(request(&format!("bulk-{i:03}")));
        calls.push(tokio::spawn(async move { call.await.expect("sent") }));
    }
    // Alone for 6 s: 60 sends, 0.1 of the limit a second — well past the
    // bulk level's minimum share of it (10 %).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let alone = seen.lock().unwrap().len();
    assert!((55..=75).contains(&alone), "{alone} sends in 6 s alone");
    println!("alone: {alone} sends in 6 s");
    assert!(
        store.published.lock().unwrap().contains(&Some(2)),
        "the bulk work waiting here was published (rank 2: bulk)"
    );
    // Another process has interactive work waiting (rank 0): for 30 s
    // the bulk head leaves it the tokens, but for its minimum share: a
    // tenth of the limit over the last minute, so once what it sent alone
    // has decayed (about 8 s), about one send a second of the ten it had.
    *store.foreign.lock().unwrap() = Some(0);
    tokio::time::sleep(Duration::from_secs(30)).await;
    let yielding = seen.lock().unwrap().len() - alone;
    println!("beside interactive work elsewhere: {yielding} sends in 30 s (300 alone)");
    assert!(
        yielding <= 40,
        "{yielding} bulk sends in 30 s beside interactive work elsewhere"
    );
    assert!(
        yielding >= 12,
        "its minimum share keeps the bulk work moving: {yielding} sends"
    );
    // The interactive work is done: the whole limit again.
    *store.foreign.lock().unwrap() = None;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = seen.lock().unwrap().len() - alone - yielding;
    assert!(after >= 55, "{after} sends in 6 s once nothing else waits");
    // Work waiting at the same level elsewhere is not yielded to.
    *store.foreign.lock().unwrap() = Some(2);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let same = seen.lock().unwrap().len() - alone - yielding - after;
    assert!(same >= 55, "{same} sends beside bulk work elsewhere");
    for c in calls {
        c.abort();
    }
}
