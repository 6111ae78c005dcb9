//! A bucket as a key's shared record holds it (`ratewise-redis` and any
//! store shared between processes).

use super::*;

/// A bucket as a shared record holds it: its parameters and levels, its
/// refill time as Unix nanoseconds. Levels are scaled units as decimal
/// strings (JSON numbers lose 128-bit integers in many readers).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct BucketRecord {
    limit: u64,
    capacity: u64,
    credit_capacity: u64,
    permille: u32,
    level: String,
    credit: String,
    updated: i64,
}

impl Bucket {
    /// The record of this bucket; `shift`: Unix nanoseconds of the origin.
    pub(crate) fn to_record(&self, shift: i128) -> BucketRecord {
        BucketRecord {
            limit: self.limit,
            capacity: self.capacity,
            credit_capacity: self.credit_capacity,
            permille: self.permille,
            level: self.level.to_string(),
            credit: self.credit.to_string(),
            updated: unix_ns(self.updated, shift),
        }
    }

    /// A bucket from its record (`None` when the record is malformed).
    pub(crate) fn from_record(r: &BucketRecord, shift: i128) -> Option<Bucket> {
        let mut b = Bucket {
            limit: r.limit.clamp(1, MAX_LIMIT),
            capacity: r.capacity.max(1),
            credit_capacity: r.credit_capacity.max(1),
            permille: r.permille.clamp(1, MAX_PERMILLE),
            cap_scaled: 0,
            rate: 0,
            credit_cap: 0,
            level: r.level.parse().ok()?,
            credit: r.credit.parse().ok()?,
            updated: local_ns(r.updated, shift),
        };
        b.recompute();
        // A record is read from outside the process: a debt deeper than
        // ten minutes of refill is not something this controller ever
        // writes, and is cut to it rather than blocking the key for good.
        let floor = -(scaled(b.limit) * 10);
        b.level = b.level.max(floor);
        b.credit = b.credit.max(floor);
        Some(b)
    }
}

/// Nanoseconds since the origin as Unix nanoseconds (`shift`: the
/// origin's), clamped to `i64`.
pub(crate) fn unix_ns(t: u64, shift: i128) -> i64 {
    (i128::from(t) + shift).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Unix nanoseconds as nanoseconds since the origin (`shift`: the
/// origin's), never before it.
pub(crate) fn local_ns(t: i64, shift: i128) -> u64 {
    u64::try_from((i128::from(t) - shift).max(0)).unwrap_or(u64::MAX)
}
