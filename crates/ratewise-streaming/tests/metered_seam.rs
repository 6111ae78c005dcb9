//! The seam a metered body uses: feed frames to a `StreamTracker` without
//! handing it the body, hold frames back under `FirstContent` until the
//! tracker commits, and read the outcome at the end.

mod common;

use ratewise_core::Cause;
use ratewise_streaming::{CommitPoint, StreamTracker, TrackerConfig};

/// What a metered body would do: returns (bytes released to the caller,
/// outcome). Frames are held while uncommitted.
fn meter(
    rec: &common::Recorded,
    point: CommitPoint,
    frame_len: usize,
) -> (Vec<u8>, ratewise_streaming::StreamOutcome) {
    let mut config = TrackerConfig::default();
    config.commit_point = point;
    let mut tracker = StreamTracker::new(rec.provider, config);
    let mut held = Vec::new();
    let mut released = Vec::new();
    for frame in rec.bytes.chunks(frame_len) {
        tracker.observe(frame).unwrap();
        held.extend_from_slice(frame);
        if tracker.committed() {
            released.append(&mut held);
        }
    }
    (released, tracker.outcome(true))
}

#[test]
fn first_content_holds_an_error_before_content_and_allows_retry() {
    for name in [
        "anthropic-overloaded-first-frame.sse",
        "openai-responses-error-event.sse",
    ] {
        let rec = common::recorded()
            .into_iter()
            .find(|r| r.name == name)
            .unwrap();
        for frame_len in [1, 3, 64, usize::MAX / 2] {
            let (released, outcome) = meter(&rec, CommitPoint::FirstContent, frame_len);
            assert!(released.is_empty(), "{name}: nothing reached the caller");
            assert!(outcome.replayable(), "{name}");
            assert!(outcome.cause().is_some_and(Cause::is_retryable), "{name}");
            // Under the default policy the same stream is committed.
            let (released, outcome) = meter(&rec, CommitPoint::FirstByte, frame_len);
            assert_eq!(released, rec.bytes);
            assert!(outcome.committed() && !outcome.replayable());
        }
    }
}

#[test]
fn first_content_releases_everything_once_content_arrives() {
    for rec in common::recorded() {
        let (released, outcome) = meter(&rec, CommitPoint::FirstContent, 10);
        if outcome.committed() {
            // Once committed, every byte up to the end went out, in order.
            assert_eq!(released, rec.bytes, "{}", rec.name);
        } else {
            assert!(released.is_empty(), "{}", rec.name);
        }
    }
}

#[test]
fn usage_for_settling_the_reservation() {
    let rec = common::recorded()
        .into_iter()
        .find(|r| r.name == "anthropic-complete.sse")
        .unwrap();
    let (_, outcome) = meter(&rec, CommitPoint::FirstByte, 17);
    let usage = outcome.usage().unwrap();
    assert_eq!(usage.rate_limited_input(), 472);
    assert_eq!(usage.total_tokens(), 472 + 2048 + 37);
}
