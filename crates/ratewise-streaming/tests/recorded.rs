//! Every recorded stream, fed at every split point and one byte at a time,
//! yields the same events and the outcome `expected.json` names.

mod common;

use common::{check, recorded, run};
use ratewise_streaming::{CommitPoint, StreamOutcome};

#[test]
fn whole_stream_matches_expectation() {
    for rec in recorded() {
        let (events, outcome, _) = run(rec.provider, CommitPoint::FirstByte, [&rec.bytes[..]]);
        check(&rec, &events, &outcome, "whole");
    }
}

#[test]
fn every_split_point_gives_the_same_events_and_outcome() {
    for rec in recorded() {
        let (whole, whole_outcome, _) = run(rec.provider, CommitPoint::FirstByte, [&rec.bytes[..]]);
        for split in 0..=rec.bytes.len() {
            let (a, b) = rec.bytes.split_at(split);
            let (events, outcome, _) = run(rec.provider, CommitPoint::FirstByte, [a, b]);
            assert_eq!(events, whole, "{} split at {split}", rec.name);
            assert_eq!(outcome, whole_outcome, "{} split at {split}", rec.name);
            check(&rec, &events, &outcome, &format!("split at {split}"));
        }
    }
}

#[test]
fn one_byte_at_a_time() {
    for rec in recorded() {
        let (whole, _, _) = run(rec.provider, CommitPoint::FirstByte, [&rec.bytes[..]]);
        let (events, outcome, _) = run(rec.provider, CommitPoint::FirstByte, rec.bytes.chunks(1));
        assert_eq!(events, whole, "{}", rec.name);
        check(&rec, &events, &outcome, "byte by byte");
    }
}

#[test]
fn first_content_commit_point_leaves_content_free_errors_replayable() {
    for rec in recorded() {
        let (events, outcome, _) =
            run(rec.provider, CommitPoint::FirstContent, rec.bytes.chunks(7));
        // Same facts as under FirstByte, except when it committed.
        let mut expect = rec.expect.clone();
        expect.as_object_mut().unwrap().remove("committed");
        let rec2 = common::Recorded { expect, ..rec };
        check(&rec2, &events, &outcome, "first content");
        match &outcome {
            StreamOutcome::Completed { .. } => assert!(outcome.committed()),
            StreamOutcome::MidStream {
                committed,
                content_delivered,
                ..
            }
            | StreamOutcome::Interrupted {
                committed,
                content_delivered,
                ..
            } => {
                assert_eq!(committed, content_delivered, "{}", rec2.name);
                assert_eq!(outcome.replayable(), !content_delivered, "{}", rec2.name);
            }
            other => panic!("{}: unexpected outcome {other:?}", rec2.name),
        }
    }
}

#[test]
fn first_byte_never_replays_a_failed_stream_that_sent_bytes() {
    for rec in recorded() {
        let (_, outcome, _) = run(rec.provider, CommitPoint::FirstByte, [&rec.bytes[..]]);
        assert!(outcome.committed(), "{}", rec.name);
        assert!(!outcome.replayable(), "{}", rec.name);
    }
}

#[test]
fn events_delivered_counts_events_before_the_error() {
    for rec in recorded() {
        let (events, outcome, tracker) =
            run(rec.provider, CommitPoint::FirstByte, [&rec.bytes[..]]);
        assert_eq!(tracker.events_delivered(), events.len() as u64);
        if let StreamOutcome::MidStream {
            events_delivered, ..
        } = outcome
        {
            let at = events.iter().position(|e| e.is_terminal()).unwrap();
            assert_eq!(events_delivered, at as u64, "{}", rec.name);
        }
    }
}

#[test]
fn a_transport_failure_after_the_end_event_is_still_completed() {
    for rec in recorded() {
        let (_, clean, tracker) = run(rec.provider, CommitPoint::FirstByte, [&rec.bytes[..]]);
        let failed = tracker.outcome(false);
        match clean {
            StreamOutcome::Completed { .. } | StreamOutcome::MidStream { .. } => {
                assert_eq!(failed, clean, "{}", rec.name)
            }
            StreamOutcome::Interrupted { .. } => assert!(matches!(
                failed,
                StreamOutcome::Interrupted {
                    reason: ratewise_streaming::InterruptReason::BodyError,
                    ..
                }
            )),
            other => panic!("{}: unexpected outcome {other:?}", rec.name),
        }
    }
}

/// A failed recorded stream counts the bytes of the text it delivered (the
/// recordings carry text deltas only), whatever the chunking: the count a
/// cut stream is charged from.
#[test]
fn a_failed_stream_counts_the_text_it_delivered() {
    for rec in recorded() {
        let (events, outcome, _) = run(rec.provider, CommitPoint::FirstByte, [&rec.bytes[..]]);
        let (_, bytewise, _) = run(rec.provider, CommitPoint::FirstByte, rec.bytes.chunks(1));
        if matches!(outcome, StreamOutcome::Completed { .. }) {
            assert_eq!(outcome.delivered_text_bytes(), None, "{}", rec.name);
            continue;
        }
        let text = common::text(&events);
        assert_eq!(
            outcome.delivered_text_bytes(),
            Some(text.len() as u64),
            "{}",
            rec.name
        );
        assert_eq!(
            bytewise.delivered_text_bytes(),
            outcome.delivered_text_bytes()
        );
    }
}
