//! Fuzz target `retry_after`: Retry-After / retry-after-ms / x-should-retry values.
//!
//! The body and its properties live in `ratewise_fuzz_targets::retry_after`,
//! shared with the stable tests.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ratewise_fuzz_targets::retry_after::run(data);
});
