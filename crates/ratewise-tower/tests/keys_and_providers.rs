//! Money and credentials stop the key; acceleration limits are waited out;
//! OpenAI answers are read with the provider detected per response.

mod common;

use bytes::Bytes;
use common::*;
use http_body_util::Full;
use ratewise_core::{ActionKind, Cause};
use ratewise_mock::{AccelerationConfig, Fault, FaultRule, MockConfig};
use ratewise_streaming::StreamOutcome;
use ratewise_tower::{Config, JobId};
use tower::Layer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn billing_stops_the_key_until_resume() {
    let server = mock(roomy()).await;
    server.set_billing_error(true);
    let layer = layer();
    let mut svc = layer.layer(client());
    let first = run(&mut svc, request(&server, "b1", false)).await;
    assert_eq!(first.action, ActionKind::StopQueue);
    assert_eq!(
        first
            .error
            .as_ref()
            .unwrap()
            .classification()
            .unwrap()
            .cause,
        Cause::Billing
    );
    assert_eq!(sends(&server, "b1"), 1);
    let second = run(&mut svc, request(&server, "b2", false)).await;
    assert_eq!(second.action, ActionKind::StopQueue);
    assert_eq!(sends(&server, "b2"), 0, "a stopped key sends nothing");
    server.set_billing_error(false);
    layer.resume(&key()).await;
    let third = run(&mut svc, request(&server, "b2", false)).await;
    assert_eq!(third.action, ActionKind::Done);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_stops_the_queue() {
    let server = mock(roomy()).await;
    let mut svc = layer().layer(client());
    let mut req = http::Request::post(format!("{}/v1/messages", server.base_url()))
        .header("content-type", "application/json")
        .body(Full::new(anthropic_body(10, false)))
        .unwrap();
    req.extensions_mut().insert(JobId::new("nokey"));
    let ended = run(&mut svc, req).await;
    assert_eq!(ended.action, ActionKind::StopQueue);
    assert_eq!(
        ended.error.unwrap().classification().unwrap().cause,
        Cause::Authentication
    );
    assert_eq!(sends(&server, "nokey"), 1);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acceleration_limit_is_waited_out_and_sends_match_attempts() {
    let server = mock(MockConfig {
        seconds_per_minute: 6.0, // a provider minute lasts 6 s
        acceleration: Some(AccelerationConfig {
            idle_secs: 60.0,
            window_secs: 10.0,
            max_requests: 2,
        }),
        ..roomy()
    })
    .await;
    let layer = layer();
    let mut svc = layer.layer(client());
    let mut ended = Vec::new();
    for i in 0..4 {
        let job = format!("acc-{i}");
        let e = run(&mut svc, request(&server, &job, false)).await;
        assert_eq!(e.attempts, sends(&server, &job), "{job}: no hidden sends");
        ended.push(e);
    }
    let limited = server
        .records()
        .iter()
        .filter(|r| r.cause == Cause::AccelerationLimited)
        .count();
    assert!(limited >= 1, "the mock answered an acceleration limit");
    // Read as an acceleration limit and retried with a wait, never blindly.
    let acc: Vec<_> = ended
        .iter()
        .flat_map(|e| e.records.iter())
        .filter(|r| r.cause == Cause::AccelerationLimited)
        .collect();
    assert!(!acc.is_empty());
    for r in acc {
        assert!(
            matches!(r.action, ActionKind::Retry | ActionKind::GiveUp),
            "{r:?}"
        );
        if r.action == ActionKind::Retry {
            assert!(r.delay_ms.unwrap() >= r.hint_ms.unwrap_or(0));
        }
    }
    server.shutdown().await;
}

fn openai_request(base: &str, job: &str, stream: bool) -> http::Request<Full<Bytes>> {
    let mut body = serde_json::json!({"model": "gpt-4o-mini", "max_completion_tokens": 32,
        "messages": [{"role": "user", "content": "hi"}]});
    if stream {
        body["stream"] = true.into();
        body["stream_options"] = serde_json::json!({"include_usage": true});
    }
    let mut req = http::Request::post(format!("{base}/v1/chat/completions"))
        .header("content-type", "application/json")
        .header("authorization", "Bearer sk-openai-SECRET")
        .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
        .unwrap();
    req.extensions_mut().insert(JobId::new(job));
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_is_detected_retried_and_metered() {
    let server = mock(MockConfig {
        faults: vec![FaultRule::nth(Fault::Overloaded, [1])],
        ..roomy()
    })
    .await;
    // No provider configured: each answer is read under the detected profile.
    let mut svc = layer_with({
        let mut config = Config::default();
        config.policy = fast_policy();
        config.provider = None;
        config
    })
    .layer(client());
    let base = server.base_url();
    let json = run(&mut svc, openai_request(&base, "o1", false)).await;
    assert_eq!(json.action, ActionKind::Done);
    assert_eq!(json.attempts, 2);
    assert_eq!(json.records[0].cause, Cause::Overloaded);
    assert_eq!(json.records[0].status, Some(503));
    let usage = json.metered.unwrap().usage().expect("usage parsed");
    assert!(usage.output_tokens > 0);

    let stream = run(&mut svc, openai_request(&base, "o2", true)).await;
    assert_eq!(stream.action, ActionKind::Done);
    match stream.metered.unwrap().stream().cloned().unwrap() {
        StreamOutcome::Completed { usage: Some(u) } => assert!(u.output_tokens > 0),
        other => panic!("{other:?}"),
    }
    server.shutdown().await;
}
