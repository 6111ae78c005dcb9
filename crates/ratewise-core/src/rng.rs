//! Randomness comes in from outside, so every decision is reproducible.

/// A source of uniformly distributed 64-bit values.
///
/// Implemented for [`fastrand::Rng`] (seed it with
/// `fastrand::Rng::with_seed(n)` for reproducible runs) and for any
/// `FnMut() -> u64`, so tests can script exact values.
pub trait RandomSource {
    /// The next uniformly distributed value.
    fn next_u64(&mut self) -> u64;

    /// A uniform value in `0..=max` (no modulo bias worth the name for the
    /// millisecond ranges used here).
    fn up_to(&mut self, max: u64) -> u64 {
        if max == u64::MAX {
            return self.next_u64();
        }
        // Lemire's multiply-shift: unbiased enough, branch-free, no division.
        ((u128::from(self.next_u64()) * (u128::from(max) + 1)) >> 64) as u64
    }
}

/// A seed from the operating system's entropy: what a jitter source is
/// seeded with unless a fixed seed is asked for, so that every process of a
/// fleet (and every controller or layer within one) draws its own jitter
/// instead of the same sequence.
///
/// It reads no clock: std's `RandomState` keys come from the operating
/// system's random source (once per thread, then stepped per call), and
/// hashing nothing with them gives a value no other call returns.
///
/// ```
/// assert_ne!(ratewise_core::decide::entropy_seed(), ratewise_core::decide::entropy_seed());
/// ```
pub fn entropy_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

impl RandomSource for fastrand::Rng {
    fn next_u64(&mut self) -> u64 {
        self.u64(..)
    }
}

impl<F: FnMut() -> u64> RandomSource for F {
    fn next_u64(&mut self) -> u64 {
        self()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_to_covers_its_bounds() {
        let mut lo = || 0u64;
        let mut hi = || u64::MAX;
        assert_eq!(lo.up_to(10), 0);
        assert_eq!(hi.up_to(10), 10);
        assert_eq!(hi.up_to(0), 0);
    }

    #[test]
    fn seeded_sources_repeat() {
        let mut a = fastrand::Rng::with_seed(7);
        let mut b = fastrand::Rng::with_seed(7);
        for _ in 0..10 {
            assert_eq!(a.up_to(1000), b.up_to(1000));
        }
    }
}
