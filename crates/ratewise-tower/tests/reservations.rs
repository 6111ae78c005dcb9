//! Reservation bookkeeping per outcome, through a spy on the shared-state
//! seam: success settles (when the body ends), an error answer releases,
//! a request that never left releases, an unknown outcome is held until
//! resolved. No reservation is left outstanding or ended twice.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use ratewise_core::admit::{
    self, Admission, AdmitRequest, Applied, Controller, End, ScopeId, ScopeSnapshot, Shared, Store,
    StoreFuture, Target, Update,
};
use ratewise_core::decide::{Backoff, Policy};
use ratewise_core::{Now, Provider};
use ratewise_tower::{Config, RetryLayer, TokioClock};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::{service_fn, Layer, Service, ServiceExt};

#[derive(Debug, Default)]
struct Counts {
    settle: AtomicU32,
    release: AtomicU32,
    hold: AtomicU32,
    resolve: AtomicU32,
}

/// The in-memory state, counting what the layer asks of it.
#[derive(Debug)]
struct Spy {
    inner: Shared,
    counts: Counts,
}

impl Spy {
    fn count(&self, update: &Update) {
        match &update.end {
            Some(End::Settle { .. }) => self.counts.settle.fetch_add(1, Ordering::SeqCst),
            Some(End::Release { .. }) => self.counts.release.fetch_add(1, Ordering::SeqCst),
            _ => 0,
        };
    }
}

impl Store for Spy {
    fn target<'a>(&'a self, key: &'a str, model: &'a str) -> StoreFuture<'a, Target> {
        Store::target(&self.inner, key, model)
    }
    fn resume<'a>(&'a self, key: &'a str, now: Now) -> StoreFuture<'a, ()> {
        Store::resume(&self.inner, key, now)
    }
    fn snapshot(&self, scope: ScopeId, now: Now) -> StoreFuture<'_, Option<ScopeSnapshot>> {
        Store::snapshot(&self.inner, scope, now)
    }
    fn admit(&self, req: AdmitRequest, now: Now) -> StoreFuture<'_, Admission> {
        Store::admit(&self.inner, req, now)
    }
    fn update(&self, update: Update, now: Now) -> StoreFuture<'_, Option<Applied>> {
        self.count(&update);
        Store::update(&self.inner, update, now)
    }
    fn update_detached(&self, update: Update, now: Now) {
        self.count(&update);
        self.inner.update_detached(update, now)
    }
}

enum Step {
    Status(u16, &'static str),
    Io(std::io::ErrorKind),
}

/// The scripted inner service's bounds, named once.
trait Inner:
    Clone
    + Service<
        Request<Full<Bytes>>,
        Response = Response<Full<Bytes>>,
        Error = std::io::Error,
        Future: Send,
    > + Send
    + 'static
{
}

impl<T> Inner for T where
    T: Clone
        + Service<
            Request<Full<Bytes>>,
            Response = Response<Full<Bytes>>,
            Error = std::io::Error,
            Future: Send,
        > + Send
        + 'static
{
}

fn setup(steps: Vec<Step>) -> (RetryLayer, Arc<Spy>, impl Inner) {
    let spy = Arc::new(Spy {
        inner: Shared::new(Controller::new(admit::Config::default())),
        counts: Counts::default(),
    });
    let layer = RetryLayer::builder()
        .config({
            let mut config = Config::default();
            config.policy = {
                let mut policy = Policy::default();
                policy.backoff = {
                    let mut backoff = Backoff::default();
                    backoff.transient_base = Duration::from_millis(5);
                    backoff.throttle_base = Duration::from_millis(5);
                    backoff.cap = Duration::from_millis(20);
                    backoff
                };
                policy
            };
            config.provider = Some(Provider::Anthropic);
            config
        })
        .store(spy.clone())
        .clock(Arc::new(TokioClock::new()))
        .build()
        .unwrap();
    let steps = Arc::new(Mutex::new(VecDeque::from(steps)));
    let svc = service_fn(move |_req: Request<Full<Bytes>>| {
        let step = steps.lock().unwrap().pop_front();
        async move {
            match step {
                Some(Step::Io(kind)) => Err(std::io::Error::from(kind)),
                Some(Step::Status(s, body)) => Ok(Response::builder()
                    .status(s)
                    .body(Full::new(Bytes::from_static(body.as_bytes())))
                    .unwrap()),
                None => Ok(Response::new(Full::new(Bytes::from_static(
                    br#"{"usage":{"input_tokens":3,"output_tokens":4}}"#,
                )))),
            }
        }
    });
    (layer, spy, svc)
}

fn req() -> Request<Full<Bytes>> {
    Request::post("http://provider.invalid/v1/messages")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"m","max_tokens":100}"#,
        )))
        .unwrap()
}

const SERVER_ERROR: &str = r#"{"type":"error","error":{"type":"api_error","message":"boom"}}"#;

fn counts(spy: &Spy) -> [u32; 4] {
    let c = &spy.counts;
    [
        c.settle.load(Ordering::SeqCst),
        c.release.load(Ordering::SeqCst),
        c.hold.load(Ordering::SeqCst),
        c.resolve.load(Ordering::SeqCst),
    ]
}

#[tokio::test]
async fn success_settles_when_the_body_ends_and_errors_release() {
    let (layer, spy, inner) = setup(vec![
        Step::Status(500, SERVER_ERROR),
        Step::Io(std::io::ErrorKind::ConnectionRefused),
    ]);
    let mut svc = layer.layer(inner);
    let resp = svc.ready().await.unwrap().call(req()).await.unwrap();
    assert_eq!(
        counts(&spy),
        [0, 2, 0, 0],
        "a 500 and a refused connect released"
    );
    let body = resp.into_body();
    assert_eq!(counts(&spy)[0], 0, "not settled before the body ends");
    let _ = body.collect().await.unwrap();
    assert_eq!(counts(&spy), [1, 2, 0, 0]);
    let ledger = spy.inner.lock().ledger();
    assert!(ledger.is_clean(), "{ledger:?}");
    assert_eq!(ledger.charged.output, 4, "settled to the body's usage");
}

#[tokio::test]
async fn an_unknown_outcome_holds_the_job_and_charges_its_estimate_at_once() {
    let (layer, spy, inner) = setup(vec![Step::Io(std::io::ErrorKind::ConnectionReset)]);
    let mut svc = layer.layer(inner);
    let e = svc.ready().await.unwrap().call(req()).await.unwrap_err();
    assert!(e.is_hold_unknown(), "the job is held for its caller");
    // The provider may have run and billed it: charged at its estimate,
    // final; nothing stays reserved.
    assert_eq!(counts(&spy), [1, 0, 0, 0]);
    let ledger = spy.inner.lock().ledger();
    assert!(ledger.is_clean(), "{ledger:?}");
    assert_eq!(ledger.charged.output, 100, "max_tokens charged");
}

#[tokio::test]
async fn a_body_dropped_unread_settles_at_the_estimate() {
    let (layer, spy, inner) = setup(vec![]);
    let mut svc = layer.layer(inner);
    let resp = svc.ready().await.unwrap().call(req()).await.unwrap();
    drop(resp);
    assert_eq!(counts(&spy), [1, 0, 0, 0]);
    let ledger = spy.inner.lock().ledger();
    assert!(ledger.is_clean(), "{ledger:?}");
    assert_eq!(
        ledger.charged.output, 100,
        "max_tokens: the provider may have billed it"
    );
}
