//! The committed seed corpora match what `ratewise_fuzz_targets::seeds`
//! builds from the fixtures. Regenerate with
//! `RATEWISE_WRITE_SEEDS=1 cargo test -p ratewise-fuzz-targets --test seeds`.

use arbitrary::{Arbitrary, Unstructured};
use ratewise_fuzz_targets::decide::DecideControl;
use ratewise_fuzz_targets::seeds::{all, read_cases, read_streams};
use ratewise_fuzz_targets::sse::SseControl;
use ratewise_fuzz_targets::TARGETS;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn committed_seeds_match_the_fixtures() {
    let cases = read_cases(&root().join("crates/ratewise-core/tests/fixtures/cases"));
    let streams = read_streams(&root().join("crates/ratewise-streaming/tests/fixtures/streams"));
    assert!(!cases.is_empty() && !streams.is_empty());
    let generated = all(&cases, &streams);
    let names: Vec<&str> = TARGETS.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        generated.keys().copied().collect::<Vec<_>>().len(),
        names.len()
    );
    let write = std::env::var_os("RATEWISE_WRITE_SEEDS").is_some();
    let mut stale = Vec::new();
    for (target, seeds) in &generated {
        assert!(names.contains(target), "{target} is not a target");
        assert!(!seeds.is_empty(), "{target} has no seeds");
        let dir = root().join("fuzz/seeds").join(target);
        if write {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
        }
        for (name, bytes) in seeds {
            let path = dir.join(name);
            if write {
                std::fs::write(&path, bytes).unwrap();
            } else if std::fs::read(&path).ok().as_ref() != Some(bytes) {
                stale.push(path.display().to_string());
            }
        }
        let on_disk = std::fs::read_dir(&dir).map_or(0, |d| d.count());
        if on_disk != seeds.len() {
            stale.push(format!(
                "{}: {on_disk} files, {} expected",
                dir.display(),
                seeds.len()
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "seed corpora out of date (rerun with RATEWISE_WRITE_SEEDS=1): {stale:#?}"
    );
}

#[test]
fn controls_round_trip_through_arbitrary() {
    let sse = SseControl {
        provider: 1,
        first_content: true,
        limits: 40,
        split_seed: 0x0102_0304_0506_0708,
        max_chunk: 3,
    };
    let bytes = [&sse.to_bytes()[..], b"rest"].concat();
    let mut u = Unstructured::new(&bytes);
    assert_eq!(SseControl::arbitrary(&mut u).unwrap(), sse);
    assert_eq!(u.take_rest(), b"rest");

    for deadline_ms in [None, Some(90_000)] {
        for max_attempts in [None, Some(5)] {
            let control = DecideControl {
                provider: 3,
                transport: 4,
                wall_secs: 1_795_953_600,
                elapsed_ms: 12_345,
                attempts: 2,
                deadline_ms,
                max_attempts,
                max_inline_wait_ms: Some(60_000),
                expected_attempt_ms: 500,
                unknown_retry: true,
                rng_seed: u64::MAX - 1,
            };
            let bytes = [control.to_bytes(), b"429\n".to_vec()].concat();
            let mut u = Unstructured::new(&bytes);
            assert_eq!(DecideControl::arbitrary(&mut u).unwrap(), control);
            assert_eq!(u.take_rest(), b"429\n");
        }
    }
}
