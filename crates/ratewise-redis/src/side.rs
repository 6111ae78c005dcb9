//! The side connection: small reads and writes beside a key's record (a
//! stop's note, the waiting demand), on a connection of their own so they
//! never queue behind the record's compare-and-set round trips, each
//! bounded by the store's timeout. A transport error drops the connection;
//! the next call connects again.

use crate::Error;
use redis::aio::MultiplexedConnection;
use std::time::Duration;
use tokio::sync::Mutex;

pub(crate) struct Side {
    client: redis::Client,
    conn: Mutex<Option<MultiplexedConnection>>,
    timeout: Duration,
}

impl Side {
    pub fn new(client: redis::Client, timeout: Duration) -> Side {
        Side {
            client,
            conn: Mutex::new(None),
            timeout,
        }
    }

    async fn conn(&self) -> Result<MultiplexedConnection, Error> {
        let mut held = self.conn.lock().await;
        if let Some(c) = held.as_ref() {
            return Ok(c.clone());
        }
        let c = tokio::time::timeout(self.timeout, self.client.get_multiplexed_async_connection())
            .await
            .map_err(|_| Error::Timeout)?
            .map_err(Error::redis)?;
        *held = Some(c.clone());
        Ok(c)
    }

    /// Runs `cmd`, bounded by the timeout.
    pub async fn run<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> Result<T, Error> {
        let mut c = self.conn().await?;
        let out = tokio::time::timeout(self.timeout, cmd.query_async::<T>(&mut c))
            .await
            .map_err(|_| Error::Timeout)
            .and_then(|r| r.map_err(Error::redis));
        self.forget_on_transport_error(&out).await;
        out
    }

    /// Runs `script` with its keys and arguments set, bounded by the
    /// timeout (loaded on first use by `EVALSHA`, then `EVAL`).
    pub async fn invoke<T: redis::FromRedisValue>(
        &self,
        script: &redis::ScriptInvocation<'_>,
    ) -> Result<T, Error> {
        let mut c = self.conn().await?;
        let out = tokio::time::timeout(self.timeout, script.invoke_async::<T>(&mut c))
            .await
            .map_err(|_| Error::Timeout)
            .and_then(|r| r.map_err(Error::redis));
        self.forget_on_transport_error(&out).await;
        out
    }

    async fn forget_on_transport_error<T>(&self, out: &Result<T, Error>) {
        if out.as_ref().is_err_and(Error::is_transport) {
            *self.conn.lock().await = None;
        }
    }
}
