//! Without a configured profile, the request's host names the provider
//! whose documented rules read its answers (`Provider::from_host`); an
//! unknown host is read from each answer, as before.

mod common;

use bytes::Bytes;
use common::*;
use http::{Request, Response};
use http_body_util::Full;
use ratewise_core::{ActionKind, Cause, Provider, Scope};
use ratewise_tower::{Config, JobId, RetryLayer, TokioClock};
use std::convert::Infallible;
use std::sync::Arc;
use tower::{Layer, Service, ServiceExt};

/// A service that answers every request as DeepSeek does when overloaded
/// (a 503 in OpenAI's envelope), counting the sends.
fn overloaded_upstream(
    sends: Arc<std::sync::atomic::AtomicUsize>,
) -> impl Service<
    Request<Full<Bytes>>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Send,
> + Clone
       + Send {
    tower::service_fn(move |_req: Request<Full<Bytes>>| {
        sends.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move {
            Ok::<_, Infallible>(
                Response::builder()
                    .status(503)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(
                        br#"{"error":{"message":"Server overloaded, please try again later.","type":"service_unavailable_error","code":"server_overloaded"}}"#,
                    )))
                    .unwrap(),
            )
        }
    })
}

fn one_attempt_layer() -> RetryLayer {
    let mut config = Config::default();
    config.policy = fast_policy();
    config.policy.max_attempts = 1;
    RetryLayer::builder()
        .config(config)
        .store(state())
        .clock(Arc::new(TokioClock::new()))
        .build()
        .unwrap()
}

async fn cause_for(url: &str) -> (Cause, Scope, Provider) {
    let sends = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut svc = one_attempt_layer().layer(overloaded_upstream(sends.clone()));
    let mut req = Request::post(url)
        .header("authorization", "Bearer sk-test")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"deepseek-chat","messages":[]}"#,
        )))
        .unwrap();
    req.extensions_mut().insert(JobId::new("j"));
    let Err(err) = svc.ready().await.unwrap().call(req).await else {
        panic!("one attempt at a 503 ends in an error")
    };
    assert_eq!(err.action(), Some(ActionKind::GiveUp));
    assert_eq!(sends.load(std::sync::atomic::Ordering::SeqCst), 1);
    let c = err.classification().expect("classified").clone();
    (c.cause, c.scope, c.provider)
}

#[tokio::test]
async fn the_host_names_the_profile_when_none_is_configured() {
    // DeepSeek documents its 503 as "Server Overloaded": provider-wide.
    let (cause, scope, provider) = cause_for("https://api.deepseek.com/chat/completions").await;
    assert_eq!(provider, Provider::Deepseek);
    assert_eq!((cause, scope), (Cause::Overloaded, Scope::Provider));
    // The same answer from a host nobody documents: OpenAI's reading, a
    // transient server error of this request.
    let (cause, scope, provider) = cause_for("http://127.0.0.1:9/chat/completions").await;
    assert_eq!(provider, Provider::Openai);
    assert_eq!((cause, scope), (Cause::ServerError, Scope::Request));
}
