//! Corrections queued without the controller's lock: the slot cells of the
//! reservation slab and a lock-free stack of reservations whose settle or
//! release is waiting to be applied.
//!
//! Why: with two workers on one [`Shared`](super::Shared) controller, each
//! job took the lock twice (admit, then settle), and the second acquisition
//! doubled the contention. A settle or release now *claims* its
//! reservation's slot with one compare-and-swap, writes the usage into the
//! slot, and pushes the slot onto a stack; whoever holds the lock next
//! drains the stack first and applies each correction exactly as
//! `Controller::settle` / `release` would have, in the order they were
//! queued, with the `now` each was given. See
//! [`Shared`](super::Shared) for why that keeps every property.
//!
//! Every slot has a cell that never moves (cells live in chunks of doubling
//! size, allocated once, under the lock, when the slab first reaches them),
//! so the lock-free side can reach a cell without the slab's `Vec`.
//!
//! A cell's `state` word is `generation << 2 | phase`:
//!
//! * `IDLE`: no reservation (free slot, or removed under the lock);
//! * `OPEN`: a live reservation of that generation; the lock-free side may
//!   claim it, the locked side may remove it — one compare-and-swap decides
//!   which, so a reservation is never both expired and settled;
//! * `SETTLE` / `RELEASE`: claimed and queued; only the drain moves it on.
//!
//! The stack is a Treiber stack that is only ever pushed concurrently and
//! emptied whole (one `swap`) by the lock holder, so it has no ABA problem.

use super::reservation::ReservationId;
use crate::time::Instant;
use crate::usage::Usage;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

const PHASE_MASK: u64 = 0b11;
/// No reservation.
pub(crate) const IDLE: u64 = 0;
/// A live reservation.
pub(crate) const OPEN: u64 = 1;
/// Claimed: a settle is queued.
pub(crate) const SETTLE: u64 = 2;
/// Claimed: a release is queued.
pub(crate) const RELEASE: u64 = 3;

/// Chunk `k` holds `2^(k+6)` cells: 27 chunks cover every `u32` slot.
const CHUNKS: usize = 27;
const FIRST_CHUNK_BITS: u32 = 6;

#[inline]
fn word(generation: u32, phase: u64) -> u64 {
    (u64::from(generation) << 2) | phase
}

/// Where slot `s` lives: (chunk, offset).
#[inline]
fn locate(slot: u32) -> (usize, usize) {
    let x = u64::from(slot) + (1 << FIRST_CHUNK_BITS);
    let bits = 63 - x.leading_zeros();
    let k = bits - FIRST_CHUNK_BITS;
    (k as usize, (x - (1u64 << bits)) as usize)
}

/// One slot's lock-free side. Aligned to a cache line so that two workers'
/// reservations do not share one.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Cell {
    state: AtomicU64,
    /// Next queued slot + 1 (0: end of the stack).
    next: AtomicU64,
    /// The settle's `now`, nanoseconds since the origin (saturating).
    at_ns: AtomicU64,
    input: AtomicU64,
    output: AtomicU64,
    cache_creation: AtomicU64,
    cache_read: AtomicU64,
}

/// A correction taken off the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queued {
    /// Settle the reservation with this usage at this instant.
    Settle(ReservationId, Usage, Instant),
    /// Release the reservation.
    Release(ReservationId, Instant),
}

/// The slot cells, shared (`Arc`) between a controller's slab and whoever
/// queues corrections for it.
#[derive(Debug)]
pub(crate) struct Corrections {
    chunks: [OnceLock<Box<[Cell]>>; CHUNKS],
}

/// The top of the stack of queued corrections: slot + 1, 0 when empty.
/// Its owner ([`Shared`](super::Shared)) keeps it next to its mutex, on the
/// cache line the next lock holder touches anyway.
#[derive(Debug, Default)]
pub(crate) struct Stack(AtomicU64);

impl Stack {
    /// Whether anything is queued (a plain load: the hot path's check).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.load(Ordering::Relaxed) == 0
    }
}

impl Default for Corrections {
    fn default() -> Self {
        Corrections {
            chunks: std::array::from_fn(|_| OnceLock::new()),
        }
    }
}

fn ns_of(t: Instant) -> u64 {
    u64::try_from(t.since_origin().as_nanos()).unwrap_or(u64::MAX)
}

impl Corrections {
    #[inline]
    fn cell(&self, slot: u32) -> Option<&Cell> {
        let (k, off) = locate(slot);
        self.chunks.get(k)?.get()?.get(off)
    }

    /// The cell of `slot`, allocating its chunk on first use (under the
    /// controller's lock).
    #[inline]
    fn cell_or_init(&self, slot: u32) -> &Cell {
        let (k, off) = locate(slot);
        let chunk = self.chunks[k].get_or_init(|| {
            (0..1usize << (k as u32 + FIRST_CHUNK_BITS))
                .map(|_| Cell::default())
                .collect()
        });
        &chunk[off]
    }

    /// A reservation of `generation` now lives in `slot` (under the lock).
    #[inline]
    pub fn open(&self, slot: u32, generation: u32) {
        self.cell_or_init(slot)
            .state
            .store(word(generation, OPEN), Ordering::Release);
    }

    /// Removes an open reservation under the lock: `false` when the
    /// lock-free side claimed it first (its correction is queued).
    #[inline]
    pub fn close(&self, slot: u32, generation: u32) -> bool {
        match self.cell(slot) {
            Some(c) => c
                .state
                .compare_exchange(
                    word(generation, OPEN),
                    word(generation.wrapping_add(1), IDLE),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok(),
            None => false,
        }
    }

    /// Ends a queued reservation after its correction was applied.
    #[inline]
    fn finish(&self, cell: &Cell, generation: u32) {
        cell.state
            .store(word(generation.wrapping_add(1), IDLE), Ordering::Release);
    }

    /// Claims an open reservation and queues its settle. `false` when it is
    /// not open (stale handle, or expired): the caller settles under the
    /// lock instead, which handles a stale handle.
    #[inline]
    pub fn queue_settle(
        &self,
        stack: &Stack,
        id: ReservationId,
        usage: &Usage,
        now: Instant,
    ) -> bool {
        let Some(c) = self.claim(id, SETTLE) else {
            return false;
        };
        c.at_ns.store(ns_of(now), Ordering::Relaxed);
        c.input.store(usage.input_tokens, Ordering::Relaxed);
        c.output.store(usage.output_tokens, Ordering::Relaxed);
        c.cache_creation
            .store(usage.cache_creation_input_tokens, Ordering::Relaxed);
        c.cache_read
            .store(usage.cache_read_input_tokens, Ordering::Relaxed);
        push(stack, id.slot, c);
        true
    }

    /// Claims an open reservation and queues its release.
    #[inline]
    pub fn queue_release(&self, stack: &Stack, id: ReservationId, now: Instant) -> bool {
        let Some(c) = self.claim(id, RELEASE) else {
            return false;
        };
        c.at_ns.store(ns_of(now), Ordering::Relaxed);
        push(stack, id.slot, c);
        true
    }

    #[inline]
    fn claim(&self, id: ReservationId, phase: u64) -> Option<&Cell> {
        let c = self.cell(id.slot)?;
        c.state
            .compare_exchange(
                word(id.generation, OPEN),
                word(id.generation, phase),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .ok()?;
        Some(c)
    }

    /// Takes every queued correction, oldest first, and hands each to `f`
    /// with its slot's generation; the slot is idle again afterwards. Only
    /// the lock holder calls this.
    pub fn drain(&self, stack: &Stack, mut f: impl FnMut(Queued)) {
        let mut top = stack.0.swap(0, Ordering::Acquire);
        if top == 0 {
            return;
        }
        // The stack is newest first: reverse it in place (the lock holder
        // owns the popped cells' links) so corrections apply in queue order.
        let mut reversed = 0u64;
        while top != 0 {
            let Some(c) = self.cell((top - 1) as u32) else {
                break;
            };
            let next = c.next.load(Ordering::Relaxed);
            c.next.store(reversed, Ordering::Relaxed);
            reversed = top;
            top = next;
        }
        let mut at = reversed;
        while at != 0 {
            let slot = (at - 1) as u32;
            let Some(c) = self.cell(slot) else {
                break;
            };
            at = c.next.load(Ordering::Relaxed);
            let st = c.state.load(Ordering::Acquire);
            let generation = (st >> 2) as u32;
            let id = ReservationId { slot, generation };
            let t = Instant::from_origin(Duration::from_nanos(c.at_ns.load(Ordering::Relaxed)));
            let q = match st & PHASE_MASK {
                SETTLE => Queued::Settle(
                    id,
                    Usage {
                        input_tokens: c.input.load(Ordering::Relaxed),
                        output_tokens: c.output.load(Ordering::Relaxed),
                        cache_creation_input_tokens: c.cache_creation.load(Ordering::Relaxed),
                        cache_read_input_tokens: c.cache_read.load(Ordering::Relaxed),
                    },
                    t,
                ),
                RELEASE => Queued::Release(id, t),
                // Not reachable: only claimed cells are pushed.
                _ => continue,
            };
            self.finish(c, generation);
            f(q);
        }
    }
}

#[inline]
fn push(stack: &Stack, slot: u32, c: &Cell) {
    let me = u64::from(slot) + 1;
    let mut top = stack.0.load(Ordering::Relaxed);
    loop {
        c.next.store(top, Ordering::Relaxed);
        // Release: the drain's Acquire swap sees the cell's fields.
        match stack
            .0
            .compare_exchange_weak(top, me, Ordering::Release, Ordering::Relaxed)
        {
            Ok(_) => return,
            Err(now) => top = now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_map_onto_doubling_chunks() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(63), (0, 63));
        assert_eq!(locate(64), (1, 0));
        assert_eq!(locate(191), (1, 127));
        assert_eq!(locate(192), (2, 0));
        assert_eq!(locate(u32::MAX).0, CHUNKS - 1);
    }

    #[test]
    fn a_claim_excludes_a_close_and_drains_in_queue_order() {
        let q = Corrections::default();
        let st = Stack::default();
        for s in 0..3 {
            q.open(s, 7);
        }
        let id = |slot| ReservationId {
            slot,
            generation: 7,
        };
        let t = Instant::from_millis(5);
        assert!(q.queue_settle(&st, id(0), &Usage::default(), t));
        assert!(!q.close(0, 7), "claimed: the lock cannot remove it");
        assert!(!q.queue_release(&st, id(0), t), "claimed once");
        assert!(q.close(1, 7));
        assert!(!q.queue_release(&st, id(1), t), "closed: stale");
        assert!(q.queue_release(&st, id(2), t));
        let mut got = Vec::new();
        q.drain(&st, |c| got.push(c));
        assert_eq!(
            got,
            vec![
                Queued::Settle(id(0), Usage::default(), t),
                Queued::Release(id(2), t)
            ]
        );
        assert!(st.is_empty());
        // Drained slots are idle at the next generation.
        assert!(!q.queue_settle(&st, id(0), &Usage::default(), t));
    }
}
