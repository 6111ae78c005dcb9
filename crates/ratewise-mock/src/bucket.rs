//! A continuously refilled token bucket with a per-minute limit, in
//! provider time.
//!
//! The level refills at `limit / 60` per second up to the bucket's
//! **capacity**: a minute of the limit by default ([`Bucket::per_minute`]),
//! or `limit × capacity_secs / 60` ([`Bucket::with_capacity_secs`]) for a
//! provider that enforces a per-minute limit over a shorter interval
//! (Anthropic documents that 60 RPM may be enforced as 1 request per
//! second). A bucket starts full.
//!
//! **Admission.** A request is admitted when every amount it needs is
//! available. The amount a bucket needs for admission is
//! `min(cost, capacity)`: a cost larger than the whole bucket (a
//! `max_tokens` of 4096 against an output bucket holding 2 s = 400 tokens)
//! is admitted once the bucket is full, and the whole cost is taken, so the
//! level goes negative — a debt the refill pays back before anything else
//! fits. Providers accept a `max_tokens` far above a few seconds of refill;
//! refusing such a request forever would be a provider no one could use,
//! and the debt keeps the long-run rate at the limit.
//!
//! The level also goes below zero when an end-of-request correction
//! charges more than was reserved (the provider's rule for output tokens),
//! and when a rejected request is charged (`MockConfig::count_rejected`).
//!
//! **Biases** ([`Bucket::biased`], `MockConfig::bias`): a bucket may really
//! hold less than its headers imply (a *shortfall*: [`Bucket::shown_remaining`]
//! adds what is missing), and a second client on the key may take a share
//! of the refill while the level is above zero (an *other client*). Both
//! change the true state, so admission, [`Bucket::wait_for`] and
//! [`Bucket::until_full`] account for them.

use ratewise_core::Instant;
use std::time::Duration;

/// Longest wait a bucket reports (a limit of 0 never refills).
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// The default capacity: a minute of the limit.
pub const MINUTE_SECS: f64 = 60.0;

/// One per-minute bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    limit: u64,
    /// What the bucket really holds when full.
    capacity: f64,
    /// What the headers add to the level: the capacity they imply minus
    /// the real one (0 without a shortfall).
    shown_extra: f64,
    /// Share of the refill a second client takes while the level is above
    /// zero (0 without one).
    other_share: f64,
    level: f64,
    at: Instant,
}

/// Which refill a wait is reckoned at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refill {
    /// What the bucket really gets (a second client takes its share).
    True,
    /// What the provider knows and promises in its headers: its whole
    /// refill rate.
    Promised,
}

impl Bucket {
    /// A full bucket of `limit` per minute holding a minute of it, at `now`.
    pub fn per_minute(limit: u64, now: Instant) -> Self {
        Bucket::with_capacity_secs(limit, MINUTE_SECS, now)
    }

    /// A full bucket of `limit` per minute holding `capacity_secs` seconds
    /// of refill (`limit × capacity_secs / 60`, not rounded), at `now`. A
    /// `capacity_secs` that is not a positive finite number means a minute.
    ///
    /// ```
    /// use ratewise_core::Instant;
    /// use ratewise_mock::bucket::Bucket;
    /// let mut b = Bucket::with_capacity_secs(120, 10.0, Instant::ZERO);
    /// assert_eq!(b.limit(), 120);
    /// assert_eq!(b.remaining(Instant::ZERO), 20); // 10 s of 2 per second
    /// ```
    pub fn with_capacity_secs(limit: u64, capacity_secs: f64, now: Instant) -> Self {
        let secs = if capacity_secs.is_finite() && capacity_secs > 0.0 {
            capacity_secs
        } else {
            MINUTE_SECS
        };
        let capacity = limit as f64 * secs / MINUTE_SECS;
        Bucket {
            limit,
            capacity,
            shown_extra: 0.0,
            other_share: 0.0,
            level: capacity,
            at: now,
        }
    }

    /// This (full, unused) bucket with the biases of `MockConfig::bias`:
    /// it really holds `(1 − shortfall)` of its capacity, while
    /// [`Bucket::shown_remaining`] reports as if it held all of it; and a
    /// second client takes `other_share` of the refill while the level is
    /// above zero (only what is there: none of a debt's payback). Shares
    /// are clamped to `[0, MAX_SHARE]` (0.99), a value that is not finite meaning 0.
    ///
    /// ```
    /// use ratewise_core::Instant;
    /// use ratewise_mock::bucket::Bucket;
    /// let t0 = Instant::ZERO;
    /// // 120 per minute over 10 s: 20 implied, 16 real
    /// let mut b = Bucket::with_capacity_secs(120, 10.0, t0).biased(0.2, 0.0);
    /// assert_eq!((b.remaining(t0), b.shown_remaining(t0)), (16, 20));
    /// b.take(16, t0);
    /// assert!(!b.fits(1, t0));
    /// assert_eq!(b.shown_remaining(t0), 4); // the headers still offer 4
    /// ```
    pub fn biased(mut self, shortfall: f64, other_share: f64) -> Self {
        let share = |x: f64| {
            if x.is_finite() && x > 0.0 {
                x.min(crate::config::MAX_SHARE)
            } else {
                0.0
            }
        };
        let implied = self.capacity;
        self.capacity = implied * (1.0 - share(shortfall));
        self.shown_extra = implied - self.capacity;
        self.other_share = share(other_share);
        self.level = self.capacity;
        self
    }

    /// The per-minute limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// What the bucket really holds when full (may be fractional).
    pub fn capacity(&self) -> f64 {
        self.capacity
    }

    fn per_sec(&self) -> f64 {
        self.limit as f64 / MINUTE_SECS
    }

    /// The refill left to this key while the level is above zero.
    fn net_per_sec(&self) -> f64 {
        self.per_sec() * (1.0 - self.other_share)
    }

    fn refill(&mut self, now: Instant) {
        if now > self.at {
            let mut dt = (now - self.at).as_secs_f64();
            if self.other_share > 0.0 && self.level < 0.0 {
                // A debt is paid back at the full rate: the other client
                // takes only what is there.
                let to_zero = -self.level / self.per_sec();
                if dt <= to_zero {
                    self.level += dt * self.per_sec();
                    dt = 0.0;
                } else {
                    self.level = 0.0;
                    dt -= to_zero;
                }
            }
            let rate = if self.other_share > 0.0 {
                self.net_per_sec()
            } else {
                self.per_sec()
            };
            self.level = (self.level + dt * rate).min(self.capacity);
            self.at = now;
        }
    }

    /// What admitting a cost of `amount` needs in the bucket:
    /// `min(amount, capacity)`.
    fn need(&self, amount: u64) -> f64 {
        (amount as f64).min(self.capacity)
    }

    /// Whole units available at `now` (never negative): the truth.
    pub fn remaining(&mut self, now: Instant) -> u64 {
        self.refill(now);
        self.level.max(0.0).floor() as u64
    }

    /// Whole units the headers report at `now` (never negative): the true
    /// level plus what a capacity shortfall hides ([`Bucket::biased`]);
    /// the same as [`Bucket::remaining`] without one.
    pub fn shown_remaining(&mut self, now: Instant) -> u64 {
        self.refill(now);
        (self.level + self.shown_extra).max(0.0).floor() as u64
    }

    /// Time until a cost of `amount` fits (an amount above the capacity
    /// waits for a full bucket); zero when it already does.
    pub fn wait_for(&mut self, amount: u64, now: Instant) -> Duration {
        self.refill(now);
        if self.limit == 0 && amount > 0 {
            return MAX_WAIT;
        }
        self.wait_secs(self.need(amount), Refill::True)
    }

    /// Time until the bucket is full again (at most `capacity_secs`, more
    /// while it is paying back a debt or a second client shares the
    /// refill). With a capacity shortfall this is also when the full-size
    /// bucket the headers describe would be full.
    pub fn until_full(&mut self, now: Instant) -> Duration {
        self.refill(now);
        self.wait_secs(self.capacity, Refill::True)
    }

    /// Time until the bucket is full again as its `*-reset` header says
    /// it: at the provider's own refill rate. The provider cannot know
    /// what a second client will take of the refill (it takes only what
    /// is there, when it comes), so with one its headers promise a full
    /// bucket sooner than it will be; [`Bucket::until_full`] is the truth.
    /// Anthropic's reset is "the time when the request rate limit will be
    /// fully replenished", OpenAI's "the time until the rate limit …
    /// resets to its initial state" (the crate's README, sources A and
    /// O): both are the provider's reckoning from what it knows.
    ///
    /// ```
    /// use ratewise_core::Instant;
    /// use ratewise_mock::bucket::Bucket;
    /// let t0 = Instant::ZERO;
    /// // 60 per minute over 10 s; another client takes half the refill
    /// let mut b = Bucket::with_capacity_secs(60, 10.0, t0).biased(0.0, 0.5);
    /// b.take(10, t0);
    /// assert_eq!(b.shown_until_full(t0).as_secs(), 10);
    /// assert_eq!(b.until_full(t0).as_secs(), 20);
    /// ```
    pub fn shown_until_full(&mut self, now: Instant) -> Duration {
        self.refill(now);
        self.wait_secs(self.capacity, Refill::Promised)
    }

    /// Time until a cost of `amount` fits as a 429's `retry-after` says
    /// it: at the provider's own refill rate, as
    /// [`Bucket::shown_until_full`]; [`Bucket::wait_for`] is the truth.
    pub fn shown_wait_for(&mut self, amount: u64, now: Instant) -> Duration {
        self.refill(now);
        if self.limit == 0 && amount > 0 {
            return MAX_WAIT;
        }
        self.wait_secs(self.need(amount), Refill::Promised)
    }

    /// Time until the (refilled) level reaches `target`: in truth, or as
    /// the provider promises it (at its whole refill rate).
    fn wait_secs(&self, target: f64, refill: Refill) -> Duration {
        let need = target - self.level;
        if need <= 0.0 {
            return Duration::ZERO;
        }
        if self.limit == 0 {
            return MAX_WAIT;
        }
        let secs = if self.other_share == 0.0 || refill == Refill::Promised {
            need / self.per_sec()
        } else if self.level >= 0.0 {
            need / self.net_per_sec()
        } else if target <= 0.0 {
            need / self.per_sec()
        } else {
            // The debt at the full rate, then the rest at the net rate.
            -self.level / self.per_sec() + target / self.net_per_sec()
        };
        Duration::try_from_secs_f64(secs)
            .unwrap_or(MAX_WAIT)
            .min(MAX_WAIT)
    }

    /// Is a cost of `amount` admitted now? It is when the level holds
    /// `min(amount, capacity)`: a cost above the capacity is admitted by a
    /// full bucket (and leaves a debt when taken). Nothing is admitted by a
    /// limit of 0.
    pub fn fits(&mut self, amount: u64, now: Instant) -> bool {
        self.refill(now);
        if self.limit == 0 {
            return amount == 0;
        }
        self.need(amount) <= self.level
    }

    /// Takes `amount` (may drive the level negative).
    pub fn take(&mut self, amount: u64, now: Instant) {
        self.refill(now);
        self.level -= amount as f64;
    }

    /// Gives back `amount`, up to the capacity.
    pub fn give_back(&mut self, amount: u64, now: Instant) {
        self.refill(now);
        self.level = (self.level + amount as f64).min(self.capacity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refills_continuously_per_minute() {
        let t0 = Instant::ZERO;
        let mut b = Bucket::per_minute(60, t0);
        b.take(60, t0);
        assert_eq!(b.remaining(t0), 0);
        assert_eq!(b.wait_for(1, t0), Duration::from_secs(1));
        let t30 = Instant::from_millis(30_000);
        assert_eq!(b.remaining(t30), 30);
        assert_eq!(b.until_full(t30), Duration::from_secs(30));
        assert_eq!(b.remaining(Instant::from_millis(600_000)), 60);
    }

    #[test]
    fn corrections_can_refund_or_overdraw() {
        let t0 = Instant::ZERO;
        let mut b = Bucket::per_minute(100, t0);
        b.take(100, t0);
        b.give_back(70, t0);
        assert_eq!(b.remaining(t0), 70);
        b.take(90, t0);
        assert_eq!(b.remaining(t0), 0);
        assert!(!b.fits(1, t0));
        let w = b.wait_for(1, t0).as_secs_f64(); // 21 units at 100/60 per s
        assert!((w - 12.6).abs() < 1e-6, "{w}");
        assert!(!Bucket::per_minute(0, t0).fits(1, t0));
        assert_eq!(Bucket::per_minute(0, t0).wait_for(1, t0), MAX_WAIT);
    }

    #[test]
    fn a_short_bucket_holds_seconds_of_refill_at_the_same_rate() {
        let t0 = Instant::ZERO;
        let mut b = Bucket::with_capacity_secs(120, 10.0, t0);
        assert_eq!(b.capacity(), 20.0);
        assert_eq!(b.until_full(t0), Duration::ZERO);
        b.take(20, t0);
        assert!(!b.fits(1, t0));
        assert_eq!(b.wait_for(1, t0), Duration::from_millis(500));
        assert_eq!(b.until_full(t0), Duration::from_secs(10));
        // an hour idle still holds only 10 s of refill
        assert_eq!(b.remaining(Instant::from_millis(3_600_000)), 20);
        // refunds stop at the capacity too
        b.give_back(1000, Instant::from_millis(3_600_000));
        assert_eq!(b.remaining(Instant::from_millis(3_600_000)), 20);
        // nonsense capacities mean a minute
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(Bucket::with_capacity_secs(120, bad, t0).capacity(), 120.0);
        }
    }

    #[test]
    fn a_cost_above_the_capacity_is_admitted_by_a_full_bucket_and_leaves_a_debt() {
        let t0 = Instant::ZERO;
        // 12 000 per minute over 2 s: 400 in the bucket, 200 per second
        let mut b = Bucket::with_capacity_secs(12_000, 2.0, t0);
        assert!(b.fits(4096, t0));
        b.take(4096, t0);
        assert_eq!(b.remaining(t0), 0);
        // the debt (3696) and a refill of the bucket: 4096 / 200 per s
        assert_eq!(b.until_full(t0), Duration::from_millis(20_480));
        assert!(!b.fits(1, Instant::from_millis(18_480)));
        assert!(b.fits(1, Instant::from_millis(18_485)));
        // a second oversize request waits for the full bucket
        let t1 = Instant::from_millis(19_000);
        assert!(!b.fits(4096, t1));
        assert_eq!(b.wait_for(4096, t1), Duration::from_millis(1_480));
        assert!(b.fits(4096, Instant::from_millis(20_480)));
        // a fractional capacity below one unit still admits one at the rate
        let mut r = Bucket::with_capacity_secs(20, 2.0, t0); // 0.67 requests
        assert!(r.fits(1, t0));
        r.take(1, t0);
        assert!(!r.fits(1, Instant::from_millis(2_999)));
        assert!(r.fits(1, Instant::from_millis(3_001)));
    }
}
