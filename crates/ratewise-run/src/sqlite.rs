//! The store on SQLite: WAL, one writer thread with grouped commits.
//!
//! Every write goes to one thread, which takes all the writes waiting,
//! runs them in one transaction (each under its own savepoint, so one
//! failing write fails alone) and commits once: at many jobs a second the
//! commits are few and the journal stays on. A write's caller is answered
//! only after its commit. Reads use their own connection (WAL lets them
//! run beside the writer).
//!
//! `synchronous=NORMAL` (the default) survives the process being killed
//! (`kill -9`, a crash): a committed write is in the WAL file. It does not
//! survive a power loss or an OS crash: for that, `synchronous = "full"`
//! in the config, which syncs the WAL at every commit.

use crate::store::{
    BatchEnd, BatchIntent, BatchJob, BatchRef, BatchRow, Compared, Counts, End, Ended, NewJob,
    Pending, State, StopRecord, Store, StoreError,
};
use rusqlite::{params, Connection, OptionalExtension};
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// How hard a commit is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Survives the process dying; not a power loss (SQLite's `NORMAL`).
    #[default]
    Normal,
    /// Survives a power loss: the WAL is synced at every commit (`FULL`).
    Full,
}

/// A write, run in the open transaction (`None`: no transaction could be
/// opened, the write is not run); it gives back how to answer its caller
/// once the transaction's commit is known.
type Write = Box<dyn FnOnce(Option<&Connection>) -> Answer + Send>;

/// Tells a write's caller how its commit went (`Err(None)`: the writer is
/// gone, nothing was run).
type Answer = Box<dyn FnOnce(Result<(), Option<Arc<rusqlite::Error>>>) + Send>;

/// The store in one SQLite file.
pub struct SqliteStore {
    writes: Mutex<Option<mpsc::SyncSender<Write>>>,
    read: Mutex<Connection>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Drop for SqliteStore {
    /// Closes the writer (its last group committed) so that SQLite
    /// checkpoints the WAL into the database file and removes it.
    fn drop(&mut self) {
        if let Ok(mut w) = self.writes.lock() {
            w.take();
        }
        if let Some(handle) = self.writer.lock().ok().and_then(|mut h| h.take()) {
            let _ = handle.join();
        }
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS bad_lines (line INTEGER PRIMARY KEY, why TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY,
    custom_id TEXT NOT NULL UNIQUE,
    line INTEGER NOT NULL,
    path TEXT NOT NULL,
    model TEXT,
    input_estimate INTEGER NOT NULL,
    max_tokens INTEGER NOT NULL,
    body BLOB NOT NULL,
    first_seen_ms INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    not_before_ms INTEGER NOT NULL DEFAULT 0,
    sends INTEGER NOT NULL DEFAULT 0,
    charged INTEGER NOT NULL DEFAULT 0,
    double_spend INTEGER NOT NULL DEFAULT 0,
    waited_ms INTEGER NOT NULL DEFAULT 0,
    attempts TEXT NOT NULL DEFAULT '[]',
    status INTEGER,
    request_id TEXT,
    response BLOB,
    cause TEXT,
    message TEXT,
    usage_in INTEGER,
    usage_out INTEGER
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state, seq);
";

/// The batch path's tables (`crate::batch`): a row per batch intent
/// (written before the create call) and its jobs.
const BATCH_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS batches (
    nonce TEXT PRIMARY KEY,
    batch_id TEXT UNIQUE,
    shape TEXT NOT NULL,
    model TEXT,
    endpoint TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'intent',
    intent_ms INTEGER NOT NULL,
    jobs INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    cancel_ms INTEGER
);
CREATE TABLE IF NOT EXISTS batch_jobs (
    nonce TEXT NOT NULL,
    seq INTEGER NOT NULL,
    result_id TEXT,
    ended INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (nonce, seq)
);
CREATE INDEX IF NOT EXISTS batch_jobs_by_seq ON batch_jobs(seq, ended);
";

/// Whether a job's request may be replaced by an edited line (SQL over a
/// `jobs` row): it was never sent and has not ended (pending, stopped,
/// expired), or the provider refused it — it ended `failed` on a 4xx
/// answer, so nothing was generated and no result of the old request
/// exists. A job sent with a result (done) or one that may have run
/// (held as unknown, on the wire, in a batch) is not.
const EDITABLE: &str = "((sends = 0 AND state IN ('pending', 'stopped', 'expired'))
     OR (state = 'failed' AND (sends = 0 OR status BETWEEN 400 AND 499)))";

/// Most writes grouped into one commit.
const GROUP: usize = 512;

/// Most writes queued for the writer: past these a caller waits for room
/// (the queue's window keeps far fewer in flight: two writes per job).
const WRITES_QUEUED: usize = 16 * GROUP;

/// Columns added since the first schema, each with its `ALTER TABLE`
/// (run once, when the column is missing): a store of an older version
/// opens as it is and gains them.
const MIGRATIONS: &[(&str, &str)] = &[
    // When the attempt on the wire was journaled: a job cut there keeps
    // the attempt in its line.
    (
        "sending_since",
        "ALTER TABLE jobs ADD COLUMN sending_since TEXT",
    ),
    // The input generation the job's line was last read in (an input
    // edited after a run).
    (
        "input_gen",
        "ALTER TABLE jobs ADD COLUMN input_gen INTEGER NOT NULL DEFAULT 0",
    ),
    // The pool member the attempt on the wire went to (a pooled run): a
    // job cut there names it.
    (
        "sending_member",
        "ALTER TABLE jobs ADD COLUMN sending_member TEXT",
    ),
    // The last send a job's wait was counted to (ms since the epoch): a
    // job put back and sent again in the same run counts its wait on from
    // there, not from the run's start again.
    (
        "waited_to_ms",
        "ALTER TABLE jobs ADD COLUMN waited_to_ms INTEGER",
    ),
];

fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    let have: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('jobs')")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for (column, statement) in MIGRATIONS {
        if !have.iter().any(|c| c == column) {
            conn.execute_batch(statement)?;
        }
    }
    Ok(())
}

impl SqliteStore {
    /// Opens (or makes) the store at `path`.
    pub fn open(path: &Path, sync: Synchronous) -> Result<SqliteStore, StoreError> {
        let writer = Connection::open(path)?;
        writer.busy_timeout(std::time::Duration::from_secs(5))?;
        writer.pragma_update(None, "journal_mode", "WAL")?;
        writer.pragma_update(
            None,
            "synchronous",
            match sync {
                Synchronous::Normal => "NORMAL",
                Synchronous::Full => "FULL",
            },
        )?;
        writer.execute_batch(SCHEMA)?;
        writer.execute_batch(BATCH_SCHEMA)?;
        migrate(&writer)?;
        let read = Connection::open(path)?;
        read.busy_timeout(std::time::Duration::from_secs(5))?;
        let (tx, rx) = mpsc::sync_channel::<Write>(WRITES_QUEUED);
        let handle = std::thread::Builder::new()
            .name("ratewise-store".into())
            .spawn(move || writer_loop(writer, rx))
            .map_err(|e| StoreError::with_source("cannot start the store's writer", e))?;
        Ok(SqliteStore {
            writes: Mutex::new(Some(tx)),
            read: Mutex::new(read),
            writer: Mutex::new(Some(handle)),
        })
    }

    /// Runs `f` on the writer thread, in the next group's transaction,
    /// and answers after that group's commit.
    fn write<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<R> + Send + 'static,
    ) -> Result<R, StoreError> {
        let (tx, rx) = mpsc::sync_channel::<Result<R, StoreError>>(1);
        self.write_then(f, move |r| {
            let _ = tx.send(r);
        });
        rx.recv()
            .map_err(|_| StoreError::new("the store's writer is gone"))?
    }

    /// Queues `f` for the writer and returns at once; `done` is called
    /// on the writer thread with the result once its group committed (or
    /// at once when the writer is gone).
    fn write_then<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<R> + Send + 'static,
        done: impl FnOnce(Result<R, StoreError>) + Send + 'static,
    ) {
        let job: Write = Box::new(move |conn: Option<&Connection>| {
            let r = match conn {
                Some(conn) => run_in_savepoint(conn, f),
                None => Err(StoreError::new("the store could not open a transaction")),
            };
            Box::new(move |committed: Result<(), Option<Arc<rusqlite::Error>>>| {
                done(match committed {
                    Ok(()) => r,
                    Err(Some(e)) => Err(StoreError::with_source("the store's commit failed", e)),
                    Err(None) => Err(StoreError::new("the store's writer is gone")),
                })
            })
        });
        let sender = self.writes.lock().ok().and_then(|w| w.clone());
        if let Some(sender) = sender {
            if let Err(mpsc::SendError(job)) = sender.send(job) {
                // The writer is gone: the write is not run, its caller told.
                job(None)(Err(None));
            }
        } else {
            job(None)(Err(None));
        }
    }

    fn read<R>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<R>) -> Result<R, StoreError> {
        let conn = self
            .read
            .lock()
            .map_err(|_| StoreError::new("the store's reader is poisoned"))?;
        Ok(f(&conn)?)
    }
}

fn run_in_savepoint<R>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> rusqlite::Result<R>,
) -> Result<R, StoreError> {
    conn.prepare_cached("SAVEPOINT w")?.execute([])?;
    match f(conn) {
        Ok(r) => {
            conn.prepare_cached("RELEASE w")?.execute([])?;
            Ok(r)
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK TO w; RELEASE w");
            Err(e.into())
        }
    }
}

fn writer_loop(conn: Connection, rx: mpsc::Receiver<Write>) {
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        while group.len() < GROUP {
            match rx.try_recv() {
                Ok(w) => group.push(w),
                Err(_) => break,
            }
        }
        let (answers, result): (Vec<Answer>, Result<(), Option<Arc<rusqlite::Error>>>) =
            match conn.execute_batch("BEGIN IMMEDIATE") {
                Ok(()) => {
                    let answers = group.into_iter().map(|w| w(Some(&conn))).collect();
                    let committed = conn.execute_batch("COMMIT").map_err(|e| Some(Arc::new(e)));
                    if committed.is_err() {
                        let _ = conn.execute_batch("ROLLBACK");
                    }
                    (answers, committed)
                }
                Err(e) => (
                    group.into_iter().map(|w| w(None)).collect(),
                    Err(Some(Arc::new(e))),
                ),
            };
        for a in answers {
            a(result.clone());
        }
    }
}

fn ended_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<Ended> {
    let state: String = row.get(2)?;
    let usage_in: Option<i64> = row.get(9)?;
    let usage_out: Option<i64> = row.get(10)?;
    Ok(Ended {
        seq: row.get(0)?,
        custom_id: row.get(1)?,
        state: State::parse(&state).unwrap_or(State::HeldUnknown),
        status: row.get::<_, Option<i64>>(3)?.map(|s| s as u16),
        request_id: row.get(4)?,
        response: row.get::<_, Option<Vec<u8>>>(5)?.map(Into::into),
        cause: row.get(6)?,
        message: row.get(7)?,
        attempts: row.get(8)?,
        usage: match (usage_in, usage_out) {
            (Some(i), Some(o)) => Some((from_db(i), from_db(o))),
            _ => None,
        },
        charged: from_db(row.get(11)?),
        sends: row.get::<_, i64>(12)? as u64,
        double_spend: row.get::<_, i64>(13)? != 0,
        waited_ms: from_db(row.get(14)?),
    })
}

/// The job's attempts so far with `more` appended.
fn append_attempts(
    conn: &Connection,
    seq: i64,
    more: &[serde_json::Value],
) -> rusqlite::Result<String> {
    let had: String = conn
        .prepare_cached("SELECT attempts FROM jobs WHERE seq = ?1")?
        .query_row([seq], |r| r.get(0))?;
    if more.is_empty() {
        return Ok(had);
    }
    // The common case, a job's first end: nothing to read back.
    let mut list: Vec<serde_json::Value> = if had == "[]" {
        Vec::new()
    } else {
        serde_json::from_str(&had).unwrap_or_default()
    };
    list.extend(more.iter().cloned());
    Ok(serde_json::Value::Array(list).to_string())
}

/// The job is `sending` and its send counted; whether it was found.
fn mark_started(
    conn: &Connection,
    custom_id: &str,
    member: Option<&str>,
) -> rusqlite::Result<bool> {
    let n = conn
        .prepare_cached(
            "UPDATE jobs SET state = 'sending', sends = sends + 1,
                 sending_since = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
                 sending_member = ?2
             WHERE custom_id = ?1",
        )?
        .execute(rusqlite::params![custom_id, member])?;
    Ok(n == 1)
}

fn no_job_unless(found: bool, custom_id: &str) -> Result<(), StoreError> {
    if found {
        Ok(())
    } else {
        Err(StoreError::new(format!(
            "no job {custom_id:?} in the store"
        )))
    }
}

fn between_attempts(conn: &Connection, custom_id: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE jobs SET state = 'pending' WHERE custom_id = ?1 AND state = 'sending'",
    )?
    .execute([custom_id])
    .map(|_| ())
}

/// The last send's time, ms since the epoch (SQL over a `jobs` row: its
/// `sending_since`, written as the send was journaled).
macro_rules! last_sent_ms {
    () => {
        "CAST(ROUND((julianday(sending_since) - 2440587.5) * 86400000.0) AS INTEGER)"
    };
}

/// Where the wait of a job this run ends or puts back starts (SQL over its
/// row, before the update): `?15`, when the run could first have sent it,
/// or the send its wait was last counted to (`waited_to_ms`: a job put
/// back and taken again in the same run), whichever is later.
macro_rules! wait_from {
    () => {
        "MAX(?15, COALESCE(waited_to_ms, 0))"
    };
}

/// What the job's wait grows by: from `wait_from!` to its last send; 0
/// when it was not sent since then (or `?15` is NULL).
const WAITED_MORE: &str = concat!(
    "COALESCE(CASE WHEN ",
    last_sent_ms!(),
    " >= ",
    wait_from!(),
    " THEN ",
    last_sent_ms!(),
    " - ",
    wait_from!(),
    " ELSE 0 END, 0)"
);

/// The send the wait is now counted to.
const WAITED_TO: &str = concat!(
    "MAX(COALESCE(waited_to_ms, 0), COALESCE(",
    last_sent_ms!(),
    ", 0))"
);

fn write_end(
    conn: &Connection,
    seq: i64,
    state: State,
    end: &End,
    not_before_ms: i64,
) -> rusqlite::Result<()> {
    let attempts = append_attempts(conn, seq, &end.attempts)?;
    conn.prepare_cached(&format!(
        "UPDATE jobs SET state = ?2, not_before_ms = ?3, attempts = ?4, status = ?5, request_id = ?6,
             response = ?7, cause = ?8, message = ?9, usage_in = ?10, usage_out = ?11,
             charged = MIN(charged + ?12, 9223372036854775807),
             waited_ms = MIN(waited_ms + ?13 + {WAITED_MORE}, 9223372036854775807),
             waited_to_ms = CASE WHEN ?15 IS NULL THEN waited_to_ms ELSE {WAITED_TO} END,
             sends = MAX(sends - ?14, 0)
         WHERE seq = ?1"
    ))?
    .execute(params![
            seq,
            state.as_str(),
            not_before_ms,
            attempts,
            end.status.map(i64::from),
            end.request_id,
            end.response.as_deref(),
            end.cause,
            end.message,
            end.usage.map(|u| to_db(u.0)),
            end.usage.map(|u| to_db(u.1)),
            to_db(end.charged),
            to_db(end.waited_ms),
            to_db(end.unreached),
            end.since_ms,
        ],
    )?;
    Ok(())
}

impl Store for SqliteStore {
    fn queues_writes(&self) -> bool {
        true
    }

    fn submit(&self, write: crate::store::HotWrite, done: crate::store::Done) {
        use crate::store::HotWrite;
        match write {
            HotWrite::Started(id, member) => self.write_then(
                move |c| Ok((mark_started(c, &id, member.as_deref())?, id)),
                move |r| done(r.and_then(|(found, id)| no_job_unless(found, &id))),
            ),
            HotWrite::BetweenAttempts(id) => {
                self.write_then(move |c| between_attempts(c, &id), done)
            }
            HotWrite::Ended(seq, end) => {
                let state = end.state.unwrap_or(State::Failed);
                self.write_then(move |c| write_end(c, seq, state, &end, 0), done)
            }
            HotWrite::PutBack(seq, at, so_far) => self.write_then(
                move |c| write_end(c, seq, State::Pending, &so_far, at),
                done,
            ),
        }
    }

    fn meta(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.read(|c| {
            c.query_row("SELECT v FROM meta WHERE k = ?1", [key], |r| r.get(0))
                .optional()
        })
    }

    fn set_meta(&self, key: &str, value: &str) -> Result<(), StoreError> {
        let (k, v) = (key.to_owned(), value.to_owned());
        self.write(move |c| {
            c.execute(
                "INSERT INTO meta (k, v) VALUES (?1, ?2) ON CONFLICT(k) DO UPDATE SET v = ?2",
                params![k, v],
            )
            .map(|_| ())
        })
    }

    fn reset(&self) -> Result<(), StoreError> {
        self.write(|c| {
            c.execute_batch("DELETE FROM jobs; DELETE FROM bad_lines; DELETE FROM meta;")
        })
    }

    fn import(&self, jobs: Vec<NewJob>) -> Result<Vec<bool>, StoreError> {
        self.write(move |c| {
            let mut stmt = c.prepare_cached(
                "INSERT OR IGNORE INTO jobs (custom_id, line, path, model, input_estimate, max_tokens, body, first_seen_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?;
            let mut added = Vec::with_capacity(jobs.len());
            for j in &jobs {
                let n = stmt.execute(params![
                    j.custom_id,
                    j.line as i64,
                    j.path,
                    j.model,
                    to_db(j.input_estimate),
                    to_db(j.max_tokens),
                    j.body,
                    j.first_seen_ms
                ])?;
                added.push(n == 1);
            }
            Ok(added)
        })
    }

    fn bad_lines(&self, lines: Vec<(u64, String)>) -> Result<(), StoreError> {
        self.write(move |c| {
            let mut stmt =
                c.prepare_cached("INSERT OR REPLACE INTO bad_lines (line, why) VALUES (?1, ?2)")?;
            for (line, why) in &lines {
                stmt.execute(params![*line as i64, why])?;
            }
            Ok(())
        })
    }

    fn list_bad_lines(&self) -> Result<Vec<(u64, String)>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare("SELECT line, why FROM bad_lines ORDER BY line")?;
            let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)? as u64, r.get(1)?)))?;
            rows.collect()
        })
    }

    fn next_pending(
        &self,
        after_seq: i64,
        now_ms: i64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<Vec<Pending>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT seq, custom_id, path, model, input_estimate, max_tokens, body, first_seen_ms, double_spend
                 FROM jobs WHERE state = 'pending' AND seq > ?1 AND not_before_ms <= ?2
                 ORDER BY seq LIMIT ?3",
            )?;
            let mut rows = stmt.query(params![after_seq, now_ms, limit as i64])?;
            let mut out = Vec::new();
            let mut bytes = 0usize;
            while let Some(r) = rows.next()? {
                let body: Vec<u8> = r.get(6)?;
                if !out.is_empty() && bytes + body.len() > max_bytes {
                    break;
                }
                bytes += body.len();
                out.push(Pending {
                    seq: r.get(0)?,
                    custom_id: r.get(1)?,
                    path: r.get(2)?,
                    model: r.get(3)?,
                    input_estimate: from_db(r.get(4)?),
                    max_tokens: from_db(r.get(5)?),
                    body: body.into(),
                    first_seen_ms: r.get(7)?,
                    double_spend: r.get::<_, i64>(8)? != 0,
                });
            }
            Ok(out)
        })
    }

    fn next_due(&self) -> Result<Option<i64>, StoreError> {
        self.read(|c| {
            c.query_row(
                "SELECT MIN(not_before_ms) FROM jobs WHERE state = 'pending'",
                [],
                |r| r.get(0),
            )
        })
    }

    fn started(&self, custom_id: &str) -> Result<(), StoreError> {
        self.started_on(custom_id, None)
    }

    fn started_on(&self, custom_id: &str, member: Option<&str>) -> Result<(), StoreError> {
        let id = custom_id.to_owned();
        let member = member.map(str::to_owned);
        let found = self.write(move |c| mark_started(c, &id, member.as_deref()))?;
        no_job_unless(found, custom_id)
    }

    fn between_attempts(&self, custom_id: &str) -> Result<(), StoreError> {
        let id = custom_id.to_owned();
        self.write(move |c| between_attempts(c, &id))
    }

    fn ended(&self, seq: i64, end: End) -> Result<(), StoreError> {
        let state = end.state.unwrap_or(State::Failed);
        self.write(move |c| write_end(c, seq, state, &end, 0))
    }

    fn put_back(&self, seq: i64, not_before_ms: i64, so_far: End) -> Result<(), StoreError> {
        self.write(move |c| write_end(c, seq, State::Pending, &so_far, not_before_ms))
    }

    fn stop(&self, stop: &StopRecord) -> Result<(), StoreError> {
        let text =
            serde_json::to_string(stop).map_err(|e| StoreError::with_source("the stop", e))?;
        let cause = stop.cause.as_str();
        let message = stop.message.clone();
        self.write(move |c| {
            c.execute(
                "INSERT INTO meta (k, v) VALUES ('stop', ?1) ON CONFLICT(k) DO UPDATE SET v = ?1",
                [&text],
            )?;
            c.execute(
                "UPDATE jobs SET state = 'stopped', cause = ?1, message = ?2 WHERE state = 'pending'",
                params![cause, message],
            )?;
            Ok(())
        })
    }

    fn stopped(&self) -> Result<Option<StopRecord>, StoreError> {
        Ok(self
            .meta("stop")?
            .and_then(|t| serde_json::from_str(&t).ok()))
    }

    fn resume_stopped(&self) -> Result<u64, StoreError> {
        self.write(|c| {
            c.execute("DELETE FROM meta WHERE k = 'stop'", [])?;
            let n = c.execute(
                "UPDATE jobs SET state = 'pending', cause = NULL, message = NULL, not_before_ms = 0
                 WHERE state = 'stopped'",
                [],
            )?;
            Ok(n as u64)
        })
    }

    fn hold_cut(&self) -> Result<u64, StoreError> {
        self.write(|c| {
            let n = c.execute(
                "UPDATE jobs SET state = 'held_unknown', cause = 'outcome_unknown',
                     message = 'sent when the run was cut; the answer is unknown',
                     status = NULL, response = NULL, request_id = NULL,
                     charged = MIN(charged + input_estimate + max_tokens, 9223372036854775807),
                     attempts = json_insert(attempts, '$[#]', CASE
                         WHEN sending_member IS NULL THEN json_object(
                             'sent_at', sending_since, 'attempt', sends, 'status', NULL,
                             'request_id', NULL, 'cause', 'outcome_unknown',
                             'action', 'hold_unknown')
                         ELSE json_object(
                             'sent_at', sending_since, 'attempt', sends, 'status', NULL,
                             'request_id', NULL, 'cause', 'outcome_unknown',
                             'action', 'hold_unknown', 'member', sending_member)
                         END)
                 WHERE state = 'sending'",
                [],
            )?;
            Ok(n as u64)
        })
    }

    fn release_unknown(&self) -> Result<u64, StoreError> {
        self.write(|c| {
            let n = c.execute(
                "UPDATE jobs SET state = 'pending', double_spend = 1, not_before_ms = 0
                 WHERE state = 'held_unknown'",
                [],
            )?;
            Ok(n as u64)
        })
    }

    fn counts(&self) -> Result<Counts, StoreError> {
        self.read(|c| {
            let mut counts = Counts::default();
            let mut stmt = c.prepare_cached(
                "SELECT state, COUNT(*), TOTAL(input_estimate), TOTAL(max_tokens), TOTAL(charged)
                 FROM jobs GROUP BY state",
            )?;
            let mut rows = stmt.query([])?;
            while let Some(r) = rows.next()? {
                let state: String = r.get(0)?;
                let n = r.get::<_, i64>(1)? as u64;
                counts.total += n;
                counts.spent = counts.spent.saturating_add(r.get::<_, f64>(4)? as u64);
                match State::parse(&state) {
                    Some(State::Pending) | Some(State::Sending) | Some(State::Batched) => {
                        // A job inside a submitted batch is counted with
                        // those on the wire.
                        if state == "pending" {
                            counts.pending += n;
                        } else {
                            counts.sending += n;
                        }
                        counts.remaining_input = counts
                            .remaining_input
                            .saturating_add(r.get::<_, f64>(2)? as u64);
                        counts.remaining_output = counts
                            .remaining_output
                            .saturating_add(r.get::<_, f64>(3)? as u64);
                    }
                    Some(State::Done) => counts.done += n,
                    Some(State::Failed) => counts.failed += n,
                    Some(State::HeldUnknown) | None => counts.held += n,
                    Some(State::Stopped) => counts.stopped += n,
                    Some(State::Expired) => counts.expired += n,
                }
            }
            Ok(counts)
        })
    }

    fn each_ended(
        &self,
        f: &mut dyn FnMut(Ended) -> std::io::Result<()>,
    ) -> Result<(), StoreError> {
        self.each_row("WHERE state NOT IN ('pending', 'sending', 'batched')", f)
    }

    fn each_job(&self, f: &mut dyn FnMut(Ended) -> std::io::Result<()>) -> Result<(), StoreError> {
        self.each_row("", f)
    }

    fn compare(&self, jobs: &[NewJob]) -> Result<Vec<Compared>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT path = ?2 AND body = ?3, state, sends, {EDITABLE} FROM jobs WHERE custom_id = ?1"
            ))?;
            jobs.iter()
                .map(|j| {
                    let row = stmt
                        .query_row(params![j.custom_id, j.path, j.body], |r| {
                            Ok((
                                r.get::<_, bool>(0)?,
                                r.get::<_, String>(1)?,
                                r.get::<_, i64>(2)? as u64,
                                r.get::<_, bool>(3)?,
                            ))
                        })
                        .optional()?;
                    Ok(match row {
                        None => Compared::New,
                        Some((true, ..)) => Compared::Same,
                        Some((false, _, _, true)) => Compared::Edited,
                        Some((false, state, sends, false)) => {
                            let state = State::parse(&state).unwrap_or(State::HeldUnknown);
                            Compared::Refused { state, sends }
                        }
                    })
                })
                .collect()
        })
    }

    fn sync(&self, jobs: Vec<NewJob>, generation: i64) -> Result<(), StoreError> {
        self.write(move |c| {
            let mut same = c.prepare_cached(
                "UPDATE jobs SET line = ?2, input_gen = ?3
                 WHERE custom_id = ?1 AND path = ?4 AND body = ?5",
            )?;
            let mut edited = c.prepare_cached(&format!(
                "UPDATE jobs SET line = ?2, input_gen = ?3, path = ?4, body = ?5, model = ?6,
                     input_estimate = ?7, max_tokens = ?8, state = 'pending', not_before_ms = 0,
                     cause = NULL, message = NULL, status = NULL, response = NULL,
                     request_id = NULL
                 WHERE custom_id = ?1 AND {EDITABLE}"
            ))?;
            let mut add = c.prepare_cached(
                "INSERT OR IGNORE INTO jobs (custom_id, line, path, model, input_estimate,
                     max_tokens, body, first_seen_ms, input_gen)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?;
            for j in &jobs {
                let line = j.line as i64;
                if same.execute(params![j.custom_id, line, generation, j.path, j.body])? == 1 {
                    continue;
                }
                if edited.execute(params![
                    j.custom_id,
                    line,
                    generation,
                    j.path,
                    j.body,
                    j.model,
                    to_db(j.input_estimate),
                    to_db(j.max_tokens)
                ])? == 1
                {
                    continue;
                }
                add.execute(params![
                    j.custom_id,
                    line,
                    j.path,
                    j.model,
                    to_db(j.input_estimate),
                    to_db(j.max_tokens),
                    j.body,
                    j.first_seen_ms,
                    generation
                ])?;
            }
            Ok(())
        })
    }

    fn withdraw_missing(&self, generation: i64) -> Result<u64, StoreError> {
        self.write(move |c| {
            let n = c.execute(
                "DELETE FROM jobs WHERE input_gen < ?1 AND sends = 0
                     AND state IN ('pending', 'stopped', 'expired')",
                [generation],
            )?;
            Ok(n as u64)
        })
    }

    fn clear_bad_lines(&self) -> Result<(), StoreError> {
        self.write(|c| c.execute_batch("DELETE FROM bad_lines"))
    }

    fn waited_ms(&self, seq: i64) -> Result<Option<u64>, StoreError> {
        self.read(|c| {
            c.prepare_cached("SELECT waited_ms FROM jobs WHERE seq = ?1")?
                .query_row([seq], |r| r.get::<_, i64>(0))
                .optional()
                .map(|w| w.map(from_db))
        })
    }

    fn revive_unreached(&self) -> Result<u64, StoreError> {
        self.write(|c| {
            let n = c.execute(
                "UPDATE jobs SET state = 'pending', not_before_ms = 0, cause = NULL,
                     message = NULL, status = NULL, response = NULL, request_id = NULL
                 WHERE state = 'failed' AND cause = 'connect_failed' AND status IS NULL",
                [],
            )?;
            Ok(n as u64)
        })
    }

    fn revive_expired(&self, deadline_ms: i64, now_ms: i64, all: bool) -> Result<u64, StoreError> {
        self.write(move |c| {
            let n = c.execute(
                "UPDATE jobs SET state = 'pending', not_before_ms = 0, cause = NULL,
                     message = NULL, status = NULL, response = NULL, request_id = NULL,
                     first_seen_ms = CASE WHEN ?3 THEN ?2 ELSE first_seen_ms END
                 WHERE state = 'expired' AND (?3 OR first_seen_ms + ?1 > ?2)",
                params![deadline_ms, now_ms, all],
            )?;
            Ok(n as u64)
        })
    }
    fn batch_intent(&self, intent: &BatchIntent) -> Result<(), StoreError> {
        let intent = intent.clone();
        self.write(move |c| {
            c.execute(
                "INSERT INTO batches (nonce, shape, model, endpoint, intent_ms, jobs, bytes)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    intent.nonce,
                    intent.shape,
                    intent.model,
                    intent.endpoint,
                    intent.intent_ms,
                    intent.seqs.len() as i64,
                    intent.bytes as i64
                ],
            )?;
            let mut mark = c.prepare_cached(
                "UPDATE jobs SET state = 'batched' WHERE seq = ?1 AND state = 'pending'",
            )?;
            let mut link =
                c.prepare_cached("INSERT INTO batch_jobs (nonce, seq) VALUES (?1, ?2)")?;
            for seq in &intent.seqs {
                if mark.execute([seq])? != 1 {
                    // Rolls the whole intent back (its savepoint).
                    return Err(rusqlite::Error::ToSqlConversionFailure(
                        format!("job {seq} is not pending: no batch intent recorded").into(),
                    ));
                }
                link.execute(params![intent.nonce, seq])?;
            }
            Ok(())
        })
    }

    fn batch_submitted(&self, nonce: &str, batch_id: &str) -> Result<(), StoreError> {
        let (nonce, id) = (nonce.to_owned(), batch_id.to_owned());
        self.write(move |c| {
            c.execute(
                "UPDATE batches SET batch_id = ?2, state = 'submitted' WHERE nonce = ?1",
                params![nonce, id],
            )
            .map(|_| ())
        })
    }

    fn batch_not_created(&self, nonce: &str) -> Result<u64, StoreError> {
        let nonce = nonce.to_owned();
        self.write(move |c| {
            let n = c.execute(
                "UPDATE jobs SET state = 'pending'
                 WHERE state = 'batched' AND seq IN (SELECT seq FROM batch_jobs WHERE nonce = ?1)",
                [&nonce],
            )?;
            c.execute(
                "UPDATE batches SET state = 'not_created' WHERE nonce = ?1",
                [&nonce],
            )?;
            Ok(n as u64)
        })
    }

    fn batch_cancel_requested(&self, nonce: &str, at_ms: i64) -> Result<(), StoreError> {
        let nonce = nonce.to_owned();
        self.write(move |c| {
            c.execute(
                "UPDATE batches SET cancel_ms = ?2 WHERE nonce = ?1 AND cancel_ms IS NULL",
                params![nonce, at_ms],
            )
            .map(|_| ())
        })
    }

    fn batches(&self) -> Result<Vec<BatchRow>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare(
                "SELECT nonce, batch_id, shape, model, endpoint, state, intent_ms, jobs, bytes, cancel_ms
                 FROM batches ORDER BY intent_ms, rowid",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(BatchRow {
                    nonce: r.get(0)?,
                    batch_id: r.get(1)?,
                    shape: r.get(2)?,
                    model: r.get(3)?,
                    endpoint: r.get(4)?,
                    state: r.get(5)?,
                    intent_ms: r.get(6)?,
                    jobs: r.get::<_, i64>(7)? as u64,
                    bytes: r.get::<_, i64>(8)? as u64,
                    cancel_ms: r.get(9)?,
                })
            })?;
            rows.collect()
        })
    }

    fn batch_jobs(&self, nonce: &str) -> Result<Vec<BatchJob>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT j.seq, j.custom_id, j.input_estimate + j.max_tokens, j.state
                 FROM batch_jobs b JOIN jobs j ON j.seq = b.seq
                 WHERE b.nonce = ?1 ORDER BY j.seq",
            )?;
            let rows = stmt.query_map([nonce], |r| {
                let state: String = r.get(3)?;
                Ok(BatchJob {
                    seq: r.get(0)?,
                    custom_id: r.get(1)?,
                    worst_case: r.get::<_, i64>(2)? as u64,
                    state: State::parse(&state).unwrap_or(State::HeldUnknown),
                })
            })?;
            rows.collect()
        })
    }

    fn batch_results(
        &self,
        nonce: &str,
        ends: Vec<BatchEnd>,
        close: Option<&str>,
    ) -> Result<(), StoreError> {
        let nonce = nonce.to_owned();
        let close = close.map(str::to_owned);
        self.write(move |c| {
            for e in &ends {
                let state = e.end.state.unwrap_or(State::Failed);
                write_end(c, e.seq, state, &e.end, 0)?;
                c.prepare_cached(
                    "UPDATE batch_jobs SET result_id = ?3, ended = ?4 WHERE nonce = ?1 AND seq = ?2",
                )?
                .execute(params![nonce, e.seq, e.result_id, i64::from(state.is_end())])?;
            }
            if let Some(state) = &close {
                c.execute(
                    "UPDATE batches SET state = ?2 WHERE nonce = ?1",
                    params![nonce, state],
                )?;
            }
            Ok(())
        })
    }

    fn batch_hold(&self, nonce: &str, cause: &str, message: &str) -> Result<u64, StoreError> {
        let (nonce, cause, message) = (nonce.to_owned(), cause.to_owned(), message.to_owned());
        self.write(move |c| {
            let n = c.execute(
                "UPDATE jobs SET state = 'held_unknown', cause = ?2, message = ?3,
                     status = NULL, response = NULL, request_id = NULL,
                     charged = MIN(charged + input_estimate + max_tokens, 9223372036854775807)
                 WHERE state = 'batched' AND seq IN (SELECT seq FROM batch_jobs WHERE nonce = ?1)",
                params![nonce, cause, message],
            )?;
            // The jobs' output names the batch path (its id unknown).
            c.execute(
                "UPDATE batch_jobs SET ended = 1
                 WHERE nonce = ?1 AND seq IN (SELECT seq FROM jobs WHERE state = 'held_unknown')",
                [&nonce],
            )?;
            c.execute(
                "UPDATE batches SET state = 'held' WHERE nonce = ?1",
                [&nonce],
            )?;
            Ok(n as u64)
        })
    }

    fn release_batch_failed(&self) -> Result<u64, StoreError> {
        self.write(|c| {
            let n = c.execute(
                "UPDATE jobs SET state = 'pending', not_before_ms = 0
                 WHERE state IN ('failed', 'expired')
                   AND seq IN (SELECT seq FROM batch_jobs WHERE ended = 1)",
                [],
            )?;
            c.execute(
                "UPDATE batch_jobs SET ended = 0 WHERE ended = 1
                   AND seq IN (SELECT seq FROM jobs WHERE state = 'pending')",
                [],
            )?;
            Ok(n as u64)
        })
    }

    fn each_job_with_batch(
        &self,
        f: &mut dyn FnMut(Ended, Option<BatchRef>) -> std::io::Result<()>,
    ) -> Result<(), StoreError> {
        let conn = self
            .read
            .lock()
            .map_err(|_| StoreError::new("the store's reader is poisoned"))?;
        let mut stmt = conn.prepare(
            "SELECT j.seq, j.custom_id, j.state, j.status, j.request_id, j.response, j.cause, j.message,
                    j.attempts, j.usage_in, j.usage_out, j.charged, j.sends, j.double_spend, j.waited_ms,
                    x.nonce, b.batch_id, x.result_id
             FROM jobs j
             LEFT JOIN batch_jobs x ON x.rowid = (
                 SELECT y.rowid FROM batch_jobs y WHERE y.seq = j.seq AND y.ended = 1
                 ORDER BY y.rowid DESC LIMIT 1)
             LEFT JOIN batches b ON b.nonce = x.nonce
             ORDER BY j.seq",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let ended = ended_of(r)?;
            let batch = match r.get::<_, Option<String>>(15)? {
                Some(_) => Some(BatchRef {
                    batch_id: r.get(16)?,
                    result_id: r.get(17)?,
                }),
                None => None,
            };
            f(ended, batch).map_err(|e| StoreError::with_source("cannot write a result", e))?;
        }
        Ok(())
    }
}

impl SqliteStore {
    /// Each job the `filter` (a `WHERE` clause, or none) selects, in input
    /// order.
    fn each_row(
        &self,
        filter: &str,
        f: &mut dyn FnMut(Ended) -> std::io::Result<()>,
    ) -> Result<(), StoreError> {
        let conn = self
            .read
            .lock()
            .map_err(|_| StoreError::new("the store's reader is poisoned"))?;
        let mut stmt = conn.prepare(&format!(
            "SELECT seq, custom_id, state, status, request_id, response, cause, message, attempts,
                    usage_in, usage_out, charged, sends, double_spend, waited_ms
             FROM jobs {filter} ORDER BY seq"
        ))?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let ended = ended_of(r)?;
            f(ended).map_err(|e| StoreError::with_source("cannot write a result", e))?;
        }
        Ok(())
    }
}

/// A count as SQLite keeps it: its integers are signed, so a number past
/// `i64::MAX` (a provider's garbage usage, saturated on our side) is kept
/// as the largest it can hold, never as a negative one.
fn to_db(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A count read back (never negative: see [`to_db`]).
fn from_db(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StopCause;
    use ratewise_core::Cause;

    fn store(name: &str) -> (SqliteStore, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "ratewise-run-stop-{name}-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("q.db");
        (SqliteStore::open(&db, Synchronous::Normal).unwrap(), db)
    }

    /// Writes `stop` as the store's kept stop, byte for byte, as an older
    /// version left it.
    fn write_raw(db: &Path, stop: &str) {
        let c = rusqlite::Connection::open(db).unwrap();
        c.execute(
            "INSERT INTO meta (k, v) VALUES ('stop', ?1) ON CONFLICT(k) DO UPDATE SET v = ?1",
            [stop],
        )
        .unwrap();
    }

    #[test]
    fn jobs_an_older_version_failed_for_an_unreached_upstream_are_pending_again() {
        let (s, db) = store("unreached");
        let job = |id: &str, line: u64| crate::store::NewJob {
            line,
            custom_id: id.into(),
            path: "/v1/messages".into(),
            model: None,
            input_estimate: 1,
            max_tokens: 1,
            body: b"{}".to_vec(),
            first_seen_ms: 0,
        };
        s.import(vec![
            job("refused", 1),
            job("unreached", 2),
            job("answered", 3),
        ])
        .unwrap();
        let c = rusqlite::Connection::open(&db).unwrap();
        c.execute_batch(
            "UPDATE jobs SET state = 'failed', sends = 3, cause = 'connect_failed'
                 WHERE custom_id = 'unreached';
             UPDATE jobs SET state = 'failed', sends = 1, cause = 'invalid_request', status = 400
                 WHERE custom_id = 'refused';
             UPDATE jobs SET state = 'failed', sends = 1, cause = 'connect_failed', status = 500
                 WHERE custom_id = 'answered';",
        )
        .unwrap();
        assert_eq!(s.revive_unreached().unwrap(), 1);
        let state = |id: &str| -> String {
            c.query_row("SELECT state FROM jobs WHERE custom_id = ?1", [id], |r| {
                r.get(0)
            })
            .unwrap()
        };
        assert_eq!(state("unreached"), "pending");
        assert_eq!(state("refused"), "failed");
        assert_eq!(state("answered"), "failed");
    }

    #[test]
    fn only_a_job_the_provider_refused_or_never_sent_may_take_an_edited_line() {
        let (s, db) = store("edit");
        let job = |id: &str, body: &[u8]| crate::store::NewJob {
            line: 1,
            custom_id: id.into(),
            path: "/v1/messages".into(),
            model: None,
            input_estimate: 1,
            max_tokens: 1,
            body: body.to_vec(),
            first_seen_ms: 0,
        };
        let ids = ["refused", "server_error", "done", "held", "unsent"];
        s.import(ids.iter().map(|id| job(id, b"{}")).collect())
            .unwrap();
        rusqlite::Connection::open(&db)
            .unwrap()
            .execute_batch(
                "UPDATE jobs SET state = 'failed', sends = 1, status = 400 WHERE custom_id = 'refused';
                 UPDATE jobs SET state = 'failed', sends = 3, status = 500 WHERE custom_id = 'server_error';
                 UPDATE jobs SET state = 'done', sends = 1, status = 200 WHERE custom_id = 'done';
                 UPDATE jobs SET state = 'held_unknown', sends = 1 WHERE custom_id = 'held';",
            )
            .unwrap();
        let edited: Vec<_> = ids.iter().map(|id| job(id, b"{\"x\":1}")).collect();
        let compared = s.compare(&edited).unwrap();
        assert_eq!(compared[0], Compared::Edited, "a 4xx generated nothing");
        assert!(
            matches!(compared[1], Compared::Refused { .. }),
            "{compared:?}"
        );
        assert!(
            matches!(compared[2], Compared::Refused { .. }),
            "{compared:?}"
        );
        assert!(
            matches!(compared[3], Compared::Refused { .. }),
            "{compared:?}"
        );
        assert_eq!(compared[4], Compared::Edited);
    }

    #[test]
    fn a_stop_written_with_a_string_cause_reads_back_typed() {
        let (s, db) = store("old");
        // The form every version before the typed cause wrote.
        write_raw(
            &db,
            r#"{"cause":"spend_cap","at":"Sun, 06 Dec 2026 14:00:00 GMT","status":429,"message":"cap","custom_id":"j1"}"#,
        );
        let stop = s.stopped().unwrap().expect("the old stop still holds");
        assert_eq!(stop.cause, StopCause::Provider(Cause::SpendCap));
        assert_eq!(stop.status, Some(429));
        assert_eq!(stop.custom_id.as_deref(), Some("j1"));
        write_raw(
            &db,
            r#"{"cause":"budget","at":"x","status":null,"message":"m","custom_id":null}"#,
        );
        assert_eq!(s.stopped().unwrap().unwrap().cause, StopCause::Budget);
    }

    #[test]
    fn a_stop_whose_cause_is_unknown_still_stops() {
        let (s, db) = store("unknown");
        // The old fallback word, and one a later version might write.
        for word in ["stopped", "a_cause_from_the_future", ""] {
            write_raw(
                &db,
                &format!(
                    r#"{{"cause":"{word}","at":"x","status":402,"message":"m","custom_id":null}}"#
                ),
            );
            let stop = s.stopped().unwrap().expect("still a stop");
            assert_eq!(stop.cause, StopCause::Provider(Cause::Unknown), "{word:?}");
        }
    }

    #[test]
    fn a_typed_stop_round_trips_with_its_word_on_disk() {
        let (s, db) = store("typed");
        let stop = StopRecord {
            cause: StopCause::Provider(Cause::Billing),
            at: "x".into(),
            status: Some(402),
            message: "pay".into(),
            custom_id: None,
        };
        s.stop(&stop).unwrap();
        assert_eq!(s.stopped().unwrap(), Some(stop));
        let c = rusqlite::Connection::open(&db).unwrap();
        let raw: String = c
            .query_row("SELECT v FROM meta WHERE k = 'stop'", [], |r| r.get(0))
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(v["cause"], "billing", "the word an older version reads");
    }

    #[test]
    fn huge_counts_are_kept_saturated_never_negative_nor_an_error() {
        // A provider's garbage usage, saturated at u64::MAX on our side,
        // twice: the store keeps the largest count it can hold, and its
        // sums neither wrap nor fail.
        let (s, _) = store("huge");
        let job = |n: u64| NewJob {
            line: n,
            custom_id: format!("job-{n}"),
            path: "/v1/messages".into(),
            model: None,
            input_estimate: u64::MAX,
            max_tokens: u64::MAX,
            body: b"{}".to_vec(),
            first_seen_ms: 0,
        };
        assert_eq!(s.import(vec![job(1), job(2)]).unwrap(), [true, true]);
        let before = s.counts().unwrap();
        assert_eq!(before.remaining_input, u64::MAX, "{before:?}");
        for p in s.next_pending(0, i64::MAX, 10, usize::MAX).unwrap() {
            let end = End {
                state: Some(State::Done),
                usage: Some((u64::MAX, u64::MAX)),
                charged: u64::MAX,
                ..End::default()
            };
            s.ended(p.seq, end.clone()).unwrap();
            // Charged again (a re-run's): still the largest, not negative.
            s.put_back(p.seq, 0, end.clone()).unwrap();
            s.ended(p.seq, end).unwrap();
        }
        let counts = s.counts().unwrap();
        assert_eq!(counts.done, 2);
        assert_eq!(counts.spent, u64::MAX, "{counts:?}");
        let mut seen = Vec::new();
        s.each_job(&mut |e| {
            seen.push((e.usage, e.charged));
            Ok(())
        })
        .unwrap();
        let max = i64::MAX as u64;
        assert_eq!(seen, [(Some((max, max)), max), (Some((max, max)), max)]);
    }
}
