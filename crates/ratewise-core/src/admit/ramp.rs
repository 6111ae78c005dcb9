//! Ramp-up: admission restarts at a fraction of the rate and grows while
//! responses stay calm.
//!
//! The factor is kept in per-mille and applied to the pace of every bucket
//! of a scope (rate and capacity alike below full rate, so a cold or cut
//! bucket cannot release a burst; the provider's credit is not scaled). It
//! restarts at `start` after idle, after a stop is lifted and when a scope
//! is first used (unless [`RampConfig::warm_start`]); it grows
//! multiplicatively by `grow` for each `step` of time that passes without an
//! acceleration 429, up to `peak`; an acceleration 429 (`slow_down`) cuts
//! it multiplicatively by `cut`, never below `start`, and growth resumes
//! from the cut.
//!
//! The peak is above full rate (default ×1.2): a pace faster than the
//! limit only matters while the provider's credit holds more than the
//! limit refills, as after idle, and spends it over minutes. Once the
//! credit is gone the limit binds and the rate is the limit.
//!
//! Growth follows the clock, not completed answers. Answers arrive at the
//! rate the ramp allows, so one growth step per answer keeps a slow start
//! slow: at 10 % of a 30 000 input-tokens-per-minute bucket, 2 000-token
//! jobs complete one every 40 s, and the ramp took minutes (3 % of a
//! 55-minute backlog in the `burst-mixed` scenario). An acceleration limit
//! answers at once, so a calm second is evidence enough. Multiplicative
//! increase: from 10 % a scope is at full rate after seven calm seconds, and
//! no second's rate is more than 1.4× the previous one; the simulated
//! acceleration limit (5 requests in the 10 s after an idle minute) sees no
//! 429 on the `cold-start` scenario.

use super::bucket::MAX_PERMILLE;

/// Steps a ramp holds its peak before it counts as settled
/// ([`Ramp::settled`]): two, so that a cold key's first ten seconds (the
/// ramp is at its peak after about nine) are paced as the provider sees
/// them.
pub(crate) const SETTLE_STEPS: u32 = 2;
use crate::time::Instant;
use std::time::Duration;

/// Ramp parameters. Factors are per-mille (1000 = ×1.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RampConfig {
    /// Starting fraction of the rate (default 100 = 10 %). 1000 starts at
    /// full rate (no ramp below the limit).
    pub start: u32,
    /// Growth per calm step of time (default 1400 = ×1.4 per second: from
    /// 10 % to full in seven seconds without an acceleration 429). The
    /// growth is exact — the pace between two admissions is what the ramp
    /// was at each instant, and a wait is predicted at that pace — so the
    /// factor is what the provider sees: ×1.5 sent 7 requests in the first
    /// 10 s of a cold 60 RPM key, past the simulated acceleration limit (5
    /// in 10 s after an idle minute: the mock's choice, the documentation
    /// gives no number); ×1.4 keeps within it, and ×1.3 cost 3 % of the
    /// limit on `bench/proxy_sdk.sh`'s cold 55 s runs.
    pub grow: u32,
    /// Cut on an acceleration 429 (default 500 = ×0.5).
    pub cut: u32,
    /// At most one growth step per this interval (default 1 s).
    pub step: Duration,
    /// A scope with no admission for longer than this restarts the ramp
    /// (default 60 s).
    pub idle_after: Duration,
    /// The highest factor (default 1200 = ×1.2, at least 1000, at most
    /// 4000): how much faster than the limit the pace may
    /// spend a full credit. The rate over a long backlog is still the
    /// limit.
    pub peak: u32,
    /// Start a scope's first use at the peak instead of `start` (default
    /// `false`). For a key known to be busy — a worker joining a running
    /// fleet, a restart in the middle of steady traffic — the provider sees
    /// no sharp increase, so ramping again only wastes capacity. Idle,
    /// lifted stops and acceleration 429s still ramp.
    pub warm_start: bool,
}

impl Default for RampConfig {
    fn default() -> Self {
        RampConfig {
            start: 100,
            grow: 1400,
            cut: 500,
            step: Duration::from_secs(1),
            idle_after: Duration::from_secs(60),
            peak: 1200,
            warm_start: false,
        }
    }
}

impl RampConfig {
    /// The peak factor, clamped to `1000..=MAX_PERMILLE`.
    pub fn peak(&self) -> u32 {
        self.peak.clamp(1000, MAX_PERMILLE)
    }

    /// The start factor, clamped to `1..=peak`.
    pub(crate) fn start(&self) -> u32 {
        self.start.clamp(1, self.peak())
    }
}

/// The ramp state of one scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ramp {
    permille: u32,
    last_step: Option<Instant>,
}

impl Ramp {
    /// A ramp for a scope's first use: at the start fraction, or at full
    /// rate with [`RampConfig::warm_start`].
    pub(crate) fn new(cfg: &RampConfig) -> Self {
        Ramp {
            permille: if cfg.warm_start {
                cfg.peak()
            } else {
                cfg.start()
            },
            last_step: None,
        }
    }

    /// The current factor in per-mille.
    pub(crate) fn permille(&self) -> u32 {
        self.permille
    }

    /// When it last changed (`None`: never).
    pub(crate) fn last_step(&self) -> Option<Instant> {
        self.last_step
    }

    /// A ramp at `permille` that last changed at `last_step` (a shared
    /// record's).
    pub(crate) fn restored(permille: u32, last_step: Option<Instant>) -> Self {
        Ramp {
            permille,
            last_step,
        }
    }

    /// When the next growth step is due (`None`: at the peak, or the
    /// clock not started): where a prediction of a wait must let the pace
    /// grow.
    pub(crate) fn next_step(&self, cfg: &RampConfig) -> Option<Instant> {
        if self.permille >= cfg.peak() {
            return None;
        }
        self.last_step.map(|t| t + cfg.step)
    }

    /// Back to the start fraction (idle, stop lifted).
    pub(crate) fn restart(&mut self, cfg: &RampConfig, now: Instant) {
        self.permille = cfg.start();
        self.last_step = Some(now);
    }

    /// Time passed without an acceleration 429: grow by `grow` for each
    /// whole `step` since the last change (a cut or a restart counts as a
    /// change). Returns whether the factor changed.
    ///
    /// Growth follows the clock rather than completed answers: answers
    /// arrive at the rate the ramp allows, so growing once per answer keeps
    /// a slow start slow (at 10 % of 50 RPM with 2 000-token jobs, one
    /// answer every 40 s). An acceleration limit answers quickly, so a
    /// step of calm time is the evidence.
    pub(crate) fn calm(&mut self, cfg: &RampConfig, now: Instant) -> bool {
        let peak = u64::from(cfg.peak());
        if u64::from(self.permille) >= peak {
            return false;
        }
        let Some(t) = self.last_step else {
            self.last_step = Some(now);
            return false;
        };
        // The usual case, and cheap: less than a step since the last one
        // (no 128-bit division on the admission path).
        let since = now.saturating_duration_since(t);
        if since < cfg.step {
            return false;
        }
        let step = cfg.step.as_nanos().max(1);
        let elapsed = since.as_nanos();
        let steps = elapsed / step;
        if steps == 0 {
            return false;
        }
        let grow = u64::from(cfg.grow.max(1001));
        let mut p = u64::from(self.permille);
        for _ in 0..steps.min(64) {
            p = (p * grow).div_ceil(1000).max(p + 1);
            if p >= peak {
                break;
            }
        }
        self.permille = p.min(peak) as u32;
        // Keep the remainder of a partial step.
        let used = u64::try_from(steps.saturating_mul(step)).unwrap_or(u64::MAX);
        self.last_step = Some(t + std::time::Duration::from_nanos(used));
        true
    }

    /// Whether the ramp has held its peak for [`SETTLE_STEPS`] steps (or
    /// started there): the key's traffic has stopped growing as the
    /// provider sees it.
    pub(crate) fn settled(&self, cfg: &RampConfig, now: Instant) -> bool {
        let settle = cfg.step.saturating_mul(SETTLE_STEPS);
        self.permille >= cfg.peak()
            && self
                .last_step
                .is_none_or(|t| now.saturating_duration_since(t) >= settle)
    }

    /// An acceleration 429: cut multiplicatively, floored at the start.
    pub(crate) fn slow_down(&mut self, cfg: &RampConfig, now: Instant) {
        let cut = (u64::from(self.permille) * u64::from(cfg.cut.min(1000))) / 1000;
        self.permille = (cut as u32).max(cfg.start());
        self.last_step = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_one_step_per_calm_second_to_full_and_cuts_to_floor() {
        let cfg = RampConfig::default();
        let mut r = Ramp::new(&cfg);
        // The first call starts the clock.
        assert!(!r.calm(&cfg, Instant::ZERO));
        let mut t = Instant::ZERO;
        let mut steps = 0;
        while r.permille() < 1000 {
            t = t + Duration::from_secs(1);
            assert!(r.calm(&cfg, t));
            steps += 1;
        }
        assert_eq!(steps, 7);
        // One more calm second reaches the peak, and it stays there.
        assert!(r.calm(&cfg, t + Duration::from_secs(1)));
        assert_eq!(r.permille(), 1200);
        assert!(!r.calm(&cfg, t + Duration::from_secs(5)));
        r.slow_down(&cfg, t);
        assert_eq!(r.permille(), 600);
        for _ in 0..5 {
            r.slow_down(&cfg, t);
        }
        assert_eq!(r.permille(), 100);
    }

    #[test]
    fn no_growth_within_a_step_and_the_remainder_is_kept() {
        let cfg = RampConfig::default();
        let mut r = Ramp::new(&cfg);
        r.restart(&cfg, Instant::ZERO);
        assert!(!r.calm(&cfg, Instant::from_millis(999)));
        assert_eq!(r.permille(), 100);
        assert!(r.calm(&cfg, Instant::from_millis(1500)));
        assert_eq!(r.permille(), 140);
        // 1.5 s + 0.5 s = the second whole step since the restart.
        assert!(r.calm(&cfg, Instant::from_millis(2000)));
        assert_eq!(r.permille(), 196);
    }

    #[test]
    fn a_long_calm_catches_up_all_its_steps_at_once() {
        let cfg = RampConfig::default();
        let mut r = Ramp::new(&cfg);
        r.restart(&cfg, Instant::ZERO);
        assert!(r.calm(&cfg, Instant::from_millis(3000)));
        // 100 -> 140 -> 196 -> 275 (rounded up).
        assert_eq!(r.permille(), 275);
        assert!(r.calm(&cfg, Instant::from_millis(3_600_000)));
        assert_eq!(r.permille(), 1200);
    }

    #[test]
    fn the_peak_is_configurable_and_clamped() {
        let mut cfg = RampConfig {
            peak: 1000,
            ..RampConfig::default()
        };
        let mut r = Ramp::new(&cfg);
        r.restart(&cfg, Instant::ZERO);
        assert!(r.calm(&cfg, Instant::from_millis(60_000)));
        assert_eq!(r.permille(), 1000);
        // Below full rate is not a peak; above ×4 is clamped.
        cfg.peak = 10;
        assert_eq!(cfg.peak(), 1000);
        cfg.peak = 1_000_000;
        assert_eq!(cfg.peak(), MAX_PERMILLE);
        // A start above the peak starts at the peak.
        cfg.peak = 1200;
        cfg.start = 5000;
        assert_eq!(Ramp::new(&cfg).permille(), 1200);
    }

    #[test]
    fn a_cut_restarts_the_step_clock() {
        let cfg = RampConfig::default();
        let mut r = Ramp::new(&cfg);
        r.restart(&cfg, Instant::ZERO);
        assert!(r.calm(&cfg, Instant::from_millis(4000)));
        let before = r.permille();
        r.slow_down(&cfg, Instant::from_millis(4500));
        assert_eq!(r.permille(), (before / 2).max(100));
        assert!(!r.calm(&cfg, Instant::from_millis(5400)));
        assert!(r.calm(&cfg, Instant::from_millis(5500)));
    }

    #[test]
    fn warm_start_begins_at_the_peak_but_idle_still_ramps() {
        let cfg = RampConfig {
            warm_start: true,
            ..RampConfig::default()
        };
        let mut r = Ramp::new(&cfg);
        assert_eq!(r.permille(), 1200);
        r.restart(&cfg, Instant::from_millis(100_000));
        assert_eq!(r.permille(), 100);
    }
}
