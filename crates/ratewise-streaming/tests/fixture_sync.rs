//! The project's copy of the recorded streams equals the shared folder
//! beside the checkout, when that folder exists: no missing or extra files,
//! no differing bytes.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| {
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn copy_matches_shared_fixtures() {
    let shared = common::shared_dir();
    if !shared.is_dir() {
        eprintln!("{} absent: nothing to compare", shared.display());
        return;
    }
    let ours = files(&common::fixtures_dir());
    let theirs = files(&shared);
    let missing: Vec<_> = theirs.keys().filter(|k| !ours.contains_key(*k)).collect();
    let extra: Vec<_> = ours.keys().filter(|k| !theirs.contains_key(*k)).collect();
    let differing: Vec<_> = theirs
        .iter()
        .filter(|(k, v)| ours.get(*k).is_some_and(|o| o != *v))
        .map(|(k, _)| k)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty() && differing.is_empty(),
        "copy under tests/fixtures/streams drifted from {}: missing {missing:?}, extra {extra:?}, differing {differing:?}",
        shared.display()
    );
}
