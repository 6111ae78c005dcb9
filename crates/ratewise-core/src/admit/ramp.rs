//! Ramp-up: admission restarts at a fraction of the rate and grows while
//! responses stay calm.
//!
//! The factor is kept in per-mille and applied to every bucket of a scope
//! (rate and capacity alike, so a cold or cut bucket cannot release a
//! burst). It restarts at `start` after idle, after a stop is lifted and
//! when a scope is first used; it grows multiplicatively by `grow` on each
//! calm completion (a settle), at most once per `step`; an acceleration
//! 429 (`slow_down`) cuts it multiplicatively by `cut`, never below `start`.
//! Multiplicative increase rather than additive: from 10 % a scope is back
//! at full rate after about six calm steps, yet each step at most 1.5× the
//! previous rate, which is what an acceleration limit tolerates.

use crate::time::Instant;
use std::time::Duration;

/// Ramp parameters. Factors are per-mille (1000 = ×1.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RampConfig {
    /// Starting fraction of the rate (default 100 = 10 %). 1000 disables the ramp.
    pub start: u32,
    /// Growth per calm step (default 1500 = ×1.5).
    pub grow: u32,
    /// Cut on an acceleration 429 (default 500 = ×0.5).
    pub cut: u32,
    /// At most one growth step per this interval (default 1 s).
    pub step: Duration,
    /// A scope with no admission for longer than this restarts the ramp
    /// (default 60 s).
    pub idle_after: Duration,
}

impl Default for RampConfig {
    fn default() -> Self {
        RampConfig {
            start: 100,
            grow: 1500,
            cut: 500,
            step: Duration::from_secs(1),
            idle_after: Duration::from_secs(60),
        }
    }
}

/// The ramp state of one scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ramp {
    permille: u32,
    last_step: Option<Instant>,
}

impl Ramp {
    /// A ramp at the start fraction.
    pub fn new(cfg: &RampConfig) -> Self {
        Ramp {
            permille: cfg.start.clamp(1, 1000),
            last_step: None,
        }
    }

    /// The current factor in per-mille.
    pub fn permille(&self) -> u32 {
        self.permille
    }

    /// Back to the start fraction (idle, stop lifted).
    pub fn restart(&mut self, cfg: &RampConfig, now: Instant) {
        self.permille = cfg.start.clamp(1, 1000);
        self.last_step = Some(now);
    }

    /// A calm completion: grow, at most once per `step`. Returns whether the
    /// factor changed.
    pub fn calm(&mut self, cfg: &RampConfig, now: Instant) -> bool {
        if self.permille >= 1000 {
            return false;
        }
        if let Some(t) = self.last_step {
            if now.saturating_duration_since(t) < cfg.step {
                return false;
            }
        }
        let next = (u64::from(self.permille) * u64::from(cfg.grow.max(1000))).div_ceil(1000);
        self.permille = (next.min(1000) as u32).max(self.permille + 1).min(1000);
        self.last_step = Some(now);
        true
    }

    /// An acceleration 429: cut multiplicatively, floored at the start.
    pub fn slow_down(&mut self, cfg: &RampConfig, now: Instant) {
        let cut = (u64::from(self.permille) * u64::from(cfg.cut.min(1000))) / 1000;
        self.permille = (cut as u32).max(cfg.start.clamp(1, 1000));
        self.last_step = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_full_and_cuts_to_floor() {
        let cfg = RampConfig::default();
        let mut r = Ramp::new(&cfg);
        let mut t = Instant::ZERO;
        let mut steps = 0;
        while r.permille() < 1000 {
            t = t + Duration::from_secs(1);
            assert!(r.calm(&cfg, t));
            steps += 1;
        }
        assert_eq!(steps, 6);
        assert!(!r.calm(&cfg, t + Duration::from_secs(5)));
        r.slow_down(&cfg, t);
        assert_eq!(r.permille(), 500);
        for _ in 0..5 {
            r.slow_down(&cfg, t);
        }
        assert_eq!(r.permille(), 100);
    }

    #[test]
    fn at_most_one_step_per_interval() {
        let cfg = RampConfig::default();
        let mut r = Ramp::new(&cfg);
        assert!(r.calm(&cfg, Instant::from_millis(10)));
        assert!(!r.calm(&cfg, Instant::from_millis(500)));
        assert!(r.calm(&cfg, Instant::from_millis(1010)));
    }
}
