//! Property: decoding is independent of chunking. Any split of any input
//! (recorded streams, and synthetic streams built from the tricky pieces of
//! the format) yields the same events, the same error and the same state.

mod common;

use proptest::prelude::*;
use ratewise_streaming::sse::{SseDecoder, SseError, SseEvent, SseLimits};
use ratewise_streaming::{CommitPoint, StreamEvent};

#[derive(Debug, PartialEq)]
struct Decoded {
    events: Vec<SseEvent>,
    error: Option<SseError>,
    retry: Option<u64>,
    last_id: String,
    discarded: bool,
}

fn decode(limits: SseLimits, input: &[u8], cuts: &[usize]) -> Decoded {
    let mut d = SseDecoder::with_limits(limits);
    let mut events = Vec::new();
    let mut error = None;
    let mut at = 0;
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.push(input.len());
    for cut in cuts {
        if let Err(e) = d.push_into(&input[at..cut], &mut events) {
            error = Some(e);
        }
        at = cut;
    }
    Decoded {
        events,
        error,
        retry: d.reconnection_time(),
        last_id: d.last_event_id().to_owned(),
        discarded: error.is_none() && d.finish(),
    }
}

fn piece() -> impl Strategy<Value = &'static [u8]> {
    prop::sample::select(vec![
        &b"data: "[..],
        b"data:",
        b"data",
        b"event: ",
        b"event: x",
        b"id: 7",
        b"id: a\0b",
        b"retry: 250",
        b"retry: 2x",
        b":",
        b": comment",
        b" ",
        b"\r",
        b"\n",
        b"\r\n",
        b"\n\n",
        b"\r\r",
        b"abc",
        "✓".as_bytes(),
        b"\xE2\x9C",
        b"\xEF\xBB\xBF",
        b"{\"type\":\"ping\"}",
    ])
}

fn synthetic() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(piece(), 0..60).prop_map(|ps| ps.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn synthetic_streams_decode_the_same_under_any_chunking(
        input in synthetic(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let limits = SseLimits::default();
        prop_assert_eq!(decode(limits, &input, &cuts), decode(limits, &input, &[]));
    }

    #[test]
    fn limit_errors_are_independent_of_chunking(
        input in synthetic(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
        max_line_len in 4usize..40,
        max_event_len in 4usize..60,
    ) {
        let limits = SseLimits { max_line_len, max_event_len };
        prop_assert_eq!(decode(limits, &input, &cuts), decode(limits, &input, &[]));
    }

    #[test]
    fn recorded_streams_give_identical_typed_events_under_any_chunking(
        which in any::<prop::sample::Index>(),
        cuts in prop::collection::vec(any::<usize>(), 0..24),
    ) {
        let all = common::recorded();
        let rec = &all[which.index(all.len())];
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (rec.bytes.len() + 1)).collect();
        cuts.sort_unstable();
        cuts.push(rec.bytes.len());
        let mut chunks = Vec::new();
        let mut at = 0;
        for cut in cuts {
            chunks.push(&rec.bytes[at..cut]);
            at = cut;
        }
        let (events, outcome, _) = common::run(rec.provider, CommitPoint::FirstByte, chunks.iter().copied());
        let (whole, whole_outcome, _) = common::run(rec.provider, CommitPoint::FirstByte, [&rec.bytes[..]]);
        prop_assert_eq!(&events, &whole);
        prop_assert_eq!(outcome, whole_outcome);
        // Every Anthropic event in the recordings is one the interpreter knows.
        let unknown = rec.name.starts_with("anthropic")
            && events.iter().any(|e| matches!(e, StreamEvent::Other { .. }));
        prop_assert!(!unknown, "unknown event in {}", rec.name);
    }
}
