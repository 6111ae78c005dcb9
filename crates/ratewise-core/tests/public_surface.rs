//! The core's public surface stays small (issue #48: 330 items or fewer).
//!
//! Counted as the issue counts it: lines of `src/` matching
//! `^\s*pub (fn|struct|enum|trait|type|const|mod|use) `. The surface
//! leaves out what is declared `#[doc(hidden)] pub mod x;` — the
//! workspace-internal modules, used by ratewise's own crates and not part
//! of the API — with `x.rs` and `x/` beneath it, and the declaration line
//! itself. Every such module must say so in its first doc line.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The most public items the core may declare outside its hidden modules.
const LIMIT: usize = 330;

/// What every hidden module's doc opens with.
const SAYS: &str = "//! Workspace-internal: used by ratewise's own crates; not part of the \
                    public API and not covered by semver.";

/// Whether a line is one the regex counts.
fn counted(line: &str) -> bool {
    let Some(rest) = line.trim_start().strip_prefix("pub ") else {
        return false;
    };
    [
        "fn ", "struct ", "enum ", "trait ", "type ", "const ", "mod ", "use ",
    ]
    .iter()
    .any(|k| rest.starts_with(k))
}

/// The `#[doc(hidden)] pub mod name;` declarations of a file, by line
/// index: the attributes right above the declaration, in any order.
fn hidden_decls(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = line
            .trim()
            .strip_prefix("pub mod ")
            .and_then(|r| r.strip_suffix(';'))
        else {
            continue;
        };
        let hidden = lines[..i]
            .iter()
            .rev()
            .map(|l| l.trim())
            .take_while(|l| l.starts_with("#["))
            .any(|l| l == "#[doc(hidden)]");
        if hidden {
            out.push((i, name.trim().to_owned()));
        }
    }
    out
}

/// The directory a file's child modules live in: its own for `lib.rs` and
/// `mod.rs`, `x/` beside `x.rs` otherwise.
fn children_dir(file: &Path) -> PathBuf {
    let dir = file.parent().expect("a file in a directory");
    match file.file_name().and_then(|n| n.to_str()) {
        Some("lib.rs" | "mod.rs") => dir.to_path_buf(),
        _ => dir.join(file.file_stem().expect("a file name")),
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src/ readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
}

/// The count of `src`.
struct Count {
    /// Every line the regex matches.
    all: usize,
    /// Those outside the hidden modules (their declarations left out too).
    surface: usize,
    /// The hidden modules' files.
    hidden: Vec<PathBuf>,
    /// Hidden modules whose doc does not open by saying so.
    unsaid: Vec<PathBuf>,
}

fn count(src: &Path) -> Count {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    // Each hidden module's file and directory, as declared by its parent.
    let mut hidden: BTreeSet<PathBuf> = BTreeSet::new();
    let mut decl_lines: BTreeSet<(PathBuf, usize)> = BTreeSet::new();
    for f in &files {
        let text = fs::read_to_string(f).expect("a source file");
        for (i, name) in hidden_decls(&text) {
            let dir = children_dir(f);
            hidden.insert(dir.join(format!("{name}.rs")));
            hidden.insert(dir.join(&name));
            decl_lines.insert((f.clone(), i));
        }
    }
    let is_hidden = |f: &Path| hidden.iter().any(|h| f == h || f.starts_with(h));
    let (mut all, mut surface) = (0, 0);
    let mut hidden_files = Vec::new();
    for f in &files {
        let text = fs::read_to_string(f).expect("a source file");
        let skip = is_hidden(f);
        if skip {
            hidden_files.push(f.clone());
        }
        for (i, line) in text.lines().enumerate() {
            if !counted(line) {
                continue;
            }
            all += 1;
            if !skip && !decl_lines.contains(&(f.clone(), i)) {
                surface += 1;
            }
        }
    }
    // A hidden module's own file opens by saying what it is.
    let mut unsaid = Vec::new();
    for h in &hidden {
        let file = if h.extension().is_some() {
            h.clone()
        } else {
            h.join("mod.rs")
        };
        if let Ok(text) = fs::read_to_string(&file) {
            if text.lines().next() != Some(SAYS) {
                unsaid.push(file);
            }
        }
    }
    Count {
        all,
        surface,
        hidden: hidden_files,
        unsaid,
    }
}

#[test]
fn the_public_surface_is_330_items_or_fewer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let Count {
        all,
        surface,
        hidden,
        unsaid,
    } = count(&src);
    println!("lines matching the issue's regex in src/: {all}");
    println!("of them, public surface (outside #[doc(hidden)] modules): {surface}");
    println!("workspace-internal files ({}):", hidden.len());
    for f in &hidden {
        println!("  {}", f.strip_prefix(&src).unwrap_or(f).display());
    }
    assert!(
        surface <= LIMIT,
        "the core's public surface is {surface} items, over {LIMIT}: make what only \
         the workspace uses pub(crate), or move it into a #[doc(hidden)] module"
    );
    assert!(
        surface < all,
        "no hidden module found: the count is not checking anything"
    );
    assert!(
        unsaid.is_empty(),
        "#[doc(hidden)] modules that do not open with {SAYS:?}: {unsaid:?}"
    );
}

/// The counter itself, on a crate made up for it: a hidden module (file
/// and directory) is left out, a public one and a private one's `pub`
/// items are not, and a hidden module that does not say so is reported.
#[test]
fn the_counter_skips_hidden_modules_and_nothing_else() {
    let root = std::env::temp_dir().join(format!("ratewise-surface-{}", std::process::id()));
    let src = root.join("src");
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(src.join("inner/deep")).unwrap();
    fs::create_dir_all(src.join("open")).unwrap();
    fs::write(
        src.join("lib.rs"),
        "#[cfg(feature = \"x\")]\n#[doc(hidden)]\npub mod inner;\npub mod open;\nmod private;\npub use open::A;\n",
    )
    .unwrap();
    fs::write(
        src.join("inner/mod.rs"),
        format!("{SAYS}\n\npub mod deep;\npub fn a() {{}}\n"),
    )
    .unwrap();
    fs::write(src.join("inner/deep/mod.rs"), "pub struct B;\n").unwrap();
    fs::write(
        src.join("open/mod.rs"),
        "pub struct A;\n    pub fn f() {}\npub(crate) fn g() {}\n",
    )
    .unwrap();
    fs::write(src.join("private.rs"), "pub const C: u8 = 0;\n").unwrap();
    let c = count(&src);
    // lib: pub mod inner, pub mod open, pub use; inner: pub mod deep, pub fn;
    // deep: pub struct; open: pub struct, pub fn; private: pub const.
    assert_eq!(c.all, 9);
    // Left out: the hidden declaration and inner's three.
    assert_eq!(c.surface, 5);
    assert_eq!(c.hidden.len(), 2);
    assert!(c.unsaid.is_empty());

    fs::write(
        src.join("inner/mod.rs"),
        "//! Just a module.\npub fn a() {}\n",
    )
    .unwrap();
    let unsaid = count(&src).unsaid;
    fs::remove_dir_all(&root).unwrap();
    assert_eq!(
        unsaid.len(),
        1,
        "a hidden module that does not say so is found"
    );
}
