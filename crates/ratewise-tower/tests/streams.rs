//! Streamed answers: usage settles from the stream, committed streams are
//! never replayed, and the opt-in first-content commit point retries an
//! error that arrives before any content.

mod common;

use common::*;
use http_body_util::BodyExt;
use ratewise_core::admit::Shared;
use ratewise_core::{ActionKind, Cause, Provider};
use ratewise_mock::{Fault, FaultRule, MockConfig};
use ratewise_streaming::{CommitPoint, InterruptReason, StreamOutcome};
use ratewise_tower::{Config, RetryLayer, TokioClock};
use std::sync::Arc;
use tower::{Layer, Service, ServiceExt};

fn layer_on(state: Arc<Shared>, commit_point: CommitPoint) -> RetryLayer {
    RetryLayer::builder()
        .config({
            let mut config = Config::default();
            config.policy = fast_policy();
            config.provider = Some(Provider::Anthropic);
            config.commit_point = commit_point;
            config
        })
        .store(state)
        .clock(Arc::new(TokioClock::new()))
        .build()
        .unwrap()
}

fn outstanding_requests(state: &Shared) -> u64 {
    state.lock().ledger().outstanding.requests
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stream_settles_actual_usage() {
    let server = mock(roomy()).await;
    let st = state();
    let mut svc = layer_on(st.clone(), CommitPoint::FirstByte).layer(client());
    let ended = run(&mut svc, request(&server, "s1", true)).await;
    assert_eq!(ended.action, ActionKind::Done);
    let outcome = ended.metered.unwrap().stream().cloned().unwrap();
    let record = &server.records()[0];
    match outcome {
        StreamOutcome::Completed { usage: Some(u) } => {
            assert_eq!(u.output_tokens, record.output_tokens);
            assert_eq!(u.input_tokens, record.input_tokens);
        }
        other => panic!("{other:?}"),
    }
    let ledger = st.lock().ledger();
    assert!(ledger.is_clean(), "{ledger:?}");
    assert_eq!(ledger.charged.output, record.output_tokens);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_after_content_is_mid_stream_committed_and_sent_once() {
    let server = mock(MockConfig {
        faults: vec![FaultRule::always(Fault::StreamError { after_events: 4 })],
        ..roomy()
    })
    .await;
    let st = state();
    let mut svc = layer_on(st.clone(), CommitPoint::FirstByte).layer(client());
    let ended = run(&mut svc, request(&server, "s2", true)).await;
    assert_eq!(ended.action, ActionKind::Done, "the stream was handed over");
    match ended.metered.unwrap().stream().unwrap() {
        StreamOutcome::MidStream {
            cause,
            committed,
            usage_so_far,
            ..
        } => {
            assert_eq!(*cause, Cause::Overloaded);
            assert!(committed);
            assert!(usage_so_far.is_some(), "usage so far from message_start");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        sends(&server, "s2"),
        1,
        "a committed stream is never replayed"
    );
    assert_eq!(outstanding_requests(&st), 0);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_before_content_is_retried_under_first_content() {
    let server = mock(MockConfig {
        faults: vec![FaultRule::nth(Fault::StreamError { after_events: 0 }, [1])],
        ..roomy()
    })
    .await;
    let st = state();
    let mut svc = layer_on(st.clone(), CommitPoint::FirstContent).layer(client());
    let ended = run(&mut svc, request(&server, "s3", true)).await;
    assert_eq!(ended.action, ActionKind::Done);
    assert_eq!(ended.attempts, 2);
    assert_eq!(sends(&server, "s3"), 2);
    assert!(matches!(
        ended.metered.unwrap().stream().unwrap(),
        StreamOutcome::Completed { usage: Some(_) }
    ));
    let text = String::from_utf8_lossy(&ended.body);
    assert!(
        !text.contains("overloaded_error"),
        "the caller never saw the error"
    );
    assert!(text.contains("message_start") && text.contains("message_stop"));
    assert_eq!(outstanding_requests(&st), 0);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_error_under_first_byte_is_not_retried() {
    let server = mock(MockConfig {
        faults: vec![FaultRule::nth(Fault::StreamError { after_events: 0 }, [1])],
        ..roomy()
    })
    .await;
    let mut svc = layer_on(state(), CommitPoint::FirstByte).layer(client());
    let ended = run(&mut svc, request(&server, "s4", true)).await;
    assert_eq!(sends(&server, "s4"), 1);
    assert!(matches!(
        ended.metered.unwrap().stream().unwrap(),
        StreamOutcome::MidStream {
            committed: true,
            ..
        }
    ));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_is_interrupted_with_the_usage_so_far() {
    let server = mock(MockConfig {
        faults: vec![FaultRule::always(Fault::StreamCut { after_events: 4 })],
        ..roomy()
    })
    .await;
    let st = state();
    let mut svc = layer_on(st.clone(), CommitPoint::FirstByte).layer(client());
    let ended = run(&mut svc, request(&server, "s5", true)).await;
    match ended.metered.unwrap().stream().unwrap() {
        StreamOutcome::Interrupted {
            reason,
            committed,
            usage_so_far,
            ..
        } => {
            assert_eq!(*reason, InterruptReason::EndedEarly);
            assert!(committed);
            assert!(usage_so_far.is_some());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(sends(&server, "s5"), 1);
    assert_eq!(outstanding_requests(&st), 0);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_dropped_by_the_caller_settles_its_reservation() {
    let server = mock(roomy()).await;
    let st = state();
    let mut svc = layer_on(st.clone(), CommitPoint::FirstByte).layer(client());
    let resp = svc
        .ready()
        .await
        .unwrap()
        .call(request(&server, "s6", true))
        .await
        .unwrap();
    let mut body = resp.into_body();
    let _first = body.frame().await;
    assert_eq!(
        outstanding_requests(&st),
        1,
        "in flight while the body lives"
    );
    drop(body);
    let ledger = st.lock().ledger();
    assert!(ledger.is_clean(), "{ledger:?}");
    server.shutdown().await;
}
