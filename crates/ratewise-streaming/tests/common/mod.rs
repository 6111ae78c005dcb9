//! Shared helpers for the integration tests: read the recorded streams and
//! run them through a tracker with a given chunking.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use ratewise_core::Provider;
use ratewise_streaming::{CommitPoint, StreamEvent, StreamOutcome, StreamTracker, TrackerConfig};
use serde_json::Value;

/// The project's copy of the recorded streams.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/streams")
}

/// The shared folder beside the checkout (absent on a user's machine).
pub fn shared_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/streams"
    ))
}

/// One recorded stream and what it must yield.
pub struct Recorded {
    pub name: String,
    pub provider: Provider,
    pub bytes: Vec<u8>,
    pub expect: Value,
}

/// Every recorded stream named in `expected.json` (which must name them all).
pub fn recorded() -> Vec<Recorded> {
    let dir = fixtures_dir();
    let expected: Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    let expected = expected.as_object().expect("expected.json is an object");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".sse"))
        .collect();
    on_disk.sort();
    let mut named: Vec<String> = expected.keys().cloned().collect();
    named.sort();
    assert_eq!(
        on_disk, named,
        "every .sse file has an expectation and vice versa"
    );
    named
        .into_iter()
        .map(|name| {
            let expect = expected[&name].clone();
            let provider = Provider::from_word(expect["provider"].as_str().unwrap()).unwrap();
            Recorded {
                bytes: std::fs::read(dir.join(&name)).unwrap(),
                name,
                provider,
                expect,
            }
        })
        .collect()
}

/// Feeds `chunks` in order; returns the events and the outcome of a clean end.
pub fn run<'a>(
    provider: Provider,
    point: CommitPoint,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> (Vec<StreamEvent>, StreamOutcome, StreamTracker) {
    let mut config = TrackerConfig::default();
    config.commit_point = point;
    let mut tracker = StreamTracker::new(provider, config);
    let mut events = Vec::new();
    for chunk in chunks {
        tracker
            .push(chunk, &mut events)
            .expect("recorded streams decode");
    }
    let outcome = tracker.outcome(true);
    (events, outcome, tracker)
}

/// The concatenated text of all text deltas.
pub fn text(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// Checks an outcome (and the events' text) against an `expected.json` entry.
pub fn check(rec: &Recorded, events: &[StreamEvent], outcome: &StreamOutcome, how: &str) {
    let ctx = format!("{} ({how})", rec.name);
    let e = &rec.expect;
    assert_eq!(
        outcome.as_str(),
        e["outcome"].as_str().unwrap(),
        "{ctx}: {outcome:?}"
    );
    if let Some(cause) = e.get("cause") {
        assert_eq!(
            outcome.cause().map(|c| c.as_str()),
            cause.as_str(),
            "{ctx}: cause"
        );
    }
    if let Some(committed) = e.get("committed") {
        assert_eq!(
            Some(outcome.committed()),
            committed.as_bool(),
            "{ctx}: committed"
        );
    }
    if let Some(delivered) = e.get("content_delivered") {
        assert_eq!(
            outcome.content_delivered(),
            delivered.as_bool(),
            "{ctx}: content_delivered"
        );
    }
    if let Some(t) = e.get("text") {
        assert_eq!(text(events), t.as_str().unwrap(), "{ctx}: text");
    }
    for key in ["usage", "usage_so_far"] {
        let Some(want) = e.get(key).and_then(Value::as_object) else {
            continue;
        };
        let got = outcome.usage().unwrap_or_else(|| panic!("{ctx}: no usage"));
        let got = serde_json::to_value(got).unwrap();
        for (field, value) in want {
            assert_eq!(&got[field], value, "{ctx}: {key}.{field}");
        }
    }
}
