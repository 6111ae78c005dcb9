//! Fuzz target `openai_reset`: OpenAI Go-style reset durations.
//!
//! The body and its properties live in `ratewise_fuzz_targets::reset_duration`,
//! shared with the stable tests.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ratewise_fuzz_targets::reset_duration::run(data);
});
