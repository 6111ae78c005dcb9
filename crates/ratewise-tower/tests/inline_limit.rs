//! The default policy as a caller of the layer meets it: a call with no
//! deadline waits in line (for admission, its turn behind other calls,
//! retry delays) at most `Policy::max_inline_wait` in total — 60 s by
//! default — and is otherwise handed back deferred, nothing sent, with
//! the earliest time to send it again. Tokio's paused clock: the waits are
//! virtual and exact; no sockets.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use ratewise_tower::{Error, Limits, Policy, RetryLayer};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

const OK: &str = r#"{"usage":{"input_tokens":5,"output_tokens":7}}"#;

fn req(job: usize) -> Request<Full<Bytes>> {
    Request::post("http://127.0.0.1:9/v1/messages")
        .header("content-type", "application/json")
        .header("x-api-key", "sk-ant-test")
        .extension(ratewise_tower::JobId::new(format!("call-{job}")))
        .body(Full::new(Bytes::from_static(
            br#"{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[]}"#,
        )))
        .unwrap()
}

/// One scripted answer: status, headers, body.
type Answer = (u16, Vec<(&'static str, &'static str)>, &'static str);

/// An inner client that answers from a script (then `200`s), instantly
/// and on no socket, and counts its sends.
#[derive(Clone, Default)]
struct Scripted {
    script: Arc<Mutex<VecDeque<Answer>>>,
    sends: Arc<Mutex<usize>>,
}

impl Scripted {
    fn service(
        &self,
    ) -> impl tower::Service<
        Request<Full<Bytes>>,
        Response = Response<Full<Bytes>>,
        Error = Infallible,
        Future = impl Send,
    > + Clone
           + Send
           + 'static {
        let me = self.clone();
        tower::service_fn(move |_req: Request<Full<Bytes>>| {
            *me.sends.lock().unwrap() += 1;
            let (status, headers, body) =
                me.script
                    .lock()
                    .unwrap()
                    .pop_front()
                    .unwrap_or((200, vec![], OK));
            let mut b = Response::builder().status(status);
            for (n, v) in headers {
                b = b.header(n, v);
            }
            let resp = b
                .body(Full::new(Bytes::from_static(body.as_bytes())))
                .unwrap();
            async move { Ok::<_, Infallible>(resp) }
        })
    }
}

fn paced_layer(requests_per_minute: u64) -> RetryLayer {
    RetryLayer::builder()
        .policy(Policy::default())
        .provider(ratewise_tower::Provider::Anthropic)
        .limits(Limits::per_minute().requests(requests_per_minute))
        .seed(7)
        .build()
        .expect("layer")
}

/// 150 concurrent calls, six requests a minute, the default policy: no
/// call is held longer than the 60 s in-line limit; those whose turn comes
/// later are deferred — nothing sent, `until()` in the future — and the
/// rest are sent. Before the limit counted a call's turn in the queue, the
/// last of these waited in line for over twenty minutes.
#[tokio::test(start_paused = true)]
async fn no_call_waits_in_line_past_the_default_limit_and_the_rest_are_deferred() {
    let limit = Policy::default().max_inline_wait;
    assert_eq!(limit, Duration::from_secs(60), "the documented default");
    assert_eq!(Policy::default().default_deadline, None);
    let layer = paced_layer(6);
    let inner = Scripted::default();
    let svc = layer.layer(inner.service());

    let calls: Vec<_> = (0..150)
        .map(|i| {
            let svc = svc.clone();
            tokio::spawn(async move {
                let t0 = Instant::now();
                let result: Result<_, Error> = svc.oneshot(req(i)).await;
                let ok = match result {
                    Ok(resp) => {
                        let _ = resp.into_body().collect().await.unwrap();
                        Ok(())
                    }
                    Err(e) => Err(e),
                };
                (t0.elapsed(), ok)
            })
        })
        .collect();
    let (mut done, mut deferred) = (0usize, 0usize);
    let mut longest = Duration::ZERO;
    for call in calls {
        let (held, ended) = call.await.unwrap();
        longest = longest.max(held);
        assert!(
            held <= limit,
            "a call was held {held:?} in line, past the {limit:?} limit"
        );
        match ended {
            Ok(()) => done += 1,
            Err(e) => {
                assert!(e.is_defer(), "{e}");
                assert!(!e.was_sent(), "a deferred call was not sent");
                assert!(e.attempts().is_empty());
                let until = e.until().expect("a deferral says when");
                assert!(until > SystemTime::now(), "its earliest time is ahead");
                deferred += 1;
            }
        }
    }
    assert_eq!(done + deferred, 150);
    assert!(done >= 6, "the calls that fit were sent: {done}");
    assert!(
        deferred > 100,
        "the calls that did not were deferred: {deferred}"
    );
    assert_eq!(*inner.sends.lock().unwrap(), done, "one send per sent call");
    assert!(
        longest > Duration::from_secs(30),
        "calls did wait in line: {longest:?}"
    );
}

/// Waits are counted together, not one by one: a call that waited in line
/// for admission, then got a `429` whose `retry-after` alone fits the
/// limit, is deferred when the two together do not — before, it retried
/// after waiting more than the limit in line.
#[tokio::test(start_paused = true)]
async fn an_admission_wait_and_a_retry_delay_count_together() {
    let limit = Policy::default().max_inline_wait;
    let layer = paced_layer(2);
    let inner = Scripted::default();
    let mut svc = layer.layer(inner.service());
    // Use the key's room until the next call must wait for it.
    let mut first_wait = Duration::ZERO;
    let mut n = 0;
    while first_wait < Duration::from_secs(20) {
        let t0 = Instant::now();
        let resp = svc.ready().await.unwrap().call(req(n)).await.unwrap();
        let _ = resp.into_body().collect().await.unwrap();
        first_wait = t0.elapsed();
        n += 1;
        assert!(n < 10, "six requests a minute did pace");
    }
    // The next call waits about as long for admission, then is answered
    // `429 retry-after: 40`: 40 s (plus jitter) alone is under the limit;
    // with its wait for admission, over it.
    inner.script.lock().unwrap().push_back((
        429,
        vec![("retry-after", "40"), ("content-type", "application/json")],
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
    ));
    let t0 = Instant::now();
    let e = svc
        .ready()
        .await
        .unwrap()
        .call(req(n))
        .await
        .expect_err("deferred");
    let held = t0.elapsed();
    assert!(
        held >= Duration::from_secs(20),
        "it waited for admission: {held:?}"
    );
    assert!(held <= limit, "{held:?}");
    assert!(e.is_defer(), "{e}");
    assert_eq!(e.attempts().len(), 1, "sent once, not retried in line");
    let until = e.until().expect("when to send it again");
    let ahead = until.duration_since(SystemTime::now()).unwrap();
    assert!(
        ahead >= Duration::from_secs(39),
        "no earlier than the server's wait: {ahead:?}"
    );
}
