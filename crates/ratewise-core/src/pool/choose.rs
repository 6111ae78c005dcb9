//! The choice of a member for a job's next attempt ([`choose`]): by
//! soonest admission, weights breaking ties and bounding shares.

use super::member::MemberId;
use crate::time::Instant;
use std::collections::VecDeque;
use std::time::Duration;

/// One eligible member, as the choice sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// Which member.
    pub member: MemberId,
    /// When it could admit the job (at or after now).
    pub ready_at: Instant,
    /// Its weight (at least 1).
    pub weight: u64,
}

/// The members of the last `window` sends: each member's recent share.
#[derive(Debug, Clone, Default)]
pub struct Shares {
    window: usize,
    recent: VecDeque<MemberId>,
}

impl Shares {
    /// An empty window of `window` sends (at least 1).
    pub fn new(window: usize) -> Self {
        Shares {
            window: window.max(1),
            recent: VecDeque::new(),
        }
    }

    /// A send went to `m`.
    pub fn record(&mut self, m: MemberId) {
        if self.recent.len() == self.window {
            self.recent.pop_front();
        }
        self.recent.push_back(m);
    }

    /// Sends to `m` in the window.
    pub fn of(&self, m: MemberId) -> u64 {
        self.recent.iter().filter(|x| **x == m).count() as u64
    }

    /// Sends in the window.
    pub fn total(&self) -> u64 {
        self.recent.len() as u64
    }

    /// Whether `m`'s share of the window is above `weight / total_weight`.
    fn over(&self, m: MemberId, weight: u64, total_weight: u64) -> bool {
        u128::from(self.of(m)) * u128::from(total_weight)
            > u128::from(weight) * u128::from(self.total())
    }
}

/// The member for the next attempt among `candidates`; `None` when there
/// is none. The one that can admit the job soonest, as each member's own
/// admission predicts (its buckets, pause, learned or estimated limits) —
/// never round robin. Weights break ties and bound each member's share of
/// the recent sends among the members tied with it.
///
/// * **Soonest.** Each eligible member comes with the instant it could
///   admit the job (`ready_at`: now, a bucket's refill, a pause's end, an
///   overload hold's end). The earliest wins.
/// * **Ties.** Members ready within `tie` ([`PoolConfig::tie`](super::PoolConfig::tie))
///   of the earliest are tied. Among them a member whose share of the
///   recent sends ([`Shares`], the last
///   [`PoolConfig::share_window`](super::PoolConfig::share_window) sends)
///   is above its weight's share of all candidates' weights is passed
///   over for one that is not; then the smooth weighted choice: the least
///   `(sends + 1) / weight`, then the earliest, then the lowest number —
///   deterministic, no random draw.
///
/// A wider `tie` bounds shares harder at the cost of waiting: a member
/// under its share is preferred when it is ready no more than `tie` after
/// the soonest one. The default (zero) only bounds members ready at the
/// same instant, so no job waits for a weight.
///
/// ```
/// use ratewise_core::pool::{choose, Candidate, Pool, PoolConfig, Member, Shares};
/// use ratewise_core::{Instant, Provider};
/// use std::time::Duration;
///
/// let mut pool = Pool::new(PoolConfig::default());
/// let a = pool.add(Member::new("api.anthropic.com", Provider::Anthropic, "a").weight(2));
/// let b = pool.add(Member::new("api.openai.com", Provider::Openai, "b"));
/// let mut shares = Shares::new(30);
/// let both_now = [
///     Candidate { member: a, ready_at: Instant::ZERO, weight: 2 },
///     Candidate { member: b, ready_at: Instant::ZERO, weight: 1 },
/// ];
/// for _ in 0..30 {
///     let m = choose(&both_now, &shares, Duration::ZERO).unwrap();
///     shares.record(m);
/// }
/// assert_eq!((shares.of(a), shares.of(b)), (20, 10));
/// // Whatever the weights, a member that can admit sooner wins.
/// let b_sooner = [
///     Candidate { member: a, ready_at: Instant::from_millis(900), weight: 2 },
///     Candidate { member: b, ready_at: Instant::from_millis(100), weight: 1 },
/// ];
/// assert_eq!(choose(&b_sooner, &shares, Duration::ZERO), Some(b));
/// ```
pub fn choose(candidates: &[Candidate], shares: &Shares, tie: Duration) -> Option<MemberId> {
    let soonest = candidates.iter().map(|c| c.ready_at).min()?;
    let total_weight: u64 = candidates.iter().map(|c| c.weight).sum();
    let tied: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| c.ready_at <= soonest + tie)
        .collect();
    let under: Vec<&Candidate> = tied
        .iter()
        .copied()
        .filter(|c| !shares.over(c.member, c.weight, total_weight))
        .collect();
    let among = if under.is_empty() { tied } else { under };
    among
        .into_iter()
        .min_by(|a, b| {
            // (sends_a + 1) / w_a against (sends_b + 1) / w_b, crosswise.
            let ka = u128::from(shares.of(a.member) + 1) * u128::from(b.weight);
            let kb = u128::from(shares.of(b.member) + 1) * u128::from(a.weight);
            ka.cmp(&kb)
                .then(a.ready_at.cmp(&b.ready_at))
                .then(a.member.cmp(&b.member))
        })
        .map(|c| c.member)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(m: u16, at_ms: u64, weight: u64) -> Candidate {
        Candidate {
            member: MemberId(m),
            ready_at: Instant::from_millis(at_ms),
            weight,
        }
    }

    #[test]
    fn the_soonest_member_wins_whatever_its_weight() {
        let shares = Shares::new(16);
        let got = choose(&[c(0, 500, 10), c(1, 100, 1)], &shares, Duration::ZERO);
        assert_eq!(got, Some(MemberId(1)));
    }

    #[test]
    fn nothing_to_choose_from() {
        assert_eq!(choose(&[], &Shares::new(4), Duration::ZERO), None);
    }

    #[test]
    fn members_ready_at_once_share_by_weight() {
        let mut shares = Shares::new(30);
        let cands = [c(0, 0, 2), c(1, 0, 1)];
        let mut sent = [0u32; 2];
        for _ in 0..30 {
            let m = choose(&cands, &shares, Duration::ZERO).unwrap();
            shares.record(m);
            sent[m.index()] += 1;
        }
        assert_eq!(sent, [20, 10]);
    }

    #[test]
    fn ties_are_broken_the_same_way_every_time() {
        let shares = Shares::new(4);
        let cands = [c(1, 0, 1), c(0, 0, 1)];
        assert_eq!(choose(&cands, &shares, Duration::ZERO), Some(MemberId(0)));
        assert_eq!(choose(&cands, &shares, Duration::ZERO), Some(MemberId(0)));
    }

    #[test]
    fn a_member_over_its_share_yields_within_the_tie_window_only() {
        let mut shares = Shares::new(10);
        for _ in 0..10 {
            shares.record(MemberId(0));
        }
        // Member 0 is ready now, member 1 in 200 ms: 0 is over its half.
        let cands = [c(0, 0, 1), c(1, 200, 1)];
        assert_eq!(
            choose(&cands, &shares, Duration::ZERO),
            Some(MemberId(0)),
            "no tie window: the soonest goes, nobody waits for a weight"
        );
        assert_eq!(
            choose(&cands, &shares, Duration::from_millis(250)),
            Some(MemberId(1)),
            "within the tie window the member under its share is preferred"
        );
    }

    #[test]
    fn the_window_forgets_old_sends() {
        let mut shares = Shares::new(3);
        for m in [0, 0, 0, 1, 1] {
            shares.record(MemberId(m));
        }
        assert_eq!(shares.total(), 3);
        assert_eq!(shares.of(MemberId(0)), 1);
        assert_eq!(shares.of(MemberId(1)), 2);
    }
}
