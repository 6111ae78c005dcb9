//! Fuzz target `classify_decide`: classify + decide end to end.
//!
//! The body and its properties live in `ratewise_fuzz_targets::decide`,
//! shared with the stable tests.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ratewise_fuzz_targets::decide::run(data);
});
