//! The share of a stated limit this process may spend when others spend
//! it too and it cannot see them: a process cut off from its peers (a
//! shared store unreachable) paces at its share of the key's stated limits
//! (`share_permille`), and learns the share it really gets from its own
//! 429s, as on a provider that states nothing — never above the stated
//! limit, and raised again when the provider's bucket shows itself at
//! least half full (the others sent less than feared).

use super::estimated::SilentEstimate;
use super::{share_of, Belief, Believed, Change, Sample, Sureness};
use crate::time::Instant;

/// One dimension's share of a stated limit, as this process learns it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Share {
    /// What this process's own 429s taught of its share (units per
    /// minute), seeded at its configured share of the stated limit.
    pub(crate) estimate: SilentEstimate,
}

impl Share {
    /// A share starting at `permille` of `stated` at `t`, as if measured.
    pub(crate) fn seeded(stated: u64, permille: u32, t: Instant) -> Self {
        Share {
            estimate: SilentEstimate::seeded(share_of(stated, permille), t),
        }
    }

    /// The rate it allows of a stated limit `stated`, for a process pacing
    /// at `permille` of the key: what its 429s taught (never above the
    /// stated limit), else its share.
    pub(crate) fn of(&self, stated: u64, permille: u32, t: Instant) -> u64 {
        match self.estimate.rate(t) {
            Some(r) => r.min(stated),
            None => share_of(stated, permille),
        }
    }
}

impl Belief for Share {
    /// Admissions and ends are what this process let through; a 429 says
    /// its share ran dry; headroom says it may grow: the estimate's rules
    /// ([`SilentEstimate`]), started from the share.
    fn observe(&mut self, sample: &Sample) -> Change {
        self.estimate.observe(sample)
    }

    fn believed(&self, t: Instant) -> Option<Believed> {
        self.estimate.rate(t).map(|limit| Believed {
            limit,
            capacity: None,
            sure: Sureness::Share,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admit::belief::test_streams::{admitted, s, throttled};

    #[test]
    fn a_cut_off_process_starts_at_its_share_and_learns_what_it_gets() {
        // A third of a stated 600 RPM: 200.
        let mut sh = Share::seeded(600, 333, s(0.0));
        // Held just under the share, as a measurement is.
        let start = sh.of(600, 333, s(0.0));
        assert!((190..=199).contains(&start), "{start}");
        // It sends 3 a second and meets 429s 10 s apart: what it gets is
        // less than its share, and its 429s teach that.
        let mut t = 0.0;
        for _ in 0..2 {
            for _ in 0..30 {
                sh.observe(&admitted(1, s(t)));
                t += 1.0 / 3.0;
            }
            assert!(sh.observe(&throttled(1, None, s(t))).moved);
        }
        let r = sh.of(600, 333, s(t));
        assert!(r > 0 && r < start, "{r}");
        assert_eq!(sh.believed(s(t)).map(|b| b.sure), Some(Sureness::Share));
        // Never above the stated limit, whatever it probes to.
        assert!(sh.of(100, 333, s(t + 3600.0)) <= 100);
    }

    #[test]
    fn an_unseeded_share_is_the_configured_part() {
        let sh = Share::default();
        assert_eq!(sh.of(1000, 250, s(0.0)), 250);
        assert_eq!(sh.believed(s(0.0)), None);
    }
}
