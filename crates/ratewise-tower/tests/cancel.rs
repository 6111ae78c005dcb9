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
