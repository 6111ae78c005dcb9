//! The body adapter: typed events from an `http_body::Body`, ending in the
//! outcome, including a body that fails or ends early.

mod common;

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body::Frame;
use http_body_util::{Channel, StreamBody};
use ratewise_core::{Cause, Provider};
use ratewise_streaming::{
    InterruptReason, SseStream, StreamError, StreamEvent, StreamOutcome, TrackerConfig,
};

type Frames = Vec<Result<Frame<Bytes>, std::io::Error>>;

fn frames(chunks: &[&[u8]]) -> Frames {
    chunks
        .iter()
        .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
        .collect()
}

async fn drain<S>(stream: &mut S) -> (Vec<StreamEvent>, Vec<String>)
where
    S: futures::Stream<Item = Result<StreamEvent, StreamError>> + Unpin,
{
    let mut events = Vec::new();
    let mut errors = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(e) => events.push(e),
            Err(e) => errors.push(e.to_string()),
        }
    }
    (events, errors)
}

fn recorded(name: &str) -> common::Recorded {
    common::recorded()
        .into_iter()
        .find(|r| r.name == name)
        .unwrap()
}

#[tokio::test]
async fn recorded_streams_through_stream_body() {
    for rec in common::recorded() {
        let chunks: Vec<&[u8]> = rec.bytes.chunks(5).collect();
        let body = StreamBody::new(futures::stream::iter(frames(&chunks)));
        let mut stream = SseStream::new(body, rec.provider, TrackerConfig::default());
        assert!(stream.outcome().is_none());
        let (events, errors) = drain(&mut stream).await;
        assert!(errors.is_empty(), "{}: {errors:?}", rec.name);
        common::check(&rec, &events, stream.outcome().unwrap(), "body");
        // Fused: polling after the end keeps returning None.
        assert!(stream.next().await.is_none());
    }
}

#[tokio::test]
async fn error_mid_body_is_interrupted_with_usage_so_far() {
    let rec = recorded("anthropic-complete.sse");
    // Cut right after the second text delta.
    let cut = String::from_utf8(rec.bytes.clone())
        .unwrap()
        .find("event: content_block_stop")
        .unwrap();
    let mut items: Frames = frames(&[&rec.bytes[..cut]]);
    items.push(Err(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "reset",
    )));
    // Anything after the error is never read.
    items.extend(frames(&[&rec.bytes[cut..]]));
    let body = StreamBody::new(futures::stream::iter(items));
    let mut stream = SseStream::new(body, Provider::Anthropic, TrackerConfig::default());
    let (events, errors) = drain(&mut stream).await;
    assert_eq!(errors.len(), 1);
    assert!(errors[0].contains("reset"));
    assert_eq!(common::text(&events), "Hello, world ✓");
    match stream.outcome().unwrap() {
        StreamOutcome::Interrupted {
            reason,
            committed,
            content_delivered,
            usage_so_far,
            ..
        } => {
            assert_eq!(*reason, InterruptReason::BodyError);
            assert!(*committed && *content_delivered);
            let u = usage_so_far.unwrap();
            assert_eq!((u.input_tokens, u.cache_read_input_tokens), (472, 2048));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn clean_end_without_message_stop_is_interrupted() {
    let rec = recorded("anthropic-complete.sse");
    let s = String::from_utf8(rec.bytes.clone()).unwrap();
    let cut = s.find("event: message_stop").unwrap();
    let body = StreamBody::new(futures::stream::iter(frames(&[&rec.bytes[..cut]])));
    let mut stream = SseStream::new(body, Provider::Anthropic, TrackerConfig::default());
    let (events, errors) = drain(&mut stream).await;
    assert!(errors.is_empty());
    assert!(events
        .iter()
        .any(|e| matches!(e, StreamEvent::UsageUpdate(_))));
    match stream.outcome().unwrap() {
        StreamOutcome::Interrupted {
            reason,
            usage_so_far,
            ..
        } => {
            assert_eq!(*reason, InterruptReason::EndedEarly);
            assert_eq!(usage_so_far.unwrap().output_tokens, 37);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn channel_body_fed_from_another_task() {
    let rec = recorded("openai-chat-complete-with-usage.sse");
    let (mut tx, body) = Channel::<Bytes, std::io::Error>::new(2);
    let bytes = rec.bytes.clone();
    let producer = tokio::spawn(async move {
        for chunk in bytes.chunks(3) {
            tx.send_data(Bytes::copy_from_slice(chunk)).await.unwrap();
            tokio::task::yield_now().await;
        }
    });
    let mut stream = SseStream::new(body, Provider::Openai, TrackerConfig::default());
    let (events, errors) = tokio::time::timeout(Duration::from_secs(60), drain(&mut stream))
        .await
        .expect("stream ends");
    producer.await.unwrap();
    assert!(errors.is_empty());
    common::check(&rec, &events, stream.outcome().unwrap(), "channel");
}

#[tokio::test]
async fn channel_abort_after_content_is_interrupted_and_committed() {
    let (mut tx, body) = Channel::<Bytes, std::io::Error>::new(4);
    tx.send_data(Bytes::from_static(
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\ndata: {\"choi",
    ))
    .await
    .unwrap();
    tx.abort(std::io::Error::other("peer went away"));
    let mut stream = SseStream::new(body, Provider::Openai, TrackerConfig::default());
    let (events, errors) = drain(&mut stream).await;
    assert_eq!(common::text(&events), "Hel");
    assert_eq!(errors.len(), 1);
    let outcome = stream.outcome().unwrap();
    assert_eq!(outcome.as_str(), "interrupted");
    assert!(outcome.committed() && !outcome.replayable());
}

#[tokio::test]
async fn in_band_error_is_an_event_and_the_outcome_names_its_cause() {
    let rec = recorded("anthropic-overloaded-mid-stream.sse");
    let body = StreamBody::new(futures::stream::iter(frames(&[&rec.bytes])));
    let mut stream = SseStream::new(body, Provider::Anthropic, TrackerConfig::default());
    let (events, errors) = drain(&mut stream).await;
    assert!(errors.is_empty());
    let Some(StreamEvent::Error(err)) = events.last() else {
        panic!("{events:?}")
    };
    assert_eq!(err.cause, Cause::Overloaded);
    assert_eq!(err.error_type.as_deref(), Some("overloaded_error"));
    assert_eq!(stream.outcome().unwrap().cause(), Some(Cause::Overloaded));
}

#[tokio::test]
async fn overlong_line_ends_the_stream_with_a_decode_error() {
    let mut config = TrackerConfig::default();
    config.limits = ratewise_streaming::SseLimits {
        max_line_len: 64,
        max_event_len: 1024,
    };
    let mut big = b"data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\ndata: ".to_vec();
    big.extend(std::iter::repeat_n(b'x', 200));
    let body = StreamBody::new(futures::stream::iter(frames(&[&big])));
    let mut stream = SseStream::new(body, Provider::Openai, config);
    let (events, errors) = drain(&mut stream).await;
    assert_eq!(common::text(&events), "ok");
    assert_eq!(errors.len(), 1);
    assert!(matches!(
        stream.outcome().unwrap(),
        StreamOutcome::Interrupted {
            reason: InterruptReason::Decode(_),
            ..
        }
    ));
}

#[tokio::test]
async fn byte_stream_source() {
    let rec = recorded("openai-responses-failed.sse");
    let chunks: Vec<Result<Bytes, std::io::Error>> = rec
        .bytes
        .chunks(11)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let mut stream = SseStream::from_stream(
        futures::stream::iter(chunks),
        Provider::Openai,
        TrackerConfig::default(),
    );
    let (events, _) = drain(&mut stream).await;
    common::check(&rec, &events, stream.outcome().unwrap(), "byte stream");
}

#[tokio::test]
async fn with_outcome_ends_in_the_outcome() {
    use ratewise_streaming::StreamItem;
    let rec = recorded("openai-chat-error-mid-stream.sse");
    let mut items: Frames = frames(&[&rec.bytes]);
    items.push(Err(std::io::Error::other("closed")));
    let body = StreamBody::new(futures::stream::iter(items));
    let items: Vec<StreamItem> = SseStream::new(body, Provider::Openai, TrackerConfig::default())
        .with_outcome()
        .collect()
        .await;
    let n = items.len();
    assert!(matches!(
        items[n - 2],
        StreamItem::Failed(StreamError::Body(_))
    ));
    let StreamItem::End(outcome) = &items[n - 1] else {
        panic!("{items:?}")
    };
    // The in-band error came first: the later transport error changes nothing.
    assert_eq!(outcome.cause(), Some(Cause::ServerError));
    assert!(outcome.committed());
}
