//! Data flows one way through the core (`parse` → `classify` → `decide`,
//! `admit`'s beliefs under its controller): no two sibling modules may
//! reach each other, directly or around a circle. A circle is how a type
//! ends up in the wrong place (a parser importing a classifier's struct)
//! and how a change to one file starts to need a change to all of them.
//!
//! The test reads every source file under `src/` (test modules left out),
//! takes each path it names — `use crate::…`, `use super::…` and the same
//! paths written inline — to the deepest module file that exists, and
//! lifts each such reference to the two siblings it joins (the children of
//! their common ancestor). A module and its own submodules are one unit:
//! a child using its parent is no circle. It fails naming every circle and
//! the files that close it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Module = Vec<String>;

/// Every module of `src/`, by path, with its source (test modules cut).
fn modules(src: &Path) -> BTreeMap<Module, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("src is readable") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).expect("under src");
            let mut parts: Module = rel
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).expect("a source file");
            out.insert(parts, without_tests(&text).to_owned());
        }
    }
    out
}

/// The source before its `#[cfg(test)] mod …` (the tests may reach
/// anywhere).
fn without_tests(text: &str) -> &str {
    let mut from = 0;
    while let Some(at) = text[from..].find("#[cfg(test)]") {
        let at = from + at;
        let rest = text[at + "#[cfg(test)]".len()..].trim_start();
        if rest.starts_with("mod ") {
            return &text[..at];
        }
        from = at + 1;
    }
    text
}

/// The paths one `use` tree names, braces expanded: `a::{b, c::{d, e}}`
/// is `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.to_owned()];
    };
    let (prefix, rest) = tree.split_at(open);
    let mut depth = 0;
    let mut items = Vec::new();
    let mut current = String::new();
    for ch in rest[1..].chars() {
        match ch {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(ch);
    }
    items.push(current);
    items
        .iter()
        .filter(|i| !i.trim().is_empty())
        .flat_map(|i| expand(i))
        .map(|i| format!("{prefix}{i}"))
        .collect()
}

/// The module a path names from `from`: its `crate::`/`super::` prefix
/// resolved, then its longest prefix that is a module file.
fn target(from: &Module, path: &str, all: &BTreeMap<Module, String>) -> Option<Module> {
    let segs = path
        .split("::")
        .map(|s| s.split(" as ").next().unwrap_or("").trim().to_owned());
    let mut segs = segs.peekable();
    let mut base: Module = match segs.next()?.as_str() {
        "crate" => Vec::new(),
        "super" => from[..from.len().checked_sub(1)?].to_vec(),
        _ => return None,
    };
    while segs.peek().is_some_and(|s| s == "super") {
        segs.next();
        base.pop()?;
    }
    let mut best = all.contains_key(&base).then(|| base.clone());
    for seg in segs {
        base.push(seg);
        if all.contains_key(&base) {
            best = Some(base.clone());
        }
    }
    best
}

/// Every path a module's code names: its `use` trees and the paths
/// written inline (comment lines left out).
fn paths(text: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("use ") {
        let after = &rest[at + 4..];
        let boundary = rest[..at]
            .chars()
            .last()
            .is_none_or(|c| !c.is_alphanumeric() && c != '_');
        let end = after.find(';').unwrap_or(after.len());
        if boundary && (after.starts_with("crate::") || after.starts_with("super::")) {
            out.extend(expand(&after[..end]));
        }
        rest = &after[end.min(after.len())..];
    }
    let bytes = code.as_bytes();
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(start) {
            let at = from + at;
            from = at + start.len();
            if at > 0
                && (bytes[at - 1].is_ascii_alphanumeric() || matches!(bytes[at - 1], b'_' | b':'))
            {
                continue;
            }
            let len = code[at..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(code.len() - at);
            out.push(code[at..at + len].trim_end_matches(':').to_owned());
        }
    }
    out
}

#[test]
fn no_two_sibling_modules_reach_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let all = modules(&src);
    assert!(
        all.len() > 50,
        "the core's modules were read: {}",
        all.len()
    );
    // Sibling edges, each with the files that make it.
    let mut edges: BTreeMap<(Module, Module), BTreeSet<String>> = BTreeMap::new();
    for (from, text) in &all {
        for path in paths(text) {
            let Some(to) = target(from, &path, &all) else {
                continue;
            };
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue; // a module and its own submodule or ancestor
            }
            let key = (from[..=common].to_vec(), to[..=common].to_vec());
            edges
                .entry(key)
                .or_default()
                .insert(format!("{} -> {}", from.join("/"), to.join("/")));
        }
    }
    let mut circles = Vec::new();
    for ((a, b), why) in &edges {
        // A circle through (a, b): b reaches a again.
        let mut seen = BTreeSet::new();
        let mut todo = vec![b.clone()];
        while let Some(m) = todo.pop() {
            if !seen.insert(m.clone()) {
                continue;
            }
            todo.extend(
                edges
                    .keys()
                    .filter(|(x, _)| *x == m)
                    .map(|(_, y)| y.clone()),
            );
        }
        if seen.contains(a) {
            circles.push(format!("{} -> {}: {why:?}", a.join("/"), b.join("/")));
        }
    }
    assert!(
        circles.is_empty(),
        "modules that reach each other (each edge of a circle, with the files that make it):\n{}",
        circles.join("\n")
    );
}

#[test]
fn a_circle_is_found() {
    // The reader itself: a use tree expands, and a path resolves to the
    // deepest module that exists.
    assert_eq!(
        expand("a::{b, c::{d, e as f}}"),
        vec!["a::b", "a::c::d", "a::c::e as f"]
    );
    let all: BTreeMap<Module, String> = [
        (vec![], String::new()),
        (vec!["p".to_owned()], String::new()),
        (vec!["p".to_owned(), "q".to_owned()], String::new()),
    ]
    .into_iter()
    .collect();
    let q = vec!["p".to_owned(), "q".to_owned()];
    assert_eq!(target(&q, "super::Item", &all), Some(vec!["p".to_owned()]));
    assert_eq!(target(&q, "crate::p::q::Item", &all), Some(q.clone()));
    assert_eq!(target(&q, "std::fmt", &all), None);
    let found = paths("use crate::a::{B, c::D};\nfn f() { crate::e::g(); }\n// crate::h::i");
    for p in ["crate::a::B", "crate::a::c::D", "crate::e::g"] {
        assert!(found.iter().any(|f| f == p), "{p} in {found:?}");
    }
    assert!(
        !found.iter().any(|f| f.starts_with("crate::h")),
        "{found:?}"
    );
}
