//! The waiting demand of each process on a scope, for priorities across
//! processes ([`Store::demand`](ratewise_core::admit::Store::demand)).
//!
//! One small hash per scope beside the key's record
//! (`prefix:{fp-…}:demand:CLASS`, in the record's Cluster slot): a field
//! per process, `RANK:UNIX_MS` — the highest priority level it has work
//! waiting at, and when it said so on Redis's clock. One script publishes
//! this process's field (or deletes it when nothing waits here), deletes
//! the fields older than the freshness bound (a dead process's demand goes
//! by itself) and answers the highest level the *others* published, in one
//! round trip. Not in the record: demand changes with every wait, and the
//! record's compare-and-set would make every admission race it.

use crate::side::Side;
use crate::Error;
use std::sync::Arc;
use std::time::Duration;

/// KEYS\[1\]: the scope's demand hash. ARGV\[1\]: this process's id.
/// ARGV\[2\]: the rank of the highest level waiting here, "" for none.
/// ARGV\[3\]: how long a demand counts, milliseconds. ARGV\[4\]: the hash's
/// time to live, milliseconds. Returns the lowest rank another process
/// published within the bound, -1 for none. A field that does not read as
/// `RANK:MS` is deleted, not counted.
const PUBLISH: &str = r#"
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. now)
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
local all = redis.call('HGETALL', KEYS[1])
local top = -1
for i = 1, #all, 2 do
  local r, at = string.match(all[i + 1], '^(%d+):(%d+)$')
  r = tonumber(r)
  at = tonumber(at)
  if r == nil or at == nil or now - at > tonumber(ARGV[3]) then
    redis.call('HDEL', KEYS[1], all[i])
  elseif all[i] ~= ARGV[1] and (top < 0 or r < top) then
    top = r
  end
end
return top
"#;

pub(crate) struct Demand {
    side: Arc<Side>,
    script: redis::Script,
    prefix: String,
    proc_id: String,
    fresh: Duration,
}

impl Demand {
    pub fn new(side: Arc<Side>, prefix: String, proc_id: String, fresh: Duration) -> Demand {
        Demand {
            side,
            script: redis::Script::new(PUBLISH),
            prefix,
            proc_id,
            fresh,
        }
    }

    fn key(&self, key: &str, class: &str) -> String {
        format!("{}:{{{}}}:demand:{class}", self.prefix, crate::key_tag(key))
    }

    /// Publishes `waiting` (this process's highest waiting level on the
    /// scope, `None`: nothing waits) and answers the others' highest.
    pub async fn publish(
        &self,
        key: &str,
        class: &str,
        waiting: Option<u8>,
    ) -> Result<Option<u8>, Error> {
        let mut inv = self.script.prepare_invoke();
        inv.key(self.key(key, class))
            .arg(&self.proc_id)
            .arg(waiting.map_or(String::new(), |r| r.to_string()))
            .arg(self.fresh.as_millis().max(1) as u64)
            // Gone a while after the last process stopped publishing.
            .arg(self.fresh.as_millis().max(1) as u64 * 10);
        let top: i64 = self.side.invoke(&inv).await?;
        Ok(u8::try_from(top).ok())
    }
}
