//! A stream cut mid-way is charged what was delivered: the usage reported
//! so far or ⌈delivered text bytes / 4⌉, whichever is larger, capped at
//! `max_tokens` — compared with what the mock provider billed for the same
//! stream (the tokens of the events it sent). Never the 1 output token of
//! Anthropic's `message_start`, never the whole `max_tokens` reservation.

mod common;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use ratewise_core::admit::Shared;
use ratewise_core::record::AttemptRecord;
use ratewise_core::{ActionKind, Cause};
use ratewise_mock::{Fault, FaultRule, MockConfig, MockServer, OutputRange};
use ratewise_streaming::StreamOutcome;
use ratewise_tower::{written, Written};
use ratewise_tower::{Config, JobId, Journal, RetryLayer, TokioClock};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tower::{Layer, Service, ServiceExt};

/// The request's `max_tokens`.
const MAX_TOKENS: u64 = 1024;
/// Every answer is this long (tokens), so a cut is well inside it.
const ANSWER: u64 = 400;
/// Content deltas sent before the cut (the mock sends 4 tokens per delta):
/// 100 tokens delivered.
const DELTAS: usize = 25;

/// The records the layer journals, as the proxy's hook would see them.
#[derive(Default)]
struct Log {
    ended: Mutex<Vec<AttemptRecord>>,
    streams_ended: Mutex<Vec<AttemptRecord>>,
}

impl Journal for Log {
    fn attempt_started<'a>(&'a self, _: &'a str, _: u32, _: SystemTime) -> Written<'a> {
        written(Ok::<(), std::io::Error>(()))
    }
    fn attempt_ended<'a>(&'a self, record: &'a AttemptRecord) -> Written<'a> {
        self.ended.lock().unwrap().push(record.clone());
        written(Ok::<(), std::io::Error>(()))
    }
    fn stream_ended(&self, record: &AttemptRecord) {
        self.streams_ended.lock().unwrap().push(record.clone());
    }
}

fn cut_mock(fault: Fault) -> MockConfig {
    let mut config = roomy();
    config.openai_limits = config.anthropic_limits;
    config.output_tokens = OutputRange {
        min: ANSWER,
        max: ANSWER,
    };
    config.faults = vec![FaultRule::always(fault)];
    config
}

/// A layer that detects the provider from each answer, journaling to `log`.
fn layer(state: Arc<Shared>, log: Arc<Log>) -> RetryLayer {
    let mut config = Config::default();
    config.policy = fast_policy();
    config.provider = None;
    RetryLayer::builder()
        .config(config)
        .store(state)
        .clock(Arc::new(TokioClock::new()))
        .journal(log)
        .build()
        .unwrap()
}

fn anthropic(server: &MockServer, job: &str) -> http::Request<Full<Bytes>> {
    let mut req = http::Request::post(format!("{}/v1/messages", server.base_url()))
        .header("content-type", "application/json")
        .header("x-api-key", "sk-ant-test")
        .body(Full::new(anthropic_body(MAX_TOKENS, true)))
        .unwrap();
    req.extensions_mut().insert(JobId::new(job));
    req
}

fn openai(server: &MockServer, job: &str) -> http::Request<Full<Bytes>> {
    let body = serde_json::json!({"model": "gpt-4o-mini", "max_completion_tokens": MAX_TOKENS,
        "stream": true, "messages": [{"role": "user", "content": "say a lot"}]});
    let mut req = http::Request::post(format!("{}/v1/chat/completions", server.base_url()))
        .header("content-type", "application/json")
        .header("authorization", "Bearer sk-test")
        .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
        .unwrap();
    req.extensions_mut().insert(JobId::new(job));
    req
}

/// Output tokens the layer charged, with the ledger checked whole.
fn charged_output(state: &Shared) -> u64 {
    let ledger = state.lock().ledger();
    assert!(ledger.is_clean(), "the stream settled, once: {ledger:?}");
    ledger.charged.output
}

/// `charged` is within 10 % of what the mock billed, and neither of the
/// two wrong answers (1 token, the whole `max_tokens`).
fn assert_close(what: &str, charged: u64, billed: u64) {
    eprintln!("{what}: charged {charged} output tokens, the mock billed {billed}");
    assert!(billed > 1 && billed < MAX_TOKENS, "{what}: a real cut");
    let off = charged.abs_diff(billed) as f64 / billed as f64;
    assert!(off <= 0.10, "{what}: charged {charged}, mock {billed}");
    assert_ne!(charged, 1, "{what}: not message_start's count");
    assert_ne!(charged, MAX_TOKENS, "{what}: not the reservation");
}

/// One cut stream through the layer: (charged, billed by the mock, journal).
async fn cut(fault: Fault, openai_api: bool) -> (u64, u64, Arc<Log>, StreamOutcome) {
    let server = mock(cut_mock(fault)).await;
    let st = state();
    let log = Arc::new(Log::default());
    let mut svc = layer(st.clone(), log.clone()).layer(client());
    let req = if openai_api {
        openai(&server, "cut")
    } else {
        anthropic(&server, "cut")
    };
    let ended = run(&mut svc, req).await;
    assert_eq!(ended.action, ActionKind::Done, "the stream was handed over");
    let outcome = ended.metered.unwrap().stream().cloned().unwrap();
    let billed = server.with_model(|m| m.settled());
    assert_eq!(billed.requests, 1);
    server.shutdown().await;
    (charged_output(&st), billed.output_tokens, log, outcome)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_stream_cut_after_n_events_is_charged_what_was_delivered() {
    // message_start, content_block_start, ping, then the deltas.
    let (charged, billed, log, outcome) = cut(
        Fault::StreamCut {
            after_events: 3 + DELTAS,
        },
        false,
    )
    .await;
    assert!(
        matches!(outcome, StreamOutcome::Interrupted { .. }),
        "{outcome:?}"
    );
    assert_eq!(outcome.usage().map(|u| u.output_tokens), Some(1));
    assert_eq!(billed, 4 * DELTAS as u64);
    assert_close("anthropic cut", charged, billed);
    // Input: what message_start reported.
    let ended = log.streams_ended.lock().unwrap().clone();
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].cause, Cause::MidStream);
    let usage = ended[0].usage.unwrap();
    assert_eq!(usage.input_tokens, outcome.usage().unwrap().input_tokens);
    assert_eq!(usage.output_tokens, charged);
    // The answer itself was journaled once, as the success its head was.
    let heads = log.ended.lock().unwrap().clone();
    assert_eq!(heads.len(), 1);
    assert_eq!(heads[0].cause, Cause::Success);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_chat_stream_cut_after_n_events_is_charged_what_was_delivered() {
    // The role chunk, then the deltas; no usage before the end.
    let (charged, billed, log, outcome) = cut(
        Fault::StreamCut {
            after_events: 1 + DELTAS,
        },
        true,
    )
    .await;
    assert_eq!(outcome.usage(), None, "{outcome:?}");
    assert_eq!(billed, 4 * DELTAS as u64);
    assert_close("openai chat cut", charged, billed);
    let ended = log.streams_ended.lock().unwrap().clone();
    assert_eq!(ended[0].cause, Cause::MidStream);
    assert!(
        ended[0].usage.unwrap().input_tokens > 0,
        "input: the reservation's estimate"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_failing_in_band_is_charged_what_was_delivered() {
    for openai_api in [false, true] {
        let skip = if openai_api { 1 } else { 3 };
        let (charged, billed, log, outcome) = cut(
            Fault::StreamError {
                after_events: skip + DELTAS,
            },
            openai_api,
        )
        .await;
        assert!(
            matches!(outcome, StreamOutcome::MidStream { .. }),
            "{outcome:?}"
        );
        assert_close(
            if openai_api {
                "openai chat in-band error"
            } else {
                "anthropic in-band error"
            },
            charged,
            billed,
        );
        let ended = log.streams_ended.lock().unwrap().clone();
        assert_eq!(ended[0].cause, Cause::MidStream);
        assert!(ended[0].error_type.is_some(), "the in-band error's type");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_stream_is_charged_its_usage_and_journaled_as_success() {
    let server = mock(cut_mock(Fault::StreamCut {
        after_events: 10_000,
    }))
    .await;
    let st = state();
    let log = Arc::new(Log::default());
    let mut svc = layer(st.clone(), log.clone()).layer(client());
    let ended = run(&mut svc, anthropic(&server, "whole")).await;
    assert!(matches!(
        ended.metered.unwrap().stream().unwrap(),
        StreamOutcome::Completed { .. }
    ));
    assert_eq!(charged_output(&st), ANSWER);
    let streams = log.streams_ended.lock().unwrap().clone();
    assert_eq!(streams.len(), 1);
    assert_eq!(streams[0].cause, Cause::Success);
    assert_eq!(streams[0].usage.map(|u| u.output_tokens), Some(ANSWER));
    server.shutdown().await;
}

/// Complete SSE events in `bytes` that are content deltas.
fn whole_deltas(bytes: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(bytes);
    let mut events: Vec<&str> = text.split("\n\n").collect();
    events.pop(); // after the last blank line: an incomplete event, or nothing
    events
        .iter()
        .filter(|e| e.contains("content_block_delta"))
        .count() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_drops_the_stream_midway_is_charged_what_it_read() {
    let server = mock(cut_mock(Fault::StreamCut {
        after_events: 10_000,
    }))
    .await;
    let st = state();
    let log = Arc::new(Log::default());
    let mut svc = layer(st.clone(), log.clone()).layer(client());
    let resp = svc
        .ready()
        .await
        .unwrap()
        .call(anthropic(&server, "drop"))
        .await
        .expect("a stream");
    let mut body = resp.into_body();
    let mut read = Vec::new();
    while whole_deltas(&read) < DELTAS as u64 {
        let frame = body.frame().await.expect("more").expect("data");
        read.extend_from_slice(frame.data_ref().unwrap());
    }
    drop(body);
    // The meter saw exactly what the caller read: 4 tokens per whole delta.
    let delivered = 4 * whole_deltas(&read);
    let charged = charged_output(&st);
    assert_close("caller dropped the stream", charged, delivered);
    let streams = log.streams_ended.lock().unwrap().clone();
    assert_eq!(streams[0].cause, Cause::MidStream);
    server.shutdown().await;
}
