//! The crate docs list the files a 429 crosses ("A 429's path through the
//! code"): every file named there must exist and the count they state must
//! be the number named (`tests/path429.rs` checks the list against a
//! traced run). The core's `admit/` keeps no file over
//! 700 lines (one idea per module).

mod docs_section;

use docs_section::root;
use std::path::{Path, PathBuf};

#[test]
fn every_file_on_a_429s_path_exists() {
    // Which files they must be is `tests/path429.rs`'s (under valgrind);
    // this one needs nothing and runs everywhere.
    let named = docs_section::named_files();
    for file in &named {
        assert!(
            root().join(file).is_file(),
            "the docs name {file}, which is not there (core files are named \"core `path`\")"
        );
    }
    assert_eq!(
        named.len(),
        docs_section::stated_count(),
        "the docs name {} files but state another count",
        named.len()
    );
}

#[test]
fn no_file_under_the_cores_admit_is_over_700_lines() {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, usize)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let n = std::fs::read_to_string(&p).unwrap().lines().count();
                out.push((p, n));
            }
        }
    }
    let mut files = Vec::new();
    walk(&root().join("crates/ratewise-core/src/admit"), &mut files);
    assert!(files.len() > 20);
    let over: Vec<_> = files.iter().filter(|(_, n)| *n > 700).collect();
    assert!(over.is_empty(), "{over:?}");
}
