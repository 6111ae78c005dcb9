//! Fuzz target `sse_chunking`: SSE decoder and stream tracker under arbitrary chunking.
//!
//! The body and its properties live in `ratewise_fuzz_targets::sse`,
//! shared with the stable tests.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ratewise_fuzz_targets::sse::run(data);
});
