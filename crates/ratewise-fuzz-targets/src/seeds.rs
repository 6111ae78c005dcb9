//! Seed corpora, built from the project's fixtures: the decision cases
//! (`ratewise-core/tests/fixtures/cases/*.json`) and the recorded streams
//! (`ratewise-streaming/tests/fixtures/streams/*.sse`), plus a few
//! hand-picked edge values. `tests/seeds.rs` checks that the committed
//! files under `fuzz/seeds/<target>/` match what this module generates
//! (and rewrites them when `RATEWISE_WRITE_SEEDS=1`).

use crate::decide::DecideControl;
use crate::sse::SseControl;
use crate::wire::{write_headers, write_response};
use ratewise_core::case::Case;
use ratewise_core::classify::TransportFailure;
use ratewise_core::time::parse_rfc3339;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

/// Seed files of one target: file name → bytes.
pub type Seeds = BTreeMap<String, Vec<u8>>;

/// Hand-picked header values every header target starts from.
const EDGE_VALUES: &[&str] = &[
    "8",
    "2.5",
    ".5",
    "+3",
    "0",
    "-5",
    "NaN",
    "inf",
    "1e3",
    "soon",
    "99999999999999999999999",
    "Sun, 29 Nov 2026 12:00:30 GMT",
    "Sunday, 29-Nov-26 12:00:30 GMT",
    "Sun Nov 29 12:00:30 2026",
    "true",
    "FALSE",
    "2026-11-29T12:00:08Z",
    "2026-11-29T13:00:04.5+01:00",
];

/// Hand-picked Go durations.
const GO_DURATIONS: &[&str] = &[
    "1s",
    "6m0s",
    "1.146s",
    "16m17.764s",
    "84ms",
    "1h2m3s",
    "250us",
    "250µs",
    "7ns",
    "0",
    "0s",
    "-1s",
    "NaNs",
    "12",
    "1..2s",
    "99999999999999999999h",
];

/// Reads every decision case in `dir`, sorted by file name.
pub fn read_cases(dir: &Path) -> Vec<(String, Case)> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("case file reads");
            let case = Case::from_json(&text).unwrap_or_else(|e| panic!("{}: {e:?}", p.display()));
            (stem(&p), case)
        })
        .collect()
}

/// Reads every recorded stream in `dir` with its provider word from
/// `expected.json`, sorted by file name.
pub fn read_streams(dir: &Path) -> Vec<(String, String, Vec<u8>)> {
    let expected: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("expected.json")).expect("expected.json reads"),
    )
    .expect("expected.json is JSON");
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .expect("streams directory reads")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "sse"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|p| {
            let file = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let provider = expected[file]["provider"]
                .as_str()
                .unwrap_or("generic")
                .to_owned();
            (stem(&p), provider, std::fs::read(&p).expect("stream reads"))
        })
        .collect()
}

fn stem(p: &Path) -> String {
    p.file_stem()
        .and_then(|s| s.to_str())
        .expect("UTF-8 file name")
        .to_owned()
}

fn headers_of(case: &Case) -> &[(String, String)] {
    case.response.as_ref().map_or(&[], |r| r.headers.as_slice())
}

/// Seeds of every target, by target name.
pub fn all(
    cases: &[(String, Case)],
    streams: &[(String, String, Vec<u8>)],
) -> BTreeMap<&'static str, Seeds> {
    BTreeMap::from([
        ("retry_after", retry_after(cases)),
        ("ratelimit_headers", ratelimit_headers(cases)),
        ("openai_reset", openai_reset(cases)),
        ("error_body", error_body(cases)),
        ("sse_chunking", sse_chunking(streams)),
        ("classify_decide", classify_decide(cases)),
    ])
}

fn retry_after(cases: &[(String, Case)]) -> Seeds {
    let mut seeds = Seeds::new();
    for (name, case) in cases {
        for (h, v) in headers_of(case) {
            let h = h.to_ascii_lowercase();
            if matches!(
                h.as_str(),
                "retry-after" | "retry-after-ms" | "x-should-retry"
            ) {
                seeds.insert(format!("{name}.{h}"), v.clone().into_bytes());
            }
        }
    }
    for (i, v) in EDGE_VALUES.iter().enumerate() {
        seeds.insert(format!("edge-{i:02}"), v.as_bytes().to_vec());
    }
    seeds
}

fn ratelimit_headers(cases: &[(String, Case)]) -> Seeds {
    let mut seeds = Seeds::new();
    for (name, case) in cases {
        let rl: Vec<(String, String)> = headers_of(case)
            .iter()
            .filter(|(h, _)| {
                let h = h.to_ascii_lowercase();
                h.starts_with("anthropic-") || h.starts_with("x-ratelimit-")
            })
            .cloned()
            .collect();
        if !rl.is_empty() {
            seeds.insert(name.clone(), write_headers(&rl));
        }
    }
    let edges: Vec<(String, String)> = EDGE_VALUES
        .iter()
        .zip(
            [
                "anthropic-ratelimit-tokens-remaining",
                "x-ratelimit-reset-requests",
                "anthropic-priority-input-tokens-reset",
            ]
            .iter()
            .cycle(),
        )
        .map(|(v, h)| ((*h).to_owned(), (*v).to_owned()))
        .collect();
    seeds.insert("edge-values".to_owned(), write_headers(&edges));
    seeds
}

fn openai_reset(cases: &[(String, Case)]) -> Seeds {
    let mut seeds = Seeds::new();
    for (name, case) in cases {
        for (h, v) in headers_of(case) {
            if let Some(which) = h.to_ascii_lowercase().strip_prefix("x-ratelimit-reset-") {
                seeds.insert(format!("{name}.{which}"), v.clone().into_bytes());
            }
        }
    }
    for (i, v) in GO_DURATIONS.iter().enumerate() {
        seeds.insert(format!("edge-{i:02}"), v.as_bytes().to_vec());
    }
    seeds
}

fn error_body(cases: &[(String, Case)]) -> Seeds {
    let mut seeds = Seeds::new();
    for (name, case) in cases {
        if let Some(r) = &case.response {
            if !r.body.is_empty() {
                seeds.insert(name.clone(), r.body.clone().into_bytes());
            }
        }
    }
    seeds.insert(
        "html".to_owned(),
        b"<html><body>502 Bad Gateway</body></html>".to_vec(),
    );
    seeds.insert(
        "deep".to_owned(),
        [&b"{\"error\":"[..], &[b'['; 200], &[b']'; 200], b"}"].concat(),
    );
    seeds
}

fn sse_chunking(streams: &[(String, String, Vec<u8>)]) -> Seeds {
    let mut seeds = Seeds::new();
    for (i, (name, provider, bytes)) in streams.iter().enumerate() {
        let provider = match provider.as_str() {
            "anthropic" => 0,
            "openai" => 1,
            _ => 2,
        };
        for (suffix, first_content, limits, max_chunk) in
            [("", false, 0, 7), (".first-content-tight", true, 40, 3)]
        {
            let control = SseControl {
                provider,
                first_content,
                limits,
                split_seed: i as u64 + 1,
                max_chunk,
            };
            seeds.insert(
                format!("{name}{suffix}"),
                [&control.to_bytes()[..], bytes].concat(),
            );
        }
    }
    seeds
}

fn classify_decide(cases: &[(String, Case)]) -> Seeds {
    let mut seeds = Seeds::new();
    for (name, case) in cases {
        let provider = match case.provider.as_str() {
            "anthropic" => 0,
            "openai" => 1,
            "generic" => 2,
            _ => 3,
        };
        let transport = case.transport.map_or(0, |t| {
            1 + TransportFailure::ALL
                .iter()
                .position(|x| *x == t)
                .unwrap_or(0) as u8
        });
        let wall_secs = parse_rfc3339(&case.now)
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs() as u32);
        let control = DecideControl {
            provider,
            transport,
            wall_secs,
            elapsed_ms: case.job.elapsed_ms as u32,
            attempts: case.job.attempts,
            deadline_ms: case.job.deadline_ms.map(|ms| ms as u32),
            max_attempts: case.policy.max_attempts.map(|n| n as u8),
            max_inline_wait_ms: case.policy.max_inline_wait_ms.map(|ms| ms as u32),
            expected_attempt_ms: 0,
            unknown_retry: false,
            rng_seed: 7,
        };
        let response = case.response.as_ref().map_or_else(Vec::new, |r| {
            write_response(r.status, &r.headers, r.body.as_bytes())
        });
        seeds.insert(name.clone(), [control.to_bytes(), response].concat());
    }
    seeds
}
