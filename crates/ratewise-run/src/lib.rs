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
//! * [`output`] writes each ended job in the provider's own result format.
//! * [`run`] is the whole command: lock, import or check the input,
//!   recover, run, write the results, exit code.
//!
//! A job sent when the process died is `held_unknown` on the next run, and
//! is never sent again unless `--retry-unknown` says so.
//!
//! The command in a program of your own:
//!
//! ```no_run
//! use ratewise_run::{Options, ProgressMode};
//!
//! let mut options = Options::new("requests.jsonl");
//! options.upstream = Some("http://127.0.0.1:8080".into()); // the mock, say
//! options.progress = ProgressMode::Off;
//! let code = ratewise_run::run(&options, &|var| std::env::var(var).ok());
//! std::process::exit(i32::from(code));
//! ```
//!
//! Exit codes, the first that applies: [`EXIT_INPUT`] (2) usage or input
//! error (bad lines included), [`EXIT_LOCKED`] (3), [`EXIT_STOPPED`] (4),
//! [`EXIT_INTERRUPTED`] (5, a signal or the store could not be written),
//! [`EXIT_HELD`] (6), [`EXIT_FAILED`] (7), else 0.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod batch;
pub mod config;
pub mod duration;
pub mod input;
mod journal;
pub mod lock;
pub mod output;
pub mod progress;
mod queue;
mod sqlite;
pub mod store;

pub use config::{FileConfig, Options, ProgressMode};
pub use journal::StoreJournal;
pub use queue::{Ending, Queue, Rates, Report, Settings};
pub use sqlite::{SqliteStore, Synchronous};
pub use store::{State, Store, StoreError};

use input::{Line, Lines, Shape};
use progress::Progress;
use std::io::{BufReader, Read};
use std::path::Path;
use std::sync::Arc;
use store::NewJob;

/// Every job done.
pub const EXIT_DONE: u8 = 0;
/// A usage or input error (bad lines, an unreadable or changed input, a
/// missing key).
pub const EXIT_INPUT: u8 = 2;
/// The store is locked by another run.
pub const EXIT_LOCKED: u8 = 3;
/// The queue is stopped (spend cap, billing, auth, the run's budget).
pub const EXIT_STOPPED: u8 = 4;
/// A signal ended the run, or the store could not be written.
pub const EXIT_INTERRUPTED: u8 = 5;
/// Some jobs are held: sent, outcome unknown.
pub const EXIT_HELD: u8 = 6;
/// Some jobs failed or expired.
pub const EXIT_FAILED: u8 = 7;

/// Output tokens reserved for a request that names no cap (the core's
/// default estimate, [`ratewise_core::admit::MaxTokens`]).
const DEFAULT_MAX_TOKENS: u64 = 4096;

/// Jobs imported per store write.
const IMPORT_GROUP: usize = 256;

/// Bad lines printed one by one; past these, a count.
const BAD_LINES_SHOWN: usize = 50;

fn say(message: impl std::fmt::Display) {
    eprintln!("ratewise run: {message}");
}

/// What importing or checking the input found.
struct Imported {
    shape: Shape,
    bad_lines: u64,
}

/// SHA-256 and length of the file at `path`, read as a stream (the same
/// fingerprint [`Lines`] takes of every byte it reads).
fn fingerprint_file(path: &Path) -> std::io::Result<(String, u64)> {
    use sha2::Digest;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    let hex: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok((hex, total))
}

/// Reads the input into the store (first run), or checks it is the one the
/// store was made from (re-run).
fn import_or_check(store: &dyn Store, input: &Path, strict: bool) -> Result<Imported, String> {
    let cant_read = |e: std::io::Error| format!("cannot read {}: {e}", input.display());
    if store.meta("imported").map_err(|e| e.to_string())?.is_some() {
        let (sha, len) = fingerprint_file(input).map_err(cant_read)?;
        let kept = store.meta("input_sha256").map_err(|e| e.to_string())?;
        if kept.as_deref() != Some(sha.as_str()) {
            return Err(format!(
                "{} changed since its store was made (a line edited, removed or added; {len} bytes now, {} then): \
                 refused, so that no job is sent twice or lost. Restore the file, or start over with a new --db.",
                input.display(),
                store.meta("input_bytes").ok().flatten().unwrap_or_default()
            ));
        }
        let shape = store
            .meta("shape")
            .map_err(|e| e.to_string())?
            .and_then(|s| Shape::parse(&s))
            .ok_or("the store names no input shape")?;
        let bad = store.list_bad_lines().map_err(|e| e.to_string())?;
        report_bad(&bad);
        return Ok(Imported {
            shape,
            bad_lines: bad.len() as u64,
        });
    }
    store.reset().map_err(|e| e.to_string())?;
    let file = std::fs::File::open(input).map_err(cant_read)?;
    let mut lines = Lines::new(BufReader::with_capacity(1 << 20, file));
    let first_seen_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut group: Vec<NewJob> = Vec::new();
    let mut group_bytes = 0usize;
    let mut bad: Vec<(u64, String)> = Vec::new();
    let mut bad_total = 0u64;
    let flush_bad = |bad: &mut Vec<(u64, String)>, total: &mut u64| -> Result<(), String> {
        for (line, why) in bad.iter() {
            if (*total as usize) < BAD_LINES_SHOWN {
                say(format!("{}:{line}: {why}", input.display()));
            }
            *total += 1;
        }
        store
            .bad_lines(std::mem::take(bad))
            .map_err(|e| e.to_string())
    };
    let flush_jobs = |group: &mut Vec<NewJob>,
                      bad: &mut Vec<(u64, String)>|
     -> Result<(), String> {
        let jobs = std::mem::take(group);
        let ids: Vec<(u64, String)> = jobs.iter().map(|j| (j.line, j.custom_id.clone())).collect();
        let added = store.import(jobs).map_err(|e| e.to_string())?;
        for ((line, id), new) in ids.into_iter().zip(added) {
            if !new {
                bad.push((line, input::BadLine::Duplicate(id).to_string()));
            }
        }
        Ok(())
    };
    while let Some(line) = lines.next_line().map_err(cant_read)? {
        match line {
            Line::Request(r) => {
                group_bytes += r.body.len();
                group.push(NewJob {
                    line: r.line,
                    input_estimate: r.input_estimate(),
                    max_tokens: r.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
                    custom_id: r.custom_id,
                    path: r.path,
                    model: r.model,
                    body: r.body,
                    first_seen_ms,
                });
            }
            Line::Bad { line, why } => bad.push((line, why.to_string())),
        }
        if group.len() >= IMPORT_GROUP || group_bytes >= 64 << 20 {
            flush_jobs(&mut group, &mut bad)?;
            group_bytes = 0;
        }
        if bad.len() >= IMPORT_GROUP {
            flush_bad(&mut bad, &mut bad_total)?;
        }
    }
    flush_jobs(&mut group, &mut bad)?;
    flush_bad(&mut bad, &mut bad_total)?;
    if bad_total > BAD_LINES_SHOWN as u64 {
        say(format!("... {} bad lines in all", bad_total));
    }
    let Some(shape) = lines.shape() else {
        return Err(format!("{}: no valid request line", input.display()));
    };
    if strict && bad_total > 0 {
        return Err(format!(
            "--strict: {bad_total} bad line(s) in {}; nothing was sent",
            input.display()
        ));
    }
    let (sha, len) = lines.fingerprint();
    for (k, v) in [
        ("shape", shape.as_str().to_owned()),
        ("input_sha256", sha),
        ("input_bytes", len.to_string()),
        ("imported", "1".to_owned()),
    ] {
        store.set_meta(k, &v).map_err(|e| e.to_string())?;
    }
    Ok(Imported {
        shape,
        bad_lines: bad_total,
    })
}

fn report_bad(bad: &[(u64, String)]) {
    for (line, why) in bad.iter().take(BAD_LINES_SHOWN) {
        say(format!("line {line}: {why} (not run)"));
    }
    if bad.len() > BAD_LINES_SHOWN {
        say(format!("... {} bad lines in all", bad.len()));
    }
}

/// The process's peak resident memory, in KiB (Linux; `None` elsewhere).
fn peak_rss_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The exit code of a run that got as far as running the queue.
pub fn exit_code(bad_lines: u64, report: &Report) -> u8 {
    let c = &report.counts;
    if bad_lines > 0 {
        EXIT_INPUT
    } else if matches!(report.ending, Ending::Stopped(_)) {
        EXIT_STOPPED
    } else if matches!(report.ending, Ending::Interrupted | Ending::StoreFailed(_)) {
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

/// Runs the command: `ratewise run` with `options`, reading keys from
/// `env`. Blocks until the run ends; returns the exit code.
pub fn run(options: &Options, env: &dyn Fn(&str) -> Option<String>) -> u8 {
    match run_inner(options, env) {
        Ok(code) => code,
        Err((code, message)) => {
            say(message);
            code
        }
    }
}

fn run_inner(options: &Options, env: &dyn Fn(&str) -> Option<String>) -> Result<u8, (u8, String)> {
    let input_err = |m: String| (EXIT_INPUT, m);
    let file_config = match &options.config {
        Some(path) => FileConfig::load(path).map_err(input_err)?,
        None => FileConfig::default(),
    };
    // An unreadable input is told before a store is made beside it.
    std::fs::File::open(&options.input)
        .map_err(|e| input_err(format!("cannot read {}: {e}", options.input.display())))?;
    let db = options.db_path();
    let _lock = lock::lock(&db).map_err(|e| match e {
        lock::LockError::Held(holder) => (
            EXIT_LOCKED,
            format!(
                "the store {} is in use by another run: {holder}",
                db.display()
            ),
        ),
        lock::LockError::Io(e) => (EXIT_INPUT, format!("{}: {e}", db.display())),
    })?;
    let sync = file_config.synchronous().map_err(input_err)?;
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&db, sync).map_err(|e| input_err(format!("{}: {e}", db.display())))?,
    );
    let imported =
        import_or_check(store.as_ref(), &options.input, options.strict).map_err(input_err)?;
    let key_var = imported.shape.key_variable();
    let api_key = file_config
        .api_key
        .clone()
        .or_else(|| env(key_var))
        .filter(|k| !k.trim().is_empty())
        .ok_or_else(|| {
            input_err(format!(
                "no API key: set {key_var} (or api_key in --config); nothing was sent"
            ))
        })?;
    let settings = options
        .settings(&file_config, imported.shape, api_key)
        .map_err(input_err)?;
    let store_err = |e: StoreError| (EXIT_INTERRUPTED, e.to_string());
    let cut = store.hold_cut().map_err(store_err)?;
    if cut > 0 {
        say(format!(
            "{cut} job(s) were being sent when the last run ended: held as unknown (never sent again unless --retry-unknown)"
        ));
    }
    if options.resume_stopped {
        let n = store.resume_stopped().map_err(store_err)?;
        if n > 0 {
            say(format!(
                "--resume-stopped: {n} stopped job(s) pending again"
            ));
        }
    }
    if options.retry_unknown {
        let n = store.release_unknown().map_err(store_err)?;
        if n > 0 {
            say(format!(
                "--retry-unknown: {n} held job(s) will be sent once more; each may be paid twice (its worst case stays charged, and its record says so)"
            ));
        }
    }
    let out = options.out_path();
    let mut partial = output::Partial::open(&output::partial_path(&out))
        .map_err(|e| input_err(format!("{}: {e}", out.display())))?;
    let mut progress = match options.progress {
        ProgressMode::Auto => Progress::auto(),
        ProgressMode::Json => Progress::Json,
        ProgressMode::Off => Progress::Off,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Store calls run on blocking threads; the writer groups whatever
        // they bring, so a few dozen are plenty, and each costs a stack.
        .max_blocking_threads(32)
        .enable_all()
        .build()
        .map_err(|e| (EXIT_INTERRUPTED, format!("cannot start the runtime: {e}")))?;
    let layer = options
        .layer(&file_config, &settings, Arc::clone(&store))
        .map_err(input_err)?;
    let report = runtime.block_on(async {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(signals(tx));
        let client = client().map_err(input_err)?;
        let service = ratewise_tower::RetryService::new(client, layer);
        let queue = Queue::new(Arc::clone(&store), service, settings.clone());
        queue
            .run(rx, &mut partial, &mut progress)
            .await
            .map_err(store_err)
    })?;
    runtime.shutdown_background();
    let written = output::write_final(&out, |emit| {
        store
            .each_ended(&mut |e| emit(&output::line(imported.shape, &e)))
            .map_err(|e| std::io::Error::other(e.0))
    })
    .map_err(|e| {
        (
            EXIT_INTERRUPTED,
            format!("cannot write {}: {e}", out.display()),
        )
    })?;
    drop(partial);
    let _ = std::fs::remove_file(output::partial_path(&out));
    let code = exit_code(imported.bad_lines, &report);
    match &report.ending {
        Ending::Stopped(stop) => say(format!(
            "stopped ({}: {}); nothing more is sent until a re-run with --resume-stopped",
            stop.cause, stop.message
        )),
        Ending::Interrupted => say(format!(
            "interrupted; {} job(s) cut and held. Run the same command again to resume.",
            report.cut
        )),
        Ending::StoreFailed(why) => say(format!(
            "the store could not be written ({why}); nothing more was sent. Free the disk and run the same command again."
        )),
        Ending::Finished => {}
    }
    let c = &report.counts;
    say(format!(
        "{} done, {} failed, {} expired, {} held, {} stopped of {}; {} sends, {} answered 429; {written} results in {}",
        c.done, c.failed, c.expired, c.held, c.stopped, c.total, report.sends, report.answered_429, out.display()
    ));
    let mut summary = serde_json::json!({
        "event": "summary",
        "done": c.done, "total": c.total, "failed": c.failed, "expired": c.expired,
        "held": c.held, "stopped": c.stopped, "pending": c.pending,
        "sends": report.sends, "answered_429": report.answered_429,
        "budget_spent": c.spent, "bad_lines": imported.bad_lines, "cut": report.cut,
        "elapsed_s": options.started.elapsed().as_secs_f64(),
        "peak_rss_kb": peak_rss_kb(),
        "out": out.display().to_string(),
        "exit": code,
    });
    if let Ending::Stopped(stop) = &report.ending {
        summary["stop"] = serde_json::to_value(stop).unwrap_or_default();
    }
    progress.finish(summary);
    Ok(code)
}

/// SIGINT / SIGTERM: the first stops admitting (the queue drains within
/// its grace); a second exits at once — the store stays consistent (a job
/// on the wire is `sending`, held on the next run).
async fn signals(tx: tokio::sync::watch::Sender<bool>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return;
        };
        let mut seen = 0;
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            seen += 1;
            if seen == 1 {
                say("signal: no new sends; sends in flight get the grace (a second signal exits at once)");
                let _ = tx.send(true);
            } else {
                say("second signal: exiting now; run the same command again to resume");
                std::process::exit(i32::from(EXIT_INTERRUPTED));
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tx;
        std::future::pending::<()>().await;
    }
}
