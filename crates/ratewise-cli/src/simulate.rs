//! `ratewise simulate`: run a scenario with every client strategy side by
//! side, in virtual time (default) and print a table, JSON lines, or an
//! SVG plot. `--real` runs the `ratewise` strategy end to end as well (the
//! mock over loopback, the tower layer in front of a hyper-util client, on
//! a scaled clock) and prints both runs side by side with their agreement.

use clap::Args;
use ratewise_sim::{simulate, Report, Scenario, Strategy};
use std::io::{IsTerminal, Write};

/// Largest scenario file read, bytes.
const MAX_SCENARIO_BYTES: u64 = 1 << 20;

/// Arguments of `ratewise simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// A scenario file (JSON); without it, the embedded burst-mixed
    /// scenario. The shipped ones are in the source's
    /// crates/ratewise-sim/scenarios/, the tenants family (levels,
    /// weights, a flood, a lone flow, two processes: jobs with a level,
    /// flow and weight, ordered by the queue discipline) in its
    /// tenants/; `--print-scenario` writes the default out as a file to
    /// start from.
    #[arg(long, value_name = "FILE")]
    scenario: Option<String>,
    /// One strategy (ratewise, sdk-naive, backoff-only, rpm-only, oracle)
    /// or `all` (every one but the oracle: it reads the provider's true
    /// state, so it is the yardstick, not a client to choose).
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
    /// With --real: real seconds one provider minute lasts (smaller is
    /// faster and noisier). Default: 0.5, or slower where the scenario's
    /// provider bucket would span less than 100 ms of real time.
    #[arg(long, value_name = "SECS")]
    seconds_per_minute: Option<f64>,
    /// Check the ratewise targets (goodput ≥ 0.9 × the oracle's, 429
    /// share, sends per done job, no sends after a stop, no lost job, as
    /// many jobs done and no more sends per job than the others) and fail
    /// if one is missed. The oracle is simulated for it when not shown.
    /// A tenants scenario adds its own (per-level and per-flow waits, the
    /// flows' cost ratio, a level's minimum share, the limit used, every
    /// job done) and prints ratewise's figures and the oracle's.
    #[arg(long)]
    check: bool,
    /// Run the matrix of provider shapes (issue #47) instead of one
    /// scenario: the standard covering set (every pair of axis values in
    /// one cell at least), worst cells first; exits non-zero when a cell
    /// misses its targets.
    #[arg(long, conflicts_with_all = ["scenario", "real", "plot", "check", "cell"])]
    matrix: bool,
    /// One cell of the matrix as the scenario (its label, as `--matrix`
    /// prints it: `"dialect=anthropic says=exact ..."`), with `--seed`'s
    /// workload (default 1); every other option applies to it as to a
    /// scenario file (`--real` runs it end to end, `--print-scenario`
    /// writes it out as a scenario file).
    #[arg(long, value_name = "LABEL", conflicts_with = "scenario")]
    cell: Option<String>,
    /// Print the scenario (JSON, as a scenario file) and run nothing.
    #[arg(long)]
    print_scenario: bool,
    /// Print the mock provider's configuration for the scenario (JSON, as
    /// `ratewise-mock --config` reads it) and run nothing: its limits,
    /// buckets, headers, faults, latency and output lengths, in real time
    /// (a provider minute is a minute), so the scenario (or a `--cell`)
    /// runs black-box through `ratewise proxy` (bench/proxy_sdk.sh).
    #[arg(long, conflicts_with = "print_scenario")]
    print_mock_config: bool,
    /// With --matrix: N cells drawn from the whole cross product instead
    /// of the standard set.
    #[arg(long, value_name = "N", requires = "matrix")]
    sample: Option<usize>,
    /// With --matrix: the seed of the standard set or the sample and of
    /// every cell's workload (default: a new one, printed); with --cell,
    /// the cell's workload (default 1).
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
}

fn load(args: &SimulateArgs) -> Result<Scenario, String> {
    if let Some(label) = &args.cell {
        let cell = ratewise_sim::matrix::Cell::parse(label)?;
        return Ok(cell.scenario(args.seed.unwrap_or(1)));
    }
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
        format!(
            "unknown strategy {name:?}: use ratewise, sdk-naive, backoff-only, rpm-only, oracle or all"
        )
    })
}

/// Runs the command.
pub fn run(args: &SimulateArgs) -> Result<(), String> {
    if args.matrix {
        return crate::matrix::run(args.sample, args.seed, args.json);
    }
    if args.seed.is_some() && args.cell.is_none() {
        return Err("--seed goes with --matrix or --cell".to_owned());
    }
    let scenario = load(args)?;
    if args.print_scenario {
        let text = serde_json::to_string_pretty(&scenario).map_err(|e| e.to_string())?;
        println!("{text}");
        return Ok(());
    }
    if args.print_mock_config {
        let text = serde_json::to_string_pretty(&mock_config_json(&scenario)?)
            .map_err(|e| e.to_string())?;
        println!("{text}");
        return Ok(());
    }
    let strategies = strategies(&args.strategy)?;
    if args.real {
        if scenario.has_workloads() {
            // The end-to-end run sends every job without its workload
            // (level, flow, weight): its queue would be a FIFO, and the
            // two runs would disagree by design.
            return Err(
                "--real does not carry a tenants scenario's workloads (levels, flows, weights) to the layer yet: run it without --real"
                    .to_owned(),
            );
        }
        return run_real(args, &scenario, &strategies);
    }
    let show_progress = !args.json && std::io::stderr().is_terminal();
    let mut reports = Vec::with_capacity(strategies.len());
    for s in &strategies {
        let bar = show_progress.then(|| progress_bar(s.name(), scenario.total_jobs()));
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
        write!(
            out,
            "{}",
            ratewise_sim::table::text_report(&scenario, &reports)
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

/// The mock's configuration for `scenario` at real time, as JSON
/// (`ratewise-mock --config`): [`Scenario::mock_config_real`] with a
/// provider minute lasting a minute. Not carried over: the latency of
/// error answers (`error_ms`: the mock answers errors at once) and `warm`
/// (the mock starts cold).
fn mock_config_json(scenario: &Scenario) -> Result<serde_json::Value, String> {
    serde_json::to_value(scenario.mock_config_real(60.0)).map_err(|e| e.to_string())
}

/// `--real`: the `ratewise` strategy in virtual time and end to end, side
/// by side, with the agreement of their headline figures.
fn run_real(
    args: &SimulateArgs,
    scenario: &Scenario,
    strategies: &[Strategy],
) -> Result<(), String> {
    if !strategies.contains(&Strategy::Ratewise) {
        return Err(
            "--real runs the ratewise strategy only (the others are simulated only): use \
             --strategy ratewise or all"
                .to_owned(),
        );
    }
    let show_progress = !args.json && std::io::stderr().is_terminal();
    let virt = simulate(scenario, Strategy::Ratewise, &mut |_, _| {});
    let options = ratewise_real::RealOptions {
        seconds_per_minute: args
            .seconds_per_minute
            .unwrap_or_else(|| ratewise_real::RealOptions::scale_for(scenario)),
        ..ratewise_real::RealOptions::default()
    };
    if !args.json {
        eprintln!(
            "running {} jobs end to end: mock on 127.0.0.1, RetryLayer over hyper-util, 1 provider minute = {} real s",
            scenario.total_jobs(), options.seconds_per_minute
        );
    }
    let bar = show_progress.then(|| progress_bar(ratewise_real::STRATEGY, scenario.total_jobs()));
    let mut tick = |done: u64, _total: u64| {
        if let Some(b) = &bar {
            b.set_position(done);
        }
    };
    let real = ratewise_real::run_real(scenario, &options, &mut tick).map_err(|e| e.to_string())?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let checks = ratewise_real::agree::compare(&virt, &real.report);
    let agrees = ratewise_real::agree::agrees(&checks);
    let reports = [virt, real.report.clone()];
    let mut out = std::io::stdout().lock();
    let w = |e: std::io::Error| e.to_string();
    if args.json {
        for r in &reports {
            let line = serde_json::to_string(r).map_err(|e| e.to_string())?;
            writeln!(out, "{line}").map_err(w)?;
        }
        let figures: Vec<serde_json::Value> = checks
            .iter()
            .map(|c| {
                serde_json::json!({
                    "figure": c.figure, "virtual": c.virtual_value, "real": c.real_value,
                    "tolerance": c.tolerance, "ok": c.ok,
                })
            })
            .collect();
        let summary = serde_json::json!({
            "agreement": figures,
            "agrees": agrees,
            "real_elapsed_s": real.real_elapsed.as_secs_f64(),
            "seconds_per_minute": options.seconds_per_minute,
            "unmatched_sends": real.unmatched_sends,
        });
        writeln!(out, "{summary}").map_err(w)?;
    } else {
        writeln!(
            out,
            "scenario {}: {} jobs; {}\n",
            scenario.name,
            scenario.total_jobs(),
            scenario.description
        )
        .map_err(w)?;
        write!(out, "{}", ratewise_sim::table::table(&reports)).map_err(w)?;
        writeln!(
            out,
            "\nratewise: virtual time vs end to end (1 provider minute = {} real s, took {:.1} s real)\n",
            options.seconds_per_minute,
            real.real_elapsed.as_secs_f64()
        )
        .map_err(w)?;
        write!(out, "{}", ratewise_real::agree::table(&checks)).map_err(w)?;
        writeln!(
            out,
            "\n{}; only the ratewise strategy has a real mode (run without --real to compare the others)",
            if agrees {
                "the simulation agrees with the real run within the stated tolerances"
            } else {
                "the simulation DISAGREES with the real run"
            }
        )
        .map_err(w)?;
        if real.unmatched_sends > 0 {
            writeln!(
                out,
                "warning: {} sends not matched between the layer and the mock",
                real.unmatched_sends
            )
            .map_err(w)?;
        }
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, ratewise_sim::plot::svg(&scenario.name, &reports))
            .map_err(|e| format!("{path}: {e}"))?;
        if !args.json {
            eprintln!("plot written to {path}");
        }
    }
    if args.check {
        // The targets hold for the simulation and for the real run.
        let mut missed = ratewise_sim::targets::check(scenario, &reports[..1]);
        let mut real_as_ratewise = reports[1].clone();
        real_as_ratewise.strategy = Strategy::Ratewise.name().to_owned();
        for m in ratewise_sim::targets::check(scenario, &[real_as_ratewise]) {
            missed.push(format!("real run: {m}"));
        }
        if !agrees {
            missed.push("the simulated and real runs disagree".to_owned());
        }
        if !missed.is_empty() {
            return Err(format!("targets missed: {}", missed.join("; ")));
        }
        eprintln!("targets: all met; the runs agree");
    }
    Ok(())
}

fn check(scenario: &Scenario, reports: &[Report]) -> Result<(), String> {
    if scenario.targets.is_some() {
        // A tenants scenario: the figures its targets read, ratewise's
        // and the oracle's (the same rules with the provider's true state).
        let oracle = match reports.iter().find(|r| r.strategy == "oracle") {
            Some(o) => o.clone(),
            None => simulate(scenario, Strategy::Oracle, &mut |_, _| {}),
        };
        let rw = reports.iter().find(|r| r.strategy == "ratewise");
        for r in rw.into_iter().chain([&oracle]) {
            for line in ratewise_sim::targets::tenant_figures(scenario, r) {
                eprintln!("{line}");
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `--check` on the tenants family: every scenario meets its targets
    /// (with the oracle simulated for it), and one whose claim is missed
    /// fails the check.
    #[test]
    fn check_holds_the_tenants_family_to_its_targets() {
        for (name, text) in ratewise_sim::TENANTS {
            let s = Scenario::from_json(text).unwrap();
            let reports: Vec<Report> = Strategy::ALL
                .iter()
                .map(|st| simulate(&s, *st, &mut |_, _| {}))
                .collect();
            assert_eq!(check(&s, &reports), Ok(()), "{name}");
        }
        let mut s = Scenario::from_json(ratewise_sim::TENANTS[0].1).unwrap();
        let t = s.targets.as_mut().unwrap();
        t.wait_p95_s.insert("interactive".to_owned(), 0.001);
        let rw = simulate(&s, Strategy::Ratewise, &mut |_, _| {});
        let err = check(&s, &[rw]).unwrap_err();
        assert!(err.contains("interactive wait p95"), "{err}");
    }
}
