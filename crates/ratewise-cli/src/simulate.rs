//! `ratewise simulate`: run a scenario with every client strategy side by
//! side, in virtual time (default) and print a table, JSON lines, or an
//! SVG plot.

use clap::Args;
use ratewise_sim::{simulate, Report, Scenario, Strategy};
use std::io::{IsTerminal, Write};

/// Largest scenario file read, bytes.
const MAX_SCENARIO_BYTES: u64 = 1 << 20;

/// Arguments of `ratewise simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// A scenario file (JSON); without it, the embedded burst-mixed scenario.
    #[arg(long, value_name = "FILE")]
    scenario: Option<String>,
    /// One strategy (ratewise, sdk-naive, backoff-only, rpm-only) or `all`.
    #[arg(long, default_value = "all", value_name = "NAME|all")]
    strategy: String,
    /// Print one JSON object per strategy, one per line.
    #[arg(long)]
    json: bool,
    /// Draw admitted requests and 429s over time per strategy into FILE.svg.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<String>,
    /// Run end to end: the mock over loopback and the tower layer in front
    /// of a hyper-util client, on a scaled clock.
    #[arg(long)]
    real: bool,
    /// Check the ratewise targets (goodput, 429 share, sends per done job,
    /// no sends after a stop, no lost job, beats the others) and fail if
    /// one is missed.
    #[arg(long)]
    check: bool,
}

fn load(args: &SimulateArgs) -> Result<Scenario, String> {
    let text = match &args.scenario {
        None => ratewise_sim::DEFAULT_SCENARIO.to_owned(),
        Some(path) => {
            let meta = std::fs::metadata(path).map_err(|e| format!("{path}: {e}"))?;
            if meta.len() > MAX_SCENARIO_BYTES {
                return Err(format!("{path}: larger than {MAX_SCENARIO_BYTES} bytes"));
            }
            std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?
        }
    };
    Scenario::from_json(&text).map_err(|e| e.to_string())
}

fn strategies(name: &str) -> Result<Vec<Strategy>, String> {
    if name == "all" {
        return Ok(Strategy::ALL.to_vec());
    }
    Strategy::from_name(name).map(|s| vec![s]).ok_or_else(|| {
        format!("unknown strategy {name:?}: use ratewise, sdk-naive, backoff-only, rpm-only or all")
    })
}

/// Runs the command.
pub fn run(args: &SimulateArgs) -> Result<(), String> {
    let scenario = load(args)?;
    let strategies = strategies(&args.strategy)?;
    if args.real {
        return Err(
            "--real is not available in this build: it needs the tower layer (ratewise-tower's \
             RetryLayer) in front of a hyper-util client against the mock on a scaled clock; the \
             virtual-time simulation (without --real) uses the same provider model and the same \
             classify/decide/admission path"
                .to_owned(),
        );
    }
    let show_progress = !args.json && std::io::stderr().is_terminal();
    let mut reports = Vec::with_capacity(strategies.len());
    for s in &strategies {
        let bar = show_progress.then(|| progress_bar(s.name(), scenario.jobs.count));
        let mut tick = |done: u64, _total: u64| {
            if let Some(b) = &bar {
                b.set_position(done);
            }
        };
        let report = simulate(&scenario, *s, &mut tick);
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        reports.push(report);
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        for r in &reports {
            let line = serde_json::to_string(r).map_err(|e| e.to_string())?;
            writeln!(out, "{line}").map_err(|e| e.to_string())?;
        }
    } else {
        writeln!(
            out,
            "scenario {}: {} jobs; {}\n",
            scenario.name, scenario.jobs.count, scenario.description
        )
        .map_err(|e| e.to_string())?;
        write!(out, "{}", ratewise_sim::table::table(&reports)).map_err(|e| e.to_string())?;
        let r0 = &reports[0];
        writeln!(
            out,
            "\nbinding dimension: {}; injected fault rate {:.3} -> at best {:.3} sends per done job; virtual time",
            r0.binding_dimension, r0.fault_rate, r0.min_sends_per_done_job
        )
        .map_err(|e| e.to_string())?;
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, ratewise_sim::plot::svg(&scenario.name, &reports))
            .map_err(|e| format!("{path}: {e}"))?;
        if !args.json {
            eprintln!("plot written to {path}");
        }
    }
    if args.check {
        check(&scenario, &reports)?;
    }
    Ok(())
}

fn check(scenario: &Scenario, reports: &[Report]) -> Result<(), String> {
    let missed = ratewise_sim::targets::check(scenario, reports);
    if missed.is_empty() {
        eprintln!("targets: all met");
        Ok(())
    } else {
        Err(format!("targets missed: {}", missed.join("; ")))
    }
}

fn progress_bar(name: &str, total: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    let style = indicatif::ProgressStyle::with_template("{prefix:>12} [{bar:40}] {pos}/{len} jobs")
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(name.to_owned());
    bar
}
