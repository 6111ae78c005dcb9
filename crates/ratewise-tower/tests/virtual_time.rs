//! The layer in virtual time: a manual clock whose sleeps jump time
//! forward, and a scripted inner service. Deterministic, no sockets.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use ratewise_core::admit::{self, Controller, Limits, RampConfig, Shared};
use ratewise_core::decide::Policy;
use ratewise_core::{ActionKind, GiveUpReason, Instant, Now, Provider};
use ratewise_tower::{Clock, Config, Deadline, RetryLayer, Sleep};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};
use tower::{Layer, Service, ServiceExt};

/// Virtual time: `sleep_until` jumps the clock forward at once.
#[derive(Default)]
struct ManualClock {
    now: Mutex<Duration>,
}

impl Clock for ManualClock {
    fn now(&self) -> Now {
        let d = *self.now.lock().unwrap();
        Now::new(
            Instant::from_origin(d),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000) + d,
        )
    }
    fn sleep_until(&self, at: Instant) -> Sleep {
        let mut now = self.now.lock().unwrap();
        *now = (*now).max(at.since_origin());
        Box::pin(std::future::ready(()))
    }
}

/// One scripted answer: status, headers, body.
type Answer = (u16, Vec<(&'static str, &'static str)>, &'static str);
type Script = Arc<Mutex<VecDeque<Answer>>>;

/// An inner service that answers from a script and records the virtual
/// time of every send.
#[derive(Clone)]
struct Scripted {
    clock: Arc<ManualClock>,
    script: Script,
    sends: Arc<Mutex<Vec<Duration>>>,
}

impl Service<Request<Full<Bytes>>> for Scripted {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<Full<Bytes>>) -> Self::Future {
        self.sends
            .lock()
            .unwrap()
            .push(self.clock.now().instant.since_origin());
        let (status, headers, body) = self.script.lock().unwrap().pop_front().unwrap_or((
            200,
            vec![],
            r#"{"usage":{"input_tokens":5,"output_tokens":7}}"#,
        ));
        let mut b = Response::builder().status(StatusCode::from_u16(status).unwrap());
        for (n, v) in headers {
            b = b.header(n, v);
        }
        let resp = b
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .unwrap();
        Box::pin(async move { Ok(resp) })
    }
}

fn setup(
    policy: Policy,
    limits: Limits,
    script: Vec<Answer>,
) -> (RetryLayer, Scripted, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::default());
    let state = Arc::new(Shared::new(Controller::new({
        let mut config = admit::Config::default();
        config.limits = limits;
        config.ramp = {
            let mut ramp = RampConfig::default();
            ramp.start = 1000;
            ramp
        };
        config
    })));
    let layer = RetryLayer::builder()
        .config({
            let mut config = Config::default();
            config.policy = policy;
            config.provider = Some(Provider::Anthropic);
            config
        })
        .store(state)
        .clock(clock.clone())
        .build()
        .unwrap();
    let inner = Scripted {
        clock: clock.clone(),
        script: Arc::new(Mutex::new(script.into())),
        sends: Arc::new(Mutex::new(Vec::new())),
    };
    (layer, inner, clock)
}

fn req(deadline: Option<Duration>) -> Request<Full<Bytes>> {
    let mut r = Request::post("http://provider.invalid/v1/messages")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"claude-sonnet-4-5","max_tokens":10}"#,
        )))
        .unwrap();
    if let Some(d) = deadline {
        r.extensions_mut().insert(Deadline(d));
    }
    r
}

const RATE_LIMITED: &str = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;

#[tokio::test]
async fn a_retry_is_never_sent_before_the_servers_wait() {
    let (layer, inner, _clock) = setup(
        Policy::default(),
        Limits::NONE,
        vec![(
            429,
            vec![("retry-after", "8"), ("content-type", "application/json")],
            RATE_LIMITED,
        )],
    );
    let sends = inner.sends.clone();
    let mut svc = layer.layer(inner);
    let resp = svc.ready().await.unwrap().call(req(None)).await.unwrap();
    let _ = resp.into_body().collect().await.unwrap();
    let sends = sends.lock().unwrap().clone();
    assert_eq!(sends.len(), 2);
    assert!(sends[1] - sends[0] >= Duration::from_secs(8), "{sends:?}");
}

#[tokio::test]
async fn waiting_for_admission_spends_deadline_not_attempts() {
    // 6 requests a minute, burst of one: the second job waits ~10 s.
    let limits = Limits {
        requests: Some(6),
        ..Limits::NONE
    };
    let (layer, inner, clock) = setup(Policy::default(), limits, vec![]);
    let sends = inner.sends.clone();
    let mut svc = layer.layer(inner);
    for _ in 0..2 {
        let resp = svc
            .ready()
            .await
            .unwrap()
            .call(req(Some(Duration::from_secs(30))))
            .await
            .unwrap();
        let attempts = resp
            .extensions()
            .get::<ratewise_tower::Attempts>()
            .unwrap()
            .0
            .len();
        assert_eq!(attempts, 1, "the wait burned no attempt");
        let _ = resp.into_body().collect().await.unwrap();
    }
    let sends = sends.lock().unwrap().clone();
    assert!(sends[1] >= Duration::from_secs(9), "{sends:?}");
    assert!(clock.now().instant.since_origin() < Duration::from_secs(30));
}

#[tokio::test]
async fn an_admission_past_the_deadline_gives_up_without_sending() {
    let limits = Limits {
        requests: Some(6),
        ..Limits::NONE
    };
    let (layer, inner, _clock) = setup(Policy::default(), limits, vec![]);
    let sends = inner.sends.clone();
    let mut svc = layer.layer(inner);
    let resp = svc.ready().await.unwrap().call(req(None)).await.unwrap();
    let _ = resp.into_body().collect().await.unwrap();
    // The next slot is ~10 s away; this job can afford 2 s.
    let e = svc
        .ready()
        .await
        .unwrap()
        .call(req(Some(Duration::from_secs(2))))
        .await
        .unwrap_err();
    assert!(e.is_give_up(), "{e:?}");
    assert_eq!(e.give_up_reason(), Some(GiveUpReason::Deadline));
    assert!(!e.was_sent());
    assert_eq!(sends.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn an_admission_wait_past_the_inline_limit_defers_without_sending() {
    let limits = Limits {
        requests: Some(6),
        ..Limits::NONE
    };
    let mut policy = Policy::default();
    policy.max_inline_wait = Duration::from_secs(1);
    let (layer, inner, _clock) = setup(policy, limits, vec![]);
    let sends = inner.sends.clone();
    let mut svc = layer.layer(inner);
    let resp = svc.ready().await.unwrap().call(req(None)).await.unwrap();
    let _ = resp.into_body().collect().await.unwrap();
    let e = svc
        .ready()
        .await
        .unwrap()
        .call(req(None))
        .await
        .unwrap_err();
    assert_eq!(e.action(), Some(ActionKind::Defer));
    assert!(e.until().is_some());
    assert_eq!(sends.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_long_retry_after_defers_a_job_with_no_deadline_and_a_forever_one_gives_up() {
    let mut policy = Policy::default();
    policy.max_inline_wait = Duration::from_secs(5);
    let (layer, inner, _clock) = setup(
        policy,
        Limits::NONE,
        vec![(
            429,
            vec![("retry-after", "30"), ("content-type", "application/json")],
            RATE_LIMITED,
        )],
    );
    let mut svc = layer.layer(inner);
    // No deadline: a wait past the inline limit hands the job back.
    let e = svc
        .ready()
        .await
        .unwrap()
        .call(req(None))
        .await
        .unwrap_err();
    assert!(e.is_defer(), "{e:?}");
    assert_eq!(e.attempts().len(), 1);

    let (layer, inner, _clock) = setup(
        Policy::default(),
        Limits::NONE,
        vec![(
            429,
            vec![("retry-after", "30"), ("content-type", "application/json")],
            RATE_LIMITED,
        )],
    );
    let mut svc = layer.layer(inner);
    let e = svc
        .ready()
        .await
        .unwrap()
        .call(req(Some(Duration::from_secs(10))))
        .await
        .unwrap_err();
    assert_eq!(e.give_up_reason(), Some(GiveUpReason::Deadline));
}

#[tokio::test]
async fn x_should_retry_false_is_respected() {
    let (layer, inner, _clock) = setup(
        Policy::default(),
        Limits::NONE,
        vec![(
            500,
            vec![("x-should-retry", "false")],
            r#"{"type":"error","error":{"type":"api_error","message":"x"}}"#,
        )],
    );
    let sends = inner.sends.clone();
    let mut svc = layer.layer(inner);
    let e = svc
        .ready()
        .await
        .unwrap()
        .call(req(None))
        .await
        .unwrap_err();
    assert_eq!(e.give_up_reason(), Some(GiveUpReason::ServerDeclined));
    assert_eq!(sends.lock().unwrap().len(), 1);
}

/// An inner service that is not ready until told: the layer's readiness
/// is the inner service's.
#[derive(Clone)]
struct Gate(Arc<Mutex<bool>>);

impl Service<Request<Full<Bytes>>> for Gate {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        if *self.0.lock().unwrap() {
            Poll::Ready(Ok(()))
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
    fn call(&mut self, _: Request<Full<Bytes>>) -> Self::Future {
        std::future::ready(Ok(Response::new(Full::new(Bytes::new()))))
    }
}

#[tokio::test]
async fn poll_ready_is_the_inner_services() {
    let open = Arc::new(Mutex::new(false));
    let mut svc = RetryLayer::new(Policy::default()).layer(Gate(open.clone()));
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    assert!(Service::<Request<Full<Bytes>>>::poll_ready(&mut svc, &mut cx).is_pending());
    *open.lock().unwrap() = true;
    assert!(Service::<Request<Full<Bytes>>>::poll_ready(&mut svc, &mut cx).is_ready());
}
