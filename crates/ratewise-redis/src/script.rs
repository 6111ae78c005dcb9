//! The one script: compare-and-set of a key's record, in one round trip.
//!
//! The record is the core's [`KeyRecord`](ratewise_core::admit::store_kit::KeyRecord)
//! as JSON, kept in a hash with its version. A process runs the core's own
//! controller on its copy of the record and writes the result back only if
//! nobody wrote since its copy; otherwise the reply carries the fresh
//! record, so a lost race costs one more round trip and no extra read. The
//! bucket arithmetic (exact, in scaled integers) and the policy stay in the
//! core, once: the script never interprets the record.
//!
//! Each call also says the process is alive (a sorted set of process ids
//! by last call) and answers how many processes used the key lately — the
//! share a process falls back to when it loses Redis — and Redis's `TIME`,
//! the clock every process reads the record's times against.

use ratewise_core::admit::store_kit::KeyRecord;
use redis::Value;

/// KEYS\[1\]: the record (hash: `v` version, `r` record JSON, `e` epoch).
/// KEYS\[2\]: processes by last call (sorted set, score: Unix ms).
/// ARGV\[1\]: the version the caller's copy is of (0: none; -1: read only).
/// ARGV\[2\]: the new record.
/// ARGV\[3\]: time to live of both keys, milliseconds.
/// ARGV\[4\]: this process's id. ARGV\[5\]: how long a process counts as
/// alive after its last call, milliseconds.
/// ARGV\[6\]: an epoch for a record written for the first time.
/// ARGV\[7\]: the epoch the caller's copy is of ("" for none).
///
/// The epoch is set when a record is created and kept by every later
/// write: a process that finds another epoch (or none) under a key it knew
/// learns that Redis lost the record (restarted without its data, the key
/// expired or was deleted) even when others have written it since. A write
/// must name both the version and the epoch it read: after a loss the
/// versions start again, and a stale copy whose number happens to match
/// must not overwrite the new record.
///
/// A version that is not a whole number in range (the hash written by
/// something else) is read as 0, so the next write repairs it.
///
/// Returns `{written (0|1), version, record or "", peers, seconds,
/// microseconds, epoch or ""}`.
pub(crate) const CAS: &str = r#"
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[2], now_ms, ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms - tonumber(ARGV[5]))
redis.call('PEXPIRE', KEYS[2], ARGV[3])
local peers = redis.call('ZCARD', KEYS[2])
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0') or 0
if v < 0 or v ~= math.floor(v) or v >= 4503599627370496 then v = 0 end
local e = redis.call('HGET', KEYS[1], 'e') or ''
if tonumber(ARGV[1]) ~= v or ARGV[7] ~= e then
  return {0, v, redis.call('HGET', KEYS[1], 'r') or '', peers, t[1], t[2], e}
end
v = v + 1
if e == '' then e = ARGV[6] end
redis.call('HSET', KEYS[1], 'v', v, 'r', ARGV[2], 'e', e)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, v, '', peers, t[1], t[2], e}
"#;

/// The version a read-only call sends: never equal to a stored version,
/// so the reply always carries the record.
pub(crate) const READ: i64 = -1;

/// A call's answer.
#[derive(Debug)]
pub(crate) struct Reply {
    /// The write was applied (the caller's copy was current).
    pub written: bool,
    /// The record's version now.
    pub version: u64,
    /// The stored record, when the write was refused: `None` when there
    /// is none (a new key, or Redis lost its data) or it does not parse.
    pub record: Option<KeyRecord>,
    /// A stored record that did not parse (garbage, another version's).
    pub unreadable: bool,
    /// Processes that used the key within the liveness window.
    pub peers: u32,
    /// Redis's clock, Unix nanoseconds.
    pub redis_ns: i128,
    /// The record's epoch ("" when there is none).
    pub epoch: String,
}

/// Reads the script's reply; `None` for anything not of its shape.
pub(crate) fn parse(v: &Value) -> Option<Reply> {
    let Value::Array(items) = v else {
        return None;
    };
    if items.len() != 7 {
        return None;
    }
    let int = |v: &Value| -> Option<i64> {
        match v {
            Value::Int(i) => Some(*i),
            Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
            Value::SimpleString(s) => s.parse().ok(),
            _ => None,
        }
    };
    let written = int(&items[0])? == 1;
    let version = u64::try_from(int(&items[1])?).ok()?;
    let (record, unreadable) = match &items[2] {
        Value::BulkString(b) if !b.is_empty() => match serde_json::from_slice::<KeyRecord>(b) {
            Ok(r) => (Some(r), false),
            Err(_) => (None, true),
        },
        _ => (None, false),
    };
    let peers = u32::try_from(int(&items[3])?).unwrap_or(u32::MAX);
    let secs = int(&items[4])?;
    let micros = int(&items[5])?;
    let redis_ns = i128::from(secs) * 1_000_000_000 + i128::from(micros) * 1_000;
    let epoch = match &items[6] {
        Value::BulkString(b) if b.len() <= 64 => String::from_utf8_lossy(b).into_owned(),
        Value::BulkString(_) => return None,
        _ => String::new(),
    };
    Some(Reply {
        epoch,
        written,
        version,
        record,
        unreadable,
        peers,
        redis_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_write_and_a_refusal_read_back() {
        let w = parse(&Value::Array(vec![
            Value::Int(1),
            Value::Int(7),
            bulk(""),
            Value::Int(3),
            bulk("1764590000"),
            bulk("250"),
            bulk("e1"),
        ]))
        .unwrap();
        assert!(w.written);
        assert_eq!((w.version, w.peers), (7, 3));
        assert_eq!(w.redis_ns, 1_764_590_000_000_250_000);
        assert!(w.record.is_none() && !w.unreadable);
        assert_eq!(w.epoch, "e1");

        let r = parse(&Value::Array(vec![
            Value::Int(0),
            Value::Int(8),
            bulk("{not a record"),
            Value::Int(1),
            bulk("1"),
            bulk("0"),
            bulk(""),
        ]))
        .unwrap();
        assert!(!r.written && r.unreadable && r.record.is_none());
        assert_eq!(r.epoch, "");
    }

    #[test]
    fn anything_else_is_refused_not_guessed() {
        assert!(parse(&Value::Nil).is_none());
        assert!(parse(&Value::Array(vec![Value::Int(1)])).is_none());
        let negative = Value::Array(vec![
            Value::Int(1),
            Value::Int(-3),
            bulk(""),
            Value::Int(1),
            bulk("1"),
            bulk("0"),
            bulk(""),
        ]);
        assert!(parse(&negative).is_none(), "a negative version is not read");
    }
}
