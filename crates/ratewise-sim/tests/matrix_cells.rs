//! Every matrix cell that ever missed its targets is kept as a fixed
//! scenario in this crate's `scenarios/matrix/` (its name is the cell's
//! label, so its targets are the cell's) and holds them here on every run:
//! the seeded matrix sample in CI finds new shapes, these keep the old ones
//! fixed.

use ratewise_sim::matrix::Cell;
use ratewise_sim::strategy::{simulate, Strategy};
use ratewise_sim::Scenario;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/matrix")
}

#[test]
fn every_cell_that_once_missed_holds_its_targets() {
    let mut files: Vec<_> = std::fs::read_dir(dir())
        .expect("scenarios/matrix")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no scenario in scenarios/matrix");
    let mut missed = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("readable");
        let s = Scenario::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let cell = Cell::parse(&s.name).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let rw = simulate(&s, Strategy::Ratewise, &mut |_, _| {});
        let oracle = simulate(&s, Strategy::Oracle, &mut |_, _| {});
        let m = cell.misses(&rw, &oracle);
        if !m.is_empty() {
            missed.push(format!("{}: {}", f.display(), m.join("; ")));
        }
    }
    assert!(missed.is_empty(), "{missed:#?}");
}
