//! The human table: one row per strategy.

use crate::metrics::Report;
use crate::scenario::Scenario;
use std::fmt::Write;

/// What `ratewise simulate` prints for `scenario`: a line naming it, the
/// [`table`] of `reports`, and a line with the binding dimension and the
/// least sends per done job the fault rate allows (from the first
/// report). The README's demo is this text for the default scenario.
pub fn text_report(scenario: &Scenario, reports: &[Report]) -> String {
    let mut out = format!(
        "scenario {}: {} jobs; {}\n\n",
        scenario.name,
        scenario.total_jobs(),
        scenario.description
    );
    out.push_str(&table(reports));
    if reports.iter().any(|r| !r.tenants.is_empty()) {
        out.push('\n');
        out.push_str(&tenants_table(reports));
    }
    if let Some(r0) = reports.first() {
        let _ = writeln!(
            out,
            "\nbinding dimension: {}; injected fault rate {:.3} -> at best {:.3} sends per done job; virtual time",
            r0.binding_dimension, r0.fault_rate, r0.min_sends_per_done_job
        );
    }
    out
}

/// Renders reports as an aligned text table (a Markdown table, so the
/// README can show it verbatim).
pub fn table(reports: &[Report]) -> String {
    let head = [
        "strategy",
        "done",
        "failed",
        "given up",
        "held",
        "stopped",
        "lost",
        "sends",
        "429s",
        "after stop",
        "sends/done",
        "min",
        "goodput",
        "makespan s",
        "p50 s",
        "p99 s",
    ];
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            vec![
                r.strategy.clone(),
                r.jobs_done.to_string(),
                r.jobs_failed.to_string(),
                r.jobs_given_up.to_string(),
                r.jobs_held_unknown.to_string(),
                r.jobs_stopped.to_string(),
                r.jobs_lost.to_string(),
                r.sends.to_string(),
                r.sends_429.to_string(),
                r.sends_after_stop.to_string(),
                format!("{:.3}", r.sends_per_done_job),
                format!("{:.3}", r.min_sends_per_done_job),
                format!("{:.3}", r.goodput_ratio),
                format!("{:.1}", r.makespan_s),
                format!("{:.1}", r.p50_latency_s),
                format!("{:.1}", r.p99_latency_s),
            ]
        })
        .collect();
    let mut width: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String]| {
        out.push('|');
        for (i, (c, w)) in cells.iter().zip(&width).enumerate() {
            if i == 0 {
                let _ = write!(out, " {c:<w$} |");
            } else {
                let _ = write!(out, " {c:>w$} |");
            }
        }
        out.push('\n');
    };
    line(&mut out, &head.map(str::to_owned));
    out.push('|');
    for (i, w) in width.iter().enumerate() {
        out.push_str(if i == 0 { ":" } else { "" });
        out.push_str(&"-".repeat(*w + 1));
        out.push_str(if i == 0 { "|" } else { ":|" });
    }
    out.push('\n');
    for row in &rows {
        line(&mut out, row);
    }
    out
}

/// A tenants scenario's rows (per flow, per level) of every report: jobs
/// done, wait p50/p95 and cost share (see [`crate::tenants`]).
pub fn tenants_table(reports: &[Report]) -> String {
    let mut out = String::from(
        "| strategy | tenant | level | done | wait p50 s | wait p95 s | cost share |\n|:-|:-|:-|-:|-:|-:|-:|\n",
    );
    for r in reports {
        for t in &r.tenants {
            let name = if t.kind == "level" {
                format!("(level {})", t.name)
            } else {
                t.name.clone()
            };
            let _ = writeln!(
                out,
                "| {} | {name} | {} | {}/{} | {:.2} | {:.2} | {:.3} |",
                r.strategy, t.level, t.done, t.jobs, t.wait_p50_s, t.wait_p95_s, t.cost_share
            );
        }
    }
    out
}
