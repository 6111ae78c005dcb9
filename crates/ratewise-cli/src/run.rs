//! `ratewise run`: a file of requests in, every result out, nothing paid
//! twice (the durable queue of `ratewise-run`).

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ratewise_run::batch::{BatchStatus, Via};
use ratewise_run::progress::{cause_in_words, Event, Observer, Status};
use ratewise_run::{Ending, Options, Run};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// `--progress`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ProgressArg {
    /// A bar on stderr when it is a terminal.
    Auto,
    /// One JSON object per second on stdout, then a summary.
    Json,
    /// Only the closing lines on stderr.
    Off,
}

/// The run's flags (keep these names: scripts depend on them).
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct RunArgs {
    /// The requests: an OpenAI Batch API file or Anthropic Message Batches
    /// requests, one JSON object per line.
    input: PathBuf,
    /// Where the results go (default: INPUT.results.jsonl): a line per
    /// job, unfinished ones included (`ratewise.outcome` "pending").
    #[arg(long)]
    out: Option<PathBuf>,
    /// The provider's base URL, with or without a trailing /v1 (default:
    /// `https://api.openai.com` or `https://api.anthropic.com`, by the
    /// input's shape). Conflicts with a pool (its members name theirs).
    #[arg(long)]
    upstream: Option<String>,
    /// The store (default: INPUT.ratewise.db). Re-running with the same
    /// store resumes.
    #[arg(long)]
    db: Option<PathBuf>,
    /// A TOML file: upstream, api_key, window, deadline, budget_tokens,
    /// grace_s, synchronous, `[limits]`, `[[pools]]` (see below).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Which `[[pools]]` table of --config the run spends (needed when it
    /// has several; one is used without it).
    #[arg(long, value_name = "NAME")]
    pool: Option<String>,
    /// Share each key's limits (buckets, stops, what was learned) with
    /// `ratewise proxy --redis` and other runs through this Redis
    /// (`redis://host:port/db`; the URL is never printed).
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// The level of the run's jobs in their key's queue: beside a proxy
    /// on the same key (across processes with --redis), its
    /// `interactive` and `default` calls go first and the run keeps its
    /// minimum share [default: bulk]
    #[arg(long, value_name = "LEVEL")]
    priority: Option<String>,
    /// Input + output tokens the store may spend, cumulative across every
    /// run of the same store (spent plus the worst case of what is in
    /// flight never passes it).
    #[arg(long, value_name = "N")]
    budget_tokens: Option<u64>,
    /// Each job's deadline, from when it was first seen (default 24h). A
    /// later deadline on a re-run revives jobs the earlier one expired.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    deadline: Option<std::time::Duration>,
    /// On SIGTERM or SIGINT nothing more is sent at once; this is how long
    /// sends already on the wire get (default 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    grace: Option<std::time::Duration>,
    /// Progress: a bar on a terminal, JSON lines on stdout, or nothing.
    #[arg(long, value_enum, default_value = "auto")]
    progress: ProgressArg,
    /// Clear a kept stop (spend cap, billing, budget) and send again.
    #[arg(long)]
    resume_stopped: bool,
    /// Send each job held as unknown once more (it may be paid twice).
    #[arg(long)]
    retry_unknown: bool,
    /// Send each expired job again, its deadline counted from now.
    #[arg(long)]
    retry_expired: bool,
    /// Refuse the whole file when any line is bad.
    #[arg(long)]
    strict: bool,
    /// Which path the jobs take: `direct` (one request each, paced),
    /// `batch` (the provider's batch API: half the price, results within
    /// its 24 h window), or `auto` (the batch API for the jobs whose
    /// deadline leaves room for its window, the rest directly).
    #[arg(long, value_name = "direct|batch|auto", default_value = "direct", value_parser = parse_via)]
    via: Via,
    /// How often a submitted batch is polled (default 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    batch_poll: Option<std::time::Duration>,
    /// Send again the items a batch ended `errored` or `expired` (never
    /// without it): in a new batch, or directly with `--via direct`.
    #[arg(long)]
    retry_failed: bool,
}

fn parse_via(text: &str) -> Result<Via, String> {
    text.parse::<Via>().map_err(|e| e.to_string())
}

const AFTER_HELP: &str = "\
--config FILE (TOML, every key optional):
  upstream = \"https://api.openai.com\"  the base URL (a trailing /v1 is fine)
  api_key = \"sk-...\"                   else OPENAI_API_KEY / ANTHROPIC_API_KEY
  window = 64                          most jobs handed to the rate-limit layer at once;
                                       the rest wait in the store (bounds memory and what
                                       a signal finds in flight, not the pace)
  deadline = \"24h\"                     each job's, from when it was first seen
  budget_tokens = 5000000              input + output tokens, cumulative over every run
                                       of the same store
  grace_s = 30                         on a signal, for sends on the wire
  synchronous = \"normal\"               \"full\": survive a power loss too
  [limits]                             per minute; each one not given is learned from
  requests_per_minute = 500            the provider's headers (or its 429s)
  input_tokens_per_minute = 200000
  output_tokens_per_minute = 40000
  tokens_per_minute = 200000           OpenAI's combined TPM
                                       (with a pool: each member's key's limits)
  [[pools]]                            several keys spent as one (one pool is used: the
  name = \"claude\"                      only one, or the one --pool NAME names)
  provider = \"anthropic\"               every member's, unless it says its own
  [[pools.members]]
  upstream = \"https://api.anthropic.com\"
  key_env = \"ANTHROPIC_KEY_MAIN\"       the variable holding its key (never the key)
  weight = 70                          optional (default 1); also provider, api_version
  [[pools.members]]                    (Azure), models = { \"from\" = \"to\" }
  upstream = \"https://api.anthropic.com\"
  key_env = \"ANTHROPIC_KEY_BACKUP\"
  weight = 30

With a pool each attempt goes to the member that can take it soonest (weights break ties),
with that member's URL and key; each result's attempts name their member (host#fingerprint,
never the key). A spend cap, billing or auth answer stops that member, not the run; the run
stops when every member is stopped, naming each one's cause. --upstream, and upstream or
api_key in --config, conflict with a pool (OPENAI_API_KEY / ANTHROPIC_API_KEY are not read);
so do --via batch and --via auto (the batch APIs are per key).

An input edited after a run: unchanged lines keep their state and are never sent again;
new and edited lines run (a job the provider refused with a 4xx runs again once its line is
fixed); a line whose job was otherwise sent or ended and whose request changed is refused,
by its line number.

Exit codes (the first that applies): 0 all done; 2 usage or input error \
(bad lines included); 3 the store is locked by another run; 4 stopped (spend cap, billing, auth, \
budget); 5 interrupted (a signal, the store could not be written, or the upstream could not \
be reached: its jobs stay pending); 6 some held_unknown; \
7 some failed or expired.";

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    ratewise_run::duration::parse(text)
        .ok_or_else(|| format!("{text:?} is not a duration (6h, 30m, 90s, 1h30m)"))
}

fn say(message: impl std::fmt::Display) {
    eprintln!("ratewise run: {message}");
}

/// Bad lines printed one by one; past these, a count.
const BAD_LINES_SHOWN: u64 = 50;

/// Prints the run's events: bad lines and recoveries on stderr, progress
/// as a bar or JSON lines.
struct Printer {
    input: PathBuf,
    /// Each batch's last status word: a line on stderr when it changes.
    batches: Mutex<std::collections::HashMap<String, String>>,
    progress: Mutex<Progress>,
    bad_lines: AtomicU64,
}

impl Observer for Printer {
    fn event(&self, event: Event) {
        match event {
            Event::BadLine { line, why } => {
                let before = self.bad_lines.fetch_add(1, Ordering::Relaxed);
                if before < BAD_LINES_SHOWN {
                    say(format!("{}:{line}: {why}", self.input.display()));
                }
            }
            Event::HeldFromLastRun(n) => say(format!(
                "{n} job(s) were being sent when the last run ended: held as unknown (never sent again unless --retry-unknown)"
            )),
            Event::Resumed(n) => say(format!("--resume-stopped: {n} stopped job(s) pending again")),
            Event::Released(n) => say(format!(
                "--retry-unknown: {n} held job(s) will be sent once more; each may be paid twice (its worst case stays charged, and its record says so)"
            )),
            Event::Remembered(n) => say(format!(
                "starting from what the last run on this store learned of its key ({n} model class(es): limits, capacities, estimates)"
            )),
            Event::Revived(n) => say(format!(
                "{n} expired job(s) pending again (--retry-expired, or a deadline later than the one that expired them)"
            )),
            Event::InputEdited {
                added,
                edited,
                withdrawn,
            } => say(format!(
                "{} changed since the last run: {added} new line(s), {edited} edited before their send, {withdrawn} unsent job(s) whose line is gone removed; unchanged lines keep their state",
                self.input.display()
            )),
            Event::ConfigWarning(w) => say(format!("warning: {w}")),
            Event::RedisUnavailable(why) => say(format!(
                "warning: --redis: Redis did not answer ({why}): this run paces on its share of the key's limits until it does, then shares them again"
            )),
            Event::Progress(status) => {
                if let Ok(mut p) = self.progress.lock() {
                    p.tick(&status);
                }
            }
            Event::Batch(status) => {
                let changed = self.batches.lock().is_ok_and(|mut seen| {
                    seen.insert(status.batch_id.clone(), status.status.clone())
                        .as_deref()
                        != Some(status.status.as_str())
                });
                if let Ok(mut p) = self.progress.lock() {
                    p.batch(&status, changed);
                }
            }
            _ => {}
        }
    }
}

/// Runs the queue; its exit code.
pub fn run(args: &RunArgs) -> u8 {
    let mut options = Options::new(&args.input);
    options.out = args.out.clone();
    options.upstream = args.upstream.clone();
    options.db = args.db.clone();
    options.config = args.config.clone();
    options.budget_tokens = args.budget_tokens;
    options.deadline = args.deadline;
    options.grace = args.grace;
    options.resume_stopped = args.resume_stopped;
    options.retry_unknown = args.retry_unknown;
    options.retry_expired = args.retry_expired;
    options.strict = args.strict;
    options.via = args.via;
    options.batch_poll = args.batch_poll;
    options.retry_failed = args.retry_failed;
    options.pool = args.pool.clone();
    options.redis = args.redis.clone().map(ratewise_run::RedisUrl);
    options.priority = args.priority.clone();
    let progress = match args.progress {
        ProgressArg::Auto => Progress::auto(),
        ProgressArg::Json => Progress::Json,
        ProgressArg::Off => Progress::Off,
    };
    let printer = Arc::new(Printer {
        input: args.input.clone(),
        batches: Mutex::new(std::collections::HashMap::new()),
        progress: Mutex::new(progress),
        bad_lines: AtomicU64::new(0),
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Store calls run on blocking threads; the writer groups whatever
        // they bring, so a few dozen are plenty, and each costs a stack.
        .max_blocking_threads(32)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            say(format!("cannot start the runtime: {e}"));
            return ratewise_run::EXIT_INTERRUPTED;
        }
    };
    let run = Run::from_options(options).key_from(|var| std::env::var(var).ok());
    let observer: Arc<dyn Observer> = printer.clone();
    let result = runtime.block_on(async {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(signals(tx));
        run.execute(rx, observer).await
    });
    runtime.shutdown_background();
    let shown = printer.bad_lines.load(Ordering::Relaxed);
    if shown > BAD_LINES_SHOWN {
        say(format!("... {shown} bad lines in all"));
    }
    let finished = match result {
        Ok(f) => f,
        Err(e) => {
            say(&e);
            return e.exit_code();
        }
    };
    let report = &finished.report;
    match &report.ending {
        Ending::Stopped(stop) => say(format!(
            "stopped: {} ({}){}: {}; nothing more is sent until a re-run with --resume-stopped",
            cause_in_words(stop.cause),
            stop.cause,
            stop.custom_id
                .as_ref()
                .map(|id| format!(", on the answer to job {id}"))
                .unwrap_or_default(),
            stop.message
        )),
        Ending::Interrupted => say(format!(
            "interrupted: nothing more was sent after the signal; {} job(s) cut on the wire and held. Run the same command again to resume.",
            report.cut
        )),
        Ending::StoreFailed(why) => say(format!(
            "the store could not be written ({why}); nothing more was sent. Free the disk and run the same command again."
        )),
        Ending::Unreachable { upstream, cause } => say(format!(
            "the upstream {upstream} could not be reached ({cause}): no request reached it, and no job failed for it; nothing more was sent. Check --upstream (or upstream in --config) and run the same command again: the jobs are pending."
        )),
        Ending::Finished => {}
    }
    let c = &report.counts;
    say(format!(
        "{} done, {} failed, {} expired, {} held, {} stopped of {}; {} sends, {} answered 429; {} results in {}",
        c.done, c.failed, c.expired, c.held, c.stopped, c.total, report.sends, report.answered_429,
        finished.written, finished.out.display()
    ));
    if let Some(pool) = &finished.pool {
        say(format!("pool {:?}: {}", pool.name, pool.in_words()));
    }
    if let Some(b) = &finished.batches {
        say(format!(
            "batch API: {} batch(es) created, {} found again after a lost create call, {} ended here; {} job(s) held as unknown by a recovery{}",
            b.created.len(),
            b.recovered.len(),
            b.ended,
            b.held,
            if b.possibly_billed > 0 {
                format!(
                    "; up to {} tokens of cancelled batches may still be billed",
                    b.possibly_billed
                )
            } else {
                String::new()
            }
        ));
    }
    if let Some(line) = running_batches(&finished) {
        say(line);
    }
    if !finished.complete() {
        say(format!(
            "incomplete: {} job(s) not finished (their lines say \"pending\"); run the same command again to go on",
            finished.unfinished
        ));
    }
    let mut summary = finished.summary();
    summary["peak_rss_kb"] = peak_rss_kb().into();
    if let Ok(mut p) = printer.progress.lock() {
        p.finish(summary);
    }
    finished.exit_code()
}

/// The batches the run leaves running at the provider, and how to pick
/// them up: none when it leaves none.
fn running_batches(finished: &ratewise_run::Finished) -> Option<String> {
    let ids = &finished.running_batches;
    let unconfirmed = finished.batch_intents;
    if ids.is_empty() && unconfirmed == 0 {
        return None;
    }
    let mut line = format!(
        "{} batch(es) still running at the provider: {}",
        ids.len(),
        if ids.is_empty() {
            "none known by id".to_owned()
        } else {
            ids.join(", ")
        }
    );
    if unconfirmed > 0 {
        line.push_str(&format!(
            "; {unconfirmed} batch create call(s) whose answer never came (a batch may exist)"
        ));
    }
    line.push_str(&format!(
        ". The provider goes on with them (and bills them) whatever this process does; \
         run the same command again with the same store (--db {}) to pick up their results: \
         the re-run polls them and creates none of them again.",
        finished.db.display()
    ));
    Some(line)
}

/// The process's peak resident memory, in KiB (Linux; `None` elsewhere).
fn peak_rss_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// SIGINT / SIGTERM: the first stops every new send at once (sends on the
/// wire get the grace); a second exits at once — the store stays
/// consistent (a job on the wire is `sending`, held on the next run).
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
                say("signal: no new sends from now; sends on the wire get the grace (a second signal exits at once)");
                let _ = tx.send(true);
            } else {
                say("second signal: exiting now; run the same command again to resume");
                std::process::exit(i32::from(ratewise_run::EXIT_INTERRUPTED));
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tx;
        std::future::pending::<()>().await;
    }
}

/// A batch's status in one line.
fn batch_line(b: &BatchStatus) -> String {
    let c = &b.counts;
    format!(
        "batch {}: {} ({} of {} succeeded, {} errored, {} expired, {} canceled{})",
        b.batch_id,
        b.status,
        c.succeeded,
        c.total,
        c.errored,
        c.expired,
        c.canceled,
        b.eta
            .map(|d| format!("; eta {}s", d.as_secs()))
            .unwrap_or_default()
    )
}

/// Where progress goes (`--progress`).
enum Progress {
    /// Nothing.
    Off,
    /// One JSON object per line on stdout.
    Json,
    /// indicatif's bar on stderr.
    Bar(ProgressBar),
}

impl Progress {
    /// `auto`: a bar when stderr is a terminal, else nothing.
    fn auto() -> Progress {
        let target = ProgressDrawTarget::stderr();
        if target.is_hidden() {
            return Progress::Off;
        }
        let bar = ProgressBar::with_draw_target(Some(0), target);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} done  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Progress::Bar(bar)
    }

    fn tick(&mut self, s: &Status) {
        match self {
            Progress::Off => {}
            Progress::Json => {
                let mut v = serde_json::to_value(s).unwrap_or_default();
                v["event"] = "progress".into();
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{v}");
                let _ = out.flush();
            }
            Progress::Bar(bar) => {
                bar.set_length(s.total);
                bar.set_position(s.done + s.failed + s.expired + s.held + s.stopped);
                bar.set_message(format!(
                    "{} failed, {} held, {} sends, {} × 429, eta {}{}",
                    s.failed,
                    s.held,
                    s.sends,
                    s.answered_429,
                    s.eta_s.map_or("?".into(), |e| format!("{e}s")),
                    s.binding
                        .map(|b| format!(" ({b} bind)"))
                        .unwrap_or_default(),
                ));
            }
        }
    }

    /// A batch polled: a JSON line each poll; otherwise a line on stderr
    /// when its status `changed`.
    fn batch(&mut self, b: &BatchStatus, changed: bool) {
        let c = &b.counts;
        match self {
            Progress::Json => {
                let v = serde_json::json!({
                    "event": "batch", "batch_id": b.batch_id, "status": b.status,
                    "total": c.total, "succeeded": c.succeeded, "errored": c.errored,
                    "expired": c.expired, "canceled": c.canceled, "processing": c.processing,
                    "eta_s": b.eta.map(|d| d.as_secs()),
                });
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{v}");
                let _ = out.flush();
            }
            _ if !changed => {}
            Progress::Off => say(batch_line(b)),
            Progress::Bar(bar) => bar.println(format!("ratewise run: {}", batch_line(b))),
        }
    }

    fn finish(&mut self, summary: serde_json::Value) {
        match self {
            Progress::Off => {}
            Progress::Json => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{summary}");
                let _ = out.flush();
            }
            Progress::Bar(bar) => bar.finish_and_clear(),
        }
    }
}
