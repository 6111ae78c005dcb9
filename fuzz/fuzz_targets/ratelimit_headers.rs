//! Fuzz target `ratelimit_headers`: Anthropic and OpenAI rate-limit header families.
//!
//! The body and its properties live in `ratewise_fuzz_targets::ratelimit`,
//! shared with the stable tests.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ratewise_fuzz_targets::ratelimit::run(data);
});
