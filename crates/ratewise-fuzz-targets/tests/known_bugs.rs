//! Core bugs the fuzzers found that are not fixed yet (this crate may not
//! edit ratewise-core). Each test runs the strict target on the kept input
//! and is `#[ignore]`d until the fix lands; then drop the `#[ignore]` and
//! the matching tolerance in `decide::KNOWN_BUGS`.
//!
//! Run them: `cargo test -p ratewise-fuzz-targets --test known_bugs -- --ignored`.

use ratewise_fuzz_targets::decide::{run_strict, split, KNOWN_BUGS};
use std::path::Path;

fn input(target: &str, name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions")
        .join(target)
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `Retry-After: 0` on a 429, 5 s after arrival, deadline 1 s: the job's
/// answer can no longer arrive in time, so DESIGN rule 6 says give up
/// (`give_up(deadline)`); `decide` returns `Retry { delay: 0 }`.
#[test]
#[ignore = "ratewise-core bug: zero hint past the deadline is retried (reported to the lead)"]
fn zero_retry_after_past_deadline() {
    assert_eq!(KNOWN_BUGS, ["zero-retry-after-past-deadline"]);
    let data = input("classify_decide", "zero-retry-after-past-deadline");
    let (control, _) = split(&data).expect("a control");
    assert_eq!(control.deadline_ms, Some(1000));
    run_strict(&data);
}
