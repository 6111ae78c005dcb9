//! # ratewise-run
//!
//! The durable queue behind `ratewise run`: a file of requests in (the
//! providers' own batch formats), every result out, nothing paid twice.
//!
//! * [`input`] reads OpenAI Batch API or Anthropic Message Batches lines
//!   as a stream, telling bad lines apart.
//! * [`Store`] is the seam of what is kept; [`SqliteStore`] keeps it in
//!   one SQLite file (WAL, one writer, grouped commits).
//! * [`Queue`] feeds the store's jobs to ratewise's tower layer through a
//!   bounded window; the layer's job machine owns every decision (pace,
//!   retry, defer, stop, hold); [`StoreJournal`] writes each attempt down
//!   before it is sent.
//! * [`output`] writes a line per job in the provider's own result format.
//! * [`pool`]: `[[pools]]` in `--config`, several keys' limits spent by
//!   one file (each attempt to the member that can take it soonest; a
//!   member's spend cap stops that member, not the run).
//! * [`Run`] is the whole command as a library call: lock, import the
//!   input (or take what changed in it), recover, run, write the results.
//!   It prints nothing and exits nothing: it reports [`progress::Event`]s
//!   to an [`Observer`], and ends in a [`Finished`] or a typed
//!   [`RunError`], each with its exit code. The caller owns the runtime,
//!   the signals (a `watch` channel that turns true) and the printing.
//!
//! A job sent when the process died is `held_unknown` on the next run, and
//! is never sent again unless `--retry-unknown` says so.
//!
//! ```no_run
//! use ratewise_run::{progress::Event, Run};
//! use std::sync::Arc;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let runtime = tokio::runtime::Runtime::new()?;
//! let (_signal, shutdown) = tokio::sync::watch::channel(false);
//! let observer = Arc::new(|e: Event| {
//!     if let Event::BadLine { line, why } = e {
//!         eprintln!("line {line}: {why}");
//!     }
//! });
//! let run = Run::new("requests.jsonl")
//!     .upstream("http://127.0.0.1:8080") // the mock, say
//!     .key_from(|var| std::env::var(var).ok());
//! let code = match runtime.block_on(run.execute(shutdown, observer)) {
//!     Ok(finished) => finished.exit_code(),
//!     Err(e) => e.exit_code(),
//! };
//! std::process::exit(i32::from(code));
//! # }
//! ```
//!
//! Exit codes, the first that applies: [`EXIT_INPUT`] (2) usage or input
//! error (bad lines included), [`EXIT_LOCKED`] (3), [`EXIT_STOPPED`] (4),
//! [`EXIT_INTERRUPTED`] (5, a signal, the store could not be written, or
//! the upstream could not be reached),
//! [`EXIT_HELD`] (6), [`EXIT_FAILED`] (7), else 0.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod batch;
pub mod config;
pub mod duration;
mod error;
pub mod input;
mod journal;
pub mod lock;
mod memory;
pub mod output;
pub mod pool;
pub mod progress;
mod queue;
mod run;
mod sqlite;
pub mod store;

pub use config::{FileConfig, Options, RedisUrl};
pub use error::RunError;
pub use journal::StoreJournal;
pub use pool::PoolError;
pub use progress::{Event, Observer};
pub use queue::{check_api_key, normalize_upstream, Ending, Queue, Rates, Report, Settings};
pub use run::{Finished, Run};
pub use sqlite::{SqliteStore, Synchronous};
pub use store::{State, Store, StoreError};

use std::sync::Arc;

/// Every job done.
pub const EXIT_DONE: u8 = 0;
/// A usage or input error (bad lines, an unreadable input, a line changed
/// after its job was sent, a missing or unsendable key).
pub const EXIT_INPUT: u8 = 2;
/// The store is locked by another run.
pub const EXIT_LOCKED: u8 = 3;
/// The queue is stopped (spend cap, billing, auth, the run's budget).
pub const EXIT_STOPPED: u8 = 4;
/// A signal ended the run, the store could not be written, or the upstream
/// could not be reached (no job failed for it: a re-run sends them).
pub const EXIT_INTERRUPTED: u8 = 5;
/// Some jobs are held: sent, outcome unknown.
pub const EXIT_HELD: u8 = 6;
/// Some jobs failed or expired.
pub const EXIT_FAILED: u8 = 7;

/// The exit code of a run that got as far as running the queue.
pub fn exit_code(bad_lines: u64, report: &Report) -> u8 {
    let c = &report.counts;
    if bad_lines > 0 {
        EXIT_INPUT
    } else if matches!(report.ending, Ending::Stopped(_)) {
        EXIT_STOPPED
    } else if matches!(
        report.ending,
        Ending::Interrupted | Ending::StoreFailed(_) | Ending::Unreachable { .. }
    ) {
        EXIT_INTERRUPTED
    } else if c.held > 0 {
        EXIT_HELD
    } else if c.failed + c.expired > 0 {
        EXIT_FAILED
    } else {
        EXIT_DONE
    }
}

/// The HTTP(S) client under the layer: HTTP/1.1, Mozilla's roots, one
/// attempt per call (hyper-util's client does not retry).
pub type Client = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    http_body_util::Full<bytes::Bytes>,
>;

/// Makes the [`Client`].
pub fn client() -> Result<Client, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(provider)
        .map_err(|e| format!("TLS setup: {e}"))?
        .https_or_http()
        .enable_http1()
        .build();
    Ok(
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .retry_canceled_requests(false)
            .build(connector),
    )
}
