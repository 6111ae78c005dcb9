//! The default policy as a middleware caller meets it (no deadline, 60 s
//! in line in total): what comes back for each outcome, and that no call
//! is held in line past the limit. Tokio's paused clock and a provider
//! stub at the end of the stack (no sockets): every wait is virtual.

use ratewise_reqwest::{ratewise_error, Outcome, RatewiseMiddleware, ACTION_HEADER};
use ratewise_tower::{Limits, Policy, RetryLayer};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// The provider: answers every send with `status` (and `retry-after`,
/// when given) at once, and counts the sends.
#[derive(Clone, Default)]
struct Stub {
    status: u16,
    retry_after: Option<&'static str>,
    sends: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl Middleware for Stub {
    async fn handle(
        &self,
        _req: reqwest::Request,
        _extensions: &mut http::Extensions,
        _next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        self.sends.fetch_add(1, Ordering::SeqCst);
        let mut b = http::Response::builder()
            .status(self.status)
            .header("content-type", "application/json");
        if let Some(secs) = self.retry_after {
            b = b.header("retry-after", secs);
        }
        let body = if self.status == 200 {
            r#"{"type":"message","content":[],"usage":{"input_tokens":5,"output_tokens":7}}"#
        } else {
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#
        };
        Ok(b.body(body).unwrap().into())
    }
}

fn client_with(middleware: RatewiseMiddleware, stub: &Stub) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(middleware)
        .with(stub.clone())
        .build()
}

fn call(client: &ClientWithMiddleware, job: usize) -> reqwest_middleware::RequestBuilder {
    client
        .post("http://127.0.0.1:9/v1/messages")
        .header("x-api-key", "sk-ant-test")
        .header("content-type", "application/json")
        .with_extension(ratewise_tower::JobId::new(format!("call-{job}")))
        .body(r#"{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[]}"#)
}

/// 150 concurrent calls at six requests a minute through a middleware
/// with the default policy: each ends within the 60 s in-line limit —
/// sent (`Ok`, `x-ratewise-action: done`), or deferred before any send
/// (`Err`, `ratewise_error(..).is_defer()`, `until()` ahead). Before the
/// limit counted a call's turn behind the others, calls waited in line
/// for many minutes and none was deferred.
#[tokio::test(start_paused = true)]
async fn no_call_is_held_past_the_inline_limit_and_the_rest_are_deferred() {
    let limit = Policy::default().max_inline_wait;
    let layer = RetryLayer::builder()
        .policy(Policy::default())
        .limits(Limits::per_minute().requests(6))
        .seed(7)
        .build()
        .unwrap();
    let stub = Stub {
        status: 200,
        ..Stub::default()
    };
    let client = client_with(RatewiseMiddleware::from_layer(layer), &stub);
    let calls: Vec<_> = (0..150)
        .map(|i| {
            let request = call(&client, i);
            tokio::spawn(async move {
                let t0 = Instant::now();
                let result = request.send().await;
                let ended = match result {
                    Ok(response) => {
                        assert_eq!(response.headers()[ACTION_HEADER], "done");
                        let _ = response.bytes().await.unwrap();
                        Ok(())
                    }
                    Err(e) => Err(e),
                };
                (t0.elapsed(), ended)
            })
        })
        .collect();
    let (mut done, mut deferred) = (0, 0);
    for c in calls {
        let (held, ended) = c.await.unwrap();
        assert!(held <= limit, "a call was held {held:?} in line");
        match ended {
            Ok(()) => done += 1,
            Err(err) => {
                let e = ratewise_error(&err).expect("ratewise's error");
                assert!(e.is_defer(), "{e}");
                assert!(!e.was_sent());
                assert!(e.until().expect("when") > SystemTime::now());
                deferred += 1;
            }
        }
    }
    assert!(done >= 6, "{done}");
    assert!(deferred > 100, "{deferred}");
    assert_eq!(stub.sends.load(Ordering::SeqCst), done);
}

/// `RatewiseMiddleware::new(Policy::default())`: a `429` whose
/// `retry-after` is past the in-line limit comes back at once as the
/// provider's answer, `x-ratewise-action: defer`, its [`Outcome`] saying
/// when to send it again; one within the limit is waited out in line and
/// retried.
#[tokio::test(start_paused = true)]
async fn a_wait_past_the_limit_is_handed_back_and_one_within_it_is_waited_out() {
    let stub = Stub {
        status: 429,
        retry_after: Some("120"),
        ..Stub::default()
    };
    let client = client_with(RatewiseMiddleware::new(Policy::default()), &stub);
    let t0 = Instant::now();
    let response = call(&client, 1).send().await.unwrap();
    assert!(t0.elapsed() < Duration::from_secs(1), "not waited");
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()[ACTION_HEADER], "defer");
    let outcome = response.extensions().get::<Outcome>().unwrap().clone();
    let until = outcome.until().expect("a deferral says when");
    assert!(until >= SystemTime::now() + Duration::from_secs(119));
    assert_eq!(stub.sends.load(Ordering::SeqCst), 1);

    let stub = Stub {
        status: 429,
        retry_after: Some("5"),
        ..Stub::default()
    };
    let client = client_with(RatewiseMiddleware::new(Policy::default()), &stub);
    let t0 = Instant::now();
    let response = call(&client, 2).send().await.unwrap();
    // Every attempt waited out in line (5 s plus jitter each), then the
    // last 429 returned as the provider's answer.
    assert!(t0.elapsed() >= Duration::from_secs(10));
    assert!(t0.elapsed() <= Policy::default().max_inline_wait);
    assert_eq!(stub.sends.load(Ordering::SeqCst), 3);
    assert_eq!(response.status(), 429);
}
