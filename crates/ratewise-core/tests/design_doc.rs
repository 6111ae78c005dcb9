//! `docs/DESIGN.md` is the project's copy of the shared design document
//! (users have no `../shared`): it must not drift from it wherever that
//! folder exists.

use std::path::Path;

const OURS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/DESIGN.md");
const SHARED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/DESIGN.md");

#[test]
fn design_copy_matches_shared() {
    let ours = std::fs::read(OURS).expect("docs/DESIGN.md is part of the repository");
    assert!(!ours.is_empty());
    let shared = Path::new(SHARED);
    if !shared.is_file() {
        eprintln!("{} absent: nothing to compare against", shared.display());
        return;
    }
    let theirs = std::fs::read(shared).expect("readable");
    assert!(
        ours == theirs,
        "docs/DESIGN.md drifted from ../shared/DESIGN.md\nfix: cp ../shared/DESIGN.md docs/DESIGN.md"
    );
}
