//! Fuzz target `error_body`: error-body parsing.
//!
//! The body and its properties live in `ratewise_fuzz_targets::error_body`,
//! shared with the stable tests.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ratewise_fuzz_targets::error_body::run(data);
});
