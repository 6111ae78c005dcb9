//! [`RunError`]: why a run did not get as far as running the queue, or
//! could not write its results.

use crate::store::{State, StoreError};
use std::path::PathBuf;

/// Why [`crate::Run::execute`] failed. Each has its exit code
/// ([`RunError::exit_code`]); none shows an API key.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunError {
    /// The input (or the config file) cannot be read.
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The config file or a setting is not valid.
    Config(String),
    /// The store is in use by another run.
    Locked {
        /// The store.
        store: PathBuf,
        /// Who holds it (pid, host, since when).
        holder: String,
    },
    /// The store's lock file cannot be made.
    Lock {
        /// The store.
        store: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The store cannot be opened.
    OpenStore {
        /// The store.
        store: PathBuf,
        /// Why.
        source: StoreError,
    },
    /// The store could not be read or written.
    Store(StoreError),
    /// No line of the input is a valid request.
    NoValidLine {
        /// The input.
        path: PathBuf,
    },
    /// The input is not of the format the store was made from.
    OtherFormat {
        /// The store's format.
        store: &'static str,
        /// The input's now.
        input: &'static str,
    },
    /// `strict`: some lines are bad; nothing was sent.
    Strict {
        /// How many.
        bad_lines: u64,
        /// The input.
        path: PathBuf,
    },
    /// Lines of an input edited since a run whose job was already sent or
    /// ended: its result is of the old request. Nothing was changed or sent.
    ChangedAfterSend {
        /// (line number, custom_id, the job's state, its sends), the first
        /// few.
        lines: Vec<(u64, String, State, u64)>,
        /// How many lines in all.
        total: u64,
    },
    /// No API key: neither given, nor in the config, nor in the variable.
    NoKey {
        /// The environment variable read.
        variable: &'static str,
    },
    /// The API key cannot be sent in a header (the key is not shown).
    InvalidKey(String),
    /// The upstream is not an `http(s)://` URL with a host.
    InvalidUpstream(String),
    /// The HTTP client could not be made (TLS setup).
    Client(String),
    /// The config's `[[pools]]` could not be used (none named by
    /// `--pool`, several and none named, a key variable not set, a
    /// setting or `--via` that conflicts with a pool). Nothing was sent.
    Pool(crate::pool::PoolError),
    /// The batch path could not go on (its store, or a batch API call
    /// that failed where going on was not possible). Batches already
    /// submitted go on at the provider; a re-run resumes polling them.
    Batch(crate::batch::BatchError),
    /// `--redis`: not a Redis URL (the URL is not repeated: it may hold a
    /// password). Nothing was sent.
    Redis(ratewise_redis::Error),
    /// The results could not be written.
    Output {
        /// The results file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl RunError {
    /// The exit code: [`crate::EXIT_LOCKED`] for a locked store,
    /// [`crate::EXIT_INTERRUPTED`] for a store or results file that could
    /// not be written, else [`crate::EXIT_INPUT`].
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Locked { .. } => crate::EXIT_LOCKED,
            RunError::Store(_)
            | RunError::Output { .. }
            | RunError::Client(_)
            | RunError::Batch(_) => crate::EXIT_INTERRUPTED,
            _ => crate::EXIT_INPUT,
        }
    }
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Unreadable { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            RunError::Config(why) => f.write_str(why),
            RunError::Locked { store, holder } => write!(
                f,
                "the store {} is in use by another run: {holder}",
                store.display()
            ),
            RunError::Lock { store, source } => write!(f, "{}: {source}", store.display()),
            RunError::OpenStore { store, source } => write!(f, "{}: {source}", store.display()),
            RunError::Store(e) => write!(f, "{e}"),
            RunError::NoValidLine { path } => {
                write!(f, "{}: no valid request line", path.display())
            }
            RunError::OtherFormat { store, input } => write!(
                f,
                "the input is now of the {input} batch format; its store was made from the {store} one: \
                 start over with a new --db"
            ),
            RunError::Strict { bad_lines, path } => write!(
                f,
                "--strict: {bad_lines} bad line(s) in {}; nothing was sent",
                path.display()
            ),
            RunError::ChangedAfterSend { lines, total } => {
                f.write_str(
                    "the input changed since the last run where a job was already sent or ended; \
                     nothing was changed or sent:",
                )?;
                for (line, id, state, sends) in lines {
                    write!(
                        f,
                        "\n  line {line}: custom_id {id:?} is {} ({sends} send(s)) and its request changed",
                        state.as_str()
                    )?;
                }
                if *total > lines.len() as u64 {
                    write!(f, "\n  ... {total} such lines in all")?;
                }
                f.write_str(
                    "\nRestore those lines (or give the new request a new custom_id), or start over with a new --db.",
                )
            }
            RunError::NoKey { variable } => write!(
                f,
                "no API key: set {variable} (or api_key in --config); nothing was sent"
            ),
            RunError::InvalidKey(why) => write!(f, "the API key cannot be sent: {why}; nothing was sent"),
            RunError::InvalidUpstream(why) => write!(f, "{why}; nothing was sent"),
            RunError::Client(why) => write!(f, "the HTTP client: {why}"),
            RunError::Pool(e) => write!(f, "{e}"),
            RunError::Redis(e) => write!(f, "--redis: {e}; nothing was sent"),
            RunError::Batch(e) => write!(
                f,
                "{e}; submitted batches go on at the provider: run the same command again to resume"
            ),
            RunError::Output { path, source } => {
                write!(f, "cannot write {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Unreadable { source, .. }
            | RunError::Lock { source, .. }
            | RunError::Output { source, .. } => Some(source),
            RunError::OpenStore { source, .. } | RunError::Store(source) => Some(source),
            RunError::Batch(e) => Some(e),
            RunError::Pool(e) => Some(e),
            RunError::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl From<crate::batch::BatchError> for RunError {
    fn from(e: crate::batch::BatchError) -> Self {
        RunError::Batch(e)
    }
}

impl From<crate::pool::PoolError> for RunError {
    fn from(e: crate::pool::PoolError) -> Self {
        RunError::Pool(e)
    }
}

impl From<StoreError> for RunError {
    fn from(e: StoreError) -> Self {
        RunError::Store(e)
    }
}
