//! The crate docs' section "A 429's path through the code", read the way
//! `tests/docs_paths.rs` and `tests/path429.rs` both check it.
//!
//! Every backticked `*.rs` name in the section is a file on the path
//! (`tests/...` and names with a `*` aside). A name stands for a file of
//! this crate (`crates/ratewise-tower/src/NAME`) unless the word right
//! before it is another workspace crate's short name: core `job.rs` is
//! `crates/ratewise-core/src/job.rs`, streaming `x.rs` is
//! `crates/ratewise-streaming/src/x.rs`. The section states its count
//! once, as "**N files**".
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root")
}

/// The section's text, `//! ` prefixes removed and lines joined by spaces.
pub fn section() -> String {
    let docs = std::fs::read_to_string(root().join("crates/ratewise-tower/src/lib.rs")).unwrap();
    let start = docs
        .find("## A 429's path through the code")
        .expect("the section");
    let end = start + docs[start..].find("//! ## Journal").expect("its end");
    docs[start..end]
        .lines()
        .map(|l| l.trim_start().trim_start_matches("//!").trim())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The files the section names, as paths from the workspace root
/// (`crates/ratewise-core/src/job.rs`), each once.
pub fn named_files() -> BTreeSet<String> {
    let section = section();
    let mut named = BTreeSet::new();
    let parts: Vec<&str> = section.split('`').collect();
    for (i, part) in parts.iter().enumerate() {
        if i % 2 == 0 || !part.ends_with(".rs") || part.contains('*') || part.starts_with("tests/")
        {
            continue;
        }
        let before = parts[i - 1].trim_end();
        let word = before
            .rsplit(|c: char| !c.is_ascii_alphanumeric() && c != '-')
            .next()
            .unwrap_or("");
        let krate = if !word.is_empty()
            && word != "tower"
            && root()
                .join("crates")
                .join(format!("ratewise-{word}"))
                .is_dir()
        {
            word
        } else {
            "tower"
        };
        named.insert(format!("crates/ratewise-{krate}/src/{part}"));
    }
    named
}

/// The count the section states ("**N files**").
pub fn stated_count() -> usize {
    let section = section();
    let at = section
        .find(" files**")
        .expect("the section states its count as \"**N files**\"");
    let digits: String = section[..at]
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().expect("a number before \" files**\"")
}
