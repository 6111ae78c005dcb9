//! `--plot FILE.svg`: admitted requests and 429s per minute over time, one
//! panel per strategy, drawn as plain SVG polylines (no plotting crate).

use crate::metrics::Report;
use crate::provider::Verdict;
use std::fmt::Write;

const W: f64 = 760.0;
const PANEL_H: f64 = 150.0;
const LEFT: f64 = 60.0;
const TOP: f64 = 40.0;
const GAP: f64 = 40.0;

/// Per-bin counts of one report: (admitted, 429s), per minute.
fn series(r: &Report, bins: usize, bin_ms: u64) -> (Vec<f64>, Vec<f64>) {
    let mut ok = vec![0.0; bins];
    let mut limited = vec![0.0; bins];
    for s in &r.timeline {
        let i = ((s.t_ms / bin_ms.max(1)) as usize).min(bins - 1);
        match s.verdict {
            Verdict::Success => ok[i] += 1.0,
            Verdict::RateLimited | Verdict::SlowDown => limited[i] += 1.0,
            Verdict::Money => limited[i] += 1.0,
            _ => {}
        }
    }
    let per_min = 60_000.0 / bin_ms.max(1) as f64;
    for v in ok.iter_mut().chain(limited.iter_mut()) {
        *v *= per_min;
    }
    (ok, limited)
}

fn polyline(out: &mut String, ys: &[f64], y_max: f64, top: f64, colour: &str) {
    let n = ys.len().max(2) - 1;
    let mut pts = String::new();
    for (i, y) in ys.iter().enumerate() {
        let x = LEFT + (W - LEFT - 20.0) * i as f64 / n as f64;
        let yy = top + PANEL_H - PANEL_H * (y / y_max).min(1.0);
        let _ = write!(pts, "{x:.1},{yy:.1} ");
    }
    let _ = writeln!(
        out,
        r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/>"#,
        pts.trim_end()
    );
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The SVG document for `reports` of one scenario.
pub fn svg(scenario: &str, reports: &[Report]) -> String {
    let end_ms = reports
        .iter()
        .flat_map(|r| r.timeline.last().map(|s| s.t_ms))
        .max()
        .unwrap_or(0)
        .max(60_000);
    let bins = 120usize;
    let bin_ms = end_ms.div_ceil(bins as u64).max(1000);
    let bins = (end_ms / bin_ms + 1) as usize;
    let all: Vec<_> = reports.iter().map(|r| series(r, bins, bin_ms)).collect();
    // Scaled to the admitted rate (a 429 storm can be 50× larger and would
    // flatten it); 429 lines above the scale are clipped at the top.
    let y_max = (all
        .iter()
        .flat_map(|(a, _)| a.iter())
        .fold(1.0f64, |m, v| m.max(*v))
        * 2.0)
        .ceil();
    let h = TOP + reports.len() as f64 * (PANEL_H + GAP) + 20.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="20" font-size="14">{}: admitted (green) and 429s (red, clipped) per minute; x = {:.0} min</text>"#,
        esc(scenario),
        end_ms as f64 / 60_000.0
    );
    for (k, (r, (ok, limited))) in reports.iter().zip(&all).enumerate() {
        let top = TOP + k as f64 * (PANEL_H + GAP);
        let _ = writeln!(
            out,
            r##"<rect x="{LEFT}" y="{top}" width="{}" height="{PANEL_H}" fill="none" stroke="#ccc"/>"##,
            W - LEFT - 20.0
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}">{} — {} done, {} sends, {} 429s</text>"#,
            LEFT + 5.0,
            top - 6.0,
            esc(&r.strategy),
            r.jobs_done,
            r.sends,
            r.sends_429
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="end">{y_max}</text><text x="{}" y="{}" text-anchor="end">0</text>"#,
            LEFT - 5.0,
            top + 10.0,
            LEFT - 5.0,
            top + PANEL_H
        );
        polyline(&mut out, ok, y_max, top, "#2a9d3f");
        polyline(&mut out, limited, y_max, top, "#d62828");
    }
    out.push_str("</svg>\n");
    out
}
