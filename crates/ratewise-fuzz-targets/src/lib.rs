//! # ratewise-fuzz-targets
//!
//! The bodies of ratewise's fuzz targets, as plain functions of `&[u8]`.
//! The cargo-fuzz project in `fuzz/` wraps each one in `fuzz_target!`; the
//! stable tests of this crate run every seed, corpus and regression file
//! through the same functions, so `cargo test` exercises them even where no
//! nightly toolchain exists.
//!
//! Each target checks properties, not only "no panic" (see each module);
//! a violated property panics, which the fuzzer reports as a crash.
//!
//! ```
//! // A 429 whose Retry-After says 8 s: decided without a panic.
//! let control = ratewise_fuzz_targets::decide::DecideControl {
//!     provider: 0, transport: 0, wall_secs: 1_795_953_600, elapsed_ms: 0,
//!     attempts: 1, deadline_ms: None, max_attempts: None,
//!     max_inline_wait_ms: None, expected_attempt_ms: 0,
//!     unknown_retry: false, rng_seed: 7,
//! };
//! let input = [control.to_bytes(), b"429\nretry-after: 8\n\n{}".to_vec()].concat();
//! ratewise_fuzz_targets::run("classify_decide", &input);
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod decide;
pub mod error_body;
pub mod ratelimit;
pub mod reset_duration;
pub mod retry_after;
pub mod seeds;
pub mod sse;
pub mod wire;

/// The wall clock the header targets read HTTP-dates against:
/// 2026-11-29T12:00:00Z, the fixtures' `now`.
pub const REFERENCE_NOW_SECS: u64 = 1_795_953_600;

/// A target body: one fuzz input in, a panic when a property breaks.
pub type TargetFn = fn(&[u8]);

/// Every target: its name (the `fuzz/fuzz_targets/<name>.rs` file and the
/// `fuzz/seeds/<name>/` directory) and its body.
pub const TARGETS: &[(&str, TargetFn)] = &[
    ("retry_after", retry_after::run),
    ("ratelimit_headers", ratelimit::run),
    ("openai_reset", reset_duration::run),
    ("error_body", error_body::run),
    ("sse_chunking", sse::run),
    ("classify_decide", decide::run),
];

/// Runs the target called `name` on `data`.
///
/// # Panics
///
/// On an unknown target name, and (by design) when the input breaks one of
/// the target's properties.
pub fn run(name: &str, data: &[u8]) {
    let (_, body) = TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no fuzz target {name}"));
    body(data);
}
