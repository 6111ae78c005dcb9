//! Core bugs the fuzzers found. While a bug is open, its test runs the
//! target on the kept input under `#[ignore]` (this crate may not edit
//! ratewise-core) and `decide::KNOWN_BUGS` names the tolerance; once fixed,
//! the test runs for real, as below.

use ratewise_fuzz_targets::decide::{run, split, KNOWN_BUGS};
use std::path::Path;

fn input(target: &str, name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions")
        .join(target)
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn no_bug_is_tolerated() {
    assert!(KNOWN_BUGS.is_empty(), "{KNOWN_BUGS:?}");
}

/// `Retry-After: 0` on a 429, 5 s after arrival, deadline 1 s: the answer
/// can no longer arrive in time, so DESIGN rule 6 says `give_up(deadline)`.
/// Found by this crate's property (and core's proptest); decided
/// `Retry { delay: 0 }` until ratewise-core ff4e17c.
#[test]
fn zero_retry_after_past_deadline() {
    let data = input("classify_decide", "zero-retry-after-past-deadline");
    let (control, _) = split(&data).expect("a control");
    assert_eq!(control.deadline_ms, Some(1000));
    run(&data);
}
