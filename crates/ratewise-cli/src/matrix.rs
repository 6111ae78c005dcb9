//! `ratewise simulate --matrix`: the matrix of provider shapes
//! ([`ratewise_sim::matrix`]), worst cells first, failing when a cell
//! misses its targets.

use ratewise_sim::matrix::{self, Outcome};
use std::io::{IsTerminal, Write};
use std::time::Instant;

/// Runs the standard set (or a sample of `sample` cells) with `seed` (a
/// fresh one when absent) and prints every cell, worst first.
pub fn run(sample: Option<usize>, seed: Option<u64>, json: bool) -> Result<(), String> {
    let seed = seed.unwrap_or_else(|| fastrand::u64(..));
    let (cells, what) = match sample {
        Some(0) => return Err("--sample must be at least 1".to_owned()),
        Some(n) => (
            matrix::sample(n, seed),
            format!(
                "a sample of {n} of the {} cells of the cross product",
                matrix::cross_product_size()
            ),
        ),
        None => {
            let cells = matrix::standard(seed);
            let what = format!(
                "the standard matrix: {} cells covering every pair of axis values (of {} in the cross product)",
                cells.len(),
                matrix::cross_product_size()
            );
            (cells, what)
        }
    };
    let started = Instant::now();
    let bar = (!json && std::io::stderr().is_terminal()).then(|| {
        let b = indicatif::ProgressBar::new(cells.len() as u64);
        b.set_message("cells");
        b
    });
    let outcomes = matrix::run(&cells, seed, &mut |done, _| {
        if let Some(b) = &bar {
            b.set_position(done as u64);
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let mut out = std::io::stdout().lock();
    let w = |e: std::io::Error| e.to_string();
    if json {
        for o in &outcomes {
            let line = serde_json::json!({
                "cell": o.cell.label(),
                "seed": seed,
                "done": o.ratewise.jobs_done,
                "jobs": o.ratewise.jobs_total,
                "share_429": o.share_429(),
                "of_oracle": o.of_oracle(),
                "sends_per_done_job": o.ratewise.sends_per_done_job,
                "oracle_done": o.oracle.jobs_done,
                "misses": o.misses,
                "excused": o.excused,
            });
            writeln!(out, "{line}").map_err(w)?;
        }
    } else {
        writeln!(out, "{what}; seed {seed}; worst first").map_err(w)?;
        writeln!(
            out,
            "| cell | done | answered 429 | of the oracle | sends per done job | misses |"
        )
        .map_err(w)?;
        writeln!(out, "|---|---|---|---|---|---|").map_err(w)?;
        for o in &outcomes {
            writeln!(out, "{}", row(o)).map_err(w)?;
        }
    }
    let failed = outcomes
        .iter()
        .filter(|o| !o.misses.is_empty() && !o.excused)
        .count();
    let excused = outcomes.iter().filter(|o| o.excused).count();
    let summary = format!(
        "{} cells in {:.1} s (seed {seed}): {} held, {failed} missed, {excused} excused (the oracle itself leaves jobs undone)",
        outcomes.len(),
        started.elapsed().as_secs_f64(),
        outcomes.len() - failed - excused,
    );
    eprintln!("{summary}");
    if failed > 0 {
        return Err(format!(
            "{failed} of {} cells missed their targets (seed {seed}; `ratewise simulate --matrix --seed {seed}` runs them again)",
            outcomes.len()
        ));
    }
    Ok(())
}

fn row(o: &Outcome) -> String {
    let misses = if o.misses.is_empty() {
        "—".to_owned()
    } else if o.excused {
        format!("excused: {}", o.misses.join("; "))
    } else {
        o.misses.join("; ")
    };
    format!(
        "| {} | {}/{} | {:.1} % | {:.3} | {:.3} | {misses} |",
        o.cell.label(),
        o.ratewise.jobs_done,
        o.ratewise.jobs_total,
        o.share_429() * 100.0,
        o.of_oracle(),
        o.ratewise.sends_per_done_job,
    )
}
