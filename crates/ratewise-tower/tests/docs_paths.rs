//! The crate docs list the files a 429 crosses ("A 429's path through the
//! code"): every file named there must exist, so the list cannot drift
//! silently when a module moves. The core's `admit/` keeps no file over
//! 700 lines (one idea per module).

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn every_file_on_a_429s_path_exists() {
    let docs = std::fs::read_to_string(root().join("crates/ratewise-tower/src/lib.rs")).unwrap();
    let start = docs
        .find("## A 429's path through the code")
        .expect("the section");
    let end = start + docs[start..].find("//! ## Journal").expect("its end");
    let section = &docs[start..end];
    let mut named = 0;
    for (i, part) in section.split('`').enumerate() {
        if i % 2 == 0 || !part.ends_with(".rs") || part.contains('*') || part.starts_with("tests/")
        {
            continue;
        }
        // Named for the core or for this crate: either way it is there.
        let core = root().join("crates/ratewise-core/src").join(part);
        let tower = root().join("crates/ratewise-tower/src").join(part);
        assert!(
            core.exists() || tower.exists(),
            "the docs name {part}, which is in neither crate"
        );
        named += 1;
    }
    assert!(named >= 13, "only {named} files named");
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
