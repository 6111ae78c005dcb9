//! Sample streams recorded from runs, to hold each belief against on its
//! own (the same streams for every implementation), and the helpers that
//! build samples.
//!
//! Each stream is what one dimension of one scope was fed in a run of the
//! simulator or the mock, cut to the part that teaches: the answers of an
//! Anthropic-like key whose token counts are rounded to the nearest
//! thousand, and the admissions and 429s of a provider that states
//! nothing.

use super::Sample;
use crate::time::Instant;
use std::time::Duration;

/// `secs` seconds after the origin.
pub(crate) fn s(secs: f64) -> Instant {
    Instant::from_origin(Duration::from_secs_f64(secs))
}

/// An admission of `units` at `at`.
pub(crate) fn admitted(units: u64, at: Instant) -> Sample {
    Sample::Admitted { units, at }
}

/// A 429 on a send of `units` with an optional hint, at `at`.
pub(crate) fn throttled(units: u64, hint: Option<Duration>, at: Instant) -> Sample {
    Sample::Throttled { units, hint, at }
}

/// An answer stating `limit`, proving `proven` and allowing `allowed`.
pub(crate) fn answer(limit: Option<u64>, proven: Option<u64>, allowed: Option<u64>) -> Sample {
    Sample::Answer {
        limit,
        proven,
        allowed,
        margin_gone: false,
    }
}

/// The output-token answers of an Anthropic-like key (OTPM 8,000, a 5 s
/// bucket of 667 tokens as the provider keeps it, `remaining` rounded to
/// the nearest thousand, resets to the second): what each view proves and
/// allows of the capacity, as header sync reads it. The proof never
/// passes the rounding step below the truth; the bound comes down to it.
pub(crate) fn anthropic_rounded_output() -> Vec<Sample> {
    [
        (Some(8_000), Some(500), Some(1_700)),
        (Some(8_000), Some(500), Some(1_633)),
        (Some(8_000), Some(0), Some(1_167)),
        (Some(8_000), Some(500), Some(900)),
        (Some(8_000), Some(633), Some(767)),
        (Some(8_000), Some(500), Some(700)),
    ]
    .into_iter()
    .map(|(l, p, a)| answer(l, p, a))
    .collect()
}

/// A silent provider of 600 requests a minute (10 a second, a bucket of
/// 100), sent 20 a second from a cold key: the first 429 when the bucket
/// is spent (10 s in); then 8 a second for 12 s (under the truth: 24
/// banked) and 12 a second until the bucket is dry again, 12 s later: a
/// second 429 that closes a window of 240 requests in 24 s.
pub(crate) fn silent_600_rpm() -> Vec<Sample> {
    let mut out = Vec::new();
    let mut t = 0.0;
    // Full bucket (100) plus 10/s refill, sent at 20/s: dry at 10 s.
    for _ in 0..200 {
        out.push(admitted(1, s(t)));
        t += 0.05;
    }
    out.push(throttled(1, None, s(t)));
    // Then paced at 8/s for 12 s (under the truth), then 12/s until dry.
    for _ in 0..96 {
        t += 0.125;
        out.push(admitted(1, s(t)));
    }
    for _ in 0..(12 * 12) {
        t += 1.0 / 12.0;
        out.push(admitted(1, s(t)));
    }
    out.push(throttled(1, None, s(t)));
    out
}
