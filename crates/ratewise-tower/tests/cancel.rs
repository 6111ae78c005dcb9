//! A call future dropped at any await (a caller's timeout, a disconnect in
//! front of a proxy) ends its reservation: nothing stays outstanding, none
//! is ended twice, and a send that may have reached the provider is
//! charged at its estimate rather than given back.

mod common;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use ratewise_core::admit::{Ledger, Shared};
use ratewise_core::Provider;
use ratewise_tower::{Config, RetryLayer, TokioClock};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};

type Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// What the provider does with each send, in order.
#[derive(Clone, Copy)]
enum Step {
    /// 529 overloaded (retried after a short backoff).
    Overloaded,
    /// The service is never ready again (the retry's send never starts).
    NeverReady,
    /// The send never comes back.
    Hang,
    /// A 500 whose error body starts and never ends.
    EndlessErrorBody,
    /// A 200 JSON body that starts and never ends.
    EndlessJson,
    /// A 200 event stream that sends a ping and never commits.
    EndlessStreamBeforeContent,
}

#[derive(Clone)]
struct Provider1 {
    steps: Arc<Vec<Step>>,
    calls: Arc<AtomicU32>,
}

fn endless(first: &'static [u8]) -> Body {
    let frames = futures::stream::iter(vec![Ok::<_, std::io::Error>(Frame::data(
        Bytes::from_static(first),
    ))])
    .chain(futures::stream::pending());
    StreamBody::new(frames).boxed_unsync()
}

fn full(bytes: &'static [u8]) -> Body {
    Full::new(Bytes::from_static(bytes))
        .map_err(|e: Infallible| match e {})
        .boxed_unsync()
}

use futures::StreamExt;

impl Provider1 {
    fn step(&self) -> Option<Step> {
        let n = self.calls.load(Ordering::SeqCst) as usize;
        self.steps.get(n).copied()
    }
}

impl Service<Request<Full<Bytes>>> for Provider1 {
    type Response = Response<Body>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, std::io::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        match self.step() {
            Some(Step::NeverReady) => Poll::Pending,
            _ => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, _req: Request<Full<Bytes>>) -> Self::Future {
        let step = self.step();
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let resp = |status: u16, ct: &str, body: Body| {
                Response::builder()
                    .status(status)
                    .header("content-type", ct)
                    .body(body)
                    .unwrap()
            };
            match step {
                Some(Step::Overloaded) => Ok(resp(
                    529,
                    "application/json",
                    full(br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
                )),
                Some(Step::EndlessErrorBody) => Ok(resp(
                    500,
                    "application/json",
                    endless(br#"{"type":"error","error":{"type":"api_"#),
                )),
                Some(Step::EndlessJson) => Ok(resp(
                    200,
                    "application/json",
                    endless(br#"{"type":"message","content":[{"type":"text","text":"hel"#),
                )),
                Some(Step::EndlessStreamBeforeContent) => Ok(resp(
                    200,
                    "text/event-stream",
                    endless(b"event: ping\ndata: {\"type\":\"ping\"}\n\n"),
                )),
                Some(Step::Hang) | Some(Step::NeverReady) | None => {
                    futures::future::pending::<()>().await;
                    unreachable!()
                }
            }
        })
    }
}

type Layered = ratewise_tower::RetryService<Provider1>;

fn setup(steps: Vec<Step>, commit: ratewise_streaming::CommitPoint) -> (Arc<Shared>, Layered) {
    let state = common::state();
    let layer = RetryLayer::builder()
        .config({
            let mut config = Config::default();
            config.policy = common::fast_policy();
            config.provider = Some(Provider::Anthropic);
            config.commit_point = commit;
            config.seed = Some(3);
            config
        })
        .store(state.clone())
        .clock(Arc::new(TokioClock::new()))
        .build()
        .unwrap();
    let svc = layer.layer(Provider1 {
        steps: Arc::new(steps),
        calls: Arc::new(AtomicU32::new(0)),
    });
    (state, svc)
}

fn req() -> Request<Full<Bytes>> {
    Request::post("http://provider.invalid/v1/messages")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}"#,
        )))
        .unwrap()
}

fn assert_nothing_outstanding(l: &Ledger) {
    assert!(l.is_clean(), "{l:?}");
}

/// Calls once and drops the call after `after` (a client timeout).
async fn call_and_time_out<S>(svc: S, after: Duration)
where
    S: Service<Request<Full<Bytes>>> + Clone,
    S::Error: std::fmt::Debug,
{
    let r = tokio::time::timeout(after, svc.oneshot(req())).await;
    assert!(r.is_err(), "the call was meant to be cut by the timeout");
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_before_its_retry_is_sent_releases_it() {
    let (state, svc) = setup(
        vec![Step::Overloaded, Step::NeverReady],
        ratewise_streaming::CommitPoint::FirstByte,
    );
    call_and_time_out(svc, Duration::from_secs(5)).await;
    let l = state.ledger();
    assert_nothing_outstanding(&l);
    // Both reservations went back: the 529's (an error answer) and the
    // retry's (never sent).
    assert_eq!((l.reserved.requests, l.released.requests), (2, 2), "{l:?}");
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_during_its_send_is_charged_at_its_estimate() {
    let (state, svc) = setup(vec![Step::Hang], ratewise_streaming::CommitPoint::FirstByte);
    call_and_time_out(svc, Duration::from_secs(5)).await;
    let l = state.ledger();
    assert_nothing_outstanding(&l);
    // The provider may have run it: charged (settled) at the estimate,
    // not given back.
    assert_eq!((l.settled.requests, l.released.requests), (1, 0), "{l:?}");
    assert_eq!(l.charged.output, 100, "max_tokens charged: {l:?}");
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_while_an_error_body_is_read_is_charged() {
    let (state, svc) = setup(
        vec![Step::EndlessErrorBody],
        ratewise_streaming::CommitPoint::FirstByte,
    );
    call_and_time_out(svc, Duration::from_secs(5)).await;
    let l = state.ledger();
    assert_nothing_outstanding(&l);
    assert_eq!(l.settled.requests, 1, "{l:?}");
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_while_a_stream_is_held_to_its_commit_point_is_charged() {
    let (state, svc) = setup(
        vec![Step::EndlessStreamBeforeContent],
        ratewise_streaming::CommitPoint::FirstContent,
    );
    call_and_time_out(svc, Duration::from_secs(5)).await;
    let l = state.ledger();
    assert_nothing_outstanding(&l);
    assert_eq!(l.settled.requests, 1, "{l:?}");
}

#[tokio::test(start_paused = true)]
async fn a_body_dropped_while_it_is_read_settles_it() {
    let (state, svc) = setup(
        vec![Step::EndlessJson],
        ratewise_streaming::CommitPoint::FirstByte,
    );
    let resp = svc.oneshot(req()).await.expect("a 200 head");
    let mut body = resp.into_body();
    let first = body.frame().await.expect("a frame").expect("data");
    assert!(first.is_data());
    let more = tokio::time::timeout(Duration::from_secs(5), body.frame()).await;
    assert!(more.is_err(), "the body never ends");
    drop(body);
    let l = state.ledger();
    assert_nothing_outstanding(&l);
    assert_eq!(l.settled.requests, 1, "{l:?}");
}

#[tokio::test(start_paused = true)]
async fn five_calls_cut_by_a_client_timeout_leave_nothing_outstanding() {
    // The user's report: five calls dropped by a client timeout above the
    // layer left three reservations outstanding for good.
    let (state, svc) = setup(
        vec![Step::Hang; 5],
        ratewise_streaming::CommitPoint::FirstByte,
    );
    let calls = (0..5).map(|_| call_and_time_out(svc.clone(), Duration::from_secs(2)));
    futures::future::join_all(calls).await;
    let l = state.ledger();
    assert_nothing_outstanding(&l);
    assert_eq!(
        l.reserved.requests,
        l.settled.requests + l.released.requests
    );
}

/// Jobs waiting for their turn in the admission queue, behind a head that
/// stays, whose callers go (a [`Cancel`] given, as a proxy gives it on a
/// drain): each ends at once, `give_up` `cancelled`, with nothing sent;
/// the head and the one in flight are untouched. (A cancelled wait
/// resolves at once; a driver that waited for its turn again would spin
/// inside one poll until the head moved: the scenario runs on its own
/// thread so that a spin fails the test rather than hang it.)
#[test]
fn callers_gone_while_queued_end_their_jobs_at_once() {
    use ratewise_core::GiveUpReason;
    use ratewise_tower::Cancel;

    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async move {
            // Twelve requests a minute, no burst: the first goes, the
            // next waits 5 s at the head, the rest behind it.
            let state = common::paced_state(12);
            let calls = Arc::new(AtomicU32::new(0));
            let svc = RetryLayer::builder()
                .config({
                    let mut config = Config::default();
                    config.policy = common::fast_policy();
                    config.provider = Some(Provider::Anthropic);
                    config
                })
                .store(state.clone())
                .clock(Arc::new(TokioClock::new()))
                .build()
                .unwrap()
                .layer(Provider1 {
                    steps: Arc::new(vec![Step::Hang]),
                    calls: calls.clone(),
                });
            let in_flight = tokio::spawn(svc.clone().oneshot(req()));
            tokio::time::sleep(Duration::from_millis(10)).await;
            assert_eq!(calls.load(Ordering::SeqCst), 1, "the first is sent");
            let head = tokio::spawn(svc.clone().oneshot(req()));
            tokio::time::sleep(Duration::from_millis(10)).await;
            let mut waiting = Vec::new();
            for _ in 0..2 {
                let cancel = Cancel::new();
                let mut r = req();
                r.extensions_mut().insert(cancel.clone());
                waiting.push((cancel, tokio::spawn(svc.clone().oneshot(r))));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // Gone before their turn: none of them was sent.
            tokio::time::sleep(Duration::from_secs(2)).await;
            for (cancel, _) in &waiting {
                cancel.cancel();
            }
            for (_, call) in waiting {
                let err = call.await.unwrap().expect_err("cancelled");
                assert_eq!(
                    err.give_up_reason(),
                    Some(GiveUpReason::Cancelled),
                    "{err:?}"
                );
            }
            assert_eq!(calls.load(Ordering::SeqCst), 1, "nothing else sent");
            assert!(!in_flight.is_finished(), "the one in flight runs on");
            assert!(!head.is_finished(), "the head still waits its turn");
            in_flight.abort();
            head.abort();
        });
        done_tx.send(()).unwrap();
    });
    done_rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the cancelled calls ended (a spin never does)");
}

/// A transport that can tell the wait for a connection from the wire, as
/// the layer's [`WireMark`](ratewise_tower::WireMark) lets it say: it takes
/// each request (`watching`), waits until the test gives it a connection,
/// and only then asks whether to write it (`reached`).
#[derive(Clone)]
struct Connecting {
    /// A connection for the request waiting, given by the test.
    connection: Arc<tokio::sync::Notify>,
    /// The last attempt's mark, as the transport holds it.
    mark: Arc<std::sync::Mutex<Option<ratewise_tower::WireMark>>>,
    /// Requests written.
    written: Arc<AtomicU32>,
    /// A written request gets a 200 (else nothing, ever).
    answers: bool,
}

impl Connecting {
    fn new(answers: bool) -> Self {
        Connecting {
            connection: Arc::new(tokio::sync::Notify::new()),
            mark: Arc::default(),
            written: Arc::default(),
            answers,
        }
    }

    fn mark(&self) -> ratewise_tower::WireMark {
        self.mark
            .lock()
            .unwrap()
            .clone()
            .expect("a request was taken")
    }
}

impl Service<Request<Full<Bytes>>> for Connecting {
    type Response = Response<Body>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, std::io::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Full<Bytes>>) -> Self::Future {
        let mark = req
            .extensions()
            .get::<ratewise_tower::WireMark>()
            .cloned()
            .expect("the layer marks each attempt");
        mark.watching();
        *self.mark.lock().unwrap() = Some(mark.clone());
        let me = self.clone();
        Box::pin(async move {
            me.connection.notified().await;
            if !mark.reached() {
                return Err(std::io::Error::other("cancelled before the wire"));
            }
            me.written.fetch_add(1, Ordering::SeqCst);
            if !me.answers {
                futures::future::pending::<()>().await;
            }
            Ok(Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(full(
                    br#"{"type":"message","content":[],"usage":{"input_tokens":10,"output_tokens":5}}"#,
                ))
                .unwrap())
        })
    }
}

#[derive(Default)]
struct Log(std::sync::Mutex<Vec<String>>);

impl ratewise_tower::Journal for Log {
    fn attempt_started<'a>(
        &'a self,
        _job_id: &'a str,
        attempt: u32,
        _at: std::time::SystemTime,
    ) -> ratewise_tower::Written<'a> {
        self.0.lock().unwrap().push(format!("start {attempt}"));
        ratewise_tower::written(Ok::<(), std::io::Error>(()))
    }
    fn attempt_ended<'a>(
        &'a self,
        r: &'a ratewise_core::record::AttemptRecord,
    ) -> ratewise_tower::Written<'a> {
        self.0
            .lock()
            .unwrap()
            .push(format!("end {} {} {}", r.attempt, r.action, r.cause));
        ratewise_tower::written(Ok::<(), std::io::Error>(()))
    }
}

fn connecting_setup(
    t: &Connecting,
    policy: ratewise_core::decide::Policy,
) -> (
    Arc<Shared>,
    Arc<Log>,
    ratewise_tower::RetryService<Connecting>,
) {
    let state = common::state();
    let log = Arc::new(Log::default());
    let layer = RetryLayer::builder()
        .config({
            let mut config = Config::default();
            config.policy = policy;
            config.provider = Some(Provider::Anthropic);
            config.seed = Some(3);
            config
        })
        .store(state.clone())
        .clock(Arc::new(TokioClock::new()))
        .journal(log.clone())
        .build()
        .unwrap();
    (state, log, layer.layer(t.clone()))
}

async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("never happened: {what}");
}

/// The cancellation comes while the request waits for a connection: it
/// finds nothing sent, the call ends at once `give_up` `cancelled`, the
/// reservation goes back, the attempt is journaled as ended (no unknown
/// outcome after a restart), and the connection that comes later does not
/// get the request.
#[tokio::test(start_paused = true)]
async fn a_send_cancelled_while_it_waits_for_a_connection_is_released_and_never_written() {
    use ratewise_core::job::Sending;
    use ratewise_tower::{Cancel, Cancelled};
    let t = Connecting::new(true);
    let (state, log, svc) = connecting_setup(&t, common::fast_policy());
    let cancel = Cancel::new();
    let mut r = req();
    r.extensions_mut().insert(cancel.clone());
    let call = tokio::spawn(svc.oneshot(r));
    until("it waits for a connection", || {
        cancel.sending() == Sending::Connecting
    })
    .await;
    assert_eq!(cancel.cancel(), Cancelled::NothingSent);
    let err = tokio::time::timeout(Duration::from_secs(1), call)
        .await
        .expect("ended at once")
        .unwrap()
        .expect_err("withheld");
    assert_eq!(
        err.give_up_reason(),
        Some(ratewise_core::GiveUpReason::Cancelled),
        "{err:?}"
    );
    t.connection.notify_one();
    assert!(!t.mark().reached(), "the connection came after the cancel");
    assert_eq!(t.written.load(Ordering::SeqCst), 0);
    let l = state.ledger();
    assert_nothing_outstanding(&l);
    assert_eq!(
        (l.reserved.requests, l.released.requests, l.settled.requests),
        (1, 1, 0),
        "nothing reached the provider: {l:?}"
    );
    assert_eq!(
        *log.0.lock().unwrap(),
        ["start 1", "end 1 give_up connect_failed"],
        "started, and ended as never sent"
    );
}

/// The cancellation and the connection come together: the transport finds
/// the request withdrawn and fails it before the layer sees the
/// cancellation. Still never sent: the job ends `give_up` `cancelled`, the
/// reservation goes back, the attempt is journaled as ended, never sent.
#[tokio::test(start_paused = true)]
async fn a_send_withdrawn_as_its_connection_comes_is_cancelled_not_failed() {
    use ratewise_core::job::Sending;
    use ratewise_tower::{Cancel, Cancelled};
    let t = Connecting::new(true);
    let (state, log, svc) = connecting_setup(&t, common::fast_policy());
    let cancel = Cancel::new();
    let mut r = req();
    r.extensions_mut().insert(cancel.clone());
    let call = tokio::spawn(svc.oneshot(r));
    until("it waits for a connection", || {
        cancel.sending() == Sending::Connecting
    })
    .await;
    // Both before the layer runs again.
    assert_eq!(cancel.cancel(), Cancelled::NothingSent);
    t.connection.notify_one();
    let err = tokio::time::timeout(Duration::from_secs(1), call)
        .await
        .expect("ended at once")
        .unwrap()
        .expect_err("withheld");
    assert_eq!(
        err.give_up_reason(),
        Some(ratewise_core::GiveUpReason::Cancelled),
        "{err:?}"
    );
    assert_eq!(t.written.load(Ordering::SeqCst), 0);
    let l = state.ledger();
    assert_nothing_outstanding(&l);
    assert_eq!(
        (l.reserved.requests, l.released.requests, l.settled.requests),
        (1, 1, 0),
        "nothing reached the provider: {l:?}"
    );
    assert_eq!(
        *log.0.lock().unwrap(),
        ["start 1", "end 1 give_up connect_failed"],
        "started, and ended as never sent"
    );
}

/// The request got its connection before the cancellation: the
/// cancellation says so, the send finishes (no retry follows), and a call
/// dropped then is charged at its estimate.
#[tokio::test(start_paused = true)]
async fn a_send_on_the_wire_before_the_cancel_finishes_and_is_charged() {
    use ratewise_core::job::Sending;
    use ratewise_tower::{Cancel, Cancelled};
    let t = Connecting::new(false);
    let (state, _log, svc) = connecting_setup(&t, common::fast_policy());
    let cancel = Cancel::new();
    let mut r = req();
    r.extensions_mut().insert(cancel.clone());
    let call = tokio::spawn(svc.oneshot(r));
    until("it waits for a connection", || {
        cancel.sending() == Sending::Connecting
    })
    .await;
    t.connection.notify_one();
    until("on the wire", || cancel.sending() == Sending::OnWire).await;
    assert_eq!(cancel.cancel(), Cancelled::AfterSend);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!call.is_finished(), "the send on the wire runs on");
    assert_eq!(t.written.load(Ordering::SeqCst), 1);
    call.abort();
    let _ = call.await;
    let l = state.ledger();
    assert_nothing_outstanding(&l);
    assert_eq!((l.settled.requests, l.released.requests), (1, 0), "{l:?}");
    assert_eq!(l.charged.output, 100, "max_tokens charged: {l:?}");
}

/// Answered on the wire it goes as any send: the machine was told where
/// it was, nothing more.
#[tokio::test(start_paused = true)]
async fn a_send_that_reaches_the_wire_is_answered_as_any_other() {
    let t = Connecting::new(true);
    let (state, log, svc) = connecting_setup(&t, common::fast_policy());
    let call = tokio::spawn(svc.oneshot(req()));
    until("it waits for a connection", || {
        t.mark.lock().unwrap().is_some()
    })
    .await;
    t.connection.notify_one();
    let resp = call.await.unwrap().expect("a 200");
    resp.into_body().collect().await.unwrap();
    assert_eq!(t.written.load(Ordering::SeqCst), 1);
    let l = state.ledger();
    assert_nothing_outstanding(&l);
    assert_eq!((l.settled.requests, l.released.requests), (1, 0), "{l:?}");
    assert_eq!(*log.0.lock().unwrap(), ["start 1", "end 1 done success"]);
}

/// With no cancellation of its caller's: a call dropped (a client
/// timeout) while its request waits for a connection gives its
/// reservation back — nothing reached the provider, and the connection
/// that comes later does not get it.
#[tokio::test(start_paused = true)]
async fn a_call_dropped_while_its_send_waits_for_a_connection_releases_it() {
    let t = Connecting::new(true);
    let (state, _log, svc) = connecting_setup(&t, common::fast_policy());
    call_and_time_out(svc, Duration::from_secs(5)).await;
    t.connection.notify_one();
    assert!(!t.mark().reached());
    let l = state.ledger();
    assert_nothing_outstanding(&l);
    assert_eq!((l.settled.requests, l.released.requests), (0, 1), "{l:?}");
}

/// A send cut at the send timeout while it still waited for a connection
/// never left: `connect_failed` (retried, released), never an unknown
/// outcome charged at its estimate.
#[tokio::test(start_paused = true)]
async fn a_send_timeout_while_waiting_for_a_connection_is_not_an_unknown_outcome() {
    let t = Connecting::new(true);
    let mut policy = common::fast_policy();
    policy.send_timeout = Some(Duration::from_secs(1));
    let (state, log, svc) = connecting_setup(&t, policy);
    let err = svc.oneshot(req()).await.expect_err("never connected");
    assert!(!err.is_hold_unknown(), "{err:?}");
    assert_eq!(
        err.classification().map(|c| c.cause),
        Some(ratewise_core::Cause::ConnectFailed),
        "{err:?}"
    );
    let l = state.ledger();
    assert_nothing_outstanding(&l);
    assert_eq!(l.settled.requests, 0, "nothing charged: {l:?}");
    assert_eq!(l.released.requests, l.reserved.requests, "{l:?}");
    let log = log.0.lock().unwrap();
    assert!(
        log.iter()
            .filter(|l| l.starts_with("end"))
            .all(|l| l.ends_with("connect_failed")),
        "{log:?}"
    );
    assert!(!t.mark().reached());
    assert_eq!(t.written.load(Ordering::SeqCst), 0);
}
