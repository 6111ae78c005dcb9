//! Workspace-internal: used by ratewise's own crates; not part of the public API and not covered by semver.
//!
//! The seam for [`Store`](super::Store) implementors: what a store that
//! shares a [`Controller`](super::Controller)'s state between processes needs beyond the
//! controller's everyday API, and nothing else.
//!
//! A store shared between processes (`ratewise-redis` is one) keeps each
//! key's state as a [`KeyRecord`] beside the provider, and runs every
//! operation on a copy of its controller: import the key's record, run
//! the operation ([`Controller::apply`](super::Controller::apply) takes its event by reference so it
//! can be run again when the write loses a race), export the record and
//! write it only if nobody wrote in between. The hooks for that live here,
//! in one place and behind one import, rather than as methods every user
//! of a [`Controller`](super::Controller) sees:
//!
//! * [`KeyRecord`] and [`RECORD_FORMAT`] — the record and its format
//!   version (a reader refuses a record of a newer format).
//! * [`StoreHooks`] — on a [`Controller`](super::Controller): export and import a key's
//!   record; disown the reservations a lost record never held; pace at a
//!   share of the limits while cut off from the other processes.
//!
//! Nothing here lets a caller end a reservation it does not hold: a
//! reservation is only ever made by an admission, and its id cannot be
//! built from outside the crate.
//!
//! What a store may do with a reservation it was given — read it, copy
//! its id — compiles (so the two checks below fail for the reason they
//! name, not for a wrong path):
//!
//! ```
//! use ratewise_core::admit::{Amounts, Reservation, ReservationId, ScopeId};
//! fn read(r: &Reservation) -> (ReservationId, ScopeId, Amounts) {
//!     (r.id(), r.scope(), r.amounts())
//! }
//! ```
//!
//! ```compile_fail,E0451
//! // An id cannot be forged: its fields are the crate's own.
//! use ratewise_core::admit::ReservationId;
//! let id = ReservationId { slot: 0, generation: 0 };
//! ```
//!
//! ```compile_fail,E0451
//! // Nor a reservation around a real id: its fields are the crate's own.
//! use ratewise_core::admit::{Amounts, Reservation};
//! fn forge(r: &Reservation) -> Reservation {
//!     Reservation { id: r.id(), scope: r.scope(), amounts: Amounts::default(), ..todo!() }
//! }
//! ```

use super::ReservationId;

// The implementation is beside the controller's state, in
// `controller/records.rs`.
use crate::time::Now;

pub(in crate::admit) mod record;

pub use record::{
    remembered_share, KeyRecord, RECORD_FORMAT, REMEMBER_FORGOTTEN, REMEMBER_TRUSTED,
};

mod sealed {
    /// Only the crate's own types implement [`StoreHooks`](super::StoreHooks).
    pub trait Sealed {}
    impl Sealed for crate::admit::Controller {}
}

/// The operations only a store shared between processes needs, on a
/// [`Controller`](super::Controller). Sealed: implemented by the controller alone.
pub trait StoreHooks: sealed::Sealed {
    /// The shared state of `key` (or its group) as a record, with times
    /// made absolute at `now` (see [`KeyRecord`]); `None` when the key has
    /// not been used.
    fn export_key(&self, key: &str, now: Now) -> Option<KeyRecord>;

    /// Replaces the shared state of the record's key with the record's
    /// (read at `now`), creating its scopes as needed; this process's own
    /// state — its configured limits, its reservations, a probe in flight
    /// — stays. Scope ids stay valid. A malformed bucket in the record is
    /// left as this process had it.
    fn import_key(&mut self, rec: &KeyRecord, now: Now);

    /// Forgets an outstanding reservation without giving anything back:
    /// for a store whose shared record replaced the buckets the take was
    /// made from (a take made while cut off from the others, then a fresh
    /// record imported), so the buckets never held it. Its end then
    /// charges what it used and gives back nothing: a release is a no-op,
    /// a settle charges the actual usage. Returns whether it was
    /// outstanding.
    fn disown(&mut self, id: ReservationId, now: Now) -> bool;

    /// The outstanding reservations on `key` (or its group): for a store
    /// that learns its shared record was lost and replaced by one that
    /// never held them (to [`disown`](Self::disown) them).
    fn outstanding_on(&self, key: &str) -> Vec<ReservationId>;

    /// Paces every scope at `permille` of its effective limits (1,000 by
    /// default): what a process cut off from the store it shares a key
    /// through may use alone — its share of the key, when N processes
    /// share it. Bucket levels are kept (clamped to the smaller capacity).
    fn set_share(&mut self, permille: u32, now: Now);

    /// The per-mille of its limits this process paces at
    /// ([`set_share`](Self::set_share)).
    fn share_permille(&self) -> u32;
}

/// Beliefs remembered across a restart, on a [`Controller`](super::Controller):
/// what a journal (the proxy's), a run's state file or a shared store
/// keeps of what each key learned, and reads back. Sealed: implemented by
/// the controller alone.
pub trait Memory: sealed::Sealed {
    /// Starts `rec`'s key from the beliefs it holds (see the module docs):
    /// each of its model classes' stated limits, capacities and estimates,
    /// decayed by the record's age, for every class this controller
    /// keeps for the key (made on first use). Returns how many classes
    /// were recalled: 0 when the record is too old, has no time, or holds
    /// nothing learned.
    fn recall(&mut self, rec: &KeyRecord, now: Now) -> usize;

    /// What every key here has learned, to remember: each key's record,
    /// its beliefs alone ([`KeyRecord::beliefs_only`]), stamped `now` —
    /// for a journal or a store that keeps them for the next process.
    fn remembered(&self, now: Now) -> Vec<KeyRecord>;

    /// What `key` has learned, to remember (see
    /// [`remembered`](Memory::remembered)); `None` when it learned nothing
    /// or is not known here. One key at a time, for a caller that holds a
    /// shared controller's lock only briefly.
    fn remembered_key(&self, key: &str, now: Now) -> Option<KeyRecord>;
}
