//! A limit the user configured: the most trusted belief, and the one that
//! never learns. The lower of it and a stated limit wins
//! ([`combine`](super::Beliefs::effective)): a configured limit above what
//! the provider states is a ceiling nobody reaches.

use super::{Belief, Believed, Change, Sample, Sureness};
use crate::time::Instant;

/// A dimension's configured limit (units per minute), if any.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Configured(pub(crate) Option<u64>);

impl Belief for Configured {
    /// Nothing the provider says changes it: it is set when its scope is
    /// made, from the configuration.
    fn observe(&mut self, _sample: &Sample) -> Change {
        Change::NOTHING
    }

    fn believed(&self, _t: Instant) -> Option<Believed> {
        self.0.map(|limit| Believed {
            limit,
            capacity: None,
            sure: Sureness::Configured,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admit::belief::test_streams::{answer, throttled};

    #[test]
    fn a_configured_limit_learns_nothing_from_answers_or_429s() {
        let mut c = Configured(Some(600));
        let t = Instant::ZERO;
        let surprise = Sample::Surprised {
            over: 100,
            units: 10,
            again: true,
        };
        for s in [
            answer(Some(60), Some(10), None),
            throttled(5, None, t),
            surprise,
        ] {
            assert_eq!(c.observe(&s), Change::NOTHING);
        }
        let b = c.believed(t).unwrap();
        assert_eq!((b.limit, b.sure), (600, Sureness::Configured));
        assert_eq!(Configured(None).believed(t), None);
    }
}
