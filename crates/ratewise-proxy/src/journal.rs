//! The journal (`--journal FILE`): one JSON line per attempt *before* it is
//! sent and one when it ends (the allow-listed [`AttemptRecord`]), every
//! stop and resume of a key, and every acknowledgement of an unknown
//! outcome. Lines are written and flushed to the operating system before
//! the send, so they survive the process being killed (not a power cut:
//! there is no fsync per line). No key, no body, no header is ever
//! written: job ids, attempt numbers, times, key fingerprints, models,
//! upstream request ids, causes and actions, and a stop's bounded evidence.
//!
//! One writer thread owns the file (`journal::writer`): a request queues
//! its line and awaits its group's write, so no runtime worker waits on
//! the disk, and the lines waiting when a write starts share it (group
//! commit: one write, one flush).
//!
//! On start the proxy reads it back ([`FileJournal::open`]): an attempt
//! that started and never ended is an *unknown outcome* — it may have
//! been generated and billed — and so is an attempt that ended
//! `hold_unknown` (a send with no answer, one cut at the end of the
//! shutdown's grace). Unknown outcomes are kept, across any number of
//! restarts, until an operator acknowledges them (`POST /unknown/ack`,
//! an `unknown_ack` line); a stop still in force stays in force.
//!
//! # What it holds, and its size
//!
//! The journal is compacted to what a restart needs — its *live state*:
//! one `stop` line (with its evidence) per stop in force, one
//! `outcome_unknown` line per unknown outcome not yet acknowledged, one
//! `attempt_started` line per attempt in flight — on every start, and
//! while running whenever the file grows past [`COMPACT_ABOVE`] (1 MiB),
//! or twice its size after the last compaction when that is more (an
//! embedder may change the threshold: [`FileJournal::set_compact_above`]). A journal with nothing live is
//! empty after a start; its size is bounded by
//! `max(1 MiB, 2 × live state)` plus one line, where the live state is
//! at most about 1.5 KiB per stopped key (the evidence's provider message
//! is clipped to 1 KiB), about 300 bytes per attempt in flight, and about
//! 300 bytes per unknown outcome, of which at most [`MAX_UNKNOWN`] are
//! kept (beyond that the oldest is dropped, with a WARN naming its job).
//!
//! Compaction writes the live state to `FILE.compact` beside the journal,
//! fsyncs it, renames it over the journal and fsyncs the directory; the
//! new file's handle (opened before the rename) takes the appends after
//! it. The journal's writer thread runs it between two groups of lines
//! (never inside a request), so no line is written meanwhile: the new
//! file says exactly what the old one did. Killed before the
//! rename, the old journal is whole (the leftover `.compact` file is
//! overwritten next time); after it, the new one is. Lines this version
//! cannot read (a line cut by a crash) are counted at start and not kept.

use ratewise_core::admit::store_kit::KeyRecord;
use ratewise_core::admit::store_kit::REMEMBER_FORGOTTEN;
use ratewise_core::record::AttemptRecord;
use ratewise_core::Cause;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

mod sink;
#[cfg(test)]
mod slow_disk;
mod writer;

#[cfg(test)]
use sink::compact_path;
use sink::{FileSink, Sink};
use writer::{Done, Job, Shared, State};

/// The size past which a running journal is compacted (unless its live
/// state is over half of it: then twice the live state).
pub const COMPACT_ABOVE: u64 = 1 << 20;

/// The most unknown outcomes kept (here and in `/status`); beyond it the
/// oldest is dropped, with a WARN naming its job.
pub const MAX_UNKNOWN: usize = 1000;

/// The most keys whose beliefs are kept (the least recently learned goes
/// beyond it): the proxy's key table is bounded, and so is this.
pub const MAX_REMEMBERED: usize = 10_000;

/// The action an attempt ends with when its outcome is unknown.
const HOLD_UNKNOWN: &str = "hold_unknown";

/// One line of the journal.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Line {
    AttemptStarted {
        job_id: String,
        attempt: u32,
        at_ms: u64,
        /// The key's fingerprint, the model, the last upstream request id
        /// seen for the job (an earlier attempt's): absent on old lines.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        key: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        model: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        request_id: Option<String>,
        /// The pool member the attempt went to (a pooled job).
        #[serde(skip_serializing_if = "Option::is_none", default)]
        member: Option<String>,
    },
    /// An attempt's end; `hold_unknown` makes it an unknown outcome.
    AttemptEnded {
        job_id: String,
        attempt: u32,
        cause: String,
        action: String,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        status: Option<u16>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        request_id: Option<String>,
    },
    /// A key stopped, with its evidence ([`Evidence`]); a line without
    /// `operator` / `answer` (an older one) reads as a bare stop.
    Stop {
        key: String,
        cause: String,
        at_ms: u64,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        until_ms: Option<u64>,
        #[serde(skip_serializing_if = "std::ops::Not::not", default)]
        operator: bool,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        answer: Option<ProviderAnswer>,
    },
    Resume {
        key: String,
        at_ms: u64,
    },
    /// An unknown outcome not yet acknowledged (what compaction writes
    /// for one).
    OutcomeUnknown {
        job_id: String,
        attempt: u32,
        at_ms: u64,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        key: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        model: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        request_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        member: Option<String>,
    },
    /// An operator acknowledged a job's unknown outcomes (every attempt
    /// of it written before this line).
    UnknownAck {
        job_id: String,
        at_ms: u64,
    },
    /// What a key learned (its stated limits, capacities, estimates),
    /// to start from after a restart; the last line of a key wins.
    Beliefs {
        key: String,
        record: Box<KeyRecord>,
    },
    /// An operator dropped what a key learned (`POST /forget`).
    Forget {
        key: String,
        at_ms: u64,
    },
}

use crate::evidence::{at, ms, Evidence, ProviderAnswer};
use crate::jobs::JobContext;

/// An attempt whose outcome is unknown: it started and never ended, or
/// ended with no answer (`hold_unknown`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unknown {
    /// The job.
    pub job_id: String,
    /// Which send.
    pub attempt: u32,
    /// When it started, Unix milliseconds.
    pub started_ms: u64,
    /// The key's fingerprint, when known.
    pub key: Option<String>,
    /// The request's model, when known.
    pub model: Option<String>,
    /// The last upstream request id seen for the job (an earlier
    /// attempt's), when one was.
    pub request_id: Option<String>,
    /// The pool member it was sent to (upstream and key fingerprint),
    /// for a pooled job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
}

impl Unknown {
    /// Attempt `attempt` of `job_id`, started at `started_ms`, with what
    /// was known of its job: one place that says what an unknown outcome
    /// carries (a cut at the shutdown's grace, an attempt open at restart).
    pub(crate) fn of(job_id: String, attempt: u32, started_ms: u64, ctx: JobContext) -> Self {
        Unknown {
            job_id,
            attempt,
            started_ms,
            key: ctx.key,
            model: ctx.model,
            request_id: ctx.request_id,
            member: ctx.member,
        }
    }
}

/// A stop read back from the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptStop {
    /// The key's fingerprint.
    pub key: String,
    /// Why, since and until when, and the answer to give.
    pub evidence: Evidence,
}

/// What a journal says after a restart.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Unknown outcomes not yet acknowledged, oldest first: attempts that
    /// started and never ended, or ended `hold_unknown`.
    pub unknown: Vec<Unknown>,
    /// Stops still in force.
    pub stops: Vec<KeptStop>,
    /// Lines that could not be read (a line cut by a crash, say).
    pub unreadable: usize,
    /// What each key had learned, by key, to recall
    /// ([`Memory::recall`](ratewise_core::admit::store_kit::Memory::recall)).
    pub beliefs: Vec<KeyRecord>,
}

/// What a restart needs, kept as the lines are written (and as they are
/// read back): what compaction writes.
#[derive(Debug, Default)]
struct Live {
    /// Attempts started and not ended.
    open: BTreeMap<(String, u32), (u64, JobContext)>,
    /// Unknown outcomes not acknowledged, oldest first.
    unknown: Vec<Unknown>,
    /// Stops, by key (an expired one is dropped when compacted).
    stops: HashMap<String, KeptStop>,
    /// What each key learned, by key (the last written).
    beliefs: BTreeMap<String, KeyRecord>,
}

impl Live {
    /// Reads the journal's lines; how many could not be read.
    fn replay(bytes: &[u8]) -> (Live, usize) {
        let mut live = Live::default();
        let mut unreadable = 0;
        // Split on newlines ourselves: a line cut by a crash (even inside a
        // multi-byte character) is one unreadable line, not the end of the
        // journal.
        for raw in bytes.split(|b| *b == b'\n') {
            let line = String::from_utf8_lossy(raw);
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Line>(&line) {
                Ok(l) => {
                    live.apply(l);
                }
                Err(_) => unreadable += 1,
            }
        }
        (live, unreadable)
    }

    /// After a restart nothing is in flight: what was open is unknown.
    fn restarted(&mut self) {
        for ((job_id, attempt), (started_ms, ctx)) in std::mem::take(&mut self.open) {
            self.push_unknown(Unknown::of(job_id, attempt, started_ms, ctx));
        }
    }

    /// Adds an unknown outcome (once); the one dropped to make room.
    fn push_unknown(&mut self, u: Unknown) -> Option<Unknown> {
        if self
            .unknown
            .iter()
            .any(|k| k.job_id == u.job_id && k.attempt == u.attempt)
        {
            return None;
        }
        self.unknown.push(u);
        (self.unknown.len() > MAX_UNKNOWN).then(|| self.unknown.remove(0))
    }

    /// Applies one line; an unknown outcome dropped to make room.
    fn apply(&mut self, line: Line) -> Option<Unknown> {
        match line {
            Line::AttemptStarted {
                job_id,
                attempt,
                at_ms,
                key,
                model,
                request_id,
                member,
            } => {
                let ctx = JobContext {
                    key,
                    model,
                    request_id,
                    member,
                };
                self.open.insert((job_id, attempt), (at_ms, ctx));
            }
            Line::AttemptEnded {
                job_id,
                attempt,
                action,
                request_id,
                ..
            } => {
                let started = self.open.remove(&(job_id.clone(), attempt));
                if action == HOLD_UNKNOWN {
                    let (started_ms, ctx) = started.unwrap_or_default();
                    return self.push_unknown(Unknown {
                        job_id,
                        attempt,
                        started_ms,
                        key: ctx.key,
                        model: ctx.model,
                        request_id: request_id.or(ctx.request_id),
                        member: ctx.member,
                    });
                }
            }
            Line::OutcomeUnknown {
                job_id,
                attempt,
                at_ms,
                key,
                model,
                request_id,
                member,
            } => {
                self.open.remove(&(job_id.clone(), attempt));
                return self.push_unknown(Unknown {
                    job_id,
                    attempt,
                    started_ms: at_ms,
                    key,
                    model,
                    request_id,
                    member,
                });
            }
            Line::UnknownAck { job_id, .. } => {
                self.unknown.retain(|u| u.job_id != job_id);
            }
            Line::Stop {
                key,
                cause,
                at_ms,
                until_ms,
                operator,
                answer,
            } => {
                let cause = Cause::from_word(&cause).unwrap_or(Cause::Unknown);
                let ev = Evidence {
                    operator,
                    answer: answer.and_then(ProviderAnswer::bounded),
                    ..Evidence::bare(cause, at(at_ms), until_ms.map(at))
                };
                match self.stops.get_mut(&key) {
                    // A bare line on a key already stopped (the admin
                    // writes one after the evidence): the stop in force
                    // keeps its evidence and its since; the later end wins.
                    Some(k) if ev.answer.is_none() && !ev.operator => {
                        if k.evidence.until.is_some() {
                            k.evidence.until = match (k.evidence.until, ev.until) {
                                (Some(a), Some(b)) => Some(a.max(b)),
                                _ => None,
                            };
                        }
                    }
                    _ => {
                        self.stops
                            .insert(key.clone(), KeptStop { key, evidence: ev });
                    }
                }
            }
            Line::Resume { key, .. } => {
                self.stops.remove(&key);
            }
            Line::Beliefs { key, record } => {
                self.beliefs.insert(key, *record);
                if self.beliefs.len() > MAX_REMEMBERED {
                    // The least recently learned goes.
                    let oldest = self
                        .beliefs
                        .iter()
                        .min_by_key(|(_, r)| r.written_at())
                        .map(|(k, _)| k.clone());
                    if let Some(k) = oldest {
                        self.beliefs.remove(&k);
                    }
                }
            }
            Line::Forget { key, .. } => {
                self.beliefs.remove(&key);
            }
        }
        None
    }

    /// The stops in force at `now`, by key.
    fn stops_in_force(&self, now: SystemTime) -> Vec<KeptStop> {
        let mut stops: Vec<KeptStop> = self
            .stops
            .values()
            .filter(|s| s.evidence.until.is_none_or(|u| u > now))
            .cloned()
            .collect();
        stops.sort_by(|a, b| a.key.cmp(&b.key));
        stops
    }

    /// Forgets the stops ended by `now`.
    fn expire(&mut self, now: SystemTime) {
        self.stops
            .retain(|_, s| s.evidence.until.is_none_or(|u| u > now));
    }

    /// The live state as journal text: stops in force, unknown outcomes,
    /// attempts in flight.
    fn text(&self, now: SystemTime) -> std::io::Result<String> {
        let mut lines = Vec::new();
        for s in self.stops_in_force(now) {
            let ev = s.evidence;
            lines.push(Line::Stop {
                key: s.key,
                cause: ev.cause.as_str().to_owned(),
                at_ms: ms(ev.since),
                until_ms: ev.until.map(ms),
                operator: ev.operator,
                answer: ev.answer,
            });
        }
        for u in &self.unknown {
            lines.push(Line::OutcomeUnknown {
                job_id: u.job_id.clone(),
                attempt: u.attempt,
                at_ms: u.started_ms,
                key: u.key.clone(),
                model: u.model.clone(),
                request_id: u.request_id.clone(),
                member: u.member.clone(),
            });
        }
        let forgotten = |r: &KeyRecord| {
            r.written_at()
                .and_then(|w| now.duration_since(w).ok())
                .is_none_or(|age| age > REMEMBER_FORGOTTEN)
        };
        for (key, record) in self.beliefs.iter().filter(|(_, r)| !forgotten(r)) {
            lines.push(Line::Beliefs {
                key: key.clone(),
                record: Box::new(record.clone()),
            });
        }
        for ((job_id, attempt), (at_ms, ctx)) in &self.open {
            lines.push(Line::AttemptStarted {
                job_id: job_id.clone(),
                attempt: *attempt,
                at_ms: *at_ms,
                key: ctx.key.clone(),
                model: ctx.model.clone(),
                request_id: ctx.request_id.clone(),
                member: ctx.member.clone(),
            });
        }
        let mut text = String::new();
        for l in &lines {
            text.push_str(&serde_json::to_string(l).map_err(std::io::Error::other)?);
            text.push('\n');
        }
        Ok(text)
    }
}

/// Reads the journal at `path` as a restart would (none yet: nothing to
/// recover). It is not changed: [`FileJournal::open`] also compacts it.
pub fn recover(path: &Path) -> std::io::Result<Recovered> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Recovered::default()),
        Err(e) => return Err(e),
    };
    let (mut live, unreadable) = Live::replay(&bytes);
    live.restarted();
    Ok(Recovered {
        stops: live.stops_in_force(SystemTime::now()),
        unknown: live.unknown,
        beliefs: live.beliefs.into_values().collect(),
        unreadable,
    })
}

/// The journal file and the live state its lines make. Its writer
/// thread owns the file: a line is queued, written with the others
/// waiting (one write, one flush), and its caller told once it is on disk
/// (or that it is not). The request path awaits that without blocking a
/// runtime worker ([`FileJournal::attempt_started_async`]); the methods
/// returning a result wait for it on their thread; a stop, a resume, an
/// unknown outcome closed are queued, their failure logged.
pub struct FileJournal {
    shared: Arc<Shared>,
    /// The writer thread (joined on drop, after it wrote what is queued).
    writer: Option<std::thread::JoinHandle<()>>,
    /// Held across [`remember`](Self::remember)'s look and its write: two
    /// callers at once (the periodic task and the shutdown's last call)
    /// would both see a change and both write it.
    remembering: std::sync::Mutex<()>,
}

impl std::fmt::Debug for FileJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileJournal")
            .field("path", &self.shared.path)
            .field("len", &self.len())
            .finish()
    }
}

/// A line as written: its JSON and a newline.
fn text(line: &Line) -> std::io::Result<String> {
    let mut text = serde_json::to_string(line).map_err(std::io::Error::other)?;
    text.push('\n');
    Ok(text)
}

impl FileJournal {
    /// Opens (creates) the journal at `path`: reads it back as a restart
    /// does (what it says is returned), compacts it to its live state
    /// (a failure to compact is logged, and the old file appended to), and
    /// appends after that.
    pub fn open(path: &Path) -> std::io::Result<(FileJournal, Recovered)> {
        FileJournal::open_with(path, |file| file)
    }

    /// [`FileJournal::open`], its storage the file wrapped by `wrap` (a
    /// test's slow or failing disk).
    pub(crate) fn open_with<S: Sink>(
        path: &Path,
        wrap: impl FnOnce(FileSink) -> S,
    ) -> std::io::Result<(FileJournal, Recovered)> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(path)?;
        let mut bytes = Vec::new();
        {
            use std::io::{Read, Seek, SeekFrom};
            file.seek(SeekFrom::Start(0))?;
            file.read_to_end(&mut bytes)?;
        }
        let (mut live, unreadable) = Live::replay(&bytes);
        live.restarted();
        let mut len = bytes.len() as u64;
        // A line cut by a crash is ended, so the next one starts clean.
        if bytes.last().is_some_and(|b| *b != b'\n') {
            file.write_all(b"\n")?;
            len += 1;
        }
        let now = SystemTime::now();
        let recovered = Recovered {
            unknown: live.unknown.clone(),
            stops: live.stops_in_force(now),
            beliefs: live.beliefs.values().cloned().collect(),
            unreadable,
        };
        let state = State {
            live,
            len,
            compacted: 0,
        };
        let shared = Arc::new(Shared::new(path.to_owned(), state, COMPACT_ABOVE));
        let mut sink: Box<dyn Sink> = Box::new(wrap(FileSink::new(path, file)));
        // Before the writer starts: nothing else writes meanwhile.
        if let Err(e) = shared.compact(&mut *sink) {
            tracing::warn!(error = %e, path = %path.display(), "the journal could not be compacted at start; appending to it as it is");
        }
        let writer = writer::spawn(shared.clone(), sink)?;
        Ok((
            FileJournal {
                remembering: std::sync::Mutex::new(()),
                shared,
                writer: Some(writer),
            },
            recovered,
        ))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Sets the size past which the running journal is compacted
    /// (default [`COMPACT_ABOVE`]; tests use a small one).
    pub fn set_compact_above(&self, bytes: u64) {
        self.shared.compact_above.store(bytes, Ordering::Relaxed);
    }

    /// The file's size now, in bytes (as of the last group written).
    pub fn len(&self) -> u64 {
        self.shared.state().len
    }

    /// Whether the file is empty (nothing live, nothing since).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The unknown outcomes the journal keeps (not yet acknowledged),
    /// oldest first.
    pub fn unknown(&self) -> Vec<Unknown> {
        self.shared.state().live.unknown.clone()
    }

    /// Compacts the journal to its live state now (after what is queued).
    pub fn compact(&self) -> std::io::Result<()> {
        self.wait(Job::Compact)
    }

    /// Queues `job` and blocks this thread until the writer has done it.
    /// Off the request path only: the writer is a thread of its own, so
    /// this never waits on the thread it blocks.
    fn wait(&self, job: impl FnOnce(Done) -> Job) -> std::io::Result<()> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.shared.push(job(Done::Blocking(tx)));
        rx.recv().unwrap_or_else(|_| Err(writer::stopped()))
    }

    /// Queues a line whose failure is only logged (a stop, a resume, an
    /// unknown outcome closed): the next start reads the journal as it
    /// stands. It is written before any line queued after it.
    fn write(&self, line: Line) {
        match text(&line) {
            Ok(text) => self.shared.push(Job::Line {
                text,
                line,
                done: Done::Logged,
                slot: None,
            }),
            Err(e) => tracing::error!(error = %e, "journal line not written"),
        }
    }

    /// Writes a line (and keeps what it says), blocking until its group is
    /// written; an error says it is not on disk. Past the size threshold,
    /// the journal is compacted after it.
    fn try_write(&self, line: Line) -> std::io::Result<()> {
        let text = text(&line)?;
        self.wait(|done| Job::Line {
            text,
            line,
            done,
            slot: None,
        })
    }

    /// Writes a line from the request path: awaits a queue slot and then
    /// the group it is written with, never blocking the runtime's worker.
    /// An error says it is not on disk.
    async fn write_async(&self, line: Line) -> std::io::Result<()> {
        let text = text(&line)?;
        let slot = self
            .shared
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| writer::stopped())?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.shared.push(Job::Line {
            text,
            line,
            done: Done::Async(tx),
            slot: Some(slot),
        });
        rx.await.unwrap_or_else(|_| Err(writer::stopped()))
    }

    /// An attempt cut at the end of the shutdown's grace: ended as an
    /// unknown outcome, kept until acknowledged.
    pub fn close_unknown(&self, u: &Unknown) {
        self.write(Line::AttemptEnded {
            job_id: u.job_id.clone(),
            attempt: u.attempt,
            cause: Cause::OutcomeUnknown.as_str().to_owned(),
            action: HOLD_UNKNOWN.to_owned(),
            status: None,
            request_id: None,
        });
    }

    /// An operator acknowledged `job_id`'s unknown outcomes: the next
    /// start no longer reports them. An error says the acknowledgement is
    /// not on disk.
    pub fn acknowledge(&self, job_id: &str) -> std::io::Result<()> {
        self.try_write(Line::UnknownAck {
            job_id: job_id.to_owned(),
            at_ms: ms(SystemTime::now()),
        })
    }

    /// A key stopped (no evidence: a bare line; a stop already in force
    /// keeps its own).
    pub fn stop(&self, key: &str, cause: Cause, until: Option<SystemTime>) {
        self.stop_with(key, &Evidence::bare(cause, SystemTime::now(), until));
    }

    /// A key stopped, with its evidence.
    pub fn stop_with(&self, key: &str, ev: &Evidence) {
        self.write(Line::Stop {
            key: key.to_owned(),
            cause: ev.cause.as_str().to_owned(),
            at_ms: ms(ev.since),
            until_ms: ev.until.map(ms),
            operator: ev.operator,
            answer: ev.answer.clone(),
        });
    }

    /// An attempt is about to be sent, with what is known of its job;
    /// blocks until its line is on disk (off the request path: see
    /// [`FileJournal::attempt_started_async`]).
    pub fn attempt_started_with(
        &self,
        job_id: &str,
        attempt: u32,
        at: SystemTime,
        ctx: Option<JobContext>,
    ) -> std::io::Result<()> {
        self.try_write(attempt_started(job_id, attempt, at, ctx))
    }

    /// An attempt is about to be sent: resolves once its line is on disk
    /// (written with the others waiting), or with the error that says it
    /// is not — the send is then not made.
    pub async fn attempt_started_async(
        &self,
        job_id: &str,
        attempt: u32,
        at: SystemTime,
        ctx: Option<JobContext>,
    ) -> std::io::Result<()> {
        self.write_async(attempt_started(job_id, attempt, at, ctx))
            .await
    }

    /// An attempt's end; blocks until its line is on disk.
    pub fn ended(&self, record: &AttemptRecord) -> std::io::Result<()> {
        self.try_write(attempt_ended(record))
    }

    /// An attempt's end, queued behind every line before it and not
    /// waited for (the proxy's request path): written in the next group,
    /// its failure logged. Until it is on disk, a crash leaves the attempt
    /// an unknown outcome after the restart — the safe side. It takes no
    /// queue slot: each end line follows a start line that had one, so
    /// the lines queued this way are at most the attempts in flight.
    pub fn ended_queued(&self, record: &AttemptRecord) {
        self.write(attempt_ended(record))
    }

    /// An attempt's end, from the request path: resolves once its line is
    /// on disk.
    pub async fn ended_async(&self, record: &AttemptRecord) -> std::io::Result<()> {
        self.write_async(attempt_ended(record)).await
    }

    /// What `record`'s key has learned, when it differs from what the
    /// journal holds for it (beliefs alone compared): written so that a
    /// restart starts from it. Returns whether a line was written.
    pub fn remember(&self, record: &KeyRecord) -> bool {
        let _one_at_a_time = self
            .remembering
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let beliefs = record.beliefs_only();
        let same = self
            .shared
            .state()
            .live
            .beliefs
            .get(record.key())
            .is_some_and(|r| r.beliefs_only() == beliefs);
        if same {
            return false;
        }
        let at = record.written_at().unwrap_or_else(SystemTime::now);
        self.try_write(Line::Beliefs {
            key: record.key().to_owned(),
            record: Box::new(beliefs.stamped(at)),
        })
        .is_ok()
    }

    /// What `key` learned is dropped: the next start learns it anew.
    pub fn forget(&self, key: &str) {
        self.write(Line::Forget {
            key: key.to_owned(),
            at_ms: ms(SystemTime::now()),
        });
    }

    /// A key resumed.
    pub fn resume(&self, key: &str) {
        self.write(Line::Resume {
            key: key.to_owned(),
            at_ms: ms(SystemTime::now()),
        });
    }

    /// Writes what is queued and makes it durable (on shutdown).
    pub fn sync(&self) {
        let _ = self.wait(Job::Sync);
    }
}

/// The line of an attempt about to be sent.
fn attempt_started(job_id: &str, attempt: u32, at: SystemTime, ctx: Option<JobContext>) -> Line {
    let ctx = ctx.unwrap_or_default();
    Line::AttemptStarted {
        job_id: job_id.to_owned(),
        attempt,
        at_ms: ms(at),
        key: ctx.key,
        model: ctx.model,
        request_id: ctx.request_id,
        member: ctx.member,
    }
}

/// The line of an attempt's end.
fn attempt_ended(record: &AttemptRecord) -> Line {
    Line::AttemptEnded {
        job_id: record.job_id.clone().unwrap_or_default(),
        attempt: record.attempt,
        cause: record.cause.as_str().to_owned(),
        action: record.action.as_str().to_owned(),
        status: record.status,
        request_id: record.request_id.clone(),
    }
}

impl Drop for FileJournal {
    /// Every line queued is written before the writer ends.
    fn drop(&mut self) {
        self.shared.close();
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

impl ratewise_tower::Journal for FileJournal {
    fn attempt_started<'a>(
        &'a self,
        job_id: &'a str,
        attempt: u32,
        at: SystemTime,
    ) -> ratewise_tower::Written<'a> {
        Box::pin(async move {
            self.attempt_started_async(job_id, attempt, at, None)
                .await
                .map_err(Into::into)
        })
    }

    fn attempt_ended<'a>(&'a self, record: &'a AttemptRecord) -> ratewise_tower::Written<'a> {
        Box::pin(async move { self.ended_async(record).await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Duration;

    /// A fresh path in the temp directory (and its `.compact` sibling
    /// removed).
    fn fresh(name: &str) -> PathBuf {
        let p =
            std::env::temp_dir().join(format!("ratewise-journal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        let _ = std::fs::remove_file(compact_path(&p));
        p
    }

    fn ended(job: &str, attempt: u32, cause: &str, action: &str) -> Line {
        Line::AttemptEnded {
            job_id: job.into(),
            attempt,
            cause: cause.into(),
            action: action.into(),
            status: None,
            request_id: None,
        }
    }

    fn ctx(key: &str) -> Option<JobContext> {
        Some(JobContext {
            key: Some(key.into()),
            model: Some("claude-sonnet-4-5".into()),
            request_id: None,
            member: None,
        })
    }

    fn jobs(r: &Recovered) -> Vec<(&str, u32)> {
        r.unknown
            .iter()
            .map(|u| (u.job_id.as_str(), u.attempt))
            .collect()
    }

    fn stop_keys(r: &Recovered) -> Vec<(&str, Cause)> {
        r.stops
            .iter()
            .map(|s| (s.key.as_str(), s.evidence.cause))
            .collect()
    }

    #[test]
    fn what_a_key_learned_is_written_once_when_told_from_two_places_at_once() {
        // The periodic task and the shutdown's last call may tell the same
        // beliefs at the same moment: one line, not one per caller.
        let path = fresh("remember-once");
        let (j, _) = FileJournal::open(&path).unwrap();
        let record: KeyRecord = serde_json::from_str(
            r#"{"format":4,"key":"fp-0123456789abcdef","stop":null,"scopes":[]}"#,
        )
        .unwrap();
        let j = Arc::new(j);
        let start = Arc::new(std::sync::Barrier::new(8));
        let written: usize = (0..8)
            .map(|_| {
                let (j, record, start) = (j.clone(), record.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    usize::from(j.remember(&record))
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .sum();
        j.sync();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(written, 1, "{text}");
        assert_eq!(text.matches("\"event\":\"beliefs\"").count(), 1, "{text}");
        assert!(
            !j.remember(&record),
            "the same beliefs again: nothing written"
        );
    }

    #[test]
    fn a_pooled_attempt_cut_open_names_its_member_after_a_restart_and_a_compaction() {
        let path = fresh("member");
        let (j, _) = FileJournal::open(&path).unwrap();
        let now = SystemTime::now();
        let member = "127.0.0.1:9#fp-0123456789abcdef";
        let pooled = Some(JobContext {
            key: Some("pool:claude".into()),
            member: Some(member.into()),
            ..Default::default()
        });
        j.attempt_started_with("pooled", 1, now, pooled).unwrap();
        drop(j);
        // Read back (and compacted to an `outcome_unknown` line), twice.
        for _ in 0..2 {
            let (_, r) = FileJournal::open(&path).unwrap();
            assert_eq!(r.unknown.len(), 1);
            assert_eq!(r.unknown[0].member.as_deref(), Some(member));
            assert_eq!(r.unknown[0].key.as_deref(), Some("pool:claude"));
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(member), "{text}");
    }

    #[test]
    fn unfinished_attempts_and_stops_in_force_come_back_until_acknowledged() {
        let path = fresh("back");
        let (j, first) = FileJournal::open(&path).unwrap();
        assert!(first.unknown.is_empty() && first.stops.is_empty());
        let now = SystemTime::now();
        j.attempt_started_with("a", 1, now, None).unwrap();
        j.attempt_started_with("b", 1, now, None).unwrap();
        j.stop("fp-1", Cause::SpendCap, None);
        j.stop("fp-2", Cause::Billing, None);
        j.resume("fp-2");
        j.stop("fp-3", Cause::UserLimit, Some(now - Duration::from_secs(1)));
        drop(j);
        // "a" ends; "b" never does; a crash cuts the last line.
        let rec = serde_json::to_string(&ended("a", 1, "success", "done")).unwrap();
        {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            writeln!(f, "{rec}").unwrap();
            // Cut inside a multi-byte character, as a crash can.
            f.write_all(b"{\"event\":\"stop\",\"key\":\"\xc3").unwrap();
        }
        let r = recover(&path).unwrap();
        assert_eq!(jobs(&r), vec![("b", 1)]);
        assert_eq!(r.unreadable, 1);
        assert_eq!(
            stop_keys(&r),
            vec![("fp-1", Cause::SpendCap)],
            "resumed and expired stops are gone"
        );
        // Every restart reports it again (and compacts the journal to it
        // and the stop), until an operator acknowledges it.
        for restart in 1..=3 {
            let (j, r) = FileJournal::open(&path).unwrap();
            assert_eq!(jobs(&r), vec![("b", 1)], "restart {restart}");
            assert_eq!(stop_keys(&r), vec![("fp-1", Cause::SpendCap)]);
            assert_eq!(j.unknown().len(), 1);
            let text = std::fs::read_to_string(&path).unwrap();
            assert_eq!(text.lines().count(), 2, "only live state: {text}");
        }
        let (j, _) = FileJournal::open(&path).unwrap();
        j.acknowledge("b").unwrap();
        assert!(j.unknown().is_empty());
        drop(j);
        assert!(recover(&path).unwrap().unknown.is_empty(), "acknowledged");
        let (_, r) = FileJournal::open(&path).unwrap();
        assert!(r.unknown.is_empty(), "and after a restart");
        assert_eq!(stop_keys(&r), vec![("fp-1", Cause::SpendCap)]);
        let _ = std::fs::remove_file(&path);
        assert!(
            recover(&path).unwrap().unknown.is_empty(),
            "no file: nothing"
        );
    }

    #[test]
    fn a_stop_keeps_its_evidence_and_old_lines_still_read() {
        let path = fresh("ev");
        {
            // Lines written before the evidence existed.
            let mut f = std::fs::File::create(&path).unwrap();
            writeln!(
                f,
                r#"{{"event":"stop","key":"fp-old","cause":"billing","at_ms":1796000000000}}"#
            )
            .unwrap();
            writeln!(
                f,
                r#"{{"event":"attempt_started","job_id":"j","attempt":1,"at_ms":1796000000000}}"#
            )
            .unwrap();
        }
        let (j, r) = FileJournal::open(&path).unwrap();
        assert_eq!(r.unknown.len(), 1);
        assert_eq!(r.unknown[0].key, None, "an old attempt line reads");
        let since = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_000_000_123);
        let cap = Evidence::of_answer(
            Cause::SpendCap,
            Some(http::StatusCode::TOO_MANY_REQUESTS),
            Some(br#"{"type":"error","error":{"type":"rate_limit_error","message":"cap","details":{"error_code":"enforced_spend_limit_reached"}}}"#),
            since,
            None,
        );
        j.stop_with("fp-cap", &cap);
        // A bare line after it (the admin writes one) keeps the evidence
        // and the since.
        j.stop("fp-cap", Cause::SpendCap, None);
        j.stop_with("fp-op", &Evidence::operator(since));
        drop(j);
        let check = |r: &Recovered| {
            let by = |k: &str| {
                r.stops
                    .iter()
                    .find(|s| s.key == k)
                    .unwrap()
                    .evidence
                    .clone()
            };
            assert_eq!(by("fp-cap"), cap);
            assert_eq!(by("fp-old").cause, Cause::Billing);
            assert!(by("fp-old").answer.is_none());
            assert!(by("fp-op").operator && by("fp-op").cause_word() == "operator");
            assert_eq!(jobs(r), vec![("j", 1)]);
        };
        check(&recover(&path).unwrap());
        // Compacted (one line per stop), the same evidence comes back.
        let (j, r) = FileJournal::open(&path).unwrap();
        check(&r);
        drop(j);
        check(&recover(&path).unwrap());
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 4, "3 stops, 1 unknown: {text}");
        let _ = std::fs::remove_file(&path);
    }

    /// Issue #38: 10,000 requests leave a journal of megabytes; a restart
    /// leaves only what is live.
    #[test]
    fn ten_thousand_requests_and_a_restart_leave_only_live_state() {
        let path = fresh("10k");
        let (j, _) = FileJournal::open(&path).unwrap();
        // Never compacted while running: the file as it used to grow.
        j.set_compact_above(u64::MAX);
        let now = SystemTime::now();
        for i in 0..10_000 {
            let job = format!("{:x}-{i}", 0x18f0_0000_0000_u64);
            j.attempt_started_with(&job, 1, now, ctx("fp-0123456789abcdef"))
                .unwrap();
            j.try_write(Line::AttemptEnded {
                job_id: job,
                attempt: 1,
                cause: "success".into(),
                action: "done".into(),
                status: Some(200),
                request_id: Some(format!("req_{i:024}")),
            })
            .unwrap();
        }
        let grown = std::fs::metadata(&path).unwrap().len();
        assert_eq!(grown, j.len());
        assert!(grown > 2_000_000, "{grown} bytes before the restart");
        drop(j);
        let (j, r) = FileJournal::open(&path).unwrap();
        assert!(r.unknown.is_empty() && r.stops.is_empty());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "nothing live");
        assert!(j.is_empty());

        // With a stop and an unknown outcome live: those two lines alone.
        j.set_compact_above(u64::MAX);
        j.stop("fp-0123456789abcdef", Cause::SpendCap, None);
        for i in 0..10_000 {
            let job = format!("job-{i}");
            j.attempt_started_with(&job, 1, now, ctx("fp-0123456789abcdef"))
                .unwrap();
            let action = if i == 5_000 { "hold_unknown" } else { "done" };
            j.try_write(ended(&job, 1, "success", action)).unwrap();
        }
        drop(j);
        let (_, r) = FileJournal::open(&path).unwrap();
        assert_eq!(jobs(&r), vec![("job-5000", 1)]);
        assert_eq!(
            stop_keys(&r),
            vec![("fp-0123456789abcdef", Cause::SpendCap)]
        );
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(size < 1024, "{size} bytes: a stop and an unknown outcome");
        let _ = std::fs::remove_file(&path);
    }

    /// Past its threshold the running journal is compacted: its size stays
    /// bounded, the appends after go to the new file, and a restart keeps
    /// every stop, unknown outcome and attempt in flight.
    #[test]
    fn a_running_journal_is_compacted_past_its_threshold_and_keeps_what_is_live() {
        let path = fresh("running");
        let (j, _) = FileJournal::open(&path).unwrap();
        j.set_compact_above(4096);
        let now = SystemTime::now();
        j.stop_with("fp-cap", &Evidence::operator(now));
        j.stop(
            "fp-until",
            Cause::UserLimit,
            Some(now + Duration::from_secs(3600)),
        );
        j.attempt_started_with("lost", 1, now, ctx("fp-aa"))
            .unwrap();
        j.try_write(ended("lost", 1, "outcome_unknown", "hold_unknown"))
            .unwrap();
        j.attempt_started_with("in-flight", 2, now, ctx("fp-bb"))
            .unwrap();
        let mut peak = 0;
        for i in 0..2_000 {
            let job = format!("job-{i}");
            j.attempt_started_with(&job, 1, now, None).unwrap();
            j.try_write(ended(&job, 1, "success", "done")).unwrap();
            peak = peak.max(j.len());
            // The file on disk is the one appended to.
            assert_eq!(std::fs::metadata(&path).unwrap().len(), j.len());
        }
        assert!(peak <= 4096 + 512, "bounded: {peak}");
        j.attempt_started_with("last", 1, now, None).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(r#""job_id":"last""#), "{text}");
        assert!(!text.contains(r#""job_id":"job-0""#), "compacted: {text}");
        assert!(!compact_path(&path).exists(), "renamed over the journal");
        drop(j);
        // The process is killed here: the restart finds what is live.
        let (_, r) = FileJournal::open(&path).unwrap();
        assert_eq!(jobs(&r), vec![("lost", 1), ("in-flight", 2), ("last", 1)]);
        assert_eq!(r.unknown[0].key.as_deref(), Some("fp-aa"));
        assert_eq!(r.unknown[1].key.as_deref(), Some("fp-bb"));
        let keys: Vec<_> = r.stops.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, vec!["fp-cap", "fp-until"]);
        assert!(r.stops[0].evidence.operator);
        let _ = std::fs::remove_file(&path);
    }

    /// Lines written from several threads while compactions run: none is
    /// lost (every compaction holds the journal's lock).
    #[test]
    fn concurrent_appends_during_compaction_lose_nothing() {
        let path = fresh("concurrent");
        let (j, _) = FileJournal::open(&path).unwrap();
        j.set_compact_above(2048);
        let j = std::sync::Arc::new(j);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let j = j.clone();
                std::thread::spawn(move || {
                    let now = SystemTime::now();
                    for i in 0..1_000 {
                        let job = format!("t{t}-{i}");
                        j.attempt_started_with(&job, 1, now, None).unwrap();
                        let action = if i == 500 { "hold_unknown" } else { "done" };
                        j.try_write(ended(&job, 1, "x", action)).unwrap();
                    }
                    j.stop(&format!("fp-{t}"), Cause::Billing, None);
                    j.attempt_started_with(&format!("t{t}-open"), 1, now, None)
                        .unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        drop(j);
        let r = recover(&path).unwrap();
        let mut got: Vec<String> = r.unknown.iter().map(|u| u.job_id.clone()).collect();
        got.sort();
        let mut want: Vec<String> = (0..4)
            .flat_map(|t| [format!("t{t}-500"), format!("t{t}-open")])
            .collect();
        want.sort();
        assert_eq!(got, want);
        assert_eq!(r.stops.len(), 4);
        assert_eq!(r.unreadable, 0);
        let _ = std::fs::remove_file(&path);
    }

    /// Killed mid-compaction, before the rename: the old journal is whole
    /// and the half-written new one is not read.
    #[test]
    fn a_compaction_killed_before_its_rename_loses_nothing() {
        let path = fresh("killed");
        let (j, _) = FileJournal::open(&path).unwrap();
        j.stop("fp-1", Cause::SpendCap, None);
        j.attempt_started_with("cut", 1, SystemTime::now(), None)
            .unwrap();
        drop(j);
        std::fs::write(
            compact_path(&path),
            b"{\"event\":\"resume\",\"key\":\"fp-1\"",
        )
        .unwrap();
        let (_, r) = FileJournal::open(&path).unwrap();
        assert_eq!(jobs(&r), vec![("cut", 1)]);
        assert_eq!(stop_keys(&r), vec![("fp-1", Cause::SpendCap)]);
        assert!(!compact_path(&path).exists());
        let r = recover(&path).unwrap();
        assert_eq!(jobs(&r), vec![("cut", 1)]);
        assert_eq!(stop_keys(&r), vec![("fp-1", Cause::SpendCap)]);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn an_acknowledgement_names_one_job_and_the_oldest_go_past_the_bound() {
        let path = fresh("ack");
        let (j, _) = FileJournal::open(&path).unwrap();
        let now = SystemTime::now();
        for job in ["x", "y"] {
            for attempt in [1, 2] {
                j.attempt_started_with(job, attempt, now, None).unwrap();
            }
        }
        drop(j);
        let (j, r) = FileJournal::open(&path).unwrap();
        assert_eq!(jobs(&r), vec![("x", 1), ("x", 2), ("y", 1), ("y", 2)]);
        j.acknowledge("x").unwrap();
        drop(j);
        let (j, r) = FileJournal::open(&path).unwrap();
        assert_eq!(jobs(&r), vec![("y", 1), ("y", 2)]);
        j.set_compact_above(u64::MAX);
        for i in 0..MAX_UNKNOWN {
            j.try_write(ended(
                &format!("u{i}"),
                1,
                "outcome_unknown",
                "hold_unknown",
            ))
            .unwrap();
        }
        let kept = j.unknown();
        assert_eq!(kept.len(), MAX_UNKNOWN);
        assert_eq!(kept[0].job_id, "u0", "y's two dropped, oldest first");
        drop(j);
        let (_, r) = FileJournal::open(&path).unwrap();
        assert_eq!(r.unknown.len(), MAX_UNKNOWN);
        assert_eq!(r.unknown[0].job_id, "u0");
        let _ = std::fs::remove_file(&path);
    }
}
