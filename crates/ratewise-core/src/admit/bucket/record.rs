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
    corrected: String,
    updated: i64,
    /// The learned margin (scaled units) as of `margin_at` (Unix ns).
    /// Record version 3; an older record has none.
    #[serde(default = "zero_string")]
    margin: String,
    #[serde(default)]
    margin_at: i64,
}

fn zero_string() -> String {
    "0".to_owned()
}

impl Bucket {
    /// The record of this bucket; `shift`: Unix nanoseconds of the origin.
    pub(crate) fn to_record(&self, shift: i128) -> BucketRecord {
        let unix = |t: u64| {
            (i128::from(t) + shift).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
        };
        let updated = unix(self.updated);
        BucketRecord {
            limit: self.limit,
            capacity: self.capacity,
            credit_capacity: self.credit_capacity,
            permille: self.permille,
            level: self.level.to_string(),
            credit: self.credit.to_string(),
            corrected: self.corrected.to_string(),
            updated,
            margin: self.margin.to_string(),
            margin_at: unix(self.margin_at),
        }
    }

    /// A bucket from its record (`None` when the record is malformed).
    pub(crate) fn from_record(r: &BucketRecord, shift: i128) -> Option<Bucket> {
        let local = |t: i64| u64::try_from((i128::from(t) - shift).max(0)).unwrap_or(u64::MAX);
        let updated = local(r.updated);
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
            corrected: r.corrected.parse().ok()?,
            margin: r.margin.parse().ok()?,
            margin_at: local(r.margin_at),
            updated,
        };
        // (Clamps the margin to what this controller would keep.)
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
