//! A key's shared admission state as a value: what every process that
//! sends with one API key (or key group) must agree on, to be kept in a
//! store they share.
//!
//! A [`KeyRecord`] holds, for one key, its stop and, per model class, the
//! bucket levels with the parameters they refill at, the pause, the ramp,
//! the limits and capacities learned from the server. It leaves out what is
//! each process's own: its configuration, its reservations (a reservation
//! is a take from a refilling bucket, so one whose process died is simply
//! charged at its estimate), the retry budget and the jitter source.
//!
//! Times are absolute (nanoseconds since the Unix epoch on the wall clock),
//! so processes whose monotonic clocks started at different moments read
//! one record alike: [`StoreHooks::export_key`](crate::admit::store_kit::StoreHooks::export_key)
//! and [`import_key`](crate::admit::store_kit::StoreHooks::import_key) convert with the `now`
//! they are given.
//!
//! A cross-process [`Store`](crate::admit::Store) runs the core's own
//! [`Controller`](crate::admit::Controller) on the record it loads — import, the
//! operation, export — and writes it back atomically (compare-and-set on a
//! version), so the admission logic exists once, in exact integer
//! arithmetic, whatever the store.

use crate::admit::belief::estimated::SilentRecord;
use crate::admit::belief::LevelRecord;
use crate::admit::bucket::BucketRecord;
use crate::admit::limits::Limits;
use crate::admit::ramp::Ramp;
use crate::admit::stop::Stop;
use crate::time::{Now, TimeBase};
use crate::vocab::Cause;
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime};

/// One key's shared admission state; see [`StoreHooks`](crate::admit::store_kit::StoreHooks). Opaque:
/// serialize it (serde), store it, hand it back to
/// [`StoreHooks::import_key`](crate::admit::store_kit::StoreHooks::import_key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    /// The record's format ([`RECORD_FORMAT`] when written by this
    /// version; 1 for records written before the field existed). A reader
    /// ignores fields it does not know, so an older process reads a newer
    /// record and keeps what it understands.
    #[serde(default = "format_one")]
    pub(crate) format: u32,
    /// The key's name as state is kept under it (its group's, when grouped).
    pub(crate) key: String,
    pub(crate) stop: Option<StopRecord>,
    pub(crate) scopes: Vec<ScopeRecord>,
    /// When it was written, Unix nanoseconds (format 4; absent before):
    /// the age of the beliefs it holds, for a process that recalls them
    /// ([`Memory::recall`](crate::admit::store_kit::Memory::recall)).
    #[serde(default)]
    pub(crate) written_at: Option<i64>,
}

/// The format of the records this version writes: 2 added each bucket's
/// learned margin (`margin`, `margin_at`) and each scope's capacity
/// `ceiling`; 3 each dimension's limit estimated from 429s (`silent`); 4
/// when the record was written (`written_at`), so that its beliefs have
/// an age. A reader ignores fields it does not know: an older process
/// reads a newer record and keeps what it understands.
pub const RECORD_FORMAT: u32 = 4;

fn format_one() -> u32 {
    1
}

impl KeyRecord {
    /// The record's format (see [`RECORD_FORMAT`]).
    pub fn format(&self) -> u32 {
        self.format
    }

    /// The key (or group) it belongs to.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// How many model classes it holds (a reader from outside bounds it).
    pub fn classes(&self) -> usize {
        self.scopes.len()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StopRecord {
    pub cause: Cause,
    /// Unix nanoseconds.
    pub until: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ScopeRecord {
    pub class: String,
    pub learned: [Option<u64>; 4],
    pub buckets: [Option<DimensionRecord>; 4],
    pub ramp_permille: u32,
    pub ramp_last_step: Option<i64>,
    pub paused_until: Option<i64>,
    pub last_call: Option<i64>,
    pub released: [u64; 4],
    pub seen: [u64; 4],
    /// A capacity cut by a 429 the model did not expect (format 2).
    #[serde(default)]
    pub ceiling: [Option<u64>; 4],
    /// The top of each capacity's bracket (format 2; absent before).
    #[serde(default)]
    pub upper: [Option<u64>; 4],
    /// A capacity taken from a sibling's horizon (format 2; absent before).
    #[serde(default)]
    pub guess: [Option<u64>; 4],
    /// Each dimension's limit estimated from 429s alone (format 3; absent
    /// before): replicas share what each one's 429s taught.
    #[serde(default)]
    pub silent: [Option<SilentRecord>; 4],
    pub heard: bool,
    /// The mean output of the scope's answers, which the pace is charged
    /// for a request's output (absent in records written before it: the
    /// whole `max_tokens` is charged until an answer teaches it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_mean: Option<u64>,
    /// How many answers taught `output_mean`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub output_answers: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One dimension's bucket and the belief about its level, as one JSON
/// object (the form records have had since format 2: the bucket's fields
/// beside `corrected`, `margin` and `margin_at`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DimensionRecord {
    #[serde(flatten)]
    pub bucket: BucketRecord,
    #[serde(flatten)]
    pub level: LevelRecord,
}

pub(crate) fn clamp_i64(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

impl StopRecord {
    pub(crate) fn of(stop: &Stop) -> Self {
        StopRecord {
            cause: stop.cause,
            until: stop
                .until
                .map(|u| match u.duration_since(SystemTime::UNIX_EPOCH) {
                    Ok(d) => clamp_i64(d.as_nanos() as i128),
                    Err(_) => 0,
                }),
        }
    }

    pub(crate) fn to_stop(&self, now: Now) -> Stop {
        let until = self.until.map(|ns| {
            SystemTime::UNIX_EPOCH + Duration::from_nanos(u64::try_from(ns.max(0)).unwrap_or(0))
        });
        Stop {
            cause: self.cause,
            until,
            until_instant: until.map(|u| now.instant_at(u)),
        }
    }
}

pub(crate) fn limits_array(l: &Limits) -> [Option<u64>; 4] {
    [l.requests, l.input_tokens, l.output_tokens, l.tokens]
}

pub(crate) fn limits_of(a: [Option<u64>; 4]) -> Limits {
    Limits {
        requests: a[0],
        input_tokens: a[1],
        output_tokens: a[2],
        tokens: a[3],
    }
}

pub(crate) fn ramp_record(r: &Ramp, base: TimeBase) -> (u32, Option<i64>) {
    (r.permille(), r.last_step().map(|t| base.out(t)))
}

/// Remembered beliefs younger than this are taken as written (an hour:
/// what a restart or a deploy loses today).
pub const REMEMBER_TRUSTED: Duration = Duration::from_secs(3600);

/// Remembered beliefs older than this are not recalled (eight halvings
/// past [`REMEMBER_TRUSTED`]: under 1/256 of what they were).
pub const REMEMBER_FORGOTTEN: Duration = Duration::from_secs(9 * 3600);

/// The share of a remembered value kept at `age`, in `(0, 1]`, or `None`
/// past [`REMEMBER_FORGOTTEN`].
pub fn remembered_share(age: Duration) -> Option<f64> {
    if age > REMEMBER_FORGOTTEN {
        return None;
    }
    let past = age.saturating_sub(REMEMBER_TRUSTED).as_secs_f64();
    Some((-past / REMEMBER_TRUSTED.as_secs_f64()).exp2())
}

impl KeyRecord {
    /// When it was written (format 4 and later).
    pub fn written_at(&self) -> Option<SystemTime> {
        let ns = self.written_at?;
        let ns = u64::try_from(ns).ok()?;
        SystemTime::UNIX_EPOCH.checked_add(Duration::from_nanos(ns))
    }

    /// Whether any of its classes learned something worth remembering: a
    /// stated limit, a capacity, an estimate.
    pub(crate) fn learned_anything(&self) -> bool {
        self.scopes.iter().any(|s| {
            s.learned.iter().any(Option::is_some)
                || s.seen.iter().any(|v| *v > 0)
                || s.silent.iter().any(Option::is_some)
        })
    }

    /// Its beliefs alone, to remember: each class's stated limits,
    /// capacities and estimates, without the moment's state (levels,
    /// pauses, ramp, stop). Two records of the same beliefs compare equal
    /// whatever their `written_at`.
    pub fn beliefs_only(&self) -> KeyRecord {
        KeyRecord {
            format: self.format,
            key: self.key.clone(),
            stop: None,
            written_at: None,
            scopes: self
                .scopes
                .iter()
                .map(|s| crate::admit::record::ScopeRecord {
                    buckets: [None, None, None, None],
                    ramp_permille: 0,
                    ramp_last_step: None,
                    paused_until: None,
                    last_call: None,
                    released: [0; 4],
                    ..s.clone()
                })
                .collect(),
        }
    }

    /// The same record stamped as written at `at`.
    pub fn stamped(mut self, at: SystemTime) -> KeyRecord {
        self.written_at = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .ok()
            .and_then(|d| i64::try_from(d.as_nanos()).ok());
        self
    }
}
