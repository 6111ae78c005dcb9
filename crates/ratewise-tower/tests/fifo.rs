//! Fair admission within a process: per scope, jobs are admitted in
//! arrival order (a retry keeps its place), a settle wakes about one
//! waiter rather than all of them, and a waiter dropped while queued does
//! not block the queue.

mod common;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use ratewise_core::admit::{
    Admission, AdmitRequest, Applied, ScopeId, ScopeSnapshot, Shared, Store, StoreFuture, Target,
    Update,
};
use ratewise_core::{Now, Provider};
use ratewise_tower::{Config, JobId, RetryLayer, RetryService, TokioClock, JOB_HEADER};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{service_fn, Layer, ServiceExt};

const OK: &str = r#"{"type":"message","content":[],"usage":{"input_tokens":3,"output_tokens":4}}"#;
const OVERLOADED: &str =
    r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;

/// An in-memory state paced to `per_minute` requests (one send every
/// 60 s / `per_minute`), counting admission asks and give-backs.
struct Counting {
    inner: Arc<Shared>,
    asks: AtomicU64,
    settles: AtomicU64,
}

impl Counting {
    fn paced(per_minute: u64) -> Arc<Counting> {
        let inner = common::paced_state(per_minute);
        Arc::new(Counting {
            inner,
            asks: AtomicU64::new(0),
            settles: AtomicU64::new(0),
        })
    }
}

impl Store for Counting {
    fn target<'a>(&'a self, key: &'a str, model: &'a str) -> StoreFuture<'a, Target> {
        Store::target(&*self.inner, key, model)
    }
    fn resume<'a>(&'a self, key: &'a str, now: Now) -> StoreFuture<'a, ()> {
        Store::resume(&*self.inner, key, now)
    }
    fn snapshot(&self, scope: ScopeId, now: Now) -> StoreFuture<'_, Option<ScopeSnapshot>> {
        Store::snapshot(&*self.inner, scope, now)
    }
    fn admit(&self, req: AdmitRequest, now: Now) -> StoreFuture<'_, Admission> {
        self.asks.fetch_add(1, Ordering::SeqCst);
        Store::admit(&*self.inner, req, now)
    }
    fn update(&self, update: Update, now: Now) -> StoreFuture<'_, Option<Applied>> {
        if update.end.is_some() {
            self.settles.fetch_add(1, Ordering::SeqCst);
        }
        Store::update(&*self.inner, update, now)
    }
    fn update_detached(&self, update: Update, now: Now) {
        if update.end.is_some() {
            self.settles.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.update_detached(update, now)
    }
}

/// Every send the provider saw: the job id and when.
type Seen = Arc<Mutex<Vec<(String, Instant)>>>;

/// A provider that answers each send after 10 ms: 529 to the first send
/// of the jobs in `overload_first`, 200 otherwise.
fn provider(
    seen: Seen,
    overload_first: &'static [&'static str],
) -> impl tower::Service<
    Request<Full<Bytes>>,
    Response = Response<Full<Bytes>>,
    Error = std::io::Error,
    Future = impl Send,
> + Clone
       + Send
       + 'static {
    service_fn(move |req: Request<Full<Bytes>>| {
        let seen = seen.clone();
        async move {
            let job = req.headers()[JOB_HEADER].to_str().unwrap().to_owned();
            let first = {
                let mut s = seen.lock().unwrap();
                let first = !s.iter().any(|(j, _)| *j == job);
                s.push((job.clone(), Instant::now()));
                first
            };
            tokio::time::sleep(Duration::from_millis(10)).await;
            let (status, body) = if first && overload_first.contains(&job.as_str()) {
                (529, OVERLOADED)
            } else {
                (200, OK)
            };
            Ok::<_, std::io::Error>(
                Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(body.as_bytes())))
                    .unwrap(),
            )
        }
    })
}

fn layer(state: Arc<Counting>) -> RetryLayer {
    RetryLayer::builder()
        .config({
            let mut config = Config::default();
            config.policy = common::fast_policy();
            config.provider = Some(Provider::Anthropic);
            config.seed = Some(7);
            config
        })
        .store(state)
        .clock(Arc::new(TokioClock::new()))
        .build()
        .unwrap()
}

fn request(job: &str) -> Request<Full<Bytes>> {
    let mut req = Request::post("http://provider.invalid/v1/messages")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"claude-sonnet-4-5","max_tokens":100}"#,
        )))
        .unwrap();
    req.extensions_mut().insert(JobId::new(job));
    req
}

/// Starts one call per name, 1 ms apart (so their arrival order is known),
/// each on its own task.
async fn arrive<S>(svc: &RetryService<S>, jobs: &[String]) -> Vec<tokio::task::JoinHandle<()>>
where
    RetryService<S>: tower::Service<Request<Full<Bytes>>> + Clone + Send + 'static,
    <RetryService<S> as tower::Service<Request<Full<Bytes>>>>::Future: Send,
    <RetryService<S> as tower::Service<Request<Full<Bytes>>>>::Response: Send,
    <RetryService<S> as tower::Service<Request<Full<Bytes>>>>::Error: std::fmt::Debug,
{
    let mut handles = Vec::new();
    for job in jobs {
        let call = svc.clone().oneshot(request(job));
        handles.push(tokio::spawn(async move {
            call.await.expect("the call succeeds");
        }));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    handles
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:02}")).collect()
}

#[tokio::test(start_paused = true)]
async fn sends_reach_the_provider_in_arrival_order() {
    let seen: Seen = Arc::default();
    let state = Counting::paced(600); // one send per 100 ms
    let svc = layer(state.clone()).layer(provider(seen.clone(), &[]));
    let jobs = names("a", 20);
    for h in arrive(&svc, &jobs).await {
        h.await.unwrap();
    }
    let order: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(j, _)| j.clone())
        .collect();
    assert_eq!(order, jobs, "sends in arrival order");
}

#[tokio::test(start_paused = true)]
async fn a_retry_keeps_its_place_ahead_of_later_arrivals() {
    let seen: Seen = Arc::default();
    let state = Counting::paced(120); // one send per 500 ms
    let svc = layer(state.clone()).layer(provider(seen.clone(), &["b-00"]));
    let start = Instant::now();
    let jobs = names("b", 6);
    for h in arrive(&svc, &jobs).await {
        h.await.unwrap();
    }
    let seen = seen.lock().unwrap();
    let order: Vec<&str> = seen.iter().map(|(j, _)| j.as_str()).collect();
    // b-00 answered 529 (at 10 ms) is retried before the jobs that were
    // waiting for admission then (the bucket's initial credit let b-01
    // through at once), and they go in their arrival order.
    let answered = start + Duration::from_millis(10);
    let retry = seen.iter().rposition(|(j, _)| j == "b-00").unwrap();
    let waiting = seen
        .iter()
        .position(|(j, t)| j != "b-00" && *t > answered)
        .unwrap();
    assert_eq!(order[0], "b-00");
    assert!(
        retry < waiting,
        "the retry went after a later arrival that was waiting: {order:?}"
    );
    let rest: Vec<&str> = order.iter().copied().filter(|j| *j != "b-00").collect();
    assert_eq!(rest, ["b-01", "b-02", "b-03", "b-04", "b-05"]);
}

#[tokio::test(start_paused = true)]
async fn a_settle_wakes_about_one_waiter() {
    let seen: Seen = Arc::default();
    let state = Counting::paced(600); // one send per 100 ms
    let svc = layer(state.clone()).layer(provider(seen.clone(), &[]));
    let jobs = names("c", 100);
    for h in arrive(&svc, &jobs).await {
        h.await.unwrap();
    }
    let asks = state.asks.load(Ordering::SeqCst);
    let settles = state.settles.load(Ordering::SeqCst);
    assert_eq!(settles, 100, "one settle per job");
    let per_settle = asks as f64 / settles as f64;
    println!("admission asks: {asks} for {settles} settles ({per_settle:.2} per settle)");
    assert!(
        per_settle <= 3.0,
        "{per_settle:.2} admission asks per settle with 100 waiters"
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiter_dropped_while_queued_does_not_block_the_queue() {
    let seen: Seen = Arc::default();
    let state = Counting::paced(120); // one send per 500 ms
    let svc = layer(state.clone()).layer(provider(seen.clone(), &[]));
    let start = Instant::now();
    let jobs = names("d", 6);
    let mut handles = arrive(&svc, &jobs).await;
    // d-00 was sent; d-01 heads the queue, d-03 waits behind it. Both
    // callers give up (their call futures are dropped).
    tokio::time::sleep(Duration::from_millis(50)).await;
    handles.remove(3).abort();
    handles.remove(1).abort();
    for h in handles {
        h.await.unwrap();
    }
    let seen = seen.lock().unwrap();
    let order: Vec<&str> = seen.iter().map(|(j, _)| j.as_str()).collect();
    assert_eq!(order, ["d-00", "d-02", "d-04", "d-05"]);
    let last = seen.last().unwrap().1 - start;
    assert!(
        last < Duration::from_secs(3),
        "the queue waited {last:?} for its dropped waiters"
    );
}
