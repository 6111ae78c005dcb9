//! The core keeps no global state: no `static` atomics or mutexes, no
//! `thread_local!`. Everything lives in values the caller owns (a
//! `Controller`, a `Shared`, a `Job`), so two of them never interfere and a
//! test or a simulation repeats exactly.

use std::path::Path;

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("readable src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("utf-8 source");
            out.push((path.display().to_string(), text));
        }
    }
}

#[test]
fn no_statics_with_state_and_no_thread_locals() {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() > 10, "found the sources");
    for (path, text) in files {
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("").trim();
            let stateful_static = code.starts_with("static ")
                || code.starts_with("pub static ")
                || code.starts_with("pub(crate) static ")
                || code.contains("static mut ");
            assert!(!stateful_static, "{path}:{}: a static: {line}", n + 1);
            assert!(
                !code.contains("thread_local!"),
                "{path}:{}: thread-local state: {line}",
                n + 1
            );
        }
    }
}
