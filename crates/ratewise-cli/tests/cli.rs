//! The `ratewise` binary end to end: every case file through
//! `explain --case --json`, the bundled samples, and bad input.

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_ratewise");
const CASES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../ratewise-core/tests/fixtures/cases"
);
const OWN_CASES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../ratewise-core/tests/fixtures/own-cases"
);
const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/samples");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run ratewise")
}

#[test]
fn every_case_file_passes_through_explain_case_json() {
    let mut seen = 0;
    let files = std::fs::read_dir(CASES)
        .unwrap()
        .chain(std::fs::read_dir(OWN_CASES).unwrap());
    for entry in files {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let out = run(&["explain", "--case", "--json", path.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let case: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let expect = &case["expect"];
        for key in [
            "cause",
            "scope",
            "action",
            "reason",
            "dimension",
            "request_id",
            "until",
        ] {
            if let Some(want) = expect.get(key) {
                assert_eq!(&got[key], want, "{}: {key}", path.display());
            }
        }
        if let Some(min) = expect.get("delay_ms_min").and_then(|v| v.as_u64()) {
            assert!(
                got["delay_ms"].as_u64().unwrap() >= min,
                "{}",
                path.display()
            );
        }
        if let Some(max) = expect.get("delay_ms_max").and_then(|v| v.as_u64()) {
            assert!(
                got["delay_ms"].as_u64().unwrap() <= max,
                "{}",
                path.display()
            );
        }
        // The documented keys are always present.
        for key in [
            "cause",
            "scope",
            "action",
            "delay_ms",
            "until",
            "reason",
            "dimension",
            "request_id",
            "hint_ms",
            "notes",
        ] {
            assert!(got.get(key).is_some(), "{}: missing {key}", path.display());
        }
        seen += 1;
    }
    assert!(seen >= 37);
}

#[test]
fn samples_explain_in_text_and_json() {
    let sample = Path::new(SAMPLES).join("anthropic-429.http");
    let out = run(&["explain", sample.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("rate_limited")
            && text.contains("input_tokens")
            && text.contains("retry-after: 8 s"),
        "{text}"
    );

    let quota = Path::new(SAMPLES).join("openai-429-quota.http");
    let out = run(&["explain", "--json", quota.to_str().unwrap()]);
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["cause"], "spend_cap");
    assert_eq!(got["action"], "stop_queue");

    // Gemini, told by its body alone: a quota per minute, not money, for
    // all its "check your plan and billing details".
    let gemini = Path::new(SAMPLES).join("gemini-429-quota.http");
    for args in [vec![], vec!["--provider", "gemini"]] {
        let mut all = vec!["explain", "--json"];
        all.extend(args);
        all.push(gemini.to_str().unwrap());
        let out = run(&all);
        let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(got["provider"], "gemini", "{got}");
        assert_eq!(got["cause"], "rate_limited", "{got}");
        assert_eq!(got["dimension"], "input_tokens", "{got}");
        // The message's precise delay (47.481 s), not `RetryInfo`'s whole
        // seconds (47 s): never shorter than either (issue #47).
        assert_eq!(got["hint_source"], "message", "{got}");
        assert_eq!(got["hint_ms"], 47_481, "{got}");
    }
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let dir = std::env::temp_dir().join(format!("ratewise-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("junk.txt");
    std::fs::write(&junk, b"\xff\xfe not http at all").unwrap();
    for args in [
        vec!["explain", junk.to_str().unwrap()],
        vec!["explain", "/definitely/not/here"],
        vec!["explain", "--case", junk.to_str().unwrap()],
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `docs/providers.md` shows `explain`'s output for a sample: it must be
/// exactly what the binary prints.
#[test]
fn the_docs_explain_block_is_what_explain_prints() {
    let docs = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/providers.md");
    let docs = std::fs::read_to_string(docs).expect("docs/providers.md");
    let command = "$ cargo run -q -p ratewise-cli -- explain crates/ratewise-cli/samples/anthropic-429.http\n";
    let at = docs.find(command).expect("the explain block") + command.len();
    let shown = &docs[at..at + docs[at..].find("```").expect("the block's end")];
    let sample = Path::new(SAMPLES).join("anthropic-429.http");
    let out = run(&["explain", sample.to_str().unwrap()]);
    assert!(out.status.success());
    assert_eq!(
        shown,
        String::from_utf8(out.stdout).unwrap(),
        "docs/providers.md's explain block differs from `ratewise explain`"
    );
}
