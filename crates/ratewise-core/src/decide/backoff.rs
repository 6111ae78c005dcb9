//! Delays: a server hint plus added jitter, or exponential backoff.

use super::policy::{Backoff, HintJitter};
use crate::rng::RandomSource;
use std::time::Duration;

/// The smallest delay ever returned: garbage never becomes zero.
pub const MIN_DELAY: Duration = Duration::from_millis(1);

/// `hint + U(0, window)`, with the jitter window shrunk to `max_jitter` when
/// a deadline leaves less room. Never below the hint.
pub(crate) fn hinted_delay(
    hint: Duration,
    jitter: &HintJitter,
    max_jitter: Duration,
    rng: &mut impl RandomSource,
) -> (Duration, Duration) {
    let window = jitter.window(hint).min(max_jitter);
    let added =
        Duration::from_millis(rng.up_to(window.as_millis().min(u128::from(u64::MAX)) as u64));
    // Even `retry-after: 0` waits a moment: a retry is never instantaneous.
    (hint.saturating_add(added).max(MIN_DELAY), added)
}

/// Backoff for the `attempt`-th send that failed (1-based) without a hint.
/// Returns the delay and the window it was drawn from.
pub(crate) fn backoff_delay(
    backoff: &Backoff,
    throttling: bool,
    attempt: u32,
    rng: &mut impl RandomSource,
) -> (Duration, Duration) {
    let base = if throttling {
        backoff.throttle_base
    } else {
        backoff.transient_base
    };
    let shift = attempt.saturating_sub(1).min(32);
    let window = base
        .checked_mul(1u32 << shift.min(31))
        .unwrap_or(backoff.cap)
        .min(backoff.cap)
        .max(MIN_DELAY);
    let drawn =
        Duration::from_millis(rng.up_to(window.as_millis().min(u128::from(u64::MAX)) as u64));
    let delay = if throttling {
        base.saturating_add(drawn)
    } else {
        drawn.max(MIN_DELAY)
    };
    (delay, window)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_full_jitter_is_never_zero_and_capped() {
        let b = Backoff::default();
        let mut zero = || 0u64;
        assert_eq!(backoff_delay(&b, false, 1, &mut zero).0, MIN_DELAY);
        let mut max = || u64::MAX;
        assert_eq!(
            backoff_delay(&b, false, 1, &mut max).0,
            Duration::from_millis(500)
        );
        assert_eq!(
            backoff_delay(&b, false, 3, &mut max).0,
            Duration::from_secs(2)
        );
        assert_eq!(backoff_delay(&b, false, 40, &mut max).0, b.cap);
    }

    #[test]
    fn throttling_never_below_its_base() {
        let b = Backoff::default();
        let mut zero = || 0u64;
        assert_eq!(backoff_delay(&b, true, 1, &mut zero).0, b.throttle_base);
        let mut max = || u64::MAX;
        assert_eq!(
            backoff_delay(&b, true, 2, &mut max).0,
            Duration::from_secs(3)
        );
    }

    #[test]
    fn hinted_delay_only_adds() {
        let j = HintJitter::default();
        let mut max = || u64::MAX;
        let (d, added) = hinted_delay(Duration::from_secs(8), &j, Duration::MAX, &mut max);
        assert_eq!(d, Duration::from_secs(11));
        assert_eq!(added, Duration::from_secs(3));
        let (d, _) = hinted_delay(
            Duration::from_secs(8),
            &j,
            Duration::from_millis(100),
            &mut max,
        );
        assert_eq!(d, Duration::from_millis(8100));
    }
}
