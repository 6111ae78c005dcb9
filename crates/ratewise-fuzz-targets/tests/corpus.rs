//! Every committed seed and crash regression, and every file of a local
//! fuzzing corpus when one exists, through the same target bodies the
//! fuzzer runs. On stable Rust, no nightly needed.

use ratewise_fuzz_targets::TARGETS;
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

fn run_dir(kind: &str, required: bool) -> usize {
    let mut total = 0;
    for (name, body) in TARGETS {
        let dir = fuzz_dir().join(kind).join(name);
        let inputs = files(&dir);
        assert!(
            !required || !inputs.is_empty(),
            "{} is empty",
            dir.display()
        );
        for path in &inputs {
            let data = match std::fs::read(path) {
                Ok(data) => data,
                // A fuzzer running on the scratch corpus replaces files as
                // it reduces them; a vanished file is not a failure there.
                Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => panic!("{}: {e}", path.display()),
            };
            let outcome = std::panic::catch_unwind(|| body(&data));
            assert!(outcome.is_ok(), "{name} fails on {}", path.display());
        }
        total += inputs.len();
    }
    total
}

#[test]
fn every_seed_passes() {
    assert!(run_dir("seeds", true) > 0);
}

#[test]
fn every_crash_regression_passes() {
    run_dir("regressions", false);
}

/// `fuzz/corpus/` is gitignored: present after a local campaign or a
/// `.ci/fuzz.sh` run, absent on a fresh checkout.
#[test]
fn every_local_corpus_file_passes() {
    run_dir("corpus", false);
}
