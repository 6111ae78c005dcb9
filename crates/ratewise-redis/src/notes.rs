//! A stop's note: a short text kept beside a key's record
//! (`prefix:{fp-…}:stop-note`, in the record's Cluster slot) by the
//! process that stopped the key, for every other process to read — the
//! proxy keeps there the provider's answer that stopped the key, so every
//! replica answers with it.
//!
//! Why beside the record and not in it: the record is the admission state
//! every operation rewrites by compare-and-set, so a kilobyte of text in it
//! would ride every admit and settle round trip, and a new field in it
//! must stay readable by every version sharing the key. A note is written
//! once per stop and read once per process per stop, on its own
//! connection, and an older process never looks at it. It is not the
//! authority on whether the key is stopped (the record is): a reader
//! checks the note against the record's stop, and a resume deletes it.

use crate::side::Side;
use crate::Error;
use std::sync::Arc;
use std::time::Duration;

/// The longest note written or read (bytes).
pub const MAX_NOTE: usize = 4096;

pub(crate) struct Notes {
    side: Arc<Side>,
    prefix: String,
}

impl Notes {
    pub fn new(side: Arc<Side>, prefix: String) -> Notes {
        Notes { side, prefix }
    }

    fn key(&self, name: &str) -> String {
        format!("{}:{{{}}}:stop-note", self.prefix, crate::key_tag(name))
    }

    async fn run<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> Result<T, Error> {
        self.side.run(cmd).await
    }

    pub async fn put(&self, name: &str, note: &str, ttl: Duration) -> Result<(), Error> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.key(name))
            .arg(note)
            .arg("PX")
            .arg(ttl.as_millis().max(1) as u64);
        self.run::<()>(cmd).await
    }

    pub async fn get(&self, name: &str) -> Result<Option<String>, Error> {
        // A bounded read: a value anyone wrote larger is never fetched
        // whole (and is refused).
        let mut cmd = redis::cmd("GETRANGE");
        cmd.arg(self.key(name)).arg(0).arg(MAX_NOTE);
        let v: Vec<u8> = self.run(cmd).await?;
        Ok(Some(v)
            .filter(|b| !b.is_empty() && b.len() <= MAX_NOTE)
            .and_then(|b| String::from_utf8(b).ok()))
    }

    pub async fn delete(&self, name: &str) -> Result<(), Error> {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(self.key(name));
        self.run::<()>(cmd).await
    }
}
