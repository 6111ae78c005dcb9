//! The store seam from outside the core: a store that really awaits — every
//! request is a message to a task standing in for a remote server (Redis),
//! answered after a round trip — built from the public API alone, under the
//! layer. Jobs succeed and retry through it; calls cancelled while the
//! store's admission is in flight, during the send and while the body is
//! read leave nothing outstanding and no reservation ended twice; updates from
//! a `Drop` are queued and applied in order.

use bytes::Bytes;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use ratewise_core::admit::{
    self, Admission, AdmitRequest, Applied, Controller, Ledger, RampConfig, ScopeId, ScopeSnapshot,
    Shared, Store, StoreFuture, Target, Update,
};
use ratewise_core::decide::{Backoff, Policy};
use ratewise_core::{Now, Provider};
use ratewise_tower::{Config, RetryLayer, TokioClock};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tower::{service_fn, Layer, ServiceExt};

/// The store's round trip.
const ROUND_TRIP: Duration = Duration::from_millis(3);

enum Msg {
    Target(String, String, oneshot::Sender<Target>),
    Admit(AdmitRequest, Now, oneshot::Sender<Admission>),
    Update(Box<Update>, Now, Option<oneshot::Sender<Option<Applied>>>),
    Resume(String, Now, oneshot::Sender<()>),
    Snapshot(ScopeId, Now, oneshot::Sender<Option<ScopeSnapshot>>),
}

/// A store whose state lives in another task, one message at a time, the
/// way a single-threaded server applies scripts.
struct Remote {
    tx: mpsc::UnboundedSender<Msg>,
    /// Requests the server answered.
    served: Arc<AtomicU64>,
    /// Admissions granted to a caller that had gone away.
    returned: Arc<AtomicU64>,
}

impl Remote {
    /// Starts the "server" over `state`.
    fn start(state: Arc<Shared>) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
        let served = Arc::new(AtomicU64::new(0));
        let count = served.clone();
        let returned = Arc::new(AtomicU64::new(0));
        let back = returned.clone();
        tokio::spawn(async move {
            while let Some(msg) = rx.recv().await {
                tokio::time::sleep(ROUND_TRIP).await;
                count.fetch_add(1, Ordering::SeqCst);
                match msg {
                    Msg::Target(k, m, r) => {
                        let _ = r.send(state.target(&k, &m));
                    }
                    Msg::Admit(req, now, r) => {
                        // The caller went away while the answer travelled:
                        // a granted reservation goes straight back.
                        if let Err(Admission::Go(res)) = r.send(state.admit(&req, now)) {
                            back.fetch_add(1, Ordering::SeqCst);
                            state.lock().release(res, now);
                        }
                    }
                    Msg::Update(u, now, r) => {
                        let d = state.apply(*u, now);
                        if let Some(r) = r {
                            let _ = r.send(d);
                        }
                    }
                    Msg::Resume(k, now, r) => {
                        state.resume(&k, now);
                        let _ = r.send(());
                    }
                    Msg::Snapshot(s, now, r) => {
                        let _ = r.send(state.snapshot(s, now));
                    }
                }
            }
        });
        Remote {
            tx,
            served,
            returned,
        }
    }

    /// Sends `msg` built around a reply channel and awaits the reply.
    fn ask<'a, T: Send + 'a>(
        &'a self,
        msg: impl FnOnce(oneshot::Sender<T>) -> Msg,
    ) -> StoreFuture<'a, T> {
        let (r, answer) = oneshot::channel();
        let sent = self.tx.send(msg(r)).is_ok();
        StoreFuture::new(async move {
            assert!(sent, "the store's server is gone");
            answer.await.expect("the store's server answers")
        })
    }
}

impl Store for Remote {
    fn target<'a>(&'a self, key: &'a str, model: &'a str) -> StoreFuture<'a, Target> {
        let (k, m) = (key.to_owned(), model.to_owned());
        self.ask(|r| Msg::Target(k, m, r))
    }
    fn admit(&self, req: AdmitRequest, now: Now) -> StoreFuture<'_, Admission> {
        self.ask(|r| Msg::Admit(req, now, r))
    }
    fn update(&self, update: Update, now: Now) -> StoreFuture<'_, Option<Applied>> {
        self.ask(|r| Msg::Update(Box::new(update), now, Some(r)))
    }
    fn update_detached(&self, update: Update, now: Now) {
        // Queued: applied in order by the server, after what was sent
        // before it.
        let _ = self.tx.send(Msg::Update(Box::new(update), now, None));
    }
    fn resume<'a>(&'a self, key: &'a str, now: Now) -> StoreFuture<'a, ()> {
        let k = key.to_owned();
        self.ask(|r| Msg::Resume(k, now, r))
    }
    fn snapshot(&self, scope: ScopeId, now: Now) -> StoreFuture<'_, Option<ScopeSnapshot>> {
        self.ask(|r| Msg::Snapshot(scope, now, r))
    }
}

type Body = UnsyncBoxBody<Bytes, std::io::Error>;

fn full(status: u16, headers: &[(&str, &str)], body: &'static str) -> Response<Body> {
    let mut b = Response::builder().status(status);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(
        Full::new(Bytes::from_static(body.as_bytes()))
            .map_err(|e: std::convert::Infallible| match e {})
            .boxed_unsync(),
    )
    .unwrap()
}

const OK: &str = r#"{"type":"message","content":[],"usage":{"input_tokens":30,"output_tokens":9}}"#;
const OVERLOADED: &str =
    r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
const RATE_LIMITED: &str = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;

fn request() -> Request<Full<Bytes>> {
    Request::post("http://provider.invalid/v1/messages")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"claude-sonnet-4-5","max_tokens":200,"messages":[{"role":"user","content":"hi"}]}"#,
        )))
        .unwrap()
}

fn layer(store: Arc<Remote>) -> RetryLayer {
    let mut config = Config::default();
    config.policy = {
        let mut policy = Policy::default();
        policy.max_attempts = 4;
        policy.backoff = {
            let mut backoff = Backoff::default();
            backoff.transient_base = Duration::from_millis(50);
            backoff.throttle_base = Duration::from_millis(100);
            backoff.cap = Duration::from_millis(500);
            backoff
        };
        policy
    };
    config.provider = Some(Provider::Anthropic);
    config.seed = Some(5);
    RetryLayer::builder()
        .config(config)
        .store(store)
        .clock(Arc::new(TokioClock::new()))
        .build()
        .unwrap()
}

fn shared() -> Arc<Shared> {
    Arc::new(Shared::new(Controller::new({
        let mut config = admit::Config::default();
        // Known limits: no cold-start probe to wait for.
        config.limits = admit::Limits {
            requests: Some(60_000),
            ..admit::Limits::NONE
        };
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        config.seed = Some(5);
        config
    })))
}

fn assert_clean(l: Ledger) {
    assert!(l.is_clean(), "{l:?}");
}

#[tokio::test(start_paused = true)]
async fn the_stores_answers_really_await() {
    let remote = Remote::start(shared());
    let target = remote.target("k", "claude-sonnet-4-5");
    let target = match target.into_ready() {
        Ok(_) => panic!("a remote store cannot answer without a round trip"),
        Err(pending) => pending.await,
    };
    let now = Now::new(
        ratewise_core::Instant::ZERO,
        std::time::SystemTime::UNIX_EPOCH,
    );
    let Admission::Go(res) = remote.admit(AdmitRequest::new(target), now).await else {
        panic!("a cold scope admits its probe")
    };
    remote.update_detached(
        Update::ending(admit::End::Release { reservation: res }),
        now,
    );
    let snap = remote
        .snapshot(target.scope, now)
        .await
        .expect("the scope exists");
    assert_eq!(snap.key, "k");
    assert_eq!(
        remote.served.load(Ordering::SeqCst),
        4,
        "every request went over"
    );
}

#[tokio::test(start_paused = true)]
async fn jobs_retry_and_settle_through_a_store_that_awaits() {
    let state = shared();
    let remote = Arc::new(Remote::start(state.clone()));
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let provider = service_fn(move |_req: Request<Full<Bytes>>| {
        let n = c.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_millis(80)).await;
            // A few failures among the first sends (within the retry
            // budget), successes after.
            Ok::<_, std::io::Error>(match n {
                1 | 5 => full(529, &[], OVERLOADED),
                3 | 8 => full(
                    429,
                    &[("retry-after", "1"), ("content-type", "application/json")],
                    RATE_LIMITED,
                ),
                _ => full(200, &[("content-type", "application/json")], OK),
            })
        }
    });
    let svc = layer(remote.clone()).layer(provider);
    let mut tasks = Vec::new();
    for _ in 0..24 {
        let svc = svc.clone();
        tasks.push(tokio::spawn(async move {
            let resp = svc.oneshot(request()).await.expect("every job succeeds");
            resp.into_body().collect().await.expect("body reads");
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // The bodies' settles were queued from their ends; let them land.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let l = state.ledger();
    assert_clean(l);
    let sends = u64::from(calls.load(Ordering::SeqCst));
    assert_eq!(sends, 28, "24 jobs, four of them retried once");
    assert_eq!(l.reserved.requests, sends, "one reservation per send");
    // Anthropic's error answers give their whole reservation back; every
    // success settles from its body's usage.
    assert_eq!(l.released.requests, 4, "{l:?}");
    assert_eq!(l.settled.requests, 24, "{l:?}");
    assert_eq!(l.charged.output, 24 * 9, "{l:?}");
    assert!(remote.served.load(Ordering::SeqCst) >= 2 * sends);
}

fn endless_json() -> Response<Body> {
    let frames = futures::stream::iter(vec![Ok::<_, std::io::Error>(Frame::data(
        Bytes::from_static(br#"{"type":"message","content":["#),
    ))])
    .chain(futures::stream::pending());
    let mut resp = Response::new(StreamBody::new(frames).boxed_unsync());
    resp.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    resp
}

use futures::StreamExt;

#[tokio::test(start_paused = true)]
async fn calls_cancelled_at_every_await_leave_nothing_outstanding_in_a_store_that_awaits() {
    let state = shared();
    let remote = Arc::new(Remote::start(state.clone()));
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    // Even calls hang in the send; odd ones answer a body that never ends.
    let provider = service_fn(move |_req: Request<Full<Bytes>>| {
        let n = c.fetch_add(1, Ordering::SeqCst);
        async move {
            if n.is_multiple_of(2) {
                futures::future::pending::<()>().await;
            }
            Ok::<_, std::io::Error>(endless_json())
        }
    });
    let svc = layer(remote.clone()).layer(provider);
    // Each call's target, then its admission, queue at the one server.
    let (timeout_admit, timeout_send, timeout_body) = (
        ROUND_TRIP * 5 + ROUND_TRIP / 2,
        Duration::from_millis(200),
        Duration::from_millis(200),
    );
    let mut tasks = Vec::new();
    for i in 0..12u32 {
        let svc = svc.clone();
        tasks.push(tokio::spawn(async move {
            match i % 3 {
                // Dropped while the store's admission is in flight.
                0 => {
                    let _ = tokio::time::timeout(timeout_admit, svc.oneshot(request())).await;
                }
                // Dropped during the send, or once the body started.
                1 => {
                    let _ = tokio::time::timeout(timeout_send, svc.oneshot(request())).await;
                }
                _ => {
                    let read = async {
                        let resp = svc.oneshot(request()).await?;
                        let _ = resp.into_body().collect().await;
                        Ok::<_, ratewise_tower::Error>(())
                    };
                    let _ = tokio::time::timeout(timeout_body, read).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let l = state.ledger();
    assert_clean(l);
    let sent = u64::from(calls.load(Ordering::SeqCst));
    assert!(sent > 0, "some calls reached the provider");
    assert!(
        remote.returned.load(Ordering::SeqCst) > 0,
        "some calls went away while their admission travelled"
    );
    // Hung sends and bodies cut short may have run: each is charged at
    // its estimate (max_tokens 200), nothing less.
    assert_eq!(l.settled.requests, sent, "{l:?}");
    assert_eq!(l.charged.output, sent * 200, "{l:?}");
}
