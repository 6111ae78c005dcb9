//! Settle totals of a fast lane, striped by thread, written without a
//! read-modify-write where a thread owns its stripe.
//!
//! Why: a lock-free settle is on every fast-lane job's path. Two atomic
//! adds (`lock xadd`) cost about 13 ns of an uncontended job on this
//! project's machines, a third of what the job cost besides the clock
//! read. A stripe that only one thread writes needs no atomic add: its
//! owner loads and stores (plain moves on x86-64, and no contended line
//! either, since the stripe stays in the owner's cache).
//!
//! # How
//!
//! * The first [`OWNED`] threads of the process that settle on a lane each
//!   claim a stripe index for as long as they live (a thread-local value
//!   whose destructor gives it back). The index is the same in every lane
//!   of every limiter, so ownership is per thread, not per lane. Further
//!   threads share four stripes (round-robin), with atomic adds.
//! * Each stripe holds free-running wrapping counters: nothing is ever
//!   reset, so there is no overflow to guard against and no drain forced
//!   by one. The lock holder keeps what it has already taken ([`Seen`])
//!   and takes the difference.
//! * A settle writes its amounts, then its count (release); a drain reads
//!   the count first (acquire), so every counted settle's amounts are
//!   included. A drain may also take part of a settle still being written
//!   (say its actual input but not yet its estimate): the lane's books
//!   allow that (they only need every finish to come after its admission),
//!   and the buckets are corrected with a sign per dimension
//!   (`Controller::lane_drained`), so the part taken now and the rest
//!   taken at the next drain add up to the settle's correction. (A
//!   saturating `estimate − actual` would have put back the whole estimate
//!   of a settle whose actual came one drain early: credit that was used.)

use super::reservation::Amounts;
use std::cell::{Cell, OnceCell};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Stripes that a thread may own.
pub(crate) const OWNED: usize = 8;
/// Stripes for the threads beyond those, taken round-robin (atomic adds):
/// a large pool of settling threads spreads over several lines.
const SHARED_STRIPES: usize = 4;
/// The first shared stripe (also where a thread's settles go once its
/// owned stripe is given back, during its teardown).
const SHARED: usize = OWNED;
/// All stripes.
const STRIPES: usize = OWNED + SHARED_STRIPES;
const UNCLAIMED: u8 = u8::MAX;

/// Words of one parity: input estimate, input actual, output estimate,
/// output actual, count. The count is written last.
const WORDS: usize = 5;
const COUNT: usize = WORDS - 1;

/// Which owned stripes are taken (bit i: stripe i).
static CLAIMED: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// This thread's stripe ([`UNCLAIMED`] until its first settle).
    static STRIPE: Cell<u8> = const { Cell::new(UNCLAIMED) };
    /// Gives an owned stripe back when the thread ends.
    static CLAIM: OnceCell<Claim> = const { OnceCell::new() };
}

struct Claim(usize);

impl Drop for Claim {
    fn drop(&mut self) {
        // Settles later in this thread's teardown use the shared stripe.
        let _ = STRIPE.try_with(|s| s.set(SHARED as u8));
        // Release: the next owner's first load sees this owner's last store.
        CLAIMED.fetch_and(!(1 << self.0), Ordering::Release);
    }
}

/// This thread's stripe and whether it owns it.
#[inline]
fn stripe() -> (usize, bool) {
    let s = STRIPE.try_with(Cell::get).unwrap_or(SHARED as u8);
    let s = if s == UNCLAIMED { claim() } else { s as usize };
    (s, s < OWNED)
}

#[cold]
fn claim() -> usize {
    let mut bits = CLAIMED.load(Ordering::Relaxed);
    let mut idx = loop {
        let free = !bits & ((1 << OWNED) - 1);
        if free == 0 {
            break shared_stripe();
        }
        let i = free.trailing_zeros();
        match CLAIMED.compare_exchange_weak(
            bits,
            bits | 1 << i,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => break i as usize,
            Err(b) => bits = b,
        }
    };
    if idx < OWNED {
        // Without a destructor (the thread is ending) the claim could never
        // be given back: do not keep it.
        // (A refused claim is forgotten, not dropped: its destructor would
        // give the stripe back a second time.)
        let kept = CLAIM
            .try_with(|c| c.set(Claim(idx)).map_err(std::mem::forget).is_ok())
            .unwrap_or(false);
        if !kept {
            CLAIMED.fetch_and(!(1 << idx), Ordering::Release);
            idx = shared_stripe();
        }
    }
    let _ = STRIPE.try_with(|s| s.set(idx as u8));
    idx
}

/// A shared stripe for a thread that owns none, round-robin.
fn shared_stripe() -> usize {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    OWNED + NEXT.fetch_add(1, Ordering::Relaxed) as usize % SHARED_STRIPES
}

/// One stripe: per generation parity, the [`WORDS`] counters, on lines of
/// their own.
#[repr(align(64))]
#[derive(Debug, Default)]
struct Stripe([[AtomicU64; WORDS]; 2]);

/// A lane's settle totals.
#[derive(Debug, Default)]
pub(crate) struct Stripes([Stripe; STRIPES]);

/// What the lock holder has taken from each counter so far.
#[derive(Debug, Default)]
pub(crate) struct Seen([[[u64; WORDS]; 2]; STRIPES]);

impl Stripes {
    /// Adds one settle of generation parity `parity` (0 or 1).
    #[inline]
    pub fn add(&self, parity: usize, est: &Amounts, actual: &Amounts) {
        let (s, owned) = stripe();
        let w = &self.0[s].0[parity & 1];
        let bump = |w: &AtomicU64, x: u64| {
            if owned {
                w.store(w.load(Ordering::Relaxed).wrapping_add(x), Ordering::Release);
            } else {
                w.fetch_add(x, Ordering::Release);
            }
        };
        bump(&w[0], est.input);
        bump(&w[1], actual.input);
        bump(&w[2], est.output);
        bump(&w[3], actual.output);
        bump(&w[COUNT], 1);
    }

    /// Takes what was settled since the last take, per parity: (estimates,
    /// actuals).
    pub fn take(&self, seen: &mut Seen) -> [(Amounts, Amounts); 2] {
        let mut out = [(Amounts::default(), Amounts::default()); 2];
        for (stripe, seen) in self.0.iter().zip(&mut seen.0) {
            for (p, (w, seen)) in stripe.0.iter().zip(seen).enumerate() {
                // The count first: most stripes are idle, and a count that
                // moved brings its settles' amounts with it. (A stripe whose
                // count has not moved is skipped even with a settle half
                // written: its amounts wait for its count.)
                let n = w[COUNT].load(Ordering::Acquire);
                if n == seen[COUNT] {
                    continue;
                }
                let mut d = [0; WORDS];
                d[COUNT] = n.wrapping_sub(seen[COUNT]);
                seen[COUNT] = n;
                for k in 0..COUNT {
                    let v = w[k].load(Ordering::Acquire);
                    d[k] = v.wrapping_sub(seen[k]);
                    seen[k] = v;
                }
                out[p].0.add(&Amounts {
                    requests: d[COUNT],
                    input: d[0],
                    output: d[2],
                });
                out[p].1.add(&Amounts {
                    requests: d[COUNT],
                    input: d[1],
                    output: d[3],
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(input: u64, output: u64) -> Amounts {
        Amounts {
            requests: 1,
            input,
            output,
        }
    }

    #[test]
    fn takes_each_settle_once_per_parity() {
        let s = Stripes::default();
        let mut seen = Seen::default();
        s.add(0, &a(10, 20), &a(7, 3));
        s.add(1, &a(5, 5), &a(5, 1));
        s.add(0, &a(1, 2), &a(1, 2));
        let got = s.take(&mut seen);
        assert_eq!(
            got[0].0,
            Amounts {
                requests: 2,
                input: 11,
                output: 22
            }
        );
        assert_eq!(
            got[0].1,
            Amounts {
                requests: 2,
                input: 8,
                output: 5
            }
        );
        assert_eq!(got[1].0, a(5, 5));
        assert_eq!(got[1].1, a(5, 1));
        assert_eq!(
            s.take(&mut seen),
            [(Amounts::default(), Amounts::default()); 2]
        );
    }

    #[test]
    fn counters_wrap_without_loss() {
        let s = Stripes::default();
        let mut seen = Seen::default();
        let (i, _) = stripe();
        for w in &s.0[i].0[0] {
            w.store(u64::MAX - 1, Ordering::Relaxed);
        }
        seen.0[i][0] = [u64::MAX - 1; WORDS];
        s.add(0, &a(5, 6), &a(3, 4));
        let got = s.take(&mut seen);
        assert_eq!(got[0].0, a(5, 6));
        assert_eq!(got[0].1, a(3, 4));
    }

    /// The tests that start threads, one at a time (they claim stripes).
    static SERIAL: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

    #[test]
    fn threads_beyond_the_owned_stripes_share_one_without_loss() {
        let _one = SERIAL.lock();
        let s = Stripes::default();
        let mut seen = Seen::default();
        let threads = OWNED + 4;
        let per = 1_000;
        // All alive at once, so some cannot own a stripe.
        let barrier = std::sync::Barrier::new(threads);
        std::thread::scope(|sc| {
            for _ in 0..threads {
                sc.spawn(|| {
                    barrier.wait();
                    for _ in 0..per {
                        s.add(1, &a(3, 2), &a(2, 1));
                    }
                    barrier.wait();
                });
            }
        });
        let n = (threads * per) as u64;
        let got = s.take(&mut seen);
        assert_eq!(
            got[1].0,
            Amounts {
                requests: n,
                input: 3 * n,
                output: 2 * n
            }
        );
        assert_eq!(
            got[1].1,
            Amounts {
                requests: n,
                input: 2 * n,
                output: n
            }
        );
        let shared = s.0[OWNED..]
            .iter()
            .map(|st| st.0[1][COUNT].load(Ordering::Relaxed));
        assert!(shared.sum::<u64>() > 0);
    }

    #[test]
    fn ended_threads_give_their_stripes_back() {
        let _one = SERIAL.lock();
        // Twice as many threads as stripes, one after another: each finds
        // the stripe of the one before it free again.
        let owned = (0..2 * OWNED)
            .filter(|_| std::thread::spawn(|| stripe().1).join().unwrap())
            .count();
        assert_eq!(owned, 2 * OWNED);
    }
}
