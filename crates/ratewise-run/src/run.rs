//! [`Run`]: the whole of `ratewise run` as a library call — lock the
//! store, import the input (or take what changed in it), recover what the
//! last run left, run the queue, write every result.

use crate::batch::{self, BatchEnding, BatchReport, BatchSettings, Via};
use crate::config::{FileConfig, Options};
use crate::error::RunError;
use crate::input::{self, Line, Lines, Shape};
use crate::output;
use crate::pool::PoolError;
use crate::progress::{Event, Observer};
use crate::queue::{Ending, Queue, Report, Settings};
use crate::sqlite::SqliteStore;
use crate::store::{Compared, NewJob, State, Store};
use std::collections::HashSet;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Jobs imported per store write.
const IMPORT_GROUP: usize = 256;

/// Lines refused for a change after their send, named one by one; past
/// these, a count.
const REFUSED_SHOWN: usize = 20;

/// Reads the key's variable (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`).
type Env = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// A run of a file of requests, built then [executed](Run::execute).
///
/// ```no_run
/// # async fn f() -> Result<(), ratewise_run::RunError> {
/// use ratewise_run::{progress::Ignore, Run};
/// use std::sync::Arc;
///
/// let (_stop, shutdown) = tokio::sync::watch::channel(false);
/// let finished = Run::new("requests.jsonl")
///     .upstream("http://127.0.0.1:8080") // the mock, say
///     .api_key("sk-...")
///     .execute(shutdown, Arc::new(Ignore))
///     .await?;
/// println!("{} of {} done", finished.report.counts.done, finished.report.counts.total);
/// std::process::exit(i32::from(finished.exit_code()));
/// # }
/// ```
pub struct Run {
    options: Options,
    api_key: Option<String>,
    env: Option<Env>,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Run")
            .field("options", &self.options)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl Run {
    /// A run of `input`, every setting at its default.
    pub fn new(input: impl Into<PathBuf>) -> Run {
        Run::from_options(Options::new(input))
    }

    /// A run with these options.
    pub fn from_options(options: Options) -> Run {
        Run {
            options,
            api_key: None,
            env: None,
        }
    }

    /// The options as built so far.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Where the results go (default `<input>.results.jsonl`).
    pub fn out(mut self, path: impl Into<PathBuf>) -> Run {
        self.options.out = Some(path.into());
        self
    }

    /// The store (default `<input>.ratewise.db`).
    pub fn db(mut self, path: impl Into<PathBuf>) -> Run {
        self.options.db = Some(path.into());
        self
    }

    /// The provider's base URL (with or without a trailing `/v1`).
    pub fn upstream(mut self, url: impl Into<String>) -> Run {
        self.options.upstream = Some(url.into());
        self
    }

    /// The TOML config file.
    pub fn config(mut self, path: impl Into<PathBuf>) -> Run {
        self.options.config = Some(path.into());
        self
    }

    /// Shares the keys' limits — buckets, pauses, stops, what was learned —
    /// through the Redis at `url` with every `ratewise proxy --redis` and
    /// run on it (the same store, the same key names: a key's
    /// fingerprint). A URL that is not a Redis URL is
    /// [`RunError::Redis`], before anything is sent.
    pub fn redis(mut self, url: impl Into<String>) -> Run {
        self.options.redis = Some(crate::config::RedisUrl(url.into()));
        self
    }

    /// The level of the run's jobs in their key's queue (default `bulk`):
    /// beside `ratewise proxy` on the same key (with `--redis` across
    /// processes), a proxy's `interactive` and `default` calls go first,
    /// and the run keeps its minimum share.
    pub fn priority(mut self, level: impl Into<String>) -> Run {
        self.options.priority = Some(level.into());
        self
    }

    /// Which `[[pools]]` table of the config the run spends (needed when
    /// the config has several; see [`crate::pool`]). Each member's key is
    /// read through [`Run::key_from`] from its `key_env`.
    pub fn pool(mut self, name: impl Into<String>) -> Run {
        self.options.pool = Some(name.into());
        self
    }

    /// The API key (over the config's and the environment's). Refused
    /// beside a pool ([`crate::PoolError::Conflict`]).
    pub fn api_key(mut self, key: impl Into<String>) -> Run {
        self.api_key = Some(key.into());
        self
    }

    /// Where the key is read when neither [`Run::api_key`] nor the config
    /// gives one: `env("OPENAI_API_KEY")` or `env("ANTHROPIC_API_KEY")`;
    /// with a pool, each member's `key_env`.
    pub fn key_from(mut self, env: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Run {
        self.env = Some(Box::new(env));
        self
    }

    /// Input + output tokens the store may spend, over all its runs.
    pub fn budget_tokens(mut self, tokens: u64) -> Run {
        self.options.budget_tokens = Some(tokens);
        self
    }

    /// Each job's deadline, from when it was first seen.
    pub fn deadline(mut self, deadline: Duration) -> Run {
        self.options.deadline = Some(deadline);
        self
    }

    /// On shutdown, how long sends on the wire get.
    pub fn grace(mut self, grace: Duration) -> Run {
        self.options.grace = Some(grace);
        self
    }

    /// Clear a kept stop and send again.
    pub fn resume_stopped(mut self, yes: bool) -> Run {
        self.options.resume_stopped = yes;
        self
    }

    /// Send each job held as unknown once more (it may be paid twice).
    pub fn retry_unknown(mut self, yes: bool) -> Run {
        self.options.retry_unknown = yes;
        self
    }

    /// Send each expired job again, its deadline counted afresh.
    pub fn retry_expired(mut self, yes: bool) -> Run {
        self.options.retry_expired = yes;
        self
    }

    /// Which path the jobs take: [`Via::Direct`] (the default), the
    /// provider's batch API ([`Via::Batch`], half the price, results
    /// within its 24 h window), or per job by its deadline ([`Via::Auto`]).
    pub fn via(mut self, via: Via) -> Run {
        self.options.via = via;
        self
    }

    /// How often a submitted batch is polled (default 30 s).
    pub fn batch_poll(mut self, every: Duration) -> Run {
        self.options.batch_poll = Some(every);
        self
    }

    /// Items a batch ended `errored` or `expired` are sent again (never
    /// without it).
    pub fn retry_failed(mut self, yes: bool) -> Run {
        self.options.retry_failed = yes;
        self
    }

    /// Refuse the whole input when a line is bad.
    pub fn strict(mut self, yes: bool) -> Run {
        self.options.strict = yes;
        self
    }

    /// Runs: blocks nothing of the caller's runtime (the store's work is
    /// on blocking threads). Sends stop at once when `shutdown` turns true
    /// (what is on the wire gets the grace). Every event goes to
    /// `observer`; nothing is printed.
    ///
    /// In steps: set up (`prepare`, on a blocking thread) → send, by the
    /// batch API or the direct queue (`Sending`) → the pool's members as
    /// the run ended → write the results (`write_out`).
    pub async fn execute(
        self,
        shutdown: tokio::sync::watch::Receiver<bool>,
        observer: Arc<dyn Observer>,
    ) -> Result<Finished, RunError> {
        let started = Instant::now();
        let obs = Arc::clone(&observer);
        let prepared = tokio::task::spawn_blocking(move || prepare(self, obs.as_ref()))
            .await
            .map_err(|e| {
                RunError::Store(crate::StoreError::with_source(
                    "the run's setup was lost",
                    e,
                ))
            })??;
        let Prepared {
            lock,
            store,
            imported,
            settings,
            layer,
            out,
            mut partial,
            via,
            batch,
            db,
            redis,
        } = prepared;
        // A clone shares the layer's state: the pool's members as the run
        // ended are read from it.
        let pool_name = settings.pool.clone();
        let status_layer = layer.clone();
        let client = crate::client().map_err(RunError::Client)?;
        // Batches a run before this one left at the provider are polled
        // whatever the path now (a signal leaves them running).
        let open = on_store(&store, |s| s.batches())
            .await?
            .iter()
            .any(crate::store::BatchRow::is_open);
        let sending = Sending {
            store: Arc::clone(&store),
            client,
            batch,
            shutdown,
            observer,
        };
        let (report, batch_report) = if via == Via::Batch {
            sending.by_batch().await?
        } else {
            sending
                .direct(via, settings, layer, open, &mut partial)
                .await?
        };
        let pool = match pool_name {
            Some(name) => status_layer
                .pool_status()
                .await
                .map(|s| crate::pool::PoolReport {
                    name,
                    members: s.members,
                }),
            None => None,
        };
        if let Some(r) = &redis {
            // The last settles reach Redis before the run ends.
            r.flush().await;
        }
        let shape = imported.shape;
        let (running_batches, batch_intents) = still_at_the_provider(&store).await?;
        let (written, unfinished) =
            write_out(store, status_layer, shape, out.clone(), partial, lock).await?;
        Ok(Finished {
            report,
            batches: batch_report,
            bad_lines: imported.bad_lines,
            written,
            unfinished,
            out,
            shape,
            elapsed: started.elapsed(),
            pool,
            running_batches,
            batch_intents,
            db,
        })
    }
}

/// The batches still running at the provider as the run ends (a signal
/// leaves them there; a re-run on the same store polls them): their ids,
/// and the create calls whose answer never came (a re-run looks for what
/// they made).
async fn still_at_the_provider(store: &Arc<dyn Store>) -> Result<(Vec<String>, u64), RunError> {
    let rows = on_store(store, |s| s.batches()).await?;
    let open = rows.iter().filter(|b| b.is_open());
    let ids = open.clone().filter_map(|b| b.batch_id.clone()).collect();
    let intents = open.filter(|b| b.batch_id.is_none()).count() as u64;
    Ok((ids, intents))
}

/// The sending step of a run (see [`Run::execute`]): what its two paths,
/// the direct queue and the provider's batch API, share.
struct Sending {
    store: Arc<dyn Store>,
    client: crate::Client,
    batch: BatchSettings,
    shutdown: tokio::sync::watch::Receiver<bool>,
    observer: Arc<dyn Observer>,
}

impl Sending {
    /// Each batch's status at every poll, told to the observer.
    fn batch_status(&self) -> impl Fn(batch::BatchStatus) + Clone + Send + 'static {
        let observer = Arc::clone(&self.observer);
        move |status| observer.event(Event::Batch(status))
    }

    /// `--via batch`: every pending job through the batch API, polled to
    /// its end.
    async fn by_batch(self) -> Result<(Report, Option<BatchReport>), RunError> {
        let status = self.batch_status();
        let b = batch::run_batches(
            self.store,
            self.client,
            self.batch,
            |_| true,
            self.shutdown,
            status,
        )
        .await?;
        Ok((report_of_batches(&b), Some(b)))
    }

    /// The direct queue. Under `--via auto` the batches are created first
    /// ([`Sending::create_auto`]), so that no job meant for one is taken
    /// by the queue; then they are polled beside it, as are batches an
    /// earlier run left `open` and, with `retry_failed`, those whose
    /// failed items are sent again. A batch path's stop or interruption
    /// is the run's unless the queue's own ending says more.
    async fn direct(
        self,
        via: Via,
        settings: Settings,
        layer: ratewise_tower::RetryLayer,
        open: bool,
        partial: &mut output::Partial,
    ) -> Result<(Report, Option<BatchReport>), RunError> {
        let created = if via == Via::Auto {
            Some(self.create_auto(settings.deadline).await?)
        } else {
            None
        };
        let service = ratewise_tower::RetryService::new(self.client.clone(), layer);
        let queue = Queue::new(Arc::clone(&self.store), service, settings);
        let poll = created.is_some() || open || self.batch.retry_failed;
        let polled = async {
            if poll {
                batch::run_batches(
                    Arc::clone(&self.store),
                    self.client.clone(),
                    self.batch.clone(),
                    |_| false,
                    self.shutdown.clone(),
                    self.batch_status(),
                )
                .await
                .map(Some)
            } else {
                Ok(None)
            }
        };
        let (report, polled) = tokio::join!(
            queue.run(self.shutdown.clone(), partial, self.observer.as_ref()),
            polled
        );
        let mut report = report?;
        let polled = polled?;
        if let Some(b) = &polled {
            merge_batch_ending(&mut report, b);
            report.counts = on_store(&self.store, |s| s.counts()).await?;
        }
        Ok((report, polled.or(created)))
    }

    /// `--via auto`'s batches: the jobs whose deadline leaves room for the
    /// batch window go into batches, created and not polled here (the
    /// polling runs beside the queue).
    async fn create_auto(&self, deadline: Duration) -> Result<BatchReport, RunError> {
        let select = move |p: &crate::store::Pending| {
            batch::route(
                Via::Auto,
                p.first_seen_ms,
                deadline,
                now_ms(),
                batch::via::BATCH_WINDOW,
                batch::via::DEFAULT_MARGIN,
            ) == batch::Route::Batch
        };
        let create = BatchSettings {
            poll_to_end: false,
            ..self.batch.clone()
        };
        Ok(batch::run_batches(
            Arc::clone(&self.store),
            self.client.clone(),
            create,
            select,
            self.shutdown.clone(),
            self.batch_status(),
        )
        .await?)
    }
}

/// A store call on a blocking thread (the store's calls block).
async fn on_store<R: Send + 'static>(
    store: &Arc<dyn Store>,
    f: impl FnOnce(&dyn Store) -> Result<R, crate::StoreError> + Send + 'static,
) -> Result<R, RunError> {
    let store = Arc::clone(store);
    Ok(tokio::task::spawn_blocking(move || f(store.as_ref()))
        .await
        .map_err(|e| {
            RunError::Store(crate::StoreError::with_source("a store call was lost", e))
        })??)
}

/// The run's last step, on a blocking thread: what the keys learned is
/// kept for the next run on this store (a failure to keep it costs only a
/// cold start), every result is written to `out`, and the partial file
/// and then the store's lock are let go. Returns the lines written and
/// the jobs not finished.
async fn write_out(
    store: Arc<dyn Store>,
    layer: ratewise_tower::RetryLayer,
    shape: Shape,
    out: PathBuf,
    partial: output::Partial,
    lock: crate::lock::DbLock,
) -> Result<(u64, u64), RunError> {
    let out2 = out.clone();
    tokio::task::spawn_blocking(move || {
        if let Err(e) = crate::memory::remember(store.as_ref(), &layer) {
            tracing::warn!(error = %e, "what the run's keys learned was not kept");
        }
        let (written, unfinished) = output::write_results(store.as_ref(), shape, &out2)?;
        drop(partial);
        let _ = std::fs::remove_file(output::partial_path(&out2));
        drop(lock);
        Ok::<_, std::io::Error>((written, unfinished))
    })
    .await
    .map_err(|e| {
        RunError::Store(crate::StoreError::with_source(
            "writing the results was lost",
            e,
        ))
    })?
    .map_err(|source| RunError::Output { path: out, source })
}

/// What a run came to.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The queue's report: how it ended, the counts, the sends (direct
    /// sends only: a batch's items are not sends).
    pub report: Report,
    /// What the batch path did, when it ran.
    pub batches: Option<BatchReport>,
    /// Lines of the input not run.
    pub bad_lines: u64,
    /// Lines in the results file: one per job.
    pub written: u64,
    /// Of them, jobs not finished (`ratewise.outcome` `pending`): a re-run
    /// goes on with them.
    pub unfinished: u64,
    /// The results file.
    pub out: PathBuf,
    /// The input's format.
    pub shape: Shape,
    /// How long the run took.
    pub elapsed: Duration,
    /// A pooled run's members as it ended (sends, share, stops).
    pub pool: Option<crate::pool::PoolReport>,
    /// The provider's ids of the batches still running at the provider as
    /// the run ended (a signal leaves them there, and the provider goes on
    /// with them): a re-run on the same store ([`Finished::db`]) polls
    /// them and takes their results; it creates none of them again.
    pub running_batches: Vec<String>,
    /// Batch create calls whose answer never came (a batch may exist at
    /// the provider): a re-run on the same store looks for what they made.
    pub batch_intents: u64,
    /// The store.
    pub db: PathBuf,
}

impl Finished {
    /// Whether every job ended (none is left pending).
    pub fn complete(&self) -> bool {
        self.unfinished == 0
    }

    /// The exit code, the first that applies: [`crate::EXIT_INPUT`] (bad
    /// lines), [`crate::EXIT_STOPPED`], [`crate::EXIT_INTERRUPTED`],
    /// [`crate::EXIT_HELD`], [`crate::EXIT_FAILED`], else 0.
    pub fn exit_code(&self) -> u8 {
        crate::exit_code(self.bad_lines, &self.report)
    }

    /// The summary as one JSON object (`"event": "summary"`).
    pub fn summary(&self) -> serde_json::Value {
        let c = &self.report.counts;
        let mut summary = serde_json::json!({
            "event": "summary",
            "done": c.done, "total": c.total, "failed": c.failed, "expired": c.expired,
            "held": c.held, "stopped": c.stopped, "pending": c.pending,
            "sends": self.report.sends, "answered_429": self.report.answered_429,
            "budget_spent": c.spent, "bad_lines": self.bad_lines, "cut": self.report.cut,
            "complete": self.complete(), "unfinished": self.unfinished,
            "elapsed_s": self.elapsed.as_secs_f64(),
            "out": self.out.display().to_string(),
            "exit": self.exit_code(),
        });
        if let Some(b) = &self.batches {
            summary["batches"] = serde_json::json!({
                "created": b.created, "recovered": b.recovered, "ended": b.ended,
                "held": b.held, "not_created": b.not_created,
                "possibly_billed_tokens": b.possibly_billed,
                "create_failures": b.create_failures,
            });
        }
        if !self.running_batches.is_empty() || self.batch_intents > 0 {
            summary["batches_running"] = serde_json::json!({
                "ids": self.running_batches, "unconfirmed": self.batch_intents,
                "db": self.db.display().to_string(),
            });
        }
        if let Some(pool) = &self.pool {
            summary["pool"] = serde_json::to_value(pool).unwrap_or_default();
        }
        if let Ending::Stopped(stop) = &self.report.ending {
            summary["stop"] = serde_json::to_value(stop).unwrap_or_default();
            summary["stop"]["cause_in_words"] = crate::progress::cause_in_words(stop.cause).into();
        }
        if let Ending::Unreachable { upstream, cause } = &self.report.ending {
            summary["unreachable"] = serde_json::json!({"upstream": upstream, "cause": cause});
        }
        summary
    }
}

/// The batch path's ending as the run's report (no direct sends).
fn report_of_batches(b: &BatchReport) -> Report {
    Report {
        ending: match &b.ending {
            BatchEnding::Finished => Ending::Finished,
            BatchEnding::Stopped(stop) => Ending::Stopped(stop.clone()),
            // Batches left at the provider: a re-run resumes polling.
            BatchEnding::Interrupted | BatchEnding::Submitted => Ending::Interrupted,
        },
        counts: b.counts.clone(),
        sends: 0,
        answered_429: 0,
        cut: 0,
    }
}

/// A stop or an interruption of the batch path beside the direct queue is
/// the run's, unless the queue's own ending says more.
fn merge_batch_ending(report: &mut Report, b: &BatchReport) {
    match (&report.ending, &b.ending) {
        (Ending::Stopped(_) | Ending::StoreFailed(_) | Ending::Unreachable { .. }, _) => {}
        (_, BatchEnding::Stopped(stop)) => report.ending = Ending::Stopped(stop.clone()),
        (Ending::Finished, BatchEnding::Interrupted | BatchEnding::Submitted) => {
            report.ending = Ending::Interrupted
        }
        _ => {}
    }
}

struct Prepared {
    redis: Option<ratewise_redis::RedisStore>,
    db: PathBuf,
    via: Via,
    batch: BatchSettings,
    lock: crate::lock::DbLock,
    store: Arc<dyn Store>,
    imported: Imported,
    settings: Settings,
    layer: ratewise_tower::RetryLayer,
    out: PathBuf,
    partial: output::Partial,
}

/// What importing or checking the input found.
struct Imported {
    shape: Shape,
    bad_lines: u64,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A run's setup, before anything is sent: its config read, its pool
/// chosen, its store opened and locked, the input imported (or checked),
/// its key found, what the last run left recovered, and its layer built.
/// Each step is its own function below, in the order they run.
fn prepare(run: Run, observer: &dyn Observer) -> Result<Prepared, RunError> {
    let options = &run.options;
    let file_config = load_config(options, observer)?;
    let pool = choose_pool(&run, &file_config)?;
    let redis = open_redis(options, &file_config, observer)?;
    let (lock, store) = open_store(options, &file_config)?;
    let imported = import_or_sync(store.as_ref(), &options.input, options.strict, observer)?;
    let api_key = api_key_of(
        &run,
        &file_config,
        store.as_ref(),
        pool.as_ref(),
        imported.shape,
    )?;
    let mut settings = options
        .settings(&file_config, imported.shape, api_key)
        .map_err(|why| {
            if why.starts_with("upstream") {
                RunError::InvalidUpstream(why)
            } else {
                RunError::Config(why)
            }
        })?;
    let (pool_name, pool) = match pool {
        Some((name, built)) => (Some(name), Some(built)),
        None => (None, None),
    };
    settings.pool = pool_name;
    if let Some(level) = &options.priority {
        settings.priority = level.clone();
    }
    recover_last_run(store.as_ref(), options, settings.deadline, observer)?;
    let out = options.out_path();
    let partial =
        output::Partial::open(&output::partial_path(&out)).map_err(|source| RunError::Output {
            path: out.clone(),
            source,
        })?;
    let layer = options
        .shared_layer(
            &file_config,
            &settings,
            Arc::clone(&store),
            pool,
            redis.clone(),
        )
        .map_err(RunError::Config)?;
    // What the last run on this store learned of its keys.
    let recalled = crate::memory::recall(store.as_ref(), &layer)?;
    if recalled > 0 {
        observer.event(Event::Remembered(recalled));
    }
    if options.retry_failed && options.via == Via::Direct {
        // Sent again directly: pending before the queue starts.
        store.release_batch_failed()?;
    }
    let batch = batch_settings(options, imported.shape, &settings);
    Ok(Prepared {
        redis,
        db: options.db_path(),
        via: options.via,
        batch,
        lock,
        store,
        imported,
        settings,
        layer,
        out,
        partial,
    })
}

/// `--redis`: the store every process on the key shares, made from the
/// run's admission settings, before anything is sent. A URL that is not a
/// Redis URL is an error; a Redis that does not answer is not (told as
/// [`Event::RedisUnavailable`]: the run paces at its share of the limits
/// until it answers). Made as `ratewise proxy --redis` makes it
/// ([`ratewise_redis::RedisStore::open`]).
fn open_redis(
    options: &Options,
    file_config: &FileConfig,
    observer: &dyn Observer,
) -> Result<Option<ratewise_redis::RedisStore>, RunError> {
    let Some(url) = &options.redis else {
        return Ok(None);
    };
    let mut config = ratewise_redis::Config::default();
    config.admission = options.admission(file_config).map_err(RunError::Config)?;
    // The setup runs on a blocking thread of the caller's runtime.
    let handle = tokio::runtime::Handle::try_current()
        .map_err(|_| RunError::Redis(ratewise_redis::Error::NoRuntime))?;
    let (store, unanswered) = handle
        .block_on(ratewise_redis::RedisStore::open(&url.0, config))
        .map_err(RunError::Redis)?;
    if let Some(why) = unanswered {
        observer.event(Event::RedisUnavailable(why.to_string()));
    }
    Ok(Some(store))
}

/// The `--config` file (none: the defaults), its warnings told.
fn load_config(options: &Options, observer: &dyn Observer) -> Result<FileConfig, RunError> {
    let file_config = match &options.config {
        Some(path) => FileConfig::load(path).map_err(RunError::Config)?,
        None => FileConfig::default(),
    };
    for warning in file_config.warnings() {
        observer.event(Event::ConfigWarning(warning));
    }
    Ok(file_config)
}

/// The pool, when the config has one: chosen, checked against what it
/// replaces and built (its keys read) before a store is made.
fn choose_pool(
    run: &Run,
    file_config: &FileConfig,
) -> Result<Option<(String, ratewise_tower::pool::Pool)>, RunError> {
    let options = &run.options;
    let Some(spec) = crate::pool::select(&file_config.pools, options.pool.as_deref())? else {
        return Ok(None);
    };
    let name = spec.name.clone();
    if let Some(setting) = pool_conflict(options, file_config, run.api_key.is_some()) {
        return Err(PoolError::Conflict {
            pool: name,
            setting,
        }
        .into());
    }
    if options.via != Via::Direct {
        return Err(PoolError::Via {
            pool: name,
            via: options.via,
        }
        .into());
    }
    let env = |var: &str| run.env.as_ref().and_then(|env| env(var));
    let built = spec.build(env).map_err(PoolError::Spec)?;
    Ok(Some((name, built)))
}

/// The first setting given that a pool replaces (each member has its own
/// upstream and key), in words; `key_given`: a key was given to the run.
fn pool_conflict(
    options: &Options,
    file_config: &FileConfig,
    key_given: bool,
) -> Option<&'static str> {
    [
        (options.upstream.is_some(), "--upstream"),
        (file_config.upstream.is_some(), "upstream in --config"),
        (file_config.api_key.is_some(), "api_key in --config"),
        (key_given, "an API key given to the run"),
    ]
    .into_iter()
    .find_map(|(given, setting)| given.then_some(setting))
}

/// Locks and opens the run's store. An unreadable input is told first,
/// before a store is made beside it.
fn open_store(
    options: &Options,
    file_config: &FileConfig,
) -> Result<(crate::lock::DbLock, Arc<dyn Store>), RunError> {
    std::fs::File::open(&options.input).map_err(|source| RunError::Unreadable {
        path: options.input.clone(),
        source,
    })?;
    let db = options.db_path();
    let lock = crate::lock::lock(&db).map_err(|e| match e {
        crate::lock::LockError::Held(holder) => RunError::Locked {
            store: db.clone(),
            holder,
        },
        crate::lock::LockError::Io(source) => RunError::Lock {
            store: db.clone(),
            source,
        },
    })?;
    let sync = file_config.synchronous().map_err(RunError::Config)?;
    let store: Arc<dyn Store> =
        Arc::new(
            SqliteStore::open(&db, sync).map_err(|source| RunError::OpenStore {
                store: db.clone(),
                source,
            })?,
        );
    Ok((lock, store))
}

/// The run's API key. A pooled run has none of its own (the members' keys
/// are their routes'): its members must speak the input's format, and no
/// batch an earlier run left open may wait to be polled with the key that
/// made it. Else the key given to the run, the config's, or the
/// variable of the input's format, in that order; checked for a header.
fn api_key_of(
    run: &Run,
    file_config: &FileConfig,
    store: &dyn Store,
    pool: Option<&(String, ratewise_tower::pool::Pool)>,
    shape: Shape,
) -> Result<String, RunError> {
    if let Some((name, built)) = pool {
        crate::pool::check_dialect(name, built, shape)?;
        if store.batches()?.iter().any(crate::store::BatchRow::is_open) {
            return Err(PoolError::OpenBatches { pool: name.clone() }.into());
        }
        return Ok(String::new());
    }
    let key_var = shape.key_variable();
    let api_key = run
        .api_key
        .clone()
        .or_else(|| file_config.api_key.clone())
        .or_else(|| run.env.as_ref().and_then(|env| env(key_var)))
        .filter(|k| !k.trim().is_empty())
        .ok_or(RunError::NoKey { variable: key_var })?;
    crate::queue::check_api_key(shape, &api_key).map_err(RunError::InvalidKey)?;
    Ok(api_key)
}

/// What the last run left, recovered and told: sends the grace cut held
/// as unknown; with the options, stopped jobs resumed and unknown ones
/// released; expired jobs revived when their `deadline` (or
/// `--retry-expired`) allows.
fn recover_last_run(
    store: &dyn Store,
    options: &Options,
    deadline: Duration,
    observer: &dyn Observer,
) -> Result<(), RunError> {
    let cut = store.hold_cut()?;
    if cut > 0 {
        observer.event(Event::HeldFromLastRun(cut));
    }
    // Jobs an earlier version failed when no byte reached the upstream.
    store.revive_unreached()?;
    if options.resume_stopped {
        let n = store.resume_stopped()?;
        if n > 0 {
            observer.event(Event::Resumed(n));
        }
    }
    if options.retry_unknown {
        let n = store.release_unknown()?;
        if n > 0 {
            observer.event(Event::Released(n));
        }
    }
    let deadline_ms = i64::try_from(deadline.as_millis()).unwrap_or(i64::MAX);
    let n = store.revive_expired(deadline_ms, now_ms(), options.retry_expired)?;
    if n > 0 {
        observer.event(Event::Revived(n));
    }
    Ok(())
}

/// The batch path's settings, from the run's: its upstream, key and
/// budget; failed items sent again through batches unless the run is
/// direct (then they go through the queue).
fn batch_settings(options: &Options, shape: Shape, settings: &Settings) -> BatchSettings {
    let mut batch = BatchSettings::new(shape, settings.api_key.clone());
    batch.upstream = settings.upstream.clone();
    batch.budget_tokens = settings.budget_tokens;
    batch.retry_failed = options.retry_failed && options.via != Via::Direct;
    if let Some(every) = options.batch_poll {
        batch.poll_interval = every;
    }
    batch
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

fn new_job(r: input::Request, first_seen_ms: i64) -> NewJob {
    NewJob {
        line: r.line,
        input_estimate: r.input_estimate(),
        max_tokens: r.output_reserve(),
        custom_id: r.custom_id,
        path: r.path,
        model: r.model,
        body: r.body,
        first_seen_ms,
    }
}

fn open_lines(input: &Path) -> Result<Lines<BufReader<std::fs::File>>, RunError> {
    let file = std::fs::File::open(input).map_err(|source| RunError::Unreadable {
        path: input.to_owned(),
        source,
    })?;
    Ok(Lines::new(BufReader::with_capacity(1 << 20, file)))
}

/// Reads the input into the store (first run); on a re-run, checks it is
/// the one the store has, or takes what changed in it.
fn import_or_sync(
    store: &dyn Store,
    input: &Path,
    strict: bool,
    observer: &dyn Observer,
) -> Result<Imported, RunError> {
    let cant_read = |source| RunError::Unreadable {
        path: input.to_owned(),
        source,
    };
    if store.meta("imported")?.is_some() {
        let shape = store
            .meta("shape")?
            .and_then(|s| Shape::parse(&s))
            .ok_or_else(|| RunError::Config("the store names no input shape".into()))?;
        let (sha, _) = fingerprint_file(input).map_err(cant_read)?;
        if store.meta("input_sha256")?.as_deref() != Some(sha.as_str()) {
            return take_edits(store, input, strict, observer, shape);
        }
        let bad = store.list_bad_lines()?;
        for (line, why) in &bad {
            observer.event(Event::BadLine {
                line: *line,
                why: why.clone(),
            });
        }
        return Ok(Imported {
            shape,
            bad_lines: bad.len() as u64,
        });
    }
    store.reset()?;
    let mut lines = open_lines(input)?;
    let first_seen_ms = now_ms();
    let mut group: Vec<NewJob> = Vec::new();
    let mut group_bytes = 0usize;
    let mut bad: Vec<(u64, String)> = Vec::new();
    let mut bad_total = 0u64;
    let flush_bad = |bad: &mut Vec<(u64, String)>, total: &mut u64| -> Result<(), RunError> {
        for (line, why) in bad.iter() {
            observer.event(Event::BadLine {
                line: *line,
                why: why.clone(),
            });
            *total += 1;
        }
        Ok(store.bad_lines(std::mem::take(bad))?)
    };
    let flush_jobs = |group: &mut Vec<NewJob>,
                      bad: &mut Vec<(u64, String)>|
     -> Result<(), RunError> {
        let jobs = std::mem::take(group);
        let ids: Vec<(u64, String)> = jobs.iter().map(|j| (j.line, j.custom_id.clone())).collect();
        let added = store.import(jobs)?;
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
                group.push(new_job(r, first_seen_ms));
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
    let Some(shape) = lines.shape() else {
        return Err(RunError::NoValidLine {
            path: input.to_owned(),
        });
    };
    if strict && bad_total > 0 {
        return Err(RunError::Strict {
            bad_lines: bad_total,
            path: input.to_owned(),
        });
    }
    let (sha, len) = lines.fingerprint();
    for (k, v) in [
        ("shape", shape.as_str().to_owned()),
        ("input_sha256", sha),
        ("input_bytes", len.to_string()),
        ("imported", "1".to_owned()),
    ] {
        store.set_meta(k, &v)?;
    }
    Ok(Imported {
        shape,
        bad_lines: bad_total,
    })
}

/// An input edited since the store was made: first read whole to find
/// lines whose job was sent or ended and whose request changed (then
/// nothing changes: refused, naming them) — a job the provider refused
/// (`failed` on a 4xx answer, nothing generated) is not one of them;
/// else read again and kept: new `custom_id`s added, edited unsent or
/// refused ones replaced, unchanged ones kept as
/// they are, unsent jobs whose line is gone removed. Bad lines are the new
/// file's.
fn take_edits(
    store: &dyn Store,
    input: &Path,
    strict: bool,
    observer: &dyn Observer,
    shape: Shape,
) -> Result<Imported, RunError> {
    let cant_read = |source| RunError::Unreadable {
        path: input.to_owned(),
        source,
    };
    let now = now_ms();
    // Pass 1: compare, change nothing.
    let mut lines = open_lines(input)?;
    let mut seen: HashSet<String> = HashSet::new();
    let mut refused: Vec<(u64, String, State, u64)> = Vec::new();
    let mut refused_total = 0u64;
    let (mut added, mut edited, mut bad_total) = (0u64, 0u64, 0u64);
    let mut group: Vec<NewJob> = Vec::new();
    let mut compare = |group: &mut Vec<NewJob>| -> Result<(), RunError> {
        let jobs = std::mem::take(group);
        for (job, c) in jobs.iter().zip(store.compare(&jobs)?) {
            match c {
                Compared::New => added += 1,
                Compared::Edited => edited += 1,
                Compared::Same => {}
                Compared::Refused { state, sends } => {
                    refused_total += 1;
                    if refused.len() < REFUSED_SHOWN {
                        refused.push((job.line, job.custom_id.clone(), state, sends));
                    }
                }
            }
        }
        Ok(())
    };
    while let Some(line) = lines.next_line().map_err(cant_read)? {
        match line {
            Line::Request(r) if seen.insert(r.custom_id.clone()) => {
                group.push(new_job(r, now));
                if group.len() >= IMPORT_GROUP {
                    compare(&mut group)?;
                }
            }
            Line::Request(_) | Line::Bad { .. } => bad_total += 1,
        }
    }
    compare(&mut group)?;
    if let Some(now_shape) = lines.shape() {
        if now_shape != shape {
            return Err(RunError::OtherFormat {
                store: shape.as_str(),
                input: now_shape.as_str(),
            });
        }
    }
    if refused_total > 0 {
        return Err(RunError::ChangedAfterSend {
            lines: refused,
            total: refused_total,
        });
    }
    if strict && bad_total > 0 {
        return Err(RunError::Strict {
            bad_lines: bad_total,
            path: input.to_owned(),
        });
    }
    // Pass 2: keep.
    let generation = store
        .meta("input_gen")?
        .and_then(|g| g.parse::<i64>().ok())
        .unwrap_or(0)
        + 1;
    store.clear_bad_lines()?;
    let mut lines = open_lines(input)?;
    let mut seen: HashSet<String> = HashSet::new();
    let mut group: Vec<NewJob> = Vec::new();
    let mut bad: Vec<(u64, String)> = Vec::new();
    while let Some(line) = lines.next_line().map_err(cant_read)? {
        match line {
            Line::Request(r) => {
                if seen.insert(r.custom_id.clone()) {
                    group.push(new_job(r, now));
                } else {
                    bad.push((r.line, input::BadLine::Duplicate(r.custom_id).to_string()));
                }
            }
            Line::Bad { line, why } => bad.push((line, why.to_string())),
        }
        if group.len() >= IMPORT_GROUP {
            store.sync(std::mem::take(&mut group), generation)?;
        }
    }
    store.sync(group, generation)?;
    for (line, why) in &bad {
        observer.event(Event::BadLine {
            line: *line,
            why: why.clone(),
        });
    }
    store.bad_lines(bad)?;
    let withdrawn = store.withdraw_missing(generation)?;
    let (sha, len) = lines.fingerprint();
    for (k, v) in [
        ("input_sha256", sha),
        ("input_bytes", len.to_string()),
        ("input_gen", generation.to_string()),
    ] {
        store.set_meta(k, &v)?;
    }
    observer.event(Event::InputEdited {
        added,
        edited,
        withdrawn,
    });
    Ok(Imported {
        shape,
        bad_lines: bad_total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_names_the_first_setting_it_replaces() {
        let run = Run::new("in.jsonl");
        let mut file = FileConfig::default();
        assert_eq!(pool_conflict(run.options(), &file, false), None);
        assert_eq!(
            pool_conflict(run.options(), &file, true),
            Some("an API key given to the run")
        );
        file.api_key = Some("k".into());
        assert_eq!(
            pool_conflict(run.options(), &file, true),
            Some("api_key in --config")
        );
        let run = run.upstream("http://127.0.0.1:1");
        assert_eq!(
            pool_conflict(run.options(), &file, true),
            Some("--upstream")
        );
    }

    #[test]
    fn batches_take_the_run_s_upstream_key_and_budget() {
        let mut settings = Settings::new(Shape::OpenAi, "sk-test");
        settings.upstream = "http://127.0.0.1:9".into();
        settings.budget_tokens = Some(1000);
        let run = Run::new("in.jsonl")
            .via(Via::Auto)
            .retry_failed(true)
            .batch_poll(Duration::from_secs(5));
        let b = batch_settings(run.options(), Shape::OpenAi, &settings);
        assert_eq!(b.upstream, "http://127.0.0.1:9");
        assert_eq!(b.api_key, "sk-test");
        assert_eq!(b.budget_tokens, Some(1000));
        assert_eq!(b.poll_interval, Duration::from_secs(5));
        assert!(b.retry_failed);
        // Direct: failed items go back through the queue, not batches.
        let run = Run::new("in.jsonl").retry_failed(true);
        assert!(!batch_settings(run.options(), Shape::OpenAi, &settings).retry_failed);
    }
}
