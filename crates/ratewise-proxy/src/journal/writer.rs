//! The journal's writer: one thread owns the journal's storage, so no
//! request ever waits on the disk on a runtime worker.
//!
//! Lines are queued (a bounded queue for the request path: a request
//! whose slot is not free awaits one) and the writer takes *every* line
//! waiting when it starts a write: one write, one flush for the group
//! (group commit). Each line's writer-side waiter is told once its group
//! is on disk — a request awaits that before its send — or that it is
//! not (the send is then not made). Between groups, and never inside a
//! request, the writer compacts the journal when it has grown past its
//! threshold, and runs the commands queued behind the lines before them
//! (an fsync on shutdown, a compaction asked for).
//!
//! A thread of its own rather than `spawn_blocking` per group: the file
//! stays owned by one thread, and a caller outside any runtime (a test,
//! shutdown) can wait for it too without risk of blocking the thread
//! that would have to write.

use super::sink::Sink;
use super::{Line, Live, MAX_UNKNOWN};
use std::collections::VecDeque;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::SystemTime;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

/// The most lines the request path may have queued and not yet written;
/// a request beyond it awaits a slot (without blocking its worker).
pub(super) const SLOTS: usize = 1024;

/// How long the writer lets lines gather after a group of several (see
/// [`Shared::take`]): a send waits up to this much longer for its line,
/// and while lines keep coming in company the writer wakes by its own
/// clock (at most about ten thousand times a second), not at each line.
/// A line that comes alone still wakes it at once.
const GATHER: std::time::Duration = std::time::Duration::from_micros(100);

/// Who waits for a line or a command, and how it is told.
pub(super) enum Done {
    /// A request's future: it awaits without blocking its runtime worker.
    Async(oneshot::Sender<io::Result<()>>),
    /// A caller off the request path (the admin, shutdown, a test),
    /// blocked until it is done.
    Blocking(std::sync::mpsc::SyncSender<io::Result<()>>),
    /// No one: a failure is only logged (a stop, a resume, an unknown
    /// outcome closed).
    Logged,
}

impl Done {
    fn finish(self, result: &io::Result<()>) {
        let copy = || match result {
            Ok(()) => Ok(()),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        };
        match self {
            Done::Async(tx) => {
                let _ = tx.send(copy());
            }
            Done::Blocking(tx) => {
                let _ = tx.send(copy());
            }
            Done::Logged => {}
        }
    }
}

/// What the writer is asked to do, in order.
// Lines are nearly every job, and commands rare: a line kept inline saves
// an allocation per line, at the size of a command's slot in the queue.
#[allow(clippy::large_enum_variant)]
pub(super) enum Job {
    /// A line to append (`text` is `line` as written, with its newline);
    /// `slot` is the request path's queue slot, given back once written.
    Line {
        text: String,
        line: Line,
        done: Done,
        slot: Option<OwnedSemaphorePermit>,
    },
    /// Makes everything before it durable (an fsync).
    Sync(Done),
    /// Compacts the journal now.
    Compact(Done),
}

/// The error a waiter gets when the writer is gone (it panicked).
pub(super) fn stopped() -> io::Error {
    io::Error::other("the journal's writer has stopped")
}

/// What the journal's lines say, and the file's size: kept by the
/// writer as its groups are written, read by anyone.
#[derive(Debug)]
pub(super) struct State {
    /// What a restart needs (what compaction writes).
    pub(super) live: Live,
    /// The file's size (as written here).
    pub(super) len: u64,
    /// Its size after the last compaction.
    pub(super) compacted: u64,
}

/// The queue and the state, shared by the journal and its writer.
#[derive(Debug)]
pub(super) struct Shared {
    /// The journal's path (for logs).
    pub(super) path: PathBuf,
    queue: Mutex<Queue>,
    ready: Condvar,
    /// The request path's queue slots.
    pub(super) slots: Arc<Semaphore>,
    state: Mutex<State>,
    /// The size past which the writer compacts.
    pub(super) compact_above: AtomicU64,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// The writer is waiting for work (to be woken).
    idle: bool,
    /// The journal is gone: the writer drains the queue and ends.
    closed: bool,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("jobs", &self.jobs.len())
            .field("closed", &self.closed)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub(super) fn new(path: PathBuf, state: State, compact_above: u64) -> Shared {
        Shared {
            path,
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            slots: Arc::new(Semaphore::new(SLOTS)),
            state: Mutex::new(state),
            compact_above: AtomicU64::new(compact_above),
        }
    }

    /// The state (held only to read or change memory, never across I/O).
    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Queues `job` behind everything queued before it.
    pub(super) fn push(&self, job: Job) {
        let mut q = lock(&self.queue);
        q.jobs.push_back(job);
        if q.idle {
            q.idle = false;
            drop(q);
            self.ready.notify_one();
        }
    }

    /// No more jobs: the writer drains the queue and ends.
    pub(super) fn close(&self) {
        lock(&self.queue).closed = true;
        self.ready.notify_one();
    }

    /// Everything queued, once there is something (`None`: closed and
    /// drained). `busy`: the last group had company, so more lines are
    /// likely on their way — the writer lets them gather for
    /// [`GATHER`] before it looks, rather than be woken by each one
    /// (a wake costs the request's worker a system call and both threads
    /// a switch; on a busy proxy that was most of the journal's cost).
    fn take(&self, busy: bool) -> Option<VecDeque<Job>> {
        if busy {
            std::thread::sleep(GATHER);
        }
        let mut q = lock(&self.queue);
        while q.jobs.is_empty() {
            if q.closed {
                return None;
            }
            q.idle = true;
            q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        q.idle = false;
        Some(std::mem::take(&mut q.jobs))
    }

    /// Compacts the journal to its live state: the text is made under the
    /// state's lock (memory only), written without it. Only the writer
    /// (or `open`, before there is one) calls it, so no line is written
    /// meanwhile: the new file says exactly what the old one did.
    pub(super) fn compact(&self, sink: &mut dyn Sink) -> io::Result<()> {
        let now = SystemTime::now();
        let (text, old) = {
            let mut st = self.state();
            st.live.expire(now);
            (st.live.text(now)?, st.len)
        };
        sink.replace(text.as_bytes())?;
        let mut st = self.state();
        st.len = text.len() as u64;
        st.compacted = st.len;
        tracing::debug!(
            from = old,
            to = st.len,
            path = %self.path.display(),
            "journal compacted"
        );
        Ok(())
    }
}

/// Starts the writer thread, which owns `sink` until the journal is
/// dropped (it writes what is queued, then ends).
pub(super) fn spawn(
    shared: Arc<Shared>,
    sink: Box<dyn Sink>,
) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("ratewise-journal".into())
        .spawn(move || run(&shared, sink))
}

/// The writer's loop: every job waiting, lines in one group, commands in
/// their place between groups.
fn run(shared: &Shared, mut sink: Box<dyn Sink>) {
    let mut group = Group::default();
    let mut busy = false;
    while let Some(jobs) = shared.take(busy) {
        busy = jobs.len() > 1;
        for job in jobs {
            match job {
                Job::Line {
                    text,
                    line,
                    done,
                    slot,
                } => group.add(text, line, done, slot),
                Job::Sync(done) => {
                    group.commit(shared, &mut *sink);
                    done.finish(&sink.sync());
                }
                Job::Compact(done) => {
                    group.commit(shared, &mut *sink);
                    done.finish(&shared.compact(&mut *sink));
                }
            }
        }
        group.commit(shared, &mut *sink);
    }
}

/// Lines to write together.
#[derive(Default)]
struct Group {
    bytes: Vec<u8>,
    lines: Vec<Line>,
    waiters: Vec<(Done, Option<OwnedSemaphorePermit>)>,
    /// Whether the last write may have left half a line.
    torn: bool,
}

impl Group {
    fn add(&mut self, text: String, line: Line, done: Done, slot: Option<OwnedSemaphorePermit>) {
        if self.lines.is_empty() && self.torn {
            // After a failed write, start on a fresh line.
            self.bytes.push(b'\n');
        }
        self.bytes.extend_from_slice(text.as_bytes());
        self.lines.push(line);
        self.waiters.push((done, slot));
    }

    /// Writes the group in one append; on success keeps what its lines
    /// say and compacts past the threshold (before its waiters are told,
    /// so the file a waiter then sees is the one `len` describes); then
    /// tells every waiter, and gives back the slots.
    fn commit(&mut self, shared: &Shared, sink: &mut dyn Sink) {
        if self.lines.is_empty() {
            return;
        }
        let result = sink.append(&self.bytes);
        match &result {
            Ok(()) => {
                self.torn = false;
                let compact = {
                    let mut st = shared.state();
                    st.len += self.bytes.len() as u64;
                    for line in self.lines.drain(..) {
                        if let Some(u) = st.live.apply(line) {
                            tracing::warn!(job_id = %u.job_id, attempt = u.attempt, kept = MAX_UNKNOWN,
                                "outcome_unknown dropped unacknowledged: too many unknown outcomes kept");
                        }
                    }
                    let above = shared
                        .compact_above
                        .load(Ordering::Relaxed)
                        .max(st.compacted.saturating_mul(2));
                    st.len > above
                };
                if compact {
                    if let Err(e) = shared.compact(sink) {
                        // Tried again once the file has grown as much again.
                        let mut st = shared.state();
                        st.compacted = st.len;
                        tracing::error!(error = %e, path = %shared.path.display(), "journal compaction failed; appending to it as it is");
                    }
                }
            }
            Err(e) => {
                self.torn = true;
                tracing::error!(error = %e, path = %shared.path.display(), lines = self.lines.len(),
                    "journal write failed");
            }
        }
        self.bytes.clear();
        self.lines.clear();
        for (done, slot) in self.waiters.drain(..) {
            done.finish(&result);
            drop(slot);
        }
    }
}
