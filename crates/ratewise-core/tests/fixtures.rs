//! Every decision case passes, from the project's own copy and from its
//! own cases (`own-cases/`: providers and answers `../shared` does not
//! have); and the copy is the same as `../shared/fixtures` wherever that
//! folder exists.

use ratewise_core::case::Case;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

const OWN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cases");
const OWN_CASES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/own-cases");
const SHARED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/fixtures/cases"
);

fn json_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path: PathBuf = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            out.insert(name, fs::read(&path).unwrap());
        }
    }
    out
}

fn check_all(dir: &Path) -> usize {
    let files = json_files(dir);
    assert!(!files.is_empty(), "no cases in {}", dir.display());
    let mut failures = Vec::new();
    for (name, bytes) in &files {
        let case = Case::from_json(std::str::from_utf8(bytes).unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        // The delay is random: every seed must satisfy the bounds.
        for seed in 0..256 {
            let got = case
                .evaluate(&mut fastrand::Rng::with_seed(seed))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            if let Err(why) = case.expect.check(&got) {
                failures.push(format!("{name} (seed {seed}): {}", why.join("; ")));
                break;
            }
        }
    }
    assert!(
        failures.is_empty(),
        "failing cases:\n{}",
        failures.join("\n")
    );
    files.len()
}

#[test]
fn every_case_in_the_project_copy_passes() {
    assert!(check_all(Path::new(OWN)) >= 20);
}

#[test]
fn every_case_of_our_own_passes() {
    // Gemini, Bedrock, DeepSeek, Mistral, Azure and xAI answers (issue #36), each with
    // its `source`.
    assert!(check_all(Path::new(OWN_CASES)) >= 17);
}

#[test]
fn every_case_in_shared_passes_when_present() {
    let shared = Path::new(SHARED);
    if shared.is_dir() {
        check_all(shared);
    }
}

#[test]
fn project_copy_matches_shared() {
    let shared = Path::new(SHARED);
    if !shared.is_dir() {
        eprintln!(
            "{} not present: nothing to compare (a user's checkout)",
            shared.display()
        );
        return;
    }
    let ours = json_files(Path::new(OWN));
    let theirs = json_files(shared);
    let missing: Vec<_> = theirs.keys().filter(|k| !ours.contains_key(*k)).collect();
    let extra: Vec<_> = ours.keys().filter(|k| !theirs.contains_key(*k)).collect();
    let differ: Vec<_> = theirs
        .iter()
        .filter(|(k, v)| ours.get(*k).is_some_and(|o| o != *v))
        .map(|(k, _)| k)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "copy drifted from ../shared/fixtures/cases: missing {missing:?}, extra {extra:?}, differ {differ:?}\n\
         fix: cp ../shared/fixtures/cases/*.json crates/ratewise-core/tests/fixtures/cases/"
    );
}
